"""Mesh regions and triangles line up with where the landmarker puts features on a real face."""

import numpy as np
import pytest

from engines import mesh
from engines.face_masks import region_mask
from engines.faces import MediaPipeLandmarker
from kernels.numpy.masks import polygon_mask


@pytest.fixture(scope="module")
def astronaut_face(astronaut):
    lm = MediaPipeLandmarker()
    try:
        faces = lm.detect(astronaut, 0)
    finally:
        lm.close()
    assert len(faces) == 1
    return faces[0]


def test_regions_are_closed_loops_of_known_size():
    loops = mesh.loops()
    assert len(loops["face_oval"]) == 36
    assert len(loops["lips_outer"]) == 20 and len(loops["lips_inner"]) == 20
    assert 61 in loops["lips_outer"] and 291 in loops["lips_outer"]  # the mouth corners
    assert not set(loops["lips_outer"]) & set(loops["lips_inner"])
    assert len(loops["left_eye"]) == 16 and len(loops["right_eye"]) == 16


def test_triangles_cover_the_face(astronaut_face):
    tris = mesh.triangles()
    assert tris.shape[1] == 3 and tris.max() < 468
    pts = astronaut_face.landmarks[:, :2]
    a, b, c = pts[tris[:, 0]], pts[tris[:, 1]], pts[tris[:, 2]]
    area = 0.5 * np.abs((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (c[:, 0] - a[:, 0]) * (b[:, 1] - a[:, 1]))
    oval = polygon_mask((512, 512), [pts[mesh.loops()["face_oval"]]]).sum()
    # the triangles tile the oval except the eye and mouth holes: within 15 % of its area
    assert 0.85 * oval < area.sum() < 1.05 * oval


def test_region_masks_sit_where_features_are(astronaut_face, astronaut):
    lms = astronaut_face.landmarks
    face = region_mask(astronaut.shape[:2], lms, ["face_oval"])
    lips = region_mask(astronaut.shape[:2], lms, ["lips_outer"], ["lips_inner"])
    skin = region_mask(astronaut.shape[:2], lms, ["face_oval"], ["lips_outer", "left_eye", "right_eye"], feather_px=2)
    assert face.max() == pytest.approx(1.0) and face.min() == 0.0
    assert lips.sum() < 0.2 * face.sum()
    # lips are inside the face, and the skin mask excludes them
    assert (lips * face).sum() == pytest.approx(lips.sum(), rel=0.02)
    ys, xs = np.nonzero(lips > 0.5)
    assert skin[ys, xs].mean() < 0.3
    # lips are redder than the skin around them in a real photo
    img = astronaut.astype(np.float32)
    redness = img[..., 0] - img[..., 1]
    assert (redness * lips).sum() / lips.sum() > (redness * skin).sum() / skin.sum()
