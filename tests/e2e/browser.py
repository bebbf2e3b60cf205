"""What every browser test does the same way: Debian's Chromium, headless, a fresh profile, a fake webcam
fed from a .y4m made from a real photo (flags from DESIGN.md), the page opened, its console kept."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import numpy as np
from av import VideoFrame

CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream", "--allow-loopback-in-peer-connection",
]


def write_y4m(path: Path, image: np.ndarray, frames: int = 30) -> None:
    """A still photo as a .y4m clip, Chromium's fake-webcam input."""
    yuv = VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p").to_ndarray()
    with open(path, "wb") as f:
        f.write(f"YUV4MPEG2 W{image.shape[1]} H{image.shape[0]} F30:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(frames):
            f.write(b"FRAME\n" + yuv.tobytes())


@contextlib.asynccontextmanager
async def open_page(playwright: Any, chromium: str, profile: Path, url: str, *, camera: Path | None = None,
                    flags: Sequence[str] = CHROMIUM_FLAGS,
                    viewport: tuple[int, int] | None = None) -> AsyncIterator[tuple[Any, list[str]]]:
    """(page, console lines) for `url` in a new headless Chromium; `camera` feeds the fake webcam."""
    args = list(flags) + ([f"--use-file-for-fake-video-capture={camera}"] if camera is not None else [])
    extra = {"viewport": {"width": viewport[0], "height": viewport[1]}} if viewport else {}
    ctx = await playwright.chromium.launch_persistent_context(str(profile), executable_path=chromium,
                                                              headless=True, args=args, **extra)
    try:
        page = ctx.pages[0] if ctx.pages else await ctx.new_page()
        logs: list[str] = []
        page.on("console", lambda m: logs.append(m.text))
        await page.goto(url)
        yield page, logs
    finally:
        await ctx.close()
