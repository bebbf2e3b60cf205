"""`livefuse serve`: the web page, WebRTC signaling (/offer, WHIP, WHEP), control and metrics."""

from __future__ import annotations

import argparse
import errno
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from streamer.config import H264_PRESETS

if TYPE_CHECKING:  # pragma: no cover
    from streamer.config import ServerConfig

HELP = "serve the page and the live stream (http://127.0.0.1:8080 by default)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("every option can also be set as LIVEFUSE_<NAME> in the environment")
    g.add_argument("--host", help="bind address (default 127.0.0.1; loopback gathers only 127.0.0.1 ICE candidates)")
    g.add_argument("--port", type=int, help="port (default 8080)")
    g.add_argument("--cert", dest="tls_cert", help="TLS certificate (PEM); browsers need https off localhost")
    g.add_argument("--key", dest="tls_key", help="TLS private key (PEM)")
    g.add_argument("--codec", choices=["VP8", "H264", "vp8", "h264"], help="preferred returned video codec (default VP8)")
    g.add_argument("--min-bitrate", type=int, help="encoder lower bound, bits/s (default 250000)")
    g.add_argument("--max-bitrate", type=int, help="encoder upper bound, bits/s (default 1500000)")
    g.add_argument("--max-sessions", type=int, help="concurrent streams before 503 (default 8)")
    g.add_argument("--ice-server", dest="ice_servers", action="append",
                   help="STUN/TURN URL, repeatable (ignored when bound to loopback)")
    g.add_argument("--ice-username", help="TURN username")
    g.add_argument("--ice-credential", help="TURN credential")
    g.add_argument("--h264-preset", dest="h264_preset", choices=H264_PRESETS,
                   help="libx264 speed preset for H264 streams (default superfast; medium is aiortc's own)")
    g.add_argument("--overlap", choices=["auto", "on", "off"],
                   help="overlap the face stage with the later stages across frames (default auto: while the host has 3 cores per stream)")
    g.add_argument("--cv2-threads", dest="cv2_threads", type=int,
                   help="OpenCV's threads in this process (default 1: the streams are the parallelism)")
    g.add_argument("--pixels", help="where stream frames' pixels live while the stages work: cpu (the default: "
                   "yuv420p planes in host memory) or cuda, cuda:N (planes on the GPU, torch kernels)")
    g.add_argument("--vcam", nargs="?", const="auto",
                   help="feed a virtual camera (v4l2loopback / OBS) from the oldest live session; optional device path")
    g.add_argument("--idle-timeout", dest="idle_timeout_s", type=float, help="release a silent peer after this many s (default 10)")
    g.add_argument("--read-timeout", dest="read_timeout_s", type=float,
                   help="close a connection whose request headers take longer, or whose body stalls longer, than this many s (default 15)")
    g.add_argument("--min-body-rate", dest="min_body_rate", type=float,
                   help="after --body-grace s, refuse (408 too_slow) a request body arriving slower than this many "
                        "bytes/s on average (default 32768; 0: no floor)")
    g.add_argument("--body-grace", dest="body_grace_s", type=float, help="seconds a body may take before the rate floor applies (default 10)")
    g.add_argument("--max-uploads", dest="max_uploads", type=int,
                   help="upload bodies (photos, clip jobs, source images) received at once before 503 uploads_busy (default 32)")
    g.add_argument("--max-photos", dest="max_photos", type=int,
                   help="photos read and decoded, waiting for or in the pipeline, at once before 503 busy (default 64)")
    g.add_argument("--memory-budget", dest="memory_budget", type=int,
                   help="bytes every photo, source upload and clip frame in flight may hold together before 503 busy "
                        "(default 671088640: 640 MiB)")
    g.add_argument("--open-loopback", dest="open_loopback", action="store_true", default=None,
                   help="with --tokens on a loopback bind, still serve token-less loopback clients (a laptop; never "
                        "behind a reverse proxy on the same host; env LIVEFUSE_OPEN_LOOPBACK=1)")
    g.add_argument("--public-url", help="the URL clients reach this replica by, e.g. http://POD_IP:8080: session "
                   "URLs it hands out (Location, WHEP, source upload) are absolute on it (env LIVEFUSE_PUBLIC_URL)")
    g.add_argument("--drain-timeout", type=float, help="on SIGTERM or POST /admin/drain, wait this many s for running "
                   "sessions to end before closing them (default 900; env LIVEFUSE_DRAIN_TIMEOUT)")
    g.add_argument("--no-hold-audio", dest="hold_audio", action="store_false", default=None,
                   help="send WHEP viewers the sender's audio as it arrives, not held back by the video's server delay")
    g.add_argument("--results", help="where clip-job results go: s3://bucket/prefix (endpoint, region and credentials "
                   "from the standard AWS settings, AWS_ENDPOINT_URL included) or a folder (default "
                   "$LIVEFUSE_RESULTS or ~/.local/state/livefuse/results)")
    g.add_argument("--record-sessions", dest="record_sessions", action="store_true", default=None,
                   help="record every live session (processed video, audio kept) to the --results store, in parts "
                        "while it runs (else only sessions whose offer says \"record\": true)")
    g.add_argument("--jobs-redis", help="redis://HOST:PORT/DB: clip jobs (state and queue) shared by every replica "
                   "that names it (env LIVEFUSE_JOBS_REDIS); default: jobs live in this process")
    g.add_argument("--grpc-port", dest="grpc_port", type=int,
                   help="also serve gRPC on this port: livefuse.v1.Fusion (proto/livefuse/v1/fusion.proto), "
                        "grpc.health.v1 and reflection, with the same tokens and TLS (env LIVEFUSE_GRPC_PORT; default off)")
    g.add_argument("--results-public-url", dest="results_public_url",
                   help="the base URL clip results are fetched by through a cache edge or CDN, e.g. "
                        "https://cdn.example.com/results; this server is then its origin at GET /results/<key> "
                        "(env LIVEFUSE_RESULTS_PUBLIC_URL)")
    g.add_argument("--results-private", dest="results_private", action="store_true", default=None,
                   help="serve results `Cache-Control: private, no-store`: no shared cache keeps them "
                        "(env LIVEFUSE_RESULTS_PRIVATE=1)")
    g.add_argument("--results-purge", dest="results_purge", action="append",
                   help="a cache (http://HOST:PORT) a deleted result is PURGEd from, at every address its name "
                        "resolves to; repeatable (env LIVEFUSE_RESULTS_PURGE, comma-separated)")
    g.add_argument("--job-input-allow", dest="job_input_allow", action="append",
                   help="a URL prefix clip jobs may read their clip from (target_url), e.g. s3://uploads/ or "
                        "https://media.example.com/clips/; repeatable; none by default")
    add_product_arguments(parser)


