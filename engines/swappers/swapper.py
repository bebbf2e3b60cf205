"""The neural swapper: the user's swap model and its ArcFace-class embedder, loaded once per process and
shared by every session.

prepare -> forward -> normalise, per card: a face is aligned from its 478 landmarks (5 points) onto the
card's template at the card's crop size, scaled to the card's value range and channel order, run, and
brought back to RGB 0..255. The source vector is made once per source face and cached: the embedder's
512-d output, L2-normalised, and for inswapper multiplied by the file's embedding map and normalised
again. Faces from all sessions meet in one `ArrayBatchRunner`, so a GPU sees one call per batch; a file
with a fixed batch of 1 runs the gathered rows one after another inside that call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engines.align import align_crop
from engines.backends.onnxruntime import OrtModel, OrtSettings, OrtUnavailable
from engines.batching import ArrayBatchRunner
from engines.face_masks import region_mask
from kernels.numpy.masks import inner_ramp
from engines.swappers.cards import Signature, SwapCard, SwapperRefused, check_file, recognise

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SwapperConfig:
    """Where the user's files are and how they run. Empty `swapper` = no neural fusion."""

    swapper: str = ""              # the swap model (.onnx)
    embedder: str = ""             # its identity embedder (.onnx, ArcFace signature: 1x3x112x112 -> 512)
    card: str | None = None        # force a card when a signature fits several (simswap_256 / ghost_256)
    swapper_sha256: str = ""       # optional pins: a file with another hash is refused
    embedder_sha256: str = ""
    device: str = "auto"           # auto, cpu, cuda, cuda:N, tensorrt (engines/backends/onnxruntime.py)
    threads: int = 0               # ONNX Runtime CPU threads (0 = its default)
    trt_cache: str = ""            # TensorRT engine cache folder
    max_batch: int = 32            # faces per model call, across sessions
    window_ms: float = 2.0         # how long a call waits for others to join its batch
    warm_up: bool = True           # one run at load, so the first live frame is not the slow one
    source_cache: int = 64         # source vectors kept

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.window_ms < 0 or self.source_cache < 1:
            raise ValueError("max_batch and source_cache must be at least 1, window_ms at least 0")
        if self.swapper and not self.embedder:
            raise ValueError("--swapper needs --swapper-embedder: the ArcFace-class model that turns the source "
                             "photo into the vector the swapper takes")

    @property
    def enabled(self) -> bool:
        return bool(self.swapper)


