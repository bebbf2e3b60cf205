"""One photo through the live pipeline's stages: the source face through the same consent, face and
denylist gate as a live upload, the prompt through the same policy gate, then faces -> fusion -> edits
-> watermark on the target, and the result encoded as PNG or JPEG.

A photo is one frame with no past: faces are found afresh (IMAGE mode), fusion and edits are built per
request (no colour memory or prompt blend carried from another photo), edits apply in full at once. The
model calls (the landmarker, the identity embedder) go through `PhotoModels`' batchers, so requests that
arrive together share them. Every failure is a `FuseRefused` with an HTTP status and a stable code; a
photo that a stage failed on is an error, never an unfused or unmarked image handed back as a success.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from engines.batching import BatchListener, DynamicBatcher
from engines.edit_plan import colours_for
from engines.edit_vocabulary import EDIT_NAMES, SPECS_BY_NAME
from engines.faces import Face
from engines.pose_segmentation import PoseSegmenter
from engines.prompt.language import MAX_PROMPT_CHARS
from engines.sources import SourceRefused
from kernels.numpy import watermark as np_wm
from streamer.session.face_map import KEEP, FaceMapError, parse_face_map
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.safety.watermark_policy import WatermarkPolicy
from streamer.session.session import Session, frame_context
from streamer.pipeline.stages.background import BackgroundStage
from streamer.pipeline.stages.edits import EditsStage, EditsStageConfig
from streamer.pipeline.stages.fusion import FusionConfig, FusionStage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PhotoConfig:
    """How photo requests share the models, and how results are encoded."""

    batching: bool = True          # False: each request calls the models on its own thread (the baseline)
    max_batch: int = 8             # items per model call at most
    window_ms: float = 4.0         # how long the first call of a batch waits for company
    jpeg_quality: int = 92
    pattern_cache: int = 32        # watermark patterns kept, by (image size, payload) ...
    pattern_cache_bytes: int = 256 << 20   # ... and their bytes at most (a 4096 x 4096 pattern is 96 MiB)
    # (how many photos may be in progress at once is the server's: ServerConfig.max_photos)


class FuseRefused(Exception):
    """A photo request that cannot be served: `status` (HTTP), `code` (stable, machine-readable), the
    message in words; `extra` goes into the JSON reply (a refused prompt's category)."""

    def __init__(self, status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.code = status, code
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})


def source_refusal(exc: SourceRefused, role: str = "source") -> FuseRefused:
    """A SourceRefused as the API's refusal: the live upload's code (`source_no_face`, ...), its status."""
    status = {"too_large": 413, "busy": 503}.get(exc.reason, 422)
    headers = {"Retry-After": "1"} if exc.reason == "busy" else None
    return FuseRefused(status, f"{role}_{exc.reason}", str(exc), headers=headers)


@dataclass(frozen=True, slots=True)
class PhotoRequest:
    source: np.ndarray                 # H x W x 3 uint8 RGB, decoded within the upload limits
    target: np.ndarray
    principal: str                     # the token id (or "loopback") the request acts for
    consent: str = ""                  # the form's consent field, as sent (the gate decides)
    prompt: str = ""
    strength: float = 1.0
    shape: float | None = None         # how far the face's proportions move toward the source's 0..1 (0: texture
                                       # only); None = the server's default (FusionConfig.shape_weight)
    enhance: float | None = None       # the face enhancer's strength 0..1 where one is loaded; None = 1
    edits: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    colours: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))   # makeup shades, as set_params
    # face index in reading order (left to right, as a source's `index`) -> "source" or "keep"; faces not
    # in it get the source
    face_map: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))
    # what goes behind the person (engines.background.BackgroundSpec; None: the photo's own room), and the
    # uploaded picture for it (then the mode is "image")
    background: Any = None
    background_image: np.ndarray | None = None
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    deadline: float | None = None      # time.monotonic() past which the caller no longer waits (a gRPC deadline)


@dataclass(frozen=True, slots=True)
class PhotoResult:
    image: np.ndarray
    request_id: str
    watermark: str                     # the payload every pixel of `image` carries, hex
    faces: int
    fused: list[dict[str, Any]]
    edits: dict[str, float]
    timings: dict[str, float]          # ms per step


