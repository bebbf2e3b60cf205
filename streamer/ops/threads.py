"""How many threads the pixel libraries may use in this process. OpenCV and torch each default to one
thread per core; with a frame worker per stream (plus the codecs) on few cores their pools fight each
other, so the server sets them once at start-up from configuration (both settings are process-wide)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ThreadConfig:
    cv2: int | None = None     # cv2.setNumThreads; None leaves OpenCV's default
    torch: int | None = None   # torch.set_num_threads; None leaves torch's default (torch is only set if imported)


def apply_thread_config(config: ThreadConfig) -> dict[str, Any]:
    """Apply `config`; returns the thread counts now in force (for benchmark reports)."""
    import sys

    import cv2

    if config.cv2 is not None:
        cv2.setNumThreads(int(config.cv2))
    out: dict[str, Any] = {"cv2": cv2.getNumThreads()}
    if config.torch is not None or "torch" in sys.modules:
        import torch

        if config.torch is not None:
            torch.set_num_threads(int(config.torch))
        out["torch"] = torch.get_num_threads()
    return out
