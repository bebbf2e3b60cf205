"""The edits stage: the session's prompt and sliders -> named edits -> pixels on every face.

The prompt is looked up in the shared PromptCache each frame (a dict lookup); while a new prompt is being
encoded the frame keeps the previous edits, and once it is ready the edits blend to it over
`blend_frames` frames. Slider edits add to the prompt's and the sum is clipped to [-1, 1]. The client is
told what each prompt was understood as (and when it was cut to the encoder's limit, or had words the
glossary did not know); an encoder that failed to load or a prompt that failed to encode is reported
once and the stream keeps its previous condition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from engines.colours import PALETTE, RGB, hex_of
from engines.edit_plan import EditConfig, colours_for
from engines.edit_render import render_edits, render_edits_in_regions
from engines.edit_vocabulary import EDIT_NAMES, SPECS_BY_NAME
from engines.prompt.language import MAX_PROMPT_CHARS
from engines.prompt.model import Condition
from kernels.twins import twin_for

if TYPE_CHECKING:  # pragma: no cover
    from streamer.pipeline.pipeline import FrameState
    from streamer.session.prompts import PromptCache
    from streamer.session.session import FrameContext
    from streamer.pipeline.stages.still import StillFaces


@dataclass(frozen=True, slots=True)
class EditsStageConfig:
    blend_frames: int = 4            # frames to move from the old prompt's edits to the new one's
    render: EditConfig = field(default_factory=EditConfig)
    report_threshold: float = 0.05   # edits smaller than this are left out of the "understood as" event


def combine(prompt_edits: Mapping[str, float], sliders: Mapping[str, Any]) -> dict[str, float]:
    """Prompt edits plus slider edits, clipped to each edit's range; unknown names and non-numbers are ignored."""
    out = {n: float(prompt_edits.get(n, 0.0)) for n in EDIT_NAMES}
    for name, value in sliders.items():
        if name not in out:
            continue
        try:
            v = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(v):
            out[name] += v
    return {n: SPECS_BY_NAME[n].clip(v) for n, v in out.items()}


