"""The composition root: the one place that builds the product (shared models, safety parts, one pipeline
per session); `Product` is the hooks the server and `livefuse process` call (streamer/services.py). It alone
knows which stage follows which and which part gets which.

Per frame:  faces (detect + track + smooth) -> face_out (the face rig to VMC / VTube Studio / face events, when a
            session asks) -> parse (a --parser's occluders and mouth interior join each face's keep mask)
            -> fusion (source identity: geometric, then the neural swap when a --swapper is loaded, each as
            the frame's fusion mode says) -> enhance (a --enhancer over each face) -> edits (prompt + sliders)
            -> background (blur, a colour key or a picture behind the person, when a session asks)
            -> watermark (always last, so every output frame carries it).

Models that are expensive and thread-safe are built once per process and shared (source registry with
its identity embedder, the prompt cache with its text encoder, the audit log); stages that keep
per-stream state (the landmarker in video mode, the tracker, colour memory, prompt blending) are built
per session.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, TypeVar

from pathlib import Path

from engines.sources import SourceConfig, SourceRegistry
from engines.catalogue.entries import Resolved, resolve
from engines.enhancer import FaceEnhancer
from engines.face_nets import FaceNetConfig
from engines.face_parser import FaceParser
from engines.swappers.swapper import NeuralSwapper, SwapperConfig, load_swapper
from streamer.config import state_dir
from streamer.web.api.jobs import JobConfig, JobQueue, JobSpec
from streamer.web.api.photos import PhotoConfig, PhotoFuser, PhotoModels, PhotoParts
from streamer.web.api.routes import ApiBackend
from streamer.rpc.access import RpcAccess
from streamer.session.face_map import FaceFollower
from streamer.pipeline.pipeline import Pipeline
from streamer.safety.audit import AuditConfig, AuditLog
from streamer.safety.auth import AccessPolicy, TokenStore, is_admin, slot_release, token_id_of
from streamer.safety.denylist import IdentityDenylist, SourceGate
from streamer.safety.filters import PromptFilter, PromptGate, PromptPolicy, Understand
from streamer.web.kit import SafetyConfig, SafetyKit
from streamer.safety.privacy import purge_session
from streamer.safety.watermark_policy import payload_recorder, resolve_policy
from streamer.services import NullServices, Services, with_hooks
from streamer.session.session import FUSION_MODES, Session
from streamer.pipeline.stages.background import BackgroundStage, BackgroundStageConfig
from streamer.pipeline.stages.edits import EditsStage, EditsStageConfig
from streamer.pipeline.stages.enhance import EnhanceStage, EnhanceStageConfig
from streamer.pipeline.stages.parse import ParseStage, ParseStageConfig
from streamer.pipeline.stages.faces import FaceStage, FaceStageConfig
from streamer.pipeline.stages.face_out import FaceOutStage
from streamer.sinks.face_outputs import FaceOutputs, OutputSettings
from streamer.pipeline.stages.fusion import FusionConfig, FusionStage
from streamer.pipeline.stages.still import StillConfig, StillFaces
from streamer.pipeline.stages.swap import SwapStage, SwapStageConfig
from streamer.pipeline.stages.watermark import WatermarkStage

log = logging.getLogger(__name__)

STAGE_NAMES = ("faces", "fusion", "edits", "background", "watermark")


def default_results() -> str:
    """LIVEFUSE_RESULTS, else the user's state folder (beside the audit log's default)."""
    import os

    explicit = os.environ.get("LIVEFUSE_RESULTS")
    if explicit:
        return explicit
    return str(state_dir() / "results")
PROMPT_READ_TIMEOUT_S = 10.0   # how long a prompt change waits for its reading before terms alone decide


@dataclass(frozen=True, slots=True)
class ProductConfig:
    """What runs on each frame and with which models. `stages` names a subset of STAGE_NAMES (kept in
    that order); leaving out "watermark" is refused: turning marking off is the safety setting
    `SafetyConfig.disable_watermark`, which is logged and audited."""

    stages: tuple[str, ...] = STAGE_NAMES
    faces: FaceStageConfig = field(default_factory=FaceStageConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    swapper: SwapperConfig = field(default_factory=SwapperConfig)   # the user's neural swap model, if any
    swap: SwapStageConfig = field(default_factory=SwapStageConfig)
    fusion_mode: str = ""             # geometric | neural | both; "" = neural with a swapper, else geometric
    # face enhancer and face parser (docs/models.md): a catalogue name (installed with `livefuse models get`)
    # or the user's own file, each recognised by its signature; none by default
    enhancer: FaceNetConfig = field(default_factory=FaceNetConfig)
    enhancer_fidelity: float = 0.5    # CodeFormer's weight input (0 = most restoration, 1 = most like the input)
    enhance: EnhanceStageConfig = field(default_factory=EnhanceStageConfig)
    parser: FaceNetConfig = field(default_factory=FaceNetConfig)
    parse: ParseStageConfig = field(default_factory=ParseStageConfig)
    sources: SourceConfig = field(default_factory=SourceConfig)
    edits: EditsStageConfig = field(default_factory=EditsStageConfig)
    background: BackgroundStageConfig = field(default_factory=BackgroundStageConfig)   # runs once a session asks
    still: StillConfig = field(default_factory=StillConfig)   # off: a still face neither keeps its landmarks nor reuses fusion's and edits' result
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    encoder: str | None = None        # e5, minilm or a local transformers folder; None = e5
    artifact: str | None = None       # its calibration (livefuse calibrate); None = the committed default
    prompt_cache_size: int = 256
    photos: PhotoConfig = field(default_factory=PhotoConfig)   # the REST API's photos: batching, encoding
    results: str = field(default_factory=lambda: default_results())   # clip-job results: s3://bucket/prefix or a folder
    jobs: JobConfig = field(default_factory=JobConfig)
    jobs_redis: str = ""              # redis://host:port/db: clip jobs shared by every replica; "" = this process only
    # the avatar and face-data outputs every session starts with (serve --vmc / --vtube-studio, process
    # --face-data); a session changes its own with set_params.outputs
    outputs: OutputSettings = field(default_factory=OutputSettings)

    def __post_init__(self) -> None:
        unknown = set(self.stages) - set(STAGE_NAMES)
        if unknown:
            raise ValueError(f"unknown stages {sorted(unknown)}; choose from {STAGE_NAMES}")
        if "watermark" not in self.stages:
            raise ValueError("the watermark stage cannot be left out; use the disable_watermark safety setting")
        if self.fusion_mode and self.fusion_mode not in FUSION_MODES:
            raise ValueError(f"fusion mode must be one of {FUSION_MODES}, got {self.fusion_mode!r}")
        if self.fusion_mode in ("neural", "both") and not self.swapper.enabled:
            raise ValueError(f"--fusion {self.fusion_mode} needs a swap model: --swapper FILE.onnx "
                             "--swapper-embedder FILE.onnx")

    @property
    def default_fusion(self) -> str:
        """The fusion mode sessions start in (a session may switch when a swapper is loaded)."""
        return self.fusion_mode or ("neural" if self.swapper.enabled else "geometric")


T = TypeVar("T")


class Product:
    """The process-wide parts, built on first use so a server starts fast and a test pays only for what
    it touches. Thread-safe: sessions are created on the event loop, sources registered in executors."""

    def __init__(self, config: ProductConfig = ProductConfig()) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._registry: SourceRegistry | None = None
        self._prompts: Any = None
        self._prompts_error: str | None = None
        self._kit: SafetyKit | None = None
        self._swapper: NeuralSwapper | None = None
        self._enhancer: FaceEnhancer | None = None
        self._parser: FaceParser | None = None
        self._photos: PhotoFuser | None = None
        self._jobs: JobQueue | None = None
        self._results: Any = None
        self._api: ApiBackend | None = None
        self._rpc_access: RpcAccess | None = None
        self._pose: Any = None

    def _once(self, name: str, build: Callable[[], T]) -> T:
        """The part held in attribute `name`, built by `build` on first use, under the product's lock (a
        part that needs another takes it through the same lock: it is re-entrant)."""
        with self._lock:
            value = getattr(self, name)
            if value is None:
                value = build()
                setattr(self, name, value)
            return value

    # --- shared parts -------------------------------------------------------------------------------
    @property
    def registry(self) -> SourceRegistry:
        def build() -> SourceRegistry:
            from engines.identity import IdentityEmbedder

            return SourceRegistry(self.config.sources, embedder=IdentityEmbedder())

        return self._once("_registry", build)

    @property
    def prompts(self) -> Any:
        """The shared PromptCache, or None when the prompt model cannot load (`prompts_error` says why);
        the stream then runs with slider edits only."""
        def build() -> Any:
            from engines.artifacts import CalibrationError
            from engines.prompt.encoder import EncoderError
            from streamer.session.prompts import load_prompt_cache

            try:
                return load_prompt_cache(self.config.encoder, self.config.artifact, capacity=self.config.prompt_cache_size)
            except (EncoderError, CalibrationError) as exc:
                self._prompts_error = str(exc)
                log.error("prompts unavailable: %s", exc)
                return None

        return None if self._prompts_error is not None else self._once("_prompts", build)

    @property
    def swapper(self) -> NeuralSwapper | None:
        """The neural swapper every session shares (None without --swapper); a file that cannot be used
        raises SwapperRefused naming what was expected."""
        def build() -> NeuralSwapper:
            cfg = self.config.swapper
            swap = resolve(cfg.swapper, "swapper")
            emb = resolve(cfg.embedder, "embedder")
            swapper = load_swapper(replace(
                cfg, swapper=str(swap.path), embedder=str(emb.path),
                card=cfg.card or (swap.entry.card if swap.entry else None),
                swapper_sha256=cfg.swapper_sha256 or swap.sha256, embedder_sha256=cfg.embedder_sha256 or emb.sha256))
            _log_licence("swapper", swap, f"recognised as {swapper.card.name}: {swapper.card.licence}")
            _log_licence("embedder", emb, f"recognised as {swapper.embedder_card.name}: {swapper.embedder_card.licence}")
            return swapper

        return self._once("_swapper", build) if self.config.swapper.enabled else None

    @property
    def enhancer(self) -> FaceEnhancer | None:
        """The face enhancer every session shares (None without --enhancer); a file that cannot be used
        raises FamilyRefused, a catalogue name not installed or altered CatalogueError."""
        def build() -> FaceEnhancer:
            found = resolve(self.config.enhancer.path, "enhancer")
            enhancer = FaceEnhancer(_net_config(self.config.enhancer, found), self.config.enhancer_fidelity)
            _log_licence("enhancer", found, f"recognised as {enhancer.entry.family}: {enhancer.entry.licence.name}")
            return enhancer

        return self._once("_enhancer", build) if self.config.enhancer.enabled else None

    @property
    def pose(self) -> Any:
        """BlazePose (engines/pose_segmentation.py), the background's third vote, shared by every session's
        matte, clip and photo: its networks hold about 70 MB once loaded (on the first read), and its reads
        take turns on its lock, about 27 ms each, once a second per stream with a background."""
        from engines.pose_segmentation import PoseSegmenter

        return self._once("_pose", lambda: PoseSegmenter(self.config.background.matte.pose))

    @property
    def face_parser(self) -> FaceParser | None:
        """The face parser every session shares (None without --parser)."""
        def build() -> FaceParser:
            found = resolve(self.config.parser.path, "parser")
            parser = FaceParser(_net_config(self.config.parser, found))
            _log_licence("parser", found, f"recognised as {parser.entry.family}: {parser.entry.licence.name}")
            return parser

        return self._once("_parser", build) if self.config.parser.enabled else None

    @property
    def prompts_error(self) -> str | None:
        return self._prompts_error

    @property
    def safety(self) -> SafetyKit:
        def build() -> SafetyKit:
            from engines.faces import LandmarkerConfig, MediaPipeLandmarker

            cache = self.prompts
            landmarker = MediaPipeLandmarker(LandmarkerConfig(mode="image")) if self.config.safety.denylist_dir else None
            return build_safety(
                self.config.safety, model=cache.model if cache is not None else None, registry=self.registry,
                landmarker=landmarker,
                understand=(lambda text: cache.wait(text, PROMPT_READ_TIMEOUT_S)) if cache is not None else None)

        return self._once("_kit", build)

    @property
    def photos(self) -> PhotoFuser:
        """The REST API's photo path: its own batched IMAGE-mode landmarker and identity calls, the
        kit's denylist, prompt gate, watermark policy and audit log (built on first use)."""
        def build() -> PhotoFuser:
            models = PhotoModels(self._photo_landmarker, lambda: self.registry.embedder, self.config.photos,
                                 pose=self.pose)
            return PhotoFuser(self.config.photos, models, lambda: self._photo_parts(models))

        return self._once("_photos", build)

    @property
    def results_store(self) -> Any:
        """Where clip-job results and session recordings go (`ProductConfig.results`), opened on first use."""
        def build() -> Any:
            from streamer.storage import open_store

            return open_store(self.config.results)

        return self._once("_results", build)

    def record_session(self, session: Session, video: Any, audio: Any) -> Any:
        """A live session's recording (streamer/sinks/recorder.py) into the results store."""
        from streamer.sinks.recorder import SessionRecording

        return SessionRecording(session.id, video, audio, self.results_store)

    @property
    def jobs(self) -> JobQueue:
        """Clip jobs: each runs the clip path `livefuse process` runs (a session per job, the same
        stages, consent and prompt gates), its result to the results store."""
        def build() -> JobQueue:
            shared: dict[str, Any] = {}
            if self.config.jobs_redis:
                from streamer.web.api.redis_jobs import RedisJobStates, RedisTransport, connect

                client = connect(self.config.jobs_redis)
                shared = {"states": RedisJobStates(client), "transport": lambda store: RedisTransport(client, store)}
            return JobQueue(self.config.jobs, self._run_clip, lambda: self.results_store, audit=self.audit, **shared)

        return self._once("_jobs", build)

    def _run_clip(self, spec: JobSpec, output: Path, on_frame: Any) -> dict[str, Any]:
        from streamer.app.clips import process_file

        services = NullServices(make_pipeline=self.clip_pipeline, register_source=self.register_source,
                            set_prompt=self.set_prompt, audit=self.audit, session_ended=self.session_ended)
        return process_file(str(spec.clip), str(output), services, source=spec.source,
                            source_form={"consent": spec.consent}, prompt=spec.prompt, strength=spec.strength,
                            progress=False, overwrite=True, on_frame=on_frame,
                            session=Session(spec.id, token_id=spec.owner))

    def _photo_landmarker(self) -> Any:
        from engines.backends import select_backend
        from engines.faces import LandmarkerConfig

        return select_backend(self.config.faces.backend).landmarker(
            LandmarkerConfig(max_faces=self.config.sources.max_faces, mode="image"))

    def _photo_parts(self, models: PhotoModels) -> PhotoParts:
        kit = self.safety
        registry = SourceRegistry(self.config.sources, embedder=models.embedder, landmarker_factory=models.landmarker)
        return PhotoParts(sources=SourceGate(registry, kit.sources.denylist, audit=kit.audit), prompts=kit.prompts,
                          prompt_cache=self.prompts, prompts_error=self.prompts_error, watermark=kit.watermark,
                          audit=kit.audit, fusion=self.config.fusion, edits=self.config.edits,
                          enhancer=self.enhancer, parser=self.face_parser, enhance=self.config.enhance,
                          parse=self.config.parse)

    # --- per session --------------------------------------------------------------------------------
    def make_pipeline(self, session: Session, *, live: bool = True) -> Pipeline:
        """A session's stages; `live` (a stream) lets a still face keep its landmarks and reuse fusion's
        and edits' last result (`ProductConfig.still`), a clip (`live=False`) computes every frame afresh."""
        still = self.config.still if live else replace(self.config.still, enabled=False)
        faces = self.config.faces
        if not still.enabled:
            faces = replace(faces, landmarker=replace(faces.landmarker, still_change=0.0))
        stages: list[Any] = []
        for name in STAGE_NAMES:
            if name not in self.config.stages:
                continue
            if name == "faces":
                stages.append(FaceStage(faces))
                # the face rig and the session's avatar outputs: nothing runs until an output is asked for
                stages.append(FaceOutStage(FaceOutputs(self.config.outputs)))
                if self.face_parser is not None:   # before anything changes a face: its keep mask feeds them all
                    stages.append(ParseStage(self.face_parser, self.config.parse))
            elif name == "fusion":
                mode = self.config.default_fusion
                follower = FaceFollower(self.registry.embedder)   # per-face mappings follow the person
                stages.append(FusionStage(self.config.fusion, default_mode=mode, follower=follower,
                                          still=StillFaces(still)))
                if self.swapper is not None:
                    stages.append(SwapStage(self.swapper, self.config.swap, default_mode=mode, follower=follower))
                if self.enhancer is not None:      # off by default on a live stream in host memory (docs/models.md)
                    stages.append(EnhanceStage(self.enhancer, self.config.enhance, live=live))
            elif name == "edits":
                cache = self.prompts
                stages.append(EditsStage(cache, self.config.edits, unavailable=self.prompts_error,
                                         still=StillFaces(still)))
            elif name == "background":
                # a clip's frames are steadied as a stream's, and each face's head read twice as a photo's
                stages.append(BackgroundStage(self.config.background, second_look=not live, pose=self.pose))
            elif name == "watermark":
                stages.append(watermark_stage(self.safety))
        return Pipeline(stages)

    def clip_pipeline(self, session: Session) -> Pipeline:
        """A clip's stages (`livefuse process`, clip jobs): every frame fresh."""
        return self.make_pipeline(session, live=False)

    def register_source(self, session: Session, image_rgb: Any, form: Any) -> dict[str, Any]:
        """Consent, face, denylist, then the session's source (see SourceGate). With a swapper loaded the
        source's vector is made here too (this runs in an executor), so no frame waits for the embedder."""
        result = self.safety.sources.register(session, image_rgb, form)
        source = session.sources.get(result.get("source_id")) if isinstance(result, dict) else None
        if source is not None and self.swapper is not None:
            self.swapper.source_vector(source)
        return result

    def set_prompt(self, session: Session, text: str) -> dict[str, Any]:
        """The prompt is read once, through the cache (the edits stage then finds it ready), and the
        policy filter decides on that reading."""
        from streamer.session.background_prompt import set_background_prompt

        return set_background_prompt(session, text, self.safety.prompts.set_prompt, self.audit)

    def session_ended(self, session: Session) -> None:
        purge_session(session, self.safety.audit)

    def audit(self, event: str, **fields: Any) -> None:
        self.safety.audit(event, **fields)

    def reload_tokens(self) -> None:
        """Re-read the tokens file (revocations take effect at once)."""
        self.safety.tokens.reload()

    def warm_up(self) -> None:
        """Load the shared models now (in an executor at server start) rather than on the first call,
        and the face-mesh topology the fusion and edits stages read on their first face: it comes from
        MediaPipe's connection lists, whose import takes the GIL for about 0.7 s, which on a frame
        thread stops every stream (the first prompt of a session froze its video for 1.4 s)."""
        from engines import mesh

        self.registry, self.prompts, self.safety, self.swapper, self.enhancer, self.face_parser  # noqa: B018 - properties that build on first use
        mesh.loops(), mesh.triangles()
        self.photos.parts()
        self.photos.models.landmarker_model()
        if self.config.jobs_redis:   # a replica of a shared queue runs jobs any replica accepted
            self.jobs.start()

    def close(self) -> None:
        with self._lock:
            if self._prompts is not None:
                self._prompts.close()
            if self._jobs is not None:
                self._jobs.close()
            if self._photos is not None:
                self._photos.close()
            if self._kit is not None:
                self._kit.close()
            if self._swapper is not None:
                self._swapper.close()
            for net in (self._enhancer, self._parser, self._pose):
                if net is not None:
                    net.close()

    # --- the Services hooks the server calls (streamer/services.py) ----------------------------------
    authorize = staticmethod(token_id_of)
    is_admin = staticmethod(is_admin)
    claim = staticmethod(slot_release)

    def session_started(self, session: Session, request: Any) -> None:
        return None

    def startup(self) -> None:
        self.warm_up()

    def shutdown(self) -> None:
        self.close()

    def reload(self) -> None:
        self.reload_tokens()

    @property
    def record(self) -> Callable[[Session, Any, Any], Any]:
        return self.record_session

    @property
    def middlewares(self) -> tuple[Any, ...]:
        return self.safety.middlewares()

    @property
    def api(self) -> ApiBackend:
        return self._once("_api", lambda: ApiBackend(photos=self.photos, jobs=self.jobs))

    @property
    def rpc_access(self) -> RpcAccess:
        return self._once("_rpc_access", lambda: RpcAccess(self.safety.tokens, self.safety.access))

