"""engines/edit_vocabulary.py: one list of edits, consistent with itself and with the prompt head."""

from __future__ import annotations

import json

from engines.prompt.head import EditHead
from engines.prompt.model import empty_condition
from engines.edit_vocabulary import APPEARANCE, EDIT_NAMES, EDIT_SPECS, GEOMETRY, SPECS_BY_NAME, vocabulary_json


def test_names_are_unique_wire_names_and_every_range_holds_no_change():
    assert len(EDIT_NAMES) == len(set(EDIT_NAMES)) == 13
    for s in EDIT_SPECS:
        assert s.name.isidentifier() and s.name == s.name.lower() and len(s.name) <= 32
        assert s.low < 0.0 < s.high and s.label and s.minus and s.plus and s.help
        assert s.clip(s.high + 1) == s.high and s.clip(s.low - 1) == s.low and s.clip(0.25) == 0.25


def test_kinds_split_the_names_in_order():
    assert GEOMETRY + APPEARANCE == EDIT_NAMES
    assert GEOMETRY == ("smile", "eye_size", "face_slim", "nose_width", "brow_raise")
    assert SPECS_BY_NAME["lip_tint"].kind == "appearance"


def test_the_prompt_head_reads_one_output_per_edit():
    assert EditHead().names == EDIT_NAMES
    assert tuple(empty_condition("x").edits) == EDIT_NAMES


def test_json_is_the_specs_in_order():
    rows = json.loads(json.dumps(vocabulary_json()))
    assert [r["name"] for r in rows] == list(EDIT_NAMES)
    assert set(rows[0]) == {"name", "label", "kind", "minus", "plus", "help", "low", "high"}
