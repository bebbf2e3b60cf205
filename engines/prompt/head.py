"""The fitted part of a prompt's understanding: `ConditionProjector` maps the pooled embedding to the 512-d
condition `c` (the FaceFusion latent size, so other stages may read it) and `EditHead` maps `c` to the named
edits in [-1, 1]. `livefuse calibrate` fits both per encoder (engines/prompt/calibration.py) and saves them as
one safetensors artifact whose metadata names the encoder it belongs to.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import torch

from engines.artifacts import ASSETS, CalibrationError, read_artifact, write_artifact
from engines.edit_vocabulary import EDIT_NAMES  # the head's outputs, one per edit


CONDITION_DIM = 512


ARTIFACT_FORMAT = "livefuse-prompt-head/1"


DEFAULT_ARTIFACT = ASSETS / "prompt_head_e5.safetensors"     # made by `livefuse calibrate` (encoder e5)


MINILM_ARTIFACT = ASSETS / "prompt_head_minilm.safetensors"   # made by `livefuse calibrate --encoder minilm`


class ConditionProjector(torch.nn.Module):
    """Pooled encoder embedding [N, H] -> condition c [N, 512]. Standardises with the corpus statistics
    first (encoders differ wildly in scale: MiniLM ~0.1, a decoder LLM's last layer ~10)."""

    def __init__(self, hidden_size: int, dim: int = CONDITION_DIM) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(hidden_size))
        self.register_buffer("scale", torch.ones(hidden_size))
        self.linear = torch.nn.Linear(hidden_size, dim)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.linear((pooled - self.mean) * self.scale)


class EditHead(torch.nn.Module):
    """Condition c [N, 512] -> edits [N, len(names)] in [-1, 1]. One hidden layer, because negation
    ("no red lips") must switch an edit off, which no linear map of a mean-pooled embedding can do."""

    def __init__(self, names: Sequence[str] = EDIT_NAMES, dim: int = CONDITION_DIM, hidden: int = 256) -> None:
        super().__init__()
        self.names = tuple(names)
        self.net = torch.nn.Sequential(torch.nn.GELU(), torch.nn.Linear(dim, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, len(self.names)))

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(c))


@dataclass(frozen=True, slots=True)
class ArtifactMeta:
    encoder_id: str
    hidden_size: int
    corpus_sha256: str
    heldout: Mapping[str, object]      # the held-out scores of this fit (engines/prompt/calibration.py)
    edit_names: tuple[str, ...] = EDIT_NAMES
    glossary: bool = True              # Chinese goes through engines/prompt/glossary.py before encoding
    head_hidden: int = 256
    encoder_path: str = ""
    max_length: int = 0
    extra: Mapping[str, object] = field(default_factory=dict)

    def to_strings(self) -> dict[str, str]:
        return {
            "format": ARTIFACT_FORMAT, "encoder_id": self.encoder_id, "hidden_size": str(self.hidden_size),
            "corpus_sha256": self.corpus_sha256, "heldout": json.dumps(self.heldout, sort_keys=True, ensure_ascii=False),
            "edit_names": json.dumps(list(self.edit_names)), "glossary": json.dumps(self.glossary),
            "head_hidden": str(self.head_hidden), "encoder_path": self.encoder_path, "max_length": str(self.max_length),
            "extra": json.dumps(self.extra, sort_keys=True),
        }

    @classmethod
    def from_strings(cls, meta: Mapping[str, str]) -> "ArtifactMeta":
        return cls(
            encoder_id=meta["encoder_id"], hidden_size=int(meta["hidden_size"]), corpus_sha256=meta["corpus_sha256"],
            heldout=json.loads(meta["heldout"]), edit_names=tuple(json.loads(meta["edit_names"])),
            glossary=json.loads(meta["glossary"]), head_hidden=int(meta["head_hidden"]),
            encoder_path=meta.get("encoder_path", ""), max_length=int(meta.get("max_length", "0")),
            extra=json.loads(meta.get("extra", "{}")),
        )


def save_artifact(path: str | os.PathLike, projector: ConditionProjector, head: EditHead, meta: ArtifactMeta) -> Path:
    tensors = {f"projector.{k}": v.detach().float().contiguous().cpu() for k, v in projector.state_dict().items()}
    tensors.update({f"head.{k}": v.detach().float().contiguous().cpu() for k, v in head.state_dict().items()})
    return write_artifact(path, tensors, meta.to_strings())


def load_artifact(path: str | os.PathLike) -> tuple[ConditionProjector, EditHead, ArtifactMeta]:
    raw, tensors = read_artifact(path, ARTIFACT_FORMAT, "calibration artifact")
    try:
        meta = ArtifactMeta.from_strings(raw)
        projector = ConditionProjector(meta.hidden_size)
        projector.load_state_dict({k[len("projector."):]: v for k, v in tensors.items() if k.startswith("projector.")})
        head = EditHead(meta.edit_names, hidden=meta.head_hidden)
        head.load_state_dict({k[len("head."):]: v for k, v in tensors.items() if k.startswith("head.")})
    except Exception as exc:   # missing keys, wrong shapes, bad metadata: one message
        raise CalibrationError(f"{path} is not a usable LiveFuse calibration artifact ({exc}); "
                               f"make a new one: livefuse calibrate --encoder PATH") from exc
    return projector.eval(), head.eval(), meta


def artifact_home() -> Path:
    """Where `livefuse calibrate` puts artifacts for encoders other than the bundled one."""
    return Path(os.environ.get("LIVEFUSE_HOME", Path.home() / ".cache" / "livefuse")) / "prompt_heads"


def artifact_path_for(encoder_id: str) -> Path:
    return artifact_home() / (re.sub(r"[^A-Za-z0-9_.-]+", "_", encoder_id) + ".safetensors")
