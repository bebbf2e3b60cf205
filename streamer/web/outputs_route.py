"""`/v1/sessions/{session}/outputs`: a live session's avatar and face-data outputs over REST, for programs
that set up a stream from outside it (a stream deck, a bot, an agent's backend).

GET answers what the session asks for and each output's state; POST takes the control protocol's own
names, `{"outputs": {...}, "calibrate": true, "face_neutral": {...}}` (streamer/session/protocol.py,
OUTPUTS_SCHEMA), and runs them through the session's one control handler (the data channel's), so the
same schema, the same rule on where outputs may point and the same audit record apply. Owner or admin
only; 404 for anyone else, as for every session route."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from streamer.session import protocol
from streamer.web.httpkit import Refused, read_limited, require_type

MAX_BODY_BYTES = 16 * 1024
KEYS = ("outputs", "calibrate", "face_neutral")
STATUS_OF = {"output_refused": 403, "no_face_outputs": 409, "too_large": 413}


def outputs_state(peer: Any) -> dict[str, Any]:
    """What the session asks for and each output's state (the face-out stage's outputs)."""
    stage = next((s for s in peer.worker.pipeline.stages if getattr(s, "name", "") == "face_out"), None)
    state = stage.outputs.status() if stage is not None else {}
    c = peer.session.controls
    return {"session": peer.session.id, "outputs": dict(c.outputs) if c.outputs else {},
            "calibration": c.calibration, "state": state}


async def session_outputs(server: Any, request: web.Request) -> web.Response:
    peer = server.owned_peer(request, request.match_info["session"])
    if request.method == "POST":
        require_type(request, ("application/json",))
        raw = await read_limited(request, MAX_BODY_BYTES, server.config.body_limits)
        try:
            body = protocol.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise Refused(400, "the body is not JSON", code="bad_json") from None
        if not isinstance(body, dict) or not body or any(k not in KEYS for k in body):
            raise Refused(400, f"the body is an object of {', '.join(KEYS)} (the control protocol's set_params names)",
                          code="invalid")
        reply = await peer.handle(protocol.dumps({"type": "set_params", **body}))
        if reply is None:
            raise Refused(404, f"no session {peer.session.id!r}")
        if reply.get("type") == "error":
            code = str(reply.get("code", "invalid"))
            raise Refused(STATUS_OF.get(code, 400), str(reply.get("message", "refused")), code=code)
    body = outputs_state(peer)
    restreams = getattr(server, "restreams", None)
    if restreams is not None:   # each destination's state, its address with the key hidden
        body["restream"] = restreams.status(peer.session.id)
    return web.json_response(body, headers={"Cache-Control": "no-store"})
