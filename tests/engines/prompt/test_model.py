"""engines/prompt/: prompt normalisation, the Chinese glossary, encoders (e5, MiniLM and a decoder LLM),
the committed calibrations, awkward input and the artifact format."""

from __future__ import annotations

import numpy as np
import pytest

from engines.prompt import glossary
from engines.prompt.head import CONDITION_DIM, DEFAULT_ARTIFACT, MINILM_ARTIFACT, ConditionProjector, EditHead, load_artifact, save_artifact
from engines.edit_vocabulary import EDIT_NAMES
from engines.artifacts import CalibrationError
from engines.prompt.encoder import EncoderError, TextEncoder
from engines.prompt.language import MAX_PROMPT_CHARS, clauses, negation_stem, normalise_prompt
from engines.prompt.calibration import load_corpus
from engines.prompt.model import gate_negated, load_prompt_model


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory):
    from tests._tiny_models import make_tiny_decoder

    return make_tiny_decoder(tmp_path_factory.mktemp("tiny_gpt2"))


@pytest.fixture(scope="module")
def model():
    return load_prompt_model()          # the default: e5 with engines/assets/prompt_head_e5.safetensors


@pytest.fixture(scope="module")
def minilm():
    return load_prompt_model("minilm")


def test_normalise_folds_case_width_controls_and_odd_unicode():
    assert normalise_prompt("  A  Big\tGRIN!\n") == "a big grin!"
    assert normalise_prompt("ｓｍｉｌｅ，ＲＥＤ　lips") == "smile,red lips"          # full-width forms
    assert normalise_prompt("sm\u200bile\u202e\x00\x07 now") == "smile now"           # zero-width, bidi, controls
    assert normalise_prompt("\ud800 ok") == "ok"                                       # lone surrogate
    assert len(normalise_prompt("smile " * 10_000)) <= 2000
    with pytest.raises(TypeError):
        normalise_prompt(None)  # type: ignore[arg-type]


def test_glossary_translates_the_issue_styles_and_reports_unknown_characters():
    assert glossary.translate("韩系清透裸妆") == ("k-beauty glass skin", ())
    assert glossary.translate("温柔的日系妆容感")[0] == "soft japanese look"
    assert glossary.translate("不要笑")[0] == "don't smile"
    text, unknown = glossary.translate("微笑 龍 ok")
    assert "smile" in text and "ok" in text and unknown == ("龍",)
    assert glossary.translate("plain english") == ("plain english", ())


def test_clauses_split_wishes():
    assert clauses("look more confident, a slight smile and professional") == ["look more confident", "a slight smile", "professional"]
    assert clauses("让她看起来更自信、带点微笑、职业感强一点") == ["让她看起来更自信", "带点微笑", "职业感强一点"]
    assert clauses("红唇和烟熏妆") == ["红唇", "烟熏妆"] and clauses("柔和的妆容") == ["柔和的妆容"]   # 和 inside a word stays
    assert clauses("labios rojos y ojos ahumados") == ["labios rojos", "ojos ahumados"]
    assert clauses("rote Lippen und rosige Wangen") == ["rote Lippen", "rosige Wangen"]
    assert clauses("un menton plus court") == ["un menton plus court"]   # the French comparative is one wish
    assert clauses("a big smile, plus red lips") == ["a big smile", "plus red lips"]
    # Portuguese "no rosto / no lábio" says where and nothing more: read without it, and "no" is no negation
    assert clauses("batom vermelho no lábio") == ["batom vermelho"] and clauses("nada de sorriso no rosto") == ["nada de sorriso"]
    assert clauses("un sourire et des joues rosées") == ["un sourire", "des joues rosées"]
    assert clauses(" , ; ") == []
    assert clauses("red lips, red lips and red lips") == ["red lips"]
    assert len(clauses(", ".join(f"wish {i}" for i in range(30)))) == 8
    # emoji between words end a wish; a prompt of emoji only stays whole
    assert clauses("😀😀 big smile 💄 red lips ✨") == ["big smile", "red lips"] and clauses("微笑😊红唇") == ["微笑", "红唇"]
    assert clauses("🙂🙂🙂") == ["🙂🙂🙂"]


