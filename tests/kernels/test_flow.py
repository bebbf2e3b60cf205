"""kernels/numpy/flow.py: the backward map (moving_map) is the identity without control points, moves by
the shift at an anchor and fades away from it; a zoom about a centre scales around it."""

from __future__ import annotations

import numpy as np

from kernels.numpy.flow import STILL_OFFSET, moving_map, warp

NONE2, NONE1 = np.zeros((0, 2), np.float32), np.zeros(0, np.float32)


def _map(shape, anchors=NONE2, shifts=NONE2, sigmas=NONE1, zooms=()):
    return moving_map(shape, 8, anchors=anchors, shifts=shifts, sigmas=sigmas,
                      zoom_centres=np.asarray([z[0] for z in zooms], np.float32).reshape(-1, 2),
                      zoom_axes=np.asarray([np.eye(2)] * len(zooms), np.float32).reshape(-1, 2, 2),
                      zoom_gains=np.asarray([z[1] for z in zooms], np.float64),
                      zoom_sigmas=np.asarray([z[2] for z in zooms], np.float64))[0]


def test_no_control_points_is_the_identity():
    m = _map((37, 53))
    gy, gx = np.mgrid[0:37, 0:53].astype(np.float32)
    assert m.shape == (37, 53, 2) and m.dtype == np.float32
    assert np.abs(m[..., 0] - gx).max() < 1e-4 and np.abs(m[..., 1] - gy).max() < 1e-4


def test_a_shift_moves_its_anchor_and_fades():
    m = _map((120, 160), np.array([[80, 60]], np.float32), np.array([[0, -6]], np.float32), np.array([10], np.float32))
    # samples 6 px below (content moves up), to within what the 8-px grid's interpolation keeps of the peak
    assert abs(m[60, 80, 1] - (60 + 6)) < 0.8 and abs(m[60, 80, 0] - 80) < 0.1
    assert abs(m[5, 5, 1] - 5) < 1e-3


def test_a_zoom_scales_about_its_centre():
    m = _map((100, 100), zooms=[((50.0, 50.0), 0.2, 15.0)])
    assert abs(m[50, 50, 0] - 50) < 0.2
    assert m[50, 56, 0] < 56   # samples nearer the centre: the content there grows



def test_outside_the_moving_box_a_remap_gives_every_pixel_back():
    """moving_map's box: inside it pixels move; outside it the map's offsets stay under STILL_OFFSET, and the
    warp of a worst-case image (columns alternating 0 and 255) gives each of those pixels back exactly."""
    shape = (240, 200)
    m, (y0, y1, x0, x1) = moving_map(shape, 8, anchors=np.array([[70, 150], [130, 150]], np.float32),
                                     shifts=np.array([[-2, -4], [2, -4]], np.float32), sigmas=np.array([12, 12], np.float32),
                                     zoom_centres=np.array([[100, 80]], np.float32), zoom_axes=np.eye(2, dtype=np.float32)[None],
                                     zoom_gains=np.array([0.2]), zoom_sigmas=np.array([10.0]))
    assert 0 < (y1 - y0) * (x1 - x0) < 0.8 * shape[0] * shape[1]
    gy, gx = np.mgrid[0:shape[0], 0:shape[1]].astype(np.float32)
    offset = np.maximum(np.abs(m[..., 0] - gx), np.abs(m[..., 1] - gy))
    outside = np.ones(shape, bool)
    outside[y0:y1, x0:x1] = False
    assert offset[outside].max() < STILL_OFFSET and offset[~outside].max() > 1.0
    img = np.zeros(shape + (3,), np.uint8)
    img[:, ::2] = 255
    img[::3] = 255 - img[::3]
    out = warp(img, m)
    assert np.array_equal(out[outside], img[outside]) and not np.array_equal(out[~outside], img[~outside])


def test_a_map_that_moves_nothing_has_an_empty_box():
    _, box = moving_map((50, 60), 8, anchors=NONE2, shifts=NONE2, sigmas=NONE1, zoom_centres=NONE2,
                        zoom_axes=np.zeros((0, 2, 2), np.float32), zoom_gains=np.zeros(0), zoom_sigmas=np.zeros(0))
    assert box == (0, 0, 0, 0)


def test_offsets_on_the_grid_move_the_pixels_they_reach_and_grow_the_box():
    """A field drawn on the map's grid by its caller (face_slim's squeeze): a constant move on a band of
    nodes moves the pixels between them by it, and the box takes in the band; elsewhere nothing moves."""
    shape, step = (64, 80), 8
    rows, cols = len(range(0, shape[0] + step, step)), len(range(0, shape[1] + step, step))   # nodes 0, 8, ..., the edge
    offsets = np.zeros((rows, cols, 2), np.float32)
    offsets[2:5, 3:6] = (1.5, -0.5)                            # nodes at y 16-32, x 24-40
    m, box = moving_map(shape, step, anchors=NONE2, shifts=NONE2, sigmas=NONE1, zoom_centres=NONE2,
                        zoom_axes=np.zeros((0, 2, 2), np.float32), zoom_gains=np.zeros(0), zoom_sigmas=np.zeros(0),
                        offsets=offsets)
    gy, gx = np.mgrid[0:64, 0:80].astype(np.float32)
    assert np.allclose(m[24, 32], (32 - 1.5, 24 + 0.5), atol=1e-4)   # between moved nodes: the whole move
    assert np.abs(m[:, 56:, 0] - gx[:, 56:]).max() < 1e-4 and np.abs(m[48:, :, 1] - gy[48:]).max() < 1e-4
    assert box[0] <= 16 and box[1] >= 32 and box[2] <= 24 and box[3] >= 40
