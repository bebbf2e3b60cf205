"""Text encoders over Hugging Face transformers, loaded from a local folder only.

`TextEncoder.encode` returns masked-mean-pooled token embeddings [N, H]; any local encoder works, decoder
LLMs included (their last hidden states are pooled the same way). Projection to the 512-d condition and
the edit head build on this.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engines.cards import MINILM_L6, ModelCard


class EncoderError(RuntimeError):
    """The encoder folder is missing or not a transformers model."""


@dataclass(frozen=True, slots=True)
class Encoded:
    pooled: np.ndarray          # [N, H] float32
    truncated: tuple[bool, ...]  # per text: was it cut to the encoder's limit
    n_tokens: tuple[int, ...]


def default_encoder_path(card: ModelCard = MINILM_L6) -> Path:
    """The bundled MiniLM folder, checked by sha256."""
    return card.path().parent


class TextEncoder:
    def __init__(self, path: str | os.PathLike | None = None, *, max_length: int | None = None, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        folder = Path(path) if path is not None else default_encoder_path()
        if not (folder / "config.json").is_file():
            raise EncoderError(f"{folder} is not a local transformers model folder (no config.json)")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            self.model = AutoModel.from_pretrained(folder, local_files_only=True).to(device).eval()
        except Exception as exc:  # transformers raises many types here; the user needs one message
            raise EncoderError(f"cannot load a text encoder from {folder}: {exc}") from exc
        self.path = folder
        self.device = device
        self.hidden_size = int(self.model.config.hidden_size)
        limit = max_length or getattr(self.tokenizer, "model_max_length", 512)
        self.max_length = int(min(limit, 4096))
        self.id = f"{folder.name}:{_folder_digest(folder)}"
        self._torch = torch
        self._lock = threading.Lock()  # tokenizers and models are not safe to share across threads mid-call

    def encode(self, texts: Sequence[str]) -> Encoded:
        torch = self._torch
        texts = list(texts)
        with self._lock, torch.inference_mode():
            full = self.tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
            batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
            batch = {k: v.to(self.device) for k, v in batch.items()}
            out = self.model(**batch)
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return Encoded(
            pooled=pooled.float().cpu().numpy(),
            truncated=tuple(len(ids) > self.max_length for ids in full),
            n_tokens=tuple(min(len(ids), self.max_length) for ids in full),
        )


def _folder_digest(folder: Path) -> str:
    """A short id for an encoder folder: its config plus weight file sizes (hashing GBs per start is too slow)."""
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for p in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        h.update(f"{p.name}:{p.stat().st_size}".encode())
    return h.hexdigest()[:12]
