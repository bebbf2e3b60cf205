"""A virtual camera (v4l2loopback on Linux, OBS on Windows/macOS) fed with a session's processed stream,
so any video-call app can pick LiveFuse as its webcam. pyvirtualcam is optional and imported here only."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

log = logging.getLogger(__name__)


class VirtualCameraSink:
    """Sends RGB frames to a virtual camera; frames of another size are scaled to the camera's."""

    def __init__(self, width: int, height: int, fps: float = 30.0, *, device: str | None = None, backend: str | None = None) -> None:
        try:
            import pyvirtualcam
        except ImportError:
            raise RuntimeError("the virtual camera needs pyvirtualcam: pip install 'livefuse[vcam]'") from None
        self.width, self.height = width, height
        try:
            self.camera = pyvirtualcam.Camera(width, height, fps, fmt=pyvirtualcam.PixelFormat.RGB, device=device,
                                              backend=backend, print_fps=False)
        except RuntimeError as exc:  # e.g. no v4l2loopback device on this machine
            raise RuntimeError(f"no virtual camera available: {exc}") from None
        self.frames = 0

    @property
    def device(self) -> str:
        return self.camera.device

    def send(self, frame: Any) -> None:
        """An av.VideoFrame (scaled and converted here) or an H x W x 3 uint8 RGB array of the camera's size."""
        if hasattr(frame, "to_ndarray"):
            if (frame.width, frame.height) != (self.width, self.height):
                frame = frame.reformat(width=self.width, height=self.height)
            frame = frame.to_ndarray(format="rgb24")
        self.camera.send(frame)
        self.frames += 1

    async def follow(self, track: MediaStreamTrack) -> None:
        """Feed the camera from `track` until it ends; sending runs off the event loop."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                frame = await track.recv()
                await loop.run_in_executor(None, self.send, frame)
        except MediaStreamError:
            pass

    def close(self) -> None:
        self.camera.close()


class CameraFeed:
    """The server's one virtual camera: the oldest live session feeds it; when that session ends, the next
    session to start takes it over. The device opens on first use (a machine without one logs why once and
    streams on without it)."""

    def __init__(self, width: int, height: int, fps: float = 30.0, *, device: str | None = None,
                 backend: str | None = None) -> None:
        self.size, self.fps, self.device, self.backend = (width, height), fps, device, backend
        self.sink: VirtualCameraSink | None = None
        self.owner: str | None = None
        self.failed: str | None = None
        self._task: asyncio.Task | None = None

    async def offer(self, session_id: str, outbox: Any) -> bool:
        """Let `session_id` feed the camera from its processed-frame `outbox` if the camera is free."""
        if self.owner is not None or self.failed is not None:
            return False
        if self.sink is None:
            try:
                self.sink = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: VirtualCameraSink(*self.size, self.fps, device=self.device, backend=self.backend))
            except RuntimeError as exc:
                self.failed = str(exc)
                log.error("virtual camera off: %s", exc)
                return False
            log.info("virtual camera %s: %dx%d", self.sink.device, *self.size)
        from streamer.media.tracks import FusedTrack

        self.owner = session_id
        self._task = asyncio.ensure_future(self.sink.follow(FusedTrack(outbox, private=True)))
        return True

    def release(self, session_id: str) -> None:
        """The session ended; its track ends with its outbox, which ends `follow`."""
        if self.owner == session_id:
            self.owner = None

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.sink is not None:
            self.sink.close()
            self.sink = None
