"""VTube Studio out: a plugin client of its public WebSocket API (default ws://localhost:8001) that feeds
the face rig's frames into VTS's default tracking inputs.

The plugin asks for a token once (`AuthenticationTokenRequest`: VTS shows the user an Allow / Deny
popup), keeps it in a small file for next time (`TokenFile`), authenticates with it
(`AuthenticationRequest`; a token the user has revoked is dropped and asked for again, once), then sends
`InjectParameterDataRequest` {faceFound, mode "set", parameterValues} with each new frame, and the last
values again at least every `keepalive_s` when none comes (VTS falls back to its own tracking after a
second without data). A connection that drops (VTS restarted, the model reloaded) is made again with
backoff; a denial stops the client until it is asked for again, and says so in `status()`.

The client runs on the outputs' own event loop (streamer/sinks/output_loop.py), never on the server's;
the frame thread hands frames over with `offer`, newest wins: a slow VTS never holds a frame up.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.face_rig import INDEX, FaceFrame
from streamer.config import state_dir

log = logging.getLogger(__name__)

API_NAME = "VTubeStudioPublicAPI"
API_VERSION = "1.0"
DEFAULT_URL = "ws://localhost:8001"
PLUGIN_NAME = "LiveFuse"
PLUGIN_DEVELOPER = "LiveFuse"
DENIED = 50                    # VTS's errorID: the user clicked Deny on the plugin's popup
# the default input parameters this client sets (VTS maps them to the model's Live2D parameters)
PARAMETERS: tuple[str, ...] = ("FaceAngleX", "FaceAngleY", "FaceAngleZ", "FacePositionX", "FacePositionY",
                               "FacePositionZ", "MouthOpen", "MouthSmile", "EyeOpenLeft", "EyeOpenRight",
                               "EyeLeftX", "EyeLeftY", "EyeRightX", "EyeRightY", "BrowLeftY", "BrowRightY",
                               "Brows", "CheekPuff", "TongueOut")
GAZE_FULL_DEGREES = 30.0       # an eye turned this far reads as EyeX/Y = +-1


def vts_parameters(frame: FaceFrame, mirror: bool = True) -> list[dict[str, Any]]:
    """The frame as VTS default inputs, in VTS's ranges: angles in degrees (FaceAngleX the turn, Y up/down
    with up > 0, Z the lean), position in centimetres, the rest 0..1 or -1..1. `mirror`: the model moves
    as the user's mirror image (VTS's own webcam tracking does), so left and right swap; turns, leans and
    sideways moves keep the rig's sign (FaceAngleX > 0 for a turn to the user's left), and change it
    without `mirror`. A model rigged the other way round inverts an input in VTS's parameter settings."""
    s = frame.scores
    flip = 1.0 if mirror else -1.0     # the rig's turns and sideways moves, as the model makes them

    def side(left: str, right: str) -> tuple[float, float]:   # (the model's left, its right)
        lv, rv = float(s[INDEX[left]]), float(s[INDEX[right]])
        return (rv, lv) if mirror else (lv, rv)

    blink_l, blink_r = side("eyeBlinkLeft", "eyeBlinkRight")
    wide_l, wide_r = side("eyeWideLeft", "eyeWideRight")
    up_l, up_r = side("browOuterUpLeft", "browOuterUpRight")
    down_l, down_r = side("browDownLeft", "browDownRight")
    inner = float(s[INDEX["browInnerUp"]])
    gl = (frame.gaze[2], frame.gaze[3]) if mirror else (frame.gaze[0], frame.gaze[1])
    gr = (frame.gaze[0], frame.gaze[1]) if mirror else (frame.gaze[2], frame.gaze[3])
    smile = 0.5 * (float(s[INDEX["mouthSmileLeft"]]) + float(s[INDEX["mouthSmileRight"]]))
    frown = 0.5 * (float(s[INDEX["mouthFrownLeft"]]) + float(s[INDEX["mouthFrownRight"]]))
    brow_l = _unit(0.5 + 0.5 * max(up_l, inner) - 0.5 * down_l)
    brow_r = _unit(0.5 + 0.5 * max(up_r, inner) - 0.5 * down_r)
    px, py, pz = (v * 100.0 for v in frame.position)
    values = {
        "FaceAngleX": _clip(flip * frame.yaw, 30.0),
        "FaceAngleY": _clip(-frame.pitch, 30.0),
        "FaceAngleZ": _clip(flip * frame.roll, 90.0),
        "FacePositionX": _clip(flip * px, 15.0), "FacePositionY": _clip(py, 15.0),
        "FacePositionZ": _clip(pz, 10.0),
        "MouthOpen": _unit(float(s[INDEX["jawOpen"]])),
        "MouthSmile": _unit(0.5 + 0.5 * (smile - frown)),   # 0.5 a relaxed mouth, 1 a smile, 0 a frown
        "EyeOpenLeft": _unit(1.0 - blink_l + 0.5 * wide_l), "EyeOpenRight": _unit(1.0 - blink_r + 0.5 * wide_r),
        "EyeLeftX": _clip(flip * gl[0] / GAZE_FULL_DEGREES, 1.0),
        "EyeLeftY": _clip(gl[1] / GAZE_FULL_DEGREES, 1.0),
        "EyeRightX": _clip(flip * gr[0] / GAZE_FULL_DEGREES, 1.0),
        "EyeRightY": _clip(gr[1] / GAZE_FULL_DEGREES, 1.0),
        "BrowLeftY": brow_l, "BrowRightY": brow_r, "Brows": 0.5 * (brow_l + brow_r),
        "CheekPuff": _unit(float(s[INDEX["cheekPuff"]])), "TongueOut": _unit(float(s[INDEX["tongueOut"]])),
    }
    return [{"id": k, "value": round(values[k], 4), "weight": 1} for k in PARAMETERS]


