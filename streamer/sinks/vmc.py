"""VMC out: the face rig's frames as OSC over UDP, the protocol VSeeFace, VNyan, Warudo and VMagicMirror
receive (default port 39539).

Each frame: `/VMC/Ext/OK` (i 1), `/VMC/Ext/T` (f time), `/VMC/Ext/Root/Pos` (s "root", f px py pz, f qx qy qz
qw), `/VMC/Ext/Bone/Pos` for `Head` (the same shape), `/VMC/Ext/Blend/Val` (s name, f value) for ARKit's 52
names and the VRM presets Blink_L, Blink_R, A, U, O (so avatars without ARKit shapes blink and speak), then
`/VMC/Ext/Blend/Apply`. Messages go in OSC bundles of at most MAX_DATAGRAM bytes (no IP fragments on a
LAN), Apply in the last; to a loopback address, in one (no fragments there, and one send instead of three). The encoder is hand-written: each message's address, type tags and name are
packed once, a frame packs only its floats (python-osc, which the tests decode with, builds a message in
tens of microseconds; a frame here has 62).

Coordinates are Unity's, as VMC's are: left-handed, y up, the avatar facing +z. `mirror` (the default, as
avatar apps' own webcam tracking does) makes the avatar move as the user's mirror image: the user's left
eye closes the avatar's right eye, a turn to the user's left turns the avatar to its right.
"""

from __future__ import annotations

import ipaddress
import logging
import operator
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from engines.face_rig import ARKIT_NAMES, INDEX, MIRROR_ORDER, FaceFrame

log = logging.getLogger(__name__)

DEFAULT_PORT = 39539
MAX_DATAGRAM = 1200
LOOPBACK_DATAGRAM = 60000
# VRM 0.x preset clips fed from ARKit's scores (the avatar's own side: mirroring is applied before)
VRM_PRESETS: tuple[tuple[str, str], ...] = (("Blink_L", "eyeBlinkLeft"), ("Blink_R", "eyeBlinkRight"),
                                            ("A", "jawOpen"), ("U", "mouthPucker"), ("O", "mouthFunnel"))
_BUNDLE_HEAD = b"#bundle\x00" + struct.pack(">Q", 1)   # time tag 1: "immediately"


def osc_string(text: str) -> bytes:
    """An OSC string: UTF-8, NUL-terminated, padded to a multiple of 4 bytes."""
    raw = text.encode("utf-8") + b"\x00"
    return raw + b"\x00" * (-len(raw) % 4)


def osc_message(address: str, tags: str, *args: Any) -> bytes:
    """A whole OSC message (types i, f, s)."""
    out = [osc_string(address), osc_string("," + tags)]
    for tag, arg in zip(tags, args):
        if tag == "i":
            out.append(struct.pack(">i", int(arg)))
        elif tag == "f":
            out.append(struct.pack(">f", float(arg)))
        elif tag == "s":
            out.append(osc_string(str(arg)))
        else:
            raise ValueError(f"unsupported OSC type {tag!r}")
    return b"".join(out)


def parse_target(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """'HOST:PORT', 'HOST' or ':PORT' (IPv6 as [::1]:PORT) -> (host, port); ValueError says what is wrong."""
    text = (text or "").strip()
    if not text:
        raise ValueError("a VMC target is HOST:PORT, e.g. 127.0.0.1:39539")
    host, port = text, default_port
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"VMC target {text!r}: unclosed [ in an IPv6 address")
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"VMC target {text!r}: expected :PORT after the address")
            port = _port(rest[1:], text)
    elif text.count(":") == 1:
        host, p = text.split(":")
        port = _port(p, text)
    host = host or "127.0.0.1"
    if len(host) > 253 or any(c.isspace() for c in host):
        raise ValueError(f"VMC target {text!r}: not a host name")
    return host, port


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not (1 <= int(text) <= 65535):
        raise ValueError(f"VMC target {whole!r}: the port must be 1..65535")
    return int(text)


def unity_pose(frame: FaceFrame, mirror: bool) -> tuple[tuple[float, float, float], tuple[float, float, float, float]]:
    """The head's position (metres) and rotation (x, y, z, w) in Unity's frame for the avatar. The rig's
    frame is the person's (x their left, z toward the camera, right-handed); Unity's avatar frame has x
    the avatar's right: as the user's own motion that is a reflection of x, as a mirror image none."""
    qx, qy, qz, qw = frame.quaternion
    px, py, pz = frame.position
    if mirror:
        return (px, py, pz), (qx, qy, qz, qw)
    return (-px, py, pz), (qx, -qy, -qz, qw)