def add_product_arguments(parser: argparse.ArgumentParser) -> None:
    """Options for what runs on the frames and how it is kept safe (shared with `livefuse process`)."""
    p = parser.add_argument_group("pipeline and safety")
    p.add_argument("--stages", help="comma-separated subset of faces,fusion,edits,watermark (watermark is required)")
    p.add_argument("--face-backend", help="face runtimes in order of preference, e.g. tensorrt,torch,litert (default interpreter,litert,torch)")
    p.add_argument("--device", help="device for the torch/tensorrt face runtimes: auto, cpu, cuda, cuda:N (default auto)")
    p.add_argument("--batch-streams", action="store_true",
                   help="torch face runtime: one landmark network for all sessions, their crops batched together (for a GPU)")
    f = parser.add_argument_group("neural fusion: your own ONNX swap model (docs/fusion.md; env LIVEFUSE_SWAPPER, "
                                  "LIVEFUSE_SWAPPER_EMBEDDER, LIVEFUSE_SWAPPER_<OPTION>, LIVEFUSE_FUSION)")
    f.add_argument("--fusion", choices=["geometric", "neural", "both"],
                   help="fusion backend sessions start with (default: neural with --swapper, else geometric); "
                        "both = geometric, then the neural swap on its output")
    f.add_argument("--swapper", help="a catalogue swapper installed with `livefuse models get` (inswapper_128, ...) "
                   "or a swap model file (.onnx: inswapper_128, hyperswap_1x_256, simswap_256, ghost_x_256, "
                   "simswap_unofficial_512), recognised by its inputs and outputs")
    f.add_argument("--swapper-embedder", dest="swapper_embedder",
                   help="its identity embedder: a catalogue name or a file (.onnx, ArcFace signature N x 3 x 112 x 112 "
                        "-> N x 512); default for a catalogue swapper: the embedder it pairs with (arcface_w600k_r50)")
    f.add_argument("--swapper-card", help="name the card when a file's signature fits several (simswap_256 / ghost_256)")
    f.add_argument("--swapper-sha256", help="refuse a --swapper file with another sha256")
    f.add_argument("--swapper-embedder-sha256", help="refuse a --swapper-embedder file with another sha256")
    f.add_argument("--swapper-device", help="auto, cpu, cuda, cuda:N, tensorrt (default auto: what the "
                   "installed ONNX Runtime offers)")
    n = parser.add_argument_group("face enhancer and parser (docs/models.md; `livefuse models list`; env "
                                  "LIVEFUSE_ENHANCER, LIVEFUSE_PARSER)")
    n.add_argument("--enhancer", help="a catalogue enhancer (gfpgan_1.4, restoreformer_plus_plus, codeformer, "
                   "gpen_bfr_256, gpen_bfr_512) or an ONNX file of one of their signatures; runs after fusion, "
                   "off by default on a live CPU stream, on in process and /v1/fuse")
    n.add_argument("--enhancer-fidelity", type=float, default=None, metavar="W",
                   help="CodeFormer's fidelity weight 0..1 (default 0.5)")
    n.add_argument("--parser", help="a catalogue face parser (bisenet_resnet_34, bisenet_resnet_18, xseg_1) or an "
                   "ONNX file of one of their signatures: occluders and the mouth interior stay live")
    n.add_argument("--model-device", help="ONNX Runtime device for the enhancer and the parser: auto, cpu, cuda, "
                   "cuda:N, tensorrt (default auto)")
    p.add_argument("--no-still", dest="still", action="store_false", default=True,
                   help="streams compute every frame afresh: a still face neither keeps its landmarks nor reuses "
                        "fusion's and edits' result (more CPU a frame; docs/performance.md, A still face)")
    p.add_argument("--encoder", help="prompt encoder: e5 (the default, multilingual), minilm (English only) or a local transformers folder")
    p.add_argument("--artifact", help="its calibration from `livefuse calibrate` (default: the committed one)")
    p.add_argument("--audit-log", help="audit log path (default $LIVEFUSE_AUDIT_LOG or ~/.local/state/livefuse/audit.jsonl)")
    p.add_argument("--audit-key-file", help="HMAC key for the audit chain")
    p.add_argument("--audit-stdout", action="store_true", default=None,
                   help="also write each audit record to stdout as a JSON line, hash-chained as in the file "
                        "(for cluster log pipelines; env LIVEFUSE_AUDIT_STDOUT=1)")
    p.add_argument("--tokens", dest="tokens_file", help="bearer tokens file (required off loopback)")
    p.add_argument("--denylist", dest="denylist_dir", help="folder of protected identities' photos")
    p.add_argument("--allow-origin", dest="allowed_origins", action="append", help="allowed page origin, repeatable")
    p.add_argument("--public-host", dest="public_hosts", action="append",
                   help="a name clients reach the server by (the Host they send), repeatable; loopback names are "
                        "implied on loopback, needed when binding to 0.0.0.0 or ::")
    p.add_argument("--server-id", type=int, help="16-bit id carried in every frame's watermark (default 0)")
    p.add_argument("--no-watermark", action="store_true",
                   help="turn the invisible watermark off (logged and written to the audit log; needs --no-watermark-reason)")
    p.add_argument("--no-watermark-reason", default="", help="why marking is off (recorded)")
    o = parser.add_argument_group("avatar outputs (docs/vtuber.md): the face rig's blendshapes, head pose and gaze")
    o.add_argument("--vmc", nargs="?", const="127.0.0.1:39539", metavar="HOST:PORT",
                   help="VMC over UDP to VSeeFace / VNyan / Warudo / VMagicMirror (alone: 127.0.0.1:39539)")
    o.add_argument("--vtube-studio", dest="vtube_studio", nargs="?", const="ws://localhost:8001", metavar="URL",
                   help="VTube Studio's plugin API (alone: ws://localhost:8001; allow the plugin once in VTS)")
    o.add_argument("--no-mirror", dest="mirror", action="store_false", default=True,
                   help="the avatar makes the user's own motions, not their mirror image (the default)")
    r = parser.add_argument_group("restream (docs/obs.md, Stream straight to Twitch / YouTube): RTMP(S) ingest, "
                                  "H.264 + AAC; the stream key is never logged")
    r.add_argument("--restream", action="append", metavar="URL",
                   help="push the fused output to rtmp(s)://HOST/APP/KEY (repeatable; serve: every session)")
    r.add_argument("--restream-bitrate", dest="restream_bitrate", type=int, metavar="BITS",
                   help="the push's video bitrate in bits/s (default 2500000)")
    r.add_argument("--restream-keyframe", dest="restream_keyframe_s", type=float, metavar="SECONDS",
                   help="seconds between keyframes (default 2, what Twitch and YouTube ask for)")
    r.add_argument("--restream-size", dest="restream_size", metavar="WxH",
                   help="scale the push to WIDTHxHEIGHT, e.g. 1280x720 (default: the stream's own size)")


