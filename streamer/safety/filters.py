"""Prompt policy: refuse prompts in the categories of an editable policy file (impersonating a real
person, sexual content, minors, hate) by terms and patterns per language (en, zh, ja, ko, es, fr, de, pt)
as a fast first pass, then by the intent classifier (engines/prompt/intent.py), a head fitted per encoder on the
labelled corpus in data/policy/ with thresholds chosen for the benign pass rate first.

The filter reads no prompt itself: it takes the prompt's one reading (`engines.prompt.model.Condition`: clauses,
their embeddings and the intent head's probabilities for each) that the prompt cache also keeps for the
edits stage, so a prompt is encoded once. A refusal names its category, the clause that triggered it and
what decided (a term, a pattern or the classifier), in words that describe what LiveFuse doesn't make
rather than what the user did. With an English-only encoder (its calibration translates Chinese through
the glossary), clauses in a script it cannot read are judged by terms and patterns only.

The policy file is re-read when it changes (checked at most once a second), so an operator extends the
policy without code or a restart; a malformed edit is logged and the previous policy stays in force.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from engines.prompt.language import MAX_PROMPT_CHARS, clauses, latin_only, negation_after, negation_before, normalise_prompt

if TYPE_CHECKING:  # pragma: no cover
    from engines.prompt.model import Condition, PromptModel

log = logging.getLogger(__name__)

DEFAULT_POLICY = Path(__file__).with_name("policy.json")
RELOAD_INTERVAL_S = 1.0


class PolicyError(ValueError):
    """The policy file is missing or malformed."""


# Languages written without spaces between words (or, in Korean, with particles glued to them): their
# terms match as substrings; every other language's terms match whole words.
SUBSTRING_LANGS = frozenset({"zh", "ja", "ko"})


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    message: str                       # what the user reads when a prompt is refused in this category
    words: tuple[str, ...] = ()        # terms_<lang> of spaced languages: whole-word matches
    substrings: tuple[str, ...] = ()   # terms_zh / _ja / _ko: substring matches (spaces ignored)
    patterns: tuple[str, ...] = ()     # patterns_<lang>, all languages
    threshold: float | None = None     # overrides the classifier's threshold for this category


@dataclass(frozen=True, slots=True)
class PromptPolicy:
    categories: tuple[Category, ...]
    allow_terms: tuple[str, ...] = ()      # blanked before terms and patterns: "nude lipstick"
    allow_patterns: tuple[str, ...] = ()   # likewise, as regular expressions: "5 years younger"
    # a term in a clause of at least this many words with no match of `request_patterns` (the words that
    # ask for a look), in a prompt of several clauses, is chat around the request and is left to the
    # classifier (0: every term refuses wherever it stands)
    chat_min_words: int = 0
    request_patterns: tuple[str, ...] = ()
    source: str = ""

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "PromptPolicy":
        p = Path(path) if path is not None else DEFAULT_POLICY
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
            cats = tuple(_category(c) for c in raw["categories"])
            allow_patterns = raw.get("allow_patterns", {})
            if isinstance(allow_patterns, Mapping):
                allow_patterns = [pat for pats in allow_patterns.values() for pat in pats]
            request_patterns = [str(pat) for pats in raw.get("request_patterns", {}).values() for pat in pats]
            for pat in [pt for c in cats for pt in c.patterns] + list(allow_patterns) + request_patterns:
                re.compile(pat)
            return cls(categories=cats, allow_terms=tuple(normalise_prompt(t) for t in raw.get("allow_terms", ())),
                       allow_patterns=tuple(str(pt) for pt in allow_patterns),
                       chat_min_words=int(raw.get("chat_min_words", 0)), request_patterns=tuple(request_patterns),
                       source=str(p))
        except FileNotFoundError:
            raise PolicyError(f"prompt policy file {p} not found") from None
        except (KeyError, TypeError, ValueError, AttributeError, re.error) as exc:
            raise PolicyError(f"prompt policy file {p} is malformed: {exc}") from None


def _category(c: Mapping[str, Any]) -> Category:
    def keyed(prefix: str) -> list[tuple[str, list[str]]]:
        return [(k[len(prefix):], list(v)) for k, v in c.items() if k.startswith(prefix)]

    terms = keyed("terms_")
    threshold = c.get("threshold")
    return Category(
        name=str(c["name"]),
        message=str(c.get("message") or c.get("reason") or f"LiveFuse doesn't make {c['name']} content."),
        words=tuple(normalise_prompt(t) for lang, ts in terms if lang not in SUBSTRING_LANGS for t in ts),
        substrings=tuple(normalise_prompt(t).replace(" ", "") for lang, ts in terms if lang in SUBSTRING_LANGS for t in ts),
        patterns=tuple(str(p) for _, ps in keyed("patterns_") for p in ps),
        threshold=float(threshold) if threshold is not None else None,
    )


@dataclass(frozen=True, slots=True)
class PromptDecision:
    allowed: bool
    category: str | None = None
    reason: str = ""                 # what the user reads (the category's message)
    method: str | None = None        # "term", "pattern", "classifier" or "length"
    matched: str | None = None       # the term or the text the pattern matched
    clause: str | None = None        # the part of the prompt that decided
    score: float = 0.0               # the classifier's probability for the category
    understood: bool = True          # False: nothing in the prompt asks for a face edit
    ignored: tuple[str, ...] = ()    # clauses read as asking for nothing a face filter does

    def as_dict(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "category": self.category, "reason": self.reason, "method": self.method,
                "matched": self.matched, "clause": self.clause, "score": round(self.score, 3),
                "understood": self.understood, "ignored": list(self.ignored)}


NOT_UNDERSTOOD = ("Not understood: this doesn't describe a change to a face, so nothing was applied. "
                  "Try words like \"a slight smile\", \"warmer skin\" or \"red lipstick\".")


_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class _Compiled:
    """The policy made ready to match. Each category's whole-word terms are indexed by their first word
    (the term's first run of word characters, which a match always shows as a whole word of the prompt)
    and its substrings by their first character, so a check looks up the prompt's few words and
    characters instead of scanning thousands of terms; a term's regex runs only for those found."""

    policy: PromptPolicy
    # per category: first word -> [(position in the list, term, its whole-word regex)]; and the terms
    # with no word character at all, tried on every prompt
    words: tuple[tuple[Category, dict[str, list[tuple[int, str, re.Pattern]]], tuple[tuple[int, str, re.Pattern], ...]], ...]
    # per category: first character -> [(position in the list, substring)]
    substrings: tuple[dict[str, list[tuple[int, str]]], ...]
    patterns: tuple[tuple[Category, tuple[re.Pattern, ...]], ...]
    allow: tuple[re.Pattern, ...]
    request: re.Pattern      # request_patterns: words that ask for a look

    @classmethod
    def of(cls, policy: PromptPolicy) -> "_Compiled":
        words, substrings = [], []
        for c in policy.categories:
            index: dict[str, list[tuple[int, str, re.Pattern]]] = {}
            wordless = []
            for i, t in enumerate(c.words):
                if not t.split():
                    continue
                entry = (i, t, re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, t.split())) + r"(?!\w)"))
                first = _TOKEN.search(t)
                if first is None:
                    wordless.append(entry)
                else:
                    index.setdefault(first.group(0), []).append(entry)
            words.append((c, index, tuple(wordless)))
            by_char: dict[str, list[tuple[int, str]]] = {}
            for i, t in enumerate(c.substrings):
                if t:
                    by_char.setdefault(t[0], []).append((i, t))
            substrings.append(by_char)
        return cls(policy, tuple(words), tuple(substrings),
                   tuple((c, tuple(re.compile(p, re.IGNORECASE) for p in c.patterns)) for c in policy.categories),
                   tuple(re.compile(p, re.IGNORECASE) for p in policy.allow_patterns),
                   re.compile("|".join(f"(?:{p})" for p in policy.request_patterns) or r"(?!)", re.IGNORECASE))

    def term_hits(self, screened: str, compact: str, norm: str) -> Iterator[tuple[Category, str]]:
        """The terms found in the prompt and not negated there, in the file's order (a category's words,
        then its substrings, category by category)."""
        tokens = set(_TOKEN.findall(screened))
        chars = set(compact)
        for (cat, index, wordless), by_char in zip(self.words, self.substrings):
            found = [e for tok in tokens for e in index.get(tok, ())] + list(wordless)
            for _, term, rx in sorted(found, key=lambda e: e[0]):
                if rx.search(screened) and not _negated(norm, term):
                    yield cat, term
            subs = sorted(e for ch in chars for e in by_char.get(ch, ()))
            for _, term in subs:
                if term in compact and not _negated(norm, term):
                    yield cat, term

    def chat(self, clause: str, norm: str) -> bool:
        """The clause is chat around a request: a prompt of several clauses, and this one long enough to
        be a sentence of its own with no word that asks for a look ("l'école de mon enfant organise une
        visio parents", beside "look sobre")."""
        min_words = self.policy.chat_min_words
        return (min_words > 0 and len(clause.split()) >= min_words and not self.request.search(clause)
                and len(clauses(norm)) > 1)


