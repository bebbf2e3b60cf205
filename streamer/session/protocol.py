"""The data-channel protocol: small JSON messages, each checked against a schema before it is acted on.

Client -> server: hello, set_prompt, set_params, map_face, ping. Server -> client: welcome, ack, stats, event,
error, pong. A bad message gets an `error` reply; it never closes the stream.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterator, Mapping

import jsonschema

from engines.background import MODES as BACKGROUND_MODES
from engines.background import BackgroundError, parse_background
from engines.colours import PALETTE
from engines.edit_vocabulary import COLOURED, EDIT_SPECS
from engines.prompt.language import MAX_PROMPT_CHARS
from engines.sources import SOURCE_ID_PATTERN
from streamer.session.face_map import MAX_MAPPED_FACES, MAX_TRACK_ID
from streamer.session.session import FUSION_MODES

PROTOCOL_VERSION = 1

# set_params.edits: slider values by edit name, each within its edit's range; other names are refused
_EDITS = {
    "type": "object",
    "properties": {s.name: {"type": "number", "minimum": s.low, "maximum": s.high} for s in EDIT_SPECS},
    "additionalProperties": False,
}

# set_params.colours: the makeup's shade by coloured edit, a palette name or #rrggbb; null = the prompt's or
# the default shade again (a colour set here wins over the prompt's colour word)
SHADE_SCHEMA: dict[str, Any] = {"anyOf": [{"enum": list(PALETTE)}, {"type": "string", "pattern": "^#[0-9A-Fa-f]{6}$"}]}
COLOURS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {name: {"anyOf": [SHADE_SCHEMA, {"type": "null"}]} for name in COLOURED},
    "additionalProperties": False,
}

# set_params.outputs and REST's POST /v1/sessions/{id}/outputs: the avatar and face-data outputs
# (streamer/sinks/face_outputs.py); a key left out keeps its current value, null turns an output off
OUTPUTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "vmc": {"anyOf": [{"type": "string", "maxLength": 300,
                           "pattern": "^(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9.-]*)(:[0-9]{1,5})?$"}, {"type": "null"}]},
        "vtube_studio": {"anyOf": [{"type": "string", "maxLength": 300, "pattern": "^wss?://[^\\s]+$"}, {"type": "null"}]},
        "face_events": {"type": "number", "minimum": 0, "maximum": 60},
        "mirror": {"type": "boolean"},
        "face_track": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_TRACK_ID}, {"type": "null"}]},
        # destinations for the session's output: RTMP(S) (rtmp://HOST/APP/KEY) or WHIP (https://TOKEN@HOST/PATH);
        # [] stops them
        "restream": {"type": "array", "maxItems": 4,
                     "items": {"type": "string", "maxLength": 2048, "pattern": "^(rtmps?|https?)://[^\\s]+$"}},
    },
    "additionalProperties": False,
}

# set_params.background: "blur", a CSS colour, "none", or {"mode", "strength", "color", "image_id"} (the
# picture's id from POST /sessions/{id}/background); engines.background.parse_background reads it
BACKGROUND_ID_PATTERN = "^bg-[0-9a-f]{12}$"
BACKGROUND_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "maxLength": 64},
        {"type": "object",
         "properties": {"mode": {"enum": list(BACKGROUND_MODES)},
                        "strength": {"type": "number", "minimum": 0, "maximum": 1},
                        "color": {"type": "string", "maxLength": 64},
                        "image_id": {"type": "string", "pattern": BACKGROUND_ID_PATTERN}},
         "required": ["mode"], "additionalProperties": False},
        {"type": "null"},
    ],
}

CLIENT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "oneOf": [
        {
            "type": "object",
            "properties": {"type": {"const": "hello"}, "version": {"type": "integer"}, "id": {"type": "integer"}},
            "required": ["type"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "type": {"const": "set_prompt"},
                "text": {"type": "string", "maxLength": MAX_PROMPT_CHARS},
                "id": {"type": "integer"},
            },
            "required": ["type", "text"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "type": {"const": "set_params"},
                "id": {"type": "integer"},
                "strength": {"type": "number", "minimum": 0, "maximum": 1},
                # how far the face's proportions move toward the source's (0: texture only); null = the server's default
                "shape": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "null"}]},
                "edits": _EDITS,
                "colours": COLOURS_SCHEMA,
                "source_id": {"anyOf": [{"type": "string", "pattern": SOURCE_ID_PATTERN}, {"type": "null"}]},
                "face_sources": {   # the whole per-face map at once (streamer/session/face_map.py: "keep" = unchanged)
                    "type": "object",
                    "propertyNames": {"pattern": "^[0-9]{1,6}$"},
                    "additionalProperties": {"type": "string", "pattern": SOURCE_ID_PATTERN},
                    "maxProperties": MAX_MAPPED_FACES,
                },
                "keep_mouth": {"type": "boolean"},
                "keep_eyes": {"type": "boolean"},
                "enabled": {"type": "boolean"},
                # neural / both only where a swapper is loaded; null = back to the server's --fusion
                "fusion": {"anyOf": [{"enum": list(FUSION_MODES)}, {"type": "null"}]},
                # the face enhancer's strength where one is loaded; null = back to the server's default
                "enhance": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "null"}]},
                "background": BACKGROUND_SCHEMA,
                "outputs": OUTPUTS_SCHEMA,
                "calibrate": {"const": True},       # hold a neutral face: the face rig's neutral from the next 2 s
                "face_neutral": {"anyOf": [{"type": "object", "maxProperties": 8}, {"type": "null"}]},
            },
            "required": ["type"],
            "additionalProperties": False,
            "minProperties": 2,
        },
        {   # one face's choice: a source id, "keep" (leave it unchanged) or null (back to the default)
            "type": "object",
            "properties": {
                "type": {"const": "map_face"},
                "id": {"type": "integer"},
                "track_id": {"type": "integer", "minimum": 0, "maximum": MAX_TRACK_ID},
                "source_id": {"anyOf": [{"type": "string", "pattern": SOURCE_ID_PATTERN}, {"type": "null"}]},
            },
            "required": ["type", "track_id", "source_id"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"type": {"const": "ping"}, "t": {"type": "number"}, "id": {"type": "integer"}},
            "required": ["type"],
            "additionalProperties": False,
        },
    ],
}

jsonschema.Draft202012Validator.check_schema(CLIENT_SCHEMA)
_VALIDATORS = {b["properties"]["type"]["const"]: jsonschema.Draft202012Validator(b) for b in CLIENT_SCHEMA["oneOf"]}
_TYPES = set(_VALIDATORS)


class ProtocolError(ValueError):
    """A message the server will not act on; `code` is stable, `message` is for people."""

    def __init__(self, code: str, message: str, id: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.id = id      # the refused message's own id, when it was a JSON object with an integer one

    def reply(self) -> dict[str, Any]:
        """The `error` answer, carrying the message's id when it had one (a client waiting on it is told)."""
        return error(self.code, self.message) if self.id is None else error(self.code, self.message, id=self.id)