def product_config(args: argparse.Namespace, host: str):
    """ProductConfig from the options above; the safety side follows the bind address (tokens off loopback)."""
    from dataclasses import replace

    from streamer.app.assembly import ProductConfig
    from streamer.web.kit import SafetyConfig

    if getattr(args, "no_watermark", False) and not args.no_watermark_reason:
        raise SystemExit("--no-watermark needs --no-watermark-reason: the reason is recorded in the audit log")
    safety = SafetyConfig(host=host)
    changes = {k: v for k, v in {
        "audit_path": getattr(args, "audit_log", None), "audit_key_file": getattr(args, "audit_key_file", None),
        "tokens_file": getattr(args, "tokens_file", None), "denylist_dir": getattr(args, "denylist_dir", None),
        "open_loopback": open_loopback(args),
        "allowed_origins": tuple(args.allowed_origins) if getattr(args, "allowed_origins", None) else None,
        "public_hosts": tuple(args.public_hosts) if getattr(args, "public_hosts", None) else None,
        "server_id": getattr(args, "server_id", None),
        "audit_stdout": audit_stdout(args),
    }.items() if v is not None}
    if getattr(args, "no_watermark", False):
        changes.update(disable_watermark=True, disable_reason=args.no_watermark_reason)
    config = ProductConfig(safety=replace(safety, **changes), encoder=getattr(args, "encoder", None),
                           artifact=getattr(args, "artifact", None))
    config = replace(config, swapper=swapper_config(args), fusion_mode=_fusion_mode(args))
    config = face_net_configs(args, config)
    if getattr(args, "results", None):
        config = replace(config, results=args.results)
    if not getattr(args, "still", True):
        config = replace(config, still=replace(config.still, enabled=False))
    import os

    if getattr(args, "job_input_allow", None):
        config = replace(config, jobs=replace(config.jobs, input_allow=tuple(args.job_input_allow)))
    redis_url = getattr(args, "jobs_redis", None) or os.environ.get("LIVEFUSE_JOBS_REDIS", "")
    if redis_url:
        config = replace(config, jobs_redis=redis_url)
    outputs = avatar_outputs(args)
    if outputs != config.outputs:
        config = replace(config, outputs=outputs)
    if getattr(args, "stages", None):
        config = replace(config, stages=tuple(s.strip() for s in args.stages.split(",") if s.strip()))
    backend = config.faces.backend
    if getattr(args, "face_backend", None):
        backend = replace(backend, preference=tuple(b.strip() for b in args.face_backend.split(",") if b.strip()))
    if getattr(args, "device", None):
        backend = replace(backend, device=args.device)
    if getattr(args, "batch_streams", False):
        backend = replace(backend, share_across_streams=True)
    if backend != config.faces.backend:
        config = replace(config, faces=replace(config.faces, backend=backend))
    return config


