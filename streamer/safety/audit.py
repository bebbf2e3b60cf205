"""Tamper-evident audit log: append-only JSON lines, each record chained to the one before by sha256
(or HMAC-sha256 when the server has a key, so a forger cannot rebuild the chain).

Record: {"seq", "ts", "event", "data", "prev", "hash"}; hash = H(prev + canonical JSON of the record
without "hash"). `verify` finds edited records (hash), deleted / inserted / reordered ones (seq and prev
links), and a cut tail when the head file (last seq + hash, written after every record) disagrees.
Rotation starts a new segment file when the current one is full; the chain runs on across segments.

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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

log = logging.getLogger(__name__)

GENESIS = "0" * 64
_SEGMENT = re.compile(r"^(?P<stem>.+)\.(?P<n>\d{6})\.jsonl$")


def default_audit_path() -> str:
    """LIVEFUSE_AUDIT_LOG, else the user's state folder: one log per user, wherever a command runs."""
    explicit = os.environ.get("LIVEFUSE_AUDIT_LOG")
    if explicit:
        return explicit
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "livefuse", "audit.jsonl")


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


@dataclass(frozen=True, slots=True)
class AuditConfig:
    path: str
    max_bytes: int = 16 * 1024 * 1024     # rotate when a segment reaches this
    key: bytes | None = None              # HMAC key; None = plain sha256 chain
    fsync: bool = False                   # fsync every record (slower; survives power loss)
    queue_size: int = 10000               # records waiting for the writer; beyond this, appends are counted and dropped


class AuditLog:
    """The writer. `append(event, **data)` is cheap and thread-safe; `close()` drains the queue."""

    def __init__(self, config: AuditConfig) -> None:
        self.config = config
        self.path = Path(config.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.dropped = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=config.queue_size)
        self._seq, self._prev, self._segment_no = self._resume()
        self._file = open(_segment_path(self.path, self._segment_no), "a", encoding="utf-8")
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._closed = False
        self._thread.start()

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
    def _resume(self) -> tuple[int, str, int]:
        segs = segments(self.path)
        if not segs:
            return 0, GENESIS, 1
        last = None
        for seg in reversed(segs):
            last = _last_record(seg)
            if last is not None:
                break
        if last is None:
            return 0, GENESIS, int(_SEGMENT.match(segs[-1].name).group("n"))  # type: ignore[union-attr]
        return int(last["seq"]), str(last["hash"]), int(_SEGMENT.match(segs[-1].name).group("n"))  # type: ignore[union-attr]

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
        record["hash"] = record_hash(record, self.config.key)
        self._file.write(canonical(record).decode() + "\n")
        self._file.flush()
        if self.config.fsync:
            os.fsync(self._file.fileno())
        self._seq, self._prev = record["seq"], record["hash"]
        head = _head_path(self.path)
        tmp = head.with_suffix(".tmp")
        tmp.write_text(json.dumps({"seq": self._seq, "hash": self._prev}))
        os.replace(tmp, head)


def _last_record(path: Path) -> dict[str, Any] | None:
    last = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                last = line
    return json.loads(last) if last else None


@dataclass(slots=True)
class VerifyReport:
    ok: bool = True
    records: int = 0
    segments: int = 0
    last_seq: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "records": self.records, "segments": self.segments, "last_seq": self.last_seq, "errors": self.errors}


def iter_records(path: str | os.PathLike) -> Iterable[tuple[Path, int, str]]:
    for seg in segments(path):
        with open(seg, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield seg, lineno, line


def verify(path: str | os.PathLike, *, key: bytes | None = None, max_errors: int = 50) -> VerifyReport:
    """Check every link of the chain across all segments, then the head file."""
    rep = VerifyReport()
    base = Path(path)
    segs = segments(base)
    rep.segments = len(segs)
    if not segs:
        rep.ok = False
        rep.errors.append(f"no audit log segments found for {base}")
        return rep
    prev, seq = GENESIS, 0

    def err(msg: str) -> None:
        rep.ok = False
        if len(rep.errors) < max_errors:
            rep.errors.append(msg)

    for seg, lineno, line in iter_records(base):
        where = f"{seg.name}:{lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            err(f"{where}: not valid JSON")
            continue
        rep.records += 1
        if not isinstance(rec, dict) or not {"seq", "prev", "hash", "event"} <= rec.keys():
            err(f"{where}: not an audit record")
            continue
        if rec["hash"] != record_hash(rec, key):
            err(f"{where}: record seq {rec['seq']} was edited (hash does not match its content)")
        if rec["seq"] != seq + 1:
            kind = "missing (deleted)" if rec["seq"] > seq + 1 else "out of order or inserted"
            err(f"{where}: seq {rec['seq']} follows seq {seq}: records {kind}")
        if rec["prev"] != prev:
            err(f"{where}: seq {rec['seq']} does not link to the record before it")
        prev, seq = rec["hash"], rec["seq"]
    rep.last_seq = seq
    head = _head_path(base)
    if head.is_file():
        try:
            h = json.loads(head.read_text())
            if h.get("seq") != seq or h.get("hash") != prev:
                err(f"head says the log ends at seq {h.get('seq')}, but it ends at seq {seq}: the tail was cut or rewritten")
        except json.JSONDecodeError:
            err("head file is not valid JSON")
    else:
        err("head file is missing: a cut tail cannot be ruled out")
    return rep
