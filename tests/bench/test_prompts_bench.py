"""bench/prompts.py: the prompts it times cover every language it reports, and the memory reader works."""

from __future__ import annotations

from bench.prompts import _rss_mb, _switch_prompts, prompts


def test_timed_prompts_cover_eight_languages():
    rows = prompts(3)
    langs = {lang for lang, _ in rows}
    assert langs == {"en", "zh", "ja", "ko", "es", "fr", "de", "pt"}
    assert all(sum(lang == x for lang, _ in rows) == 3 for x in langs)
    assert len(set(_switch_prompts(25))) == 25         # every uncached switch is a prompt never seen
    assert _rss_mb() > 10
