"""Fits a ConditionProjector + EditHead for one encoder from the phrase corpus and scores the held-out
split. The encoder stays frozen: its pooled embeddings are computed once, then the two small layers are
trained full-batch on the CPU (seconds), with a fixed seed so the same corpus gives the same artifact.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from engines.prompt import glossary as zh_glossary
from engines.edit_vocabulary import EDIT_NAMES
from engines.prompt.model import DEADZONE, PromptModel
from engines.prompt.language import NEGATION_FLOOR, latin_only, clauses, negation_stem, normalise_prompt
from engines.prompt.head import ArtifactMeta, ConditionProjector, EditHead, save_artifact
from engines.prompt.encoder import TextEncoder

CORPUS_DIR = Path(__file__).resolve().parents[2] / "data" / "prompts"
ZERO_LIMIT = 0.2   # an edit whose target is 0 must stay below this


@dataclass(frozen=True, slots=True)
class CalibrationConfig:
    steps: int = 600
    lr: float = 3e-3
    weight_decay: float = 1e-2
    head_hidden: int = 256
    seed: int = 5
    batch: int = 1024        # texts handed to the encoder at once (it runs them in batches of like length)
    glossary: bool | None = None   # translate Chinese before encoding; None: the encoder's own default (EncoderSpec)
    dropout: float = 0.3     # on the condition while fitting: the held-out zeros stay near zero
    noise: float = 0.0       # Gaussian noise on the standardised embedding while fitting
    zero_weight: float = 1.0  # loss weight of a zero target against a named edit's 1


@dataclass(frozen=True, slots=True)
class Example:
    text: str
    lang: str
    kind: str
    target: dict[str, float]


ZERO_SHOT = "zero_shot"   # held-out prompts in languages the fit never sees (data/prompts/build_zero_shot.py)


def load_corpus(folder: str | Path = CORPUS_DIR) -> tuple[list[Example], list[Example], str]:
    """(train, heldout, sha256 over the files). Held-out is heldout.jsonl (English, Chinese) plus, when the
    folder has one, zero_shot.jsonl (other languages, never trained on)."""
    folder = Path(folder)
    h = hashlib.sha256()
    splits = []
    names = ["train", "heldout"] + ([ZERO_SHOT] if (folder / f"{ZERO_SHOT}.jsonl").is_file() else [])
    for name in names:
        path = folder / f"{name}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"phrase corpus file {path} is missing (python data/prompts/build_corpus.py writes it)")
        raw = path.read_bytes()
        h.update(name.encode() + b"\0" + raw)
        rows = []
        for i, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            r = json.loads(line)
            unknown = set(r["target"]) - set(EDIT_NAMES)
            if unknown:
                raise ValueError(f"{path}:{i}: unknown edit names {sorted(unknown)}")
            rows.append(Example(r["text"], r["lang"], r.get("kind", ""), {k: float(v) for k, v in r["target"].items()}))
        splits.append(rows)
    held = splits[1] + (splits[2] if len(splits) > 2 else [])
    return splits[0], held, h.hexdigest()


def default_glossary(encoder: TextEncoder) -> bool:
    """Chinese goes through the glossary only for an encoder that cannot read it: the named English-only
    MiniLM and, as before, unnamed local folders (`--no-glossary` for multilingual ones); never for e5."""
    return encoder.spec.glossary if encoder.spec is not None else True


def targets(examples: Sequence[Example], names: Sequence[str] = EDIT_NAMES) -> np.ndarray:
    y = np.zeros((len(examples), len(names)), np.float32)
    for i, ex in enumerate(examples):
        for k, v in ex.target.items():
            y[i, names.index(k)] = v
    return y


def encoder_input(text: str, glossary: bool) -> str:
    """What the encoder reads of a prompt, as the live path prepares it (PromptModel.prepare)."""
    norm = normalise_prompt(text)
    return zh_glossary.translate(norm)[0] if glossary else norm


def encoder_inputs(examples: Iterable[Example], glossary: bool) -> list[str]:
    return [encoder_input(ex.text, glossary) for ex in examples]


def pool(encoder: TextEncoder, texts: Sequence[str], batch: int) -> np.ndarray:
    return np.concatenate([encoder.encode(texts[i:i + batch]).pooled for i in range(0, len(texts), batch)], axis=0)


@dataclass(frozen=True, slots=True)
class Features:
    """Pooled embeddings of the distinct clauses and, per clause occurrence, its row and its prompt."""
    x: np.ndarray            # [C, H] one row per distinct clause (negation stems included)
    rows: np.ndarray         # [M] clause row of each occurrence
    owner: np.ndarray        # [M] prompt index of each occurrence
    n: int                   # prompts
    stems: np.ndarray | None = None   # [M] row of the occurrence's negation stem, -1 when it negates nothing


def features(encoder: TextEncoder, texts: Sequence[str], batch: int, cache: dict[str, np.ndarray] | None = None) -> Features:
    parts = [clauses(t) for t in texts]
    stem = {c: negation_stem(c) for p in parts for c in p}
    cache = {} if cache is None else cache
    distinct = list(dict.fromkeys([c for p in parts for c in p] + [s for s in stem.values() if s]))
    new = [c for c in distinct if c not in cache]
    if new:
        for c, v in zip(new, pool(encoder, new, batch)):
            cache[c] = v
    index = {c: i for i, c in enumerate(distinct)}
    rows = [index[c] for p in parts for c in p]
    owner = [i for i, p in enumerate(parts) for _ in p]
    stems = [index[stem[c]] if stem[c] else -1 for p in parts for c in p]
    x = np.stack([cache[c] for c in distinct]).astype(np.float32) if distinct else np.zeros((0, encoder.hidden_size), np.float32)
    return Features(x, np.asarray(rows, np.int64), np.asarray(owner, np.int64), len(texts), np.asarray(stems, np.int64))


def _forward(projector: ConditionProjector, head: EditHead, f: Features, xt: torch.Tensor, dropout: float = 0.0) -> torch.Tensor:
    c = projector(xt)
    if dropout > 0:
        c = torch.nn.functional.dropout(c, dropout)
    e_all = head(c)
    e = e_all[torch.from_numpy(f.rows)]
    if f.stems is not None and (f.stems >= 0).any():
        # the live rule (engines.prompt.model.gate_negated): a negated clause's edits that point the way its stem's
        # point are dropped, so the fit neither pays for nor learns from them
        neg = torch.from_numpy(np.flatnonzero(f.stems >= 0))
        s = e_all[torch.from_numpy(f.stems[f.stems >= 0])].detach()
        same = (torch.sign(e[neg]) == torch.sign(s)) & (s.abs() > NEGATION_FLOOR)
        e = e.index_put((neg,), torch.where(same, torch.zeros_like(e[neg]), e[neg]))
    return torch.zeros(f.n, e.shape[1]).index_add_(0, torch.from_numpy(f.owner), e).clamp(-1.0, 1.0)


def _deadzone(out: torch.Tensor) -> torch.Tensor:
    """The live rule (engines.prompt.model.deadzone): what stays within DEADZONE of zero is no edit."""
    return torch.sign(out) * torch.clamp(out.abs() - DEADZONE, min=0.0) / (1.0 - DEADZONE)


def _fit_view(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What the loss compares with the targets: the dead zone where the target is 0 (a small leak costs
    nothing), and where it is not, the same rescaling without the flat zone, so an edit stuck near zero
    still has a gradient toward its target's side."""
    linear = (out - DEADZONE * torch.sign(y)) / (1.0 - DEADZONE)
    return torch.where(y == 0, _deadzone(out), linear)


