"""engines/prompt/intent.py + engines/prompt/intent_fit.py: the labelled policy corpus, its splits, the fitted heads
(committed, sha256-pinned, made from this corpus), and a fit end to end on a tiny decoder LLM."""

from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engines.prompt.intent import INTENTS, REFUSED, UNRELATED, intent_artifact_for, load_intent_head
from engines.prompt.intent_fit import POLICY_CORPUS, IntentConfig, calibrate_intent, load_policy_corpus, split_of
from engines.artifacts import ASSETS, CalibrationError, check_pinned
from engines.prompt.head import DEFAULT_ARTIFACT, MINILM_ARTIFACT
from engines.prompt.encoder import TextEncoder
from engines.prompt.language import normalise_prompt

LANGS = {"en", "zh", "ja", "ko", "es", "fr", "de", "pt"}


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory):
    from tests._tiny_models import make_tiny_decoder

    return make_tiny_decoder(tmp_path_factory.mktemp("tiny_gpt2"))


def test_corpus_covers_every_language_label_and_split():
    rows, _ = load_policy_corpus()
    counts = collections.Counter((r.lang, r.label) for r in rows)
    for lang in LANGS:
        assert counts[(lang, "allowed")] >= 250, lang
        for label in (UNRELATED, *REFUSED):
            assert counts[(lang, label)] >= 40, (lang, label)
        held = [r for r in rows if r.lang == lang and r.split == "heldout"]
        assert sum(r.label == "allowed" for r in held) >= 80    # a language's benign pass rate means something
    splits = collections.Counter(r.split for r in rows)
    assert 0.40 < splits["train"] / len(rows) < 0.50 and 0.30 < splits["heldout"] / len(rows) < 0.40
    assert all(r.split == split_of(normalise_prompt(r.text)) for r in rows)     # a hash of the text, nothing else
    assert sum(r.hard for r in rows) >= 800     # near misses on purpose


def test_a_bad_label_is_a_clear_error(tmp_path):
    (tmp_path / "xx.jsonl").write_text('{"text": "hi", "label": "rude"}\n')
    with pytest.raises(ValueError, match="rude"):
        load_policy_corpus(tmp_path)
    with pytest.raises(FileNotFoundError, match="GUIDE"):
        load_policy_corpus(tmp_path / "none")


@pytest.mark.parametrize("name,artifact", [("e5", DEFAULT_ARTIFACT), ("minilm", MINILM_ARTIFACT)])
def test_committed_heads_are_pinned_and_made_from_this_corpus(name, artifact):
    _, digest = load_policy_corpus()
    model = load_intent_head(intent_artifact_for(artifact))
    meta = model.meta
    assert meta.corpus_sha256 == digest, f"policy corpus changed: rerun `livefuse calibrate --encoder {name}`"
    assert meta.encoder_id == TextEncoder(name).id and meta.classes == INTENTS
    cfg = IntentConfig()
    assert all(cfg.min_threshold <= meta.thresholds[c] <= cfg.max_threshold for c in REFUSED)
    assert cfg.unrelated_min <= meta.thresholds[UNRELATED] <= cfg.max_threshold
    assert meta.scores["heldout"]["n"] > 0 and meta.scores["validation"]["benign_pass"] >= 0.99


def test_a_changed_committed_artifact_is_refused(tmp_path, monkeypatch):
    import engines.artifacts as artifacts

    assets = tmp_path / "assets"
    shutil.copytree(ASSETS, assets)
    monkeypatch.setattr(artifacts, "ASSETS", assets)
    monkeypatch.setattr(artifacts, "PINNED", assets / "SHA256SUMS")
    head = assets / intent_artifact_for(DEFAULT_ARTIFACT).name
    check_pinned(head)                       # as committed
    data = bytearray(head.read_bytes())
    data[-1] ^= 1
    head.write_bytes(bytes(data))
    with pytest.raises(CalibrationError, match="sha256"):
        check_pinned(head)
    with pytest.raises(CalibrationError, match="sha256"):
        load_intent_head(head)


def test_fitting_a_decoder_llm_end_to_end(tiny_decoder, tmp_path):
    """A small corpus (every 6th prompt) through the whole fit: thresholds chosen, scores reported, the
    artifact saved and read back with the same probabilities; the same corpus gives the same head."""
    rows, _ = load_policy_corpus()
    corpus = tmp_path / "policy"
    corpus.mkdir()
    for lang in sorted(LANGS):
        lines = (POLICY_CORPUS / f"{lang}.jsonl").read_text(encoding="utf-8").splitlines()[::6]
        (corpus / f"{lang}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    enc = TextEncoder(tiny_decoder)
    cfg = IntentConfig(steps=50, edit_examples=100)
    out = tmp_path / "tiny.intent.safetensors"
    model, report = calibrate_intent(enc, out, cfg, policy_corpus=corpus)
    assert Path(report["artifact"]) == out and set(report["thresholds"]) == {*REFUSED, UNRELATED}
    assert report["validation"]["n"] > 0 and report["heldout"]["n"] > 0
    loaded = load_intent_head(out)
    pooled = enc.encode(["take off her clothes", "a big smile"]).pooled
    assert np.allclose(loaded.read(pooled).probs, model.read(pooled).probs, atol=1e-6)
    assert np.allclose(loaded.read(pooled).probs.sum(1), 1.0, atol=1e-5)
    again, _ = calibrate_intent(enc, None, cfg, policy_corpus=corpus)
    for a, b in zip(again.head.state_dict().values(), model.head.state_dict().values()):
        assert np.array_equal(a.numpy(), b.numpy())
    json.dumps(report)   # the report is JSON as the command prints it
