"""The last stage: mark every output frame with the session's payload.

Building a pattern for a new (frame size, payload) costs tens of ms, so after the first frame it never
happens on the frame path: when the time bucket turns, the next pattern is built in a background thread
and the previous payload keeps marking (for a frame or two) until it is ready. Marking itself is two
saturating adds (on the Y plane of a yuv420p frame, on every channel of an RGB one). A new frame size
is built at once: no older pattern fits it.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from types import ModuleType
from typing import Any, Callable, NamedTuple

from kernels.numpy.watermark import make_key
from kernels.twins import twin_for
from streamer.pipeline.pipeline import FrameState
from streamer.session.session import FrameContext
from streamer.safety.watermark_policy import WatermarkPolicy

PayloadHook = Callable[[str, int], None]  # (session id, payload) whenever a session starts a new payload


class _Spec(NamedTuple):
    shape: tuple[int, int]
    payload: int
    device: str | None  # None: NumPy arrays in host memory; else the torch device of the frame's pixels
    luma: bool          # the pattern is for a yuv420p frame's Y plane (else for every RGB channel)


class WatermarkStage:
    name = "watermark"

    def __init__(self, policy: WatermarkPolicy, *, on_payload: PayloadHook | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.key = make_key(policy.config)
        self.on_payload = on_payload
        self.clock = clock
        self._spec: _Spec | None = None
        self._pattern: Any = None
        self._pending: tuple[_Spec, Future] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def __call__(self, state: FrameState, context: FrameContext) -> FrameState:
        if not self.policy.enabled:
            return state
        planes = state.planes
        image = state.image if planes is None else None
        pixels = planes.y if planes is not None else image
        twin = twin_for(pixels)
        device = None if twin.ON_HOST else str(pixels.device)
        spec = _Spec(state.shape, self.policy.payload(context.session_id, self.clock()), device, planes is not None)
        payload, pattern = self._pattern_for(spec, twin, context.session_id)
        if planes is not None:       # the mark is a luma change: it goes into the Y plane, in place
            y = planes.luma()
            twin.watermark.embed_luma(y, pattern, out=y)
        else:
            state.image = twin.watermark.embed(image, pattern)
        state.watermark = f"{payload:016x}"
        return state

    def _pattern_for(self, spec: _Spec, twin: ModuleType, session_id: str) -> tuple[int, Any]:
        if self._pending is not None and self._pending[1].done():
            done_spec, future = self._pending
            self._pending = None
            self._adopt(done_spec, future.result(), session_id)
        if self._spec == spec:
            return spec.payload, self._pattern
        same_geometry = self._spec is not None and self._spec._replace(payload=spec.payload) == spec
        if same_geometry:
            if self._pending is None or self._pending[0] != spec:
                self._pending = (spec, self._executor().submit(self._build, spec, twin))
            return self._spec.payload, self._pattern  # type: ignore[union-attr]
        self._adopt(spec, self._build(spec, twin), session_id)
        return spec.payload, self._pattern

    def _adopt(self, spec: _Spec, pattern: Any, session_id: str) -> None:
        changed = self._spec is None or self._spec.payload != spec.payload
        self._spec, self._pattern = spec, pattern
        if changed and self.on_payload is not None:
            self.on_payload(session_id, spec.payload)

    def _build(self, spec: _Spec, twin: ModuleType) -> Any:
        build = twin.watermark.luma_pattern_for if spec.luma else twin.watermark.pattern_for
        return build(self.key, spec.shape, spec.payload, device=spec.device)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="watermark-pattern")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
