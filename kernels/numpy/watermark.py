"""Invisible watermark: a tiled, band-limited spread-spectrum pattern added to luma.

Why this scheme: live video leaves a small share of a frame for marking, so the pattern for a (frame size, payload)
is built once and embedding is two saturating uint8 adds. The pattern is the same on every frame, which
inter-frame codecs keep (static detail is refined, not re-sent), and its band (periods of 10-48 px at
480p) survives VP8/H264 at low bitrate and a 50 % downscale.

Geometry: the tile repeats every `short side / tiles_per_short` pixels, so any uniform rescale of the whole
frame leaves it unchanged once the detector resizes to a canonical short side. A crop changes the tile's
scale (searched over a small range) and its phase (found by FFT cross-correlation with a sync pattern).
Payload: 64 bits + CRC-32 -> K=9 rate-1/3 convolutional code -> one orthonormal band-limited tile per code
bit, summed with the sync tile. Folding all tiles of the frame onto one averages the host away; several
frames average the codec noise too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import cv2
import numpy as np

from kernels import watermark_code as code


@dataclass(frozen=True, slots=True)
class WatermarkConfig:
    seed: int = 0x4C46_5731          # the mark's key: a different seed gives an unrelated pattern
    tile: int = 128                  # canonical pixels per tile side
    tiles_per_short: float = 2.0     # tiles across the frame's shorter side
    band: tuple[float, float] = (5.0, 24.0)  # cycles per tile: periods of 48 .. 10 px at 480p
    amplitude: float = 2.5           # rms luma levels added (PSNR ~40.7 dB before clipping)
    sync_share: float = 0.15         # share of the mark's power in the sync pattern (code energy confirms sync)
    scales: tuple[float, ...] = tuple(np.round(np.arange(0.78, 1.061, 0.02), 3))  # kept share of short side
    peaks: int = 4                   # sync peaks kept per scale
    shortlist: int = 24              # best sync hypotheses re-ranked by the energy the code bits hold there
    candidates: int = 4              # hypotheses decoded per frame
    median_size: int = 5             # canonical px: the detector's estimate of the host (edges kept)
    highpass_sigma: float = 6.0      # canonical px: what the median leaves coarser than this goes too
    envelope_sigma: float = 6.0      # canonical px: local loudness the detector divides by


@dataclass(frozen=True, slots=True)
class WatermarkKey:
    """Tiles derived from a config: the sync tile and one orthonormal tile per code bit."""

    config: WatermarkConfig
    sync: np.ndarray    # (N, N) float32, unit rms
    bits: np.ndarray    # (CODE_BITS, N*N) float32, unit rms, mutually orthogonal and orthogonal to sync
    band_rows: np.ndarray   # rfft bins the tiles live in
    band_cols: np.ndarray
    bits_hat_re: np.ndarray  # (CODE_BITS, bins) float32: 2/N^2 * conj(rfft2(bit tile)) at those bins,
    bits_hat_im: np.ndarray  # split into real and imaginary parts (real BLAS is the fast path)


@dataclass(frozen=True, slots=True)
class Pattern:
    """A ready-to-add pattern for one frame shape and payload: d = pos - neg, HxWx3 uint8 each."""

    pos: np.ndarray
    neg: np.ndarray
    payload: int


@dataclass(frozen=True, slots=True)
class Detection:
    watermarked: bool
    payload: int | None
    confidence: float          # share of code bits that agree with the decoded word, mapped to [0, 1]
    bit_accuracy: float        # same share, raw (0.5 = chance)
    sync_score: float          # sync peak in noise standard deviations
    scale: float               # kept share of the short side that matched (1.0 = uncropped)
    shift: tuple[float, float]
    soft: np.ndarray | None = None   # per code bit soft values of the best hypothesis (for combining frames)


def _band_mask(n: int, band: tuple[float, float]) -> np.ndarray:
    fy = np.fft.fftfreq(n) * n
    fx = np.fft.rfftfreq(n) * n
    r = np.hypot(fy[:, None], fx[None, :])
    return (r >= band[0]) & (r <= band[1])


@functools.lru_cache(maxsize=8)
def make_key(config: WatermarkConfig = WatermarkConfig()) -> WatermarkKey:
    """Orthonormal tiles drawn in the frequency domain: each rfft bin strictly inside the half plane is
    one independent complex degree of freedom, so orthonormalising the band's coefficient vectors (a
    small QR) gives tiles that are orthogonal in pixels too (Parseval) and stay inside the band."""
    n = config.tile
    rng = np.random.default_rng(config.seed)
    kx = np.fft.rfftfreq(n) * n
    mask = _band_mask(n, config.band) & (kx[None, :] > 0) & (kx[None, :] < n / 2)
    rows, cols = np.nonzero(mask)
    count = code.CODE_BITS + 1
    if count * 2 > 2 * len(rows):
        raise ValueError(f"band {config.band} holds {2 * len(rows)} degrees of freedom, too few for {count} tiles")
    q, _ = np.linalg.qr(rng.standard_normal((2 * len(rows), count)))
    spec = np.zeros((count, n, n // 2 + 1), np.complex128)
    spec[:, rows, cols] = q[: len(rows)].T + 1j * q[len(rows):].T
    tiles = np.fft.irfft2(spec, s=(n, n)).reshape(count, -1)
    tiles /= np.sqrt(np.mean(tiles**2, axis=1, keepdims=True))
    tiles = tiles.astype(np.float32)
    hat = np.fft.rfft2(tiles[1:].reshape(-1, n, n).astype(np.float64))[:, rows, cols]
    return WatermarkKey(config=config, sync=tiles[0].reshape(n, n).copy(), bits=np.ascontiguousarray(tiles[1:]),
                        band_rows=rows, band_cols=cols,
                        bits_hat_re=np.ascontiguousarray((hat.real * (2.0 / (n * n))).astype(np.float32)),
                        bits_hat_im=np.ascontiguousarray((-hat.imag * (2.0 / (n * n))).astype(np.float32)))


def tile_for(key: WatermarkKey, payload: int) -> np.ndarray:
    """The (N, N) float32 tile that carries `payload`, rms = config.amplitude."""
    cfg = key.config
    symbols = 1.0 - 2.0 * code.encode_payload(payload).astype(np.float32)
    a_sync = cfg.amplitude * np.sqrt(cfg.sync_share)
    a_bit = cfg.amplitude * np.sqrt((1.0 - cfg.sync_share) / len(symbols))
    t = a_sync * key.sync.ravel() + a_bit * (symbols @ key.bits)
    return t.reshape(key.sync.shape).astype(np.float32)


def tile_period(shape: tuple[int, int], config: WatermarkConfig) -> float:
    return min(shape[:2]) / config.tiles_per_short


LUMA_SCALE = 219.0 / 255.0   # BT.601 limited range: one RGB level on every channel is this much Y


def pattern_for(key: WatermarkKey, shape: tuple[int, int], payload: int, device: object = None) -> Pattern:
    """Lay the payload's tile over a frame of `shape` (H, W) and round it to whole luma levels (`device`: the
    torch twin's parameter; host memory here)."""
    return _pattern(key, shape, payload, 1.0, 3)