def avatar_outputs(args: argparse.Namespace):
    """OutputSettings from --vmc, --vtube-studio, --no-mirror and (process) --face-data; a bad address
    stops the command with what is wrong."""
    from streamer.sinks.face_outputs import OutputSettings
    from streamer.sinks.vmc import parse_target

    vmc = getattr(args, "vmc", None) or ""
    vts = getattr(args, "vtube_studio", None) or ""
    try:
        if vmc:
            parse_target(vmc)
    except ValueError as exc:
        raise SystemExit(f"--vmc: {exc}") from None
    if vts and not vts.startswith(("ws://", "wss://")):
        raise SystemExit(f"--vtube-studio: the address is ws://HOST:PORT (default ws://localhost:8001), not {vts!r}")
    return OutputSettings(vmc=vmc, vtube_studio=vts, face_data=getattr(args, "face_data", None) or "",
                          mirror=getattr(args, "mirror", True))


def swapper_config(args: argparse.Namespace):
    """SwapperConfig from LIVEFUSE_SWAPPER* variables, the --swapper* options on top. A catalogue swapper
    without an embedder gets the one its catalogue entry pairs it with."""
    import os

    from engines.catalogue.entries import paired_with
    from engines.swappers.swapper import SwapperConfig
    from streamer.config import config_from_env, swapper_env_name

    swapper = getattr(args, "swapper", None) or os.environ.get("LIVEFUSE_SWAPPER", "").strip() or None
    embedder = getattr(args, "swapper_embedder", None)
    if swapper and not embedder and not os.environ.get("LIVEFUSE_SWAPPER_EMBEDDER", "").strip():
        embedder = paired_with(swapper) or None
    return config_from_env(SwapperConfig, env_name=swapper_env_name,
                           swapper=getattr(args, "swapper", None), embedder=embedder,
                           card=getattr(args, "swapper_card", None),
                           swapper_sha256=getattr(args, "swapper_sha256", None),
                           embedder_sha256=getattr(args, "swapper_embedder_sha256", None),
                           device=getattr(args, "swapper_device", None))


