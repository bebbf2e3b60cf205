"""The control protocol's one handler, without a carrier: every message type the schema admits has its entry
in the table, refusals name what is missing, and a change reaches the session's controls and the audit log."""

from __future__ import annotations

import json
import time

from streamer.app.assembly import ProductConfig, build_services
from streamer.config import ServerConfig
from streamer.safety.audit import iter_records
from streamer.session import protocol
from streamer.session.control import ControlHandler
from streamer.session.session import Session
from streamer.web.kit import SafetyConfig


def _handler(audit_path, stages=("faces", "fusion", "edits", "watermark")) -> tuple[ControlHandler, Session]:
    services = build_services(ProductConfig(safety=SafetyConfig(audit_path=str(audit_path))))
    session = Session()
    return ControlHandler(session, services, stages=lambda: list(stages), tracked=lambda: {3},
                          max_message_bytes=ServerConfig().max_message_bytes), session


def test_every_type_the_schema_admits_has_a_handler(tmp_path):
    handler, _ = _handler(tmp_path / "audit.jsonl")
    admitted = {branch["properties"]["type"]["const"] for branch in protocol.CLIENT_SCHEMA["oneOf"]}
    assert admitted == set(handler._table)


def test_a_change_lands_in_the_controls_and_the_audit_log(tmp_path):
    handler, session = _handler(tmp_path / "audit.jsonl")
    reply = handler.handle(json.dumps({"type": "set_params", "strength": 0.4, "edits": {"smile": 0.5}, "id": 7}))
    assert reply == {"type": "ack", "of": "set_params", "id": 7, "result": ["edits", "strength"]}
    assert session.controls.strength == 0.4 and session.controls.edits["smile"] == 0.5
    deadline = time.monotonic() + 10     # the log writes on its own thread
    while True:
        records = [json.loads(line) for _, _, line in iter_records(tmp_path / "audit.jsonl")]
        if any(r["event"] == "params" and r["data"].get("strength") == 0.4 for r in records) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert any(r["event"] == "params" and r["data"].get("strength") == 0.4 for r in records), records


def test_refusals_name_what_the_session_or_server_lacks(tmp_path):
    handler, session = _handler(tmp_path / "audit.jsonl")
    before = session.controls
    cases = {
        json.dumps({"type": "set_params", "source_id": "nobody"}): "unknown_source",
        json.dumps({"type": "set_params", "fusion": "neural"}): "no_swapper",
        json.dumps({"type": "set_params", "background": {"mode": "blur"}}): "no_background",
        json.dumps({"type": "map_face", "track_id": 9, "source_id": None}): "unknown_track",
        "{not json": "bad_json",
    }
    for raw, code in cases.items():
        reply = handler.handle(raw)
        assert reply["type"] == "error" and reply["code"] == code, (raw, reply)
    assert session.controls == before                       # nothing refused changed the session
    assert handler.handle(json.dumps({"type": "hello", "id": 1}))["stages"] == ["faces", "fusion", "edits", "watermark"]
