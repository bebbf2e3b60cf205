"""The audit log: records chain across rotation, writing is off the caller's thread, and every kind of
tampering is found."""

from __future__ import annotations

import json
import os
import stat
import threading
import time

import numpy as np
import pytest

from streamer.safety import audit
from streamer.app.cli import main
from streamer.safety.audit import AuditConfig, AuditLog, embedding_hash, key_path, record_hash, segments, verify


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
        kinds = {p.kind for p in rep.problems}
        assert kinds == {"delete": {"missing"}, "insert": {"inserted"}, "reorder": {"reordered"}}[case], rep.errors


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


# ---- malformed records, reordering, the default key ------------------------------------------------



def test_a_string_seq_is_reported_not_raised(tmp_path, capsys):
    path = write_log(tmp_path, n=10)
    segs, lines = lines_of(path)
    rec = json.loads(lines[0][2])
    rec["seq"] = "3"
    lines[0][2] = json.dumps(rec)
    rewrite(segs[0], lines[0])
    rep = verify(path)
    assert not rep.ok
    malformed = [p for p in rep.problems if p.kind == "malformed"]
    assert len(malformed) == 1 and malformed[0].line == 3 and "seq is str" in malformed[0].message
    assert main(["audit", "verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "TAMPERED" in out and "audit.000001.jsonl:3: malformed" in out


@pytest.mark.parametrize("line", [
    b"null", b"[]", b'"text"', b"{}", b'{"seq": true, "prev": "", "hash": "", "event": "x"}',
    b'{"seq": 1e400, "prev": "", "hash": "", "event": "x"}', b'{"seq": 1' + b"0" * 5000 + b"}",
    b"[" * 100_000, b"\xff\xfe not utf-8", b'{"seq": 4, "prev": "zz", "hash": "zz", "event": "x"}',
    b'{"seq": 4, "prev": "' + b"0" * 64 + b'", "hash": "' + b"0" * 64 + b'", "event": "\\ud800"}',
    b'{"seq": -1, "prev": "x", "hash": "y", "event": 5}', b"{not json",
])
def test_no_malformed_line_makes_verify_raise(tmp_path, line):
    path = write_log(tmp_path, n=6)
    seg = segments(path)[0]
    content = seg.read_bytes().splitlines(keepends=True)
    seg.write_bytes(b"".join(content[:3]) + line + b"\n" + b"".join(content[3:]))
    rep = verify(path)
    assert not rep.ok
    assert [(p.kind, p.line) for p in rep.problems] == [("malformed", 4)], rep.errors
    assert rep.records == 6 and rep.last_seq == 6


def test_a_swap_of_two_adjacent_lines_is_a_reorder_not_a_deletion(tmp_path):
    path = write_log(tmp_path, n=20)
    segs, lines = lines_of(path)
    ls = lines[0]
    ls[10], ls[11] = ls[11], ls[10]
    rewrite(segs[0], ls)
    rep = verify(path)
    assert [(p.kind, p.line, p.seq) for p in rep.problems] == [("reordered", 12, 11)], rep.errors
    assert "seq 11 comes after seq 12" in rep.errors[0]


def test_a_key_is_made_on_first_use_owner_only_and_reused(tmp_path):
    old = os.umask(0)  # even a permissive umask must not widen it
    try:
        path = write_log(tmp_path, n=3)
    finally:
        os.umask(old)
    key_file = key_path(path)
    assert key_file == tmp_path / "audit.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_bytes().strip()
    assert len(bytes.fromhex(key.decode())) == 32
    first = json.loads(segments(path)[0].read_text().splitlines()[0])
    assert first["hash"] == record_hash(first, key)  # signed, not a plain sha256 chain
    log = AuditLog(AuditConfig(str(path)))
    log.append("again")
    log.close()
    assert key_file.read_bytes().strip() == key
    rep = verify(path)
    assert rep.ok and rep.signed and rep.records == 4, rep.errors


def test_an_explicit_key_file_wins(tmp_path):
    own = tmp_path / "elsewhere.key"
    own.write_bytes(b"an operator's key, kept off the log host\n")
    path = write_log(tmp_path, n=3, key_file=str(own))
    assert not key_path(path).exists()
    assert verify(path, key_file=own).ok
    assert not verify(path).ok  # no key beside the log: verify says it needs one
    assert any(p.kind == "no_key" for p in verify(path).problems)


def _rewrite_tail_consistently(path, n_tail, key=None):
    """What someone who can write the log but not read the key can do: change the last records, recompute
    every hash and link, and rewrite the head to match."""
    seg = segments(path)[-1]
    recs = [json.loads(l) for l in seg.read_text().splitlines()]
    for rec in recs[-n_tail:]:
        rec["data"] = {"text": "nothing to see here"}
    for i in range(len(recs) - n_tail, len(recs)):
        recs[i]["prev"] = recs[i - 1]["hash"]
        recs[i]["hash"] = record_hash(recs[i], key)
    seg.write_text("".join(audit.canonical(r).decode() + "\n" for r in recs))
    (path.parent / (path.name + ".head")).write_text(json.dumps({"seq": recs[-1]["seq"], "hash": recs[-1]["hash"]}))


def test_a_consistent_tail_rewrite_is_found_once_the_log_has_a_key(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    unsigned = write_log(plain, n=12, signed=False)
    _rewrite_tail_consistently(unsigned, 4)
    assert verify(unsigned).ok  # the old default: a rewrite nobody can see

    path = write_log(tmp_path, n=12)
    _rewrite_tail_consistently(path, 4)
    rep = verify(path)
    assert not rep.ok
    kinds = [p.kind for p in rep.problems]
    assert kinds.count("bad_mac") == 5, rep.errors  # the 4 records and the head
    assert {p.seq for p in rep.problems if p.seq} == {9, 10, 11, 12}


def test_an_unsigned_log_gets_signed_from_where_the_key_starts(tmp_path):
    path = write_log(tmp_path, n=5, signed=False)
    log = AuditLog(AuditConfig(str(path)))  # the default now: a key is made, signing starts
    log.append("session_opened")
    log.close()
    rep = verify(path)
    assert rep.ok and rep.signed and rep.unsigned_records == 5, rep.errors
    events = [json.loads(l)["event"] for _, _, l in audit.iter_records(path)]
    assert events[5:] == ["audit_signing_started", "session_opened"]
    # the unsigned part cannot be rewritten either: the first signed record pins its last hash
    seg = segments(path)[0]
    recs = [json.loads(l) for l in seg.read_text().splitlines()]
    recs[4]["data"] = {"text": "rewritten"}
    recs[4]["hash"] = record_hash(recs[4])
    seg.write_text("".join(audit.canonical(r).decode() + "\n" for r in recs))
    assert [p.kind for p in verify(path).problems] == ["broken_link"]


def test_a_torn_last_line_is_reported_and_the_chain_goes_on(tmp_path):
    path = write_log(tmp_path, n=5)
    seg = segments(path)[0]
    with open(seg, "ab") as f:
        f.write(b'{"seq": 6, "ts": 17')  # the process died mid-write
    log = AuditLog(AuditConfig(str(path)))
    log.append("after_restart")
    log.close()
    rep = verify(path)
    assert [(p.kind, p.line) for p in rep.problems] == [("malformed", 6)], rep.errors
    assert rep.records == 6 and rep.last_seq == 6


def test_verify_command_refuses_a_missing_key_file_clearly(tmp_path, capsys):
    path = write_log(tmp_path, n=2)
    assert main(["audit", "verify", str(path), "--key-file", str(tmp_path / "nope.key")]) == 2
    assert "cannot read the audit key file" in capsys.readouterr().err
    assert main(["audit", "verify", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["signed"] and out["problems"] == []
