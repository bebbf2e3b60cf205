"""Shared pieces for the streaming tests: real stages that visibly change pixels (never fake face output)."""

from __future__ import annotations

import asyncio
import fractions
import time

import numpy as np
from av import VideoFrame

from bench._probe import CODE_ROWS_PX, paint_index


class InvertBelowCode:
    """Inverts everything below the painted frame index, so a test can tell processed pixels apart."""

    name = "invert"

    def __call__(self, state, session):
        img = state.image.copy()
        img[2 * CODE_ROWS_PX:] = 255 - img[2 * CODE_ROWS_PX:]
        state.image = img
        return state


class Sleep:
    """An artificial slow stage (the bench's 50 ms filter)."""

    def __init__(self, ms: float, name: str = "sleep") -> None:
        self.ms = ms
        self.name = name

    def __call__(self, state, session):
        time.sleep(self.ms / 1000.0)
        return state


class Boom:
    """A stage that always fails: the frame must pass through and the client must hear about it."""

    name = "boom"

    def __call__(self, state, session):
        raise RuntimeError("boom stage failed on purpose")


def indexed_frame(index: int, w: int = 318, h: int = 238) -> VideoFrame:
    """A decoded frame as a decoder hands it over (yuv420p, odd size by default) with `index` painted in
    and pts 3000 ticks of 90 kHz per index."""
    img = paint_index(np.full((h, w, 3), 90, np.uint8), index)
    f = VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
    f.pts, f.time_base = index * 3000, fractions.Fraction(1, 90000)
    return f


def mean_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


class ToneTrack:
    """A microphone stand-in: a steady sine tone in 20 ms frames of 48 kHz mono s16, paced in real time by
    aiortc's AudioStreamTrack (which this wraps), so a listener can check what arrives by its pitch."""

    def __new__(cls, hz: float = 440.0, amplitude: float = 8000.0):
        from aiortc.mediastreams import AudioStreamTrack

        class _Tone(AudioStreamTrack):
            async def recv(self):
                frame = await super().recv()            # silence with the right pts, paced
                n = frame.samples
                t = (frame.pts + np.arange(n)) / frame.sample_rate
                frame.planes[0].update((amplitude * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes())
                return frame

        return _Tone()


def dominant_hz(samples: np.ndarray, rate: int) -> float:
    """The strongest frequency in a mono signal."""
    x = samples.astype(np.float64) - samples.mean()
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1.0 / rate)[int(np.argmax(spectrum))])


def keep_decoded(received: list):
    """A register_source hook that records the decoded photo it is handed and registers it as the
    session's source (no consent or policy: those are the product's, tested in test_assembly)."""
    from engines.sources import SourceRegistry

    registry = SourceRegistry()

    def register(session, image, form):
        received.append(image)
        session.add_source(form.get("source_id") or f"s{len(received)}", registry.register(image))
        h, w = image.shape[:2]
        return {"source_id": session.controls.source_id, "width": w, "height": h}

    return register


async def until(predicate, timeout: float, what: str) -> None:
    """Wait for `predicate()` to hold, failing with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
