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


class VmcEncoder:
    """FaceFrame -> the datagrams of one VMC frame."""

    def __init__(self, settings: VmcSettings = VmcSettings(), max_datagram: int = MAX_DATAGRAM) -> None:
        self.settings = settings
        self.max_datagram = max_datagram
        names = list(ARKIT_NAMES) + ([p for p, _ in VRM_PRESETS] if settings.vrm_presets else [])
        self._blend_heads = [osc_string("/VMC/Ext/Blend/Val") + osc_string(",sf") + osc_string(n) for n in names]
        self._preset_index = np.array([INDEX[src] for _, src in VRM_PRESETS]) if settings.vrm_presets else None
        self._ok = osc_message("/VMC/Ext/OK", "i", 1)
        self._t_head = osc_string("/VMC/Ext/T") + osc_string(",f")
        self._root_head = osc_string("/VMC/Ext/Root/Pos") + osc_string(",sfffffff") + osc_string("root")
        self._bone_head = osc_string("/VMC/Ext/Bone/Pos") + osc_string(",sfffffff") + osc_string("Head")
        self._apply = osc_message("/VMC/Ext/Blend/Apply", "")
        self._layout: tuple[np.ndarray, np.ndarray, list[tuple[int, int]]] | None = None

    def _values(self, frame: FaceFrame) -> tuple[np.ndarray, tuple[float, ...], tuple[float, ...]]:
        """The blend values (52 + presets, clipped), the root's and the head's position + rotation."""
        s = self.settings
        scores = frame.scores[MIRROR_ORDER] if s.mirror else frame.scores
        if self._preset_index is not None:
            scores = np.concatenate([scores, scores[self._preset_index]])
        pos, quat = unity_pose(frame, s.mirror)
        root = (*(pos if s.move_root else (0.0, 0.0, 0.0)), 0.0, 0.0, 0.0, 1.0)
        return np.clip(scores, 0.0, 1.0), root, (*pos, *quat)

    def messages(self, frame: FaceFrame) -> list[bytes]:
        """The frame's OSC messages in VMC's order."""
        blend, root, head = self._values(frame)
        values = blend.astype(">f4").tobytes()
        out = [self._ok, self._t_head + struct.pack(">f", frame.t), self._root_head + struct.pack(">7f", *root),
               self._bone_head + struct.pack(">7f", *head)]
        out += [h + values[4 * i:4 * i + 4] for i, h in enumerate(self._blend_heads)]
        out.append(self._apply)
        return out

    def datagrams(self, frame: FaceFrame) -> list[bytes]:
        """The frame's messages packed into OSC bundles of at most `max_datagram` bytes each. Every message
        has a fixed size, so the bundles are laid out once; a frame writes its 72 floats into the layout
        in one step."""
        blend, root, head = self._values(frame)
        floats = np.concatenate([[frame.t], root, head, blend]).astype(">f4")
        if self._layout is None:
            self._layout = self._lay_out(frame)
        template, where, cuts = self._layout
        buf = template.copy()
        buf[where] = floats.view(np.uint8).reshape(-1, 4)
        raw = buf.tobytes()
        return [raw[a:b] for a, b in cuts]

    def _lay_out(self, frame: FaceFrame) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """The bundles' bytes with zeros for the floats, where each float goes (in `datagrams`' order:
        time, root x7, head x7, blends), and each datagram's span."""
        msgs = self.messages(frame)
        # the float offsets inside each message: T's last 4 bytes, the Pos messages' last 28, each Val's last 4
        spans: list[list[int]] = [[], [len(msgs[1]) - 4], [len(msgs[2]) - 28 + 4 * k for k in range(7)],
                                  [len(msgs[3]) - 28 + 4 * k for k in range(7)]]
        spans += [[len(m) - 4] for m in msgs[4:-1]] + [[]]
        template = bytearray()
        where: list[int] = []
        cuts: list[tuple[int, int]] = []
        start = 0
        size = 0
        for m, offsets in zip(msgs, spans):
            item = struct.pack(">i", len(m)) + m
            if size == 0 or (size + len(item) > self.max_datagram and size > len(_BUNDLE_HEAD)):
                if size:
                    cuts.append((start, len(template)))
                start = len(template)
                template += _BUNDLE_HEAD
                size = len(_BUNDLE_HEAD)
            where += [len(template) + 4 + o for o in offsets]
            template += item
            size += len(item)
        cuts.append((start, len(template)))
        order = np.array(where)
        return np.frombuffer(bytes(template), np.uint8).copy(), order[:, None] + np.arange(4), cuts


class VmcSender:
    """One session's VMC output: a non-blocking UDP socket to HOST:PORT. A send never blocks and never
    raises: a full socket buffer or an unreachable host drops the frame and counts it (`dropped`), the
    first error of a run is logged and kept in `last_error`. The host name is resolved on the first send
    (the frame thread, never the event loop)."""

    def __init__(self, target: str, settings: VmcSettings = VmcSettings()) -> None:
        self.target = target
        self.host, self.port = parse_target(target)
        self.encoder = VmcEncoder(settings)
        self._sock: socket.socket | None = None
        self._addr: Any = None
        self.frames = 0
        self.dropped = 0
        self.last_error: str | None = None
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
        except OSError as exc:
            self._fail(f"cannot reach VMC target {self.host}:{self.port}: {exc}")
            self._retry_at = now + 5.0
            return False
        self._sock, self._addr = sock, addr
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

    def send(self, frame: FaceFrame) -> bool:
        """Send one frame; whether all its datagrams left."""
        if not self._open():
            self.dropped += 1
            return False
        try:
            for d in self.encoder.datagrams(frame):
                self._sock.sendto(d, self._addr)   # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            self.dropped += 1
            return False
        except OSError as exc:   # ICMP port unreachable from an earlier datagram, no route, ...
            self._fail(f"VMC send to {self.host}:{self.port} failed: {exc}")
            self.dropped += 1
            return False
        self.frames += 1
        self.last_error = None
        return True

    def status(self) -> dict[str, Any]:
        return {"target": f"{self.host}:{self.port}", "frames": self.frames, "dropped": self.dropped,
                "error": self.last_error}

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
