"""One session's avatar and face-data outputs, fed by the face-out stage with each frame of the face rig:
VMC over UDP (streamer/sinks/vmc.py), VTube Studio (streamer/sinks/vtube_studio.py), `face` events to the
session's clients at a chosen rate, and a JSON-lines file (`livefuse process --face-data`).

What a session asks for is one small mapping with the same names everywhere (the control protocol's
`set_params.outputs`, REST's `POST /v1/sessions/{id}/outputs`, the CLI's flags):
`vmc` ("HOST:PORT" or null), `vtube_studio` ("ws://HOST:PORT" or null), `face_events` (events a second,
0 = off), `mirror` (the avatar as the user's mirror image; default true), `face_track` (the track id that
drives the rig; null = the largest face). Keys left out keep the server's defaults (`serve --vmc
--vtube-studio`). A VMC send is a non-blocking UDP send on the frame thread, and so is a live VTube Studio
client's write (it connects on a thread of its own); nothing here waits.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import IO, Any, Callable, Mapping

from engines.face_rig import FaceFrame
from streamer.session.protocol import EncodedEvent

log = logging.getLogger(__name__)

Notify = Callable[[Mapping[str, Any]], None]
MAX_EVENT_RATE = 60.0
OUTPUT_KEYS = ("vmc", "vtube_studio", "face_events", "mirror", "face_track")


@dataclass(frozen=True, slots=True)
class OutputSettings:
    vmc: str = ""                 # HOST:PORT; "" = off
    vtube_studio: str = ""        # ws://HOST:PORT; "" = off
    face_events: float = 0.0      # `face` events a second to the session's clients; 0 = off
    face_data: str = ""           # a JSON-lines file, one line per frame (livefuse process)
    mirror: bool = True
    face_track: int | None = None

    def __post_init__(self) -> None:
        if not (0.0 <= self.face_events <= MAX_EVENT_RATE) or math.isnan(self.face_events):
            raise ValueError(f"face_events must be within 0..{MAX_EVENT_RATE:g} a second, got {self.face_events}")

    @property
    def any(self) -> bool:
        return bool(self.vmc or self.vtube_studio or self.face_events > 0 or self.face_data)

    def public(self) -> dict[str, Any]:
        """What a client may read back: the outputs' names as the protocol spells them."""
        return {"vmc": self.vmc or None, "vtube_studio": self.vtube_studio or None, "face_events": self.face_events,
                "mirror": self.mirror, "face_track": self.face_track}


def settings_from(requested: Mapping[str, Any] | None, defaults: OutputSettings) -> OutputSettings:
    """The session's request (the protocol's `outputs` object, validated by its schema) over the defaults;
    null for vmc / vtube_studio turns that output off."""
    if not requested:
        return defaults
    changes: dict[str, Any] = {}
    for key in OUTPUT_KEYS:
        if key not in requested:
            continue
        value = requested[key]
        if key in ("vmc", "vtube_studio"):
            changes[key] = value or ""
        elif key == "face_events":
            changes[key] = float(value)
        else:
            changes[key] = value
    return replace(defaults, **changes)


