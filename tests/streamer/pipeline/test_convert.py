"""The pipeline's edges on a real photo: decoded yuv420p -> RGB -> yuv420p keeps the picture, agrees with
FFmpeg's own conversion, and keeps timing; odd sizes and other formats take PyAV's path; a frame becomes a
FrameState and back with its pixels, pts and time base."""

from __future__ import annotations

import fractions

import numpy as np
import torch
from av import VideoFrame

from streamer.pipeline.convert import frame_to_rgb, frame_to_state, rgb_to_frame, state_to_frame
from streamer.pipeline.pipeline import VIDEO_TIME_BASE


def _decoded(rgb: np.ndarray) -> VideoFrame:
    """A frame as a decoder hands it over: yuv420p, made by FFmpeg from the photo."""
    frame = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    frame.pts, frame.time_base = 3000, fractions.Fraction(1, 90000)
    return frame


def test_round_trip_keeps_the_picture_without_drift(astronaut):
    frame = _decoded(astronaut)
    y0 = frame.to_ndarray().astype(int)
    again = frame
    for _ in range(5):                                  # five trips through a pipeline that changes nothing
        again = rgb_to_frame(frame_to_rgb(again), again)
    d = again.to_ndarray().astype(int) - y0
    luma = d[:astronaut.shape[0]]
    assert abs(luma.mean()) < 0.05 and np.abs(luma).mean() < 0.1, (luma.mean(), np.abs(luma).mean())
    assert (again.pts, again.time_base) == (3000, fractions.Fraction(1, 90000))
    assert again.format.name == "yuv420p"


def test_agrees_with_ffmpegs_conversion(astronaut):
    frame = _decoded(astronaut)
    ours, theirs = frame_to_rgb(frame).astype(int), frame.to_ndarray(format="rgb24").astype(int)
    assert np.abs(ours - theirs).max() <= 3 and np.abs(ours - theirs).mean() < 1.5
    ours = rgb_to_frame(astronaut).to_ndarray().astype(int)
    theirs = VideoFrame.from_ndarray(astronaut, format="rgb24").reformat(format="yuv420p").to_ndarray().astype(int)
    assert np.abs(ours - theirs).mean() < 0.5              # chroma siting differs on sharp edges only


def test_odd_sizes_other_formats_and_tensors(astronaut):
    odd = np.ascontiguousarray(astronaut[:101, :77])
    frame = rgb_to_frame(odd)
    assert (frame.width, frame.height, frame.format.name) == (77, 101, "yuv420p")
    back = frame_to_rgb(frame)
    assert back.shape == odd.shape and np.abs(back.astype(int) - odd).mean() < 6
    rgb_frame = VideoFrame.from_ndarray(astronaut, format="rgb24")
    assert np.array_equal(frame_to_rgb(rgb_frame), astronaut)
    from_tensor = rgb_to_frame(torch.from_numpy(astronaut))
    assert np.array_equal(from_tensor.to_ndarray(), rgb_to_frame(astronaut).to_ndarray())


def test_a_frame_becomes_a_state_and_back_with_its_timing(astronaut):
    frame = _decoded(astronaut)
    state = frame_to_state(frame, planes=False)
    assert np.array_equal(state.image, frame_to_rgb(frame))
    assert (state.pts, state.time_base, state.seconds) == (3000, fractions.Fraction(1, 90000), 3000 / 90000)
    out = state_to_frame(state, frame)
    assert (out.pts, out.time_base, out.format.name) == (3000, fractions.Fraction(1, 90000), "yuv420p")
    assert np.array_equal(out.to_ndarray(), rgb_to_frame(state.image).to_ndarray())
    untimed = VideoFrame.from_ndarray(astronaut, format="rgb24")     # no pts, no time base
    state = frame_to_state(untimed)
    assert (state.pts, state.time_base) == (0, VIDEO_TIME_BASE)
    assert state_to_frame(state, untimed).time_base == VIDEO_TIME_BASE


def test_a_decoded_frame_travels_as_its_planes_and_comes_back_exactly(astronaut):
    frame = _decoded(astronaut)
    state = frame_to_state(frame)
    assert state.planes is not None and state.shape == (512, 512)
    assert np.array_equal(state.image, frame_to_rgb(frame))   # the whole RGB, on demand
    assert state_to_frame(state, frame) is frame               # nothing changed: no copy, no conversion
    state.planes.luma()[10, 10] ^= 1
    out = state_to_frame(state, frame)
    assert (out.pts, out.time_base, out.format.name) == (3000, fractions.Fraction(1, 90000), "yuv420p")
    changed = out.to_ndarray() != frame.to_ndarray()
    assert changed.sum() == 1 and changed[10, 10]
    odd = VideoFrame.from_ndarray(astronaut[:317, :239].copy(), format="rgb24").reformat(format="yuv420p")
    assert frame_to_state(odd).planes is None                  # odd sizes take the RGB path
