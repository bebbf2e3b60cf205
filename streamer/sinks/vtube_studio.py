"""VTube Studio out: a plugin client of its public WebSocket API (default ws://localhost:8001) that feeds
the face rig's frames into VTS's default tracking inputs.

The plugin asks for a token once (`AuthenticationTokenRequest`: VTS shows the user an Allow / Deny
popup), keeps it in a small file for next time (`TokenFile`), authenticates with it
(`AuthenticationRequest`; a token the user has revoked is dropped and asked for again, once), then sends
`InjectParameterDataRequest` {faceFound, mode "set", parameterValues} with each new frame, and the last
values again at least every `keepalive_s` when none comes (VTS falls back to its own tracking after a
second without data). A connection that drops (VTS restarted, the model reloaded) is made again with
backoff; a denial stops the client until it is asked for again, and says so in `status()`.

Connecting and authenticating (which wait on VTS, and on the user's click) run on the client's own
thread. Once live, the frame thread writes each frame's request itself, through websockets' sans-I/O
protocol onto a non-blocking socket, and reads whatever answers have arrived the same way: no thread is
woken per frame, and nothing waits. A frame that finds the socket's buffer full is dropped (newest wins,
the next one goes when there is room): a slow VTS never holds a frame up.
"""

from __future__ import annotations

import itertools
import json
import logging
import operator
import os
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

try:                                   # websockets' own masking, in C where it is built (as websockets does)
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover
    from websockets.utils import apply_mask

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
ANSWERS_EVERY = 4              # VTS's answers are read once this many requests wait for theirs (one read, not four)


def vts_parameters(frame: FaceFrame, mirror: bool = True) -> list[dict[str, Any]]:
    """The frame as VTS's `parameterValues`: `vts_values` with their names."""
    return [{"id": k, "value": round(v, 4), "weight": 1} for k, v in zip(PARAMETERS, vts_values(frame, mirror))]


def vts_values(frame: FaceFrame, mirror: bool = True) -> tuple[float, ...]:
    """The frame as VTS default inputs, in PARAMETERS' order and VTS's ranges: angles in degrees (FaceAngleX the turn, Y up/down
    with up > 0, Z the lean), position in centimetres, the rest 0..1 or -1..1. `mirror`: the model moves
    as the user's mirror image (VTS's own webcam tracking does), so left and right swap; turns, leans and
    sideways moves keep the rig's sign (FaceAngleX > 0 for a turn to the user's left), and change it
    without `mirror`. A model rigged the other way round inverts an input in VTS's parameter settings."""
    (blink_l, blink_r, wide_l, wide_r, up_l, up_r, down_l, down_r, inner, smile_l, smile_r, frown_l, frown_r,
     jaw, cheek, tongue) = _MODEL_SCORES[mirror](frame.score_floats())
    flip = 1.0 if mirror else -1.0     # the rig's turns and sideways moves, as the model makes them
    g = frame.gaze
    gl, gr = ((g[2], g[3]), (g[0], g[1])) if mirror else ((g[0], g[1]), (g[2], g[3]))
    smile = 0.5 * (smile_l + smile_r)
    frown = 0.5 * (frown_l + frown_r)
    brow_l = _unit(0.5 + 0.5 * max(up_l, inner) - 0.5 * down_l)
    brow_r = _unit(0.5 + 0.5 * max(up_r, inner) - 0.5 * down_r)
    px, py, pz = frame.position
    values = (flip * frame.yaw, -frame.pitch, flip * frame.roll,            # FaceAngleX, Y (up > 0), Z
              flip * (px * 100.0), py * 100.0, pz * 100.0,                  # FacePositionX, Y, Z
              jaw, 0.5 + 0.5 * (smile - frown),                             # MouthOpen, MouthSmile (0.5 relaxed)
              1.0 - blink_l + 0.5 * wide_l, 1.0 - blink_r + 0.5 * wide_r,   # EyeOpenLeft, Right
              flip * gl[0] / GAZE_FULL_DEGREES, gl[1] / GAZE_FULL_DEGREES,  # EyeLeftX, Y
              flip * gr[0] / GAZE_FULL_DEGREES, gr[1] / GAZE_FULL_DEGREES,  # EyeRightX, Y
              brow_l, brow_r, 0.5 * (brow_l + brow_r), cheek, tongue)       # BrowLeftY, BrowRightY, Brows, CheekPuff, TongueOut
    # each into its range in one pass, as max then min would (a NaN reads as the low end)
    return tuple(high if v >= high else v if v > low else low for v, (low, high) in zip(values, _RANGES))


