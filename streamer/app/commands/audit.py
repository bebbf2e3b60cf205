"""`livefuse audit verify [PATH]`: check the audit log's chain (edits, deletions, insertions, reordering,
a cut tail, malformed lines) across all its rotated segments, with its HMAC key."""

from __future__ import annotations

import json
import sys

from streamer.safety.audit import default_audit_path

HELP = "check the tamper-evident audit log"
DEFAULT_PATH = default_audit_path()


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    v = sub.add_parser("verify", help="verify the hash chain")
    v.add_argument("path", nargs="?", default=DEFAULT_PATH, help=f"log base path (default {DEFAULT_PATH}; env LIVEFUSE_AUDIT_LOG)")
    v.add_argument("--key-file", help="file holding the HMAC key (default: the key beside the log, e.g. audit.key)")
    v.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from streamer.safety.audit import key_path, load_key, verify

    try:
        key = load_key(args.path, args.key_file)
    except ValueError as exc:
        print(f"livefuse audit verify: {exc}", file=sys.stderr)
        return 2
    report = verify(args.path, key=key)
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        state = "OK" if report.ok else "TAMPERED"
        print(f"{args.path}: {state}: {report.records} records in {report.segments} segment(s), last seq {report.last_seq}")
        if report.signed:
            print(f"  signed: checked with the key in {args.key_file or key_path(args.path)}")
            if report.unsigned_records:
                print(f"  {report.unsigned_records} records from before the key existed are chained but not signed")
        else:
            print("  unsigned: no key was found, so anyone who can write the log could rewrite it consistently")
        for problem in report.problems:
            print(f"  {problem}")
        if report.problem_count > len(report.problems):
            print(f"  ... and {report.problem_count - len(report.problems)} more")
    return 0 if report.ok else 1
