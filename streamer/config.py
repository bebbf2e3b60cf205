"""Server settings in one frozen place: built from CLI flags or LIVEFUSE_* environment variables."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, Mapping

import yarl

Codec = Literal["VP8", "H264"]
CODECS: tuple[str, ...] = ("VP8", "H264")
PIXELS = re.compile(r"cpu|cuda(:\d+)?")   # ServerConfig.pixels


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, bounded by a cgroup v2 CPU quota where one is
    set (a container's `resources.limits.cpu`), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            n = min(n, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


def state_dir() -> Path:
    """The user's LiveFuse state folder ($XDG_STATE_HOME/livefuse, else ~/.local/state/livefuse): the audit
    log, results on disk, VTube Studio tokens. One per user, wherever a command runs."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "livefuse"


# how long a body may go without a byte (ServerConfig.read_timeout_s)
DEFAULT_READ_TIMEOUT_S = 15.0
# the slowest a body may arrive once its grace has passed (ServerConfig.min_body_rate / body_grace_s):
# 32 KiB/s is a 256 kbit/s uplink; a 10 MiB photo then has 10 + 320 s, a trickle of 7 KiB/s is cut at ~13 s
DEFAULT_MIN_BODY_RATE = 32 * 1024
DEFAULT_BODY_GRACE_S = 10.0


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """How slowly a request body may arrive: never `stall_s` without a byte, and after `grace_s`, at
    `min_rate` bytes/s or faster on average since the body began (0: no rate floor)."""

    stall_s: float = DEFAULT_READ_TIMEOUT_S
    min_rate: float = DEFAULT_MIN_BODY_RATE
    grace_s: float = DEFAULT_BODY_GRACE_S

    def __post_init__(self) -> None:
        if self.stall_s <= 0 or self.min_rate < 0 or self.grace_s < 0:
            raise ValueError(f"body limits must be positive: stall {self.stall_s}, rate {self.min_rate}, grace {self.grace_s}")


# what every photo, live source upload and clip frame in flight may hold at once (ServerConfig.memory_budget)
DEFAULT_MAX_PENDING_BYTES = 640 << 20

H264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium")


