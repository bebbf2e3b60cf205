"""Prompt policy: refuse prompts in the categories of a replaceable policy file (impersonating real or
public people, sexual content, minors, hate), by terms in English and Chinese and by sentence-embedding
similarity to each category's examples.

An embedding match must beat both the policy's threshold and the nearest *allowed* example by a margin,
so near-misses such as "professional look" or "look a bit younger" pass. The filter reads no prompt
itself: it takes the prompt's one reading (`engines.text.Condition`: normalised text, clauses, their
pooled embeddings) that the prompt cache also keeps for the edits stage, so a prompt is encoded once.
Clauses the encoder saw in a script it does not know (Chinese the glossary left untranslated) are
matched by terms and patterns only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from engines.text import normalise_prompt

if TYPE_CHECKING:  # pragma: no cover
    from engines.text import Condition, PromptModel

DEFAULT_POLICY = Path(__file__).with_name("policy.json")


class PolicyError(ValueError):
    """The policy file is missing or malformed."""


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    reason: str
    terms_en: tuple[str, ...] = ()
    terms_zh: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PromptPolicy:
    categories: tuple[Category, ...]
    allowed_examples: tuple[str, ...] = ()
    allow_terms: tuple[str, ...] = ()
    threshold: float = 0.58
    margin: float = 0.05
    source: str = ""

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "PromptPolicy":
        p = Path(path) if path is not None else DEFAULT_POLICY
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
            cats = tuple(
                Category(
                    name=str(c["name"]),
                    reason=str(c.get("reason") or f"{c['name']} is not allowed"),
                    terms_en=tuple(normalise_prompt(t) for t in c.get("terms_en", ())),
                    terms_zh=tuple(normalise_prompt(t) for t in c.get("terms_zh", ())),
                    patterns=tuple(c.get("patterns_en", ())) + tuple(c.get("patterns_zh", ())),
                    examples=tuple(c.get("examples", ())),
                )
                for c in raw["categories"]
            )
            for c in cats:
                for pat in c.patterns:
                    re.compile(pat)
            sim = raw.get("similarity", {})
            return cls(
                categories=cats,
                allowed_examples=tuple(raw.get("allowed_examples", ())),
                allow_terms=tuple(normalise_prompt(t) for t in raw.get("allow_terms", ())),
                threshold=float(sim.get("threshold", 0.58)),
                margin=float(sim.get("margin", 0.05)),
                source=str(p),
            )
        except FileNotFoundError:
            raise PolicyError(f"prompt policy file {p} not found") from None
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise PolicyError(f"prompt policy file {p} is malformed: {exc}") from None


@dataclass(frozen=True, slots=True)
class PromptDecision:
    allowed: bool
    category: str | None = None
    reason: str = ""
    method: str | None = None        # "term", "pattern" or "embedding"
    matched: str | None = None       # the term, or the nearest example
    score: float = 0.0               # embedding similarity of the best refused category

    def as_dict(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "category": self.category, "reason": self.reason, "method": self.method,
                "matched": self.matched, "score": round(self.score, 3)}


def _has_cjk(s: str) -> bool:
    return any("\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" for ch in s)


class PromptFilter:
    """`check(text, reading)` -> PromptDecision. `model` (an `engines.text.PromptModel`) is optional:
    without it only terms and patterns are matched. Its encoder embeds the policy's examples once."""

    def __init__(self, policy: PromptPolicy | None = None, model: "PromptModel | None" = None) -> None:
        self.policy = policy or PromptPolicy.load()
        self.model = model
        self.encoder = model.encoder if model is not None else None
        self._term_res = [
            (c, [(t, re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, t.split())) + r"(?!\w)")) for t in c.terms_en])
            for c in self.policy.categories
        ]
        self._patterns = [(c, [re.compile(p, re.IGNORECASE) for p in c.patterns]) for c in self.policy.categories]
        self._examples: list[tuple[Category, np.ndarray, tuple[str, ...]]] = []
        self._allowed: np.ndarray | None = None
        if self.encoder is not None:
            for c in self.policy.categories:
                if c.examples:
                    self._examples.append((c, self._embed(c.examples), c.examples))
            if self.policy.allowed_examples:
                self._allowed = self._embed(self.policy.allowed_examples)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        return _unit(np.asarray(self.encoder.encode(list(texts)).pooled, np.float32))  # type: ignore[union-attr]

    def check(self, text: str, reading: "Condition | None" = None) -> PromptDecision:
        """`reading` is the prompt's Condition (from the prompt cache); without one the filter's model
        reads the prompt here (the CLI and tests)."""
        norm = normalise_prompt(text)
        for allow in self.policy.allow_terms:
            norm = norm.replace(allow, " ")
        compact = norm.replace(" ", "")
        for cat, terms in self._term_res:
            for term, rx in terms:
                if rx.search(norm):
                    return PromptDecision(False, cat.name, cat.reason, "term", term)
            for term in cat.terms_zh:
                if term.replace(" ", "") in compact:
                    return PromptDecision(False, cat.name, cat.reason, "term", term)
        for cat, pats in self._patterns:
            for rx in pats:
                m = rx.search(norm) or rx.search(compact)
                if m:
                    return PromptDecision(False, cat.name, cat.reason, "pattern", m.group(0))
        if not self._examples or not norm.strip():
            return PromptDecision(True)
        if reading is None:
            reading = self.model.encode([text])[0]  # type: ignore[union-attr]
        e = _readable_embeddings(reading)
        if not len(e):
            return PromptDecision(True)
        e = _unit(e)
        allow = (e @ self._allowed.T).max(axis=1) if self._allowed is not None else np.zeros(len(e))
        best: PromptDecision | None = None
        for cat, ex, names in self._examples:
            sims = e @ ex.T
            i, j = np.unravel_index(int(np.argmax(sims)), sims.shape)
            s = float(sims[i, j])
            if s >= self.policy.threshold and s >= float(allow[i]) + self.policy.margin and (best is None or s > best.score):
                best = PromptDecision(False, cat.name, cat.reason, "embedding", names[j], s)
        return best or PromptDecision(True)