class EditsStage:
    name = "edits"

    def __init__(self, cache: "PromptCache | None", config: EditsStageConfig = EditsStageConfig(), *,
                 unavailable: str | None = None, still: "StillFaces | None" = None) -> None:
        """`cache` is shared by all sessions (one encoder); None with `unavailable` set when the prompt model
        could not be loaded: sliders still work, prompts are reported as unavailable. `still`: a still face
        on the planes path reuses its previous edits (streamer/pipeline/stages/still.py); None = always fresh."""
        self.cache = cache
        self.still = still
        self.config = config
        self.unavailable = unavailable
        self._wanted: str | None = None          # the prompt the client asked for last, as sent
        self._waiting = False                    # its condition is not ready yet
        self._asked_at_once = False              # was it cached when first asked for
        self._from = {n: 0.0 for n in EDIT_NAMES}
        self._to = dict(self._from)
        self._step = 0
        self._told_unavailable = False
        self.last_edits: dict[str, float] = dict(self._from)
        self._prompt_colours: dict[str, str] = {}          # the current prompt's colour words, by coloured edit
        self._paint_key: tuple[tuple[str, str], ...] | None = None
        self._paint: dict[str, RGB] = colours_for(None)

    # -- prompt following -------------------------------------------------------------------------
    def _follow(self, prompt: str, context: "FrameContext") -> None:
        if self.cache is None:
            if prompt and not self._told_unavailable:
                self._told_unavailable = True
                context.notify({"type": "error", "stage": self.name, "message": f"prompts are unavailable: {self.unavailable}"})
            return
        if prompt != self._wanted:        # the cache normalises; the frame path compares the text as sent
            self._wanted = prompt
            self._waiting = True
            self._asked_at_once = True
        if not self._waiting:
            return
        cond = self.cache.get(prompt)
        if cond is not None:
            self._waiting = False
            self._start(cond, context, cached=self._asked_at_once)
            return
        self._asked_at_once = False
        err = self.cache.error(prompt)
        if err is not None:
            self._waiting = False  # keep the previous condition; tell the client once
            context.notify({"type": "error", "stage": self.name, "message": f"prompt not understood, keeping the previous one: {err}"})

    def _start(self, cond: Condition, context: "FrameContext", cached: bool) -> None:
        self._from = self.current()
        self._to = {n: float(cond.edits.get(n, 0.0)) for n in EDIT_NAMES}
        self._prompt_colours = dict(cond.colours)
        self._step = 0
        event: dict[str, Any] = {
            "type": "prompt", "text": cond.text[:MAX_PROMPT_CHARS], "understood": cond.summary(self.config.report_threshold),
            "encoder": cond.encoder, "cached": cached, "encode_ms": round(cond.encode_ms, 1),
        }
        if cond.encoder_text != cond.text:
            event["translated"] = cond.encoder_text[:MAX_PROMPT_CHARS]
        if cond.truncated:
            event["truncated"] = True
            event["message"] = f"prompt cut to what the encoder reads: {MAX_PROMPT_CHARS} characters, {cond.token_limit} tokens"
        if painted := cond.painted(self.config.report_threshold):   # the swatches the page shows
            event["colours"] = {k: {"colour": c, "hex": hex_of(PALETTE[c])} for k, c in painted.items()}
        if cond.unknown:
            event["unknown"] = "".join(dict.fromkeys(cond.unknown))[:100]
        if cond.ignored:   # clauses that ask for nothing a face filter does: they move no edit
            event["ignored"] = [c[:200] for c in cond.ignored]
        context.notify(event)

    def current(self) -> dict[str, float]:
        """The prompt's edits at this point of the blend."""
        n = max(1, self.config.blend_frames)
        a = min(1.0, self._step / n)
        return {k: (1 - a) * self._from[k] + a * self._to[k] for k in EDIT_NAMES}

    def paint(self, chosen: Mapping[str, str]) -> dict[str, RGB]:
        """The makeup's sRGB by coloured edit: the client's choice (`Controls.colours`) over the prompt's
        colour words over the defaults; resolved again only when either changes."""
        key = tuple(sorted({**self._prompt_colours, **chosen}.items()))
        if key != self._paint_key:
            try:
                self._paint = colours_for(dict(key))
            except ValueError:     # the protocol validates shades; a bad one from elsewhere keeps the defaults
                self._paint = colours_for(dict(self._prompt_colours))
            self._paint_key = key
        return self._paint

    # -- the frame --------------------------------------------------------------------------------
    def __call__(self, state: "FrameState", context: "FrameContext") -> "FrameState":
        controls = context.controls
        if self.still is not None:
            self.still.begin(context.session_id)
        self._follow(controls.prompt, context)
        if self._step < self.config.blend_frames:
            self._step += 1
        edits = combine(self.current(), controls.edits)
        self.last_edits = edits
        state.edits = edits
        if not controls.enabled or not state.faces or not any(abs(v) > 1e-3 for v in edits.values()):
            return state
        landmarks = [f.landmarks for f in state.faces]
        paint = self.paint(controls.colours)
        # a face parser's lips and skin (the parse stage) in place of the landmark polygons, where there is one
        regions = [f.regions for f in state.faces] if any(f.regions for f in state.faces) else None
        planes = state.planes
        if planes is not None:       # RGB of each face's ROI alone (shared with fusion's region when inside it)
            still = self.still if planes.device is None else None   # reuse keeps host deltas: host planes only
            opened: list[tuple[Any, Any, tuple[int, int], Any]] = []

            def region(box: tuple[int, int, int, int]) -> tuple[Any, tuple[int, int]]:
                snapped = planes.snap(*box)
                arr, (ox, oy, _, _) = planes.region(snapped)
                if still is not None:   # what the box held before the edits: the delta's base
                    x0, y0, x1, y1 = snapped
                    opened.append((snapped, arr, (ox, oy), arr[y0 - oy:y1 - oy, x0 - ox:x1 - ox].copy()))
                return arr, (ox, oy)

            if still is None:
                render_edits_in_regions(planes.shape, landmarks, edits, region, self.config.render, regions, paint)
            else:                    # face by face: a still face reuses its edits of the frame before
                steer = (tuple(edits.values()), planes.shape, self._paint_key)
                for face in state.faces:
                    if still.reuse(planes, face, steer):
                        continue
                    opened.clear()
                    render_edits_in_regions(planes.shape, [face.landmarks], edits, region, self.config.render,
                                            [face.regions] if face.regions else None, paint)
                    for box, arr, (ox, oy), before in opened:
                        x0, y0, x1, y1 = box
                        still.remember(face, steer, box, box, before, arr[y0 - oy:y1 - oy, x0 - ox:x1 - ox])
            planes.keep([f.keep for f in state.faces if f.keep is not None])   # a hand keeps its own pixels
            return state
        image = state.image
        out = render_edits(image, landmarks, edits, self.config.render, regions, paint)
        twin_for(out).blend.keep_patches(out, image, (f.keep for f in state.faces))   # a hand in front keeps its pixels
        state.image = out
        return state

    def close(self) -> None:
        if self.still is not None:
            self.still.clear()