def check_public_url(url: str) -> None:
    """ValueError unless `url` is http(s)://host[:port][/prefix] with no query or fragment."""
    try:
        u = yarl.URL(url)
    except ValueError as exc:
        raise ValueError(f"public URL {url!r}: {exc}") from None
    if u.scheme not in ("http", "https") or not u.host:
        raise ValueError(f"public URL {url!r} must be http(s)://HOST[:PORT][/PREFIX]")
    if u.query_string or u.fragment or u.user:
        raise ValueError(f"public URL {url!r} must have no query, fragment or credentials")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything the server needs to know before its first request."""

    host: str = "127.0.0.1"
    port: int = 8080
    tls_cert: str | None = None          # PEM; getUserMedia needs a secure context off localhost
    tls_key: str | None = None
    codec: Codec = "VP8"                  # preferred video codec for the returned stream
    min_bitrate: int = 250_000            # bits/s, bounds the encoder's REMB-driven target
    max_bitrate: int = 1_500_000
    # libx264's speed preset for H264 streams (aiortc's own is libx264's default, medium: docs/streaming.md,
    # "Encoder speed", has each preset's CPU and PSNR from `livefuse bench codecs`)
    h264_preset: str = "superfast"
    max_sessions: int = 8
    max_viewers: int = 16                 # WHEP viewers per session
    ice_servers: tuple[str, ...] = ()     # "stun:host:port", "turn:host:port?transport=udp"; ignored on loopback
    ice_username: str | None = None       # for TURN
    ice_credential: str | None = None
    max_sdp_bytes: int = 64 * 1024
    max_source_bytes: int = 10 * 1024 * 1024
    max_source_pixels: int = 4096 * 4096
    max_clip_bytes: int = 256 * 1024 * 1024   # a clip job's upload (streamed to disk as it arrives)
    record_sessions: bool = False         # record every session to the results store (else those that ask: "record": true)
    # RTMP(S) destinations every session's output is pushed to (serve --restream; streamer/web/restreams.py), and
    # the push's encode: bits/s, seconds between keyframes, WIDTHxHEIGHT ("" = the session's own size)
    restream: tuple[str, ...] = ()
    restream_bitrate: int = 2_500_000
    restream_keyframe_s: float = 2.0
    restream_size: str = ""
    max_message_bytes: int = 16 * 1024    # one data-channel message
    idle_timeout_s: float = 10.0          # no media and no control for this long -> the peer is gone
    # a request's headers must all arrive within this of its connection opening (or of the last reply);
    # a body may go no longer than this without a byte: a slow client holds a connection, never more
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    # ... and, after body_grace_s, must arrive at min_body_rate bytes/s or faster on average (0: no floor),
    # so a body trickled just fast enough to dodge the stall timer is cut too (408 too_slow)
    min_body_rate: float = DEFAULT_MIN_BODY_RATE
    body_grace_s: float = DEFAULT_BODY_GRACE_S
    # upload bodies (photos, clip jobs, live source images) being received at once; beyond it 503 busy
    max_uploads: int = 32
    # photos read and decoded, waiting for or in the pipeline, at once; beyond it 503 busy
    max_photos: int = 64
    # bytes every photo, live source upload and clip job frame in flight may hold together (bodies in
    # memory, decoded images and their working copies, encoded results); beyond it 503 busy + Retry-After
    memory_budget: int = DEFAULT_MAX_PENDING_BYTES
    stats_interval_s: float = 1.0
    retry_after_s: int = 10               # told to clients refused for capacity
    overlap: str = "auto"                 # pipeline overlap across frames: "on", "off", "auto" (while 3 cores per stream)
    # OpenCV's threads in this process (cv2.setNumThreads, set where the server starts); None: OpenCV's own
    # default, one per core. One: the streams' frame workers and codecs are the parallelism, and OpenCV's
    # pool on top costs a frame 14-24 % more CPU for 4-9 % less wall time (docs/performance.md, "Thread
    # counts"); a lone 1080p stream on an idle host may trade that CPU for latency with 2
    cv2_threads: int | None = 1
    # where a stream frame's pixels live while the stages work on them: "cpu" (yuv420p planes in host
    # memory, NumPy/OpenCV kernels) or "cuda" / "cuda:N" (the planes uploaded once per frame, torch kernels)
    pixels: str = "cpu"
    vcam: str = ""                        # "" off; "auto" the first virtual camera device; or a device path
    vcam_width: int = 1280
    vcam_height: int = 720
    vcam_fps: float = 30.0
    vcam_backend: str = ""                # pyvirtualcam backend name ("" = the platform's)
    # WHEP viewers' audio leaves as long after capture as the video spends in the server, so the session's
    # stream keeps the sender's own audio/video timing (`livefuse bench lipsync` measures it in Chromium)
    hold_audio: bool = True
    # in a cluster: the URL clients reach this replica by (e.g. http://POD_IP:8080); session URLs handed
    # out (Location, WHEP, source upload) are absolute on it so follow-ups reach the replica holding them
    public_url: str = ""
    drain_timeout: float = 900.0          # s a drain waits for running sessions before closing them
    # the gRPC service (livefuse.v1.Fusion, health, reflection) on this port beside HTTP, same TLS; 0: off
    grpc_port: int = 0
    # where clients fetch clip results: the base of a cache edge or CDN (https://cdn.example.com/results)
    # in front of this server's GET /results/<key>; "" = the API's own URLs
    results_public_url: str = ""
    results_private: bool = False         # results are `Cache-Control: private, no-store` (no shared cache keeps them)
    results_purge: tuple[str, ...] = ()   # caches (http://host:port) a deleted result is PURGEd from, every address of each

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {self.codec!r}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port out of range: {self.port}")
        if self.min_bitrate <= 0 or self.max_bitrate < self.min_bitrate:
            raise ValueError(f"bad bitrate bounds {self.min_bitrate}..{self.max_bitrate}")
        if self.cv2_threads is not None and self.cv2_threads < 1:
            raise ValueError(f"cv2_threads must be 1 or more (or unset for OpenCV's default), got {self.cv2_threads}")
        if self.h264_preset not in H264_PRESETS:
            raise ValueError(f"h264_preset must be one of {', '.join(H264_PRESETS)}, got {self.h264_preset!r}")
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        if self.overlap not in ("auto", "on", "off"):
            raise ValueError(f"overlap must be auto, on or off, got {self.overlap!r}")
        if not PIXELS.fullmatch(self.pixels):
            raise ValueError(f"pixels must be cpu, cuda or cuda:N, got {self.pixels!r}")
        for name in ("max_uploads", "max_photos", "memory_budget"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.read_timeout_s <= 0 or self.min_body_rate < 0 or self.body_grace_s < 0:
            raise ValueError("read_timeout_s must be > 0, min_body_rate and body_grace_s >= 0")
        if self.drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {self.drain_timeout}")
        if self.public_url:
            check_public_url(self.public_url)
        if not 0 <= self.grpc_port < 65536 or (self.grpc_port and self.grpc_port == self.port):
            raise ValueError(f"grpc_port must be 0 (off) or a port other than the HTTP one, got {self.grpc_port}")
        if self.results_public_url:
            check_public_url(self.results_public_url)
        for url in self.results_purge:
            check_public_url(url)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate and a key")

    @property
    def loopback(self) -> bool:
        """Bound to loopback only: gather 127.0.0.1 candidates and contact no STUN/TURN server."""
        if self.host in ("localhost",):
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def overlap_for(self, streams: int, cores: int | None = None) -> bool:
        """Whether a stream that starts now, as the `streams`-th running on this host, runs the face stage
        on the next frame while the later stages finish this one. `auto`: while the cores this process
        may use (`usable_cores`, or `cores`) give each stream three, one for each of its frame threads and
        one for its search thread and its share of the codecs; with fewer, the plain worker keeps up and
        the overlapped one's second thread only adds to the contention (docs/performance.md, "Which worker")."""
        if self.overlap == "auto":
            return (usable_cores() if cores is None else cores) >= 3 * max(1, streams)
        return self.overlap == "on"

    @property
    def pixel_device(self) -> str | None:
        """The torch device stream frames' planes go to; None: host memory (`pixels` "cpu")."""
        return None if self.pixels == "cpu" else self.pixels

    @property
    def body_limits(self) -> BodyLimits:
        return BodyLimits(self.read_timeout_s, self.min_body_rate, self.body_grace_s)

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "ServerConfig":
        """LIVEFUSE_<FIELD> variables (e.g. LIVEFUSE_PORT=9000, LIVEFUSE_ICE_SERVERS=stun:a:3478,stun:b),
        then explicit overrides (CLI flags that were given) on top."""
        return config_from_env(cls, env, **overrides)