def _clip(v: float, limit: float) -> float:
    return float(min(limit, max(-limit, v)))


def _unit(v: float) -> float:
    return float(min(1.0, max(0.0, v)))


def default_token_file() -> Path:
    """Where tokens live unless told: LIVEFUSE_VTS_TOKENS, else the user's state folder."""
    explicit = os.environ.get("LIVEFUSE_VTS_TOKENS")
    if explicit:
        return Path(explicit)
    return state_dir() / "vtube_studio_tokens.json"


class TokenFile:
    """The plugin's tokens, one per VTS address, in a JSON file only its owner reads (0600)."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else default_token_file()
        self._lock = threading.Lock()

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}

    def get(self, url: str) -> str | None:
        with self._lock:
            return self._read().get(url)

    def put(self, url: str, token: str | None) -> None:
        with self._lock:
            data = self._read()
            if token is None:
                data.pop(url, None)
            else:
                data[url] = token
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)


@dataclass(frozen=True, slots=True)
class VtsSettings:
    mirror: bool = True
    keepalive_s: float = 0.5        # the last values again after this long without a new frame
    reply_timeout_s: float = 5.0    # an injection's answer
    allow_timeout_s: float = 120.0  # the user's click on VTS's Allow popup
    backoff_s: tuple[float, float] = (0.25, 3.0)   # reconnect waits: first, longest (doubling)
    token_file: str = ""            # "" = default_token_file()
    plugin_name: str = PLUGIN_NAME
    plugin_developer: str = PLUGIN_DEVELOPER


class VtsError(RuntimeError):
    def __init__(self, message: str, error_id: int | None = None) -> None:
        super().__init__(message)
        self.error_id = error_id


class VtsClient:
    """One session's VTube Studio output. `offer(frame)` from any thread; `status()` any time."""

    def __init__(self, url: str = DEFAULT_URL, settings: VtsSettings = VtsSettings(), loop: Any = None) -> None:
        """`loop`: an OutputLoop (default: the process's shared one)."""
        from streamer.sinks.output_loop import output_loop

        if not (url.startswith("ws://") or url.startswith("wss://")):
            raise ValueError(f"a VTube Studio address is ws://HOST:PORT (default {DEFAULT_URL}), not {url[:80]!r}")
        self.url = url
        self.settings = settings
        self.tokens = TokenFile(settings.token_file or None)
        self.state = "connecting"
        self.error: str | None = None
        self.sent = 0
        self.connects = 0
        self._latest: FaceFrame | None = None
        self._ids = itertools.count(1)
        self._loop = loop or output_loop()
        self._wake: asyncio.Event | None = None
        self._wake_pending = False
        self._unanswered = 0
        self._template: str | None = None
        self._closed = False
        self._future = self._loop.submit(self._run())

    # --- the frame thread's side ----------------------------------------------------------------------

    def offer(self, frame: FaceFrame) -> None:
        """The newest frame; the client sends it when it can (an older one not yet sent is dropped)."""
        self._latest = frame
        if not self._wake_pending and self._wake is not None:
            self._wake_pending = True
            try:
                self._loop.loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:   # the outputs' loop is gone (process exit)
                pass

    def status(self) -> dict[str, Any]:
        return {"url": self.url, "state": self.state, "sent": self.sent, "connects": self.connects, "error": self.error}

    def close(self) -> None:
        self._closed = True
        self._future.cancel()

    # --- the outputs loop's side ----------------------------------------------------------------------

    async def _run(self) -> None:
        from websockets.asyncio.client import connect

        self._wake = asyncio.Event()
        low, high = self.settings.backoff_s
        wait = low
        while not self._closed:
            try:
                # no permessage-deflate: a frame's parameters are 1.5 KB; compressing them costs both ends more than it saves
                async with connect(self.url, open_timeout=5.0, close_timeout=1.0, max_size=1 << 20,
                                   compression=None) as ws:
                    self.connects += 1
                    self.state, wait = "authenticating", low
                    await self._authenticate(ws)
                    self.state, self.error = "live", None
                    log.info("VTube Studio at %s: authenticated, sending parameters", self.url)
                    try:
                        await self._inject(ws)
                    except asyncio.CancelledError:   # the output stopped: a normal close, not the 1011 an error gives
                        await asyncio.shield(ws.close(1000, "LiveFuse output stopped"))
                        raise
            except asyncio.CancelledError:
                raise
            except VtsError as exc:
                self.error = str(exc)
                if exc.error_id == DENIED:
                    self.state = "denied"
                    log.warning("VTube Studio at %s: %s; not asking again until the output is set again", self.url, exc)
                    return
                self.state = "disconnected"
                log.warning("VTube Studio at %s: %s", self.url, exc)
            except Exception as exc:   # refused, dropped, a reply that is not the API's: connect again
                self.state = "disconnected"
                message = f"{type(exc).__name__}: {exc}"
                if self.error != message:
                    log.info("VTube Studio at %s: %s; retrying", self.url, message)
                self.error = message
            await asyncio.sleep(wait)
            wait = min(high, wait * 2)

    def _request(self, kind: str, data: dict[str, Any] | None = None) -> tuple[str, str]:
        rid = f"lf{next(self._ids)}"
        msg = {"apiName": API_NAME, "apiVersion": API_VERSION, "requestID": rid, "messageType": kind}
        if data is not None:
            msg["data"] = data
        return rid, json.dumps(msg, separators=(",", ":"))

    async def _call(self, ws: Any, kind: str, data: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        rid, text = self._request(kind, data)
        await ws.send(text)
        try:
            async with asyncio.timeout(timeout):
                return await self._reply(ws, kind, rid)
        except TimeoutError:
            raise VtsError(f"no answer to {kind} within {timeout:.0f} s") from None

    async def _reply(self, ws: Any, kind: str, rid: str) -> dict[str, Any]:
        while True:
            raw = await ws.recv()
            try:
                reply = json.loads(raw)
            except ValueError:
                raise VtsError(f"VTube Studio sent something that is not JSON in answer to {kind}") from None
            if not isinstance(reply, dict) or reply.get("requestID") not in (rid, None):
                continue   # an answer to an earlier request, or an event
            body = reply.get("data") if isinstance(reply.get("data"), dict) else {}
            if reply.get("messageType") == "APIError":
                raise VtsError(f"{kind}: {body.get('message', 'error')} (errorID {body.get('errorID')})",
                               body.get("errorID"))
            return body

    async def _authenticate(self, ws: Any) -> None:
        s = self.settings
        plugin = {"pluginName": s.plugin_name, "pluginDeveloper": s.plugin_developer}
        token = self.tokens.get(self.url)
        for attempt in range(2):
            if token is None:
                self.state = "waiting_for_allow"   # VTS shows its popup now
                body = await self._call(ws, "AuthenticationTokenRequest", plugin, s.allow_timeout_s)
                token = body.get("authenticationToken")
                if not isinstance(token, str) or not token:
                    raise VtsError("VTube Studio gave no authentication token")
                self.tokens.put(self.url, token)
            body = await self._call(ws, "AuthenticationRequest", {**plugin, "authenticationToken": token}, s.reply_timeout_s)
            if body.get("authenticated") is True:
                return
            self.tokens.put(self.url, None)   # revoked or from another VTS: ask for a new one, once
            token = None
        raise VtsError(f"VTube Studio refused the plugin's token: {body.get('reason', 'not authenticated')}")

    async def _inject(self, ws: Any) -> None:
        """Parameters with each new frame, the last ones again every `keepalive_s`. Injections are not
        awaited one by one: a reader takes VTS's answers as they come and reads only errors closely (an
        answer is tens of bytes of JSON; at the frame rate, parsing each would cost more than sending)."""
        s = self.settings
        wake = self._wake
        assert wake is not None
        reader = asyncio.ensure_future(self._read_answers(ws))
        sent_frame: FaceFrame | None = None
        try:
            while not self._closed:
                if not wake.is_set():
                    try:
                        async with asyncio.timeout(s.keepalive_s):
                            await wake.wait()
                    except TimeoutError:
                        pass
                wake.clear()
                self._wake_pending = False
                if reader.done():
                    reader.result()          # the connection ended, or VTS refused: raise it here
                    return
                frame = self._latest
                if frame is None:
                    continue
                fresh = frame is not sent_frame
                await ws.send(self._injection(frame, bool(frame.found and fresh)))
                self._unanswered += 1
                if self._unanswered > 4 * 60:   # a minute of 60 fps without answers: the app has hung
                    raise VtsError("VTube Studio stopped answering")
                sent_frame = frame
                self.sent += 1
        finally:
            reader.cancel()

    def _injection(self, frame: FaceFrame, found: bool) -> str:
        """The InjectParameterDataRequest's text, the envelope and names laid out once."""
        if self._template is None:
            parts = ",".join('{"id":"%s","value":%%.4f,"weight":1}' % p for p in PARAMETERS)
            self._template = ('{"apiName":"%s","apiVersion":"%s","requestID":"lf%%d","messageType":'
                              '"InjectParameterDataRequest","data":{"faceFound":%%s,"mode":"set",'
                              '"parameterValues":[%s]}}' % (API_NAME, API_VERSION, parts))
        values = tuple(p["value"] for p in vts_parameters(frame, self.settings.mirror))
        return self._template % ((next(self._ids), "true" if found else "false") + values)

    async def _read_answers(self, ws: Any) -> None:
        async for raw in ws:
            self._unanswered = 0
            if "APIError" not in (raw if isinstance(raw, str) else raw.decode("utf-8", "replace")):
                continue
            try:
                body = json.loads(raw).get("data") or {}
            except (ValueError, AttributeError):
                body = {}
            self.error = f"InjectParameterDataRequest: {body.get('message', 'error')} (errorID {body.get('errorID')})"
            log.warning("VTube Studio at %s: %s", self.url, self.error)
            if body.get("errorID") == 8:    # no longer authenticated: connect and authenticate again
                raise VtsError(self.error, 8)
        raise VtsError("VTube Studio closed the connection")
