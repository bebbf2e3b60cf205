"""The bundled .tflite networks in LiteRT's own interpreter (ai-edge-litert), one XNNPACK thread each,
driven by the tracking graph of engines.landmarks.graph: the detector runs while a face is missing
(and every `search_interval_ms` for newcomers), each followed face's next crop comes from its landmarks,
blendshapes come from the same network MediaPipe runs, and the face transform from MediaPipe's geometry
pipeline, reproduced in NumPy.

Why it is the default, ahead of MediaPipe's own graph (the `litert` backend): the same networks cost
about a fifth less CPU per frame this way, a third less in the product's 4-face setting, where
MediaPipe's graph runs its detector on every frame (no graph scheduler, no thread hand-offs, no
per-landmark Python objects; `livefuse bench faces` measures both side by side). With one face in view
the landmark network runs on the calling thread (the stream's search passes for newcomers on a search
thread beside it, engines.faces.SearchConfig.background), predictable under load (several faces spread
their landmark passes over the cores); and on clips with known motion its landmarks land
closer to the truth (tests/test_interpreter.py states both).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from engines.backends.base import Backend, BackendSettings, Detector, Network
from engines.cards import FACE_LANDMARKER, ModelError


class InterpreterRunner:
    """One network file in LiteRT interpreters. The files take a batch of one, so a batch runs item by
    item: on one interpreter in turn, or, with `parallel` > 1, spread over that many interpreters on
    their own threads (LiteRT releases the GIL while it runs), which is what several faces in one frame
    cost on a machine with cores to spare. Outputs keep the file's shapes, joined along the leading batch
    axis of one where the file has it.

    NumPy in, NumPy out (`takes_numpy`): the tracking graph then never touches torch per frame, whose CPU
    thread pool would otherwise wake (and spin) for a few tiny tensor ops. A torch tensor in gives torch out."""

    takes_numpy = True

    def __init__(self, model: bytes, threads: int = 1, parallel: int = 1) -> None:
        self._model, self._threads = model, threads
        self._interps = [self._make()]
        self._parallel = max(1, int(parallel))
        self._pool: Any = None
        first = self._interps[0]
        (inp,) = first.get_input_details()
        self._input, self.input_shape = inp["index"], tuple(int(v) for v in inp["shape"])
        details = first.get_output_details()
        self._outputs = [d["index"] for d in details]
        self._batched = [len(d["shape"]) > 0 and int(d["shape"][0]) == 1 for d in details]

    def _make(self) -> Any:
        from ai_edge_litert.interpreter import Interpreter  # lazy: optional runtime

        interp = Interpreter(model_content=self._model, num_threads=self._threads)
        interp.allocate_tensors()
        return interp

    def _run_one(self, interp: Any, item: np.ndarray) -> list[np.ndarray]:
        interp.set_tensor(self._input, item[None])
        interp.invoke()
        return [interp.get_tensor(i) for i in self._outputs]  # get_tensor copies

    def __call__(self, x: Any) -> list[Any]:
        if not self._interps:
            raise RuntimeError("this network's runner is closed")
        as_torch = not isinstance(x, np.ndarray)
        arr = x.detach().to("cpu").numpy() if as_torch else x
        arr = np.ascontiguousarray(arr, np.float32).reshape((-1,) + self.input_shape[1:])
        if len(arr) != 1 and not all(self._batched):
            raise ValueError("this network's outputs have no batch axis; run one item at a time")
        if len(arr) > 1 and self._parallel > 1:
            per_item = self._run_spread(arr)
        else:
            per_item = [self._run_one(self._interps[0], item) for item in arr]
        outs = per_item[0] if len(per_item) == 1 else [np.concatenate([p[k] for p in per_item])
                                                       for k in range(len(self._outputs))]
        if as_torch:
            import torch

            return [torch.from_numpy(o) for o in outs]
        return outs

    def _run_spread(self, arr: np.ndarray) -> list[list[np.ndarray]]:
        """Item i runs on interpreter i % k (k = min(parallel, items)); each interpreter's items in order."""
        from concurrent.futures import ThreadPoolExecutor

        k = min(self._parallel, len(arr))
        while len(self._interps) < k:                 # made on first need: one face costs no extra memory
            self._interps.append(self._make())
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._parallel, thread_name_prefix="litert")
        jobs = [self._pool.submit(lambda j: [(i, self._run_one(self._interps[j], arr[i]))
                                             for i in range(j, len(arr), k)], j) for j in range(k)]
        results = dict(pair for job in jobs for pair in job.result())
        return [results[i] for i in range(len(arr))]

    def close(self) -> None:
        """Gives back the interpreters (their tensor arenas and XNNPACK's packed weights, several MB each)
        and the thread pool now: a session's objects sit in reference cycles that only Python's oldest
        collection frees, which a busy server may not run for many sessions."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self._interps.clear()


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
        import os

        from engines.landmarks.networks import LANDMARKS_MEMBER, graph_bytes   # verified by sha256, cached

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        # several faces in a frame: their landmark passes spread over the cores (up to 4)
        parallel = min(4, cores) if member == LANDMARKS_MEMBER else 1
        return InterpreterRunner(graph_bytes(member), parallel=parallel)

    def landmarker(self, config) -> Detector:
        from engines.landmarks.graph import LandmarkGraph
        from engines.landmarks.networks import BLENDSHAPES_MEMBER

        return LandmarkGraph(config, "cpu", network_factory=self.network,
                               blendshapes_graph=self.network(BLENDSHAPES_MEMBER) if config.blendshapes else None,
                             full_range_runner=InterpreterRunner)

    def describe(self) -> dict:
        return {"backend": self.name, "device": "cpu", "precision": "fp32", "threads": 1}
