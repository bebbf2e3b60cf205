"""What a prompt asks for, read from the encoder's pooled embeddings: an edit (`allowed`), nothing a face
filter can do (`unrelated`: gibberish, chat, other tasks), or one of the refused categories of the prompt
policy (`impersonation`, `sexual`, `minors`, `hate`).

`IntentHead` is a small MLP over the standardised mean-pooled embedding (one hidden layer of 256): a
matrix product or two on a vector the prompt path computes anyway. One hidden layer, because on the
policy corpus a linear head refuses 0.33 of the validation's harmful prompts at the benign-first threshold
and this one 0.65 (engines/prompt/intent_fit.py has the figures); max-pooled token states beside the mean added
nothing. It is fitted per encoder by `livefuse calibrate` (engines/prompt/intent_fit.py)
from `data/policy/` and saved as a safetensors artifact beside the prompt head, with the thresholds chosen
on the validation split and the held-out figures in its metadata.

The engine only reads probabilities; what is refused, and what a refusal says, is the policy's business
(streamer/safety/filters.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np
import torch

INTENT_FORMAT = "livefuse-intent-head/1"
ALLOWED = "allowed"
UNRELATED = "unrelated"
REFUSED = ("impersonation", "sexual", "minors", "hate")
INTENTS: tuple[str, ...] = (ALLOWED, UNRELATED, *REFUSED)


class IntentHead(torch.nn.Module):
    """Pooled embedding [N, H] -> class probabilities [N, len(classes)]."""

    def __init__(self, hidden_size: int, classes: Sequence[str] = INTENTS, hidden: int = 256, dropout: float = 0.2) -> None:
        super().__init__()
        self.classes = tuple(classes)
        self.register_buffer("mean", torch.zeros(hidden_size))
        self.register_buffer("scale", torch.ones(hidden_size))
        self.net = torch.nn.Sequential(torch.nn.Dropout(dropout), torch.nn.Linear(hidden_size, hidden), torch.nn.GELU(),
                                       torch.nn.Dropout(dropout), torch.nn.Linear(hidden, len(self.classes)))

    def logits(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.net((pooled - self.mean) * self.scale)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(pooled), dim=-1)


@dataclass(frozen=True, slots=True)
class IntentMeta:
    encoder_id: str
    hidden_size: int
    classes: tuple[str, ...]
    # per class: the probability at or above which a row is read as that class (chosen on validation)
    thresholds: Mapping[str, float]
    corpus_sha256: str
    scores: Mapping[str, object] = field(default_factory=dict)   # validation and held-out figures of this fit
    head_hidden: int = 256

    def to_strings(self) -> dict[str, str]:
        return {"format": INTENT_FORMAT, "encoder_id": self.encoder_id, "hidden_size": str(self.hidden_size),
                "classes": json.dumps(list(self.classes)), "thresholds": json.dumps(dict(self.thresholds), sort_keys=True),
                "corpus_sha256": self.corpus_sha256, "scores": json.dumps(self.scores, sort_keys=True, ensure_ascii=False),
                "head_hidden": str(self.head_hidden)}

    @classmethod
    def from_strings(cls, meta: Mapping[str, str]) -> "IntentMeta":
        return cls(encoder_id=meta["encoder_id"], hidden_size=int(meta["hidden_size"]),
                   classes=tuple(json.loads(meta["classes"])),
                   thresholds=MappingProxyType({k: float(v) for k, v in json.loads(meta["thresholds"]).items()}),
                   corpus_sha256=meta["corpus_sha256"], scores=json.loads(meta.get("scores", "{}")),
                   head_hidden=int(meta.get("head_hidden", "256")))


@dataclass(frozen=True, slots=True)
class Intents:
    """The head's reading of some texts: probabilities [rows, classes] and the thresholds to read them by."""
    classes: tuple[str, ...]
    probs: np.ndarray
    thresholds: Mapping[str, float]

    def prob(self, row: int, cls: str) -> float:
        return float(self.probs[row, self.classes.index(cls)]) if cls in self.classes else 0.0

    def unrelated(self, row: int) -> bool:
        """Row `row` asks for nothing a face filter does."""
        return self.prob(row, UNRELATED) >= self.thresholds.get(UNRELATED, 1.01)

    def refused(self, row: int) -> tuple[str, float] | None:
        """The refused class this row reaches the threshold of (the most probable one), or None."""
        hits = [(c, self.prob(row, c)) for c in self.classes if c in REFUSED or c not in (ALLOWED, UNRELATED)]
        hits = [(c, p) for c, p in hits if p >= self.thresholds.get(c, 1.01)]
        return max(hits, key=lambda cp: cp[1]) if hits else None


class IntentModel:
    """An IntentHead with its meta: `read(pooled)` -> Intents."""

    def __init__(self, head: IntentHead, meta: IntentMeta) -> None:
        self.head, self.meta = head.eval(), meta

    def read(self, pooled: np.ndarray) -> Intents:
        with torch.inference_mode():
            probs = self.head(torch.from_numpy(np.asarray(pooled, np.float32))).numpy()
        return Intents(self.meta.classes, probs, self.meta.thresholds)


def save_intent_head(path: str | os.PathLike, head: IntentHead, meta: IntentMeta) -> Path:
    from engines.artifacts import write_artifact

    return write_artifact(path, {k: v.detach().float().contiguous().cpu() for k, v in head.state_dict().items()},
                          meta.to_strings())


def load_intent_head(path: str | os.PathLike) -> IntentModel:
    from engines.artifacts import CalibrationError, read_artifact

    raw, tensors = read_artifact(path, INTENT_FORMAT, "intent head")
    try:
        meta = IntentMeta.from_strings(raw)
        head = IntentHead(meta.hidden_size, meta.classes, hidden=meta.head_hidden)
        head.load_state_dict(tensors)
    except Exception as exc:   # missing keys, wrong shapes, bad metadata: one message
        raise CalibrationError(f"{path} is not a usable LiveFuse intent head ({exc}); "
                               f"make a new one: livefuse calibrate --encoder NAME") from exc
    return IntentModel(head, meta)


def intent_artifact_for(prompt_artifact: Path) -> Path:
    """The intent head lives beside its encoder's prompt head: prompt_head_e5.safetensors ->
    intent_head_e5.safetensors; <id>.safetensors -> <id>.intent.safetensors."""
    name = prompt_artifact.name
    if name.startswith("prompt_head_"):
        return prompt_artifact.with_name("intent_head_" + name[len("prompt_head_"):])
    return prompt_artifact.with_name(prompt_artifact.stem + ".intent.safetensors")