class PromptFilter:
    """`check(text, reading)` -> PromptDecision. `model` (an `engines.prompt.model.PromptModel`, with its intent
    head) is optional: without it only terms and patterns are matched. `policy` is a path (re-read when
    the file changes) or a loaded PromptPolicy (fixed)."""

    def __init__(self, policy: PromptPolicy | str | os.PathLike | None = None, model: "PromptModel | None" = None) -> None:
        self._path = None if isinstance(policy, PromptPolicy) else Path(policy or DEFAULT_POLICY)
        loaded = policy if isinstance(policy, PromptPolicy) else PromptPolicy.load(self._path)
        self._compiled = _Compiled.of(loaded)
        self._stamp = self._file_stamp()
        self._checked = time.monotonic()
        self._reload_lock = threading.Lock()
        self.reloads = 0
        self.reload_errors = 0
        self.model = model
        self.encoder = model.encoder if model is not None else None
        self.classifier = model is not None and getattr(model, "intent", None) is not None
        # an encoder calibrated through the glossary is English-only: it reads Latin script only
        self.latin_only = bool(model is not None and model.meta.glossary)

    @property
    def policy(self) -> PromptPolicy:
        return self._compiled.policy

    def _file_stamp(self) -> tuple[int, int] | None:
        if self._path is None:
            return None
        try:
            st = self._path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def refresh(self, force: bool = False) -> bool:
        """Re-read the policy file if it changed (at most once a second unless `force`). True on a reload."""
        if self._path is None:
            return False
        now = time.monotonic()
        if not force and now - self._checked < RELOAD_INTERVAL_S:
            return False
        with self._reload_lock:
            self._checked = now
            stamp = self._file_stamp()
            if stamp == self._stamp:
                return False
            self._stamp = stamp
            try:
                self._compiled = _Compiled.of(PromptPolicy.load(self._path))
            except PolicyError as exc:
                self.reload_errors += 1
                log.error("%s; the previous prompt policy stays in force", exc)
                return False
            self.reloads += 1
            log.info("prompt policy re-read from %s", self._path)
            return True

    def check(self, text: str, reading: "Condition | None" = None) -> PromptDecision:
        """`reading` is the prompt's Condition (from the prompt cache); without one the filter's model
        reads the prompt here (the CLI and tests)."""
        self.refresh()
        compiled = self._compiled
        norm = normalise_prompt(text)
        screened = norm
        for allow in compiled.policy.allow_terms:
            screened = screened.replace(allow, " ")
        for rx in compiled.allow:
            screened = rx.sub(" ", screened)
        compact = screened.replace(" ", "")
        for cat, term in compiled.term_hits(screened, compact, norm):
            holding = _clauses_with(norm, term)
            for clause in holding or [_clause_with(norm, term)]:
                if not (holding and self.classifier and compiled.chat(clause, norm)
                        and (not self.latin_only or latin_only(clause))):
                    return self._refuse(cat, "term", term, clause)
        spaced = compact != screened
        for cat, pats in compiled.patterns:
            for rx in pats:
                m = rx.search(screened) or (rx.search(compact) if spaced else None)
                if m and not _negated(norm, m.group(0)):
                    return self._refuse(cat, "pattern", m.group(0), _clause_with(norm, m.group(0)))
        if not norm:
            return PromptDecision(True)
        if reading is None and self.model is not None:
            reading = self.model.encode([text])[0]
        if reading is None:
            return PromptDecision(True)
        if self.classifier and reading.intents is not None:
            texts = reading.row_texts()
            best: tuple[Category, float, str] | None = None
            for i, row_text in enumerate(texts[: len(reading.intents.probs)]):
                if self.latin_only and not latin_only(row_text):
                    continue
                for cat in compiled.policy.categories:
                    p = reading.intents.prob(i, cat.name)
                    t = cat.threshold if cat.threshold is not None else reading.intents.thresholds.get(cat.name)
                    if t is not None and p >= t and (best is None or p > best[1]):
                        best = (cat, p, row_text)
            if best is not None:
                cat, p, row_text = best
                return self._refuse(cat, "classifier", None, row_text, p)
        return PromptDecision(True, understood=reading.understood, ignored=tuple(reading.ignored))

    @staticmethod
    def _refuse(cat: Category, method: str, matched: str | None, clause: str, score: float = 0.0) -> PromptDecision:
        return PromptDecision(False, cat.name, cat.message, method, matched, clause, score)


