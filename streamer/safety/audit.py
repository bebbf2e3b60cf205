"""Tamper-evident audit log: append-only JSON lines, each record chained to the one before by
HMAC-sha256 under a key kept beside the log (or a plain sha256 chain when signing is turned off).

Record: {"seq", "ts", "event", "data", "prev", "hash"}; hash = H(prev + canonical JSON of the record
without "hash"). `verify` finds edited records (hash), deleted / inserted / reordered ones (seq and prev
links), and a cut tail when the head file (last seq + hash, and its own MAC, written after every record)
disagrees. Rotation starts a new segment file when the current one is full; the chain runs on across
segments.

The key (`audit.key` beside `audit.jsonl`, 32 random bytes as hex, mode 0600, made on first use) protects
against someone who can write the log but cannot read the key: without it they cannot make a record, a
rewritten tail or a head file that verifies. It does not protect against anyone who can read the key (the
server's own user, root), nor against someone who deletes the key together with the whole log: verify
then has nothing to check against, so keep a copy of the key elsewhere (`--key-file` at verify time) or
give the server a key file outside the log's folder.

Writing happens in a background thread: `append` only puts the record on a queue, so the frame path and
the event loop never wait for the disk. Images never go in: only their sha256 and embedding hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import queue
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from streamer.config import state_dir

log = logging.getLogger(__name__)

GENESIS = "0" * 64
KEY_BYTES = 32
_SEGMENT = re.compile(r"^(?P<stem>.+)\.(?P<n>\d{6})\.jsonl$")
_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)


def default_audit_path() -> str:
    """LIVEFUSE_AUDIT_LOG, else the user's state folder: one log per user, wherever a command runs."""
    explicit = os.environ.get("LIVEFUSE_AUDIT_LOG")
    if explicit:
        return explicit
    return str(state_dir() / "audit.jsonl")


def canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def record_hash(record: dict[str, Any], key: bytes | None = None) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    msg = str(record.get("prev", "")).encode() + canonical(body)
    if key:
        return hmac.new(key, msg, hashlib.sha256).hexdigest()
    return hashlib.sha256(msg).hexdigest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def embedding_hash(vec: np.ndarray, decimals: int = 3) -> str:
    """A stable hash of an identity embedding (rounded, so re-running the embedder gives the same)."""
    v = np.round(np.asarray(vec, np.float64), decimals) + 0.0  # + 0.0 folds -0.0 into 0.0
    return hashlib.sha256(v.astype("<f8").tobytes()).hexdigest()


def segments(path: str | os.PathLike) -> list[Path]:
    """Segment files of the log at `path` (`audit.jsonl` -> audit.000001.jsonl, ...), in order."""
    base = Path(path)
    stem = base.name[: -len(".jsonl")] if base.name.endswith(".jsonl") else base.name
    found = []
    if base.parent.is_dir():
        for p in base.parent.iterdir():
            m = _SEGMENT.match(p.name)
            if m and m.group("stem") == stem:
                found.append((int(m.group("n")), p))
    return [p for _, p in sorted(found)]


def _segment_path(path: Path, n: int) -> Path:
    stem = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    return path.parent / f"{stem}.{n:06d}.jsonl"


def _head_path(path: Path) -> Path:
    return path.parent / (path.name + ".head")


def _stem(path: Path) -> str:
    return path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.name


def key_path(log_path: str | os.PathLike) -> Path:
    """Where the log's own key lives: `audit.key` beside `audit.jsonl`."""
    base = Path(log_path)
    return base.parent / f"{_stem(base)}.key"


def _read_key(path: Path) -> bytes:
    """The key in `path` (surrounding whitespace stripped); ValueError when it cannot be one."""
    try:
        st = path.stat()
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the audit key file {path}: {exc.strerror or exc}") from None
    if st.st_mode & 0o077:
        log.warning("audit key file %s can be read by other users (mode %o): they could forge the log; "
                    "chmod 600 it", path, st.st_mode & 0o777)
    if len(secret) < 16:
        raise ValueError(f"audit key file {path} holds {len(secret)} bytes; a key needs at least 16")
    return secret


