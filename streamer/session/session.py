"""Per-client state: what the client asked for (controls) and its source faces.

The control path replaces the controls and the source table atomically (`update`, `add_source`); the
frame worker takes one `FrameContext` per frame (`frame_context()`), so every stage of a frame sees the
same version of both and a frame never mixes two.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from engines.sources import SourceFace


FusionMode = Literal["geometric", "neural", "both"]
FUSION_MODES: tuple[str, ...] = ("geometric", "neural", "both")   # neural / both need a loaded --swapper


@dataclass(frozen=True, slots=True)
class Controls:
    """What the client steers. `edits` are slider values in [-1, 1] by edit name; they add to what the
    prompt asks for."""

    strength: float = 1.0
    # how far fusion moves the face's proportions toward the source's, 0..1 (0: its skin alone changes);
    # None = the server's default (FusionConfig.shape_weight)
    shape: float | None = None
    prompt: str = ""
    edits: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # coloured edit -> palette name or #rrggbb (engines/colours.py), over the prompt's colour words
    colours: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    source_id: str | None = None          # the active source face (key into Session.sources)
    # track id -> source id, or "keep" (streamer/session/face_map.py); a face not in it gets `source_id`
    face_sources: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))
    keep_mouth: bool = True
    keep_eyes: bool = True
    enabled: bool = True
    # what goes behind the person (engines.background.BackgroundSpec: blur, a colour, an uploaded picture);
    # None = the frame's own room, and the background stage costs nothing
    background: Any = None
    fusion: FusionMode | None = None      # which fusion backend runs; None = the server's default (--fusion)
    enhance: float | None = None          # face enhancer strength 0..1; None = the server's default (docs/models.md)
    # the avatar and face-data outputs asked for (streamer/sinks/face_outputs.py: vmc, vtube_studio, face_events,
    # mirror, face_track); None = the server's defaults (serve --vmc / --vtube-studio)
    outputs: Mapping[str, Any] | None = None
    calibration: int = 0                  # raised by each `calibrate` request: the face rig collects a neutral face
    face_neutral: Mapping[str, Any] | None = None   # a neutral from an earlier `face_calibrated` event, restored

    def as_json(self) -> dict[str, Any]:
        """Every control as JSON (the session info route): mappings as objects, track ids as strings, the
        background as its spec (mode "none" when unset)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "background":
                v = v.to_json() if v is not None else {"mode": "none"}
            elif isinstance(v, Mapping):
                v = {str(k): (dict(x) if isinstance(x, Mapping) else x) for k, x in v.items()}
            out[f.name] = v
        return out


def fusion_mode(controls: Controls, default: str) -> str:
    """The fusion backend this frame runs: the session's choice, else the server's default."""
    return controls.fusion or default


EventSink = Callable[[dict[str, Any]], None]
_NO_SOURCES: Mapping[str, "SourceFace"] = MappingProxyType({})
_NO_BACKGROUNDS: Mapping[str, Any] = MappingProxyType({})
MAX_BACKGROUNDS = 4     # pictures a session keeps for its background (the oldest not in use goes first)


@dataclass(frozen=True, slots=True)
class FrameContext:
    """What one frame needs from its session, read once: the stages of a frame share it."""

    session_id: str
    controls: Controls
    sources: Mapping[str, "SourceFace"]      # source id -> registered source face (read-only)
    notify: EventSink                        # tell the client (errors, what a prompt was understood as)
    backgrounds: Mapping[str, Any] = field(default_factory=lambda: _NO_BACKGROUNDS)   # picture id -> RGB picture


def frame_context(controls: Controls = Controls(), sources: Mapping[str, "SourceFace"] = _NO_SOURCES,
                  session_id: str = "", notify: EventSink | None = None) -> FrameContext:
    """A context outside any session (`livefuse inspect`, tests, benchmarks); events go nowhere."""
    return FrameContext(session_id, controls, MappingProxyType(dict(sources)), notify or (lambda event: None))