def test_korean_wishes_split_at_its_words_for_and_after_a_negation():
    assert clauses("밝은 표정 그리고 블랙 아이라이너 빼고 해줘") == ["밝은 표정", "블랙 아이라이너 빼고 해줘"]
    assert clauses("뽀샵 하고 컨투어링 싫어") == ["뽀샵", "컨투어링 싫어"]           # X 하고 Y: do X and Y
    assert clauses("화장 빼고 웃는 얼굴로") == ["화장 빼고", "웃는 얼굴로"]            # leave X out, and Y
    assert clauses("동안 말고 그리고 카메라를 보는 눈빛") == ["동안 말고", "카메라를 보는 눈빛"]
    assert clauses("눈화장 없이 해 주세요") == ["눈화장 없이 해 주세요"]              # only a request ending follows
    assert clauses("웃게 하고 싶어") == ["웃게 하고 싶어"]                            # 하고 싶어: "want to"
    assert clauses("깔끔하고 화사한 피부") == ["깔끔하고 화사한 피부"]                # -하고 inside a word
    assert clauses("ちょっと笑顔、もっと明るく") == ["ちょっと笑顔", "もっと明るく"]  # と inside words stays


def test_chinese_wishes_split_at_but_and_at_a_wanted_wish_after_a_negated_one():
    assert clauses("不化妆但是要笑") == ["不化妆", "要笑"]
    assert clauses("不要口红要腮红") == ["不要口红", "要腮红"]      # no lipstick, blush instead
    assert clauses("我想要微笑") == ["我想要微笑"] and clauses("不想要浓妆") == ["不想要浓妆"]
    assert clauses("重要的是要笑") == ["重要的是要笑"]


def test_japanese_wishes_split_after_a_negation_that_a_wish_follows():
    assert clauses("メイクなしで笑顔") == ["メイクなし", "笑顔"]
    assert clauses("血色感はやめてと超びっくり顔でお願い") == ["血色感はやめて", "超びっくり顔でお願い"]
    assert clauses("笑顔じゃなくていいに眉下げ") == ["笑顔じゃなくていい", "眉下げ"]
    assert clauses("アイラインなしでお願い") == ["アイラインなしでお願い"]   # only a request ending follows
    assert clauses("口紅はやめてにして") == ["口紅はやめてにして"]
    assert clauses("おとなしい顔") == ["おとなしい顔"]                       # なし inside おとなしい


def test_minilm_pools_and_flags_truncation():
    enc = TextEncoder("minilm")
    assert enc.hidden_size == 384 and enc.max_length == 256 and enc.prefix == "" and not enc.normalise
    out = enc.encode(["a slight smile", "smile " * 400])
    assert out.pooled.shape == (2, 384) and out.pooled.dtype == np.float32
    assert out.truncated == (False, True) and out.n_tokens[1] == 256


