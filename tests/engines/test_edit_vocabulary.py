"""engines/edit_vocabulary.py: one list of edits, consistent with itself and with the prompt head."""

from __future__ import annotations

import json

from engines.prompt.head import EditHead
from engines.prompt.model import empty_condition
import pytest

from engines.colours import PALETTE, resolve
from engines.edit_plan import colours_for
from engines.edit_vocabulary import APPEARANCE, COLOURED, EDIT_NAMES, EDIT_SPECS, GEOMETRY, SPECS_BY_NAME, vocabulary_json


ONE_SIDED = {"eye_contact", "even_tone", "eyeliner"}   # looking at the lens, an even tone, a line: no opposite worth a slider


def test_names_are_unique_wire_names_and_every_range_holds_no_change():
    assert len(EDIT_NAMES) == len(set(EDIT_NAMES)) == 24
    for s in EDIT_SPECS:
        assert s.name.isidentifier() and s.name == s.name.lower() and len(s.name) <= 32
        assert s.low <= 0.0 < s.high and s.label and s.minus and s.plus and s.help
        assert s.low < 0.0 or s.name in ONE_SIDED       # a one-sided edit has nothing to undo below 0
        assert s.clip(s.high + 1) == s.high and s.clip(s.low - 1) == s.low and s.clip(0.25) == 0.25


def test_kinds_split_the_names_in_order():
    assert GEOMETRY + APPEARANCE == EDIT_NAMES
    assert GEOMETRY == ("smile", "eye_size", "face_slim", "nose_width", "brow_raise", "lip_fullness", "chin", "nose_length",
                        "forehead", "eye_contact")
    assert SPECS_BY_NAME["lip_tint"].kind == "appearance"


def test_the_prompt_head_reads_one_output_per_edit():
    assert EditHead().names == EDIT_NAMES
    assert tuple(empty_condition("x").edits) == EDIT_NAMES


def test_json_is_the_specs_in_order():
    rows = json.loads(json.dumps(vocabulary_json()))
    assert [r["name"] for r in rows] == list(EDIT_NAMES)
    assert set(rows[0]) == {"name", "label", "kind", "minus", "plus", "help", "low", "high", "colour"}
    swatches = {r["name"]: r["colour_hex"] for r in rows if "colour_hex" in r}
    assert set(swatches) == set(COLOURED) == {"lip_tint", "blush", "eye_makeup", "eyeliner", "brow_tint"}
    assert swatches["lip_tint"] == "#b92d4b"                       # rose, the lipstick's default


def test_a_colour_is_a_palette_name_or_hex_and_only_makeup_takes_one():
    assert resolve("Coral") == PALETTE["coral"] and resolve("#0a0B0c") == (10, 11, 12) and resolve("ff0000") == (255, 0, 0)
    paint = colours_for({"lip_tint": "berry", "blush": "#ff8899"})
    assert paint["lip_tint"] == PALETTE["berry"] and paint["blush"] == (255, 136, 153)
    assert paint["eye_makeup"] == PALETTE[SPECS_BY_NAME["eye_makeup"].colour]
    with pytest.raises(ValueError, match="unknown colour 'teal-ish'.*coral"):
        colours_for({"lip_tint": "teal-ish"})
    with pytest.raises(ValueError, match="'smile' takes no colour; these do: lip_tint, blush, eye_makeup"):
        colours_for({"smile": "red"})
