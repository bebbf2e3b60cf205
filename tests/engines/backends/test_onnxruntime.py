"""ONNX Runtime for the user's own files: providers follow the device asked for and what the installed
build offers (TensorRT with its engine cache, CUDA, the CPU last), and a GPU asked of a CPU-only build
is refused with what to install."""

from __future__ import annotations

import pytest

from engines.backends.onnxruntime import OrtModel, OrtSettings, OrtUnavailable, providers_for

ALL = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def test_providers_follow_the_device_and_the_build(tmp_path):
    auto = providers_for(OrtSettings(trt_cache=str(tmp_path)), ALL)
    assert [p[0] if isinstance(p, tuple) else p for p in auto] == ALL
    assert auto[0][1]["trt_engine_cache_enable"] and auto[0][1]["trt_engine_cache_path"] == str(tmp_path)
    assert providers_for(OrtSettings(device="cuda:1"), ALL) == [("CUDAExecutionProvider", {"device_id": 1}),
                                                               "CPUExecutionProvider"]
    assert providers_for(OrtSettings(device="cpu"), ALL) == ["CPUExecutionProvider"]
    assert providers_for(OrtSettings(), ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]   # auto on a CPU build
    with pytest.raises(OrtUnavailable, match="install onnxruntime-gpu"):
        providers_for(OrtSettings(device="cuda"), ["CPUExecutionProvider"])


def test_a_symbolic_batch_runs_as_one_call(swap_files):
    assert OrtModel(swap_files["inswapper_128_batch"]).dynamic_batch
    assert not OrtModel(swap_files["inswapper_128"]).dynamic_batch