def load_key(log_path: str | os.PathLike, key_file: str | os.PathLike | None = None) -> bytes | None:
    """The key to verify with: `key_file` when given, else the one beside the log, else None (no key)."""
    if key_file:
        return _read_key(Path(key_file))
    path = key_path(log_path)
    return _read_key(path) if path.exists() else None


def load_or_create_key(log_path: str | os.PathLike, key_file: str | os.PathLike | None = None) -> bytes:
    """The key to sign with: `key_file` when given (it must exist), else the one beside the log, made on
    first use from os.urandom. It is created with O_EXCL and mode 0600: never readable by other users,
    not even for a moment, and two servers starting at once end up with the same key."""
    if key_file:
        return _read_key(Path(key_file))
    path = key_path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        for _ in range(100):  # another process made it a moment ago and may still be writing it
            try:
                return _read_key(path)
            except ValueError:
                time.sleep(0.01)
        return _read_key(path)
    secret = os.urandom(KEY_BYTES).hex().encode()
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
        os.write(fd, secret + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return secret


def head_mac(seq: int, last_hash: str, key: bytes) -> str:
    """The head file's own MAC, so a cut or rewritten tail cannot come with a matching head."""
    return hmac.new(key, f"head:{seq}:{last_hash}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class AuditConfig:
    path: str
    max_bytes: int = 16 * 1024 * 1024     # rotate when a segment reaches this
    key: bytes | None = None              # HMAC key; None = key_file, else the key beside the log
    key_file: str | None = None           # a file holding the key (it must exist); wins over the one beside the log
    signed: bool = True                   # False, with no key: a plain sha256 chain, which a writer can rebuild
    fsync: bool = False                   # fsync every record (slower; survives power loss)
    queue_size: int = 10000               # records waiting for the writer; beyond this, appends are counted and dropped
    stdout: bool = False                  # also write each record, exactly as in the file, to stdout (one JSON line)


class AuditLog:
    """The writer. `append(event, **data)` is cheap and thread-safe; `close()` drains the queue."""

    def __init__(self, config: AuditConfig, echo: Any = None) -> None:
        """`echo`: where `config.stdout` sends the lines (default sys.stdout; a test passes its own)."""
        self.config = config
        self._echo = (echo if echo is not None else sys.stdout) if config.stdout else None
        self.path = Path(config.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.dropped = 0
        if config.key is not None:
            self._key: bytes | None = config.key
        elif config.signed or config.key_file:
            self._key = load_or_create_key(self.path, config.key_file)
        else:
            self._key = None
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=config.queue_size)
        last, self._segment_no = self._resume()
        self._seq, self._prev = (last["seq"], last["hash"]) if last else (0, GENESIS)
        segment = _segment_path(self.path, self._segment_no)
        _end_torn_line(segment)
        self._file = open(segment, "a", encoding="utf-8")
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._closed = False
        self._thread.start()
        if self._key and last is not None and not hmac.compare_digest(last["hash"], record_hash(last, self._key)):
            # the chain so far is unsigned (or under another key): mark where signing starts, so the head
            # and the records after it are signed from here on
            self.append("audit_signing_started", records_before=self._seq)

    # -- the caller's side -------------------------------------------------------------------------
    def append(self, event: str, **data: Any) -> None:
        if self._closed:
            raise RuntimeError("audit log is closed")
        try:
            self._queue.put_nowait({"ts": round(time.time(), 3), "event": str(event), "data": data})
        except queue.Full:  # never block the caller; the gap is itself recorded when room returns
            self.dropped += 1

    __call__ = append  # fits a `audit(event, **fields)` hook

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything appended so far is on disk."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.002)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=30)
        self._file.close()

    # -- the writer's side -------------------------------------------------------------------------
    def _resume(self) -> tuple[dict[str, Any] | None, int]:
        """(the last well-formed record or None, the segment number to append to). A torn last line (a
        crash mid-write) is left for verify to report; the chain goes on from the record before it."""
        segs = segments(self.path)
        if not segs:
            return None, 1
        last = None
        for seg in reversed(segs):
            last = _last_record(seg)
            if last is not None:
                break
        return last, int(_SEGMENT.match(segs[-1].name).group("n"))  # type: ignore[union-attr]

    def _run(self) -> None:
        reported_drops = 0
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self.dropped != reported_drops:
                    self._write({"ts": item["ts"], "event": "audit_dropped", "data": {"count": self.dropped - reported_drops}})
                    reported_drops = self.dropped
                self._write(item)
            except Exception:  # the writer must survive a bad record; the record is lost and said so
                log.exception("audit writer failed on %r", item and item.get("event"))
            finally:
                self._queue.task_done()

    def _write(self, item: dict[str, Any]) -> None:
        if self._file.tell() >= self.config.max_bytes:
            self._file.close()
            self._segment_no += 1
            self._file = open(_segment_path(self.path, self._segment_no), "a", encoding="utf-8")
        record = {"seq": self._seq + 1, "ts": item["ts"], "event": item["event"], "data": item["data"], "prev": self._prev}
        record = json.loads(canonical(record))  # what goes to disk is what gets hashed
        record["hash"] = record_hash(record, self._key)
        line = canonical(record).decode() + "\n"
        self._file.write(line)
        self._file.flush()
        if self._echo is not None:  # the same bytes as on disk: a collector can check the chain from them
            try:
                self._echo.write(line)
                self._echo.flush()
            except (OSError, ValueError):  # a closed or broken stdout must not stop the file
                pass
        if self.config.fsync:
            os.fsync(self._file.fileno())
        self._seq, self._prev = record["seq"], record["hash"]
        head = _head_path(self.path)
        tmp = head.with_suffix(".tmp")
        body: dict[str, Any] = {"seq": self._seq, "hash": self._prev, "keyed": bool(self._key)}
        if self._key:
            body["mac"] = head_mac(self._seq, self._prev, self._key)
        tmp.write_text(json.dumps(body))
        os.replace(tmp, head)


def _end_torn_line(path: Path) -> None:
    """Start appends on a fresh line when the file ends mid-record, so the next record stays whole."""
    try:
        with open(path, "rb+") as f:
            if f.seek(0, os.SEEK_END) and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                f.write(b"\n")
    except FileNotFoundError:
        pass


def _last_record(path: Path) -> dict[str, Any] | None:
    last = None
    with open(path, "rb") as f:
        for line in f:
            rec = _parse_record(line)
            if isinstance(rec, dict):
                last = rec
    return last


_REQUIRED = ("seq", "prev", "hash", "event")


def _parse_record(raw: bytes) -> dict[str, Any] | str:
    """A well-formed record, or a sentence saying what is wrong with the line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    if not text.strip():
        return "an empty line"
    try:
        rec = json.loads(text)
    except (ValueError, RecursionError):
        return "not valid JSON"
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an audit record"
    absent = [k for k in _REQUIRED if k not in rec]
    if absent:
        return f"not an audit record (no {', '.join(absent)})"
    seq = rec["seq"]
    if type(seq) is not int or seq < 1:
        return f"seq is {type(seq).__name__} {str(seq)[:20]!r}, not a whole number from 1"
    for k in ("prev", "hash"):
        if not isinstance(rec[k], str) or not _HEX64.fullmatch(rec[k]):
            return f"seq {seq}: {k} is not 64 hex digits"
    if not isinstance(rec["event"], str):
        return f"seq {seq}: event is not text"
    try:
        canonical(rec)
    except (UnicodeEncodeError, ValueError, TypeError):
        return f"seq {seq}: holds text that cannot be encoded (an unpaired surrogate)"
    return rec


PROBLEM_KINDS = ("malformed", "tampered_hash", "bad_mac", "reordered", "missing", "inserted", "broken_link",
                 "cut_tail", "head_missing", "unreadable", "no_key")


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing verify found: `kind` (one of PROBLEM_KINDS), where (segment file and line, when it is a
    record), and a sentence for people."""

    kind: str
    message: str
    segment: str | None = None
    line: int | None = None
    seq: int | None = None

    def __str__(self) -> str:
        where = f"{self.segment}:{self.line}: " if self.line is not None else (f"{self.segment}: " if self.segment else "")
        return f"{where}{self.kind}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "segment": self.segment, "line": self.line, "seq": self.seq}


@dataclass(slots=True)
class VerifyReport:
    ok: bool = True
    records: int = 0
    segments: int = 0
    last_seq: int = 0
    signed: bool = False                  # checked against an HMAC key
    unsigned_records: int = 0             # records from before the key existed: chained, not signed
    problems: list[Problem] = field(default_factory=list)   # the first max_problems found
    problem_count: int = 0                                   # all found
    max_problems: int = 50

    @property
    def errors(self) -> list[str]:
        return [str(p) for p in self.problems]

    def add(self, problem: Problem) -> None:
        self.ok = False
        self.problem_count += 1
        if len(self.problems) < self.max_problems:
            self.problems.append(problem)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "records": self.records, "segments": self.segments, "last_seq": self.last_seq,
                "signed": self.signed, "unsigned_records": self.unsigned_records, "problem_count": self.problem_count,
                "errors": self.errors,
                "problems": [p.as_dict() for p in self.problems]}


def iter_records(path: str | os.PathLike) -> Iterable[tuple[Path, int, str]]:
    for seg in segments(path):
        with open(seg, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield seg, lineno, line


@dataclass(frozen=True, slots=True)
class _Entry:
    segment: str
    line: int
    seq: int
    prev: str
    hash: str


def verify(path: str | os.PathLike, *, key: bytes | None = None, key_file: str | os.PathLike | None = None,
           max_errors: int = 50) -> VerifyReport:
    """Check every record and link of the chain across all segments, then the head file.

    The key is `key`, else `key_file`, else the one beside the log. Never raises on what the log holds:
    every problem becomes a Problem with its line."""
    rep = VerifyReport(max_problems=max_errors)
    base = Path(path)
    try:
        segs = segments(base)
    except OSError as exc:
        rep.add(Problem("unreadable", f"cannot list {base.parent}: {exc.strerror or exc}"))
        return rep
    rep.segments = len(segs)
    if not segs:
        rep.add(Problem("missing", f"no audit log segments found for {base}"))
        return rep
    if key is None:
        try:
            key = load_key(base, key_file)
        except ValueError as exc:
            rep.add(Problem("no_key", str(exc)))
    head = _read_head(base, rep)
    keyed_log = bool(head and head.get("keyed"))
    if key is None and keyed_log:
        rep.add(Problem("no_key", f"the log is signed with an HMAC key, but none was given or found at "
                        f"{key_path(base)}; pass --key-file"))
    rep.signed = key is not None

    entries = _read_entries(segs, key, check_hash=key is not None or not keyed_log, rep=rep)
    _check_order(entries, rep)
    last = max(entries, key=lambda e: e.seq, default=None)
    rep.last_seq = last.seq if last else 0
    _check_head(head, last, key, rep)
    return rep


def _read_entries(segs: list[Path], key: bytes | None, *, check_hash: bool, rep: VerifyReport) -> list[_Entry]:
    entries: list[_Entry] = []
    signed_seen = False
    for seg in segs:
        try:
            f = open(seg, "rb")
        except OSError as exc:
            rep.add(Problem("unreadable", f"cannot open: {exc.strerror or exc}", seg.name))
            continue
        with f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                rec = _parse_record(raw)
                if isinstance(rec, str):
                    rep.add(Problem("malformed", rec, seg.name, lineno))
                    continue
                rep.records += 1
                seq = rec["seq"]
                if check_hash and key is not None:
                    if hmac.compare_digest(rec["hash"], record_hash(rec, key)):
                        signed_seen = True
                    elif not signed_seen and rec["hash"] == record_hash(rec):
                        rep.unsigned_records += 1  # written before the log had a key
                    else:
                        rep.add(Problem("bad_mac", f"record seq {seq} was edited or written without the key "
                                        "(its HMAC does not match)", seg.name, lineno, seq))
                elif check_hash and rec["hash"] != record_hash(rec):
                    rep.add(Problem("tampered_hash", f"record seq {seq} was edited (hash does not match its content)",
                                    seg.name, lineno, seq))
                entries.append(_Entry(seg.name, lineno, seq, rec["prev"], rec["hash"]))
    return entries


def _check_order(entries: list[_Entry], rep: VerifyReport) -> None:
    """Copies, then file order, then gaps, then links in seq order: a swap of two records is a reorder
    (their links still hold in seq order), not a deletion."""
    first: dict[int, _Entry] = {}
    unique: list[_Entry] = []
    for e in entries:
        if e.seq in first:
            f = first[e.seq]
            rep.add(Problem("inserted", f"seq {e.seq} appears again (first at {f.segment}:{f.line}): a record was "
                            "copied in", e.segment, e.line, e.seq))
            continue
        first[e.seq] = e
        unique.append(e)
    for a, b in zip(unique, unique[1:]):
        if b.seq < a.seq:
            rep.add(Problem("reordered", f"seq {b.seq} comes after seq {a.seq} ({a.segment}:{a.line}): records "
                            "out of order (swapped or moved)", b.segment, b.line, b.seq))
    by_seq = sorted(unique, key=lambda e: e.seq)
    before: _Entry | None = None
    for e in by_seq:
        expected = 1 if before is None else before.seq + 1
        if e.seq > expected:
            gap = f"seq {expected}" if e.seq == expected + 1 else f"seqs {expected}-{e.seq - 1}"
            rep.add(Problem("missing", f"{gap} missing before seq {e.seq}: records deleted", e.segment, e.line, e.seq))
        elif e.prev != (GENESIS if before is None else before.hash):
            rep.add(Problem("broken_link", f"seq {e.seq} does not link to the record before it (seq {expected - 1}): "
                            "records were rewritten", e.segment, e.line, e.seq))
        before = e


def _read_head(base: Path, rep: VerifyReport) -> dict[str, Any] | None:
    head = _head_path(base)
    if not head.is_file():
        rep.add(Problem("head_missing", "head file is missing: a cut tail cannot be ruled out", head.name))
        return None
    try:
        h = json.loads(head.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        rep.add(Problem("malformed", "head file is not valid JSON", head.name))
        return None
    if not isinstance(h, dict) or type(h.get("seq")) is not int or not isinstance(h.get("hash"), str):
        rep.add(Problem("malformed", "head file does not hold a seq and a hash", head.name))
        return None
    return h


def _check_head(head: dict[str, Any] | None, last: _Entry | None, key: bytes | None, rep: VerifyReport) -> None:
    if head is None:
        return
    seq = last.seq if last else 0
    if head["seq"] != seq or head["hash"] != (last.hash if last else GENESIS):
        rep.add(Problem("cut_tail", f"head says the log ends at seq {head['seq']}, but it ends at seq {seq}: the "
                        "tail was cut or rewritten", "head"))
    if key is None:
        return
    mac = head.get("mac")
    if not head.get("keyed") or not isinstance(mac, str):
        rep.add(Problem("bad_mac", "the head file is not signed, yet the log has a key: the log was rewritten "
                        "without it", "head"))
    elif not hmac.compare_digest(mac, head_mac(head["seq"], head["hash"], key)):
        rep.add(Problem("bad_mac", "the head file's HMAC does not match: it was rewritten without the key", "head"))