def build_safety(config: SafetyConfig, *, model: Any, registry: SourceRegistry, landmarker: Any,
                 understand: Understand | None = None) -> SafetyKit:
    """Every safety part from its settings, all writing to one audit log. `model` is the prompt model
    whose encoder embeds the policy's examples (None: terms and patterns only); `registry` the product's
    SourceRegistry (with its identity embedder); `landmarker` reads the denylist's reference photos."""
    key = Path(config.audit_key_file).read_bytes().strip() if config.audit_key_file else None
    audit = AuditLog(AuditConfig(config.audit_path, key=key, stdout=config.audit_stdout))
    policy = resolve_policy(disable=config.disable_watermark, server_id=config.server_id,
                            reason=config.disable_reason, audit=audit)
    prompts = PromptGate(PromptFilter(PromptPolicy.load(config.policy_path), model), audit=audit, understand=understand)
    deny = IdentityDenylist(config.denylist_dir, registry.embedder, landmarker) if config.denylist_dir else None
    sources = SourceGate(registry, deny, audit=audit)
    tokens = TokenStore.load(config.tokens_file) if config.tokens_file else TokenStore()
    access = AccessPolicy.for_host(config.host, public_hosts=config.public_hosts, tokens=bool(config.tokens_file),
                                   open_loopback=config.open_loopback, allowed_origins=tuple(config.allowed_origins))
    return SafetyKit(config, audit, policy, prompts, sources, tokens, access)


