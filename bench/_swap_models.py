"""Tiny ONNX models with exactly the I/O signatures of the swapper families and of an ArcFace embedder,
built offline with onnx's helper API: no real swap weights ship anywhere, so tests and `livefuse bench
swapper --test-models` run the whole path on these. Each does something checkable:

- swapper: output = target + tint, tint = (source @ W) per channel (W is 512 x 3, fixed), in the card's
  network units, so the face comes back tinted by the source vector; a zero source gives the input back.
  Families with a mask output give a mask of ones.
- embedder: 14 x 14 average pooling to 3 x 8 x 8, flattened, times a fixed 192 x 512 matrix.
- `raising_swapper`: a data-dependent reshape that fails at run time, never at load.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TINT_SCALE = 2.0    # network units of tint per unit of (source @ W): a few tens of levels for a unit source vector


def tint_matrix() -> np.ndarray:
    """512 x 3: the first 170 entries push red, the next 170 green, the rest blue, each 1/sqrt(170)."""
    w = np.zeros((512, 3), np.float32)
    for c, (a, b) in enumerate(((0, 170), (170, 340), (340, 512))):
        w[a:b, c] = 1.0 / np.sqrt(b - a)
    return w


def embedder_matrix(seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, (192, 512)).astype(np.float32)


def reference_embedding(x_nchw: np.ndarray) -> np.ndarray:
    """What the tiny embedder computes, in NumPy: the reference the tests hold it to."""
    n = x_nchw.shape[0]
    pooled = x_nchw.reshape(n, 3, 8, 14, 8, 14).mean(axis=(3, 5))
    return pooled.reshape(n, 192) @ embedder_matrix()


def _save(graph, path: Path, opset: int = 17) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def swapper(path: str | Path, family: str = "inswapper_128", batch: int | str = 1, emap: np.ndarray | None = None,
            target_size: int | None = None, names: tuple[str, str] | None = None) -> Path:
    """A model of `family`'s signature (engines/swappers/cards.py); `batch` 1 or a symbolic name;
    `target_size` overrides the crop side (a mismatched file); inswapper gets a 512x512 `emap` initializer."""
    from onnx import TensorProto, helper, numpy_helper

    from engines.swappers.cards import BY_NAME

    card = BY_NAME[family]
    s = target_size or card.size
    t_name, s_name = names or ("target", "source")
    lo, hi = card.output_range
    inputs = {"target": helper.make_tensor_value_info(t_name, TensorProto.FLOAT, [batch, 3, s, s]),
              "source": helper.make_tensor_value_info(s_name, TensorProto.FLOAT, [batch, 512])}
    order = [inputs[t.name] for t in card.inputs]
    # the network's input units -> its output units is a per-channel affine (both ranges are linear in rgb)
    mean, std = np.asarray(card.mean, np.float32), np.asarray(card.std, np.float32)
    k = ((hi - lo) * std).reshape(1, 3, 1, 1).astype(np.float32)          # out = ((x * std + mean) * (hi - lo)) + lo
    b = ((hi - lo) * mean + lo).reshape(1, 3, 1, 1).astype(np.float32)
    inits = [numpy_helper.from_array(tint_matrix(), "W"), numpy_helper.from_array(k, "k"),
             numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array([-1, 3, 1, 1], np.int64), "tshape"),
             numpy_helper.from_array(np.array([TINT_SCALE * (hi - lo)], np.float32), "scale")]
    nodes = [helper.make_node("MatMul", [s_name, "W"], ["t0"]),
             helper.make_node("Mul", ["t0", "scale"], ["t1"]),
             helper.make_node("Reshape", ["t1", "tshape"], ["tint"]),
             helper.make_node("Mul", [t_name, "k"], ["x0"]),
             helper.make_node("Add", ["x0", "b"], ["x1"]),
             helper.make_node("Add", ["x1", "tint"], ["output"])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 3, s, s])]
    if len(card.outputs) > 1:
        nodes += [helper.make_node("Slice", ["x1", "c0", "c1", "c2"], ["m0"]),
                  helper.make_node("Mul", ["m0", "zero"], ["m1"]),
                  helper.make_node("Add", ["m1", "one"], ["mask"])]
        inits += [numpy_helper.from_array(np.array([0], np.int64), "c0"), numpy_helper.from_array(np.array([1], np.int64), "c1"),
                  numpy_helper.from_array(np.array([1], np.int64), "c2"),
                  numpy_helper.from_array(np.array([0.0], np.float32), "zero"), numpy_helper.from_array(np.array([1.0], np.float32), "one")]
        outputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [batch, 1, s, s]))
    if card.source == "emap":
        m = emap if emap is not None else np.random.default_rng(3).normal(0, 1, (512, 512)).astype(np.float32)
        inits.append(numpy_helper.from_array(np.asarray(m, np.float32), "emap"))   # unused by the graph, like the real file's
    graph = helper.make_graph(nodes, f"tiny_{family}", order, outputs, inits)
    return _save(graph, Path(path))


def embedder(path: str | Path, batch: int | str = 1, size: int = 112, out_dim: int = 512) -> Path:
    """An ArcFace-signature embedder (input.1: N x 3 x 112 x 112 -> 683: N x 512, InsightFace's names)."""
    from onnx import TensorProto, helper, numpy_helper

    w = embedder_matrix()
    if out_dim != 512:
        w = w[:, :out_dim]
    nodes = [helper.make_node("AveragePool", ["input.1"], ["p"], kernel_shape=[size // 8] * 2, strides=[size // 8] * 2),
             helper.make_node("Flatten", ["p"], ["f"], axis=1),
             helper.make_node("MatMul", ["f", "W"], ["683"])]
    graph = helper.make_graph(nodes, "tiny_arcface",
                              [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [batch, 3, size, size])],
                              [helper.make_tensor_value_info("683", TensorProto.FLOAT, [batch, out_dim])],
                              [numpy_helper.from_array(w, "W")])
    return _save(graph, Path(path))


def raising_swapper(path: str | Path) -> Path:
    """inswapper's signature, but its run fails: the target is reshaped to (7, -1), a shape computed from
    the data (so no load-time check sees it), and 3 x 128 x 128 is no multiple of 7."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array([0.0], np.float32), "zero"),
             numpy_helper.from_array(np.array([7.0], np.float32), "seven"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest"),
             numpy_helper.from_array(np.array([1], np.int64), "one_d"),
             numpy_helper.from_array(np.array([1, 3, 128, 128], np.int64), "full"),
             numpy_helper.from_array(np.zeros((512, 512), np.float32), "emap")]
    nodes = [helper.make_node("ReduceMax", ["source"], ["mx"], keepdims=0),
             helper.make_node("Mul", ["mx", "zero"], ["z"]),
             helper.make_node("Add", ["z", "seven"], ["k"]),
             helper.make_node("Cast", ["k"], ["ki"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["ki", "one_d"], ["k1"]),
             helper.make_node("Concat", ["k1", "rest"], ["shape"], axis=0),
             helper.make_node("Reshape", ["target", "shape"], ["bad"]),
             helper.make_node("Relu", ["bad"], ["bad2"]),   # keeps ONNX Runtime from fusing the two reshapes
             helper.make_node("Reshape", ["bad2", "full"], ["output"])]
    graph = helper.make_graph(nodes, "raising_inswapper",
                              [helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, 128, 128]),
                               helper.make_tensor_value_info("source", TensorProto.FLOAT, [1, 512])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 128, 128])], inits)
    return _save(graph, Path(path))


def expected_tint(vector: np.ndarray) -> np.ndarray:
    """The RGB shift (0..255 levels, per channel) the tiny swapper adds for a source vector."""
    return (np.asarray(vector, np.float32).reshape(-1) @ tint_matrix()) * TINT_SCALE * 255.0
