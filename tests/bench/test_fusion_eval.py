"""The fusion eval (bench/evals/fusion.py) on four of its pairs of real portraits, a short motion clip:
the astronaut and Grace Hopper both ways, Joe Biden into Barack Obama (light skin onto dark) and Obama into
Biden (a large source photo into a face of about 160 px). The fused
face carries the source's own fine skin detail (neither airbrushed nor sharpened), the measure itself tells
two people's skins apart, the frame outside the face is untouched, and the identity figures sit where the
committed run (docs/fusion_eval.json) puts them, each asserted with a margin."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from bench.evals import fusion as ev

PAIRS = "astronaut:hopper,hopper:astronaut,biden:obama,obama:biden"


@pytest.fixture(scope="module")
def figures():
    parser = argparse.ArgumentParser()
    ev.add_arguments(parser)
    return ev.run(parser.parse_args(["--pairs", PAIRS, "--clip-frames", "2", "--still-frames", "3",
                                     "--distractors", "0"]))


def test_the_fused_cheeks_carry_the_sources_detail(figures):
    """Mean |Laplacian| on the cheeks, output over the source photo at the same face size: within the
    0.7-1.3 the product promises, on every scored frame of these four pairs. Obama into Biden measured
    0.59-0.69 before the lightness kept the source's spread and the texture was warped bicubically
    (docs/fusion.md, Skin detail); the full run's one frame over is Hopper into the astronaut at 1.32."""
    d = figures["cheek_detail_over_source"]
    assert d["n"] >= 12
    assert 0.7 <= d["min"] and d["max"] <= 1.3, d


def test_the_detail_measure_tells_two_skins_apart(figures):
    """Before fusion the target's cheeks are far from the source's (Hopper's lined skin against the
    astronaut's smooth one, both ways): the measure is not flat."""
    d = figures["cheek_detail_input_over_source"]
    assert d["max"] > 1.6 and d["min"] < 0.6, d


def test_the_frame_outside_the_face_is_untouched(figures):
    assert figures["psnr_outside_db"]["min"] >= 50.0 or np.isinf(figures["psnr_outside_db"]["min"])
    for pair, p in figures["identity"]["per_pair"].items():
        assert p["psnr_outside_db_min"] >= 50.0, pair


def test_a_still_face_does_not_flicker_more_after_fusion(figures):
    """A still frame with fresh sensor noise each frame, landmarks tracked: the fused face's frame-to-frame
    grey change is at most one level over the input's own."""
    f = figures["flicker"]
    assert f["frames"] >= 3 and f["frame_to_frame_input"] > 1.0
    assert f["frame_to_frame_excess"] <= 1.0, f


def test_the_same_person_yardstick(figures):
    """dlib between three photos of Barack Obama (measured 0.34, 0.40, 0.44): under its 0.6 same-person
    threshold, while two different people's faces here are over it (measured 0.69 or more apart)."""
    same = figures["identity"]["same_person"]
    assert len(same) == 3
    assert all(0.0 < d < 0.55 for d in same.values()), same
    assert figures["identity"]["input_dist_to_source"]["min"] > 0.6


def test_the_fused_face_leaves_the_target_and_is_retrieved_as_the_source(figures):
    """Biden into Obama (measured: distance to the input face 0.70 at the least, top-1 1.0) and the
    astronaut into Hopper (top-1 1.0): issue 35's >= 0.55 from the target, with a margin where asserted.
    Not asserted: the astronaut into Hopper's distance to the target (min 0.56 in the full run, no margin
    over 0.55) and Hopper into the astronaut (min 0.44, top-1 0.38: Hopper's glasses stay behind)."""
    pp = figures["identity"]["per_pair"]
    assert pp["biden->obama"]["dist_to_target"]["min"] >= 0.6, pp["biden->obama"]
    assert pp["biden->obama"]["top1"] == 1.0
    assert pp["astronaut->hopper"]["top1"] == 1.0


@pytest.mark.xfail(strict=True, reason="issue 35's <= 0.35 from the source is missed on every pair: the full "
                   "run measures medians 0.42 (astronaut->Hopper) to 0.56 (Obama->Biden)")
def test_the_fused_face_is_as_near_the_source_as_the_same_person(figures):
    for pair, p in figures["identity"]["per_pair"].items():
        assert p["dist_to_source"]["max"] <= 0.35, pair