MAX_INT_DIGITS = 18   # every integer the protocol carries (ids, track ids) fits in 64 bits


class _NotANumber(ValueError):
    """A JSON number the protocol refuses (NaN, an infinity, an integer too long)."""


def _refuse_constant(name: str) -> Any:
    raise _NotANumber(f"{name} is not a number the protocol accepts")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotANumber(f"{text[:20]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _NotANumber(f"an integer of {len(text)} digits is out of range")
    return int(text)


def loads(text: str) -> Any:
    """Strict JSON: NaN, Infinity, overflowing floats and integers longer than MAX_INT_DIGITS are refused
    here, at the edge, so no later stage sees a number it cannot use."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int)


def _has_lone_surrogate(value: Any) -> bool:
    """JSON's \\ud800 escapes decode to text no UTF-8 writer (audit log, reply) can encode again."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def parse_client_message(raw: str | bytes, *, max_bytes: int) -> dict[str, Any]:
    """Text from the data channel -> a validated message, or ProtocolError saying what is wrong."""
    size = len(raw.encode("utf-8") if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise ProtocolError("too_large", f"message is {size} bytes, the limit is {max_bytes}")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("bad_json", "message is not UTF-8 text") from None
    try:
        msg = loads(raw)
    except _NotANumber as exc:
        raise ProtocolError("invalid", f"message holds a bad number: {exc}") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError("bad_json", f"message is not JSON: {exc}") from None
    kind = msg.get("type") if isinstance(msg, dict) else None
    mid = msg.get("id") if isinstance(msg, dict) else None
    mid = mid if isinstance(mid, int) and not isinstance(mid, bool) else None
    if not isinstance(kind, str) or kind not in _TYPES:   # a list or an object as "type" is unknown too
        shown = repr(kind)[:60] if isinstance(msg, dict) else type(msg).__name__
        raise ProtocolError("unknown_type", f"unknown message type {shown}; expected one of {sorted(_TYPES)}", mid)
    errors = sorted(_VALIDATORS[msg["type"]].iter_errors(msg), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.path) or msg["type"]
        raise ProtocolError("invalid", f"{where}: {e.message}", mid)
    if _has_lone_surrogate(msg):  # after the schema, which bounds the message's shape to a flat one
        raise ProtocolError("invalid", "message holds text that is not valid Unicode (an unpaired surrogate)", mid)
    return msg


def params_to_controls(msg: dict[str, Any]) -> dict[str, Any]:
    """A validated set_params message -> keyword changes for Session.update."""
    changes = {k: v for k, v in msg.items() if k not in ("type", "id")}
    if "face_sources" in changes:
        changes["face_sources"] = {int(k): v for k, v in changes["face_sources"].items()}
    if "colours" in changes:   # only the named edits change; null removes a shade
        changes["colours"] = {k: v for k, v in changes["colours"].items()}
    if "strength" in changes:
        changes["strength"] = float(changes["strength"])
    for name in ("shape", "enhance"):   # null stays None: back to the server's default
        if changes.get(name) is not None:
            changes[name] = float(changes[name])
    if "background" in changes:
        try:
            spec = parse_background(changes["background"])
        except BackgroundError as exc:
            raise ProtocolError("invalid", f"background: {exc}", msg.get("id")) from None
        changes["background"] = spec if spec.active else None
    return changes


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def output_host(kind: str, value: str) -> str:
    """The host an output's address names (vmc: HOST:PORT, vtube_studio: ws://HOST:PORT/...)."""
    from urllib.parse import urlsplit

    if kind == "vtube_studio":
        try:
            return urlsplit(value).hostname or ""
        except ValueError:
            return ""
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def output_refusal(client: str, outputs: dict[str, Any]) -> str | None:
    """Why a session's client may not send its outputs where it asks, or None. A client points avatar
    outputs at its own machine: loopback, or the address it connects from (written as an address, not a
    name: no lookups on the control path); elsewhere only the operator may (serve --vmc / --vtube-studio)."""
    import ipaddress

    for kind in ("vmc", "vtube_studio"):
        value = outputs.get(kind)
        if not value:
            continue
        host = output_host(kind, value) or "127.0.0.1"
        if host in LOOPBACK_NAMES:
            continue
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return f"{kind}: name the host by its address (loopback or your own, {client or 'unknown'}), not {host!r}"
        if ip.is_loopback:
            continue
        try:
            own = ipaddress.ip_address(client)
        except ValueError:
            own = None
        if ip != own:
            return (f"{kind}: a session sends its outputs to loopback or to the address it connects from "
                    f"({client or 'unknown'}), not {host}; the server's operator may set others (serve --{kind.replace('_', '-')})")
    return None


def merge_outputs(current: Any, requested: dict[str, Any]) -> dict[str, Any]:
    """A session's outputs after a request: the keys it names replace the current ones, the rest stay."""
    return {**(dict(current) if current else {}), **requested}


def error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, **extra}


class EncodedEvent(Mapping[str, Any]):
    """A server -> client event that carries its JSON text, made once by whoever makes the event (a `face`
    event, up to 60 a second, goes to the data channel and to every control socket): `dumps` hands the
    text out as it is. Reading a field other than `type` decodes the text once (in-process listeners)."""

    __slots__ = ("type", "text", "_fields")

    def __init__(self, type_: str, body: str) -> None:
        """`body`: the event's other fields as the JSON text of an object (`{...}`); `type` goes first."""
        self.type = type_
        rest = body[1:]
        self.text = '{"type":' + json.dumps(type_) + ("," + rest if rest != "}" else rest)
        self._fields: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        if self._fields is None:
            self._fields = json.loads(self.text)
        return self._fields

    def __getitem__(self, key: str) -> Any:
        return self.type if key == "type" else self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())


def dumps(msg: Mapping[str, Any]) -> str:
    """Strict JSON out too: a NaN here is a bug, and raises rather than reaching a client as invalid JSON."""
    if isinstance(msg, EncodedEvent):
        return msg.text
    return json.dumps(msg, separators=(",", ":"), default=float, allow_nan=False)
