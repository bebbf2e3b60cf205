"""The fusion eval (bench/evals/fusion.py) on the two real portraits, both directions, a short motion clip:
the fused face carries the source's own fine skin detail (neither airbrushed nor sharpened), and the
measure itself tells two people's skins apart."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from bench.evals import fusion as ev


@pytest.fixture(scope="module")
def figures():
    parser = argparse.ArgumentParser()
    ev.add_arguments(parser)
    return ev.run(parser.parse_args(["--clip-frames", "2", "--still-frames", "3", "--distractors", "0"]))


def test_the_fused_cheeks_carry_the_sources_detail(figures):
    """Mean |Laplacian| on the cheeks, output over the source photo at the same face size: within the
    0.7-1.3 the product promises, on every scored frame."""
    d = figures["cheek_detail_over_source"]
    assert d["n"] >= 6
    assert 0.7 <= d["min"] and d["max"] <= 1.3, d


def test_the_detail_measure_tells_two_skins_apart(figures):
    """Before fusion the target's cheeks are far from the source's (Hopper's lined skin against the
    astronaut's smooth one, both ways): the measure is not flat."""
    d = figures["cheek_detail_input_over_source"]
    assert d["max"] > 1.6 and d["min"] < 0.6, d


def test_the_frame_outside_the_face_is_untouched(figures):
    assert figures["psnr_outside_db"]["min"] >= 50.0 or np.isinf(figures["psnr_outside_db"]["min"])


def test_a_still_face_does_not_flicker_more_after_fusion(figures):
    """A still frame with fresh sensor noise each frame, landmarks tracked: the fused face's frame-to-frame
    grey change is at most one level over the input's own."""
    f = figures["flicker"]
    assert f["frames"] >= 3 and f["frame_to_frame_input"] > 1.0
    assert f["frame_to_frame_excess"] <= 1.0, f
