"""engines/prompt/colour_words.py and the prompt's colours: a shade named in any prompt language lands on
the makeup its clause asks for."""

from __future__ import annotations

import pytest

from engines.prompt.colour_words import colours_in
from engines.prompt.model import load_prompt_model


@pytest.fixture(scope="module")
def model():
    return load_prompt_model()


@pytest.mark.parametrize("text,want", [
    ("hot pink lips", ["hot pink"]),            # the longer word wins
    ("dusty rose lipstick", ["dusty rose"]),
    ("豆沙色口红", ["dusty rose"]),                # 口红 (lipstick) holds 红 but names no colour
    ("正红色口红", ["red"]),
    ("腮红", []), ("青春感", []),
    ("rouge à lèvres corail", ["coral"]),          # French lipstick is not red
    ("Rouge in Koralle", ["coral"]),               # German blush is not red
    ("lèvres rouges", ["red"]),
    ("brauner Lidschatten", ["brown"]),
    ("sombra dorada y labios rojos", ["gold", "red"]),
    ("credit card", []),                            # "red" inside a word is not red
])
def test_colour_words(text, want):
    assert colours_in(text) == want


@pytest.mark.parametrize("text,colour", [
    ("coral lipstick", "coral"), ("berry lips", "berry"),
    ("豆沙色口红", "dusty rose"), ("珊瑚色口红", "coral"),
    ("コーラルのリップ", "coral"), ("ベリー系のリップ", "berry"),
    ("코랄 립스틱", "coral"), ("batom vinho", "wine"),
    ("rouge à lèvres corail", "coral"), ("Lippenstift in Pflaume", "plum"), ("labial naranja", "orange"),
])
def test_a_lipstick_in_a_named_colour_is_lipstick_in_that_colour(model, text, colour):
    (c,) = model.encode([text])
    assert c.edits["lip_tint"] > 0.4 and c.painted() == {"lip_tint": colour}, (c.summary(), dict(c.colours))


def test_each_clause_colours_its_own_makeup(model):
    (c,) = model.encode(["berry lips and peach blush"])
    assert c.painted() == {"lip_tint": "berry", "blush": "peach"}
    (c,) = model.encode(["gold eyeshadow and red lips"])
    assert c.painted() == {"eye_makeup": "gold", "lip_tint": "red"}
    (c,) = model.encode(["a big smile in my black jacket"])        # a colour with no makeup asked for paints nothing
    assert c.painted() == {} and c.edits["smile"] > 0.3
    (c,) = model.encode(["black winged eyeliner and gold eyeshadow"])   # liner and shadow, each its own shade
    assert c.painted() == {"eyeliner": "black", "eye_makeup": "gold"}


@pytest.mark.parametrize("text", ["a deep sun tan", "小麦色皮肤", "日焼けした肌", "gebräunte Haut", "un bronzage", "pele bronzeada"])
def test_a_tan_is_the_tan_edit(model, text):
    (c,) = model.encode([text])
    assert c.edits["tan"] > 0.4 and c.edits["tan"] == max(c.edits.values()), c.summary()