def _unit(v: np.ndarray) -> np.ndarray:
    return v / (np.linalg.norm(v, axis=1, keepdims=True) + 1e-12)


def _readable_embeddings(reading: "Condition") -> np.ndarray:
    """The rows of the reading's embeddings (its clauses, then the whole prompt) whose text the encoder
    could read: a clause still in Chinese after the glossary says nothing to an English encoder."""
    texts = list(reading.clauses) + ([reading.encoder_text] if len(reading.clauses) > 1 else [])
    keep = [i for i, t in enumerate(texts[: len(reading.embeddings)]) if not _has_cjk(t)]
    return np.asarray(reading.embeddings, np.float32)[keep]


Understand = Callable[[str], "Condition | None"]   # prompt text -> its reading (None: none could be made)


class PromptGate:
    """The prompt path's front door: a refused prompt is answered with the reason, audited, and the stream
    keeps its previous prompt. Fits a `set_prompt(session, text) -> dict` hook; `apply` does the real
    update (default: `session.update(prompt=text)`). `understand` gives the prompt's one reading (the
    product passes the prompt cache's blocking lookup, so the edits stage finds it ready); it blocks,
    so call `set_prompt` off the event loop."""

    def __init__(self, filter: PromptFilter, audit: Callable[..., None] | None = None,
                 apply: Callable[[Any, str], dict[str, Any]] | None = None, max_length: int = 500,
                 understand: Understand | None = None) -> None:
        self.filter = filter
        self.audit = audit
        self.apply = apply
        self.max_length = max_length
        self.understand = understand

    def set_prompt(self, session: Any, text: str) -> dict[str, Any]:
        if len(text) > self.max_length:
            decision = PromptDecision(False, "length", f"prompt is longer than {self.max_length} characters")
        else:
            reading = self.understand(text) if self.understand is not None else None
            decision = self.filter.check(text, reading)
        if self.audit is not None:
            self.audit("prompt", session=session.id, text=text[: self.max_length], **decision.as_dict())
        if not decision.allowed:
            session.notify({"type": "prompt_refused", "reason": decision.reason, "category": decision.category})
            return {"allowed": False, "reason": decision.reason, "category": decision.category, "prompt": session.controls.prompt}
        if self.apply is not None:
            out = dict(self.apply(session, text))
        else:
            session.update(prompt=text)
            out = {"prompt": text}
        out["allowed"] = True
        return out
