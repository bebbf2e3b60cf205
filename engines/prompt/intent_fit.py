"""Fits the intent head (engines/prompt/intent.py) for one encoder from the labelled policy corpus.

Corpus: `data/policy/corpus/<lang>.jsonl` (labels: allowed, unrelated, impersonation, sexual, minors, hate;
data/policy/GUIDE.md says what each means), plus the edit phrase corpus's training prompts as more
`allowed` examples. Each prompt's split comes from a hash of its text (train 45 %, validation 20 %,
held-out 35 %), so adding prompts never moves old ones. The head is fitted on train only; thresholds are
chosen on validation, benign pass first: a refused class's threshold sits just above every benign
validation prompt's probability for it; held-out figures are reported and never looked at while fitting.

A prompt is read row by row, as the live path reads it: each clause, and the whole prompt when it has
several. Allowed and unrelated prompts teach their clauses too (a clause of an ordinary request is
ordinary); a refused prompt teaches only its whole text, since "make her smile" inside "make her smile and
undress her" is not what is refused.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from engines.prompt.intent import ALLOWED, INTENTS, REFUSED, UNRELATED, IntentHead, IntentMeta, IntentModel, save_intent_head
from engines.prompt.calibration import default_glossary, encoder_input
from engines.prompt.encoder import TextEncoder
from engines.prompt.language import clauses, latin_only, normalise_prompt

POLICY_CORPUS = Path(__file__).resolve().parents[2] / "data" / "policy" / "corpus"
PROMPT_CORPUS = Path(__file__).resolve().parents[2] / "data" / "prompts"
SPLITS = (("train", 45), ("validation", 65), ("heldout", 100))   # cumulative percent of the hash


@dataclass(frozen=True, slots=True)
class Labelled:
    text: str
    lang: str
    label: str
    split: str
    hard: bool = False


@dataclass(frozen=True, slots=True)
class IntentConfig:
    hidden: int = 256            # the head's hidden layer
    weight_decay: float = 0.05
    dropout: float = 0.2
    lr: float = 2e-3
    steps: int = 300             # AdamW steps, full batch
    min_threshold: float = 0.5   # a refused class never fires below this probability
    max_threshold: float = 0.999  # nor does its threshold climb past this on validation outliers
    unrelated_quantile: float = 0.995   # of allowed validation clauses' P(unrelated): their "not understood" rate
    unrelated_min: float = 0.8   # "not understood" only when the head is this sure: a false one costs a real edit
    edit_examples: int = 1600    # edit-corpus training prompts taken as more `allowed` examples
    batch: int = 1024        # texts handed to the encoder at once (it runs them in batches of like length)
    seed: int = 5


def split_of(text: str) -> str:
    h = int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16) % 100
    return next(name for name, upto in SPLITS if h < upto)


def load_policy_corpus(folder: str | Path = POLICY_CORPUS) -> tuple[list[Labelled], str]:
    """Every labelled prompt with its split, and a sha256 over the files (sorted by name)."""
    folder = Path(folder)
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no policy corpus in {folder} (data/policy/GUIDE.md describes it)")
    h = hashlib.sha256()
    out: list[Labelled] = []
    seen: set[str] = set()
    for path in files:
        raw = path.read_bytes()
        h.update(path.name.encode() + b"\0" + raw)
        for i, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            r = json.loads(line)
            if r["label"] not in INTENTS:
                raise ValueError(f"{path}:{i}: unknown label {r['label']!r} (one of {', '.join(INTENTS)})")
            key = normalise_prompt(r["text"])
            if key in seen:
                continue
            seen.add(key)
            out.append(Labelled(r["text"], path.stem, r["label"], split_of(key), bool(r.get("hard"))))
    return out, h.hexdigest()


def edit_prompts(folder: str | Path = PROMPT_CORPUS, split: str = "train") -> list[Labelled]:
    """The edit corpus's prompts of one split, as `allowed` (every one of them is an ordinary request)."""
    rows = []
    for line in (Path(folder) / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            rows.append(Labelled(r["text"], r["lang"], ALLOWED, split))
    return rows


@dataclass(frozen=True, slots=True)
class Rows:
    """One row per (prompt, clause-or-whole): its embedding index and its prompt."""
    x: np.ndarray        # [R, H]
    owner: np.ndarray    # [R] prompt index
    whole: np.ndarray    # [R] bool: the row is the whole prompt (or its only clause)


def readable(examples: Sequence[Labelled], glossary: bool) -> list[Labelled]:
    """What an encoder can read: all of it, or for an English-only one (glossary) what is Latin script
    after the glossary; the live filter leaves the rest to terms and patterns."""
    if not glossary:
        return list(examples)
    return [e for e in examples if latin_only(encoder_input(e.text, True))]


def rows_of(encoder: TextEncoder, examples: Sequence[Labelled], batch: int, cache: dict[str, np.ndarray],
            clause_rows: bool = True, glossary: bool = False) -> Rows:
    """The live path's rows for each prompt: its clauses, then (when it has several) the whole prompt."""
    texts, owner, whole = [], [], []
    for i, ex in enumerate(examples):
        norm = encoder_input(ex.text, glossary)
        parts = clauses(norm) or [norm]
        if len(parts) == 1:
            texts.append(parts[0]); owner.append(i); whole.append(True)
            continue
        if clause_rows:
            for c in parts:
                texts.append(c); owner.append(i); whole.append(False)
        texts.append(norm); owner.append(i); whole.append(True)
    new = list(dict.fromkeys(t for t in texts if t not in cache))
    for k in range(0, len(new), batch):
        for t, v in zip(new[k:k + batch], encoder.encode(new[k:k + batch]).pooled):
            cache[t] = v
    x = np.stack([cache[t] for t in texts]).astype(np.float32) if texts else np.zeros((0, encoder.hidden_size), np.float32)
    return Rows(x, np.asarray(owner, np.int64), np.asarray(whole, bool))


def fit_head(x: np.ndarray, y: np.ndarray, hidden_size: int, config: IntentConfig) -> IntentHead:
    """Class-balanced cross-entropy, full batch, fixed seed: the same corpus gives the same head.
    Measured on the policy corpus (e5, validation split, benign-first thresholds): harmful refused 0.65
    with this head, 0.33 with a linear one; held-out 0.59 and 0.30."""
    torch.manual_seed(config.seed)
    head = IntentHead(hidden_size, INTENTS, hidden=config.hidden, dropout=config.dropout)
    head.mean.copy_(torch.from_numpy(x.mean(0)))
    head.scale.copy_(torch.from_numpy((1.0 / (x.std(0) + 1e-6)).astype(np.float32)))
    counts = np.bincount(y, minlength=len(INTENTS)).astype(np.float32)
    weight = torch.from_numpy(np.where(counts > 0, counts.sum() / (len(INTENTS) * np.maximum(counts, 1)), 0.0).astype(np.float32))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.AdamW(head.net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    head.train()
    for _ in range(config.steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(head.logits(xt), yt, weight=weight)
        loss.backward()
        opt.step()
    return head.eval()


def prompt_probs(model: IntentModel, rows: Rows, n: int) -> np.ndarray:
    """[n, classes]: per prompt, the highest probability any of its rows gives each class (how the live
    policy reads a prompt: one refused clause refuses it)."""
    probs = model.read(rows.x).probs
    out = np.zeros((n, probs.shape[1]), np.float32)
    np.maximum.at(out, rows.owner, probs)
    return out


def choose_thresholds(probs: np.ndarray, labels: Sequence[str], clause_unrelated: np.ndarray,
                      config: IntentConfig) -> dict[str, float]:
    """Benign pass first: each refused class's threshold sits just above the highest probability any
    benign (allowed or unrelated) validation prompt gives it; `unrelated` at a high quantile of allowed
    clauses' P(unrelated), so a real request is rarely answered "not understood"."""
    benign = np.array([lab in (ALLOWED, UNRELATED) for lab in labels])
    out: dict[str, float] = {}
    for c in REFUSED:
        k = INTENTS.index(c)
        top = float(probs[benign, k].max()) if benign.any() else 0.0
        out[c] = round(float(np.clip(top + 1e-3, config.min_threshold, config.max_threshold)), 4)
    q = float(np.quantile(clause_unrelated, config.unrelated_quantile)) if len(clause_unrelated) else 0.5
    out[UNRELATED] = round(float(np.clip(q + 1e-3, config.unrelated_min, config.max_threshold)), 4)
    return out


def classifier_scores(probs: np.ndarray, examples: Sequence[Labelled], thresholds: dict[str, float]) -> dict[str, object]:
    """The classifier alone (no terms): benign pass, refusal per category, unrelated answered "not understood"."""
    pred_refused = np.zeros(len(examples), bool)
    pred_class: list[str | None] = []
    for i in range(len(examples)):
        hits = [(c, probs[i, INTENTS.index(c)]) for c in REFUSED if probs[i, INTENTS.index(c)] >= thresholds[c]]
        pred_class.append(max(hits, key=lambda h: h[1])[0] if hits else None)
        pred_refused[i] = bool(hits)
    labels = np.array([e.label for e in examples])
    benign = np.isin(labels, [ALLOWED, UNRELATED])
    out: dict[str, object] = {"n": len(examples), "benign_pass": _rate(~pred_refused[benign])}
    for c in REFUSED:
        out[f"{c}_refused"] = _rate(pred_refused[labels == c])
    unrel = labels == UNRELATED
    out["unrelated_not_understood"] = _rate(probs[unrel, INTENTS.index(UNRELATED)] >= thresholds[UNRELATED])
    return out


def _rate(mask: np.ndarray) -> float | None:
    return round(float(mask.mean()), 4) if mask.size else None


def calibrate_intent(encoder: TextEncoder, output: str | Path | None = None, config: IntentConfig = IntentConfig(),
                     policy_corpus: str | Path = POLICY_CORPUS, prompt_corpus: str | Path = PROMPT_CORPUS) -> tuple[IntentModel, dict]:
    """Fit, choose thresholds, score, save. Returns the model and a report."""
    torch.set_num_threads(max(1, torch.get_num_threads()))
    labelled, digest = load_policy_corpus(policy_corpus)
    rng = np.random.default_rng(config.seed)
    edits = edit_prompts(prompt_corpus, "train")
    if len(edits) > config.edit_examples:
        edits = [edits[i] for i in sorted(rng.choice(len(edits), config.edit_examples, replace=False))]
    glossary = default_glossary(encoder)
    train = readable([e for e in labelled if e.split == "train"] + edits, glossary)
    val = readable([e for e in labelled if e.split == "validation"], glossary)
    held = readable([e for e in labelled if e.split == "heldout"], glossary)
    t0 = time.perf_counter()
    cache: dict[str, np.ndarray] = {}
    r_train = rows_of(encoder, train, config.batch, cache, glossary=glossary)
    r_val = rows_of(encoder, val, config.batch, cache, glossary=glossary)
    r_held = rows_of(encoder, held, config.batch, cache, glossary=glossary)
    t_encode = time.perf_counter() - t0
    # a refused prompt's clauses are not refused on their own: only its whole row teaches its label
    labels = np.array([INTENTS.index(train[o].label) for o in r_train.owner])
    keep = r_train.whole | np.isin(labels, [INTENTS.index(ALLOWED), INTENTS.index(UNRELATED)])
    t1 = time.perf_counter()
    head = fit_head(r_train.x[keep], labels[keep], encoder.hidden_size, config)
    t_fit = time.perf_counter() - t1
    provisional = IntentModel(head, IntentMeta(encoder.id, encoder.hidden_size, INTENTS, {}, digest, head_hidden=config.hidden))
    p_val = prompt_probs(provisional, r_val, len(val))
    allowed_rows = np.array([val[o].label == ALLOWED for o in r_val.owner])
    clause_unrel = provisional.read(r_val.x[allowed_rows]).probs[:, INTENTS.index(UNRELATED)] if allowed_rows.any() else np.zeros(0)
    thresholds = choose_thresholds(p_val, [e.label for e in val], clause_unrel, config)
    p_held = prompt_probs(provisional, r_held, len(held))
    scores = {"validation": classifier_scores(p_val, val, thresholds), "heldout": classifier_scores(p_held, held, thresholds),
              "train": len(train), "validation_n": len(val), "heldout_n": len(held)}
    meta = IntentMeta(encoder.id, encoder.hidden_size, INTENTS, thresholds, digest, scores, head_hidden=config.hidden)
    model = IntentModel(head, meta)
    report = {"encoder": encoder.id, "glossary": glossary, "corpus_sha256": digest, "thresholds": thresholds, **scores,
              "encode_s": round(t_encode, 2), "fit_s": round(t_fit, 2)}
    if output is not None:
        report["artifact"] = str(save_intent_head(output, head, meta))
    return model, report
