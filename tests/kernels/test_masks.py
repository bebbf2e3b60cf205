"""Soft masks: the inner ramp stays inside its mask (so what it blends never leaks past the region) and
rises smoothly from `start` to `start + width` px inside the edge."""

import numpy as np

from kernels.numpy.masks import inner_ramp


def test_inner_ramp_stays_inside_and_rises_over_its_width():
    mask = np.zeros((100, 100), bool)
    mask[20:80, 20:80] = True
    r = inner_ramp(mask, start=3.0, width=10.0)
    assert r.dtype == np.float32
    assert not r[~mask].any()                       # nothing outside the mask
    row = r[50, 20:50]                              # from the edge inwards
    assert (row[:3] == 0).all() and row[20:].min() == 1.0
    assert (np.diff(row) >= 0).all() and 0 < row[8] < 1


def test_limb_mask_fills_outlines_strokes_segments_and_grows():
    from kernels.numpy.masks import limb_mask

    pts = np.array([[10, 10], [30, 10], [30, 30], [10, 30], [20, 30], [20, 70]], np.float32)
    m = limb_mask((80, 60), pts, [[0, 1, 2, 3]], [(4, 5)], width=6)
    assert m[20, 20] == 1.0 and m[50, 20] == 1.0        # inside the square; on the stroke
    assert m[50, 26] == 0.0 and m[5, 5] == 0.0          # beside the stroke; outside the square
    grown = limb_mask((80, 60), pts, [[0, 1, 2, 3]], [(4, 5)], width=6, grow=4, soft=1.5)
    assert grown[50, 26] > 0.5 and grown[5, 5] < 0.5 and 0.0 < grown[50, 29] < 1.0
    far = limb_mask((80, 60), pts + 1e9, [[0, 1, 2, 3]], [(4, 5)], width=6)   # points far off the mask
    assert not far.any()
