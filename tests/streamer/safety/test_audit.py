"""The audit log: records chain across rotation, writing is off the caller's thread, and every kind of
tampering is found."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from streamer.safety import audit
from streamer.safety.audit import AuditConfig, AuditLog, embedding_hash, segments, verify


def write_log(tmp_path, n=30, **cfg):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(AuditConfig(str(path), **cfg))
    for i in range(n):
        log.append("prompt", session="s1", text=f"prompt {i}", decision="allowed")
    log.close()
    return path


def lines_of(path):
    segs = segments(path)
    return segs, [s.read_text().splitlines() for s in segs]


def test_clean_log_verifies_and_rotation_keeps_the_chain(tmp_path):
    path = write_log(tmp_path, n=60, max_bytes=2000)
    segs, lines = lines_of(path)
    assert len(segs) > 2
    rep = verify(path)
    assert rep.ok, rep.errors
    assert rep.records == 60 and rep.last_seq == 60 and rep.segments == len(segs)
    first_of_second = json.loads(lines[1][0])
    last_of_first = json.loads(lines[0][-1])
    assert first_of_second["prev"] == last_of_first["hash"]


def test_reopening_continues_the_chain(tmp_path):
    path = write_log(tmp_path, n=5)
    log = AuditLog(AuditConfig(str(path)))
    log.append("session_end", session="s1")
    log.close()
    rep = verify(path)
    assert rep.ok and rep.records == 6


def rewrite(seg, lines):
    seg.write_text("\n".join(lines) + "\n")


def test_edited_record_is_found(tmp_path):
    path = write_log(tmp_path)
    segs, lines = lines_of(path)
    rec = json.loads(lines[0][7])
    rec["data"]["text"] = "something harmless"
    lines[0][7] = json.dumps(rec)
    rewrite(segs[0], lines[0])
    rep = verify(path)
    assert not rep.ok and any("seq 8 was edited" in e for e in rep.errors)


def test_edit_with_a_recomputed_hash_breaks_the_next_link(tmp_path):
    path = write_log(tmp_path)
    segs, lines = lines_of(path)
    rec = json.loads(lines[0][3])
    rec["data"]["decision"] = "refused"
    rec["hash"] = audit.record_hash(rec)
    lines[0][3] = json.dumps(rec)
    rewrite(segs[0], lines[0])
    rep = verify(path)
    assert not rep.ok and any("seq 5 does not link" in e for e in rep.errors)


def test_deleted_inserted_and_reordered_records_are_found(tmp_path):
    for case in ("delete", "insert", "reorder"):
        d = tmp_path / case
        d.mkdir()
        path = write_log(d)
        segs, lines = lines_of(path)
        ls = lines[0]
        if case == "delete":
            del ls[10]
        elif case == "insert":
            ls.insert(10, ls[4])
        else:
            ls[10], ls[11] = ls[11], ls[10]
        rewrite(segs[0], ls)
        rep = verify(path)
        assert not rep.ok, case
        assert any(w in " ".join(rep.errors) for w in ("missing", "out of order", "does not link")), (case, rep.errors)


def test_cut_tail_and_deleted_segment_are_found(tmp_path):
    path = write_log(tmp_path, n=40, max_bytes=1500)
    segs, lines = lines_of(path)
    rewrite(segs[-1], lines[-1][:-2])
    rep = verify(path)
    assert not rep.ok and any("tail was cut" in e for e in rep.errors)

    other = tmp_path / "b"
    other.mkdir()
    path2 = write_log(other, n=40, max_bytes=1500)
    segs2 = segments(path2)
    segs2[1].unlink()
    rep2 = verify(path2)
    assert not rep2.ok and any("missing" in e for e in rep2.errors)


def test_hmac_key_makes_forgery_detectable(tmp_path):
    key = b"server secret"
    path = write_log(tmp_path, n=5, key=key)
    assert verify(path, key=key).ok
    assert not verify(path).ok            # a plain-sha256 rebuild does not pass a keyed check
    assert not verify(path, key=b"wrong").ok


def test_append_never_waits_for_the_disk(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(AuditConfig(str(path)))
    gate = threading.Event()
    real_write = log._write

    def slow_write(item):
        gate.wait(5)
        real_write(item)

    monkeypatch.setattr(log, "_write", slow_write)
    t0 = time.perf_counter()
    for i in range(200):
        log.append("frame_stats", i=i)
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0  # the writer is stuck, yet 200 appends returned
    assert log._thread.name == "audit-writer" and log._thread is not threading.current_thread()
    gate.set()
    log.close()
    assert verify(path).records == 200


def test_full_queue_drops_are_recorded_not_blocking(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(AuditConfig(str(path), queue_size=5))
    gate = threading.Event()
    real_write = log._write
    monkeypatch.setattr(log, "_write", lambda item: (gate.wait(5), real_write(item)))
    for i in range(50):
        log.append("x", i=i)
    assert log.dropped > 0
    gate.set()
    log.close()
    events = [json.loads(l)["event"] for _, _, l in audit.iter_records(path)]
    assert "audit_dropped" in events
    assert verify(path).ok


def test_embedding_hash_is_stable_and_a_closed_log_refuses(tmp_path):
    v = np.random.default_rng(0).normal(size=128).astype(np.float32)
    assert embedding_hash(v) == embedding_hash(v + 1e-6)
    assert embedding_hash(v) != embedding_hash(-v)
    path = tmp_path / "audit.jsonl"
    log = AuditLog(AuditConfig(str(path)))
    log.close()
    with pytest.raises(RuntimeError):
        log.append("late")