def config_from_env(cls: type, env: Mapping[str, str] | None = None, *, env_name: Any = None, **overrides: Any) -> Any:
    """Any frozen config dataclass from LIVEFUSE_* variables, then the overrides that are not None on top.
    `env_name(field)` names a field's variable (default LIVEFUSE_<FIELD>)."""
    env = os.environ if env is None else env
    name_of = env_name or (lambda field: f"LIVEFUSE_{field.upper()}")
    values: dict[str, Any] = {}
    for f in fields(cls):
        var = name_of(f.name)
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        values[f.name] = _parse(f.name, str(f.type), raw, var)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**values)


def swapper_env_name(field: str) -> str:
    """SwapperConfig's variables: LIVEFUSE_SWAPPER, LIVEFUSE_SWAPPER_EMBEDDER, LIVEFUSE_SWAPPER_DEVICE, ..."""
    return f"LIVEFUSE_{field.upper()}" if field.startswith("swapper") else f"LIVEFUSE_SWAPPER_{field.upper()}"


def _parse(name: str, type_name: str, raw: str, var: str = "") -> Any:
    try:
        if type_name.startswith("int"):
            return int(raw)
        if type_name.startswith("float"):
            return float(raw)
        if type_name.startswith("bool"):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected one of 1/0, true/false, yes/no, on/off")
        if type_name.startswith("tuple"):
            return tuple(s.strip() for s in raw.split(",") if s.strip())
        if name == "codec":
            return raw.upper()
        return raw
    except ValueError as exc:
        raise ValueError(f"{var or 'LIVEFUSE_' + name.upper()}={raw!r}: {exc}") from None
