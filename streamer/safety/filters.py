"""Prompt policy: refuse prompts in the categories of a replaceable policy file (impersonating real or
public people, sexual content, minors, hate), by terms and patterns per language (en, zh, ja, ko, es, fr,
de, pt) and by sentence-embedding similarity to each category's examples.

An embedding match must beat both the threshold and the nearest *allowed* example by a margin, so
near-misses such as "professional look" or "look a bit younger" pass. Threshold and margin belong to the
encoder (`Similarity`, per encoder name in the policy file): MiniLM's similarities spread over 0.25-0.85,
e5's sit in a narrow band (0.8-0.95), so one number cannot serve both. The filter reads no prompt itself:
it takes the prompt's one reading (`engines.text.Condition`: normalised text, clauses, their pooled
embeddings) that the prompt cache also keeps for the edits stage, so a prompt is encoded once. With an
English-only encoder (its calibration translates Chinese through the glossary), clauses in a script it
cannot read are matched by terms and patterns only.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from engines.text import normalise_prompt

if TYPE_CHECKING:  # pragma: no cover
    from engines.text import Condition, PromptModel

DEFAULT_POLICY = Path(__file__).with_name("policy.json")


class PolicyError(ValueError):
    """The policy file is missing or malformed."""


# Languages written without spaces between words (or, in Korean, with particles glued to them): their
# terms match as substrings; every other language's terms match whole words.
SUBSTRING_LANGS = frozenset({"zh", "ja", "ko"})


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    reason: str
    words: tuple[str, ...] = ()        # terms_<lang> of spaced languages: whole-word matches
    substrings: tuple[str, ...] = ()   # terms_zh / _ja / _ko: substring matches (spaces ignored)
    patterns: tuple[str, ...] = ()     # patterns_<lang>, all languages
    examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Similarity:
    """When an embedding match refuses: similarity >= threshold and >= the nearest allowed example's + margin."""
    threshold: float = 0.58
    margin: float = 0.05


@dataclass(frozen=True, slots=True)
class PromptPolicy:
    categories: tuple[Category, ...]
    allowed_examples: tuple[str, ...] = ()
    allow_terms: tuple[str, ...] = ()
    # per encoder name (engines.text.ENCODERS); "default" for any other encoder
    similarity: Mapping[str, Similarity] = field(default_factory=lambda: MappingProxyType({"default": Similarity()}))
    source: str = ""

    def similarity_for(self, encoder: str) -> Similarity:
        return self.similarity.get(encoder) or self.similarity.get("default") or Similarity()

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "PromptPolicy":
        p = Path(path) if path is not None else DEFAULT_POLICY
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
            cats = tuple(_category(c) for c in raw["categories"])
            for c in cats:
                for pat in c.patterns:
                    re.compile(pat)
            sim = raw.get("similarity", {})
            if "threshold" in sim or "margin" in sim:     # one setting for every encoder
                sim = {"default": sim}
            return cls(
                categories=cats,
                allowed_examples=tuple(raw.get("allowed_examples", ())),
                allow_terms=tuple(normalise_prompt(t) for t in raw.get("allow_terms", ())),
                similarity=MappingProxyType({str(name): Similarity(float(v.get("threshold", 0.58)), float(v.get("margin", 0.05)))
                                             for name, v in sim.items()}),
                source=str(p),
            )
        except FileNotFoundError:
            raise PolicyError(f"prompt policy file {p} not found") from None
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise PolicyError(f"prompt policy file {p} is malformed: {exc}") from None


def _category(c: Mapping[str, Any]) -> Category:
    def keyed(prefix: str) -> list[tuple[str, list[str]]]:
        return [(k[len(prefix):], list(v)) for k, v in c.items() if k.startswith(prefix)]

    terms = keyed("terms_")
    return Category(
        name=str(c["name"]),
        reason=str(c.get("reason") or f"{c['name']} is not allowed"),
        words=tuple(normalise_prompt(t) for lang, ts in terms if lang not in SUBSTRING_LANGS for t in ts),
        substrings=tuple(normalise_prompt(t).replace(" ", "") for lang, ts in terms if lang in SUBSTRING_LANGS for t in ts),
        patterns=tuple(str(p) for _, ps in keyed("patterns_") for p in ps),
        examples=tuple(str(e) for e in c.get("examples", ())),
    )


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


