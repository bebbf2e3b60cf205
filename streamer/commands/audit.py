"""`livefuse audit verify [PATH]`: check the audit log's hash chain (edits, deletions, insertions,
reordering, a cut tail) across all its rotated segments."""

from __future__ import annotations

import json
import os

from streamer.safety.audit import default_audit_path

HELP = "check the tamper-evident audit log"
DEFAULT_PATH = default_audit_path()


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    v = sub.add_parser("verify", help="verify the hash chain")
    v.add_argument("path", nargs="?", default=DEFAULT_PATH, help=f"log base path (default {DEFAULT_PATH}; env LIVEFUSE_AUDIT_LOG)")
    v.add_argument("--key-file", help="file holding the HMAC key, if the server signs its log")
    v.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from streamer.safety.audit import verify

    key = None
    if args.key_file:
        with open(args.key_file, "rb") as f:
            key = f.read().strip()
    report = verify(args.path, key=key)
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        state = "OK" if report.ok else "TAMPERED"
        print(f"{args.path}: {state}: {report.records} records in {report.segments} segment(s), last seq {report.last_seq}")
        for e in report.errors:
            print(f"  {e}")
    return 0 if report.ok else 1