def test_missing_or_broken_encoder_folder_is_a_clear_error(tmp_path):
    with pytest.raises(EncoderError, match="no config.json"):
        TextEncoder(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(EncoderError, match="cannot load"):
        TextEncoder(tmp_path)


def test_decoder_llm_last_hidden_states_are_pooled(tiny_decoder):
    enc = TextEncoder(tiny_decoder)
    out = enc.encode(["a slight smile", "red lips and smoky eyes"])
    assert out.pooled.shape == (2, 32) and np.isfinite(out.pooled).all()
    assert not np.allclose(out.pooled[0], out.pooled[1])


def test_pooling_is_over_the_mask_so_a_batch_does_not_change_a_prompt(tiny_decoder):
    """The LLM path pools the decoder's last hidden states over the attention mask: the padding a longer
    prompt in the same batch adds changes nothing (the same for e5, whose attention sees the mask too)."""
    for enc in (TextEncoder(tiny_decoder), TextEncoder("e5")):
        alone = enc.encode(["a slight smile"]).pooled[0]
        batched = enc.encode(["a slight smile", "red lips, smoky eyes, a big grin and much brighter skin"]).pooled[0]
        assert np.allclose(alone, batched, atol=1e-4), enc.name


def test_many_texts_run_in_batches_of_like_length_and_come_back_in_order():
    """A corpus is encoded in batches of like length (a short prompt padded to a long one's length cost
    three times the work on the policy corpus); each text's reading is the one it gets alone."""
    from engines.prompt.encoder import length_batches

    n = [3, 40, 5, 300, 7, 41]
    batches = length_batches(n, budget=100)
    assert batches == [[0, 2, 4], [1, 5], [3]]
    texts = ["a slight smile", "smile " * 50, "red lips", "brighter skin and a warm tan, please", "tan"]
    enc = TextEncoder("minilm")
    together = enc.encode(texts)
    alone = np.stack([enc.encode([t]).pooled[0] for t in texts])
    np.testing.assert_allclose(together.pooled, alone, atol=1e-4)
    assert together.n_tokens == tuple(enc.encode([t]).n_tokens[0] for t in texts)


def test_uncalibrated_encoder_names_the_calibrate_command(tiny_decoder, tmp_path, monkeypatch):
    monkeypatch.setenv("LIVEFUSE_HOME", str(tmp_path))
    with pytest.raises(CalibrationError, match="livefuse calibrate --encoder"):
        load_prompt_model(tiny_decoder)


def test_e5_pools_and_flags_truncation():
    enc = TextEncoder()
    assert enc.name == "e5" and enc.hidden_size == 384 and enc.max_length == 512 and enc.prefix == "query: "
    out = enc.encode(["a slight smile", "smile " * 600])
    assert out.pooled.shape == (2, 384) and out.truncated == (False, True) and out.n_tokens[1] == 512


def test_default_model_understands_english_and_chinese(model):
    assert model.encoder.name == "e5" and model.meta.glossary is False
    grin, serious, lips, glass, zh_no_smile, zh_style, empty = model.encode(
        ["a big grin", "serious face", "bold red lipstick", "K-beauty glass skin", "不要笑", "温柔的日系妆容感", ""])
    assert grin.edits["smile"] > 0.5 and serious.edits["smile"] < -0.2
    assert lips.edits["lip_tint"] > 0.4
    assert glass.edits["skin_smooth"] > 0.4 and glass.edits["brightness"] > 0.2
    assert zh_no_smile.edits["smile"] < -0.2 and zh_no_smile.encoder_text == "不要笑"   # read as written, no glossary
    assert zh_style.edits["blush"] > 0.3 and not zh_style.unknown
    assert all(v == 0.0 for v in empty.edits.values()) and empty.norm == 0.0
    assert grin.vector.shape == (CONDITION_DIM,) and grin.norm > 0
    assert set(grin.edits) == set(EDIT_NAMES) and all(-1 <= v <= 1 for v in grin.edits.values())


def test_negation_is_scoped_to_its_clause(model):
    (c,) = model.encode(["no red lips, smoky eyes"])
    assert c.edits["lip_tint"] < 0.05 and c.edits["eye_makeup"] > 0.4


def test_a_negation_leaves_the_next_wish_standing(model):
    """"밝은 표정 그리고 블랙 아이라이너 빼고" (a bright expression, and leave out black eyeliner): the smile is
    asked for, the eyeliner is not; one clause for the whole prompt once dropped the smile with the eyeliner."""
    (c,) = model.encode(["밝은 표정 그리고 블랙 아이라이너 빼고 해줘"])
    assert c.edits["smile"] > 0.3 and c.edits["eyeliner"] < 0.05 and c.edits["eye_makeup"] < 0.05
    (c,) = model.encode(["화장 빼고 웃는 얼굴로"])
    assert c.edits["smile"] > 0.3
    (c,) = model.encode(["メイクなしで笑顔"])          # Japanese: no makeup, and a smile
    assert c.edits["smile"] > 0.3
    (c,) = model.encode(["不要化妆要微笑"])            # Chinese: no makeup, a smile wanted
    assert c.edits["smile"] > 0.3


def test_negation_stem_and_gate():
    assert negation_stem("give me without self-assured") == "give me self-assured"
    assert negation_stem("don't want red lips") == "red lips"
    assert negation_stem("not smiling") == "smiling"
    assert negation_stem("a big grin") is None and negation_stem("nothing notable") is None
    assert negation_stem("no") is None
    # Portuguese "no" is "in / on the" before a place on the face; English and Spanish "no" negate
    assert negation_stem("sorriso no rosto") is None and negation_stem("brilho no seu rosto") is None
    assert negation_stem("sem blush no rosto") == "blush no rosto"
    assert negation_stem("no smile") == "smile" and negation_stem("no quiero sonreír") == "quiero sonreír"
    e = np.array([0.28, -0.3, 0.1, 0.02], np.float32)      # "without X"
    stem = np.array([0.3, 0.7, 0.0, 0.01], np.float32)      # "X"
    # same direction as X (where X does something) is dropped; the opposite, or what X leaves alone, stays
    assert gate_negated(e, stem).tolist() == pytest.approx([0.0, -0.3, 0.1, 0.02])


def test_portuguese_wishes_on_the_face_keep_their_sign(model):
    """"sorriso no rosto" is a smile on the face, not "no smile": the smile it asks for moves (read as a
    negation, the gate would leave it at 0 or below; the committed e5 head reads 0.48-0.88)."""
    for text, edit in (("sorriso no rosto", "smile"), ("um sorriso largo no rosto", "smile"),
                       ("batom vermelho no lábio", "lip_tint")):
        (cond,) = model.encode([text])
        assert cond.edits[edit] >= 0.4, (text, cond.summary())
    (cond,) = model.encode(["nada de sorriso no rosto"])
    assert cond.edits["smile"] < 0, cond.summary()


def test_a_negated_mood_asks_for_nothing_in_its_direction(model):
    """Framed negations of moods and styles ("give me without self-assured") once leaked their edits."""
    for mood in ("self-assured", "confident", "professional look", "k-beauty glass skin", "heavy makeup"):
        (pos,) = model.encode([mood])
        for text in (f"give me without {mood}", f"please, not {mood}", f"i want no {mood}"):
            (neg,) = model.encode([text])
            for k, v in pos.edits.items():
                if abs(v) > 0.1:
                    # nothing in X's direction (a frame clause such as "please" may add a trace)
                    assert np.sign(v) * neg.edits[k] <= 0.05, (text, k, neg.edits[k])


def test_long_prompt_is_truncated_and_flagged(model):
    (c,) = model.encode(["a big grin, " + "龍鳳麟" * 600])   # 1800 rare characters: past the prompt limit
    assert c.truncated and len(c.text) == MAX_PROMPT_CHARS and c.token_limit == 512 and c.edits["smile"] > 0.5
    (short,) = model.encode(["a big grin, " + "龍鳳麟" * 10])
    assert not short.truncated


def test_minilm_stays_a_choice_with_the_glossary(minilm):
    assert minilm.encoder.name == "minilm" and minilm.meta.glossary is True
    grin, zh = minilm.encode(["a big grin", "不要笑"])
    assert grin.edits["smile"] > 0.5 and zh.encoder_text == "don't smile" and zh.edits["smile"] < -0.2


# The product brief's own prompts, and the edits a person asking for them expects.
BRIEF = {
    # soft Japanese makeup: blush, smoother skin, a touch warmer
    "温柔的日系妆容感": {"blush": +1, "skin_smooth": +1},
    # western sculpted features: contour, a slimmer face, a narrower nose
    "欧美立体五官": {"contour": +1},
    # Korean clear "glass skin" nude makeup: smooth skin with a dewy glow (清透, clear and dewy, is what
    # skin_glow paints; it read as brightness before there was a glow)
    "韩系清透裸妆": {"skin_smooth": +1, "skin_glow": +1},
    # more confident, a slight smile, more professional: smile up, contour (confidence) up.
    # Not asserted: polished skin (skin_smooth +0.15 with the committed head; other fits have read it below 0)
    "让她看起来更自信、带点微笑、职业感强一点": {"smile": +1, "contour": +1},
}


def test_the_briefs_chinese_prompts_move_the_expected_edits(model):
    for text, cond in zip(BRIEF, model.encode(list(BRIEF))):
        for edit, sign in BRIEF[text].items():
            assert sign * cond.edits[edit] > 0.1, (text, edit, cond.summary())
        assert not cond.unknown and not cond.truncated


def test_awkward_input_is_handled_in_bounded_time(model):
    import time

    cases = {
        "mixed": "a big smile, 美白",
        "emoji": "😀😀 big smile 💄 red lips ✨",
        "only_emoji": "🙂🙂🙂",
        "empty": "",
        "blank": " \t\n ",
        "controls": "sm\x00ile,\x07\x1b[31m red\u200b lips\u202e",   # a NUL inside a word, a bell, a colour code
        "rtl_arabic": "ابتسامة كبيرة وشفاه حمراء",
        "rtl_hebrew": "חיוך גדול",
        "long": "a big smile, " + "x" * 10_000,
        "long_cjk": "微笑" * 5_000,
    }
    t0 = time.perf_counter()
    out = dict(zip(cases, model.encode(list(cases.values()))))
    assert time.perf_counter() - t0 < 30.0        # one batch; ~1-3 s on two busy cores
    for name, c in out.items():
        assert all(np.isfinite(v) and -1 <= v <= 1 for v in c.edits.values()), name
    assert out["mixed"].edits["smile"] > 0.3 and out["mixed"].clauses == ("a big smile", "美白")
    assert out["emoji"].edits["smile"] > 0.3 and out["emoji"].edits["lip_tint"] > 0.3
    assert all(v == 0.0 for v in out["empty"].edits.values()) and all(v == 0.0 for v in out["blank"].edits.values())
    assert "\x00" not in out["controls"].text and "[31m" not in out["controls"].text   # the colour code goes whole
    assert out["controls"].edits["lip_tint"] > 0.2
    assert out["rtl_arabic"].edits["smile"] > 0.2 and out["rtl_hebrew"].edits["smile"] > 0.2
    assert len(out["long"].text) <= 2000 and out["long"].edits["smile"] > 0.3 and out["long"].truncated
    assert len(out["long_cjk"].text) <= 2000 and out["long_cjk"].truncated


def test_artifact_round_trip_and_bad_files(tmp_path):
    projector, head, meta = load_artifact(DEFAULT_ARTIFACT)
    path = save_artifact(tmp_path / "a.safetensors", projector, head, meta)
    p2, h2, m2 = load_artifact(path)
    assert m2 == meta
    for a, b in zip(list(projector.state_dict().values()) + list(head.state_dict().values()),
                    list(p2.state_dict().values()) + list(h2.state_dict().values())):
        assert np.array_equal(a.numpy(), b.numpy())
    with pytest.raises(CalibrationError, match="livefuse calibrate"):
        load_artifact(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CalibrationError, match="livefuse calibrate"):
        load_artifact(tmp_path / "junk.safetensors")


def test_artifact_for_another_encoder_is_refused(tiny_decoder):
    with pytest.raises(CalibrationError, match="recalibrate: livefuse calibrate --encoder"):
        load_prompt_model(tiny_decoder, DEFAULT_ARTIFACT)
    with pytest.raises(CalibrationError, match="recalibrate: livefuse calibrate --encoder"):
        load_prompt_model("minilm", DEFAULT_ARTIFACT)     # an e5 head on MiniLM
    with pytest.raises(CalibrationError, match="recalibrate: livefuse calibrate --encoder e5"):
        load_prompt_model(None, MINILM_ARTIFACT)


def test_head_output_is_bounded():
    import torch

    head = EditHead()
    c = ConditionProjector(8)(torch.randn(5, 8) * 100)
    out = head(c)
    assert out.shape == (5, len(EDIT_NAMES)) and out.abs().max() <= 1.0


# Free Chinese, phrased the way people type it, not the corpus' phrasings (never trained on): what a
# user expects each to do. The glossary was written for the corpus and drops characters in half of them.
FREE_CHINESE = {
    "笑得灿烂一些": {"smile": +1}, "嘴唇涂成正红色": {"lip_tint": +1}, "脸颊透出红晕": {"blush": +1},
    "皮肤再白一点": {"brightness": +1}, "眼睛放大": {"eye_size": +1}, "脸瘦一圈": {"face_slim": +1},
    "眉毛挑高": {"brow_raise": +1}, "黑白照片的效果": {"saturation": -1}, "板着脸，别笑": {"smile": -1},
    "晒成小麦色的皮肤": {"tan": +1}, "画个烟熏眼": {"eye_makeup": +1}, "皮肤磨得光滑一点": {"skin_smooth": +1},
    "颜色鲜艳一些": {"saturation": +1}, "鼻子窄一点": {"nose_width": -1}, "一脸疲惫": {"skin_smooth": -1},
}


def test_free_chinese_outside_the_glossary_works_on_e5(model):
    """Why the glossary is no longer the Chinese path: e5 reads these as written (all 15 with the committed
    head; "脸瘦一圈", a face one size slimmer, only just, and other fits have missed it, so two misses are
    allowed; docs/prompts.md); through the glossary (MiniLM's path) most lose characters."""
    missed = []
    for text, cond in zip(FREE_CHINESE, model.encode(list(FREE_CHINESE))):
        for edit, sign in FREE_CHINESE[text].items():
            if not sign * cond.edits[edit] > 0.1:
                missed.append((text, edit, cond.summary()))
        assert cond.encoder_text == normalise_prompt(text) and not cond.unknown
    assert len(missed) <= 2, missed
    dropped = [t for t in FREE_CHINESE if glossary.translate(normalise_prompt(t))[1]]
    assert len(dropped) >= 7


# The chin, nose length, gloss, glow, even tone, forehead and eyeliner edits as people type them in the eight
# languages, none of them a corpus prompt (the test checks). Known misses, left out and named in docs/prompts.md
# (Known limits): a wish and its negation in one clause ("piel mate sin brillos"), Spanish 'con' inside a wish
# ("labios con brillo"), a shorter nose in Portuguese worded otherwise than the corpus ("deixa meu nariz mais
# curto"), and German "Lippen mit viel Glanz" (read as bigger eyes).
NEW_EDIT_PROMPTS = {
    ("chin", +1): ["give me a pointy V-line chin", "想要尖一点的下巴", "quiero una barbilla más afilada", "un menton plus pointu",
                   "ein spitzeres Kinn bitte", "あごをシャープに", "턱을 뾰족하게", "queixo mais fino e pontudo"],
    ("chin", -1): ["a shorter chin please", "下巴短一些", "una barbilla más corta", "un menton plus court", "ein kürzeres Kinn",
                   "あごを短めにして"],
    ("nose_length", -1): ["make my nose shorter", "鼻子短一些", "una nariz más corta", "un nez plus court", "eine kürzere Nase",
                          "鼻を短く", "코를 짧게"],
    ("lip_gloss", +1): ["shiny glossy lips please", "嘴唇亮晶晶的", "des lèvres brillantes", "Lippen schön glänzend bitte", "ツヤツヤの唇",
                        "촉촉하게 빛나는 입술", "quero os lábios brilhando"],
    ("eyeliner", +1): ["add a thin black eyeliner please", "帮我画一条细细的眼线", "目尻にアイラインを足して", "아이라인 좀 그려줘",
                       "ponme un delineado fino", "ajoute un trait d'eye-liner fin", "bitte einen feinen Lidstrich",
                       "faz um delineado fininho"],
    ("lip_gloss", -1): ["matte lips please", "嘴唇要哑光的", "quiero los labios mate", "des lèvres mates", "die Lippen bitte matt", "唇はマットに"],
    ("skin_glow", +1): ["a dewy glowing highlight", "脸上打点高光", "piel luminosa con iluminador", "un teint lumineux avec de l'enlumineur",
                        "Highlighter auf die Wangenknochen", "ハイライトを入れて", "하이라이터로 광채", "passa iluminador nas maçãs do rosto"],
    ("skin_glow", -1): ["matte skin, no shine", "皮肤哑光一点", "テカリのないマット肌", "번들거림 없는 매트 피부"],
    ("even_tone", +1): ["even out the redness on my face", "脸上的泛红遮一下", "un tono de piel más parejo", "un teint plus uniforme",
                        "eine gleichmäßigere Hautfarbe", "顔の赤みを消して", "피부톤을 고르게", "deixa o tom da pele mais uniforme"],
    ("forehead", -1): ["make my forehead smaller", "额头小一些", "una frente más chica", "un front moins grand",
                       "meine Stirn kleiner machen", "おでこを狭めに", "이마를 작게", "deixa minha testa menor"],
    ("forehead", +1): ["I'd like a taller forehead", "额头高一些", "que mi frente se vea más alta", "un front plus haut s'il te plaît",
                       "die Stirn etwas höher", "おでこを広めに", "이마를 넓게", "quero a testa mais alta"],
}


# "N years older / younger" in the eight languages, worded unlike the corpus (twenty years: the corpus says five
# and ten). Looking younger reads as smoother, brighter skin in every language; looking older reads as rougher
# skin or as nothing, never as younger (the lexicons hold a number of years older, so that Korean "10살 더 들어
# 보이게" and German "10 Jahre älter" do not read as younger). Known misses, named in docs/prompts.md (Known
# limits): the English, Chinese and Korean "twenty years older" read as nothing.
AGE_PROMPTS = {
    +1: ["make me look twenty years younger", "年轻二十岁", "20歳若く見せて", "20살 어려 보이게", "veinte años más joven, por favor",
         "rajeunis-moi de vingt ans", "zwanzig Jahre jünger bitte", "me deixa vinte anos mais nova"],
    -1: ["make me look twenty years older", "老二十岁", "20歳老けて見せて", "20살 더 들어 보이게", "veinte años mayor, por favor",
         "vieillis-moi de vingt ans", "zwanzig Jahre älter bitte", "me deixa vinte anos mais velha"],
}
AGE_OLDER_MISSES = {"make me look twenty years older", "老二十岁", "20살 더 들어 보이게"}


@pytest.mark.parametrize("sign", [+1, -1])
def test_a_number_of_years_younger_or_older_reads_the_right_way(model, sign):
    texts = AGE_PROMPTS[sign]
    train, held, _ = load_corpus()
    assert not {t.lower() for t in texts} & {r.text.lower() for r in train + held}
    for text, cond in zip(texts, model.encode(texts)):
        smooth = cond.edits["skin_smooth"]
        assert sign * smooth > -0.05, (text, cond.summary())          # never the other way
        if sign > 0 or text not in AGE_OLDER_MISSES:
            assert sign * smooth > 0.1, (text, cond.summary())


@pytest.mark.parametrize("edit,sign", list(NEW_EDIT_PROMPTS))
def test_the_shape_and_finish_edits_are_understood_in_every_language(model, edit, sign):
    texts = NEW_EDIT_PROMPTS[(edit, sign)]
    train, held, _ = load_corpus()
    assert not {t.lower() for t in texts} & {r.text.lower() for r in train + held}
    for text, cond in zip(texts, model.encode(texts)):
        assert sign * cond.edits[edit] > 0.1, (text, cond.summary())