def parse_edits(raw: Any) -> dict[str, float]:
    """{"smile": 0.3, ...} -> checked floats, each in its edit's range (-1..1, eye_contact 0..1);
    FuseRefused(400) for unknown names or values."""
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, Mapping):
        raise FuseRefused(400, "bad_request", 'edits must be a JSON object like {"smile": 0.4}')
    out = {}
    for name, value in raw.items():
        if name not in EDIT_NAMES:
            raise FuseRefused(400, "bad_request", f"unknown edit {str(name)[:40]!r}; GET /edits lists them")
        spec = SPECS_BY_NAME[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not spec.low <= value <= spec.high:
            raise FuseRefused(400, "bad_request", f"edit {name!r} must be a number from {spec.low:g} to {spec.high:g}")
        out[name] = float(value)
    return out


def parse_colours(raw: Any) -> dict[str, str]:
    """{"lip_tint": "coral" | "#f0715a"} -> the same, checked against the palette and the coloured edits;
    FuseRefused(400) naming what is wrong."""
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(v, str) for v in raw.values()):
        raise FuseRefused(400, "bad_request", 'colours must be a JSON object like {"lip_tint": "coral"}')
    try:
        colours_for(raw)
    except ValueError as exc:
        raise FuseRefused(400, "bad_request", f"colours: {exc}") from None
    return {str(k): v for k, v in raw.items()}


PHOTO_MAP_CHOICES = ("source", KEEP)


def parse_photo_map(raw: str | None) -> dict[int, str]:
    """The `map` field, "0=keep,1=source": a choice per face index (reading order, 0 = leftmost);
    FuseRefused(400, "bad_map") for anything else."""
    if raw is None or raw.strip() == "":
        return {}
    try:
        out = parse_face_map(raw)
    except FaceMapError as exc:
        raise FuseRefused(400, "bad_map", f"map: {exc}") from None
    for index, choice in out.items():
        if choice not in PHOTO_MAP_CHOICES:
            raise FuseRefused(400, "bad_map", f"map: face {index} asks for {choice[:40]!r}; a photo's faces take "
                              "'source' or 'keep'")
    return out


def reading_order(faces: list[Face], face_map: Mapping[int, str], source_id: str) -> tuple[list[Face], dict[int, str]]:
    """The faces numbered left to right (their track ids), and the session's per-face map for `face_map`;
    FuseRefused(422, "map_bad_index") when it names a face the photo does not have."""
    faces = [replace(f, track_id=i) for i, f in enumerate(sorted(faces, key=lambda f: f.bbox[0]))]
    missing = sorted(i for i in face_map if i >= len(faces))
    if missing:
        raise FuseRefused(422, "map_bad_index", f"map names face {missing[0]}, but the target has {len(faces)} "
                          f"face(s), numbered 0 to {len(faces) - 1} from the left")
    return faces, {i: (source_id if c == "source" else KEEP) for i, c in face_map.items()}


def parse_strength(raw: str | None, name: str = "strength") -> float:
    if raw is None or raw == "":
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise FuseRefused(400, "bad_request", f"{name} must be a number from 0 to 1")
    return value


def parse_optional_share(raw: str | None, name: str) -> float | None:
    """An optional 0..1 form field (`shape`, `enhance`): None when absent or empty (the server's default),
    else checked as `parse_strength` checks."""
    return None if raw is None or raw == "" else parse_strength(raw, name)


def encode_image(image: np.ndarray, media_type: str, jpeg_quality: int = 92) -> bytes:
    import cv2

    bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    if media_type == "image/jpeg":
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)])
    else:
        ok, buf = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 3])
    if not ok:
        raise RuntimeError(f"encoding the result as {media_type} failed")
    return buf.tobytes()


