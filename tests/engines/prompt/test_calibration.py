"""engines/prompt/calibration.py + `livefuse calibrate`: the corpus, the fit, its scores and the artifact."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from engines.prompt.calibration import CORPUS_DIR, CalibrationConfig, calibrate, load_corpus, score, targets
from engines.prompt.head import DEFAULT_ARTIFACT, MINILM_ARTIFACT, load_artifact
from engines.edit_vocabulary import EDIT_NAMES
from engines.prompt.encoder import TextEncoder
from engines.prompt.model import load_prompt_model

LANGS = ("en", "zh", "ja", "ko", "es", "fr", "de", "pt")
SIGN_GOAL = 0.9      # the product's goal: sign accuracy per language on the held-out split (heldout + zero_shot)
LEAKAGE_GOAL = 0.08  # mean |value| of the edits a held-out prompt does not name
# Every language reaches the goal with the committed e5 head (docs/prompts.md); the nearest on the live path is
# Portuguese (0.939), some 18 of its 472 prompts above the line. A language that sat within a few prompts of the
# goal would get a floor a margin under it here, so a CPU that rounds the encoder's sums differently does not
# fail the build.
SIGN_FLOOR: dict[str, float] = {}


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


def test_corpus_covers_eight_languages_split_and_the_kinds():
    train, held, _ = load_corpus()
    rows = train + held
    assert len(rows) >= 6000
    assert {r.lang for r in train} == set(LANGS) and {r.lang for r in held} == set(LANGS)
    assert len(held) >= 0.15 * len(rows)
    for lang in LANGS:
        assert sum(r.lang == lang for r in held) >= 40
        assert sum(r.lang == lang and r.kind == "negation" for r in held) >= 10, lang
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
    from engines.prompt.glossary import translate
    from engines.prompt.language import normalise_prompt

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
            assert meta.heldout[lang]["sign_agreement"] >= SIGN_GOAL
            assert meta.heldout[lang]["leakage"] <= LEAKAGE_GOAL
    _, _, e5 = load_artifact(DEFAULT_ARTIFACT)
    for lang in LANGS:
        assert e5.heldout[lang]["sign_agreement"] >= SIGN_FLOOR.get(lang, SIGN_GOAL), (lang, e5.heldout[lang])
        assert e5.heldout[lang]["leakage"] <= LEAKAGE_GOAL, (lang, e5.heldout[lang])


def test_every_language_works_on_the_live_path(capsys):
    """The held-out prompts through PromptModel.encode (clauses, negation gate, intent head, head,
    dead zone) as a user types them; per-language figures printed (pytest -s), each must reach the goal."""
    _, held, _ = load_corpus()
    model = load_prompt_model()
    report = {}
    for lang in LANGS:
        rows = [r for r in held if r.lang == lang]
        pred = np.array([[c.edits[n] for n in EDIT_NAMES] for c in model.encode([r.text for r in rows])])
        report[lang] = {"n": len(rows), **score(pred, targets(rows))}
    with capsys.disabled():
        print("\nheld-out sign accuracy / leakage (e5, live path): " +
              ", ".join(f"{lang} {r['sign_agreement']:.3f}/{r['leakage']:.3f} (n={r['n']})" for lang, r in report.items()))
    for lang, r in report.items():
        assert r["sign_agreement"] >= SIGN_FLOOR.get(lang, SIGN_GOAL) and r["leakage"] <= LEAKAGE_GOAL, (lang, r)


def test_the_issue_prompts_have_the_right_sign():
    """"glattere Haut" smooths (it sharpened), "arrête de sourire" / "没有笑容" / "ohne Lächeln" / "笑わないで"
    turn the smile down, and nothing else moves much."""
    model = load_prompt_model()
    cases = {"glattere Haut": ("skin_smooth", 1), "arrête de sourire": ("smile", -1), "don't smile": ("smile", -1),
             "没有笑容": ("smile", -1), "ohne Lächeln": ("smile", -1), "a big smile": ("smile", 1),
             "bigger eyes": ("eye_size", 1), "笑わないで": ("smile", -1), "sonrisa amplia": ("smile", 1)}
    for (text, (edit, sign)), cond in zip(cases.items(), model.encode(list(cases))):
        assert np.sign(cond.edits[edit]) == sign, (text, cond.summary())
        others = [abs(v) for k, v in cond.edits.items() if k != edit]
        assert max(others) <= 0.25, (text, cond.summary())


def test_score_counts_signs_and_zero_leaks():
    y = np.array([[0.5, 0.0], [-0.5, 0.0]], np.float32)
    s = score(np.array([[0.1, 0.3], [0.2, 0.0]], np.float32), y)
    assert s["sign_agreement"] == 0.5 and s["zero_within_0.2"] == 0.5 and s["zero_max_abs"] == pytest.approx(0.3)
    assert s["leakage"] == pytest.approx(0.15)


def test_calibrating_a_decoder_llm_end_to_end(tiny_decoder, small_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("LIVEFUSE_HOME", str(tmp_path / "home"))
    enc = TextEncoder(tiny_decoder)
    cfg = CalibrationConfig(steps=120)
    from engines.prompt.head import artifact_path_for

    out = artifact_path_for(enc.id)
    model, report = calibrate(enc, small_corpus, out, cfg)
    assert Path(report["artifact"]) == out and out.is_file()
    assert set(report["heldout"]) == {"all"} | {r.lang for r in load_corpus(small_corpus)[1]}
    _, _, meta = load_artifact(out)
    assert meta.encoder_id == enc.id and meta.hidden_size == 32 and meta.corpus_sha256 == load_corpus(small_corpus)[2]
    # the server's loader now finds it for this encoder (its intent head is another fit: test_intent.py)
    loaded = load_prompt_model(tiny_decoder, intent=False)
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
        # torch sums a tensor of over 32768 values on both cores, in an order that moves the last bits
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6)


def test_calibrate_command(tiny_decoder, small_corpus, tmp_path, capsys):
    from streamer.app.cli import main

    out = tmp_path / "head.safetensors"
    rc = main(["calibrate", "--encoder", str(tiny_decoder), "--corpus", str(small_corpus), "-o", str(out), "--steps", "10", "--no-glossary"])
    assert rc == 0 and out.is_file()
    report = json.loads(capsys.readouterr().out)
    assert report["edits"]["encoder"] == TextEncoder(tiny_decoder).id and report["edits"]["artifact"] == str(out)
    assert load_artifact(out)[2].glossary is False
    # the intent head beside it, fitted in the same run, for the same encoder
    from engines.prompt.intent import intent_artifact_for, load_intent_head

    intent = intent_artifact_for(out)
    assert report["intent"]["artifact"] == str(intent) and load_intent_head(intent).meta.encoder_id == report["edits"]["encoder"]
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
