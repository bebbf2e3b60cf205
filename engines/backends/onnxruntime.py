"""ONNX Runtime for the user's own model files (neural swappers and their embedders).

Not one of the face `BACKENDS` (those run the bundled MediaPipe networks): this runs whatever ONNX file
the user points at. Execution providers are chosen from what the installed build offers, in order:
TensorRT (with an engine cache folder keyed by ONNX Runtime itself on the model and its settings), CUDA,
then the CPU. `onnxruntime` is imported here only, on first use, so the project runs without it until a
swapper is asked for.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'livefuse[swap]' (or onnxruntime-gpu for CUDA/TensorRT)"


class OrtUnavailable(RuntimeError):
    """ONNX Runtime is not installed, or the file does not load."""


@dataclass(frozen=True, slots=True)
class OrtSettings:
    device: str = "auto"             # auto (GPU providers when the build has them), cpu, cuda, cuda:N, tensorrt
    threads: int = 0                 # intra-op threads on the CPU; 0 = ONNX Runtime's default
    trt_cache: str = ""              # TensorRT engine cache folder ("" = ~/.cache/livefuse/trt)
    fp16: bool = True                # TensorRT may build FP16 engines


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise OrtUnavailable(f"ONNX Runtime is not installed: {INSTALL_HINT}") from None
    return onnxruntime


def providers_for(settings: OrtSettings, available: list[str]) -> list[Any]:
    """The provider list for `settings` out of the build's `available` ones (CPU always last)."""
    dev = settings.device
    index = int(dev.split(":")[1]) if dev.startswith("cuda:") else 0
    out: list[Any] = []
    if dev in ("auto", "tensorrt") and "TensorrtExecutionProvider" in available:
        cache = settings.trt_cache or str(Path.home() / ".cache" / "livefuse" / "trt")
        out.append(("TensorrtExecutionProvider", {"device_id": index, "trt_engine_cache_enable": True,
                                                  "trt_engine_cache_path": cache, "trt_fp16_enable": settings.fp16}))
    if (dev in ("auto", "tensorrt") or dev.startswith("cuda")) and "CUDAExecutionProvider" in available:
        out.append(("CUDAExecutionProvider", {"device_id": index}))
    if dev != "cpu" and dev != "auto" and not out:
        raise OrtUnavailable(f"device {dev!r} asked for, but this ONNX Runtime offers only {available}: "
                             "install onnxruntime-gpu")
    out.append("CPUExecutionProvider")
    return out


class OrtModel:
    """One loaded file. `run` is thread-safe (ONNX Runtime sessions are); inputs are float32 NumPy."""

    def __init__(self, path: str | os.PathLike, settings: OrtSettings = OrtSettings()) -> None:
        ort = _ort()
        opts = ort.SessionOptions()
        if settings.threads > 0:
            opts.intra_op_num_threads = settings.threads
        opts.log_severity_level = 3
        self.path = Path(path)
        try:
            self.session = ort.InferenceSession(str(path), opts, providers=providers_for(settings, ort.get_available_providers()))
        except Exception as exc:   # ORT raises its own classes for unreadable / invalid graphs
            raise OrtUnavailable(f"{self.path.name}: ONNX Runtime cannot load it: {exc}") from None
        self.providers = self.session.get_providers()
        self.inputs = tuple((i.name, tuple(i.shape)) for i in self.session.get_inputs())
        self.outputs = tuple((o.name, tuple(o.shape)) for o in self.session.get_outputs())
        self.input_types = {i.name: i.type for i in self.session.get_inputs()}
        log.info("%s on %s", self.path.name, ", ".join(self.providers))

    @property
    def dynamic_batch(self) -> bool:
        """True when every input's first dim is symbolic: a batch of N runs as one call."""
        return all(not (isinstance(s[0], int) and s[0] > 0) for _, s in self.inputs if s)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        cast = {k: v.astype(np.float16) if self.input_types[k] == "tensor(float16)" else v for k, v in feeds.items()}
        return [np.asarray(o, np.float32) for o in self.session.run(None, cast)]
