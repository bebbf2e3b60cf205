"""Shared shape of `livefuse bench NAME` and `livefuse eval NAME`: one module per NAME in a package."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys


def add_named_modules(parser: argparse.ArgumentParser, package: str) -> None:
    pkg = importlib.import_module(package)
    sub = parser.add_subparsers(dest="target", required=True)
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.ispkg:   # helpers and sub-packages are not targets
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        p = sub.add_parser(info.name, help=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None)
        p.add_argument("--json", action="store_true", help="print the figures as one JSON object (the default)")
        p.add_argument("-o", "--output", help="also write the JSON here")
        module.add_arguments(p)
        p.set_defaults(_module=module)


def run_named_module(args: argparse.Namespace) -> int:
    result = args._module.run(args)
    text = json.dumps(result, indent=2, ensure_ascii=False, default=float)
    sys.stdout.write(text + "\n")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0
