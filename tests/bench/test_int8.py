"""bench/_int8.py: the dynamic-range int8 copy of the landmark net that `livefuse bench faces --int8`
measures. It must really be int8 where it claims (every convolution's weights), load and run in LiteRT,
and still be the same network: on a real face crop its landmarks land within 2 px mean of the shipped
net's [1.0 measured on a moving clip], and its presence stays a face's.
"""

from __future__ import annotations

import numpy as np

from bench._int8 import dynamic_int8_copy
from engines.backends.interpreter import InterpreterRunner
from engines.faces import LandmarkerConfig, MediaPipeLandmarker
from engines.landmarks.networks import LANDMARKS_MEMBER, LandmarkNet, graph_bytes, crop, roi_from_landmarks


def _conv_weight_types(model: bytes) -> set[int]:
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils as fb

    m = fb.convert_bytearray_to_object(bytearray(model))
    g = m.subgraphs[0]
    producer = {out: op for op in g.operators for out in op.outputs}
    types = set()
    for op in g.operators:
        if fb.get_builtin_code_from_operator_code(m.operatorCodes[op.opcodeIndex]) == schema.BuiltinOperator.CONV_2D:
            w = op.inputs[1]
            src = g.tensors[producer[w].inputs[0]] if w in producer else g.tensors[w]   # behind a DEQUANTIZE?
            types.add(src.type)
    return types


def test_int8_copy_is_int8_and_still_finds_the_same_landmarks(astronaut):
    from ai_edge_litert import schema_py_generated as schema

    shipped = graph_bytes(LANDMARKS_MEMBER)
    copy = dynamic_int8_copy(shipped)
    assert _conv_weight_types(shipped) == {schema.TensorType.FLOAT16}
    assert _conv_weight_types(copy) == {schema.TensorType.INT8}

    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1, mode="image"))
    try:
        face = lm.detect(astronaut, 0)[0]
    finally:
        lm.close()
    patch, _ = crop(astronaut, roi_from_landmarks(face.landmarks), 256)
    ref_pts, ref_presence = LandmarkNet(graph=InterpreterRunner(shipped)).run(patch[None])
    pts, presence = LandmarkNet(graph=InterpreterRunner(copy)).run(patch[None])
    err = np.linalg.norm(pts[0, :, :2] - ref_pts[0, :, :2], axis=1)
    assert 0.0 < err.mean() < 2.0, err.mean()          # not the same bytes, but the same network
    assert presence[0] > 0.9 and ref_presence[0] > 0.9
