"""The control protocol's one handler: a message in, the session changed (or not), a reply out.

The data channel (streamer/rtc/peer.py), the WebSocket (streamer/web/control_socket.py) and the REST outputs
route only carry bytes here, on the session's control thread, in arrival order. Each message type has one
method in `ControlHandler`'s table; the protocol module parses and checks the message first."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from streamer.session import protocol
from streamer.session.face_map import KEEP, MAX_MAPPED_FACES
from streamer.session.session import Session

if TYPE_CHECKING:  # pragma: no cover
    from streamer.services import Services

log = logging.getLogger(__name__)

Reply = dict[str, Any]
RestreamHook = Callable[[list[Any]], None]


class ControlHandler:
    """One session's control messages. `stages` and `tracked` read the session's pipeline (stage names) and
    its stream (the track ids in view) when a message needs them; `restream` is the server's hook for
    `outputs.restream` (None: this server does not restream)."""

    def __init__(self, session: Session, services: "Services", *, stages: Callable[[], list[str]],
                 tracked: Callable[[], Any], max_message_bytes: int, metrics: Any = None,
                 restream: RestreamHook | None = None) -> None:
        self.session = session
        self.services = services
        self.stages = stages
        self.tracked = tracked
        self.max_message_bytes = max_message_bytes
        self.metrics = metrics
        self.restream = restream
        self._table: dict[str, Callable[[dict[str, Any], Any], Reply]] = {
            "ping": self._ping, "hello": self._hello, "set_prompt": self._set_prompt,
            "map_face": self._map_face, "set_params": self._set_params,
        }

    def handle(self, raw: str | bytes) -> Reply | None:
        """Act on one control message; its reply (ack or error) for the carrier to send back."""
        try:
            msg = protocol.parse_client_message(raw, max_bytes=self.max_message_bytes)
        except protocol.ProtocolError as exc:
            self._count("refused")
            return exc.reply()
        self._count("ok")
        kind, mid = msg["type"], msg.get("id")
        act = self._table.get(kind)
        if act is None:  # pragma: no cover - the schema admits only the table's types
            return protocol.error("unknown_type", f"no handler for {kind!r}", id=mid)
        try:
            return act(msg, mid)
        except Exception as exc:  # a hook failed: tell the client, keep the stream
            log.exception("session %s: %s failed", self.session.id, kind)
            return protocol.error("failed", f"{kind} failed: {exc}", id=mid)

    def welcome(self, mid: Any = None) -> Reply:
        """What the carrier sends first, and the answer to `hello`."""
        reply = {"type": "welcome", "session": self.session.id, "version": protocol.PROTOCOL_VERSION,
                 "stages": self.stages()}
        return reply if mid is None else {**reply, "id": mid}

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.messages.labels(outcome).inc()

    # ---- the table ---------------------------------------------------------------------------------
    def _ping(self, msg: dict[str, Any], mid: Any) -> Reply:
        return {"type": "pong", "t": msg.get("t"), "server_time": time.time(), "id": mid}

    def _hello(self, msg: dict[str, Any], mid: Any) -> Reply:
        return self.welcome(mid)

    def _set_prompt(self, msg: dict[str, Any], mid: Any) -> Reply:
        result = self.services.set_prompt(self.session, msg["text"])  # it audits its own decision
        return {"type": "ack", "of": "set_prompt", "id": mid, "result": result}

    def _map_face(self, msg: dict[str, Any], mid: Any) -> Reply:
        """A face the stream tracks (or one already mapped) gets a registered source, "keep" or (null) the
        default again; at most MAX_MAPPED_FACES mappings."""
        tid, sid = msg["track_id"], msg["source_id"]
        mapped = self.session.controls.face_sources
        if sid is not None and sid != KEEP and sid not in self.session.sources:
            return protocol.error("unknown_source", f"no source {sid!r} in this session; upload it first", id=mid)
        if tid not in mapped and tid not in self.tracked():
            return protocol.error("unknown_track", f"no face with track id {tid} is tracked now; the stats "
                                  "message's faces list the ones that are", id=mid)
        if sid is not None and tid not in mapped and len(mapped) >= MAX_MAPPED_FACES:
            return protocol.error("too_many_faces", f"{len(mapped)} faces are mapped already, the most a session "
                                  f"may map; clear one first (source_id null)", id=mid)
        faces = self.session.map_face(tid, sid)
        self.services.audit("params", session=self.session.id, face=tid, face_source=sid)
        return {"type": "ack", "of": "map_face", "id": mid, "result": {str(k): v for k, v in faces.items()}}

    def _set_params(self, msg: dict[str, Any], mid: Any) -> Reply:
        try:
            changes = protocol.params_to_controls(msg)
        except protocol.ProtocolError as exc:
            return exc.reply()
        refused = self._refusal(changes) or self._face_outputs(changes)
        if refused is not None:
            return protocol.error(refused[0], refused[1], id=mid)
        self.session.update(**changes)
        self.services.audit("params", session=self.session.id,
                            **{k: (dict(v) if isinstance(v, dict) else v.to_json() if hasattr(v, "to_json") else v)
                               for k, v in changes.items()})
        return {"type": "ack", "of": "set_params", "id": mid, "result": sorted(changes)}

    def _refusal(self, changes: dict[str, Any]) -> tuple[str, str] | None:
        """(code, message) when a change names what this session or server does not have."""
        stages = self.stages()
        bg = changes.get("background")
        if bg is not None and bg.mode == "image" and bg.image_id not in self.session.backgrounds:
            return "unknown_background", (f"no background picture {bg.image_id!r} in this session; upload it first "
                                          "(POST /sessions/{id}/background)")
        if bg is not None and "background" not in stages:
            return "no_background", "this server's pipeline has no background stage"
        sid = changes.get("source_id")
        if sid is not None and sid not in self.session.sources:
            return "unknown_source", f"no source {sid!r} in this session"
        for tid, fsid in changes.get("face_sources", {}).items():
            if fsid != KEEP and fsid not in self.session.sources:
                return "unknown_source", f"face {tid}: no source {fsid!r} in this session"
        if changes.get("fusion") in ("neural", "both") and "swap" not in stages:
            return "no_swapper", "neural fusion needs a swap model: this server runs without --swapper"
        return None

    def _face_outputs(self, changes: dict[str, Any]) -> tuple[str, str] | None:
        """set_params' avatar parts, made into controls in place: `outputs` merged over the session's,
        `calibrate` as the next calibration, `face_neutral` checked; (code, message) when refused."""
        if "outputs" in changes:
            outputs = dict(changes.pop("outputs"))
            restream = outputs.pop("restream", None)   # addresses with stream keys: neither kept nor audited
            if outputs and "face_out" not in self.stages():
                return "no_face_outputs", "this server's pipeline has no face-out stage"
            refusal = protocol.output_refusal(self.session.client, outputs)
            if refusal is not None:
                return "output_refused", refusal
            if restream is not None and self.restream is None:
                return "no_restream", "this server does not restream sessions"
            if restream is not None:
                self.restream(list(restream))   # the server's restreams (streamer/web/restreams.py)
            if outputs:
                changes["outputs"] = protocol.merge_outputs(self.session.controls.outputs, outputs)
        if changes.pop("calibrate", False):
            changes["calibration"] = self.session.controls.calibration + 1
        if changes.get("face_neutral") is not None:
            from engines.face_rig import Neutral

            try:
                Neutral.from_json(changes["face_neutral"])
            except ValueError as exc:
                return "invalid", f"face_neutral: {exc}"
        return None
