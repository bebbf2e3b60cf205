"""The watermark's channel code: 64-bit payload + CRC-32, then a K=9 rate-1/3 convolutional code decoded
with soft-decision Viterbi.

Shared by both pixel paths (it runs on a few hundred numbers, not on pixels). The CRC is what bounds
false positives: noise that survives Viterbi decoding still has to match 32 check bits (2^-32 a try).
"""

from __future__ import annotations

import zlib

import numpy as np

PAYLOAD_BITS = 64
CRC_BITS = 32
INFO_BITS = PAYLOAD_BITS + CRC_BITS
CONSTRAINT = 9
POLYS = (0o557, 0o663, 0o711)  # the IS-95 rate-1/3 K=9 generators
TAIL = CONSTRAINT - 1
CODE_BITS = (INFO_BITS + TAIL) * len(POLYS)
_STATES = 1 << TAIL


def _parity(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    out = np.zeros_like(x)
    while np.any(x):
        out ^= x & 1
        x >>= 1
    return out


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """out[state, u] -> (n,) code bits; state = last K-1 input bits, newest in the LSB."""
    state = np.arange(_STATES)[:, None]
    u = np.arange(2)[None, :]
    reg = (state << 1) | u
    out = np.stack([_parity(reg & p) for p in POLYS], axis=-1)  # (64, 2, n)
    return out.astype(np.int8), (reg & (_STATES - 1))


_OUT, _NEXT = _tables()
# For each next state ns: input bit u = ns & 1, predecessors p0 = ns >> 1 and p1 = (ns >> 1) | top bit.
_NS = np.arange(_STATES)
_U = _NS & 1
_P0 = _NS >> 1
_P1 = _P0 | (_STATES >> 1)
_SYM0 = 1.0 - 2.0 * _OUT[_P0, _U].astype(np.float32)  # (64, n) expected symbols (+1 for bit 0)
_SYM1 = 1.0 - 2.0 * _OUT[_P1, _U].astype(np.float32)


def payload_to_bits(payload: int) -> np.ndarray:
    if not 0 <= payload < (1 << PAYLOAD_BITS):
        raise ValueError(f"payload must fit in {PAYLOAD_BITS} bits, got {payload!r}")
    raw = payload.to_bytes(8, "big")
    crc = zlib.crc32(raw)
    word = (payload << CRC_BITS) | crc
    return np.array([(word >> (INFO_BITS - 1 - i)) & 1 for i in range(INFO_BITS)], np.uint8)


def bits_to_payload(bits: np.ndarray) -> int | None:
    """The payload if the CRC matches, else None."""
    word = 0
    for b in np.asarray(bits, np.uint8)[:INFO_BITS]:
        word = (word << 1) | int(b)
    payload, crc = word >> CRC_BITS, word & 0xFFFFFFFF
    return payload if zlib.crc32(payload.to_bytes(8, "big")) == crc else None


def encode(info: np.ndarray) -> np.ndarray:
    """Info bits -> CODE_BITS code bits (zero-tailed so the decoder ends in state 0)."""
    bits = np.concatenate([np.asarray(info, np.uint8), np.zeros(TAIL, np.uint8)])
    state = 0
    out = np.empty((len(bits), len(POLYS)), np.uint8)
    for i, u in enumerate(bits):
        out[i] = _OUT[state, u]
        state = int(_NEXT[state, u])
    return out.reshape(-1)


def encode_payload(payload: int) -> np.ndarray:
    return encode(payload_to_bits(payload))


def viterbi(soft: np.ndarray) -> np.ndarray:
    """Soft symbols (positive means bit 0, magnitude = belief) -> the most likely info bits."""
    n = len(POLYS)
    y = np.asarray(soft, np.float32).reshape(-1, n)
    steps = y.shape[0]
    metric = np.full(_STATES, -np.inf, np.float32)
    metric[0] = 0.0
    choice = np.empty((steps, _STATES), np.bool_)
    for t in range(steps):
        m0 = metric[_P0] + _SYM0 @ y[t]
        m1 = metric[_P1] + _SYM1 @ y[t]
        pick = m1 > m0
        choice[t] = pick
        metric = np.where(pick, m1, m0)
    state = 0  # zero tail
    bits = np.empty(steps, np.uint8)
    for t in range(steps - 1, -1, -1):
        bits[t] = state & 1
        state = int(_P1[state] if choice[t, state] else _P0[state])
    return bits[: steps - TAIL]
