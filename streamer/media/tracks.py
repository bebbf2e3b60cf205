"""The two ends of a stream on the event loop: `pump` drains a received track into the worker, and
FusedTrack hands the newest processed frame to whoever pulls (the aiortc encoder, a viewer, a sink)."""

from __future__ import annotations

import asyncio
import logging
from fractions import Fraction
from typing import Callable

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import VideoFrame
from av.frame import Frame

from streamer.media.broadcast import Broadcast, copy_frame

log = logging.getLogger(__name__)


class FusedTrack(MediaStreamTrack):
    """The processed stream as an aiortc track. `recv` waits for the newest processed frame; a frame is
    never sent twice, and each keeps the pts/time_base of the frame it was made from. `private=True` hands
    out copies (for extra consumers: WHEP viewers), so only the first consumer gets the frames themselves."""

    kind = "video"

    def __init__(self, source: Broadcast, *, private: bool = False) -> None:
        super().__init__()
        self._source = source
        self._private = private
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._seen = source.seq
        self._last_at: Fraction | None = None        # seconds: frames of one stream never go back in time
        source.subscribe(self._wake)

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:
            pass  # loop closed: nobody is pulling any more

    async def recv(self) -> VideoFrame:
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            seq, item = self._source.latest()
            if seq != self._seen and item is not None:
                self._seen = seq
                at = item.seconds   # as published: the first consumer's encoder rewrites frame.pts as it encodes
                if self._last_at is not None and at is not None and at <= self._last_at:
                    continue  # an out-of-order frame would make the encoder's timestamps run backwards
                self._last_at = at
                frame = copy_frame(item.frame) if self._private else item.frame
                if item.pts is not None:
                    frame.pts = item.pts
                if item.time_base is not None:
                    frame.time_base = item.time_base
                return frame
            if self._source.closed:
                self.stop()
                raise MediaStreamError
            await self._ready.wait()

    def stop(self) -> None:
        self._source.unsubscribe(self._wake)
        super().stop()


async def pump(track: MediaStreamTrack, sink: Callable[[Frame], None]) -> None:
    """Drain a received track as fast as frames arrive, handing each to `sink` (which keeps the newest)."""
    try:
        while True:
            sink(await track.recv())
    except MediaStreamError:
        pass
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("reading track %s", track.kind)