def face_net_configs(args: argparse.Namespace, config: Any) -> Any:
    """The enhancer and parser (--enhancer / LIVEFUSE_ENHANCER, --parser / LIVEFUSE_PARSER): a catalogue
    name or a file, resolved and checked when the product loads them."""
    import os
    from dataclasses import replace

    from engines.face_nets import FaceNetConfig

    device = getattr(args, "model_device", None) or os.environ.get("LIVEFUSE_MODEL_DEVICE", "").strip() or "auto"
    enhancer = getattr(args, "enhancer", None) or os.environ.get("LIVEFUSE_ENHANCER", "").strip()
    parser = getattr(args, "parser", None) or os.environ.get("LIVEFUSE_PARSER", "").strip()
    changes: dict[str, Any] = {}
    if enhancer:
        changes["enhancer"] = FaceNetConfig(path=enhancer, device=device)
    if parser:
        changes["parser"] = FaceNetConfig(path=parser, device=device)
    fidelity = getattr(args, "enhancer_fidelity", None)
    if fidelity is not None:
        if not 0.0 <= fidelity <= 1.0:
            raise SystemExit("--enhancer-fidelity must be within 0..1")
        changes["enhancer_fidelity"] = fidelity
    return replace(config, **changes) if changes else config


def _fusion_mode(args: argparse.Namespace) -> str:
    import os

    return getattr(args, "fusion", None) or os.environ.get("LIVEFUSE_FUSION", "").strip().lower()


def open_loopback(args: argparse.Namespace) -> bool | None:
    """--open-loopback, else LIVEFUSE_OPEN_LOOPBACK (1/true/yes/on), else None (the default: off)."""
    import os

    if getattr(args, "open_loopback", None):
        return True
    raw = os.environ.get("LIVEFUSE_OPEN_LOOPBACK", "").strip().lower()
    return True if raw in ("1", "true", "yes", "on") else None


def audit_stdout(args: argparse.Namespace) -> bool | None:
    """--audit-stdout, else LIVEFUSE_AUDIT_STDOUT (1/true/yes/on), else None (the default: off)."""
    import os

    if getattr(args, "audit_stdout", None):
        return True
    raw = os.environ.get("LIVEFUSE_AUDIT_STDOUT", "").strip().lower()
    return True if raw in ("1", "true", "yes", "on") else None