def _each(fn: Callable[[Any], Any]) -> Callable[[list[Any]], list[Any]]:
    """A per-item model as a batch function: each item's error stays that item's."""

    def run(items: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in items:
            try:
                out.append(fn(item))
            except Exception as exc:   # noqa: BLE001 - handed to that item's caller
                out.append(exc)
        return out

    return run


class _BatchedLandmarker:
    """The `detect(image, ts)` / `close()` seam a SourceRegistry asks its factory for, on the batcher."""

    def __init__(self, batcher: DynamicBatcher) -> None:
        self._batcher = batcher

    def detect(self, image: np.ndarray, timestamp_ms: int = 0) -> list[Face]:
        return self._batcher(image)

    def close(self) -> None:
        return None   # the shared landmarker outlives every request


class _BatchedEmbedder:
    """`embed(image, face)` on the identity batcher (the denylist check uses the embedding it returns)."""

    def __init__(self, batcher: DynamicBatcher) -> None:
        self._batcher = batcher

    def embed(self, image: np.ndarray, face: Face) -> np.ndarray:
        return self._batcher((image, face))


class PhotoModels:
    """The photo API's model calls, each behind a `DynamicBatcher`: `landmarks` (one IMAGE-mode
    landmarker shared by every request; its LiteRT files take a batch of one, so a batch runs item by
    item on one thread) and `identity` (dlib's batched descriptor over every source face in the batch)."""

    def __init__(self, landmarker: Callable[[], Any], embedder: Callable[[], Any], config: PhotoConfig = PhotoConfig(),
                 pose: PoseSegmenter | None = None) -> None:
        """`landmarker()` and `embedder()` give the shared models, called on first use (a server starts
        before its models load); `pose` the product's BlazePose (the caller closes it), else one of its own."""
        kw = dict(max_batch=config.max_batch, window_ms=config.window_ms, enabled=config.batching)
        self._get_landmarker, self._get_embedder = landmarker, embedder
        self._landmarker: Any = None
        self._lock = threading.Lock()
        self.landmarks = DynamicBatcher(_each(lambda image: self.landmarker_model().detect(image, 0)), name="landmarks", **kw)
        self.identity = DynamicBatcher(lambda items: self._get_embedder().embed_many(items), name="identity", **kw)
        self.embedder = _BatchedEmbedder(self.identity)
        # BlazePose for the background's third vote: its networks load once (about 60 ms), on the first
        # photo that asks for a background, and every request's matte reads through this one
        self._own_pose = pose is None
        self.pose = PoseSegmenter() if pose is None else pose

    def landmarker_model(self) -> Any:
        with self._lock:
            if self._landmarker is None:
                self._landmarker = self._get_landmarker()
            return self._landmarker

    @property
    def batchers(self) -> tuple[DynamicBatcher, ...]:
        return (self.landmarks, self.identity)

    def landmarker(self, max_faces: int = 4) -> _BatchedLandmarker:
        """For `SourceRegistry(landmarker_factory=...)`."""
        return _BatchedLandmarker(self.landmarks)

    def detect(self, image: np.ndarray) -> list[Face]:
        return self.landmarks(image)

    def add_listener(self, listener: BatchListener) -> None:
        for b in self.batchers:
            b.add_listener(listener)

    def remove_listener(self, listener: BatchListener) -> None:
        for b in self.batchers:
            b.remove_listener(listener)

    def close(self) -> None:
        for b in self.batchers:
            b.close()
        with self._lock:
            landmarker, self._landmarker = self._landmarker, None
        if landmarker is not None:
            landmarker.close()
        if self._own_pose:
            self.pose.close()


class PatternWatermark:
    """The watermark stage for photos: the same policy and kernel as a session's `WatermarkStage`, with
    the patterns of the last few (size, payload) pairs kept, since photos come in many sizes and one
    pattern costs tens of ms to build. The payload's session tag is the principal's (`api:<token id>`),
    so a token's photos in one time bucket share a pattern; the audit record ties payload to request."""

    name = "watermark"

    def __init__(self, policy: WatermarkPolicy, capacity: int = 32, max_bytes: int = 256 << 20) -> None:
        self.policy = policy
        self.key = np_wm.make_key(policy.config)
        self._capacity = max(1, capacity)
        self._max_bytes = max_bytes
        self._patterns: OrderedDict[tuple[tuple[int, int], int], Any] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, state: FrameState, context: Any) -> FrameState:
        if not self.policy.enabled:
            return state
        shape = tuple(state.image.shape[:2])
        payload = self.policy.payload(context.session_id, time.time())
        key = (shape, payload)
        with self._lock:
            pattern = self._patterns.get(key)
            if pattern is not None:
                self._patterns.move_to_end(key)
        if pattern is None:
            pattern = np_wm.pattern_for(self.key, shape, payload)
            with self._lock:
                self._patterns[key] = pattern
                while len(self._patterns) > 1 and (len(self._patterns) > self._capacity or self._bytes() > self._max_bytes):
                    self._patterns.popitem(last=False)   # the newest stays, whatever its size
        state.image = np_wm.embed(state.image, pattern)
        state.watermark = f"{payload:016x}"
        return state

    def _bytes(self) -> int:
        return sum(p.pos.nbytes + p.neg.nbytes for p in self._patterns.values())