def _net_config(config: FaceNetConfig, found: Resolved) -> FaceNetConfig:
    """A model named by catalogue name runs as that entry, pinned to the hash it was installed with."""
    if found.entry is None:
        return replace(config, path=str(found.path))
    return replace(config, path=str(found.path), name=config.name or found.entry.name,
                   sha256=config.sha256 or found.sha256)


def _log_licence(role: str, found: Resolved, recognised: str) -> None:
    """`serve` says under which licence each model it runs is, from the catalogue where it came from there."""
    if found.entry is not None:
        log.info("model licence (%s): %s", role, found.licence_line())
    else:
        log.info("model licence (%s): %s is the user's own file, %s; a file from elsewhere may be under "
                 "other terms", role, found.path.name, recognised)


def watermark_stage(kit: SafetyKit) -> WatermarkStage:
    """One per session pipeline, last; each new payload goes to the audit log."""
    return WatermarkStage(kit.watermark, on_payload=payload_recorder(kit.audit, kit.watermark.bucket_seconds))


def build_services(config: ProductConfig | None = None, *, live: bool = True) -> Services:
    """What `livefuse serve` (`live`) and `livefuse process` (`live=False`: clips) run with: the real
    product's hooks. A --swapper file is loaded (and refused, with SwapperRefused) here, before the server
    or the file run starts."""
    product = Product(config or ProductConfig())
    product.swapper, product.enhancer, product.face_parser  # noqa: B018 - loads and checks the model files now
    return product if live else with_hooks(product, make_pipeline=product.clip_pipeline)
