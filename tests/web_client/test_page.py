"""The page takes its edits from the server (GET /edits): no script holds its own copy of the names; every
slider has a label and the help it points at (tests/e2e drives the sliders in Chromium)."""

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


def _page_elements() -> list[tuple[str, dict[str, str], str]]:
    """(tag, attributes, text up to the next tag) of every element of index.html."""
    from html.parser import HTMLParser

    found: list[tuple[str, dict[str, str], str]] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, {k: v or "" for k, v in attrs}, ""))

        def handle_data(self, data):
            if found:
                tag, attrs, text = found[-1]
                found[-1] = (tag, attrs, text + data)

    Collect().feed((WEB / "index.html").read_text(encoding="utf-8"))
    return found


def test_every_slider_is_labelled_and_its_help_is_on_the_page():
    elements = _page_elements()
    ids = {attrs["id"] for _, attrs, _ in elements if "id" in attrs}
    labelled = {attrs["for"] for tag, attrs, _ in elements if tag == "label" and "for" in attrs}
    sliders = [attrs for tag, attrs, _ in elements if tag == "input" and attrs.get("type") == "range"]
    assert {"strength", "shape", "enhance"} <= {s["id"] for s in sliders}
    for s in sliders:
        assert s["id"] in labelled or s.get("aria-label"), s
        assert set(s.get("aria-describedby", "").split()) <= ids, s


def test_the_face_shape_slider_says_what_it_does_and_starts_at_the_server_s_default():
    elements = _page_elements()
    by_id = {attrs["id"]: (tag, attrs, text) for tag, attrs, text in elements if "id" in attrs}
    label = next(text for tag, attrs, text in elements if tag == "label" and attrs.get("for") == "shape")
    assert label.strip() == "Face shape"
    assert by_id["shape-value"][2].strip() == "server default"
    help_text = " ".join(by_id[by_id["shape"][1]["aria-describedby"]][2].split())
    assert "proportions (eyes, brows, nose)" in help_text and "only its skin changes" in help_text
    assert (by_id["shape"][1]["min"], by_id["shape"][1]["max"]) == ("0", "100")
