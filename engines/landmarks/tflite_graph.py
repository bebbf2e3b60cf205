"""A .tflite graph rebuilt as a torch module: weights read from the flatbuffer, operators mapped one to one.

Only the operators the face networks use are supported (CONV_2D, DEPTHWISE_CONV_2D, ADD, RELU, PRELU,
LOGISTIC, PAD, MAX_POOL_2D, RESHAPE, CONCATENATION, DEQUANTIZE); any other raises at load time, naming
it. Activations run NCHW (torch's native layout) while TFLite's are NHWC: 4-D weights and per-channel
constants are transposed once here; a RESHAPE goes back to NHWC order first so flattened outputs match
TFLite's element order exactly. Any batch size works: the batch dimension of RESHAPE targets is free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# what TFLiteGraph (NCHW inside, convolution networks) runs
SUPPORTED_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "RELU", "PRELU", "LOGISTIC", "PAD",
                           "MAX_POOL_2D", "RESHAPE", "CONCATENATION", "DEQUANTIZE"})
# what tflite_exact.ExactGraph (TFLite's own layout, small MLP-style networks) runs as well
EXACT_OPS = frozenset({"MEAN", "SUM", "SUB", "MUL", "DIV", "SQRT", "RSQRT", "NEG", "SQUARED_DIFFERENCE",
                       "STRIDED_SLICE", "TRANSPOSE"})
PARSED_OPS = SUPPORTED_OPS | EXACT_OPS


class UnsupportedModel(ValueError):
    """The .tflite file uses something this port does not implement."""


@dataclass(slots=True)
class TensorInfo:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = None   # constant data, if any


@dataclass(slots=True)
class OpInfo:
    kind: str
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ParsedGraph:
    tensors: dict[int, TensorInfo]
    ops: list[OpInfo]
    inputs: list[int]
    outputs: list[int]


_NP_DTYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8, "INT8": np.int8}


def parse_tflite(data: bytes) -> ParsedGraph:
    """Tensors, constants and operators of subgraph 0, as plain Python values."""
    import tflite

    op_names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    type_names = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
    act_names = {v: k for k, v in vars(tflite.ActivationFunctionType).items() if not k.startswith("_")}
    pad_names = {v: k for k, v in vars(tflite.Padding).items() if not k.startswith("_")}
    model = tflite.Model.GetRootAsModel(data, 0)
    if model.SubgraphsLength() != 1:
        raise UnsupportedModel(f"expected one subgraph, found {model.SubgraphsLength()}")
    g = model.Subgraphs(0)
    tensors: dict[int, TensorInfo] = {}
    for i in range(g.TensorsLength()):
        t = g.Tensors(i)
        dtype = type_names[t.Type()]
        shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        buf = model.Buffers(t.Buffer())
        const = None
        if buf is not None and buf.DataLength() > 0:
            if dtype not in _NP_DTYPES:
                raise UnsupportedModel(f"constant tensor {t.Name()!r} has type {dtype}")
            const = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=_NP_DTYPES[dtype]).reshape(shape)
        tensors[i] = TensorInfo(i, t.Name().decode(), shape, dtype, const)
    ops: list[OpInfo] = []
    for i in range(g.OperatorsLength()):
        op = g.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = op_names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")
        if kind not in PARSED_OPS:
            raise UnsupportedModel(f"operator {kind} (op {i}) is not supported by the torch port")
        opts: dict[str, Any] = {}
        table = op.BuiltinOptions()
        if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            o = tflite.Conv2DOptions() if kind == "CONV_2D" else tflite.DepthwiseConv2DOptions()
            o.Init(table.Bytes, table.Pos)
            opts = dict(stride=(o.StrideH(), o.StrideW()), dilation=(o.DilationHFactor(), o.DilationWFactor()),
                        padding=pad_names[o.Padding()], act=act_names[o.FusedActivationFunction()])
        elif kind == "MAX_POOL_2D":
            o = tflite.Pool2DOptions()
            o.Init(table.Bytes, table.Pos)
            opts = dict(kernel=(o.FilterHeight(), o.FilterWidth()), stride=(o.StrideH(), o.StrideW()),
                        padding=pad_names[o.Padding()], act=act_names[o.FusedActivationFunction()])
        elif kind == "ADD" and table is not None:
            o = tflite.AddOptions()
            o.Init(table.Bytes, table.Pos)
            opts = dict(act=act_names[o.FusedActivationFunction()])
        elif kind == "CONCATENATION":
            o = tflite.ConcatenationOptions()
            o.Init(table.Bytes, table.Pos)
            opts = dict(axis=o.Axis(), act=act_names[o.FusedActivationFunction()])
        elif kind in ("MUL", "SUB", "DIV") and table is not None:
            o = {"MUL": tflite.MulOptions, "SUB": tflite.SubOptions, "DIV": tflite.DivOptions}[kind]()
            o.Init(table.Bytes, table.Pos)
            opts = dict(act=act_names[o.FusedActivationFunction()])
        elif kind in ("MEAN", "SUM"):
            o = tflite.ReducerOptions()
            o.Init(table.Bytes, table.Pos)
            opts = dict(keep_dims=bool(o.KeepDims()))
        elif kind == "STRIDED_SLICE":
            o = tflite.StridedSliceOptions()
            o.Init(table.Bytes, table.Pos)
            opts = dict(begin_mask=o.BeginMask(), end_mask=o.EndMask(), shrink_mask=o.ShrinkAxisMask(),
                        new_axis_mask=o.NewAxisMask(), ellipsis_mask=o.EllipsisMask())
        ops.append(OpInfo(kind, [int(x) for x in op.InputsAsNumpy()], [int(x) for x in op.OutputsAsNumpy()], opts))
    return ParsedGraph(tensors, ops, [int(x) for x in g.InputsAsNumpy()], [int(x) for x in g.OutputsAsNumpy()])


def _same_pad(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's SAME padding: output ceil(size / stride), the odd pixel goes at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _activation(x: torch.Tensor, act: str) -> torch.Tensor:
    if act == "NONE":
        return x
    if act == "RELU":
        return F.relu(x)
    if act == "RELU6":
        return F.relu6(x)
    if act == "RELU_N1_TO_1":
        return x.clamp(-1.0, 1.0)
    raise UnsupportedModel(f"fused activation {act}")


class GraphModule(nn.Module):
    """What every runner of a parsed graph knows about it: its ends and its constant tensors."""

    def __init__(self, graph: ParsedGraph) -> None:
        super().__init__()
        self.input_ids = list(graph.inputs)
        self.output_ids = list(graph.outputs)
        self.input_shapes = [graph.tensors[i].shape for i in graph.inputs]
        self.output_names = [graph.tensors[i].name for i in graph.outputs]

    @staticmethod
    def constants(graph: ParsedGraph) -> dict[int, np.ndarray]:
        return {i: t.data for i, t in graph.tensors.items() if t.data is not None}


class TFLiteGraph(GraphModule):
    """Runs a parsed .tflite graph. Input and outputs use TFLite's layout (NHWC images, the file's shapes
    with a free batch dimension), so callers never see the NCHW inside."""

    def __init__(self, graph: ParsedGraph) -> None:
        super().__init__(graph)
        consts = self.constants(graph)
        nchw: set[int] = {i for i in graph.inputs if len(graph.tensors[i].shape) == 4}
        self._steps: list[tuple[str, list[int], int, dict[str, Any]]] = []
        self._n = 0
        for op in graph.ops:
            out = op.outputs[0]
            if op.kind == "DEQUANTIZE":  # fp16 weights: fold into float32 constants now
                src = consts.get(op.inputs[0])
                if src is None:
                    raise UnsupportedModel("DEQUANTIZE of a non-constant tensor")
                consts[out] = src.astype(np.float32)
                continue
            x = op.inputs[0]
            params: dict[str, Any] = dict(op.options)
            if op.kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                w = consts[op.inputs[1]]
                if op.kind == "CONV_2D":
                    weight = w.transpose(0, 3, 1, 2)                       # OHWI -> OIHW
                    params["groups"] = 1
                else:
                    cin = graph.tensors[x].shape[3]
                    weight = w.transpose(3, 0, 1, 2)                       # 1HW(C*M) -> (C*M)1HW
                    params["groups"] = cin
                params["kernel"] = weight.shape[2:]
                params["weight"] = self._const(weight)
                params["bias"] = self._const(consts[op.inputs[2]]) if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
                inputs = [x]
                nchw.add(out)
            elif op.kind == "PRELU":
                alpha = consts[op.inputs[1]].reshape(-1)
                if x not in nchw:
                    raise UnsupportedModel("PRELU is supported on 4-D activations only")
                params["alpha"] = self._const(alpha)
                inputs = [x]
                if x in nchw:
                    nchw.add(out)
            elif op.kind == "ADD":
                inputs = []
                for j in op.inputs:
                    if j in consts:
                        c = consts[j]
                        params.setdefault("const", self._const(c.reshape(1, -1, 1, 1) if (x in nchw and c.size > 1) else c))
                    else:
                        inputs.append(j)
                if all(j in nchw for j in inputs):
                    nchw.add(out)
            elif op.kind == "PAD":
                p = consts[op.inputs[1]].astype(int)  # (4, 2) NHWC before/after
                if x not in nchw or p.shape != (4, 2):
                    raise UnsupportedModel("PAD is supported on 4-D activations only")
                params["pad"] = (int(p[2, 0]), int(p[2, 1]), int(p[1, 0]), int(p[1, 1]), int(p[3, 0]), int(p[3, 1]))
                if p[0].any():
                    raise UnsupportedModel("PAD along the batch")
                inputs = [x]
                nchw.add(out)
            elif op.kind == "MAX_POOL_2D":
                inputs = [x]
                nchw.add(out)
            elif op.kind in ("RELU", "LOGISTIC"):
                inputs = [x]
                if x in nchw:
                    nchw.add(out)
            elif op.kind == "RESHAPE":
                params["shape"] = tuple(graph.tensors[out].shape)
                params["from_nchw"] = x in nchw
                inputs = [x]
            elif op.kind == "CONCATENATION":
                inputs = list(op.inputs)
                rank = len(graph.tensors[out].shape)
                axis = params["axis"] % rank
                if all(j in nchw for j in inputs):
                    axis = (0, 2, 3, 1)[axis]
                    nchw.add(out)
                elif any(j in nchw for j in inputs):
                    raise UnsupportedModel("CONCATENATION of mixed layouts")
                params["axis"] = axis
            else:
                raise UnsupportedModel(f"operator {op.kind} is not supported by the NCHW graph port "
                                       "(tflite_exact.ExactGraph runs it)")
            if any(j in consts for j in inputs):
                raise UnsupportedModel(f"{op.kind} with a constant data input")
            self._steps.append((op.kind, inputs, out, params))
        self._out_nchw = [i in nchw for i in self.output_ids]

    def _const(self, array: np.ndarray) -> str:
        name = f"c{self._n}"
        self._n += 1
        self.register_buffer(name, torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)))
        return name

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """x: (N, H, W, C) float32 as the .tflite input expects. Returns the outputs in file order."""
        env: dict[int, torch.Tensor] = {self.input_ids[0]: x.permute(0, 3, 1, 2)}
        for kind, inputs, out, p in self._steps:
            a = env[inputs[0]]
            if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                kh, kw = p["kernel"]
                pad: Any = 0
                if p["padding"] == "SAME":
                    top, bottom = _same_pad(a.shape[2], kh, p["stride"][0], p["dilation"][0])
                    left, right = _same_pad(a.shape[3], kw, p["stride"][1], p["dilation"][1])
                    if top == bottom and left == right:
                        pad = (top, left)      # symmetric: let the convolution pad (no copy)
                    else:
                        a = F.pad(a, (left, right, top, bottom))
                w = getattr(self, p["weight"])
                b = getattr(self, p["bias"]) if p["bias"] else None
                y = _activation(F.conv2d(a, w, b, p["stride"], pad, p["dilation"], p["groups"]), p["act"])
            elif kind == "PRELU":
                y = F.prelu(a, getattr(self, p["alpha"]))
            elif kind == "ADD":
                y = a + env[inputs[1]] if len(inputs) > 1 else a + getattr(self, p["const"])
                y = _activation(y, p.get("act", "NONE"))
            elif kind == "RELU":
                y = F.relu(a)
            elif kind == "LOGISTIC":
                y = torch.sigmoid(a)
            elif kind == "PAD":
                y = F.pad(a, p["pad"])
            elif kind == "MAX_POOL_2D":
                kh, kw = p["kernel"]
                if p["padding"] == "SAME":
                    top, bottom = _same_pad(a.shape[2], kh, p["stride"][0], 1)
                    left, right = _same_pad(a.shape[3], kw, p["stride"][1], 1)
                    if top or bottom or left or right:
                        a = F.pad(a, (left, right, top, bottom), value=float("-inf"))
                y = _activation(F.max_pool2d(a, (kh, kw), p["stride"]), p["act"])
            elif kind == "RESHAPE":
                if p["from_nchw"]:
                    a = a.permute(0, 2, 3, 1)
                y = a.reshape((a.shape[0],) + p["shape"][1:])
            elif kind == "CONCATENATION":
                y = _activation(torch.cat([env[j] for j in inputs], dim=p["axis"]), p["act"])
            env[out] = y
        return [env[i].permute(0, 2, 3, 1) if nc else env[i] for i, nc in zip(self.output_ids, self._out_nchw)]


def load_graph(data: bytes) -> TFLiteGraph:
    return TFLiteGraph(parse_tflite(data)).eval()
