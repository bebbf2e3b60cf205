"""One-Euro smoothing on real landmark streams: a still face with sensor noise stops shimmering, a moving
face does not trail behind."""

from __future__ import annotations

import numpy as np
import pytest

from engines.faces import LandmarkerConfig
from engines.smoothing import OneEuroLandmarks, OneEuroValues, SmoothingConfig
from streamer.pipeline.pipeline import FrameState
from streamer.pipeline.stages.faces import FaceStage, FaceStageConfig
from tests.faceclips import add_noise, place


def rms_jitter(track: np.ndarray) -> float:
    """RMS distance of each point from its own mean position over time, pixels."""
    return float(np.sqrt(((track - track.mean(axis=0)) ** 2).sum(axis=-1).mean()))


@pytest.fixture(scope="module")
def noisy_still(astronaut):
    """Raw and smoothed landmarks of the face stage over 40 frames of a still photo with noise (sigma 8),
    the landmark network run on every frame (no still-face keeping): its jitter is what smoothing meets."""
    frame, _ = place(astronaut, scale=1.6, shift=(0, 150))  # 640x480, face about 150 px wide
    rng = np.random.default_rng(7)
    stage = FaceStage(FaceStageConfig(landmarker=LandmarkerConfig(blendshapes=False)))
    raw, smooth = [], []
    try:
        for i in range(40):
            state = stage(FrameState(image=add_noise(frame, 8.0, rng), pts=i * 3000), None)
            face = state.faces[0]
            raw.append(state.raw_landmarks[face.track_id][:, :2])
            smooth.append(face.landmarks[:, :2])
    finally:
        stage.close()
    return np.array(raw[10:]), np.array(smooth[10:])


def test_still_face_jitter_drops_below_a_third_of_a_pixel(noisy_still):
    raw, smooth = noisy_still
    assert rms_jitter(smooth) <= 0.3
    assert rms_jitter(smooth) < 0.6 * rms_jitter(raw)


def test_moving_face_has_little_lag(noisy_still):
    raw, _ = noisy_still
    noise = raw - raw.mean(axis=0)
    base = raw.mean(axis=0)
    for speed in (150.0, 600.0):  # px per second at 30 fps
        f = OneEuroLandmarks(SmoothingConfig())
        lag = []
        for i in range(60):
            truth = base + np.array([speed * i / 30.0, 0.0], np.float32)
            out = f(truth + noise[i % len(noise)], i / 30.0)
            lag.append(np.linalg.norm(out - truth, axis=1).mean())
        assert np.mean(lag[15:]) < 1.0, speed


def test_lower_cutoff_is_steadier_but_lags_more(noisy_still):
    raw, _ = noisy_still
    steady = OneEuroLandmarks(SmoothingConfig(min_cutoff=0.2, beta=0.0))
    loose = OneEuroLandmarks(SmoothingConfig(min_cutoff=5.0, beta=0.0))
    s = np.array([steady(r, i / 30) for i, r in enumerate(raw)])
    l = np.array([loose(r, i / 30) for i, r in enumerate(raw)])
    assert rms_jitter(s[5:]) < rms_jitter(l[5:]) < rms_jitter(raw[5:])


def test_disabled_and_gaps_pass_landmarks_through(noisy_still):
    raw, _ = noisy_still
    off = OneEuroLandmarks(SmoothingConfig(enabled=False))
    assert np.array_equal(off(raw[0], 0.0), raw[0]) and np.array_equal(off(raw[1], 0.033), raw[1])
    f = OneEuroLandmarks(SmoothingConfig(max_gap_s=0.5))
    f(raw[0], 0.0)
    jumped = raw[1] + 40.0
    assert np.allclose(f(jumped, 2.0), jumped)  # after a 2 s gap the filter restarts at the new place


def test_value_filter_in_floats_is_numpys_arithmetic_to_the_bit():
    """OneEuroValues works a frame's 62 values in plain floats; the same formulas over NumPy arrays give
    the same numbers exactly (a blink-like jump, a drift, a gap that restarts the filter)."""
    rng = np.random.default_rng(11)
    mins, betas = rng.uniform(0.5, 2.0, 62), rng.uniform(0.05, 40.0, 62)
    f = OneEuroValues(mins.tolist(), betas.tolist())
    x = dx = None
    t_last = 0.0
    for i, t in enumerate([k / 30.0 for k in range(40)] + [3.0 + k / 30.0 for k in range(10)]):
        v = rng.uniform(0.0, 1.0, 62) + (0.8 if 10 <= i < 13 else 0.0) + i * 0.01
        dt = t - t_last
        if x is None or dt > 0.5:     # the reference: the classic filter over arrays
            x, dx = v.copy(), np.zeros(62)
        else:
            a_d = 1.0 / (1.0 + (1.0 / (2.0 * np.pi * 2.0)) / dt)
            dx = a_d * ((v - x) / dt) + (1.0 - a_d) * dx
            a = 1.0 / (1.0 + (1.0 / (2.0 * np.pi * (mins + betas * np.abs(dx)))) / dt)
            x = a * v + (1.0 - a) * x
        t_last = t
        assert f(v.tolist(), t) == x.tolist()
