"""`livefuse tokens issue|revoke|list FILE`: the bearer tokens a server bound beyond loopback requires.
The file keeps only sha256 hashes; a new token is printed once and never stored. A running server
follows the file: a revoked token is refused from its next request on (no restart)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "issue, revoke or list bearer tokens (for `livefuse serve --tokens FILE`)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    issue = sub.add_parser("issue", help="add a token and print it once")
    issue.add_argument("file", help="tokens file (created if missing, mode 600)")
    issue.add_argument("id", help="who the token is for (recorded in the audit log)")
    issue.add_argument("--ttl-days", type=float, help="expires after this many days (default: never)")
    issue.add_argument("--max-sessions", type=int, default=4, help="concurrent streams (default 4)")
    issue.add_argument("--rate", type=float, default=60.0, help="requests per minute (default 60)")
    issue.add_argument("--admin", action="store_true", help="may see and end every session, not only its own")
    revoke = sub.add_parser("revoke", help="remove every token of an id")
    revoke.add_argument("file")
    revoke.add_argument("id")
    listing = sub.add_parser("list", help="ids, expiry and limits (never the tokens)")
    listing.add_argument("file")


def run(args: argparse.Namespace) -> int:
    from streamer.safety.auth import TokenStore

    path = Path(args.file)
    if args.action == "issue":
        store = TokenStore.load(path) if path.exists() else TokenStore()
        ttl = args.ttl_days * 86400 if args.ttl_days else None
        try:
            raw = store.issue(args.id, ttl=ttl, max_sessions=args.max_sessions, rate_per_minute=args.rate,
                              admin=args.admin)
        except ValueError as exc:
            print(f"livefuse tokens: {exc}", file=sys.stderr)
            return 2
        store.save(path)
        print(raw)
        print(f"token for {args.id!r} added to {path}; it is shown only now", file=sys.stderr)
        return 0
    if not path.exists():
        print(f"livefuse tokens: no tokens file {path}", file=sys.stderr)
        return 2
    store = TokenStore.load(path)
    if args.action == "revoke":
        before = len(store.entries())
        store.revoke(args.id)
        store.save(path)
        print(f"revoked {before - len(store.entries())} token(s) of {args.id!r}", file=sys.stderr)
        return 0
    print(json.dumps(store.entries(), indent=2))
    return 0
