"""The bundled .tflite networks in LiteRT's own interpreter (ai-edge-litert), one XNNPACK thread each,
driven by the tracking graph of engines.torch_port.landmarker: the detector runs while a face is missing
(and every `search_interval_ms` for newcomers), each followed face's next crop comes from its landmarks,
blendshapes come from the same network MediaPipe runs, and the face transform from MediaPipe's geometry
pipeline, reproduced in NumPy.

Why it is the default, ahead of MediaPipe's own graph (the `litert` backend): the same networks cost
about a fifth less CPU per frame this way, a third less in the product's 4-face setting, where
MediaPipe's graph runs its detector on every frame (no graph scheduler, no thread hand-offs, no
per-landmark Python objects; `livefuse bench faces` measures both side by side). Everything runs on the
calling thread, so a stream costs one core's worth, predictable under load; and on clips with known motion
its landmarks land closer to the truth (tests/test_interpreter.py states both).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from engines.backends.base import Backend, BackendSettings, Detector, Network
from engines.cards import FACE_LANDMARKER, ModelError


class InterpreterRunner:
    """One network file in a LiteRT interpreter. The files take a batch of one, so a batch runs item by
    item; outputs keep the file's shapes, joined along the leading batch axis of one where the file has it.

    NumPy in, NumPy out (`takes_numpy`): the tracking graph then never touches torch per frame, whose CPU
    thread pool would otherwise wake (and spin) for a few tiny tensor ops. A torch tensor in gives torch out."""

    takes_numpy = True

    def __init__(self, model: bytes, threads: int = 1) -> None:
        from ai_edge_litert.interpreter import Interpreter  # lazy: optional runtime

        self._interp = Interpreter(model_content=model, num_threads=threads)
        self._interp.allocate_tensors()
        (inp,) = self._interp.get_input_details()
        self._input, self.input_shape = inp["index"], tuple(int(v) for v in inp["shape"])
        details = self._interp.get_output_details()
        self._outputs = [d["index"] for d in details]
        self._batched = [len(d["shape"]) > 0 and int(d["shape"][0]) == 1 for d in details]

    def __call__(self, x: Any) -> list[Any]:
        as_torch = not isinstance(x, np.ndarray)
        arr = x.detach().to("cpu").numpy() if as_torch else x
        arr = np.ascontiguousarray(arr, np.float32).reshape((-1,) + self.input_shape[1:])
        if len(arr) != 1 and not all(self._batched):
            raise ValueError("this network's outputs have no batch axis; run one item at a time")
        per_item = []
        for item in arr:
            self._interp.set_tensor(self._input, item[None])
            self._interp.invoke()
            per_item.append([self._interp.get_tensor(i) for i in self._outputs])  # get_tensor copies
        outs = per_item[0] if len(per_item) == 1 else [np.concatenate([p[k] for p in per_item])
                                                       for k in range(len(self._outputs))]
        if as_torch:
            import torch

            return [torch.from_numpy(o) for o in outs]
        return outs


class InterpreterBackend(Backend):
    name = "interpreter"

    @classmethod
    def unavailable_reason(cls, settings: BackendSettings) -> str | None:
        if importlib.util.find_spec("ai_edge_litert") is None:
            return "ai-edge-litert is not installed (pip install ai-edge-litert==2.3.0)"
        if importlib.util.find_spec("torch") is None:
            return "torch is needed for the tracking graph (pip install torch)"
        if settings.device not in ("auto", "cpu"):
            return f"LiteRT's interpreter runs on the CPU only, not {settings.device!r}"
        try:
            FACE_LANDMARKER.path()
        except ModelError as exc:
            return str(exc)
        return None

    def network(self, member: str) -> Network:
        from engines.torch_port.networks import _graph_bytes   # verified once by sha256, then cached

        return InterpreterRunner(_graph_bytes(member))

    def landmarker(self, config) -> Detector:
        from engines.torch_port.landmarker import TorchLandmarker
        from engines.torch_port.networks import BLENDSHAPES_MEMBER

        return TorchLandmarker(config, "cpu", network_factory=self.network,
                               blendshapes_graph=self.network(BLENDSHAPES_MEMBER))

    def describe(self) -> dict:
        return {"backend": self.name, "device": "cpu", "precision": "fp32", "threads": 1}
