"""What the product benchmarks share: a clip of a real face with known motion, and a Product with the
demo source registered through the same consent-checked hook the server calls."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROMPT = "a slight smile, more confident"


def grace_hopper() -> np.ndarray:
    from tests import photos

    return photos.load("hopper")


def moving_face(photo: np.ndarray, width: int, height: int, n: int, photo_px: float | None = None) -> np.ndarray:
    """Frame `n` of a clip: the photo scaled so its height fills about 90% of the frame (or `photo_px`
    pixels, so one face size can be timed in every frame size), centred, then
    moved by a known, smooth motion (a few pixels of sway and a degree or two of roll, period ~4 s at
    30 fps), as a person in front of a webcam moves."""
    import cv2

    ph, pw = photo.shape[:2]
    scale = (photo_px or 0.9 * height) / ph
    angle = 2.0 * math.sin(n / 19.0)
    dx, dy = 12.0 * math.sin(n / 23.0), 4.0 * math.sin(n / 17.0)
    m = cv2.getRotationMatrix2D((pw / 2, ph / 2), angle, scale)
    m[:, 2] += (width / 2 - pw / 2 + dx, height / 2 - ph / 2 + dy)
    return cv2.warpAffine(photo, m, (width, height), flags=cv2.INTER_LINEAR, borderValue=(90, 90, 90))


def build_product(audit_dir: str | None = None, face_backend: str | None = None) -> Any:
    """The real product (default ProductConfig) with its audit log in a scratch folder; `face_backend`
    ("interpreter,litert") replaces the face runtimes' order of preference, as `serve --face-backend` does."""
    from dataclasses import replace

    from streamer.app.assembly import Product, ProductConfig
    from streamer.web.kit import SafetyConfig

    audit_dir = audit_dir or tempfile.mkdtemp(prefix="livefuse-bench-")
    config = ProductConfig(safety=SafetyConfig(audit_path=str(Path(audit_dir) / "audit.jsonl")))
    if face_backend:
        order = tuple(b.strip() for b in face_backend.split(",") if b.strip())
        config = replace(config, faces=replace(config.faces, backend=replace(config.faces.backend, preference=order)))
    return Product(config)


def demo_source() -> np.ndarray:
    from PIL import Image

    return np.ascontiguousarray(np.asarray(Image.open(ROOT / "streamer" / "assets" / "demo_source.jpg").convert("RGB")))


def prepare_session(product: Any, session: Any, prompt: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """Register the demo source (consent given) and set the prompt, waiting until it is encoded so the
    timed frames all run the edits. Returns what the hooks answered."""
    import time

    reg = product.register_source(session, demo_source(), {"consent": "true"})
    out: dict[str, Any] = {"source": reg.get("source_id")}
    if prompt:
        out["prompt"] = product.set_prompt(session, prompt)
        cache = product.prompts
        deadline = time.monotonic() + timeout_s
        while cache is not None and cache.get(prompt) is None and time.monotonic() < deadline:
            if cache.error(prompt) is not None:
                raise RuntimeError(f"prompt failed to encode: {cache.error(prompt)}")
            time.sleep(0.02)
    return out