def score(pred: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Sign agreement over non-zero targets; the share (and worst value) of zero targets kept below 0.2."""
    nz = y != 0
    agree = float((np.sign(pred[nz]) == np.sign(y[nz])).mean()) if nz.any() else 1.0
    z = np.abs(pred[~nz])
    return {
        "sign_agreement": round(agree, 4),
        "zero_within_0.2": round(float((z <= ZERO_LIMIT).mean()) if z.size else 1.0, 4),
        "zero_max_abs": round(float(z.max()) if z.size else 0.0, 4),
        "prompts_all_zero_ok": round(float((np.where(nz, 0.0, np.abs(pred)) <= ZERO_LIMIT).all(axis=1).mean()), 4),
        "mae": round(float(np.abs(pred - y).mean()), 4),
        # mean |value| of the edits a prompt does not name: what it changes that nobody asked for
        "leakage": round(float(z.mean()) if z.size else 0.0, 4),
        "n": int(len(y)),
    }


def fit(f: Features, y: np.ndarray, config: CalibrationConfig = CalibrationConfig()) -> tuple[ConditionProjector, EditHead]:
    torch.manual_seed(config.seed)
    x = f.x
    projector = ConditionProjector(x.shape[1])
    head = EditHead(EDIT_NAMES, hidden=config.head_hidden)
    projector.mean.copy_(torch.from_numpy(x.mean(0)))
    projector.scale.copy_(torch.from_numpy((1.0 / (x.std(0) + 1e-6)).astype(np.float32)))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    # zero targets are most entries; the dead zone already lets them leak a little for free, so they weigh
    # `zero_weight` against a named edit's 1
    weight = torch.where(yt == 0, torch.tensor(config.zero_weight), torch.tensor(1.0))
    params = list(projector.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, config.steps)
    projector.train(), head.train()
    for _ in range(config.steps):
        opt.zero_grad(set_to_none=True)
        xin = xt
        if config.noise > 0:
            xin = xin + torch.randn_like(xin) * (config.noise / projector.scale)
        pred = _fit_view(_forward(projector, head, f, xin, config.dropout), yt)
        loss = (weight * (pred - yt) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()
    return projector.eval(), head.eval()


def predict(projector: ConditionProjector, head: EditHead, f: Features) -> np.ndarray:
    with torch.inference_mode():
        return _deadzone(_forward(projector, head, f, torch.from_numpy(f.x))).numpy()


def calibrate(encoder: TextEncoder, corpus: str | Path = CORPUS_DIR, output: str | Path | None = None,
              config: CalibrationConfig = CalibrationConfig()) -> tuple[PromptModel, dict]:
    """Fit, score, save. Returns the ready PromptModel and a report (the held-out figures, timings)."""
    torch.set_num_threads(max(1, torch.get_num_threads()))
    train, held, digest = load_corpus(corpus)
    if config.glossary is None:
        config = replace(config, glossary=default_glossary(encoder))
    if config.glossary:
        # an English-only encoder reads Latin script (and Chinese through the glossary): kana and hangul
        # would reach it as unknown tokens, teaching its head noise
        train = [e for e, text in zip(train, encoder_inputs(train, True)) if latin_only(text)]
    t0 = time.perf_counter()
    cache: dict[str, np.ndarray] = {}
    x_train = features(encoder, encoder_inputs(train, config.glossary), config.batch, cache)
    x_held = features(encoder, encoder_inputs(held, config.glossary), config.batch, cache)
    t_encode = time.perf_counter() - t0
    y_train, y_held = targets(train), targets(held)
    t1 = time.perf_counter()
    projector, head = fit(x_train, y_train, config)
    t_fit = time.perf_counter() - t1
    p_held, p_train = predict(projector, head, x_held), predict(projector, head, x_train)
    heldout = {"all": score(p_held, y_held)}
    for lang in sorted({e.lang for e in held}):
        idx = [i for i, e in enumerate(held) if e.lang == lang]
        heldout[lang] = score(p_held[idx], y_held[idx])
    meta = ArtifactMeta(
        encoder_id=encoder.id, hidden_size=encoder.hidden_size, corpus_sha256=digest, heldout=heldout,
        glossary=config.glossary, head_hidden=config.head_hidden, encoder_path=encoder.path.name,
        max_length=encoder.max_length,
        extra={"train": len(train), "heldout": len(held), "steps": config.steps, "seed": config.seed, "lr": config.lr,
               "train_score": score(p_train, y_train)},
    )
    report = {"encoder": encoder.id, "glossary": config.glossary, "clauses": len(cache), "hidden_size": encoder.hidden_size, "corpus_sha256": digest,
              "train": len(train), "heldout_n": len(held), "heldout": heldout,
              "encode_s": round(t_encode, 2), "fit_s": round(t_fit, 2)}
    if output is not None:
        report["artifact"] = str(save_artifact(output, projector, head, meta))
    return PromptModel(encoder, projector, head, meta), report
