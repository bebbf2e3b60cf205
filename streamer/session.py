"""Per-client state: what the client asked for (controls), its source faces, and how its stream is doing.

The frame worker reads `session.controls` once per frame; the control path replaces it atomically with
`session.update(...)`, so a frame never sees half of a change.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Callable, Mapping


@dataclass(frozen=True, slots=True)
class Controls:
    """What the client steers. `edits` are slider values in [-1, 1] by edit name; they add to what the
    prompt asks for."""

    strength: float = 1.0
    prompt: str = ""
    edits: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    source_id: str | None = None          # the active source face (key into Session.sources)
    face_sources: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))  # track id -> source id
    keep_mouth: bool = True
    keep_eyes: bool = True
    enabled: bool = True


EventSink = Callable[[dict[str, Any]], None]


class Session:
    """One client's session. Thread-safe where the frame worker and the event loop meet."""

    def __init__(self, session_id: str | None = None, *, client: str = "", token_id: str | None = None) -> None:
        self.id = session_id or uuid.uuid4().hex[:16]
        self.client = client
        self.token_id = token_id
        self.created = time.time()
        self._controls = Controls()
        self._lock = threading.Lock()
        self.sources: dict[str, Any] = {}     # source id -> registered source face
        self.condition: Any = None            # the prompt's current condition (set by the prompt path)
        self._events: deque[dict[str, Any]] = deque(maxlen=256)
        self._event_sink: EventSink | None = None
        self.closed = threading.Event()
        self._on_close: list[Callable[[], None]] = []

    @property
    def controls(self) -> Controls:
        return self._controls

    def update(self, **changes: Any) -> Controls:
        if "edits" in changes:
            changes["edits"] = MappingProxyType(dict(changes["edits"]))
        if "face_sources" in changes:
            changes["face_sources"] = MappingProxyType(dict(changes["face_sources"]))
        with self._lock:
            self._controls = replace(self._controls, **changes)
            return self._controls

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