@dataclass(frozen=True, slots=True)
class VmcSettings:
    mirror: bool = True
    vrm_presets: bool = True
    move_root: bool = True    # the head's offset from neutral moves the avatar's root (leaning moves it)
    error_hold_s: float = 2.0  # an error stays reported this long after it last happened (a refused port fails every other send)


class VmcEncoder:
    """FaceFrame -> the datagrams of one VMC frame. Not thread-safe: one caller (the session's frame thread)."""

    def __init__(self, settings: VmcSettings = VmcSettings(), max_datagram: int = MAX_DATAGRAM) -> None:
        self.settings = settings
        self.max_datagram = max_datagram
        self._names = list(ARKIT_NAMES) + ([p for p, _ in VRM_PRESETS] if settings.vrm_presets else [])
        # the blend values in send order, read from the frame's 52 in one step: mirrored, then the presets
        order = [int(i) for i in MIRROR_ORDER] if settings.mirror else list(range(len(ARKIT_NAMES)))
        if settings.vrm_presets:
            order += [order[INDEX[src]] for _, src in VRM_PRESETS]
        self._blend_of = operator.itemgetter(*order)
        self._layout = [_Datagram.of(items) for items in _bundles(self._items(), max_datagram)]

    def _items(self) -> list[tuple[bytes, int]]:
        """Each message of a frame as its fixed head (address, type tags, string argument) and how many
        floats follow it, in VMC's order."""
        blend = [(osc_string("/VMC/Ext/Blend/Val") + osc_string(",sf") + osc_string(n), 1) for n in self._names]
        return [(osc_message("/VMC/Ext/OK", "i", 1), 0),
                (osc_string("/VMC/Ext/T") + osc_string(",f"), 1),
                (osc_string("/VMC/Ext/Root/Pos") + osc_string(",sfffffff") + osc_string("root"), 7),
                (osc_string("/VMC/Ext/Bone/Pos") + osc_string(",sfffffff") + osc_string("Head"), 7),
                *blend, (osc_message("/VMC/Ext/Blend/Apply", ""), 0)]

    def floats(self, frame: FaceFrame) -> list[float]:
        """A frame's floats in send order: time, the root's position + rotation, the head's, the blend
        values (the 52 and the presets, clipped to 0..1)."""
        s = self.settings
        pos, quat = unity_pose(frame, s.mirror)
        root = pos if s.move_root else (0.0, 0.0, 0.0)
        blend = [0.0 if v < 0.0 else 1.0 if v > 1.0 else v for v in self._blend_of(frame.score_floats())]
        return [frame.t, *root, 0.0, 0.0, 0.0, 1.0, *pos, *quat, *blend]

    def messages(self, frame: FaceFrame) -> list[bytes]:
        """The frame's OSC messages in VMC's order, each encoded on its own (the plain reading of the format
        that `datagrams` packs in one step per datagram)."""
        v = self.floats(frame)
        out = [osc_message("/VMC/Ext/OK", "i", 1), osc_message("/VMC/Ext/T", "f", v[0]),
               osc_message("/VMC/Ext/Root/Pos", "sfffffff", "root", *v[1:8]),
               osc_message("/VMC/Ext/Bone/Pos", "sfffffff", "Head", *v[8:15])]
        out += [osc_message("/VMC/Ext/Blend/Val", "sf", n, x) for n, x in zip(self._names, v[15:])]
        out.append(osc_message("/VMC/Ext/Blend/Apply", ""))
        return out

    def datagrams(self, frame: FaceFrame) -> list[bytes]:
        """The frame's messages in OSC bundles of at most `max_datagram` bytes each. Every message has a
        fixed size, so each bundle is laid out once as one struct; a frame packs only its floats."""
        floats = self.floats(frame)
        try:
            return [d.pack(floats) for d in self._layout]
        except OverflowError:     # a value past float32's range goes as infinity, as a float32 cast makes it
            with np.errstate(over="ignore"):
                floats = np.array(floats, np.float32).tolist()
            return [d.pack(floats) for d in self._layout]


def _bundles(items: list[tuple[bytes, int]], max_datagram: int) -> list[list[tuple[bytes, int, int]]]:
    """The messages spread over bundles of at most `max_datagram` bytes (one message alone may pass it):
    per bundle, each message's head, float count and its first float's place among the frame's."""
    bundles: list[list[tuple[bytes, int, int]]] = []
    size = 0
    first = 0
    for head, n in items:
        length = 4 + len(head) + 4 * n
        if not bundles or (size + length > max_datagram and size > len(_BUNDLE_HEAD)):
            bundles.append([])
            size = len(_BUNDLE_HEAD)
        bundles[-1].append((head, n, first))
        size += length
        first += n
    return bundles