class Session:
    """One client's session. Thread-safe where the frame worker and the event loop meet."""

    def __init__(self, session_id: str | None = None, *, client: str = "", token_id: str | None = None) -> None:
        self.id = session_id or uuid.uuid4().hex[:16]
        self.client = client
        self.token_id = token_id            # the principal that opened the session: its owner
        self.created = time.time()
        self._controls = Controls()
        self._lock = threading.Lock()
        self._sources: Mapping[str, "SourceFace"] = _NO_SOURCES
        self._backgrounds: Mapping[str, Any] = _NO_BACKGROUNDS
        self._events: deque[dict[str, Any]] = deque(maxlen=256)
        self._event_sink: EventSink | None = None
        self.closed = threading.Event()
        self._on_close: list[Callable[[], None]] = []

    def owned_by(self, principal: str | None) -> bool:
        """Only the principal that opened a session may read, steer, watch or end it."""
        return principal is not None and self.token_id is not None and principal == self.token_id

    @property
    def controls(self) -> Controls:
        return self._controls

    @property
    def sources(self) -> Mapping[str, "SourceFace"]:
        """Source id -> registered source face, read-only; replaced whole by `add_source`/`clear_sources`."""
        return self._sources

    def add_source(self, source_id: str, source: "SourceFace", *, activate: bool = True) -> None:
        """Register a source face; `activate` makes it the active one in the same step."""
        with self._lock:
            self._sources = MappingProxyType({**self._sources, source_id: source})
            if activate:
                self._controls = replace(self._controls, source_id=source_id)

    @property
    def backgrounds(self) -> Mapping[str, Any]:
        """Picture id -> an uploaded background picture (H x W x 3 uint8 RGB), read-only."""
        return self._backgrounds

    def add_background(self, image: Any) -> str:
        """Keep an uploaded background picture; its new id. Past MAX_BACKGROUNDS the oldest picture the
        controls do not name is let go."""
        image_id = "bg-" + uuid.uuid4().hex[:12]
        with self._lock:
            kept = dict(self._backgrounds)
            in_use = getattr(self._controls.background, "image_id", None)
            for old in list(kept):
                if len(kept) < MAX_BACKGROUNDS:
                    break
                if old != in_use:
                    del kept[old]
            kept[image_id] = image
            self._backgrounds = MappingProxyType(kept)
        return image_id

    def clear_sources(self) -> int:
        """Drop every source face; returns how many there were."""
        with self._lock:
            count, self._sources = len(self._sources), _NO_SOURCES
            return count

    def frame_context(self) -> FrameContext:
        """One consistent view of the controls and sources for the frame about to run."""
        with self._lock:
            return FrameContext(self.id, self._controls, self._sources, self.notify, self._backgrounds)

    def update(self, **changes: Any) -> Controls:
        if "edits" in changes:
            changes["edits"] = MappingProxyType(dict(changes["edits"]))
        if "face_sources" in changes:
            changes["face_sources"] = MappingProxyType(dict(changes["face_sources"]))
        with self._lock:
            if "colours" in changes:   # a partial change: named shades replace, null removes
                merged = {**self._controls.colours, **changes["colours"]}
                changes["colours"] = MappingProxyType({k: v for k, v in merged.items() if v is not None})
            self._controls = replace(self._controls, **changes)
            return self._controls

    def map_face(self, track_id: int, source_id: str | None) -> Mapping[int, str]:
        """One face's choice (a source id or "keep"; None removes its mapping), in one step; the new map."""
        with self._lock:
            faces = dict(self._controls.face_sources)
            if source_id is None:
                faces.pop(track_id, None)
            else:
                faces[track_id] = source_id
            self._controls = replace(self._controls, face_sources=MappingProxyType(faces))
            return self._controls.face_sources

    def set_event_sink(self, sink: EventSink | None) -> None:
        """Where events for the client go (the data channel). Events raised before a sink exists wait."""
        with self._lock:
            self._event_sink = sink
            pending = list(self._events) if sink else []
            self._events.clear()
        for event in pending:
            sink(event)  # type: ignore[misc]

    def notify(self, event: dict[str, Any]) -> None:
        """Send an event (error, info, stats) to the client; safe from any thread."""
        with self._lock:
            sink = self._event_sink
            if sink is None:
                self._events.append(event)
                return
        sink(event)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run `callback` once when the session ends (release a rate-limit slot, close a sink)."""
        with self._lock:
            self._on_close.append(callback)

    def run_close_callbacks(self) -> None:
        with self._lock:
            callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one failing callback must not keep the others from running
                logging.getLogger(__name__).exception("session %s: close callback failed", self.id)
