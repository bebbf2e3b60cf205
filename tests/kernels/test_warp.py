"""Piecewise-affine warp: meshes land where asked, images follow, and the torch twin agrees."""

import numpy as np
import pytest
import torch

from kernels.numpy import warp as nw
from kernels.torch import warp as tw


def grid_mesh(w: int, h: int, n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = np.meshgrid(np.linspace(0, w - 1, n), np.linspace(0, h - 1, n))
    pts = np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.float32)
    tris = []
    for r in range(n - 1):
        for c in range(n - 1):
            i = r * n + c
            tris += [(i, i + 1, i + n), (i + 1, i + n + 1, i + n)]
    return pts, np.array(tris, np.int32)


def test_tables_map_destination_vertices_onto_source_vertices():
    rng = np.random.default_rng(0)
    dst = rng.random((30, 2)).astype(np.float32) * 300
    src = rng.random((30, 2)).astype(np.float32) * 300
    tris = rng.choice(30, size=(20, 3), replace=True)
    tris = tris[[len(set(t)) == 3 for t in tris]]
    tabs = nw.affine_tables(src, dst, tris)
    for tab, t in zip(tabs, tris):
        mapped = tab @ np.c_[dst[t], np.ones(3)].T
        np.testing.assert_allclose(mapped.T, src[t], atol=1e-2)
    # a list of sources gives a list of tables, each equal to the single answer
    many = nw.affine_tables([src, dst], dst, tris)
    np.testing.assert_allclose(many[0], tabs, atol=1e-4)


def test_identity_mesh_leaves_photo_unchanged(astronaut):
    h, w = astronaut.shape[:2]
    pts, tris = grid_mesh(w, h)
    out, covered = nw.piecewise_affine(astronaut, pts, pts, tris, (h, w))
    assert covered[2:-2, 2:-2].all()
    np.testing.assert_array_equal(out[covered], astronaut[covered])


def test_translated_mesh_moves_the_photo(astronaut):
    h, w = astronaut.shape[:2]
    pts, tris = grid_mesh(w, h)
    moved = pts + np.float32([7, 4])
    out, covered = nw.piecewise_affine(astronaut, pts, moved, tris, (h, w))
    # destination pixel (x, y) shows source pixel (x - 7, y - 4)
    np.testing.assert_array_equal(out[100:400, 100:400], astronaut[96:396, 93:393])
    assert not covered[:4].any() and not covered[:, :7].any()


def test_later_triangles_win_and_uncovered_is_minus_one():
    pts = np.array([[2, 2], [30, 2], [2, 30], [30, 30]], np.float32)
    tris = np.array([[0, 1, 2], [0, 1, 3]], np.int32)
    ids = nw.rasterize_triangles((40, 40), pts, tris)
    assert ids[5, 20] == 1           # inside both: the second one drawn wins
    assert ids[20, 5] == 0           # only in the first
    assert ids[38, 38] == -1


def test_identity_fallback_maps_uncovered_pixels_to_themselves():
    ids = np.full((5, 7), -1, np.int32)
    (mx, my), (nx, ny) = nw.triangle_maps(ids, [np.zeros((1, 2, 3), np.float32)] * 2, origin=(10, 20), identity=[True, False])
    assert mx[3, 4] == 14 and my[3, 4] == 23
    assert nx[3, 4] == -1 and ny[3, 4] == -1


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_torch_twin_agrees_on_odd_size(astronaut, dtype):
    img = np.ascontiguousarray(astronaut[:238, :318]).astype(dtype)
    h, w = img.shape[:2]
    pts, tris = grid_mesh(w, h, 5)
    rng = np.random.default_rng(3)
    dst = pts + rng.normal(0, 4, pts.shape).astype(np.float32)
    ids = nw.rasterize_triangles((h, w), dst, tris)
    tab = nw.affine_tables(pts, dst, tris)
    mx, my = nw.triangle_maps(ids, tab, origin=(0, 0), identity=True)
    tx, ty = tw.triangle_maps(torch.from_numpy(ids), torch.from_numpy(tab), origin=(0, 0), identity=True)
    np.testing.assert_allclose(tx.numpy(), mx, atol=1e-3)
    np.testing.assert_allclose(ty.numpy(), my, atol=1e-3)
    a = nw.remap(img, mx, my).astype(np.float32)
    b = tw.remap(torch.from_numpy(img), tx, ty).numpy().astype(np.float32)
    diff = np.abs(a - b)
    assert diff.mean() < 0.3 and diff.max() <= 4   # OpenCV samples at 1/32 pixel, grid_sample exactly


def test_resize_twin_agrees_on_odd_size(astronaut):
    m = astronaut[:119, :159, 0].astype(np.float32)
    a = nw.resize_to(m, (238, 318))
    b = tw.resize_to(torch.from_numpy(m), (238, 318)).numpy()
    np.testing.assert_allclose(b, a, atol=1e-3)


@pytest.mark.parametrize("shape", [(100, 131), (59, 80), (119, 159)])
def test_area_resize_averages_footprints_and_the_torch_twin_agrees(astronaut, shape):
    img = np.ascontiguousarray(astronaut[:238, :318]).astype(np.float32)
    a = nw.area_resize(img, shape)
    assert a.shape == shape + (3,)
    np.testing.assert_allclose(a.mean(axis=(0, 1)), img.mean(axis=(0, 1)), rtol=2e-3)   # area-preserving
    if shape == (119, 159):                        # an exact factor of 2 is the 2x2 block mean
        np.testing.assert_allclose(a, img.reshape(119, 2, 159, 2, 3).mean(axis=(1, 3)), atol=1e-3)
    b = tw.area_resize(torch.from_numpy(img), shape).numpy()
    np.testing.assert_allclose(b, a, atol=2e-3)
    m = img[..., 1]
    np.testing.assert_allclose(tw.area_resize(torch.from_numpy(m), shape).numpy(), nw.area_resize(m, shape), atol=2e-3)
