"""Shared test data: real photos that load offline, and clips made from them with known motion."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.photos import _rgb  # noqa: F401  (bench/watermark.py imports it from here too)


@pytest.fixture(scope="session")
def astronaut() -> np.ndarray:
    """Eileen Collins, NASA portrait (public domain), 512x512 RGB, shipped in scikit-image."""
    from tests import photos

    return photos.load("astronaut")


@pytest.fixture(scope="session")
def grace_hopper() -> np.ndarray:
    """Grace Hopper portrait, 512x600 RGB, shipped in matplotlib's sample data."""
    from tests import photos

    return photos.load("hopper")


@pytest.fixture(scope="session")
def obama() -> np.ndarray:
    """Barack Obama, official portrait (public domain), cropped about the face (tests/photos.py)."""
    from tests import photos

    return photos.load("obama")


@pytest.fixture(scope="session")
def biden() -> np.ndarray:
    """Joe Biden, official portrait (public domain), head turned and lit from one side (tests/photos.py)."""
    from tests import photos

    return photos.load("biden")


@pytest.fixture(scope="session")
def face_free_images() -> dict[str, np.ndarray]:
    """Real photos with no face in them."""
    import skimage.data

    return {"coffee": _rgb(skimage.data.coffee()), "chelsea": _rgb(skimage.data.chelsea()), "rocket": _rgb(skimage.data.rocket())}


def browser_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path to headless Chromium; a skip without one, a failure when LIVEFUSE_REQUIRE_BROWSER=1."""
    path = browser_path()
    if path is None:
        if os.environ.get("LIVEFUSE_REQUIRE_BROWSER") == "1":
            pytest.fail("LIVEFUSE_REQUIRE_BROWSER=1 but no Chromium was found (apt-get install chromium)")
        pytest.skip("no Chromium installed")
    return path


@pytest.fixture(scope="session")
def gstreamer() -> None:
    """GStreamer's webrtcbin through Debian's python3-gi (bench/_clients.py); a skip without it, a failure
    when LIVEFUSE_REQUIRE_BROWSER=1 (CI: `make debian-tools` installs it with the browser)."""
    from bench._clients import gstreamer_missing

    missing = gstreamer_missing()
    if missing is not None:
        if os.environ.get("LIVEFUSE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"LIVEFUSE_REQUIRE_BROWSER=1 but the GStreamer client cannot run: {missing} (make debian-tools)")
        pytest.skip(f"GStreamer client unavailable: {missing} (make debian-tools installs it)")


@pytest.fixture(scope="session")
def swap_files(tmp_path_factory) -> dict[str, "os.PathLike"]:
    """Tiny ONNX models with each swapper family's signature and an ArcFace-signature embedder
    (bench/_swap_models.py: the swapper tints the face by its source vector), built once per run."""
    pytest.importorskip("onnxruntime")
    from bench import _swap_models as sm

    d = tmp_path_factory.mktemp("swap_models")
    return {
        "inswapper_128": sm.swapper(d / "inswapper_128.onnx", "inswapper_128"),
        "inswapper_128_batch": sm.swapper(d / "inswapper_128_dyn.onnx", "inswapper_128", batch="N"),
        "hyperswap_256": sm.swapper(d / "hyperswap_1a_256.onnx", "hyperswap_256"),
        "simswap_256": sm.swapper(d / "simswap_256.onnx", "simswap_256"),
        "ghost_256": sm.swapper(d / "ghost_1_256.onnx", "ghost_256"),
        "simswap_512": sm.swapper(d / "simswap_unofficial_512.onnx", "simswap_512"),
        "embedder": sm.embedder(d / "w600k_r50.onnx", batch="N"),
        "raising": sm.raising_swapper(d / "inswapper_128_raising.onnx"),
    }
