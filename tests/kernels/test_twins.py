"""One choice of twin: `twin_for` hands NumPy pixels kernels.numpy and tensors kernels.torch, packages of the
same module names whose functions agree (the per-kernel tests hold the results together; these hold the
seams a stage calls through)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels import numpy as kn, torch as kt
from kernels.twins import twin_for

TWIN_MODULES = ("background", "blend", "color", "edits", "warp", "watermark")


def test_the_twin_follows_the_pixels():
    assert twin_for(np.zeros((2, 2, 3), np.uint8)) is kn
    assert twin_for(torch.zeros((2, 2, 3), dtype=torch.uint8)) is kt
    assert kn.ON_HOST and not kt.ON_HOST


@pytest.mark.parametrize("name", TWIN_MODULES)
def test_each_numpy_kernel_a_stage_calls_has_its_torch_twin(name):
    """What a stage reaches through the twin exists on both sides: every public function of the torch module
    has a NumPy namesake (the NumPy side may hold more: helpers the torch side imports from it)."""
    n, t = getattr(kn, name), getattr(kt, name)
    public = {k for k, v in vars(t).items() if callable(v) and not k.startswith("_") and getattr(v, "__module__", "") == t.__name__}
    assert public, name
    missing = sorted(k for k in public if not hasattr(n, k))
    assert not missing, f"kernels.torch.{name} has no NumPy twin for {missing}"


def test_put_host_and_copy_round_trip():
    a = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    like = torch.zeros(1)
    t = kt.put(a, like)
    assert isinstance(t, torch.Tensor) and t.device == like.device
    assert np.array_equal(kt.host(t), a) and kn.put(a, None) is a and np.array_equal(kn.host(a), a)
    c = kt.copy(t)
    c[0, 0, 0] = 99
    assert t[0, 0, 0] == 0 and kn.copy(a) is not a
    assert kt.asarray(a, like).dtype == kt.uint8 and isinstance(kn.asarray(t), np.ndarray) and kn.asarray(t).dtype == kn.uint8
    masks = [a > 200, a > 20]
    assert kn.any_of(masks) is kt.any_of([torch.from_numpy(m) for m in masks]) is True
    assert kn.any_of([a > 250]) is kt.any_of([torch.from_numpy(a > 250)]) is False
    n_dst, t_dst = a.copy(), torch.from_numpy(a.copy())
    kn.blend.copy_where(n_dst, np.zeros_like(a), a > 10)
    kt.blend.copy_where(t_dst, torch.zeros_like(t), torch.from_numpy(a > 10))
    assert np.array_equal(n_dst, np.where(a > 10, 0, a)) and np.array_equal(t_dst.numpy(), n_dst)


class _Patch:
    def __init__(self, x0: int, y0: int, mask: np.ndarray) -> None:
        self.x0, self.y0, self.mask = x0, y0, mask


def test_keep_patches_gives_back_what_is_in_front_and_the_twins_agree():
    rng = np.random.default_rng(3)
    out = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    original = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    mask = np.zeros((12, 16), np.float32)
    mask[2:10, 3:13] = 1.0
    mask[0:2] = 0.5
    patches = [_Patch(30, 20, mask), None, _Patch(-4, -2, mask)]   # one runs off the right, one off the top-left
    n_out, t_out = out.copy(), torch.from_numpy(out.copy())
    kn.blend.keep_patches(n_out, original, patches)
    kt.blend.keep_patches(t_out, torch.from_numpy(original), patches)
    assert np.array_equal(n_out[22:30, 33:43], original[22:30, 33:43])      # fully kept: the original exactly
    assert np.array_equal(n_out[:, 20:28], out[:, 20:28])                   # outside every patch: untouched
    assert np.abs(t_out.numpy().astype(int) - n_out.astype(int)).max() <= 1


def test_write_where_writes_only_inside_and_the_twins_agree():
    rng = np.random.default_rng(4)
    dst = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    src = rng.uniform(0, 255, (20, 30, 3)).astype(np.float32)
    where = rng.uniform(size=(20, 30)) > 0.5
    n_dst, t_dst = dst.copy(), torch.from_numpy(dst.copy())
    kn.blend.write_where(n_dst, src, where)
    kt.blend.write_where(t_dst, torch.from_numpy(src), torch.from_numpy(where))
    assert np.array_equal(n_dst[~where], dst[~where])
    assert np.array_equal(n_dst[where], np.clip(src[where] + 0.5, 0, 255).astype(np.uint8))
    assert np.array_equal(t_dst.numpy(), n_dst)