def l2(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def embedding_map(path: str) -> np.ndarray:
    """inswapper's 512x512 embedding map: the file's last initializer, as InsightFace reads it. A file whose
    last initializer is not 512 x 512 is refused rather than guessed at."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise OrtUnavailable("reading inswapper's embedding map needs the onnx package: pip install 'livefuse[swap]'") from None
    model = onnx.load(path)
    inits = model.graph.initializer
    last = inits[-1] if len(inits) else None
    if last is None or tuple(last.dims) != (512, 512):
        got = "no initializer" if last is None else f"{last.name!r} of shape {tuple(last.dims)}"
        raise SwapperRefused(f"{Path(path).name}: an inswapper_128 file keeps its 512x512 embedding map (emap) as its "
                             f"last initializer; this one ends with {got}")
    return numpy_helper.to_array(last).astype(np.float32)


def to_network(crops: np.ndarray, card: SwapCard) -> np.ndarray:
    """N x S x S x 3 uint8 RGB -> N x 3 x S x S float32 in the card's range and channel order."""
    x = crops.astype(np.float32) * np.float32(1.0 / 255.0)
    if card.bgr:
        x = x[..., ::-1]
    x = (x - np.asarray(card.mean, np.float32)) / np.asarray(card.std, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def from_network(y: np.ndarray, card: SwapCard) -> np.ndarray:
    """N x 3 x S x S network output -> N x S x S x 3 float32 RGB in [0, 255]."""
    lo, hi = card.output_range
    x = (np.asarray(y, np.float32).transpose(0, 2, 3, 1) - lo) * np.float32(255.0 / (hi - lo))
    if card.bgr:
        x = x[..., ::-1]
    return np.clip(x, 0.0, 255.0)


def crop_landmarks(landmarks: np.ndarray, m: np.ndarray) -> np.ndarray:
    lm = np.asarray(landmarks, np.float32)[:, :2]
    return lm @ m[:, :2].T + m[:, 2]


def paste_mask(lm_crop: np.ndarray, size: int, *, keep_mouth: bool, keep_eyes: bool,
               erode: float, feather: float) -> np.ndarray:
    """Where the swapped crop replaces the live one, float32 (size, size) in [0, 1]: the face oval pulled in
    by `erode` and softened by `feather` (fractions of the face width) inside it, so nothing beyond the
    oval changes; less the live mouth opening and eyes when kept. Drawn from the live landmarks, as the
    geometric fusion's masks are."""
    fw = float(np.ptp(lm_crop[:, 0]))
    keep = (["lips_inner"] if keep_mouth else []) + (["left_eye", "right_eye"] if keep_eyes else [])
    oval = region_mask((size, size), lm_crop, ["face_oval"]) > 0.5
    sig = max(0.5, feather * fw)
    face = inner_ramp(oval, erode * fw, 2.5 * sig)
    if keep:
        kept = region_mask((size, size), lm_crop, keep, feather_px=max(0.5, 0.3 * sig))
        kept = np.clip(kept * 1.6, 0.0, 1.0)   # grown a little past the lip/lid line
        face = face * (1.0 - kept)
    return face.astype(np.float32)


class NeuralSwapper:
    """Both user files loaded and recognised; thread-safe; `close()` stops the batch worker."""

    def __init__(self, config: SwapperConfig) -> None:
        if not config.enabled:
            raise ValueError("no swapper file given")
        self.config = config
        settings = OrtSettings(device=config.device, threads=config.threads, trt_cache=config.trt_cache)
        spath = check_file(config.swapper, config.swapper_sha256 or None)
        epath = check_file(config.embedder, config.embedder_sha256 or None)
        self.model = OrtModel(spath, settings)
        self.card = recognise(Signature(self.model.inputs, self.model.outputs), "swapper",
                              file_name=spath.name, card=config.card)
        self.embedder = OrtModel(epath, settings)
        self.embedder_card = recognise(Signature(self.embedder.inputs, self.embedder.outputs), "embedder",
                                       file_name=epath.name)
        self.emap = embedding_map(str(spath)) if self.card.source == "emap" else None
        self.template = self.card.template
        self._embed_template = self.embedder_card.template
        self._target = next(n for n, s in self.model.inputs if len(s) == 4)
        self._source = next(n for n, s in self.model.inputs if len(s) == 2)
        self._emb_in = self.embedder.inputs[0][0]
        self._lock = threading.Lock()
        self._embed_lock = threading.Lock()
        self._vectors: OrderedDict[int, tuple[Any, np.ndarray]] = OrderedDict()
        self.embed_calls = 0
        self._runner = ArrayBatchRunner(self._forward, max_batch=config.max_batch, window_ms=config.window_ms)
        self.warm_up_ms: float | None = None
        if config.warm_up:
            self.warm_up()
        log.info("neural swapper %s (%s) with embedder %s on %s", spath.name, self.card.name, epath.name,
                 ", ".join(self.model.providers))

    @property
    def stats(self):
        return self._runner.stats

    # -- source vectors ------------------------------------------------------------------------------
    def embed(self, crop112: np.ndarray) -> np.ndarray:
        """Raw embedder output (512,) for one aligned 112 x 112 RGB uint8 crop."""
        x = to_network(crop112[None], self.embedder_card)
        self.embed_calls += 1
        return self.embedder.run({self._emb_in: x})[0].reshape(-1)

    def vector_from_embedding(self, embedding: np.ndarray) -> np.ndarray:
        """The swapper's `source` input from a raw embedding: normalised, and for inswapper mapped through its
        embedding map and normalised again."""
        v = l2(np.asarray(embedding, np.float32).reshape(1, -1))
        if self.emap is not None:
            v = l2(v @ self.emap)
        return v.reshape(-1)

    def embed_image(self, image: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
        """Raw embedding of the face with these landmarks, aligned to the embedder's template."""
        return self.embed(align_crop(image, landmarks, self._embed_template)[0])

    def source_vector(self, source: Any) -> np.ndarray:
        """The cached `source` input for a registered source face (its canonical texture and landmarks)."""
        key = id(source)
        with self._lock:
            hit = self._vectors.get(key)
            if hit is not None and hit[0] is source:
                self._vectors.move_to_end(key)
                return hit[1]
        with self._embed_lock:   # sessions meeting the same new source embed it once, not once each
            with self._lock:
                hit = self._vectors.get(key)
                if hit is not None and hit[0] is source:
                    return hit[1]
            vec = self.vector_from_embedding(self.embed_image(source.texture, source.landmarks))
            vec.setflags(write=False)
            with self._lock:
                self._vectors[key] = (source, vec)   # the record is held, so its id is not reused while cached
                while len(self._vectors) > self.config.source_cache:
                    self._vectors.popitem(last=False)
        return vec

    # -- swapping ------------------------------------------------------------------------------------
    def crop(self, image: np.ndarray, landmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The face aligned to the card's template: (S x S x 3 uint8, 2x3 frame -> crop)."""
        return align_crop(image, landmarks, self.template)

    def swap(self, crops: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """N aligned crops (uint8 RGB) with their source vectors -> N swapped crops (float32 RGB 0..255) and
        the model's own mask (N x S x S in [0, 1]) when the family has one."""
        target = to_network(np.asarray(crops), self.card)
        outs = self._runner((target, np.asarray(vectors, np.float32).reshape(len(target), -1)))
        rgb = from_network(outs[0], self.card)
        mask = np.clip(outs[1][:, 0], 0.0, 1.0) if len(outs) > 1 else None
        return rgb, mask

    def _forward(self, x: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
        target, source = x
        if self.model.dynamic_batch or len(target) == 1:
            return self.model.run({self._target: target, self._source: source})
        rows = [self.model.run({self._target: target[i:i + 1], self._source: source[i:i + 1]}) for i in range(len(target))]
        return [np.concatenate([r[k] for r in rows]) for k in range(len(rows[0]))]

    def warm_up(self) -> float:
        """One run of each model on blank input (ONNX Runtime allocates, TensorRT builds or loads its
        engine); returns the milliseconds it took."""
        t = time.perf_counter()
        s = self.template.size
        self._forward((to_network(np.zeros((1, s, s, 3), np.uint8), self.card), np.full((1, 512), 1 / 512 ** 0.5, np.float32)))
        self.embed(np.zeros((112, 112, 3), np.uint8))
        self.embed_calls -= 1
        self.warm_up_ms = (time.perf_counter() - t) * 1000.0
        return self.warm_up_ms

    def describe(self) -> dict[str, Any]:
        return {"card": self.card.name, "embedder": self.embedder_card.name, "size": self.card.size,
                "providers": list(self.model.providers), "dynamic_batch": self.model.dynamic_batch,
                "licence": self.card.licence}

    def close(self) -> None:
        self._runner.close()
        with self._lock:
            self._vectors.clear()


def load_swapper(config: SwapperConfig) -> NeuralSwapper:
    """Build the swapper, turning a runtime that cannot load into a SwapperRefused with the reason."""
    try:
        return NeuralSwapper(config)
    except OrtUnavailable as exc:
        raise SwapperRefused(str(exc)) from None


__all__: Sequence[str] = ("NeuralSwapper", "SwapperConfig", "SwapperRefused", "load_swapper",
                          "paste_mask", "crop_landmarks", "to_network", "from_network", "l2")
