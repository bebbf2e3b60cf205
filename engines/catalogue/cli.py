"""`livefuse models list | get NAME | verify [NAME...] | remove NAME`: the catalogue from the command line.
The streamer's command module hands its arguments here; `python -m engines.catalogue` runs it alone."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO, Sequence

from engines.catalogue.download import ModelsError, Retry, get, remove
from engines.catalogue.entries import (Catalogue, CatalogueError, Entry, _sha_cached, expected_sha256,
                                       installed_path, load, models_dir)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The sub-commands, on a parser the caller made (so `livefuse models` and `python -m` share them)."""
    p.add_argument("--models-dir", type=Path, default=None,
                   help="the models folder (default: $LIVEFUSE_MODELS, else the user's cache folder)")
    sub = p.add_subparsers(dest="models_command", required=True, metavar="{list,get,verify,remove}")
    ls = sub.add_parser("list", help="every catalogue model: kind, licence, commercial use, installed")
    ls.add_argument("--json", action="store_true", help="one JSON array on stdout")
    ls.add_argument("--kind", choices=("swapper", "embedder", "enhancer", "parser", "detector"), default=None)
    g = sub.add_parser("get", help="download, check the sha256, install")
    g.add_argument("name")
    g.add_argument("--accept-licence", "--accept-license", dest="accept", action="append", default=[], metavar="NAME",
                   help="accept a non-commercial licence (its key as `list` shows it, or the model's name)")
    g.add_argument("--sha256", default=None, metavar="HEX",
                   help="the file's sha256, for a model the catalogue has no hash for (checked, then kept as a pin)")
    g.add_argument("--mirror", default=None, metavar="URL",
                   help="a base URL holding the files under their catalogue file names, tried first")
    g.add_argument("--retries", type=int, default=4, help="tries per URL (default 4)")
    g.add_argument("--backoff", type=float, default=1.0, help="first pause between tries, seconds (doubles)")
    g.add_argument("--timeout", type=float, default=30.0, help="connect and read timeout, seconds")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    v = sub.add_parser("verify", help="check installed models against their sha256 (exit 1 if any fails)")
    v.add_argument("names", nargs="*", help="models to check (default: every installed one)")
    r = sub.add_parser("remove", help="delete an installed model")
    r.add_argument("name")


def rows(cat: Catalogue, folder: Path, kind: str | None = None) -> list[dict]:
    out = []
    for e in cat.entries:
        if kind is not None and e.kind != kind:
            continue
        path = installed_path(e, folder)
        out.append({"name": e.name, "kind": e.kind, "family": e.family, "licence": e.licence.label,
                    "licence_name": e.licence.name, "licence_url": e.licence.url, "commercial": e.commercial,
                    "caveat": e.caveat, "installed": path is not None, "path": str(path) if path else None,
                    "file": e.file, "size": e.size, "sha256": e.sha256, "urls": list(e.urls)})
    return out


def _table(items: list[dict], folder: Path, out: IO[str]) -> None:
    head = ("NAME", "KIND", "LICENCE", "COMMERCIAL", "INSTALLED", "SIZE")
    body = [(r["name"], r["kind"], r["licence"], "yes" if r["commercial"] else "NO", "yes" if r["installed"] else "-",
             f"{r['size'] / 1e6:.0f} MB" if r["size"] else "?") for r in items]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head))]
    for line in [head, *body]:
        out.write("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() + "\n")
    out.write(f"\nmodels folder: {folder}\n")
    notes = [r for r in items if r["caveat"] or not r["commercial"]]
    if notes:
        out.write("licences:\n")
        for r in notes:
            use = "commercial use allowed" if r["commercial"] else "non-commercial only"
            out.write(f"  {r['name']}: {r['licence_name']} ({use}) {r['licence_url']}\n")
            if r["caveat"]:
                out.write(f"    note: {r['caveat']}\n")


def _verify(cat: Catalogue, folder: Path, names: Sequence[str], out: IO[str]) -> int:
    entries: list[Entry] = [cat.get(n) for n in names] if names else [e for e in cat.entries if installed_path(e, folder)]
    if not entries:
        out.write(f"no models installed in {folder}\n")
        return 0
    bad = 0
    for e in entries:
        path = installed_path(e, folder)
        want = expected_sha256(e, folder)
        if path is None:
            out.write(f"MISSING  {e.name}: not installed; livefuse models get {e.name}\n")
            bad += 1
        elif want is None:
            out.write(f"UNPINNED {e.name}: {path} has no sha256 to check against; "
                      f"livefuse models get {e.name} --sha256 HEX\n")
            bad += 1
        else:
            got = _sha_cached(path)
            if got == want:
                out.write(f"OK       {e.name}  {path}\n")
            else:
                out.write(f"FAILED   {e.name}: {path} has sha256 {got}, expected {want}\n")
                bad += 1
    return 1 if bad else 0


def run(args: argparse.Namespace, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr) -> int:
    folder = args.models_dir.expanduser() if args.models_dir else models_dir()
    try:
        cat = load()
        cmd = args.models_command
        if cmd == "list":
            items = rows(cat, folder, args.kind)
            if args.json:
                out.write(json.dumps(items, indent=1) + "\n")
            else:
                _table(items, folder, out)
            return 0
        if cmd == "get":
            if args.retries < 1 or args.backoff < 0 or args.timeout <= 0:
                raise ModelsError("--retries must be at least 1, --backoff at least 0, --timeout above 0")
            res = get(args.name, folder=folder, accept=args.accept, sha256=args.sha256, mirror=args.mirror,
                      retry=Retry(attempts=args.retries, backoff_s=args.backoff, timeout_s=args.timeout),
                      progress=None if args.quiet else err, catalogue=cat)
            verb = "installed" if res.downloaded else "already installed"
            out.write(f"{verb}: {res.entry.name} -> {res.path}\n")
            out.write(f"licence: {res.entry.licence_line()}\n")
            return 0
        if cmd == "verify":
            return _verify(cat, folder, args.names, out)
        if cmd == "remove":
            gone = remove(args.name, folder=folder, catalogue=cat)
            out.write(f"removed {gone}\n" if gone else f"{args.name} was not installed in {folder}\n")
            return 0
    except (ModelsError, CatalogueError) as exc:
        err.write(f"error: {exc}\n")
        return 2
    except OSError as exc:
        err.write(f"error: {exc.strerror or exc} ({exc.filename or folder})\n")
        return 2
    except KeyboardInterrupt:
        err.write("interrupted: nothing was installed and no partial file was kept\n")
        return 130
    raise AssertionError(args.models_command)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="livefuse models", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))
