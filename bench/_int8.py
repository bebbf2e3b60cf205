"""A dynamic-range int8 copy of a bundled .tflite network, for `livefuse bench faces --int8`: is an int8
landmark net worth its accuracy cost here? (On this machine's CPU it is not: slower and less accurate;
docs/faces.md.)

The bundle stores weights as float16 constants behind DEQUANTIZE ops. The copy gives each CONV_2D
symmetric per-output-channel int8 weights (scale = max |w| / 127) and a float32 bias, so XNNPACK runs it
with activations quantized on the fly (its QD8 kernels); everything else stays as shipped. Not used by
the product: a measurement, kept so it can be rerun when LiteRT or the CPU changes.
"""

from __future__ import annotations

import numpy as np


def dynamic_int8_copy(model: bytes) -> bytes:
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils as fb

    m = fb.convert_bytearray_to_object(bytearray(model))
    g = m.subgraphs[0]
    producer = {out: i for i, op in enumerate(g.operators) for out in op.outputs}
    conv = schema.BuiltinOperator.CONV_2D

    def constant(data: np.ndarray, shape, type_: int, name: bytes, quantization=None) -> int:
        buf = schema.BufferT()
        buf.data = np.frombuffer(data.tobytes(), np.uint8)
        m.buffers.append(buf)
        t = schema.TensorT()
        t.shape, t.type, t.buffer, t.name = np.array(shape, np.int32), type_, len(m.buffers) - 1, name
        t.quantization = quantization
        g.tensors.append(t)
        return len(g.tensors) - 1

    def fp16_source(tensor_index: int):
        """The float16 constant behind a DEQUANTIZE op feeding this input, or None."""
        op_index = producer.get(tensor_index)
        if op_index is None:
            return None
        src = g.tensors[g.operators[op_index].inputs[0]]
        if src.type != schema.TensorType.FLOAT16:
            return None
        return np.frombuffer(bytes(m.buffers[src.buffer].data), np.float16).astype(np.float32).reshape(src.shape), src

    for op in g.operators:
        if fb.get_builtin_code_from_operator_code(m.operatorCodes[op.opcodeIndex]) != conv:
            continue
        found = fp16_source(op.inputs[1])
        if found is None:
            continue
        w, src = found
        scale = np.maximum(np.abs(w).reshape(len(w), -1).max(axis=1), 1e-12) / 127.0
        q = np.clip(np.round(w / scale[:, None, None, None]), -127, 127).astype(np.int8)
        qp = schema.QuantizationParametersT()
        qp.scale, qp.zeroPoint, qp.quantizedDimension = scale.astype(np.float32), np.zeros(len(scale), np.int64), 0
        op.inputs[1] = constant(q, w.shape, schema.TensorType.INT8, (src.name or b"w") + b"_int8", qp)
        if len(op.inputs) > 2 and op.inputs[2] >= 0:   # XNNPACK's QD8 convolution wants a float32 bias
            bias = fp16_source(op.inputs[2])
            if bias is not None:
                b, bsrc = bias
                op.inputs[2] = constant(b, b.shape, schema.TensorType.FLOAT32, (bsrc.name or b"b") + b"_f32")
    read = {i for op in g.operators for i in op.inputs} | set(g.outputs)
    g.operators = [op for op in g.operators if any(o in read for o in op.outputs)]   # orphaned DEQUANTIZEs
    return bytes(fb.convert_object_to_bytearray(m))
