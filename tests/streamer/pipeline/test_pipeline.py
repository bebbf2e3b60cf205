"""The pipeline runs stages in order, times them, and passes a frame through a stage that fails."""

import numpy as np
import pytest

from streamer.pipeline.pipeline import FrameState, Pipeline, as_rgb_uint8
from streamer.session.session import Session


class Invert:
    name = "invert"

    def __call__(self, state, session):
        state.image = 255 - state.image
        return state


class Explode:
    name = "explode"

    def __call__(self, state, session):
        raise RuntimeError("model fell over")


class Closeable:
    name = "closeable"

    def __init__(self):
        self.closed = False

    def __call__(self, state, session):
        return state

    def close(self):
        self.closed = True


def test_stages_run_in_order_and_are_timed(astronaut):
    pipe = Pipeline([Invert(), Invert()])
    state = pipe(FrameState(image=astronaut.copy(), pts=3000), Session().frame_context())
    assert np.array_equal(state.image, astronaut)
    assert set(state.timings) == {"invert"} and state.timings["invert"] >= 0
    assert state.pts == 3000


def test_failing_stage_passes_frame_on_and_reports():
    img = np.full((4, 6, 3), 7, np.uint8)
    pipe = Pipeline([Invert(), Explode(), Invert()])
    state = pipe(FrameState(image=img), Session().frame_context())
    assert state.errors == {"explode": "RuntimeError: model fell over"}   # the one failure, with its message
    assert "explode" in state.timings  # the failure is timed like any stage
    assert state.image.shape == (4, 6, 3)  # the frame still comes out of the pipeline


def test_close_reaches_every_stage():
    a, b = Closeable(), Closeable()
    Pipeline([a, b]).close()
    assert a.closed and b.closed


def test_pixel_contract():
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        as_rgb_uint8(np.zeros((4, 4), np.uint8))
    with pytest.raises(ValueError):
        as_rgb_uint8(np.zeros((4, 4, 3), np.float32))
    out = as_rgb_uint8(np.zeros((4, 8, 3), np.uint8)[:, ::2])
    assert out.flags.c_contiguous


def test_seconds_are_the_fractions_value_rounded_once():
    from fractions import Fraction

    rng = np.random.default_rng(1)
    image = np.zeros((2, 2, 3), np.uint8)
    for base in (Fraction(1, 90000), Fraction(1001, 30000), Fraction(1, 1000), Fraction(3, 7)):
        for pts in [0, 1, 3000, *rng.integers(0, 1 << 62, 200).tolist()]:
            assert FrameState(image=image, pts=pts, time_base=base).seconds == float(pts * base)
    assert FrameState(image=image, pts=3, time_base=0.5).seconds == 1.5   # other kinds of time base as before
