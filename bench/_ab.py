"""Two checkouts of LiveFuse timed by the same benchmark, side by side: runs alternate between them
(A B, B A, ...) so a machine whose speed drifts slows both alike, and every numeric figure the benchmark
prints is reported as each checkout's median over the runs and their ratio (B / A).

    python -m bench._ab --a ../before --b . --repeats 3 -- pipeline --frames 60 --sizes 640x480

Each run is `python -m streamer.app.cli bench ARGS --json` (`streamer.cli` in a checkout from before the
rooms) in a fresh process with the checkout first on
`sys.path`, using this interpreter (one virtualenv serves both checkouts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator


def numeric_leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every number in a JSON value, keyed by its path (a.b.0.c)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield prefix, float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from numeric_leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from numeric_leaves(v, f"{prefix}.{i}" if prefix else str(i))


def run_once(checkout: Path, bench_args: list[str], timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cli = "streamer.app.cli" if (checkout / "streamer" / "app" / "cli.py").exists() else "streamer.cli"   # older trees
    out = subprocess.run([sys.executable, "-m", cli, "bench", *bench_args, "--json"], cwd=checkout,
                         env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bench in {checkout} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout[out.stdout.index("{"):])


def compare(runs_a: list[dict[str, Any]], runs_b: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    a = [dict(numeric_leaves(r)) for r in runs_a]
    b = [dict(numeric_leaves(r)) for r in runs_b]
    keys = [k for k in a[0] if all(k in r for r in a + b)]
    table = {}
    for k in keys:
        ma, mb = statistics.median(r[k] for r in a), statistics.median(r[k] for r in b)
        table[k] = {"a": round(ma, 3), "b": round(mb, 3), "b_over_a": round(mb / ma, 3) if ma else None}
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", type=Path, required=True, help="the reference checkout")
    p.add_argument("--b", type=Path, required=True, help="the checkout compared with it")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--keys", default="", help="comma list of substrings: report only figures whose path has one")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="after --: the `livefuse bench` arguments")
    args = p.parse_args(argv)
    bench_args = [a for a in args.bench_args if a != "--"]
    runs: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    for i in range(args.repeats):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        for side in order:
            runs[side].append(run_once(getattr(args, side).resolve(), bench_args, args.timeout))
    table = compare(runs["a"], runs["b"])
    if args.keys:
        wanted = [k for k in args.keys.split(",") if k]
        table = {k: v for k, v in table.items() if any(w in k for w in wanted)}
    print(json.dumps({"benchmark": "ab", "bench_args": bench_args, "repeats": args.repeats,
                      "a": str(args.a), "b": str(args.b), "figures": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
