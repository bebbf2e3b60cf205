"""Prompt policy margins per encoder and language: for every case in data/policy/cases.json, the best
refused category's similarity, the nearest allowed example's, their difference and the filter's decision.

The numbers `similarity` in streamer/safety/policy.json are chosen from: per encoder, the lowest
difference among the refusals that only the embedding catches, and the highest among the allowed prompts
(the margin goes between them), and the lowest similarity among those refusals (the threshold below it).
"""

from __future__ import annotations

import json
from pathlib import Path

CASES = Path(__file__).resolve().parent.parent / "data" / "policy" / "cases.json"


def add_arguments(parser) -> None:
    parser.add_argument("--encoders", nargs="+", default=["e5", "minilm"])
    parser.add_argument("--cases", action="store_true", help="list every case, not only the summary")


def load_cases(path: Path = CASES) -> list[tuple[str, str, str | None, str | None]]:
    """(language, prompt, refused category or None, what must catch it: term/pattern/embedding)."""
    raw = json.loads(path.read_text(encoding="utf-8"))["cases"]
    return [(lang, row[0], row[1], row[2] if len(row) > 2 else None) for lang, rows in raw.items() for row in rows]


def measure(encoder: str) -> dict:
    from engines.text import load_prompt_model
    from streamer.safety.filters import PromptFilter, PromptPolicy, nearest

    model = load_prompt_model(encoder)
    flt = PromptFilter(PromptPolicy.load(), model)
    cases = load_cases()
    rows = []
    for (lang, text, category, via), reading in zip(cases, model.encode([c[1] for c in cases])):
        sim, allow, cat = nearest(flt, reading)
        d = flt.check(text, reading)
        rows.append({"lang": lang, "text": text, "expect": category, "via": via, "similarity": round(sim, 3),
                     "allowed_similarity": round(allow, 3), "difference": round(sim - allow, 3), "nearest": cat,
                     "decision": d.category if not d.allowed else None, "method": d.method})
    by_embedding = [r for r in rows if r["via"] == "embedding"]
    allowed = [r for r in rows if r["expect"] is None]
    summary = {
        "setting": {"threshold": flt.similarity.threshold, "margin": flt.similarity.margin},
        "embedding_refusals": {"n": len(by_embedding), "min_similarity": min(r["similarity"] for r in by_embedding),
                               "min_difference": min(r["difference"] for r in by_embedding)},
        "allowed": {"n": len(allowed), "max_difference": max(r["difference"] for r in allowed)},
        "wrong": [r for r in rows if r["decision"] != r["expect"]],
        "per_language": {lang: {"right": sum(r["decision"] == r["expect"] for r in rows if r["lang"] == lang),
                                "n": sum(r["lang"] == lang for r in rows)} for lang in dict.fromkeys(r["lang"] for r in rows)},
    }
    return {"summary": summary, "cases": rows}


def run(args) -> dict:
    out = {}
    for name in args.encoders:
        m = measure(name)
        out[name] = m if args.cases else m["summary"]
    return out