# VTS's range for each of PARAMETERS
_RANGES: tuple[tuple[float, float], ...] = ((-30.0, 30.0), (-30.0, 30.0), (-90.0, 90.0), (-15.0, 15.0), (-15.0, 15.0),
                                            (-10.0, 10.0), *([(0.0, 1.0)] * 4), *([(-1.0, 1.0)] * 4), *([(0.0, 1.0)] * 5))


def _model_scores(mirror: bool) -> "operator.itemgetter[Any]":
    """The scores vts_values reads, in one step: the eyes' and brows' as the model's (left, right) pairs
    (the user's other side when mirrored), then the mouth's, cheek and tongue."""
    sides = ("eyeBlink", "eyeWide", "browOuterUp", "browDown")
    names = [n for side in sides for n in ((side + "Right", side + "Left") if mirror else (side + "Left", side + "Right"))]
    names += ["browInnerUp", "mouthSmileLeft", "mouthSmileRight", "mouthFrownLeft", "mouthFrownRight", "jawOpen",
              "cheekPuff", "tongueOut"]
    return operator.itemgetter(*(INDEX[n] for n in names))


_MODEL_SCORES = {True: _model_scores(True), False: _model_scores(False)}


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


_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def masked_text_frame(payload: bytes, mask: bytes | None = None) -> bytes:
    """One whole client text frame (RFC 6455 5.2: FIN, opcode 1, masked), as websockets' protocol writes
    it, in a few calls: a live client sends one per frame, and the protocol's general path (a Frame object,
    its checks, a BytesIO) costs more than the send. `mask`: the frame's 4 random bytes (default: fresh
    from the OS)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x81, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
    if mask is None:
        mask = os.urandom(4)
    return b"".join((head, mask, apply_mask(payload, mask)))


class _Masks:
    """Fresh masking keys from the OS's random source, drawn 256 at a time: each frame still gets its own
    unpredictable key (RFC 6455 5.3), without a system call per frame."""

    def __init__(self) -> None:
        self._pool = b""
        self._at = 0

    def next(self) -> bytes:
        if self._at >= len(self._pool):
            self._pool, self._at = os.urandom(4 * 256), 0
        self._at += 4
        return self._pool[self._at - 4:self._at]


class _Connection:
    """One WebSocket connection on a plain socket through websockets' sans-I/O protocol: blocking (with
    timeouts) while it is made and the plugin authenticates, non-blocking once `live()`."""

    def __init__(self, url: str, timeout: float) -> None:
        uri = parse_uri(url)
        self.protocol = ClientProtocol(uri, max_size=1 << 20)
        sock = socket.create_connection((uri.host, uri.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if uri.secure:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=uri.host)
        self.sock = sock
        self._unsent = b""            # the tail of a message a non-blocking send could not finish
        self._masks = _Masks()
        self.protocol.send_request(self.protocol.connect())
        self._write_all()
        end = time.monotonic() + timeout
        while self.protocol.state is State.CONNECTING:
            self.receive(end)
        if self.protocol.handshake_exc is not None:
            raise self.protocol.handshake_exc
        if self.protocol.state is not State.OPEN:
            raise ConnectionError("the WebSocket handshake did not complete")

    def live(self) -> None:
        self.sock.setblocking(False)

    def _write_all(self) -> None:
        data = b"".join(self.protocol.data_to_send())
        if data:
            self.sock.sendall(data)

    def send(self, text: str, deadline: float | None = None) -> bool:
        """One text message. With `deadline` (blocking mode) it is written whole; without (live), only
        when the last one is through: False when the socket's buffer is still full."""
        if deadline is not None:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            self.protocol.send_text(text.encode())
            self._write_all()
            return True
        if self._unsent and not self._flush():
            return False
        if self.protocol.state is not State.OPEN:
            raise ConnectionError("the VTube Studio connection is closing")
        self._unsent = masked_text_frame(text.encode(), self._masks.next())
        self._flush()
        return True

    def _flush(self) -> bool:
        try:
            n = self.sock.send(self._unsent)
        except _WOULD_BLOCK:
            return False
        self._unsent = self._unsent[n:]
        return not self._unsent

    def receive(self, deadline: float | None = None) -> list[str]:
        """The text messages that have arrived: with `deadline`, waits for at least some bytes until then
        (socket.timeout past it); without, takes only what is there. A closed connection raises."""
        chunks = []
        if deadline is not None:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunks.append(self.sock.recv(65536))
        else:      # until a read comes short: what arrives later is read the next time
            while True:
                try:
                    data = self.sock.recv(65536)
                except _WOULD_BLOCK:
                    break
                chunks.append(data)
                if len(data) < 65536:
                    break
        texts: list[str] = []
        for data in chunks:
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
        for event in self.protocol.events_received():
            if getattr(event, "opcode", None) is Opcode.TEXT:
                texts.append(event.data.decode("utf-8", "replace"))
        pending = b"".join(self.protocol.data_to_send())     # pongs, the close handshake's answer
        if pending:
            self._unsent += pending
            if deadline is not None:
                self.sock.sendall(self._unsent)
                self._unsent = b""
            else:
                self._flush()
        if self.protocol.state in (State.CLOSING, State.CLOSED) or (chunks and not chunks[-1]):
            raise ConnectionError("VTube Studio closed the connection")
        return texts

    def close(self, reason: str) -> None:
        try:
            if self.protocol.state is State.OPEN:
                self.protocol.send_close(1000, reason)
                self.sock.setblocking(False)
                self._unsent += b"".join(self.protocol.data_to_send())
                self._flush()
        except OSError:
            pass
        finally:
            self.sock.close()

    def interrupt(self) -> None:
        """Wake a blocking read from another thread (the client is closing)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class VtsClient:
    """One session's VTube Studio output. `offer(frame)` from the frame thread; `status()` any time."""

    def __init__(self, url: str = DEFAULT_URL, settings: VtsSettings = VtsSettings()) -> None:
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
        self._sent_frame: FaceFrame | None = None
        self._last_send = 0.0
        self._ids = itertools.count(1)
        self._unanswered = 0
        self._template: str | None = None
        self._closed = False
        self._lock = threading.Lock()          # the live connection: the frame thread or the client's, one at a time
        self._live: _Connection | None = None
        self._opening: _Connection | None = None
        self._dropped: Exception | None = None
        self._kick = threading.Event()
        self._thread = threading.Thread(target=self._main, name="vtube-studio", daemon=True)
        self._thread.start()

    # --- the frame thread's side ----------------------------------------------------------------------

    def offer(self, frame: FaceFrame) -> None:
        """The newest frame, written at once when the connection is live and free; else the client's thread
        sends the newest when it is (on going live, and at the keepalive)."""
        self._latest = frame
        conn = self._live
        if conn is None or not self._lock.acquire(blocking=False):
            return
        try:
            if self._live is conn:
                self._send(conn, frame)
        finally:
            self._lock.release()

    def _send(self, conn: _Connection, frame: FaceFrame) -> None:
        """Answers read, then the frame's request written (the lock held); a failure drops the connection."""
        try:
            if self._unanswered >= ANSWERS_EVERY:
                self._answers(conn.receive())
            fresh = frame is not self._sent_frame
            if conn.send(self._injection(frame, bool(frame.found and fresh))):
                self._sent_frame, self._last_send = frame, time.monotonic()
                self.sent += 1
                self._unanswered += 1
                if self._unanswered > 4 * 60:   # a minute of 60 fps without answers: the app has hung
                    raise VtsError("VTube Studio stopped answering")
        except (OSError, ValueError, VtsError) as exc:
            self._live, self._dropped = None, exc
            self._kick.set()

    def status(self) -> dict[str, Any]:
        return {"url": self.url, "state": self.state, "sent": self.sent, "connects": self.connects, "error": self.error}

    def close(self) -> None:
        self._closed = True
        self._kick.set()
        opening = self._opening
        if opening is not None:
            opening.interrupt()

    # --- the client's thread --------------------------------------------------------------------------

    def _main(self) -> None:
        low, high = self.settings.backoff_s
        wait = low
        while not self._closed:
            conn: _Connection | None = None
            try:
                conn = self._opening = _Connection(self.url, self.settings.reply_timeout_s)
                self.connects += 1
                self.state, wait = "authenticating", low
                self._authenticate(conn)
                conn.live()
                self._opening = None
                self._unanswered, self._sent_frame, self._dropped = 0, None, None
                self.state, self.error = "live", None
                log.info("VTube Studio at %s: authenticated, sending parameters", self.url)
                with self._lock:
                    self._live = conn
                self._keep(conn)
            except VtsError as exc:
                self.error = str(exc)
                if exc.error_id == DENIED:
                    self.state = "denied"
                    log.warning("VTube Studio at %s: %s; not asking again until the output is set again", self.url, exc)
                    return
                self.state = "disconnected"
                log.warning("VTube Studio at %s: %s", self.url, exc)
            except Exception as exc:   # refused, dropped, a reply that is not the API's: connect again
                if self._closed:
                    break
                self.state = "disconnected"
                message = f"{type(exc).__name__}: {exc}"
                if self.error != message:
                    log.info("VTube Studio at %s: %s; retrying", self.url, message)
                self.error = message
            finally:
                self._opening = None
                with self._lock:
                    self._live = None
                if conn is not None:
                    conn.close("LiveFuse output stopped" if self._closed else "reconnecting")
            if self._kick.wait(wait) and self._closed:
                break
            self._kick.clear()
            wait = min(high, wait * 2)

    def _keep(self, conn: _Connection) -> None:
        """While live: the last values again every `keepalive_s` without a new frame (VTS falls back to
        its own tracking after a second without data), and answers read while no frame comes."""
        self._kick.clear()
        with self._lock:                     # the newest frame offered while connecting
            if self._latest is not None and self._live is conn:
                self._send(conn, self._latest)
        keep = self.settings.keepalive_s
        while not self._closed:
            self._kick.wait(max(0.01, self._last_send + keep - time.monotonic()))
            self._kick.clear()
            if self._closed:
                return
            with self._lock:
                if self._live is conn and time.monotonic() - self._last_send >= keep and self._latest is not None:
                    self._send(conn, self._latest)
                elif self._live is conn:
                    try:
                        self._answers(conn.receive())
                    except (OSError, ValueError, VtsError) as exc:
                        self._live, self._dropped = None, exc
                if self._live is not conn:
                    raise self._dropped or ConnectionError("VTube Studio closed the connection")

    def _request(self, kind: str, data: dict[str, Any] | None = None) -> tuple[str, str]:
        rid = f"lf{next(self._ids)}"
        msg = {"apiName": API_NAME, "apiVersion": API_VERSION, "requestID": rid, "messageType": kind}
        if data is not None:
            msg["data"] = data
        return rid, json.dumps(msg, separators=(",", ":"))

    def _call(self, conn: _Connection, kind: str, data: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
        rid, text = self._request(kind, data)
        end = time.monotonic() + timeout
        conn.send(text, deadline=end)
        while True:
            try:
                texts = conn.receive(end)
            except (socket.timeout, TimeoutError):
                raise VtsError(f"no answer to {kind} within {timeout:.0f} s") from None
            for raw in texts:
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

    def _authenticate(self, conn: _Connection) -> None:
        s = self.settings
        plugin = {"pluginName": s.plugin_name, "pluginDeveloper": s.plugin_developer}
        token = self.tokens.get(self.url)
        for attempt in range(2):
            if token is None:
                self.state = "waiting_for_allow"   # VTS shows its popup now
                body = self._call(conn, "AuthenticationTokenRequest", plugin, s.allow_timeout_s)
                token = body.get("authenticationToken")
                if not isinstance(token, str) or not token:
                    raise VtsError("VTube Studio gave no authentication token")
                self.tokens.put(self.url, token)
            body = self._call(conn, "AuthenticationRequest", {**plugin, "authenticationToken": token}, s.reply_timeout_s)
            if body.get("authenticated") is True:
                return
            self.tokens.put(self.url, None)   # revoked or from another VTS: ask for a new one, once
            token = None
        raise VtsError(f"VTube Studio refused the plugin's token: {body.get('reason', 'not authenticated')}")

    def _injection(self, frame: FaceFrame, found: bool) -> str:
        """The InjectParameterDataRequest's text, the envelope and names laid out once."""
        if self._template is None:
            parts = ",".join('{"id":"%s","value":%%.4f,"weight":1}' % p for p in PARAMETERS)
            self._template = ('{"apiName":"%s","apiVersion":"%s","requestID":"lf%%d","messageType":'
                              '"InjectParameterDataRequest","data":{"faceFound":%%s,"mode":"set",'
                              '"parameterValues":[%s]}}' % (API_NAME, API_VERSION, parts))
        return self._template % ((next(self._ids), "true" if found else "false") + vts_values(frame, self.settings.mirror))

    def _answers(self, texts: list[str]) -> None:
        """VTS answers every injection; only its errors are read closely (parsing each answer at the frame
        rate would cost more than sending)."""
        for raw in texts:
            self._unanswered = 0
            if "APIError" not in raw:
                continue
            try:
                body = json.loads(raw).get("data") or {}
            except (ValueError, AttributeError):
                body = {}
            self.error = f"InjectParameterDataRequest: {body.get('message', 'error')} (errorID {body.get('errorID')})"
            log.warning("VTube Studio at %s: %s", self.url, self.error)
            if body.get("errorID") == 8:    # no longer authenticated: connect and authenticate again
                raise VtsError(self.error, 8)
