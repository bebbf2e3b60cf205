"""The page takes its edits from the server (GET /edits): no script holds its own copy of the names."""

from __future__ import annotations

import re
from pathlib import Path

from engines.edit_vocabulary import EDIT_NAMES

WEB = Path(__file__).resolve().parents[2] / "web_client"


def test_no_script_hard_codes_the_edit_names():
    scripts = sorted(WEB.glob("*.js"))
    assert scripts
    for path in scripts:
        code = re.sub(r"//[^\n]*", "", path.read_text(encoding="utf-8"))   # comments may name an edit as an example
        literals = set(re.findall(r"""["'`]([a-z_]+)["'`]""", code)) | set(re.findall(r"\b([a-z_]+)\s*:", code))
        named = literals & set(EDIT_NAMES)
        assert not named, f"{path.name} names edits {sorted(named)}: build from GET /edits instead"


def test_the_page_asks_the_server_for_the_edits():
    app = (WEB / "app.js").read_text(encoding="utf-8")
    assert 'fetch("/edits")' in app