@dataclass(frozen=True, slots=True)
class _Datagram:
    """One bundle packed by one precompiled struct: its fixed bytes (bundle head, sizes, addresses, type
    tags, names) lie in the argument list already, and `fills` says which of the frame's floats go where
    in it, as a few slices (a run of a message's floats, or every other argument along the blend values)."""

    packer: struct.Struct
    args: list[Any]
    fills: tuple[tuple[slice, slice], ...]

    @classmethod
    def of(cls, messages: list[tuple[bytes, int, int]]) -> "_Datagram":
        fmt, args, places = [">"], [], []
        fixed = bytearray(_BUNDLE_HEAD)
        for head, n, first in messages:
            fixed += struct.pack(">i", len(head) + 4 * n) + head
            if n:
                fmt.append(f"{len(fixed)}s")
                args.append(bytes(fixed))
                fixed.clear()
                places += [(len(args) + k, first + k) for k in range(n)]
                fmt.append("f" * n)
                args += [0.0] * n
        if fixed:
            fmt.append(f"{len(fixed)}s")
            args.append(bytes(fixed))
        return cls(struct.Struct("".join(fmt)), args, _runs(places))

    def pack(self, floats: list[float]) -> bytes:
        args = self.args
        for into, src in self.fills:
            args[into] = floats[src]
        return self.packer.pack(*args)


def _runs(places: list[tuple[int, int]]) -> tuple[tuple[slice, slice], ...]:
    """(argument, float) pairs as slice pairs: each run of consecutive floats whose arguments are evenly
    spaced becomes one slice assignment."""
    runs = []
    i = 0
    while i < len(places):
        j = i + 1
        step = places[j][0] - places[i][0] if j < len(places) else 1
        while j < len(places) and places[j][0] - places[j - 1][0] == step and places[j][1] == places[j - 1][1] + 1:
            j += 1
        (a0, f0), (a1, f1) = places[i], places[j - 1]
        runs.append((slice(a0, a1 + 1, step), slice(f0, f1 + 1)))
        i = j
    return tuple(runs)


class VmcSender:
    """One session's VMC output: a non-blocking UDP socket connected to HOST:PORT. A send never blocks and
    never raises: a full socket buffer or an unreachable host drops the frame and counts it (`dropped`), the
    first error of a run is logged and kept in `last_error` until `error_hold_s` pass without one. Connected,
    the socket hears the port-unreachable answer of a host where nothing listens (the avatar app closed,
    or its receiver on another port), which the status then names; and the kernel looks the route up once,
    not per datagram. The host name is resolved on the first send (the frame thread, never the event loop)."""

    def __init__(self, target: str, settings: VmcSettings = VmcSettings()) -> None:
        self.target = target
        self.host, self.port = parse_target(target)
        self.encoder = VmcEncoder(settings)
        self._error_hold_s = settings.error_hold_s
        self._sock: socket.socket | None = None
        self.frames = 0
        self.dropped = 0
        self.last_error: str | None = None
        self._error_at = 0.0
        self._retry_at = 0.0

    def _open(self) -> bool:
        if self._sock is not None:
            return True
        now = time.monotonic()
        if now < self._retry_at:
            return False
        try:
            family, _, _, _, addr = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_DGRAM)[0]
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.connect(addr)
        except OSError as exc:
            self._fail(f"cannot reach VMC target {self.host}:{self.port}: {exc}")
            self._retry_at = now + 5.0
            return False
        self._sock = sock
        try:
            if ipaddress.ip_address(addr[0]).is_loopback:
                self.encoder = VmcEncoder(self.encoder.settings, LOOPBACK_DATAGRAM)
        except ValueError:
            pass
        return True

    def _fail(self, message: str) -> None:
        if self.last_error != message:
            log.warning("%s", message)
        self.last_error = message
        self._error_at = time.monotonic()

    def send(self, frame: FaceFrame) -> bool:
        """Send one frame; whether all its datagrams left."""
        if not self._open():
            self.dropped += 1
            return False
        try:
            for d in self.encoder.datagrams(frame):
                self._sock.send(d)   # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            self.dropped += 1
            return False
        except ConnectionRefusedError:   # the port-unreachable answer to an earlier datagram
            self._fail(f"nothing listens for VMC at {self.host}:{self.port}: is the avatar app's VMC receiver on, "
                       f"on that port?")
            self.dropped += 1
            return False
        except OSError as exc:   # no route, ...
            self._fail(f"VMC send to {self.host}:{self.port} failed: {exc}")
            self.dropped += 1
            return False
        self.frames += 1
        if self.last_error is not None and time.monotonic() - self._error_at >= self._error_hold_s:
            self.last_error = None
        return True

    def status(self) -> dict[str, Any]:
        return {"target": f"{self.host}:{self.port}", "frames": self.frames, "dropped": self.dropped,
                "error": self.last_error}

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
