"""Identity embeddings on real photos: the same person stays near under transforms, two people are far."""

from __future__ import annotations

import numpy as np
import pytest

from engines.faces import Face, LandmarkerConfig, MediaPipeLandmarker
from engines.identity import (SAME_PERSON_DISTANCE, IdentityEmbedder, IdentityError, distance, nearest,
                              same_person)
from tests.faceclips import add_noise, place


@pytest.fixture(scope="module")
def embedder() -> IdentityEmbedder:
    return IdentityEmbedder()


@pytest.fixture(scope="module")
def landmarker():
    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1, mode="image"))
    yield lm
    lm.close()


def face_of(landmarker, image, _clock=[0]) -> Face:
    _clock[0] += 10_000  # far apart in time: every call starts from a fresh detection
    faces = landmarker.detect(image, _clock[0])
    assert len(faces) == 1
    return faces[0]


@pytest.fixture(scope="module")
def reference(embedder, landmarker, astronaut, grace_hopper):
    return {
        "astronaut": embedder.embed(astronaut, face_of(landmarker, astronaut)),
        "grace_hopper": embedder.embed(grace_hopper, face_of(landmarker, grace_hopper)),
    }


def test_two_people_are_far_apart(reference):
    d = distance(reference["astronaut"], reference["grace_hopper"])
    assert d > SAME_PERSON_DISTANCE  # measured 0.70
    assert reference["astronaut"].shape == (128,) and reference["astronaut"].dtype == np.float32


@pytest.mark.parametrize("kw", [dict(shift=(50, 20)), dict(angle=20), dict(mirror=True),
                                dict(scale=1.5, shift=(0, 100)), dict(scale=0.85)], ids=str)
def test_same_person_under_transforms_stays_near(embedder, landmarker, reference, astronaut, kw):
    frame, _ = place(astronaut, **kw)
    e = embedder.embed(frame, face_of(landmarker, frame))
    # measured 0.07 - 0.19 to the original, 0.69 - 0.71 to the other person
    assert distance(e, reference["astronaut"]) < 0.3
    assert distance(e, reference["grace_hopper"]) > SAME_PERSON_DISTANCE
    assert nearest(e, reference) == ("astronaut", pytest.approx(distance(e, reference["astronaut"])))


def test_noise_and_dim_light_keep_identity(embedder, landmarker, reference, astronaut, grace_hopper):
    rng = np.random.default_rng(3)
    noisy = add_noise(place(astronaut)[0], 10.0, rng)
    dim = (place(grace_hopper, angle=-10, scale=0.8)[0] * 0.6).astype(np.uint8)
    assert same_person(embedder.embed(noisy, face_of(landmarker, noisy)), reference["astronaut"])
    e = embedder.embed(dim, face_of(landmarker, dim))
    assert same_person(e, reference["grace_hopper"]) and not same_person(e, reference["astronaut"])


def test_bad_faces_are_refused_clearly(embedder, landmarker, astronaut):
    face = face_of(landmarker, astronaut)
    from dataclasses import replace

    with pytest.raises(IdentityError, match="below"):
        embedder.embed(astronaut, replace(face, bbox=(10.0, 10.0, 15.0, 15.0)))
    with pytest.raises(IdentityError, match="outside"):
        embedder.embed(astronaut, replace(face, bbox=(600.0, 600.0, 700.0, 700.0)))
    with pytest.raises(IdentityError, match="uint8"):
        embedder.embed(astronaut.astype(np.float32), face)
    assert nearest(np.zeros(128, np.float32), {}) == (None, float("inf"))


def test_chip_is_the_aligned_face(embedder, landmarker, astronaut):
    chip = embedder.chip(astronaut, face_of(landmarker, astronaut))
    assert chip.shape == (150, 150, 3)
    # the face fills the chip: the centre is skin, brighter than the dark uniform below it
    assert chip[60:90, 60:90].mean() > 120