def luma_pattern_for(key: WatermarkKey, shape: tuple[int, int], payload: int, device: object = None) -> Pattern:
    """The same mark for the Y plane of a yuv420p frame (H x W pos/neg): what `pattern_for` adds to each
    RGB channel is LUMA_SCALE of it in Y (chroma unchanged), so the decoded RGB carries the same mark."""
    return _pattern(key, shape, payload, LUMA_SCALE, 1)


STRIP_ROWS = 256   # a pattern is built this many rows at a time: its float maps never exist whole


def _pattern(key: WatermarkKey, shape: tuple[int, int], payload: int, scale: float, channels: int) -> Pattern:
    """pos/neg (H x W, or H x W x 3 with each channel the same) of the tile laid over `shape`, times
    `scale`, rounded. Built in strips of rows, so what it holds beyond its result is a strip's float
    maps (a 4096 x 4096 photo's pattern whole would hold about 300 MB of them)."""
    h, w = int(shape[0]), int(shape[1])
    tile = tile_for(key, payload)
    xs, ys = _grid(key, (h, w))
    mapx = np.ascontiguousarray(np.broadcast_to(xs[None, :], (min(h, STRIP_ROWS), w)))
    out_shape = (h, w, 3) if channels == 3 else (h, w)
    pos, neg = np.empty(out_shape, np.uint8), np.empty(out_shape, np.uint8)
    for r0 in range(0, h, STRIP_ROWS):
        r1 = min(h, r0 + STRIP_ROWS)
        mapy = np.ascontiguousarray(np.broadcast_to(ys[r0:r1, None], (r1 - r0, w)))
        d = cv2.remap(tile, mapx[: r1 - r0], mapy, cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)
        if scale != 1.0:
            d *= np.float32(scale)
        p, n_ = _split(np.rint(d).astype(np.int16))
        if channels == 3:
            pos[r0:r1] = p[:, :, None]
            neg[r0:r1] = n_[:, :, None]
        else:
            pos[r0:r1], neg[r0:r1] = p, n_
    return Pattern(pos=pos, neg=neg, payload=payload)


