"""The face-out stage: the tracked face as avatar apps and face-data clients read it (engines/face_rig.py),
handed to the session's outputs (VMC, VTube Studio, `face` events, a JSON-lines file) each frame.

It runs right after the face stage and reads only what that stage wrote (`state.faces`, the raw
landmarks); the pixels go on untouched. With no output on and no calibration running it returns at once:
a session that asks for nothing pays nothing. The session's controls say what is asked for
(`Controls.outputs`, the protocol's `set_params.outputs`), start a neutral calibration
(`Controls.calibration`, a counter the `calibrate` request raises) or restore a stored one
(`Controls.face_neutral`); when a calibration ends the clients get a `face_calibrated` event with the
neutral, which they may keep and send back in a later session.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from engines.face_rig import FaceRig, Neutral, RigConfig, pick_face

if TYPE_CHECKING:  # pragma: no cover
    from streamer.session.session import Controls
    from streamer.pipeline.pipeline import FrameState
    from streamer.session.session import FrameContext

log = logging.getLogger(__name__)


class FaceOutStage:
    """`outputs`: the session's outputs (streamer/sinks/face_outputs.FaceOutputs, handed in by the
    composition root: `configure(requested) -> events`, `active`, `track_id`, `send(frame, notify)`,
    `close()`)."""

    name = "face_out"

    def __init__(self, outputs: Any, rig: FaceRig | None = None, rig_config: RigConfig = RigConfig(),
                 blendshapes: Callable | None = None) -> None:
        self.outputs = outputs
        self.rig = rig or FaceRig(rig_config, blendshapes=blendshapes)
        self._controls: Any = None  # the controls last followed (frozen: a change is a new object)
        self._requested: Any = None
        self._calibration = 0
        self._neutral: Any = None
        self.last = None            # the last FaceFrame made (benchmarks, tests)

    def _follow_controls(self, controls: Controls, notify: Callable[[dict[str, Any]], None]) -> None:
        requested = getattr(controls, "outputs", None)
        if requested is not self._requested:
            self._requested = requested
            for event in self.outputs.configure(requested):
                notify(event)
        calibration = getattr(controls, "calibration", 0)
        if calibration != self._calibration:
            self._calibration = calibration
            self.rig.calibrate()
            notify({"type": "face_calibrating", "seconds": self.rig.config.neutral_seconds})
        neutral = getattr(controls, "face_neutral", None)
        if neutral is not self._neutral:
            self._neutral = neutral
            try:
                self.rig.set_neutral(Neutral.from_json(dict(neutral)) if neutral is not None else None)
            except ValueError as exc:
                notify({"type": "error", "stage": self.name, "message": f"face_neutral: {exc}"})

    def __call__(self, state: "FrameState", context: "FrameContext") -> "FrameState":
        notify = context.notify
        if context.controls is not self._controls:
            self._controls = context.controls
            self._follow_controls(context.controls, notify)
        calibrating = self.rig.calibrating
        if not self.outputs.active and not calibrating:
            return state
        face = pick_face(state.faces, self.outputs.track_id)
        raw = state.raw_landmarks.get(face.track_id) if face is not None else None
        h, w = state.shape
        if face is not None:   # which source the session maps to this face ("keep": left as it is; null: none)
            c = context.controls
            source = c.face_sources.get(face.track_id, c.source_id) if getattr(c, "face_sources", None) is not None else None
            frame = self.rig(face, state.seconds, (w, h), raw, extra={"source": source})
        else:
            frame = self.rig(None, state.seconds, (w, h))
        self.last = frame
        if calibrating and not self.rig.calibrating and self.rig.neutral is not None:
            notify({"type": "face_calibrated", "neutral": self.rig.neutral.as_json()})
        if self.outputs.active:
            self.outputs.send(frame, notify)
        return state

    def close(self) -> None:
        self.outputs.close()
