"""bench/gpu_kernels.py on the CPU with tiny inputs: every kernel timed on both sides, the JSON's shape."""

from __future__ import annotations

import argparse
import json

import pytest

from bench import gpu_kernels


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    gpu_kernels.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_run_on_cpu_gives_figures_for_each_kernel_and_size():
    pytest.importorskip("torch")
    out = gpu_kernels.run(_args("--device", "cpu", "--repeats", "3", "--warmup", "1", "--sizes", "64x48,40x30"))
    json.dumps(out)   # plain JSON
    assert out["device"] == "cpu" and "not GPU figures" in out["note"]
    assert set(out["kernels"]) == {"64x48", "40x30"}
    for size, per in out["kernels"].items():
        assert "frame" in per
        for name in ("warp", "blend", "color", "watermark"):
            row = per[name]
            for side in ("numpy", "torch_cpu"):
                assert row[side]["n"] == 3 and 0 <= row[side]["median_ms"] <= row[side]["p95_ms"]
            assert row["speedup"] >= 0
        assert "edits" in per   # timed, or skipped with a reason where no face is found at this size
        assert "skipped" in per["edits"] or "torch_cpu" in per["edits"]


def test_kernel_subset_and_module_shape():
    out = gpu_kernels.run(_args("--device", "cpu", "--repeats", "2", "--warmup", "0", "--sizes", "32x24",
                                "--kernels", "warp,watermark"))
    assert set(out["kernels"]["32x24"]) == {"frame", "warp", "watermark"}
    assert gpu_kernels.__doc__.strip()
