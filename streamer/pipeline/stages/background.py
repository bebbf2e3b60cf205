"""The background stage: what is behind the person (blur, a colour key, an uploaded picture), as the
session's `background` control says. Off (None, the default) it returns the frame untouched and holds no
model. On, the person's matte (engines.background.Matte: the segmentation network, steadied over the
stream, fitted to the frame's edges) keeps every face the face stage follows as the person, so fused and
edited faces go out exactly as the earlier stages made them.

It runs after the edits and before the watermark, so the watermark marks the composed frame. A stream's
planes are composed plane by plane in place (no whole-frame RGB); photos and clips compose their RGB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engines.background import Backdrop, BackgroundError, Matte, MatteConfig, compose_i420, compose_rgb, face_hulls
from streamer.pipeline.pipeline import FrameState
from streamer.session.session import FrameContext


@dataclass(frozen=True, slots=True)
class BackgroundStageConfig:
    """matte: the segmentation and its refinement (engines.background.MatteConfig). keep_faces: the faces
    the face stage follows are always the person (their landmarks' hulls)."""

    matte: MatteConfig = field(default_factory=MatteConfig)
    keep_faces: bool = True


class BackgroundStage:
    """One stream's background. `live` (a stream or a clip) steadies the matte over frames; a photo
    (`live=False`) takes its own. `second_look`: each face's head is read a second time
    (engines.background.MatteConfig.second_look): photos always; a clip on every network run when asked
    (`livefuse process` and clip jobs, which no frame clock hurries); a stream once a second, holding the
    read between (MatteConfig.stream_look_frames), since every run would take its frame past the budget.
    BlazePose's read is a third vote (MatteConfig.pose_look): on the spot for photos and clips, once a
    second on a thread of the matte's own for a stream (MatteConfig.stream_pose_frames)."""

    name = "background"

    def __init__(self, config: BackgroundStageConfig = BackgroundStageConfig(), *, live: bool = True,
                 second_look: bool | None = None, matte_factory: Any = None, pose: Any = None) -> None:
        """`pose`: a PoseSegmenter to share (the product's, whose networks load once for every session,
        clip and photo); by default the matte makes its own when it first needs one."""
        self.config = config
        self.live = live
        self.second_look = second_look
        self._factory = matte_factory or (lambda: Matte(config.matte, reuse=True, pose=pose))
        self._work: dict = {}                  # the compositing's float buffers, kept from frame to frame
        self._matte: Matte | None = None
        self._backdrop = Backdrop()

    def __call__(self, state: FrameState, context: FrameContext) -> FrameState:
        spec = context.controls.background
        if spec is None or not spec.active:
            if self._matte is not None:
                self._matte.reset()            # a later start begins a new history
            return state
        picture = None
        if spec.mode == "image":
            picture = context.backgrounds.get(spec.image_id)
            if picture is None:
                raise BackgroundError(f"background picture {spec.image_id!r} is not in this session")
        if self._matte is None:
            self._matte = self._factory()
        keep = face_hulls(state.faces) if self.config.keep_faces else ()
        blur = self.config.matte.blur_factor
        planes = state.planes
        if planes is not None:
            y = planes.luma()                  # open regions written back; the planes change
            alphas = self._matte.alpha_i420(y, planes.u, planes.v, steady=self.live, keep=keep, full=False,
                                            second=self.second_look)
            compose_i420(y, planes.u, planes.v, alphas, spec, picture=picture, backdrop=self._backdrop,
                         picture_key=spec.image_id, blur_factor=blur, in_place=True,
                         still=self.live and self._matte.room_still, matte_held=self._matte.still,
                         blur_hold=self.config.matte.blur_hold, work=self._work, keep=keep,
                         y_half=self._matte.half_grey)
            return state
        image = state.image
        alpha = self._matte.alpha_rgb(image, steady=self.live, keep=keep, second=self.second_look)
        state.image = compose_rgb(image, alpha, spec, picture=picture, backdrop=self._backdrop,
                                  picture_key=spec.image_id, blur_factor=blur)
        return state

    def close(self) -> None:
        if self._matte is not None:
            self._matte.close()
            self._matte = None
