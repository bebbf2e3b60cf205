"""`livefuse bench swapper` runs end to end on the tiny test models and says plainly what it skipped."""

from __future__ import annotations

import argparse

import pytest


def test_bench_swapper_on_the_test_models():
    pytest.importorskip("onnxruntime")
    from bench import swapper

    parser = argparse.ArgumentParser()
    swapper.add_arguments(parser)
    result = swapper.run(parser.parse_args(["--test-models", "--frames", "2", "--warmup", "1"]))
    assert set(result["files"]) == {"inswapper_128", "hyperswap_256", "simswap_512"}
    assert "not of a real network" in result["models"]
    for name, figures in result["files"].items():
        assert figures["card"] == name
        assert figures["cpu_stage_per_face"]["wall"]["median_ms"] > 0
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            assert figures["cuda"].startswith("skipped: ")
        else:
            assert set(figures["cuda"]) >= {"batch_1", "batch_8", "batch_32"}
    with pytest.raises(SystemExit, match="--swapper FILE.onnx"):
        swapper.run(parser.parse_args([]))