def _latin_only(s: str) -> bool:
    """Every letter is Latin script (what an English-only encoder has a vocabulary for)."""
    return all(not ch.isalpha() or ch.isascii() or unicodedata.name(ch, "").startswith("LATIN") for ch in s)


class PromptFilter:
    """`check(text, reading)` -> PromptDecision. `model` (an `engines.text.PromptModel`) is optional:
    without it only terms and patterns are matched. Its encoder embeds the policy's examples once."""

    def __init__(self, policy: PromptPolicy | None = None, model: "PromptModel | None" = None) -> None:
        self.policy = policy or PromptPolicy.load()
        self.model = model
        self.encoder = model.encoder if model is not None else None
        self.similarity = self.policy.similarity_for(model.encoder.name) if model is not None else Similarity()
        # an encoder calibrated through the glossary is English-only: it reads Latin script only
        self.latin_only = bool(model is not None and model.meta.glossary)
        self._term_res = [
            (c, [(t, re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, t.split())) + r"(?!\w)")) for t in c.words])
            for c in self.policy.categories
        ]
        self._patterns = [(c, [re.compile(p, re.IGNORECASE) for p in c.patterns]) for c in self.policy.categories]
        self._examples: list[tuple[Category, np.ndarray, tuple[str, ...]]] = []
        self._allowed: np.ndarray | None = None
        if self.encoder is not None:
            readable = (lambda texts: tuple(t for t in texts if _latin_only(t))) if self.latin_only else tuple
            for c in self.policy.categories:
                examples = readable(c.examples)
                if examples:
                    self._examples.append((c, self._embed(examples), examples))
            anchors = readable(self.policy.allowed_examples)
            if anchors:
                self._allowed = self._embed(anchors)

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
            for term in cat.substrings:
                if term in compact:
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
        best: PromptDecision | None = None
        for cat, name, s, allow in self._matches(reading):
            if s >= self.similarity.threshold and s >= allow + self.similarity.margin and (best is None or s > best.score):
                best = PromptDecision(False, cat.name, cat.reason, "embedding", name, s)
        return best or PromptDecision(True)

    def _matches(self, reading: "Condition") -> list[tuple[Category, str, float, float]]:
        """Per category: its nearest example, the similarity and, for the clause that matched it, the
        nearest allowed example's similarity."""
        e = _readable_embeddings(reading, self.latin_only)
        if not len(e) or not self._examples:
            return []
        e = _unit(e)
        allow = (e @ self._allowed.T).max(axis=1) if self._allowed is not None else np.zeros(len(e))
        out = []
        for cat, ex, names in self._examples:
            sims = e @ ex.T
            i, j = np.unravel_index(int(np.argmax(sims)), sims.shape)
            out.append((cat, names[j], float(sims[i, j]), float(allow[i])))
        return out


def nearest(flt: PromptFilter, reading: "Condition") -> tuple[float, float, str | None]:
    """(best similarity to a refused example, the allowed similarity of that clause, its category): what
    bench/policy_margins.py reports to choose an encoder's threshold and margin."""
    matches = flt._matches(reading)
    if not matches:
        return 0.0, 0.0, None
    cat, _, s, allow = max(matches, key=lambda m: m[2])
    return s, allow, cat.name


def _unit(v: np.ndarray) -> np.ndarray:
    return v / (np.linalg.norm(v, axis=1, keepdims=True) + 1e-12)


def _readable_embeddings(reading: "Condition", latin_only: bool) -> np.ndarray:
    """The rows of the reading's embeddings (its clauses, then the whole prompt) whose text the encoder
    could read: Chinese the glossary left untranslated, kana or hangul say nothing to an English encoder."""
    rows = np.asarray(reading.embeddings, np.float32)
    if not latin_only:
        return rows
    texts = list(reading.clauses) + ([reading.encoder_text] if len(reading.clauses) > 1 else [])
    keep = [i for i, t in enumerate(texts[: len(rows)]) if _latin_only(t)]
    return rows[keep]


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
