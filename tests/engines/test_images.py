"""The image gate: every dimension is bounded before a decoder or OpenCV sees it."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engines.images import MAX_SIDE, ImageError, load_image

ROOT = Path(__file__).resolve().parents[2]


def png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (120, 90, 80)).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


@pytest.mark.parametrize("w,h", [(32, 32767), (32767, 32)])
def test_a_strip_of_a_few_kilobytes_is_refused_from_its_header(w, h):
    data = png(w, h)
    assert len(data) < 20_000                      # small on the wire, huge on one side
    with pytest.raises(ImageError, match="side above the limit"):
        load_image(data)


def test_side_and_aspect_bounds_hold_for_arrays_too():
    with pytest.raises(ImageError, match="side above the limit"):
        load_image(np.zeros((16, MAX_SIDE + 1, 3), np.uint8), min_side=8)
    with pytest.raises(ImageError, match="narrow a strip"):
        load_image(np.zeros((40, 400, 3), np.uint8))
    assert load_image(np.zeros((400, 300, 3), np.uint8)).shape == (400, 300, 3)


def test_registering_such_a_strip_as_a_source_is_refused_and_the_process_lives():
    """A 32 x 32767 PNG once reached OpenCV's remap and aborted the server; run it in a child so an
    abort fails this test instead of ending the test run."""
    script = textwrap.dedent("""
        import io, sys
        from PIL import Image
        from engines.sources import SourceRefused, SourceRegistry
        buf = io.BytesIO(); Image.new("RGB", (32, 32767), (120, 90, 80)).save(buf, format="PNG")
        try:
            SourceRegistry().register(buf.getvalue())
        except SourceRefused as exc:
            print("refused", exc.reason)
            sys.exit(0)
        sys.exit(3)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "refused too_large" in out.stdout, out.stderr[-2000:]
