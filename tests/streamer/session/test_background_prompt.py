"""Background words in a prompt set the session's background through the real product (the prompt gate
and its audit), the face-edit clauses still reach the edits, and a picture asked for by words without an
uploaded one is refused with what to do."""

from __future__ import annotations

import pytest

from engines.background_words import read_background
from streamer.session.session import Session


@pytest.mark.parametrize("text,mode,colour", [
    ("blur the background", "blur", None), ("背景虚化", "blur", None), ("背景をぼかして", "blur", None),
    ("fondo desenfocado", "blur", None), ("green screen background", "color", (0, 255, 0)),
    ("绿幕", "color", (0, 255, 0)), ("blue screen", "color", (0, 0, 255)), ("a white background", "color", (255, 255, 255)),
    ("replace the background with the beach", "image", None), ("背景换成海边", "image", None),
])
def test_term_table_reads_background_requests(text, mode, colour):
    words = read_background(text)
    assert words is not None and words.spec.mode == mode and words.rest == ""
    if colour:
        assert words.spec.color == colour


def test_face_edits_and_other_words_are_left_to_the_prompt():
    for text in ("a slight smile", "warmer skin, brighter eyes", "background music please", "a warm glow"):
        assert read_background(text) is None
    words = read_background("a slight smile, blur the background")
    assert words.spec.mode == "blur" and words.rest == "a slight smile"
    assert read_background("keep the original background").spec is None


def test_the_product_applies_background_words(astronaut):
    from streamer.app.assembly import Product, ProductConfig

    product = Product(ProductConfig())
    try:
        session = Session("bg-words")
        out = product.set_prompt(session, "a slight smile, 背景虚化")
        assert out["allowed"] and out["background"] == {"mode": "blur", "strength": 0.7}
        assert session.controls.background.mode == "blur" and session.controls.prompt == "a slight smile"
        out = product.set_prompt(session, "replace the background with a beach")
        assert out["allowed"] is False and "upload one" in out["reason"] and session.controls.background.mode == "blur"
        picture = session.add_background(astronaut)
        out = product.set_prompt(session, "replace the background with a beach")
        assert out["allowed"] and session.controls.background.image_id == picture
        assert session.controls.prompt == "a slight smile"          # a background-only prompt keeps the edits
        out = product.set_prompt(session, "keep the original background")
        assert out["background"] == {"mode": "none"} and session.controls.background is None
    finally:
        product.close()