def _negated(norm: str, needle: str) -> bool:
    """The clause holding `needle` negates it, before it ("no nudity", "not like a child", "别把我弄得像个孩子")
    or, in Japanese and Korean, after it ("子供っぽく見えるのはやめて", "누드 말고"): a term there is no
    refusal by itself; the classifier reads the whole clause."""
    clause = _clause_with(norm, needle)
    at = clause.find(needle)
    if at >= 0:
        return negation_before(clause, at) or negation_after(clause, at + len(needle))
    bare, bare_needle = clause.replace(" ", ""), needle.replace(" ", "")
    at = bare.find(bare_needle)
    return at >= 0 and (negation_before(bare, at) or negation_after(bare, at + len(bare_needle)))


def _clauses_with(norm: str, needle: str) -> list[str]:
    """Every clause of the prompt that holds `needle` (spaces ignored, as substring terms are matched)."""
    bare = needle.replace(" ", "")
    return [c for c in clauses(norm) if needle in c or bare in c.replace(" ", "")]


def _clause_with(norm: str, needle: str) -> str:
    """The clause of the prompt that holds `needle` (spaces ignored, as substring terms are matched)."""
    bare = needle.replace(" ", "")
    for c in clauses(norm):
        if needle in c or bare in c.replace(" ", ""):
            return c
    return norm