def _split(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.clip(d, 0, 255).astype(np.uint8), np.clip(-d, 0, 255).astype(np.uint8)


def _grid(key: WatermarkKey, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Each column's and each row's place in the tile (float32), for a frame of `shape` (H, W)."""
    h, w = int(shape[0]), int(shape[1])
    n = key.config.tile
    step = n / tile_period((h, w), key.config)
    xs = ((np.arange(w, dtype=np.float32) + 0.5) * step - 0.5) % n
    ys = ((np.arange(h, dtype=np.float32) + 0.5) * step - 0.5) % n
    return xs, ys


def _delta(key: WatermarkKey, shape: tuple[int, int], payload: int) -> np.ndarray:
    """The payload's tile laid over a frame of `shape` (H, W), float32 luma levels."""
    h, w = int(shape[0]), int(shape[1])
    xs, ys = _grid(key, (h, w))
    mapx = np.broadcast_to(xs[None, :], (h, w)).astype(np.float32)
    mapy = np.broadcast_to(ys[:, None], (h, w)).astype(np.float32)
    return cv2.remap(tile_for(key, payload), mapx, mapy, cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)


def embed(image: np.ndarray, pattern: Pattern, out: np.ndarray | None = None) -> np.ndarray:
    """Add the pattern to every channel (a pure luma change: chroma is untouched), saturating at 0/255.
    A Y plane takes a `luma_pattern_for` pattern the same way (`out=` the plane itself marks in place)."""
    if image.shape != pattern.pos.shape or image.dtype != np.uint8:
        raise ValueError(f"pattern is for {pattern.pos.shape} uint8, image is {image.shape} {image.dtype}")
    out = cv2.add(image, pattern.pos, dst=out)
    return cv2.subtract(out, pattern.neg, dst=out)


def embed_luma(y: np.ndarray, pattern: Pattern, out: np.ndarray | None = None) -> np.ndarray:
    """The mark added to a Y plane (a luma pattern from `luma_pattern_for`): `embed` on one channel."""
    return embed(y, pattern, out=out)


def luma(image: np.ndarray) -> np.ndarray:
    if image.ndim == 2:
        return image.astype(np.float32)
    return cv2.cvtColor(np.ascontiguousarray(image[..., :3]), cv2.COLOR_RGB2GRAY).astype(np.float32)


def whiten(y: np.ndarray, config: WatermarkConfig) -> np.ndarray:
    """Take away what the host has most of: its shapes and edges (a median keeps them and drops the fine
    mark), what is left of its low frequencies, and the loudness of busy texture."""
    host = cv2.medianBlur(np.clip(y, 0, 255).astype(np.uint8), config.median_size).astype(np.float32)
    hp = y - host
    hp = hp - cv2.GaussianBlur(hp, (0, 0), config.highpass_sigma)
    env = np.sqrt(cv2.GaussianBlur(hp * hp, (0, 0), config.envelope_sigma)) + 1.0
    return hp / env


def fold(r: np.ndarray, n: int) -> np.ndarray:
    """Sum every n x n tile of `r` onto one (zero-padding the ragged edge)."""
    h, w = r.shape
    ph, pw = -(-h // n) * n, -(-w // n) * n
    pad = np.zeros((ph, pw), np.float32)
    pad[:h, :w] = r
    return pad.reshape(ph // n, n, pw // n, n).sum(axis=(0, 2))


def canonical(image: np.ndarray, config: WatermarkConfig) -> np.ndarray:
    """Luma resized so an uncropped frame's tile is `tile` pixels, then whitened."""
    y = luma(image)
    h, w = y.shape
    f = config.tile * config.tiles_per_short / min(h, w)
    size = (max(1, round(w * f)), max(1, round(h * f)))
    interp = cv2.INTER_AREA if f < 1 else cv2.INTER_LINEAR
    return whiten(cv2.resize(y, size, interpolation=interp), config)


def folded_at_scales(image: np.ndarray, key: WatermarkKey) -> list[tuple[float, np.ndarray]]:
    cfg = key.config
    c = canonical(image, cfg)
    h, w = c.shape
    out = []
    for s in cfg.scales:
        size = (max(1, round(w * s)), max(1, round(h * s)))
        r = c if s == 1.0 else cv2.resize(c, size, interpolation=cv2.INTER_LINEAR)
        out.append((float(s), fold(r, cfg.tile)))
    return out


def sync_peaks(folded: np.ndarray, key: WatermarkKey, count: int) -> list[tuple[float, tuple[float, float]]]:
    """Best cyclic shifts of the sync tile in `folded`, as (peak / noise std, (dy, dx)) to a tenth of a
    pixel: codecs drag the mark along with moving content, so it rarely sits on whole canonical pixels."""
    corr = np.fft.irfft2(np.fft.rfft2(folded) * np.conj(np.fft.rfft2(key.sync)), s=folded.shape)
    flat = corr.ravel()
    idx = np.argpartition(flat, -count)[-count:]
    idx = idx[np.argsort(flat[idx])[::-1]]
    sd = float(np.std(flat)) + 1e-12
    n = folded.shape[0]
    out = []
    for i in idx:
        y, x = int(i // n), int(i % n)
        out.append((float(flat[i] / sd), (y + _vertex(corr[(y - 1) % n, x], corr[y, x], corr[(y + 1) % n, x]),
                                         x + _vertex(corr[y, (x - 1) % n], corr[y, x], corr[y, (x + 1) % n]))))
    return out


def _vertex(a: float, b: float, c: float) -> float:
    den = a - 2.0 * b + c
    return 0.0 if den >= 0 else float(np.clip(0.5 * (a - c) / den, -0.5, 0.5))


def _phase(key: WatermarkKey, shift: tuple[float, float]) -> np.ndarray:
    n = key.config.tile
    ky = np.where(key.band_rows < n // 2, key.band_rows, key.band_rows - n)  # signed row frequency
    return np.exp(2j * np.pi * (ky * (shift[0] / n) + key.band_cols * (shift[1] / n)))


def _raw_bits(spec: np.ndarray, key: WatermarkKey, shift: tuple[float, float]) -> np.ndarray:
    """<folded rolled by -shift, bit tile i> for every i, from the folded tile's in-band spectrum:
    Parseval turns 312 dot products over N*N pixels into two small real matrix products."""
    v = spec * _phase(key, shift)
    return key.bits_hat_re @ v.real.astype(np.float32) - key.bits_hat_im @ v.imag.astype(np.float32)


def band_spectrum(folded: np.ndarray, key: WatermarkKey) -> np.ndarray:
    return np.fft.rfft2(folded)[key.band_rows, key.band_cols]


def code_energy(spec: np.ndarray, key: WatermarkKey, shift: tuple[float, float]) -> tuple[float, np.ndarray]:
    """(share of the folded tile's in-band energy that lies in the code bits' subspace, soft bits).
    Noise spreads over the whole band (share ~ code bits / band dimensions); where the mark sits, the
    code bits hold much more.
    This uses the 85 % of the mark's power that the sync tile does not have, so it confirms sync."""
    y = _raw_bits(spec, key, shift).astype(np.float64)
    n = key.config.tile
    band = 2.0 / (n * n) * float(np.sum(np.abs(spec) ** 2)) + 1e-12
    return float(np.sum(y**2)) / (band * n * n), (y / (float(np.std(y)) + 1e-12)).astype(np.float32)


def decode_soft(soft: np.ndarray) -> tuple[int | None, float]:
    """(payload or None, raw agreement of the soft values with the decoded word's code bits)."""
    info = code.viterbi(soft)
    payload = code.bits_to_payload(info)
    expected = 1.0 - 2.0 * code.encode(info).astype(np.float32)
    agree = float(np.mean(np.sign(soft) == expected))
    return payload, agree


def _detection(payload, agree, z, scale, shift, soft) -> Detection:
    ok = payload is not None
    return Detection(
        watermarked=ok,
        payload=payload if ok else None,
        confidence=max(0.0, 2.0 * agree - 1.0) if ok else 0.0,
        bit_accuracy=agree,
        sync_score=z,
        scale=scale,
        shift=shift,
        soft=soft,
    )


def extract(image: np.ndarray, key: WatermarkKey) -> Detection:
    """Look for the mark in one RGB (or grey) frame of any size."""
    return decide(folded_at_scales(image, key), key)


def decide(folds: list[tuple[float, np.ndarray]], key: WatermarkKey) -> Detection:
    """From the folded tile at each candidate scale: sync peaks -> shortlist -> re-rank by code energy
    -> decode the best few. Shared by both pixel paths."""
    cfg = key.config
    hyps = []
    for i, (s, folded) in enumerate(folds):
        for z, shift in sync_peaks(folded, key, cfg.peaks):
            hyps.append((z, s, shift, i))
    hyps.sort(key=lambda h: -h[0])
    spectra: dict[int, np.ndarray] = {}
    ranked = []
    for z, s, shift, i in hyps[: cfg.shortlist]:
        if i not in spectra:
            spectra[i] = band_spectrum(folds[i][1], key)
        energy, soft = code_energy(spectra[i], key, shift)
        ranked.append((energy, z, s, shift, soft))
    ranked.sort(key=lambda h: -h[0])
    best = None
    for energy, z, s, shift, soft in ranked[: cfg.candidates]:
        payload, agree = decode_soft(soft)
        det = _detection(payload, agree, z, s, shift, soft)
        if det.watermarked:
            return det
        if best is None:
            best = det
    return best  # type: ignore[return-value]


def extract_many(frames, key: WatermarkKey) -> tuple[Detection, int]:
    """Look in several frames: each alone, then their soft values summed (frames that agree on the
    sync position add up, codec noise averages out). Returns the best detection and frames checked."""
    dets = []
    for frame in frames:
        dets.append(extract(frame, key))
    if not dets:
        raise ValueError("no frames to check")
    found = [d for d in dets if d.watermarked]
    if len(dets) > 1:
        soft = np.sum([d.soft for d in dets if d.soft is not None], axis=0)  # each aligned by its own sync
        payload, agree = decode_soft(soft)
        best_sync = max(dets, key=lambda d: d.sync_score)
        combined = _detection(payload, agree, best_sync.sync_score, best_sync.scale, best_sync.shift, soft)
        if combined.watermarked and (not found or all(d.payload == combined.payload for d in found)):
            return combined, len(dets)
    if found:
        votes: dict[int, list[Detection]] = {}
        for d in found:
            votes.setdefault(d.payload, []).append(d)  # type: ignore[arg-type]
        payload = max(votes, key=lambda p: len(votes[p]))
        return max(votes[payload], key=lambda d: d.confidence), len(dets)
    return max(dets, key=lambda d: d.sync_score), len(dets)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float32) - b.astype(np.float32)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0**2 / mse)
