"""engines/calibration.py + `livefuse calibrate`: the corpus, the fit, its scores and the artifact."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from engines.calibration import CORPUS_DIR, CalibrationConfig, calibrate, load_corpus, score, targets
from engines.text import DEFAULT_ARTIFACT, EDIT_NAMES, MINILM_ARTIFACT, TextEncoder, load_artifact, load_prompt_model

ZERO_SHOT_LANGS = ("ja", "ko", "es", "fr", "de", "pt")
# Zero-shot sign agreement goal per language: the head never saw these languages, so a blind guess scores
# 0.5 and the English-only MiniLM measures 0.48-0.63 on the same prompts (its committed artifact's
# held-out scores); 0.7 is above everything an encoder without cross-lingual alignment reaches, and
# below e5's worst language (Korean, 0.73; the others 0.85-1.0, docs/prompts.md).
ZERO_SHOT_GOAL = 0.7


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory):
    from tests._tiny_models import make_tiny_decoder

    return make_tiny_decoder(tmp_path_factory.mktemp("tiny_gpt2"))


@pytest.fixture()
def small_corpus(tmp_path):
    """Every 8th prompt of each split: enough to fit, fast enough for a test."""
    out = tmp_path / "corpus"
    out.mkdir()
    for split in ("train", "heldout"):
        lines = (CORPUS_DIR / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
        (out / f"{split}.jsonl").write_text("\n".join(lines[::8]) + "\n", encoding="utf-8")
    return out


def test_corpus_is_big_bilingual_split_and_covers_the_kinds():
    train, held, _ = load_corpus()
    rows = train + held
    assert len(rows) >= 600
    assert {r.lang for r in train} == {"en", "zh"}
    assert {r.lang for r in held} == {"en", "zh", *ZERO_SHOT_LANGS} and len(held) >= 0.15 * len(rows)
    for lang in ZERO_SHOT_LANGS:
        assert sum(r.lang == lang for r in held) >= 20
    for lang in ("en", "zh"):
        kinds = {r.kind for r in rows if r.lang == lang}
        assert {"base", "intensity", "negation", "combination"} <= kinds
    assert not {r.text for r in train} & {r.text for r in held}
    for r in rows:
        assert set(r.target) <= set(EDIT_NAMES) and all(-1 <= v <= 1 and v != 0 for v in r.target.values())


def test_corpus_files_are_what_the_builder_writes(tmp_path, monkeypatch):
    sys.path.insert(0, str(CORPUS_DIR))
    try:
        import build_corpus
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(build_corpus, "HERE", tmp_path)
    build_corpus.main()
    for split in ("train", "heldout"):
        assert (tmp_path / f"{split}.jsonl").read_bytes() == (CORPUS_DIR / f"{split}.jsonl").read_bytes()
    sys.path.insert(0, str(CORPUS_DIR))
    try:
        import build_zero_shot
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(build_zero_shot, "HERE", tmp_path)
    build_zero_shot.main()
    assert (tmp_path / "zero_shot.jsonl").read_bytes() == (CORPUS_DIR / "zero_shot.jsonl").read_bytes()


def test_every_chinese_prompt_is_covered_by_the_glossary():
    from engines.glossary import translate
    from engines.text import normalise_prompt

    train, held, _ = load_corpus()
    for r in train + held:
        if r.lang == "zh":
            text, unknown = translate(normalise_prompt(r.text))
            assert not unknown and text.isascii(), (r.text, text, unknown)


def test_committed_artifacts_match_the_corpus_and_meet_the_goals():
    _, _, digest = load_corpus()
    for name, path in (("e5", DEFAULT_ARTIFACT), ("minilm", MINILM_ARTIFACT)):
        _, _, meta = load_artifact(path)
        assert meta.corpus_sha256 == digest, f"corpus changed: rerun `livefuse calibrate --encoder {name}` and commit the artifact"
        assert meta.encoder_id == TextEncoder(name).id and meta.hidden_size == 384
        assert meta.glossary is (name == "minilm")
        for lang in ("en", "zh"):
            assert meta.heldout[lang]["sign_agreement"] >= 0.9
            assert meta.heldout[lang]["zero_within_0.2"] >= 0.99
    _, _, e5 = load_artifact(DEFAULT_ARTIFACT)
    for lang in ZERO_SHOT_LANGS:   # held out, never trained on: the encoder carries them
        assert e5.heldout[lang]["sign_agreement"] >= ZERO_SHOT_GOAL, (lang, e5.heldout[lang])
    _, _, minilm = load_artifact(MINILM_ARTIFACT)
    assert minilm.heldout["en"]["zero_max_abs"] <= 0.2


def test_zero_shot_languages_work_on_the_live_path(capsys):
    """The same held-out prompts through PromptModel.encode (clauses, gate, head) as a user types them;
    the per-language figures are printed (pytest -s) and each must reach the goal."""
    _, held, _ = load_corpus()
    model = load_prompt_model()
    report = {}
    for lang in ZERO_SHOT_LANGS:
        rows = [r for r in held if r.lang == lang]
        pred = np.array([[c.edits[n] for n in EDIT_NAMES] for c in model.encode([r.text for r in rows])])
        report[lang] = {"n": len(rows), **score(pred, targets(rows))}
    with capsys.disabled():
        print("\nzero-shot sign agreement (e5, live path): " +
              ", ".join(f"{lang} {r['sign_agreement']:.3f} (n={r['n']})" for lang, r in report.items()))
    for lang, r in report.items():
        assert r["n"] >= 20 and r["sign_agreement"] >= ZERO_SHOT_GOAL, (lang, r)


def test_e5_reads_every_zero_shot_language_better_than_minilm():
    _, _, e5 = load_artifact(DEFAULT_ARTIFACT)
    _, _, minilm = load_artifact(MINILM_ARTIFACT)
    for lang in ZERO_SHOT_LANGS:
        assert e5.heldout[lang]["sign_agreement"] > minilm.heldout[lang]["sign_agreement"] + 0.1, lang
        assert minilm.heldout[lang]["sign_agreement"] < ZERO_SHOT_GOAL     # the goal needs a multilingual encoder


def test_score_counts_signs_and_zero_leaks():
    y = np.array([[0.5, 0.0], [-0.5, 0.0]], np.float32)
    s = score(np.array([[0.1, 0.3], [0.2, 0.0]], np.float32), y)
    assert s["sign_agreement"] == 0.5 and s["zero_within_0.2"] == 0.5 and s["zero_max_abs"] == pytest.approx(0.3)


def test_calibrating_a_decoder_llm_end_to_end(tiny_decoder, small_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("LIVEFUSE_HOME", str(tmp_path / "home"))
    enc = TextEncoder(tiny_decoder)
    cfg = CalibrationConfig(steps=60)
    from engines.text import artifact_path_for

    out = artifact_path_for(enc.id)
    model, report = calibrate(enc, small_corpus, out, cfg)
    assert Path(report["artifact"]) == out and out.is_file()
    assert set(report["heldout"]) == {"all", "en", "zh"}
    _, _, meta = load_artifact(out)
    assert meta.encoder_id == enc.id and meta.hidden_size == 32 and meta.corpus_sha256 == load_corpus(small_corpus)[2]
    # the server's loader now finds it for this encoder
    loaded = load_prompt_model(tiny_decoder)
    (a,) = loaded.encode(["a big grin"])
    (b,) = model.encode(["a big grin"])
    assert a.vector.shape == (512,) and np.allclose(a.vector, b.vector, atol=1e-5)
    # a random tiny model learns its training set at least
    train, _, _ = load_corpus(small_corpus)
    assert report["heldout"]["all"]["n"] > 0 and json.loads(json.dumps(meta.extra))["train_score"]["sign_agreement"] > 0.6


def test_fit_is_reproducible(tiny_decoder, small_corpus):
    enc = TextEncoder(tiny_decoder)
    cfg = CalibrationConfig(steps=20)
    m1, r1 = calibrate(enc, small_corpus, None, cfg)
    m2, r2 = calibrate(enc, small_corpus, None, cfg)
    assert r1["heldout"] == r2["heldout"]
    for a, b in zip(m1.head.state_dict().values(), m2.head.state_dict().values()):
        assert np.array_equal(a.numpy(), b.numpy())


def test_calibrate_command(tiny_decoder, small_corpus, tmp_path, capsys):
    from streamer.cli import main

    out = tmp_path / "head.safetensors"
    rc = main(["calibrate", "--encoder", str(tiny_decoder), "--corpus", str(small_corpus), "-o", str(out), "--steps", "10", "--no-glossary"])
    assert rc == 0 and out.is_file()
    report = json.loads(capsys.readouterr().out)
    assert report["encoder"] == TextEncoder(tiny_decoder).id and report["artifact"] == str(out)
    assert load_artifact(out)[2].glossary is False
    assert main(["calibrate", "--encoder", str(tmp_path / "missing")]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_bad_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="build_corpus"):
        load_corpus(tmp_path)
    shutil.copy(CORPUS_DIR / "heldout.jsonl", tmp_path / "heldout.jsonl")
    (tmp_path / "train.jsonl").write_text('{"text": "x", "lang": "en", "target": {"teleport": 1}}\n')
    with pytest.raises(ValueError, match="teleport"):
        load_corpus(tmp_path)
    assert targets([], EDIT_NAMES).shape == (0, len(EDIT_NAMES))
