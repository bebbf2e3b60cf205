"""A prompt's one reading (`Condition`) and the model that makes it (`PromptModel`: encoder, projector and
edit head, with the intent head when loaded), checked against each other when loaded.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import torch

from engines.prompt import glossary as zh_glossary
from engines.artifacts import ASSETS, CalibrationError
from engines.prompt.encoder import TextEncoder
from engines.prompt.head import CONDITION_DIM, ArtifactMeta, ConditionProjector, EditHead, artifact_path_for, load_artifact
from engines.prompt.language import MAX_PROMPT_CHARS, NEGATION_FLOOR, clauses, negation_stem, normalise_prompt
from engines.edit_vocabulary import COLOURED, EDIT_NAMES  # the head's outputs, one per edit
from engines.prompt.colour_words import colours_in

if TYPE_CHECKING:  # pragma: no cover
    from engines.prompt.intent import IntentModel, Intents


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Condition:
    """What one prompt was understood as, the one reading every consumer shares: the normalised text,
    its clauses, their pooled encoder embeddings (the policy filter compares these with its examples),
    the condition vector and the edits the head reads from it."""

    text: str                       # normalised prompt (the cache key)
    encoder_text: str               # what the encoder saw (after the Chinese glossary)
    encoder: str                    # encoder id
    vector: np.ndarray              # [512] float32
    edits: Mapping[str, float]
    truncated: bool = False
    n_tokens: int = 0
    unknown: tuple[str, ...] = ()   # characters the glossary could not translate (dropped)
    encode_ms: float = 0.0
    token_limit: int = 0            # the encoder's limit per clause (what `truncated` refers to)
    clauses: tuple[str, ...] = ()   # the wishes the encoder saw, one by one (see `clauses`)
    # pooled encoder embeddings [len(clauses) (+1: the whole prompt, when it has several clauses), H]
    embeddings: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32), repr=False)
    # the intent head's reading of the same rows (engines/prompt/intent.py); None for a model without one
    intents: "Intents | None" = field(default=None, repr=False)
    ignored: tuple[str, ...] = ()   # clauses read as asking for nothing a face filter does: no edits from them
    colours: Mapping[str, str] = field(default_factory=dict)   # coloured edit -> palette name its clause named

    @property
    def norm(self) -> float:
        return float(np.linalg.norm(self.vector))

    @property
    def understood(self) -> bool:
        """False when no clause asks for anything a face filter does (gibberish, chat): no edits apply."""
        return not self.clauses or len(self.ignored) < len(self.clauses)

    def row_texts(self) -> tuple[str, ...]:
        """The text of each row of `embeddings` (and of `intents`): the clauses, then the whole prompt."""
        return self.clauses + ((self.encoder_text,) if len(self.clauses) > 1 else ())

    def summary(self, threshold: float = 0.05) -> dict[str, float]:
        """The edits worth telling a user about, strongest first."""
        items = sorted(((k, v) for k, v in self.edits.items() if abs(v) >= threshold), key=lambda kv: -abs(kv[1]))
        return {k: round(float(v), 3) for k, v in items}

    def painted(self, threshold: float = 0.05) -> dict[str, str]:
        """The colours of the coloured edits this prompt applies (edit -> palette name)."""
        return {k: c for k, c in self.colours.items() if self.edits.get(k, 0.0) >= threshold}


def empty_condition(encoder_id: str, names: Sequence[str] = EDIT_NAMES) -> Condition:
    """Empty prompt = no edits: a zero condition, not whatever the head reads out of an empty string."""
    return Condition(text="", encoder_text="", encoder=encoder_id, vector=np.zeros(CONDITION_DIM, np.float32),
                     edits=MappingProxyType({n: 0.0 for n in names}))


class PromptModel:
    """Encoder + its calibrated projector and head (+ the intent head: what each clause asks for).
    `encode(texts)` -> one Condition per text."""

    def __init__(self, encoder: TextEncoder, projector: ConditionProjector, head: EditHead, meta: ArtifactMeta,
                 intent: "IntentModel | None" = None) -> None:
        if meta.encoder_id != encoder.id or meta.hidden_size != encoder.hidden_size:
            raise CalibrationError(
                f"the calibration artifact was made for encoder {meta.encoder_id} (hidden {meta.hidden_size}), "
                f"not {encoder.id} (hidden {encoder.hidden_size}); recalibrate: livefuse calibrate --encoder {encoder.name}")
        if intent is not None and (intent.meta.encoder_id != encoder.id or intent.meta.hidden_size != encoder.hidden_size):
            raise CalibrationError(
                f"the intent head was made for encoder {intent.meta.encoder_id}, not {encoder.id}; "
                f"recalibrate: livefuse calibrate --encoder {encoder.name}")
        self.encoder, self.projector, self.head, self.meta = encoder, projector, head, meta
        self.intent = intent
        self.id = encoder.id
        self.edit_names = meta.edit_names
        # edits the vocabulary gained after this head was fitted: read as 0 until `livefuse calibrate` fits them
        self._unread = {n: 0.0 for n in EDIT_NAMES if n not in meta.edit_names}

    def prepare(self, text: str) -> tuple[str, str, tuple[str, ...], bool]:
        """(normalised text, encoder input, untranslated characters, whether the text was cut at the
        prompt limit)."""
        full = normalise_prompt(text)
        norm = full[:MAX_PROMPT_CHARS]
        if self.meta.glossary:
            translated, unknown = zh_glossary.translate(norm)
            return norm, translated, unknown, len(full) > MAX_PROMPT_CHARS
        return norm, norm, (), len(full) > MAX_PROMPT_CHARS

    def encode(self, texts: Sequence[str]) -> list[Condition]:
        """Each prompt is split into clauses (see `clauses`); every clause goes encoder -> projector -> head,
        the prompt's edits are the clipped sum over its clauses and its condition the mean of theirs. So
        "no heavy makeup, a little blush" negates only the makeup, and three wishes are three wishes
        rather than one blurred average. A prompt of several clauses is also encoded whole, in the same
        batch, so a reader of `Condition.embeddings` sees both the parts and their sum."""
        t_start = time.perf_counter()
        prepared = [self.prepare(t) for t in texts]
        parts = [clauses(enc_text) for _, enc_text, _, _ in prepared]
        stems = {c: negation_stem(c) for p in parts for c in p}
        wholes = [enc_text for (_, enc_text, _, _), p in zip(prepared, parts) if len(p) > 1]
        flat = list(dict.fromkeys([c for p in parts for c in p] + [s for s in stems.values() if s] + wholes))
        out: list[Condition] = []
        if flat:
            enc = self.encoder.encode(flat)
            with torch.inference_mode():
                c = self.projector(torch.from_numpy(enc.pooled))
                e = self.head(c)
            c_np, e_np = c.numpy().astype(np.float32), e.numpy().astype(np.float64)
            pooled = np.asarray(enc.pooled, np.float32)
            index = {t: i for i, t in enumerate(flat)}
        ms = (time.perf_counter() - t_start) * 1000.0 / max(len(texts), 1)
        for (norm, enc_text, unknown, cut), p in zip(prepared, parts):
            if not p:
                out.append(empty_condition(self.id, tuple(self._unread) + self.edit_names))
                continue
            rows = [index[c] for c in p]
            embedded = rows + ([index[enc_text]] if len(p) > 1 else [])
            intents = self.intent.read(pooled[embedded]) if self.intent is not None else None
            ignored = tuple(c for i, c in enumerate(p) if intents is not None and intents.unrelated(i))
            per = [gate_negated(e_np[index[c]], e_np[index[stems[c]]]) if stems[c] else e_np[index[c]]
                   for c in p if c not in ignored]
            edits = deadzone(np.clip(np.sum(per, axis=0), -1.0, 1.0)) if per else np.zeros(len(self.edit_names))
            kept = [c for c in p if c not in ignored]
            colours = colours_of(kept, [dict(zip(self.edit_names, row)) for row in per])
            out.append(Condition(
                text=norm, encoder_text=enc_text, encoder=self.id, vector=c_np[rows].mean(0),
                edits=MappingProxyType(self._unread | {n: float(edits[k]) for k, n in enumerate(self.edit_names)}),
                truncated=cut or any(enc.truncated[r] for r in rows), n_tokens=sum(enc.n_tokens[r] for r in rows),
                unknown=unknown, encode_ms=ms, token_limit=self.encoder.max_length,
                clauses=tuple(p), embeddings=pooled[embedded], intents=intents, ignored=ignored,
                colours=MappingProxyType(colours)))
        return out


DEADZONE = 0.08
COLOUR_FLOOR = 0.15   # a clause's coloured edit at least this strong takes the colour the clause names


def colours_of(texts: Sequence[str], edits: Sequence[Mapping[str, float]]) -> dict[str, str]:
    """Each coloured edit's palette name from the clauses that ask for it: a clause's colour word goes to
    the coloured edit that clause raises most ("coral lipstick" -> lip_tint: coral; "berry lips and peach
    blush" -> two clauses, two colours). The first clause to colour an edit keeps it."""
    out: dict[str, str] = {}
    for text, row in zip(texts, edits):
        named = colours_in(text)
        if not named:
            continue
        raised = sorted(((row.get(n, 0.0), n) for n in COLOURED if row.get(n, 0.0) >= COLOUR_FLOOR), reverse=True)
        for (_, name), colour in zip(raised, named):
            out.setdefault(name, colour)
    return out


def deadzone(edits: np.ndarray, width: float = DEADZONE) -> np.ndarray:
    """Edits within `width` of zero are none; the rest are rescaled so the full range stays reachable.
    A mean-pooled embedding carries a little of every edit; without this, a prompt naming one edit nudges
    all the others a few hundredths each (leakage). The fit sees the same rule (engines/prompt/calibration.py)."""
    return np.sign(edits) * np.maximum(np.abs(edits) - width, 0.0) / (1.0 - width)


def gate_negated(edits: np.ndarray, stem_edits: np.ndarray, floor: float = NEGATION_FLOOR) -> np.ndarray:
    """A negation never asks for more of what it negates: the edits of "no X" that point the way X's own
    edits point (where X does something) are dropped. "not self-assured" cannot smile, "no red lips" may
    still pale the lips. The encoder is trained on this rule too (engines/prompt/calibration.py)."""
    same = (np.sign(edits) == np.sign(stem_edits)) & (np.abs(stem_edits) > floor)
    return np.where(same, 0.0, edits)


def load_prompt_model(encoder: str | os.PathLike | TextEncoder | None = None, artifact: str | os.PathLike | None = None,
                      intent: bool = True) -> PromptModel:
    """The default encoder (e5) with its committed artifact; `minilm` with its own; any other local
    encoder with the artifact `livefuse calibrate --encoder PATH` made for it. Errors name that command.
    `intent`: load the intent head that lives beside the artifact (the prompt policy's classifier and the
    "not understood" answer need it; `intent=False` is for tools that read edits only)."""
    enc = encoder if isinstance(encoder, TextEncoder) else TextEncoder(encoder)
    if artifact is None:
        candidates = [artifact_path_for(enc.id), *sorted(ASSETS.glob("prompt_head_*.safetensors"))]
        artifact = next((p for p in candidates if p.is_file() and _artifact_encoder(p) == enc.id), None)
        if artifact is None:
            raise CalibrationError(f"encoder {enc.name} ({enc.id}) is not calibrated; run: livefuse calibrate --encoder {enc.name}")
    projector, head, meta = load_artifact(artifact)
    intent_model = None
    if intent:
        from engines.prompt.intent import intent_artifact_for, load_intent_head

        intent_model = load_intent_head(intent_artifact_for(Path(artifact)))
    return PromptModel(enc, projector, head, meta, intent_model)


def _artifact_encoder(path: Path) -> str | None:
    from safetensors import safe_open

    from safetensors import SafetensorError

    try:
        with safe_open(str(path), framework="pt") as f:
            return (f.metadata() or {}).get("encoder_id")
    except (OSError, SafetensorError) as exc:
        # a file that is not an artifact is not a candidate; say so, so a corrupt one is not a mystery
        log.warning("skipping %s as a calibration artifact: %s", path, exc)
        return None
