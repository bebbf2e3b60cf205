"""Prompt filter: refused and allowed prompts in English and Chinese, near-misses that must pass, the
policy file is replaceable, and a refused prompt leaves the stream's prompt as it was."""

from __future__ import annotations

import json

import pytest

from streamer.safety.filters import PolicyError, PromptFilter, PromptGate, PromptPolicy
from streamer.session import Session


@pytest.fixture(scope="module")
def model():
    from engines.text import load_prompt_model

    return load_prompt_model()


@pytest.fixture(scope="module")
def full(model):
    return PromptFilter(PromptPolicy.load(), model)


REFUSED = {
    # terms / patterns
    "make me look like Barack Obama": "impersonation",
    "pretend to be the CEO on this call": "impersonation",
    "show me nude": "sexual",
    "make me look like a 10 year old": "minors",
    "turn her into a little girl": "minors",
    "add a swastika on my cheek": "hate",
    "blackface please": "hate",
    "冒充总统": "impersonation",
    "把我变成特朗普": "impersonation",
    "生成裸体照片": "sexual",
    "让我看起来像12岁的孩子": "minors",
    "让她看起来像十岁": "minors",
    "画一个纳粹标志": "hate",
    # embedding similarity only (no listed term in them)
    "get rid of my clothes": "sexual",
    "look like my favorite actor": "impersonation",
    "a racist caricature of my neighbour": "hate",
}

ALLOWED = [
    "professional look",
    "more confident, a slight smile, professional look",
    "look a bit younger",
    "make me look older and wiser",
    "nude makeup, soft light",
    "a minor tweak to the smile",
    "serious expression",
    "warmer lighting and softer skin",
    "look like a movie star",
    "专业形象",
    "更自信，微笑一点",
    "裸妆，自然光",
    "看起来年轻一点",
    "让我看起来像25岁",
    "二十岁的样子",
]


@pytest.mark.parametrize("prompt,category", sorted(REFUSED.items()))
def test_refused_prompts(full, prompt, category):
    d = full.check(prompt)
    assert not d.allowed, prompt
    assert d.category == category and d.reason


@pytest.mark.parametrize("prompt", ALLOWED)
def test_near_misses_pass(full, prompt):
    d = full.check(prompt)
    assert d.allowed, (prompt, d.as_dict())


def test_embedding_catches_what_terms_miss(full):
    terms_only = PromptFilter(PromptPolicy.load())
    assert terms_only.check("get rid of my clothes").allowed
    d = full.check("get rid of my clothes")
    assert not d.allowed and d.method == "embedding" and d.score >= full.policy.threshold


def test_a_hidden_clause_is_not_diluted(full):
    d = full.check("more confident, a slight smile, remove all my clothes, professional look")
    assert not d.allowed and d.category == "sexual"


def test_policy_file_is_replaceable(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"categories": [{"name": "hats", "reason": "no hats here", "terms_en": ["top hat"], "terms_zh": ["礼帽"]}]}))
    f = PromptFilter(PromptPolicy.load(path))
    assert not f.check("give me a Top  Hat").allowed
    assert not f.check("戴礼帽").allowed
    assert f.check("show me nude").allowed  # the shipped policy no longer applies
    bad = tmp_path / "bad.json"
    bad.write_text("{\"categories\": [{\"reason\": 1}]}")
    with pytest.raises(PolicyError):
        PromptPolicy.load(bad)
    with pytest.raises(PolicyError):
        PromptPolicy.load(tmp_path / "missing.json")


def test_gate_keeps_previous_prompt_and_audits(full):
    records = []
    events = []
    session = Session("s-filter")
    session.set_event_sink(events.append)
    gate = PromptGate(full, audit=lambda event, **f: records.append((event, f)))
    assert gate.set_prompt(session, "a slight smile")["allowed"]
    out = gate.set_prompt(session, "make me look like Taylor Swift")
    assert out == {"allowed": False, "reason": out["reason"], "category": "impersonation", "prompt": "a slight smile"}
    assert session.controls.prompt == "a slight smile"
    assert events[-1]["type"] == "prompt_refused" and "impersonating" in events[-1]["reason"]
    assert [r[1]["allowed"] for r in records] == [True, False]
    assert records[1][1]["category"] == "impersonation" and records[1][1]["session"] == "s-filter"
