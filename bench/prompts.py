"""Prompt encoders side by side (e5, the default, and MiniLM): encode time per prompt (median, p95) on
the live path (`PromptModel.encode`: clauses, encoder, projector, head), memory, and the time from
`set_prompt` to the first frame that shows the prompt, cached and uncached.

Each encoder runs in its own fresh process, so its memory figure is what loading it adds to a process
that has already imported torch and transformers (RSS after `load_prompt_model` minus before; then RSS
after the timed encodes). Prompts: the held-out sets (English, Chinese, the six zero-shot languages),
one prompt per call, the way a user sends them, each `--repeats` times (its fastest counts: on a shared
machine the neighbours only add time), taken round-robin across languages. set_prompt: the product's front door, `PromptGate` (the
policy filter on the prompt cache's blocking read) -> `Session` -> `EditsStage` on the astronaut at
640x480, frames pulled as a 30 fps stream would (every 33 ms) while `set_prompt` runs off that loop
in a worker thread, as the server runs it; the time is from the call to the first frame whose edits
move. Uncached: a prompt never seen; cached: the same prompt again after a switch back to no prompt.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import threading
import time
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().parent.parent / "data" / "prompts"
FRAME_S = 1.0 / 30


def add_arguments(parser) -> None:
    parser.add_argument("--encoders", nargs="+", default=["e5", "minilm"])
    parser.add_argument("--per-language", type=int, default=12, help="held-out prompts per language to time")
    parser.add_argument("--switches", type=int, default=8, help="set_prompt switches to time (uncached and cached)")
    parser.add_argument("--repeats", type=int, default=3, help="encodes per prompt; its time is the fastest (a shared "
                                                               "machine's neighbours only ever add time)")


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms, np.float64)
    return {"median_ms": round(float(np.median(a)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2), "n": len(ms)}


def prompts(per_language: int) -> list[tuple[str, str]]:
    """(language, text): the first `per_language` held-out prompts of each language, taken round-robin
    (one per language in turn), so a burst of load on the machine does not land on one language."""
    out: dict[str, list[str]] = {}
    for name in ("heldout", "zero_shot"):
        for line in (CORPUS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if len(out.setdefault(r["lang"], [])) < per_language:
                out[r["lang"]].append(r["text"])
    return [(lang, ts[i]) for i in range(per_language) for lang, ts in out.items() if i < len(ts)]


def _switch_prompts(n: int) -> list[str]:
    base = ["a big grin", "韩系清透裸妆", "満面の笑み", "빨간 립스틱", "labios rojos y ojos ahumados",
            "un grand sourire", "rote Lippen", "pele bronzeada", "smoky eyes", "温柔的日系妆容感"]
    return [f"{base[i % len(base)]}{'!' * (i // len(base))}" for i in range(n)]


def set_prompt_to_frame(model, switches: int) -> dict:
    from bench.edits import _frame
    from engines.faces import Face
    from streamer.pipeline.pipeline import FrameState
    from streamer.session.prompts import PromptCache
    from streamer.safety.filters import PromptFilter, PromptGate, PromptPolicy
    from streamer.session.session import Session
    from streamer.pipeline.stages.edits import EditsStage

    img, lm = _frame()
    face = Face(landmarks=lm, bbox=(0, 0, 1, 1))
    cache = PromptCache(model)
    gate = PromptGate(PromptFilter(PromptPolicy.load(), model), understand=lambda text: cache.wait(text, 10.0))
    results: dict[str, list[float]] = {"uncached": [], "cached": []}

    def time_switch(session, stage, text: str) -> float:
        frame = lambda: stage(FrameState(image=img.copy(), faces=[face]), session.frame_context()).edits  # noqa: E731
        before = frame()
        done = threading.Event()
        t0 = time.perf_counter()
        worker = threading.Thread(target=lambda: (gate.set_prompt(session, text), done.set()))
        worker.start()
        next_frame = t0
        while True:
            if frame() != before:
                elapsed = (time.perf_counter() - t0) * 1000.0
                break
            if time.perf_counter() - t0 > 10.0:
                raise RuntimeError(f"prompt {text!r} never showed")
            next_frame += FRAME_S
            time.sleep(max(0.0, next_frame - time.perf_counter()))
        worker.join()
        return elapsed

    try:
        for text in _switch_prompts(switches):
            session = Session()
            stage = EditsStage(cache)
            results["uncached"].append(time_switch(session, stage, text))
            session.update(prompt="")
            for _ in range(8):          # let the blend settle on no prompt
                stage(FrameState(image=img.copy(), faces=[face]), session.frame_context())
            results["cached"].append(time_switch(session, stage, text))
    finally:
        cache.close()
    return {kind: {**_stats(ms), "frames_at_30fps_max": int(np.ceil(max(ms) / (FRAME_S * 1000.0)))}
            for kind, ms in results.items()}


def measure(encoder: str, per_language: int, switches: int, repeats: int = 3) -> dict:
    import torch  # noqa: F401  (torch and transformers are imported before the baseline: every encoder needs them)
    import transformers  # noqa: F401

    from engines.prompt.model import load_prompt_model

    rss0 = _rss_mb()
    t0 = time.perf_counter()
    model = load_prompt_model(encoder)
    load_s = time.perf_counter() - t0
    rss_loaded = _rss_mb()
    texts = prompts(per_language)
    for _, text in texts[:5]:
        model.encode([text])                       # warm up
    per_lang: dict[str, list[float]] = {}
    everything: list[float] = []
    cpu: list[float] = []
    for lang, text in texts:
        runs, cpu_runs = [], []
        for _ in range(max(1, repeats)):
            t, c = time.perf_counter(), time.process_time()
            model.encode([text])
            runs.append((time.perf_counter() - t) * 1000.0)
            cpu_runs.append((time.process_time() - c) * 1000.0)
        per_lang.setdefault(lang, []).append(min(runs))
        everything.append(min(runs))
        cpu.append(min(cpu_runs))
    rss_encoded = _rss_mb()
    policy = policy_cost(model, texts, repeats)
    return {
        "encoder": model.encoder.id,
        "load_s": round(load_s, 2),
        "rss_before_mb": round(rss0, 1),
        "rss_added_by_loading_mb": round(rss_loaded - rss0, 1),
        "rss_added_after_encoding_mb": round(rss_encoded - rss0, 1),
        "encode_per_prompt": _stats(everything),
        "encode_cpu_per_prompt": _stats(cpu),      # process CPU time (all torch threads): less moved by neighbours
        "encode_per_prompt_by_language": {lang: _stats(ms) for lang, ms in per_lang.items()},
        "set_prompt_to_frame": set_prompt_to_frame(model, switches),
        "policy": policy,
    }


def policy_cost(model, texts: list[tuple[str, str]], repeats: int) -> dict:
    """What the prompt policy adds to a prompt: the intent head's read of the prompt's rows (inside
    `PromptModel.encode`) plus `PromptFilter.check` on the reading (terms, patterns, thresholds).
    Uncached: encode + policy, a prompt never seen; cached: the prompt cache's lookup + policy."""
    from streamer.session.prompts import PromptCache
    from streamer.safety.filters import PromptFilter

    flt = PromptFilter(None, model)
    cache = PromptCache(model)
    intent_ms, check_ms, uncached_ms, cached_ms = [], [], [], []
    try:
        for _, text in texts:
            ir, cr, ur, kr = [], [], [], []
            for k in range(max(1, repeats)):
                variant = text + "!" * (k + 1)          # never seen: the cache cannot answer it
                t = time.perf_counter()
                cond = cache.wait(variant, 30.0)
                flt.check(variant, cond)
                ur.append((time.perf_counter() - t) * 1000.0)
                t = time.perf_counter()
                model.intent.read(cond.embeddings)
                ir.append((time.perf_counter() - t) * 1000.0)
                t = time.perf_counter()
                flt.check(variant, cond)
                cr.append((time.perf_counter() - t) * 1000.0)
                t = time.perf_counter()
                flt.check(variant, cache.get(variant))
                kr.append((time.perf_counter() - t) * 1000.0)
            intent_ms.append(min(ir)); check_ms.append(min(cr)); uncached_ms.append(min(ur)); cached_ms.append(min(kr))
    finally:
        cache.close()
    added = [a + b for a, b in zip(intent_ms, check_ms)]
    return {"intent_head_read": _stats(intent_ms), "filter_check": _stats(check_ms), "policy_added": _stats(added),
            "uncached_encode_and_policy": _stats(uncached_ms), "cached_lookup_and_policy": _stats(cached_ms),
            "policy_added_p95_within_2ms": bool(np.percentile(added, 95) <= 2.0)}


def _child(args: tuple[str, int, int, int]) -> dict:
    return measure(*args)


def run(args) -> dict:
    ctx = multiprocessing.get_context("spawn")          # a fresh process per encoder: clean memory figures
    import os

    import torch

    out = {"threads": torch.get_num_threads(), "cpus": os.cpu_count(), "load_average_before": os.getloadavg(), "encoders": {}}
    for name in args.encoders:
        with ctx.Pool(1) as pool:
            out["encoders"][name] = pool.apply(_child, ((name, args.per_language, args.switches, args.repeats),))
    out["load_average_after"] = os.getloadavg()
    return out
