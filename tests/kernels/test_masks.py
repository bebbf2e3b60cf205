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
