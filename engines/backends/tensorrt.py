"""TensorRT (optional, CUDA only): the torch port exported to ONNX, built into engines, cached on disk.

Building an engine takes seconds to minutes, so built engines are kept in a folder, keyed by a hash of
everything that makes an engine valid: the model bytes, the input shapes (min / opt / max batch), the
precision, the TensorRT version, the GPU name and compute capability, and this port's version. A change
in any of them gives a new key, never a stale engine. Nothing here imports tensorrt until an engine is
built or loaded; without it (or without CUDA) the backend reports why and the selector falls back.

Untested on this project's CI (no GPU): the cache key, the cache and the ONNX shapes are tested on the
CPU; building and running engines are not.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engines.backends.base import Backend, BackendSettings, Detector, Network

log = logging.getLogger(__name__)

PORT_VERSION = "1"   # bump when the torch port's graph changes in a way that alters exported ONNX


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """The declared list of settings an engine depends on: its cache key is a hash of exactly these."""

    model_sha256: str
    input_name: str
    min_shape: tuple[int, ...]
    opt_shape: tuple[int, ...]
    max_shape: tuple[int, ...]
    precision: str
    tensorrt_version: str
    gpu_name: str
    compute_capability: str
    port_version: str = PORT_VERSION

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def engine_spec(model_bytes: bytes, input_shape: tuple[int, ...], max_batch: int, precision: str,
                tensorrt_version: str, gpu_name: str, compute_capability: str, input_name: str = "input") -> EngineSpec:
    """Spec for a network whose input is `input_shape` with a free batch of 1..max_batch."""
    tail = tuple(int(s) for s in input_shape[1:])
    opt = max(1, min(max_batch, 4))
    return EngineSpec(hashlib.sha256(model_bytes).hexdigest(), input_name, (1,) + tail, (opt,) + tail,
                      (int(max_batch),) + tail, precision, tensorrt_version, gpu_name, compute_capability)


class EngineCache:
    """Serialized engines on disk, one file per key; writes are atomic (temp file + rename)."""

    def __init__(self, folder: str | os.PathLike = "") -> None:
        self.folder = Path(folder) if folder else Path.home() / ".cache" / "livefuse" / "tensorrt"

    def path(self, name: str, key: str) -> Path:
        return self.folder / f"{name}-{key[:24]}.engine"

    def get(self, name: str, key: str) -> bytes | None:
        p = self.path(name, key)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            return None
        return data or None

    def put(self, name: str, key: str, data: bytes) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        p = self.path(name, key)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=p.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return p

    def discard(self, name: str, key: str) -> None:
        self.path(name, key).unlink(missing_ok=True)


def export_onnx(graph: Any, input_shape: tuple[int, ...], output_names: list[str]) -> bytes:
    """The torch port as ONNX with a dynamic batch (legacy TorchScript exporter: no onnxscript needed)."""
    import io

    import torch

    buf = io.BytesIO()
    dummy = torch.zeros((1,) + tuple(input_shape[1:]), dtype=torch.float32)
    axes = {"input": {0: "batch"}, **{n: {0: "batch"} for n in output_names}}
    torch.onnx.export(graph.cpu().eval(), (dummy,), buf, input_names=["input"], output_names=output_names,
                      dynamic_axes=axes, opset_version=17, dynamo=False)
    return buf.getvalue()


class TensorRTBackend(Backend):
    name = "tensorrt"

    @classmethod
    def unavailable_reason(cls, settings: BackendSettings) -> str | None:
        if importlib.util.find_spec("tensorrt") is None:
            return "tensorrt is not installed (pip install 'livefuse[gpu]' on a machine with CUDA)"
        import torch

        if not torch.cuda.is_available():
            return f"no CUDA GPU visible to torch {torch.__version__}"
        if not settings.device.startswith(("auto", "cuda")):
            return f"device {settings.device!r} is not a CUDA device"
        return None

    def __init__(self, settings: BackendSettings) -> None:
        super().__init__(settings)
        import tensorrt as trt
        import torch

        self.trt = trt
        self.device = "cuda" if settings.device == "auto" else settings.device
        props = torch.cuda.get_device_properties(torch.device(self.device))
        self.gpu_name, self.capability = props.name, f"{props.major}.{props.minor}"
        self.cache = EngineCache(settings.engine_cache)
        self.logger = trt.Logger(trt.Logger.WARNING)

    def network(self, member: str) -> Network:
        from engines.landmarks.networks import graph_bytes, load_network

        model = graph_bytes(member)
        graph = load_network(member, "cpu")
        shape = tuple(graph.input_shapes[0])
        spec = engine_spec(model, shape, self.settings.max_batch, self.settings.precision,
                           self.trt.__version__, self.gpu_name, self.capability)
        key = spec.key()
        data = self.cache.get(member, key)
        engine = self._deserialize(data) if data else None
        if engine is None:
            if data:
                log.warning("TensorRT engine cache %s did not load; rebuilding", self.cache.path(member, key))
            log.info("building TensorRT engine for %s (%s, batch <= %d)", member, spec.precision, spec.max_shape[0])
            data = self._build(export_onnx(graph, shape, graph.output_names), spec)
            self.cache.put(member, key, data)
            engine = self._deserialize(data)
        return _EngineRunner(engine, graph.output_names, self.device)

    def _deserialize(self, data: bytes):
        runtime = self.trt.Runtime(self.logger)
        return runtime.deserialize_cuda_engine(data)

    def _build(self, onnx_bytes: bytes, spec: EngineSpec) -> bytes:
        trt = self.trt
        builder = trt.Builder(self.logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(onnx_bytes):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT could not parse the exported ONNX: {errors}")
        config = builder.create_builder_config()
        if spec.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        profile = builder.create_optimization_profile()
        profile.set_shape(spec.input_name, spec.min_shape, spec.opt_shape, spec.max_shape)
        config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise RuntimeError("TensorRT failed to build the engine (see its log above)")
        return bytes(serialized)

    def landmarker(self, config) -> Detector:
        from engines.landmarks.graph import LandmarkGraph

        return LandmarkGraph(config, self.device, network_factory=self.network)

    def describe(self) -> dict:
        return {"backend": self.name, "device": self.device, "precision": self.settings.precision,
                "gpu": self.gpu_name, "engine_cache": str(self.cache.folder)}


class _EngineRunner:
    """Runs an engine on torch CUDA tensors: inputs and outputs stay on the device, one stream, no copies
    beyond the input's move to the GPU."""

    def __init__(self, engine, output_names: list[str], device: str) -> None:
        self.engine = engine
        self.context = engine.create_execution_context()
        self.output_names = output_names
        self.device = device

    def __call__(self, x):
        import torch

        x = x.to(self.device, torch.float32).contiguous()
        ctx = self.context
        ctx.set_input_shape("input", tuple(x.shape))
        ctx.set_tensor_address("input", x.data_ptr())
        outs = []
        for name in self.output_names:
            out = torch.empty(tuple(ctx.get_tensor_shape(name)), dtype=torch.float32, device=self.device)
            ctx.set_tensor_address(name, out.data_ptr())
            outs.append(out)
        stream = torch.cuda.current_stream(torch.device(self.device))
        if not ctx.execute_async_v3(stream.cuda_stream):
            raise RuntimeError("TensorRT execution failed")
        return outs
