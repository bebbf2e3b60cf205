"""streamer/session/prompts.py: the PromptCache never blocks, shares entries across spellings, evicts, counts."""

from __future__ import annotations

import threading
import time

import pytest

from engines.prompt.model import load_prompt_model
from streamer.session.prompts import PromptCache, load_prompt_cache


@pytest.fixture(scope="module")
def model():
    return load_prompt_model()


class GatedModel:
    """Wraps the real model; each encoding waits for `gate`, so a test can see the 'still encoding' state."""

    def __init__(self, model, fail_on: str | None = None) -> None:
        self.model, self.id, self.fail_on = model, model.id, fail_on
        self.gate = threading.Event()
        self.calls: list[str] = []

    def encode(self, texts):
        self.calls.extend(texts)
        assert self.gate.wait(10)
        if self.fail_on is not None and self.fail_on in texts[0]:
            raise RuntimeError("encoder exploded")
        return self.model.encode(texts)


def test_get_returns_none_while_encoding_then_the_condition(model):
    gated = GatedModel(model)
    cache = PromptCache(gated)
    try:
        t0 = time.perf_counter()
        assert cache.get("A big grin") is None
        assert cache.get("a big grin ") is None      # same key, still pending: no second encoding
        assert (time.perf_counter() - t0) < 0.05      # never blocks the caller
        gated.gate.set()
        cond = cache.wait("a big grin", timeout=10)
        assert cond is not None and cond.edits["smile"] > 0.5
        assert cache.get("  A BIG\tgrin") is cond      # normalised spelling hits the same entry
        assert gated.calls.count("a big grin") == 1
        assert cache.hits >= 1 and cache.misses >= 1
    finally:
        cache.close()


def test_keys_include_the_encoder(model):
    a, b = PromptCache(model), PromptCache(model)
    assert a.key("Smile") == ("smile", model.id) == b.key(" smile ")
    a.close(), b.close()


def test_lru_evicts_the_oldest_and_counts(model):
    cache = PromptCache(model, capacity=2)
    try:
        for text in ("smile", "red lips", "smile", "smoky eyes"):
            cache.wait(text, timeout=30)
        assert cache.evictions == 1 and len(cache) == 2
        assert cache.get("smile") is not None          # used recently: kept
        assert cache.get("red lips") is None           # evicted: encoding again
        assert cache.stats()["misses"] == 4 and cache.stats()["hits"] >= 2
    finally:
        cache.close()


def test_empty_prompt_is_no_edits_without_encoding(model):
    gated = GatedModel(model)
    cache = PromptCache(gated)
    cond = cache.get("   \u200b ")
    assert cond is not None and all(v == 0 for v in cond.edits.values()) and not gated.calls
    cache.close()


def test_failed_encoding_is_reported_and_not_retried(model):
    gated = GatedModel(model, fail_on="boom")
    gated.gate.set()
    cache = PromptCache(gated)
    try:
        assert cache.get("boom please") is None
        deadline = time.time() + 10
        while cache.error("boom please") is None and time.time() < deadline:
            time.sleep(0.01)
        assert "encoder exploded" in cache.error("boom please")
        assert cache.get("boom please") is None and gated.calls.count("boom please") == 1
        assert cache.errors == 1
    finally:
        cache.close()


def test_load_prompt_cache_defaults_and_bad_encoder(tmp_path):
    from engines.prompt.encoder import EncoderError

    with pytest.raises(EncoderError):
        load_prompt_cache(str(tmp_path))
    with pytest.raises(ValueError):
        PromptCache(object(), capacity=0)  # type: ignore[arg-type]


def test_prompt_command_prints_the_documented_json(capsys):
    import json

    from streamer.app.cli import main

    assert main(["prompt", "韩系清透裸妆", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"text", "encoder", "condition", "edits", "cached", "encode_ms"} <= set(out)
    assert out["text"] == "韩系清透裸妆" and out["condition"]["dim"] == 512 and out["condition"]["norm"] > 0
    assert out["edits"]["skin_smooth"] > 0.4 and out["cached"] is False and out["encode_ms"] > 0
    assert main(["prompt", "smile", "--encoder", "/nonexistent/encoder"]) == 2