def run(args: argparse.Namespace) -> int:
    import logging

    for noisy in ("aioice", "aiortc"):  # per-candidate chatter at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from aiohttp import web

    from streamer.app.assembly import build_services
    from streamer.config import ServerConfig
    from streamer.web.server import create_app, runner_options, ssl_context

    overrides = {k: getattr(args, k, None) for k in (
        "host", "port", "tls_cert", "tls_key", "min_bitrate", "max_bitrate", "max_sessions", "ice_username",
        "ice_credential", "idle_timeout_s", "read_timeout_s", "vcam", "overlap", "pixels", "hold_audio", "public_url",
        "drain_timeout", "record_sessions", "h264_preset", "cv2_threads", "min_body_rate", "body_grace_s", "max_uploads",
        "max_photos", "memory_budget", "grpc_port", "results_public_url", "results_private",
        "restream_bitrate", "restream_keyframe_s", "restream_size")}
    if getattr(args, "restream", None):
        overrides["restream"] = tuple(args.restream)
    if args.codec:
        overrides["codec"] = args.codec.upper()
    if args.ice_servers:
        overrides["ice_servers"] = tuple(args.ice_servers)
    if getattr(args, "results_purge", None):
        overrides["results_purge"] = tuple(args.results_purge)
    config = ServerConfig.from_env(**overrides)
    busy = port_problem(config.host, config.port) or (port_problem(config.host, config.grpc_port) if config.grpc_port else None)
    if busy is not None:   # said before anything loads or is announced: one line, no traceback
        raise SystemExit(busy)
    if config.pixel_device is not None:   # CUDA asked for and absent: said now, not at the first frame
        from streamer.media.device_planes import check_device

        problem = check_device(config.pixel_device)
        if problem is not None:
            raise SystemExit(f"livefuse serve: {problem}")
    if not config.loopback and not getattr(args, "tokens_file", None):
        raise SystemExit(f"serving on {config.host} (beyond loopback) needs bearer tokens: "
                         "livefuse tokens issue tokens.json NAME, then --tokens tokens.json")
    if open_loopback(args) and not config.loopback:
        raise SystemExit(f"--open-loopback serves token-less clients on a loopback bind only, not on {config.host}")
    if config.public_url:  # the replica answers to its public URL's host (and only the names given)
        from streamer.web.urls import public_host

        args.public_hosts = list(getattr(args, "public_hosts", None) or []) + [public_host(config.public_url)]
    if config.host in ("0.0.0.0", "::") and not getattr(args, "public_hosts", None):
        raise SystemExit(f"serving on {config.host} (every address) needs the names clients use: --public-host NAME "
                         "(repeatable), so that requests naming any other host (DNS rebinding) are refused")
    apply_process_settings(config)
    services = _services_or_exit(args, config.host)
    app = create_app(config, services)
    from streamer.rpc.server import attach as attach_grpc

    attach_grpc(app, config)   # gRPC beside HTTP, same process and loop (--grpc-port)
    shown = "localhost" if config.loopback else config.host
    logging.getLogger("livefuse").info("LiveFuse on %s://%s:%d  (codec %s, max %d sessions)", config.scheme, shown,
                                       config.port, config.codec, config.max_sessions)
    app.on_startup.append(reload_on_sighup(services))
    app.on_startup.append(drain_on_sigterm)
    try:
        web.run_app(app, host=config.host, port=config.port, ssl_context=ssl_context(config), print=None,
                    **runner_options(config))
    except OSError as exc:   # taken between the check and the bind
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        raise SystemExit(port_problem(config.host, config.port) or f"livefuse serve: {exc.strerror}") from None
    return 0


def port_problem(host: str, port: int) -> str | None:
    """Why `livefuse serve` cannot listen on host:port, in one line with the way out (another port, and
    the make variable), or None when it can. The port is bound and let go at once, as the server binds it
    (SO_REUSEADDR), so a port left in TIME_WAIT by a server that just stopped counts as free."""
    addresses = _listen_addresses(host, port)
    if isinstance(addresses, str):
        return addresses
    for family, address in addresses:
        err = _bind_error(family, address)
        if err == errno.EADDRINUSE:
            alt = _free_port_after(host, port)
            return (f"port {port} is in use: try --port {alt}, or make serve PORT={alt}" if alt else
                    f"port {port} is in use, and so are the next {_ALTERNATIVES}: free one or pick another with --port")
        if err == errno.EACCES:
            return (f"port {port} needs privileges to listen on: try --port 8080, or make serve PORT=8080"
                    if port < 1024 else f"listening on port {port} is not permitted here: pick another with --port")
        if err == errno.EADDRNOTAVAIL:
            return f"address {host} is not one of this machine's: pick another with --host"
    return None


