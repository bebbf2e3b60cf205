"""Tiny ONNX models with exactly the I/O signature a catalogue entry names (engines/catalogue/models.json),
built offline with onnx's helper API, so tests and benches run the download, recognition and the enhancer
and parser stages without any real weights. Each computes something a test can check:

- enhancer (GFPGAN, RestoreFormer++, GPEN, CodeFormer): output = input + DELTA in network units (a uniform
  brightening of the crop: DELTA * 127.5 levels in [-1, 1] units); CodeFormer's adds DELTA * 2 * weight.
- parser, BiSeNet 19 classes: a 1x1 convolution of the normalised RGB: class 0 (background) where green
  beats red by a wide margin (a green occluder), class 11 (mouth interior) where the pixel is dark, class 12
  (upper lip) where the pixel is magenta (red and blue far above green), class 1 (skin) elsewhere.
- parser, XSeg: face (1) everywhere but where green beats red (0), NHWC, BGR in [0, 1].
- swapper and embedder entries are built by bench/_swap_models.py (by card).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DELTA = 0.2                 # enhancer shift, network units ([-1, 1] range: 25.5 levels)
GREEN_MARGIN = 2.0          # parser: background logit = 2 * (g' - r') - 2 * GREEN_MARGIN (normalised units)
MAGENTA_BIAS = -8.0         # parser: lips logit = 2 (r' + b') - 4 g' - 8 (magenta: about +10; skin: about -7)
DARK_SUM = -3.0             # parser: mouth logit = -(r' + g' + b') + DARK_SUM (dark pixels: normalised sum under -3)


def _save(graph, path: Path) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def enhancer(path: str | Path, size: int = 512, batch: int | str = 1, weight_input: bool = False,
             output_name: str = "output") -> Path:
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])
    y = helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [batch, 3, size, size])
    inits = [numpy_helper.from_array(np.array([DELTA], np.float32), "delta")]
    inputs = [x]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("weight", TensorProto.DOUBLE, [1]))
        inits.append(numpy_helper.from_array(np.array([2.0], np.float32), "two"))
        nodes = [helper.make_node("Cast", ["weight"], ["w32"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["w32", "two"], ["w2"]),
                 helper.make_node("Mul", ["delta", "w2"], ["d"]),
                 helper.make_node("Add", ["input", "d"], [output_name])]
    else:
        nodes = [helper.make_node("Add", ["input", "delta"], [output_name])]
    return _save(helper.make_graph(nodes, "tiny_enhancer", inputs, [y], inits), Path(path))


def bisenet(path: str | Path, size: int = 512, batch: int | str = 1) -> Path:
    """19-class logits from a 1x1 convolution (see the module docstring)."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.zeros((19, 3, 1, 1), np.float32)
    b = np.full((19,), -20.0, np.float32)
    b[1] = 0.0                                   # skin: the default
    w[0, 0, 0, 0], w[0, 1, 0, 0], b[0] = -2.0, 2.0, -GREEN_MARGIN * 2.0   # green occluder -> background
    w[11, :, 0, 0], b[11] = -1.0, DARK_SUM       # dark -> mouth interior
    w[12, :, 0, 0], b[12] = (2.0, -4.0, 2.0), MAGENTA_BIAS   # magenta -> lips
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 19, size, size])
    nodes = [helper.make_node("Conv", ["input", "W", "B"], ["output"], kernel_shape=[1, 1])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    return _save(helper.make_graph(nodes, "tiny_bisenet", [x], [y], inits), Path(path))


def reference_classes(x_nchw: np.ndarray) -> np.ndarray:
    """What the tiny BiSeNet computes, in NumPy (N x H x W class ids): the reference tests hold it to."""
    r, g, bl = x_nchw[:, 0], x_nchw[:, 1], x_nchw[:, 2]
    logits = np.full((x_nchw.shape[0], 19) + r.shape[1:], -20.0, np.float32)
    logits[:, 1] = 0.0
    logits[:, 0] = -2.0 * r + 2.0 * g - GREEN_MARGIN * 2.0
    logits[:, 11] = -(r + g + bl) + DARK_SUM
    logits[:, 12] = 2.0 * r - 4.0 * g + 2.0 * bl + MAGENTA_BIAS
    return logits.argmax(axis=1)


def xseg(path: str | Path, size: int = 256, batch: int | str = 1) -> Path:
    """Face probability, NHWC BGR in [0, 1]: sigmoid(20 * (r - g) + 8): ~0 where green beats red by 0.4."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.array([[0.0], [-20.0], [20.0]], np.float32)    # B, G, R -> 20 * (R - G)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, size, size, 3])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, size, size, 1])
    nodes = [helper.make_node("MatMul", ["input", "W"], ["m"]),
             helper.make_node("Add", ["m", "B"], ["z"]),
             helper.make_node("Sigmoid", ["z"], ["output"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([8.0], np.float32), "B")]
    return _save(helper.make_graph(nodes, "tiny_xseg", [x], [y], inits), Path(path))


def for_entry(entry, folder: str | Path, batch: int | str = 1) -> Path:
    """A tiny file for catalogue `entry`, named as the catalogue names it, with its exact signature."""
    from bench import _swap_models as sm

    path = Path(folder) / entry.file
    if entry.kind == "swapper":
        return sm.swapper(path, entry.card, batch=batch)
    if entry.kind == "embedder":
        return sm.embedder(path, batch=batch)
    if entry.kind == "enhancer":
        size = entry.inputs[0].shape[-1]
        return enhancer(path, size=size, batch=batch, weight_input=len(entry.inputs) > 1)
    if entry.card == "bisenet_19":
        return bisenet(path, size=entry.inputs[0].shape[-1], batch=batch)
    if entry.card == "xseg":
        return xseg(path, size=entry.inputs[0].shape[1], batch=batch)
    raise ValueError(f"no tiny model for {entry.name} ({entry.kind}, {entry.card})")
