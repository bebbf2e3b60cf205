"""A small .tflite graph run op for op in TFLite's own layout and shapes (no NCHW rewrite).

For networks built of reductions, transposes and slices, such as the blendshapes MLP-Mixer, where
rewriting layouts would be fragile and there is no speed to win. Convolutions here are 1x1 or small and
run through a permute to torch's layout and back. The batch is the file's own (1): run faces one by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from engines.landmarks.tflite_graph import GraphModule, ParsedGraph, UnsupportedModel, _activation, _same_pad, parse_tflite

_BINARY = {
    "ADD": torch.add,
    "SUB": torch.sub,
    "MUL": torch.mul,
    "DIV": torch.div,
    "SQUARED_DIFFERENCE": lambda a, b: (a - b) ** 2,
}
_UNARY = {"SQRT": torch.sqrt, "RSQRT": torch.rsqrt, "NEG": torch.neg, "LOGISTIC": torch.sigmoid, "RELU": F.relu}


class ExactGraph(GraphModule):
    def __init__(self, graph: ParsedGraph) -> None:
        super().__init__(graph)
        consts = self.constants(graph)
        self._steps: list[tuple[str, list[Any], int, dict[str, Any]]] = []
        self._n = 0
        for op in graph.ops:
            out = op.outputs[0]
            p: dict[str, Any] = dict(op.options)
            k = op.kind
            if k == "DEQUANTIZE":
                consts[out] = consts[op.inputs[0]].astype(np.float32)
                continue
            if k in _BINARY:
                args = [self._ref(j, consts) for j in op.inputs[:2]]
            elif k in _UNARY:
                args = [self._ref(op.inputs[0], consts)]
            elif k in ("MEAN", "SUM"):
                rank = len(graph.tensors[op.inputs[0]].shape)
                p["axes"] = tuple(int(a) % rank for a in np.atleast_1d(consts[op.inputs[1]]))
                args = [self._ref(op.inputs[0], consts)]
            elif k == "RESHAPE":
                p["shape"] = tuple(graph.tensors[out].shape)
                args = [self._ref(op.inputs[0], consts)]
            elif k == "TRANSPOSE":
                p["perm"] = tuple(int(a) for a in consts[op.inputs[1]])
                args = [self._ref(op.inputs[0], consts)]
            elif k == "STRIDED_SLICE":
                if p["new_axis_mask"] or p["ellipsis_mask"]:
                    raise UnsupportedModel("STRIDED_SLICE with new-axis or ellipsis masks")
                p["begin"], p["end"], p["strides"] = (tuple(int(v) for v in consts[j]) for j in op.inputs[1:4])
                args = [self._ref(op.inputs[0], consts)]
            elif k == "CONV_2D":
                w = consts[op.inputs[1]]
                p["weight"] = self._const(w.transpose(0, 3, 1, 2))
                p["bias"] = self._const(consts[op.inputs[2]]) if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
                p["kernel"] = w.shape[1:3]
                args = [self._ref(op.inputs[0], consts)]
            elif k == "CONCATENATION":
                rank = len(graph.tensors[out].shape)
                p["axis"] = p["axis"] % rank
                args = [self._ref(j, consts) for j in op.inputs]
            else:
                raise UnsupportedModel(f"operator {k} is not supported by the exact-layout port")
            self._steps.append((k, args, out, p))

    def _const(self, array: np.ndarray) -> str:
        name = f"c{self._n}"
        self._n += 1
        self.register_buffer(name, torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)))
        return name

    def _ref(self, j: int, consts: dict[int, np.ndarray]) -> Any:
        """A tensor id, or ("const", buffer name) for constant inputs."""
        return ("const", self._const(consts[j])) if j in consts else j

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        env: dict[int, torch.Tensor] = {self.input_ids[0]: x}

        def get(ref):
            return getattr(self, ref[1]) if isinstance(ref, tuple) else env[ref]

        for k, args, out, p in self._steps:
            if k in _BINARY:
                y = _activation(_BINARY[k](get(args[0]), get(args[1])), p.get("act", "NONE"))
            elif k in _UNARY:
                y = _UNARY[k](get(args[0]))
            elif k == "MEAN":
                y = get(args[0]).mean(dim=p["axes"], keepdim=p["keep_dims"])
            elif k == "SUM":
                y = get(args[0]).sum(dim=p["axes"], keepdim=p["keep_dims"])
            elif k == "RESHAPE":
                y = get(args[0]).reshape(p["shape"])
            elif k == "TRANSPOSE":
                y = get(args[0]).permute(p["perm"])
            elif k == "STRIDED_SLICE":
                y = _strided_slice(get(args[0]), p)
            elif k == "CONV_2D":
                a = get(args[0]).permute(0, 3, 1, 2)
                kh, kw = p["kernel"]
                if p["padding"] == "SAME" and (kh > 1 or kw > 1):
                    top, bottom = _same_pad(a.shape[2], kh, p["stride"][0], p["dilation"][0])
                    left, right = _same_pad(a.shape[3], kw, p["stride"][1], p["dilation"][1])
                    a = F.pad(a, (left, right, top, bottom))
                b = getattr(self, p["bias"]) if p["bias"] else None
                y = F.conv2d(a, getattr(self, p["weight"]), b, p["stride"], 0, p["dilation"])
                y = _activation(y, p["act"]).permute(0, 2, 3, 1)
            elif k == "CONCATENATION":
                y = _activation(torch.cat([get(a) for a in args], dim=p["axis"]), p["act"])
            env[out] = y
        return [env[i] for i in self.output_ids]


def _strided_slice(x: torch.Tensor, p: dict[str, Any]) -> torch.Tensor:
    index = []
    for axis, (b, e, s) in enumerate(zip(p["begin"], p["end"], p["strides"])):
        if p["shrink_mask"] >> axis & 1:
            index.append(b)
            continue
        start = None if p["begin_mask"] >> axis & 1 else b
        stop = None if p["end_mask"] >> axis & 1 else e
        if s <= 0:
            raise UnsupportedModel("STRIDED_SLICE with a non-positive stride")
        index.append(slice(start, stop, s))
    return x[tuple(index)]


def load_exact_graph(data: bytes) -> ExactGraph:
    return ExactGraph(parse_tflite(data)).eval()