_ALTERNATIVES = 20


def _listen_addresses(host: str, port: int) -> "list[tuple[int, Any]] | str":
    import socket

    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"host {host!r} cannot be listened on: {exc.strerror}"
    except OverflowError:
        return f"port {port} is out of range: pick one from 1 to 65535 with --port"
    return [(family, sockaddr) for family, _type, _proto, _name, sockaddr in infos]


def _bind_error(family: int, address: Any) -> int | None:
    import socket

    with socket.socket(family, socket.SOCK_STREAM) as sock:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.errno or -1
    return None


def _free_port_after(host: str, port: int) -> int | None:
    """The first of the next few ports this host can listen on."""
    for candidate in range(port + 1, min(port + 1 + _ALTERNATIVES, 65536)):
        addresses = _listen_addresses(host, candidate)
        if not isinstance(addresses, str) and all(_bind_error(f, a) is None for f, a in addresses):
            return candidate
    return None


def apply_process_settings(config: "ServerConfig") -> None:
    """What a server sets once for its whole process before serving: the encoders' bitrate bounds and
    H264 preset, and OpenCV's threads."""
    from streamer.rtc.encoder_settings import set_encoder_bitrates, set_h264_preset
    from streamer.ops.threads import ThreadConfig, apply_thread_config

    set_encoder_bitrates(config.min_bitrate, config.max_bitrate)
    set_h264_preset(config.h264_preset)
    apply_thread_config(ThreadConfig(cv2=config.cv2_threads))


def _services_or_exit(args: argparse.Namespace, host: str, *, live: bool = True) -> Any:
    """The product's hooks (`live`: for streams; False: for clips); a configuration or model file that
    cannot be used stops the command with why."""
    from engines.catalogue.families import FamilyRefused
    from engines.swappers.cards import SwapperRefused
    from streamer.app.assembly import build_services

    try:
        return build_services(product_config(args, host), live=live)
    except (SwapperRefused, FamilyRefused, ValueError) as exc:
        raise SystemExit(f"livefuse {getattr(args, 'command', None) or 'serve'}: {exc}") from None


def stop_on_early_sigterm() -> None:
    """Installed by `livefuse serve` as a command (streamer.app.cli.main) before anything is imported: until the
    drain handler is installed (the models import and the app starts: seconds), SIGTERM ends
    the process at once with status 0: nothing is open yet, so that is what the drain would do. Without
    it a server running as PID 1 (the container image) ignores an early SIGTERM, as the kernel drops
    signals PID 1 does not handle, and a pod deleted while starting waits out its whole grace period."""
    import signal

    def _stop(_signum: int, _frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)


async def drain_on_sigterm(app: Any) -> None:
    """An app startup hook (after aiohttp's own signal handlers, which it replaces for SIGTERM): SIGTERM
    starts the drain, and the process stops, exit status 0, once the drain is done. SIGINT (Ctrl-C)
    still stops at once."""
    import asyncio
    import signal

    from aiohttp.web_runner import GracefulExit

    from streamer.web.server import SERVER_KEY

    server = app[SERVER_KEY]
    loop = asyncio.get_running_loop()

    def stop(_result: Any) -> None:
        def _exit() -> None:
            raise GracefulExit()   # what aiohttp's own handler raises: run_app cleans up and returns

        loop.call_soon(_exit)

    server.on_drained = stop
    loop.add_signal_handler(signal.SIGTERM, server.drain.start, "SIGTERM")


def reload_on_sighup(services: Any) -> Callable[[Any], Awaitable[None]]:
    """An app startup hook: SIGHUP re-reads what `services.reload` covers (the tokens file), the usual
    way to tell a daemon its configuration changed."""

    async def install(_app: Any) -> None:
        import asyncio
        import signal

        if hasattr(signal, "SIGHUP"):
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, services.reload)

    return install