class _FoundFaces:
    """The faces step of a photo: the faces the batched landmarker found, handed to the next stages."""

    name = "faces"

    def __init__(self, faces: list[Face]) -> None:
        self.faces = faces

    def __call__(self, state: FrameState, context: Any) -> FrameState:
        state.faces = list(self.faces)
        return state


def api_session_id(principal: str) -> str:
    return f"api:{principal}"


@dataclass(frozen=True, slots=True)
class PhotoParts:
    """The product's parts a photo goes through: `sources` a SourceGate over a registry on the photo
    models (consent, face, denylist, audited), `prompts` the PromptGate (policy, audited), `prompt_cache`
    the shared PromptCache (None with `prompts_error` saying why), the watermark policy, the audit log."""

    sources: Any
    prompts: Any
    prompt_cache: Any
    prompts_error: str | None
    watermark: WatermarkPolicy
    audit: Callable[..., None]
    fusion: FusionConfig = FusionConfig()
    edits: EditsStageConfig = EditsStageConfig()
    enhancer: Any = None               # the shared FaceEnhancer (engines/enhancer.py), if the server has one
    parser: Any = None                 # the shared FaceParser (engines/face_parser.py), if the server has one
    enhance: Any = None                # EnhanceStageConfig; None = its defaults
    parse: Any = None                  # ParseStageConfig; None = its defaults


def _parse_stages(parts: PhotoParts) -> list[Any]:
    """The parse stage where the server has a face parser (its occluders stay live in the photo too)."""
    if parts.parser is None:
        return []
    from streamer.pipeline.stages.parse import ParseStage, ParseStageConfig

    return [ParseStage(parts.parser, parts.parse or ParseStageConfig())]


def _enhance_stages(parts: PhotoParts) -> list[Any]:
    """The enhance stage where the server has a face enhancer: on at strength 1 unless the request says."""
    if parts.enhancer is None:
        return []
    from streamer.pipeline.stages.enhance import EnhanceStage, EnhanceStageConfig

    return [EnhanceStage(parts.enhancer, parts.enhance or EnhanceStageConfig(), live=False)]


