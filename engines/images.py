"""Turning untrusted image input (upload bytes, a path, an array) into the pipeline's H x W x 3 uint8 RGB.

Every bad input ends here as an `ImageError` with a message a user can act on, so nothing malformed
reaches a model. The server (source upload) and the CLI share this one door.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

DEFAULT_MAX_PIXELS = 40_000_000   # about 8K x 5K; larger images are refused before they are decoded
DEFAULT_MIN_SIDE = 16             # smaller than this cannot hold a face the landmarker can find
# OpenCV's remap and warps index with 16-bit shorts: a side at or above SHRT_MAX (32767) aborts the whole
# process inside C++, and later stages scale and warp what is accepted here. Every side is bounded well
# below that, and so is the aspect ratio (no photo of a face is a 32 x 32000 strip).
MAX_SIDE = 8192
MAX_ASPECT = 8.0


class ImageError(ValueError):
    """The input is not an image we can use; the message says why, `reason` says what kind of no it is
    ("bad_image" or "too_large") for callers that answer clients with a code."""

    def __init__(self, message: str, reason: str = "bad_image") -> None:
        super().__init__(message)
        self.reason = reason


def load_image(source: bytes | bytearray | memoryview | str | Path | np.ndarray,
               max_pixels: int = DEFAULT_MAX_PIXELS, min_side: int = DEFAULT_MIN_SIDE,
               formats: tuple[str, ...] | None = None) -> np.ndarray:
    """Decode `source` to contiguous H x W x 3 uint8 RGB.

    Grey is repeated to three channels, alpha is dropped, 16-bit and float images are scaled to 8 bits,
    EXIF orientation is applied. Empty, truncated, non-image, too small or too large input raises
    ImageError; the size limit is checked from the header, before any pixels are decoded. `formats`
    (PIL names such as "JPEG") limits what is accepted from bytes or files.
    """
    if isinstance(source, np.ndarray):
        return _check_size(to_rgb_uint8(source), max_pixels, min_side)
    from PIL import ImageOps

    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise ImageError(f"{path}: no such file")
        data = path.read_bytes()
        label = str(path)
    else:
        data = bytes(source)
        label = "image"
    img = _open_checked(data, max_pixels, formats, label)
    try:
        img.load()
        img = ImageOps.exif_transpose(img)
    except Exception as exc:
        raise ImageError(f"{label}: truncated or corrupt {img.format} data ({exc})") from None
    return _check_size(to_rgb_uint8(_pil_to_array(img)), max_pixels, min_side)


def image_size(data: bytes | bytearray | memoryview, max_pixels: int = DEFAULT_MAX_PIXELS,
               formats: tuple[str, ...] | None = None) -> tuple[int, int]:
    """(width, height) from the header alone, with every check `load_image` makes before decoding.

    Callers that budget memory size the decode with it (decoded RGB is width x height x 3 bytes).
    """
    with _open_checked(bytes(data), max_pixels, formats, "image") as img:
        return img.size


def _open_checked(data: bytes, max_pixels: int, formats: tuple[str, ...] | None, label: str):
    """A PIL image opened lazily (header read, no pixels), or ImageError for anything unusable."""
    from PIL import Image

    if not data:
        raise ImageError(f"{label}: empty input (0 bytes)")
    try:
        img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise ImageError(f"{label}: pixel count above the limit of {max_pixels} ({exc})", "too_large") from None
    except Exception:
        raise ImageError(f"{label}: not a recognised image format ({len(data)} bytes)") from None
    if formats is not None and img.format not in formats:
        raise ImageError(f"{label}: {img.format} images are not accepted (use {', '.join(formats)})")
    w, h = img.size
    if w * h > max_pixels:
        raise ImageError(f"{label}: {w}x{h} is {w * h} pixels, above the limit of {max_pixels}", "too_large")
    _check_shape(w, h, label)
    return img


def _pil_to_array(img) -> np.ndarray:
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N"):
        return np.asarray(img, dtype=np.uint16)
    if img.mode == "I":
        return np.asarray(img, dtype=np.int32)
    if img.mode == "F":
        return np.asarray(img, dtype=np.float32)
    if img.mode in ("L", "RGB", "RGBA"):
        return np.asarray(img)
    if img.mode == "LA":
        return np.asarray(img.convert("L"))
    return np.asarray(img.convert("RGBA" if "A" in img.mode or "transparency" in img.info else "RGB"))


def to_rgb_uint8(image: np.ndarray) -> np.ndarray:
    """Any 2-D or H x W x {1, 3, 4} array (uint8, uint16, int, float in [0, 1]) to H x W x 3 uint8."""
    a = np.asarray(image)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in (1, 3, 4):
        raise ImageError(f"expected an H x W, H x W x 3 or H x W x 4 image, got shape {a.shape}")
    if a.shape[2] == 4:
        a = a[:, :, :3]
    if a.dtype == np.uint8:
        pass
    elif a.dtype == np.bool_:
        a = a.astype(np.uint8) * 255
    elif np.issubdtype(a.dtype, np.floating):
        if not np.isfinite(a).all():
            raise ImageError("image holds NaN or infinite values")
        scale = 255.0 if a.max(initial=0.0) <= 1.0 else 1.0
        a = np.clip(np.rint(a * scale), 0, 255).astype(np.uint8)
    elif np.issubdtype(a.dtype, np.integer):
        top = int(a.max(initial=0))
        if a.min(initial=0) < 0:
            raise ImageError(f"image holds negative values ({a.dtype})")
        if top > 255:  # 16-bit (or wider) data: scale the full range down
            bits = 16 if top <= 65535 else int(np.ceil(np.log2(top + 1)))
            a = (a.astype(np.float64) * (255.0 / (2 ** bits - 1))).round().astype(np.uint8)
        else:
            a = a.astype(np.uint8)
    else:
        raise ImageError(f"unsupported pixel type {a.dtype}")
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    return np.ascontiguousarray(a)


def _check_shape(w: int, h: int, label: str = "image") -> None:
    """Bounds on each side and on the aspect ratio, checked from the header before any decoding."""
    if max(w, h) > MAX_SIDE:
        raise ImageError(f"{label}: {w}x{h} has a side above the limit of {MAX_SIDE} px", "too_large")
    if min(w, h) > 0 and max(w, h) / min(w, h) > MAX_ASPECT:
        raise ImageError(f"{label}: {w}x{h} is too narrow a strip (aspect ratio above {MAX_ASPECT:g}:1)")


def _check_size(a: np.ndarray, max_pixels: int, min_side: int) -> np.ndarray:
    h, w = a.shape[:2]
    if h * w > max_pixels:
        raise ImageError(f"{w}x{h} is {w * h} pixels, above the limit of {max_pixels}", "too_large")
    _check_shape(w, h)
    if min(h, w) < min_side:
        raise ImageError(f"{w}x{h} is too small: each side must be at least {min_side} px")
    return a
