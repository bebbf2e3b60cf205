"""bench/batching.py's Triton side serves the photo API's landmark call: the rows Triton answers for real
photos must be the rows the in-process call gives for the same photos (one face each, the same 478
landmarks), or the side-by-side figures compare different work. Needs a Python with nvidia-pytriton
(LIVEFUSE_TRITON_PYTHON; it pins numpy<2, so it lives in its own venv); skipped with a note where none is."""

from __future__ import annotations

import os

import numpy as np
import pytest

from bench.batching import face_rows, photo_landmark_call, photos, serve_through_triton, triton_python_ok

PYTHON = os.environ.get("LIVEFUSE_TRITON_PYTHON", "")


@pytest.mark.timeout(300)
def test_triton_served_landmarks_match_the_in_process_call():
    why = triton_python_ok(PYTHON) if PYTHON else "LIVEFUSE_TRITON_PYTHON is not set"
    if why:
        pytest.skip(f"no PyTriton to serve through: {why}")
    images = photos(256, n=3)
    fn, landmarker = photo_landmark_call()
    try:
        here = [face_rows(f) for f in fn(list(images))]
        served = serve_through_triton(fn, images, PYTHON, ["--check", "--max-batch", "8", "--window-ms", "4"],
                                      timeout_s=240)["rows"]
    finally:
        landmarker.close()
    assert [r["faces"] for r in served] == [n for _, n in here] == [1, 1, 1]
    for row, (landmarks, _) in zip(served, here):
        got = np.asarray(row["landmarks"], np.float32)
        assert got.shape == (478, 3)
        np.testing.assert_allclose(got, landmarks, atol=1e-3)