class PhotoFuser:
    """`fuse(request) -> PhotoResult`, or FuseRefused. Thread-safe; call it off the event loop."""

    def __init__(self, config: PhotoConfig, models: PhotoModels, parts: Callable[[], PhotoParts]) -> None:
        """`parts()` is called once, on first use (it may load the prompt model and the safety kit)."""
        self.config = config
        self.models = models
        self._get_parts = parts
        self._parts: PhotoParts | None = None
        self._watermark: PatternWatermark | None = None
        self._lock = threading.Lock()

    def parts(self) -> tuple[PhotoParts, PatternWatermark]:
        with self._lock:
            if self._parts is None:
                parts = self._get_parts()
                self._watermark = PatternWatermark(parts.watermark, self.config.pattern_cache, self.config.pattern_cache_bytes)
                self._parts = parts
            return self._parts, self._watermark  # type: ignore[return-value]

    def admit(self, session: Session, source: np.ndarray, consent: str, prompt: str) -> dict[str, Any]:
        """The checks a request passes before any work on its target: the source face through the
        consent / face / denylist gate (into `session`), the prompt through the policy gate. Returns the
        source gate's reply; FuseRefused (audited) otherwise. Clip jobs run it before they are queued."""
        parts, _ = self.parts()
        base = {"request": session.id, "token": session.token_id}
        try:
            reply = parts.sources.register(session, source, {"consent": consent})
        except SourceRefused as exc:
            parts.audit("api_fuse_refused", **base, code=f"source_{exc.reason}")
            raise source_refusal(exc) from None
        if prompt:
            if parts.prompt_cache is None:
                raise FuseRefused(503, "prompt_unavailable", "prompts are unavailable on this server (its log says why)")
            decision = parts.prompts.set_prompt(session, prompt)
            if decision.get("allowed") is False:
                parts.audit("api_fuse_refused", **base, code="prompt_refused", category=decision.get("category"))
                raise FuseRefused(422, "prompt_refused", str(decision.get("reason")),
                                  extra={k: decision.get(k) for k in ("category", "clause", "method")})
            if decision.get("understood") is False:
                parts.audit("api_fuse_refused", **base, code="prompt_not_understood")
                raise FuseRefused(422, "prompt_not_understood", str(decision.get("reason")))
        return reply

    @staticmethod
    def _in_time(req: PhotoRequest, parts: PhotoParts, step: str) -> None:
        """The work stops before `step` once the caller's deadline has passed (audited, so the record
        says the photo was given up, not lost)."""
        if req.deadline is not None and time.monotonic() >= req.deadline:
            parts.audit("api_fuse_refused", request=req.request_id, token=req.principal, code="deadline_exceeded",
                        step=step)
            raise FuseRefused(504, "deadline_exceeded", f"the caller's deadline passed before {step}")

    def fuse(self, req: PhotoRequest) -> PhotoResult:
        parts, watermark = self.parts()
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        session = Session(req.request_id, token_id=req.principal)
        base = {"request": req.request_id, "token": req.principal}
        self._in_time(req, parts, "admit")
        reply = self.admit(session, req.source, req.consent, req.prompt)
        self._in_time(req, parts, "detect")
        timings["admit_ms"] = (time.perf_counter() - t0) * 1000.0
        t1 = time.perf_counter()
        try:
            faces = self.models.detect(req.target)
        except Exception:
            log.exception("request %s: finding the target's faces failed", req.request_id)
            raise FuseRefused(500, "faces_failed", "finding the target's faces failed (the server's log says why)") from None
        timings["detect_ms"] = (time.perf_counter() - t1) * 1000.0
        if not faces:
            parts.audit("api_fuse_refused", **base, code="target_no_face")
            raise FuseRefused(422, "target_no_face", "no face found in the target image")
        self._in_time(req, parts, "fusion")
        source_id = reply["source_id"]
        faces, face_sources = reading_order(faces, req.face_map, source_id)
        session.update(strength=req.strength, shape=req.shape, edits=dict(req.edits), colours=dict(req.colours),
                       source_id=source_id, face_sources=face_sources, enhance=req.enhance)
        events: list[dict[str, Any]] = []
        context = frame_context(session.controls, session.sources, session_id=api_session_id(req.principal),
                                notify=events.append)
        if req.background is not None or req.background_image is not None:
            spec = req.background
            if req.background_image is not None:
                from engines.background import BackgroundSpec

                spec = BackgroundSpec(mode="image", image_id=session.add_background(req.background_image))
            session.update(background=spec)
            context = replace(context, controls=session.controls, backgrounds=session.backgrounds)
        pipeline = Pipeline([_FoundFaces(faces), *_parse_stages(parts), FusionStage(parts.fusion),
                             *_enhance_stages(parts),
                             EditsStage(parts.prompt_cache, replace(parts.edits, blend_frames=1),   # no next frame to blend over
                                        unavailable=parts.prompts_error),
                             *([BackgroundStage(live=False, pose=self.models.pose)]
                               if context.controls.background is not None else []),
                             watermark])
        state = pipeline(FrameState(image=np.ascontiguousarray(req.target)), context)
        pipeline.close()
        if state.errors:
            stage, why = next(iter(state.errors.items()))
            parts.audit("api_fuse_failed", **base, stage=stage, error=why[:200])
            log.error("request %s: the %s step failed: %s", req.request_id, stage, why)
            raise FuseRefused(500, f"{stage}_failed", f"the {stage} step failed (the server's log says why)")
        if watermark.policy.enabled and state.watermark is None:   # never hand back an unmarked image
            raise FuseRefused(500, "watermark_failed", "the result could not be watermarked")
        failed = [e for e in events if e.get("type") == "error"]
        if failed and req.prompt:
            log.error("request %s: the prompt was not applied: %s", req.request_id, failed[0].get("message"))
            raise FuseRefused(503, "prompt_unavailable", "the prompt could not be applied on this server (its log says why)")
        timings.update({f"{k}_ms": round(v, 2) for k, v in state.timings.items() if k != "faces"})
        timings["total_ms"] = (time.perf_counter() - t0) * 1000.0
        timings = {k: round(v, 2) for k, v in timings.items()}
        parts.audit("api_fuse", **base, source_id=source_id, faces=len(faces), fused=len(state.fused),
                   strength=req.strength, prompt=req.prompt[:MAX_PROMPT_CHARS], edits=dict(req.edits),
                   watermark=state.watermark, size=[int(req.target.shape[1]), int(req.target.shape[0])],
                   ms=timings["total_ms"])
        session.clear_sources()
        return PhotoResult(image=state.image, request_id=req.request_id, watermark=state.watermark or "",
                           faces=len(faces), fused=list(state.fused), edits=dict(state.edits), timings=timings)

    def close(self) -> None:
        self.models.close()