class FaceDataFile:
    """One JSON line per frame: the `face` event's body (docs/api.md, Face events)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[str] | None = open(path, "w", encoding="utf-8")   # noqa: SIM115 - closed in close()
        self.lines = 0

    def write(self, frame: FaceFrame) -> None:
        if self._file is not None:
            self._file.write(frame.json_text() + "\n")
            self.lines += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class FaceOutputs:
    """The outputs of one session. `configure` and `send` come from the session's frame thread;
    `status` from anywhere."""

    def __init__(self, defaults: OutputSettings = OutputSettings(), *, vts_settings: Any = None) -> None:
        self.defaults = defaults
        self.settings = OutputSettings()
        self._vts_settings = vts_settings
        self.vmc: Any = None
        self.vts: Any = None
        self.data: FaceDataFile | None = None
        self.active = False            # any output on: kept with the settings, read every frame
        self._next_event = 0.0
        self._reported: dict[str, Any] = {}
        self._checked = 0.0
        self.configure(None)

    @property
    def track_id(self) -> int | None:
        return self.settings.face_track

    def configure(self, requested: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """Apply a session's request; the events that say what changed (an output that cannot start is an
        `output` event with its error, the others go on)."""
        try:
            new = settings_from(requested, self.defaults)
        except (TypeError, ValueError) as exc:
            return [{"type": "output", "output": "face", "state": "error", "error": str(exc)}]
        old, self.settings = self.settings, new
        events: list[dict[str, Any]] = []
        if (new.vmc, new.mirror) != (old.vmc, old.mirror) or (new.vmc and self.vmc is None):
            events += self._open_vmc(new)
        if (new.vtube_studio, new.mirror) != (old.vtube_studio, old.mirror) or (new.vtube_studio and self.vts is None):
            events += self._open_vts(new)
        if new.face_data != old.face_data or (new.face_data and self.data is None):
            if self.data is not None:
                self.data.close()
                self.data = None
            if new.face_data:
                try:
                    self.data = FaceDataFile(new.face_data)
                except OSError as exc:
                    events.append({"type": "output", "output": "face_data", "state": "error", "error": str(exc)})
        self._reported = {}
        self.active = self.settings.any
        return events

    def _open_vmc(self, s: OutputSettings) -> list[dict[str, Any]]:
        from streamer.sinks.vmc import VmcSender, VmcSettings

        if self.vmc is not None:
            self.vmc.close()
            self.vmc = None
        if not s.vmc:
            return [{"type": "output", "output": "vmc", "state": "off"}]
        try:
            self.vmc = VmcSender(s.vmc, VmcSettings(mirror=s.mirror))
        except ValueError as exc:
            self.settings = replace(self.settings, vmc="")
            return [{"type": "output", "output": "vmc", "state": "error", "error": str(exc)}]
        return [{"type": "output", "output": "vmc", "state": "on", "target": f"{self.vmc.host}:{self.vmc.port}"}]

    def _open_vts(self, s: OutputSettings) -> list[dict[str, Any]]:
        from streamer.sinks.vtube_studio import VtsClient, VtsSettings

        if self.vts is not None:
            self.vts.close()
            self.vts = None
        if not s.vtube_studio:
            return [{"type": "output", "output": "vtube_studio", "state": "off"}]
        settings = replace(self._vts_settings or VtsSettings(), mirror=s.mirror)
        try:
            self.vts = VtsClient(s.vtube_studio, settings)
        except ValueError as exc:
            self.settings = replace(self.settings, vtube_studio="")
            return [{"type": "output", "output": "vtube_studio", "state": "error", "error": str(exc)}]
        return [{"type": "output", "output": "vtube_studio", "state": "connecting", "url": s.vtube_studio}]

    def send(self, frame: FaceFrame, notify: Notify) -> None:
        """One frame to every output that is on; never raises for an output's fault (it is reported)."""
        s = self.settings
        if self.vmc is not None:
            self.vmc.send(frame)
        if self.vts is not None:
            self.vts.offer(frame)
        if self.data is not None:
            self.data.write(frame)
        now = time.monotonic()
        if s.face_events > 0 and now >= self._next_event:
            self._next_event = max(self._next_event + 1.0 / s.face_events, now - 0.5 / s.face_events)
            notify(EncodedEvent("face", frame.json_text()))
        if now - self._checked >= 0.5:     # an output's state changed: one event, not one per frame
            self._checked = now
            for name, out in (("vmc", self.vmc), ("vtube_studio", self.vts)):
                if out is None:
                    continue
                st = out.status()
                key = (st.get("state"), st.get("error"))
                if self._reported.get(name) != key:
                    self._reported[name] = key
                    if st.get("error") or name == "vtube_studio":
                        notify({"type": "output", "output": name, **st})

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"settings": self.settings.public()}
        if self.vmc is not None:
            out["vmc"] = self.vmc.status()
        if self.vts is not None:
            out["vtube_studio"] = self.vts.status()
        if self.data is not None:
            out["face_data"] = {"path": self.data.path, "lines": self.data.lines}
        return out

    def close(self) -> None:
        if self.vmc is not None:
            self.vmc.close()
            self.vmc = None
        if self.vts is not None:
            self.vts.close()
            self.vts = None
        if self.data is not None:
            self.data.close()
            self.data = None