Understand = Callable[[str], "Condition | None"]   # prompt text -> its reading (None: none could be made)


class PromptGate:
    """The prompt path's front door: a refused prompt is answered with the reason, audited, and the stream
    keeps its previous prompt. Fits a `set_prompt(session, text) -> dict` hook; `apply` does the real
    update (default: `session.update(prompt=text)`). `understand` gives the prompt's one reading (the
    product passes the prompt cache's blocking lookup, so the edits stage finds it ready); it blocks,
    so call `set_prompt` off the event loop."""

    def __init__(self, filter: PromptFilter, audit: Callable[..., None] | None = None,
                 apply: Callable[[Any, str], dict[str, Any]] | None = None, max_length: int = MAX_PROMPT_CHARS,
                 understand: Understand | None = None) -> None:
        self.filter = filter
        self.audit = audit
        self.apply = apply
        self.max_length = max_length
        self.understand = understand

    def set_prompt(self, session: Any, text: str) -> dict[str, Any]:
        """Refused: the stream keeps its prompt, the client reads why (category, the clause, what decided).
        Not understood (no clause asks for a face edit): the stream keeps its prompt too, and the client
        is told so rather than shown edits nobody asked for. Otherwise applied; clauses that asked for
        nothing a face filter does are listed as `ignored`."""
        if len(text) > self.max_length:
            decision = PromptDecision(False, "length", f"The prompt is longer than {self.max_length} characters; "
                                                       f"shorten it.", "length")
        else:
            reading = self.understand(text) if self.understand is not None else None
            decision = self.filter.check(text, reading)
        if self.audit is not None:
            self.audit("prompt", session=session.id, text=text[: self.max_length], **decision.as_dict())
        if not decision.allowed:
            refusal = {"reason": decision.reason, "category": decision.category, "clause": decision.clause,
                       "method": decision.method}
            session.notify({"type": "prompt_refused", "text": text[: self.max_length], **refusal})
            return {"allowed": False, **refusal, "prompt": session.controls.prompt}
        if not decision.understood:
            session.notify({"type": "prompt_not_understood", "text": text[: self.max_length], "reason": NOT_UNDERSTOOD})
            return {"allowed": True, "understood": False, "reason": NOT_UNDERSTOOD, "prompt": session.controls.prompt}
        if self.apply is not None:
            out = dict(self.apply(session, text))
        else:
            session.update(prompt=text)
            out = {"prompt": text}
        out["allowed"] = True
        out["understood"] = True
        if decision.ignored:
            out["ignored"] = list(decision.ignored)
        return out
