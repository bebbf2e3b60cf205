"""Backend choice with an ordered preference and logged fallbacks; the TensorRT path's CPU-side parts
(engine cache key, cache, ONNX export checked by ONNX's reference evaluator)."""

from __future__ import annotations

import logging
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch

from engines.backends import BACKENDS, BackendSettings, BackendUnavailable, backend_class, select_backend
from engines.backends.tensorrt import EngineCache, engine_spec, export_onnx
from engines.faces import LandmarkerConfig
from engines.landmarks.networks import DETECTOR_MEMBER, load_network, read_task_member

HAS_CUDA = torch.cuda.is_available()


def test_mediapipe_graph_finds_the_face(astronaut):
    backend = select_backend(BackendSettings(preference=("litert",)))
    assert backend.name == "litert"
    lm = backend.landmarker(LandmarkerConfig(mode="image"))
    try:
        faces = lm.detect(astronaut, 0)
    finally:
        lm.close()
    assert len(faces) == 1 and len(faces[0].blendshapes) == 52


def test_fallback_is_logged_with_its_reason(caplog, astronaut):
    settings = BackendSettings(preference=("tensorrt", "torch"), device="cpu")
    with caplog.at_level(logging.INFO, logger="engines.backends"):
        backend = select_backend(settings)
    if backend.name == "tensorrt":  # pragma: no cover - a machine with TensorRT and CUDA
        pytest.skip("TensorRT is usable here")
    assert backend.name == "torch"
    text = caplog.text
    assert "tensorrt" in text and ("not installed" in text or "CUDA" in text or "device" in text)
    assert "'torch' in use" in text
    lm = backend.landmarker(LandmarkerConfig(mode="image"))
    faces = lm.detect(astronaut, 0)
    assert len(faces) == 1 and faces[0].landmarks.shape == (478, 3)


def test_no_usable_backend_is_a_clear_error():
    settings = BackendSettings(preference=("tensorrt",), device="cpu")
    if backend_class("tensorrt").unavailable_reason(settings) is None:  # pragma: no cover
        pytest.skip("TensorRT is usable here")
    with pytest.raises(BackendUnavailable, match="no face backend can run here: tensorrt"):
        select_backend(settings)
    with pytest.raises(ValueError, match="unknown backend 'onnx'"):
        select_backend(BackendSettings(preference=("onnx", "litert")))
    with pytest.raises(ValueError, match="empty"):
        select_backend(BackendSettings(preference=()))


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_cuda_asked_for_without_a_gpu_falls_back():
    settings = BackendSettings(preference=("torch", "litert"), device="cuda")
    reason = backend_class("torch").unavailable_reason(settings)
    assert reason and "CUDA" in reason
    assert select_backend(settings).name == "litert"
    assert "fp16" in backend_class("torch").unavailable_reason(BackendSettings(device="cpu", precision="fp16"))


def test_every_listed_backend_imports_without_its_runtime():
    for name in BACKENDS:
        cls = backend_class(name)
        assert cls.name == name
        reason = cls.unavailable_reason(BackendSettings(device="cpu"))
        assert reason is None or isinstance(reason, str)


def _spec(**changes):
    base = dict(model_bytes=b"model-a", input_shape=(1, 256, 256, 3), max_batch=16, precision="fp16",
                tensorrt_version="10.9.0", gpu_name="NVIDIA H100", compute_capability="9.0")
    base.update(changes)
    return engine_spec(**base)


def test_engine_key_changes_with_every_declared_setting():
    key = _spec().key()
    assert key == _spec().key() and len(key) == 64
    changed = [_spec(model_bytes=b"model-b"), _spec(input_shape=(1, 128, 128, 3)), _spec(max_batch=8),
               _spec(precision="fp32"), _spec(tensorrt_version="10.10.0"), _spec(gpu_name="NVIDIA L4"),
               _spec(compute_capability="8.9"), replace(_spec(), port_version="2")]
    keys = {c.key() for c in changed}
    assert key not in keys and len(keys) == len(changed)
    s = _spec()
    assert s.min_shape == (1, 256, 256, 3) and s.max_shape == (16, 256, 256, 3)


def test_engine_cache_round_trip_and_atomic_write(tmp_path):
    cache = EngineCache(tmp_path / "engines")
    key = _spec().key()
    assert cache.get("face_detector", key) is None
    path = cache.put("face_detector", key, b"\x00engine-bytes")
    assert path.parent == tmp_path / "engines" and key[:24] in path.name
    assert cache.get("face_detector", key) == b"\x00engine-bytes"
    assert cache.get("face_detector", _spec(precision="fp32").key()) is None
    assert [p.name for p in (tmp_path / "engines").iterdir()] == [path.name]  # no temp files left
    path.write_bytes(b"")  # an empty (interrupted) file is treated as missing
    assert cache.get("face_detector", key) is None
    cache.discard("face_detector", key)
    assert not path.exists()


def test_exported_onnx_reproduces_the_torch_port_with_a_dynamic_batch():
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    graph = load_network(DETECTOR_MEMBER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = onnx.load_from_string(export_onnx(graph, (1, 128, 128, 3), graph.output_names))
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 128, 128, 3]
    x = np.random.default_rng(0).uniform(-1, 1, (2, 128, 128, 3)).astype(np.float32)
    out = ReferenceEvaluator(model).run(None, {"input": x})
    with torch.inference_mode():
        ref = graph(torch.from_numpy(x))
    for o, r in zip(out, ref):
        assert o.shape == tuple(r.shape)
        assert np.abs(o - r.numpy()).max() < 1e-3
    assert len(read_task_member(DETECTOR_MEMBER)) > 100_000
