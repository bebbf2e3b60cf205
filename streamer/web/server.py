"""The HTTP side: the page, signaling (/offer, WHIP, WHEP), source upload, health and metrics.

Every refusal says why: 400 bad SDP/JSON, 401 not authorized, 404 unknown session, 413 body too large,
415 wrong content type, 422 source image refused, 503 + Retry-After when full or when the upload decoder is busy.

A session belongs to the principal that opened it (`services.authorize`): every route that names a
session answers 404 to anyone else, exactly as for an id that does not exist, so ids cannot be probed.
An admin (`services.is_admin`) may use every session. WHEP viewing is the owner's too: there is no
separate grant to let someone else watch.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from cachetools import FIFOCache

from streamer.session import protocol
from streamer.web.api.results import mount as mount_results
from streamer.web.api.routes import ApiBackend, ApiContext, mount as mount_api
from streamer.storage.edge import EdgeConfig
from streamer.config import ServerConfig
from streamer.web.control_socket import CONTROL_SUBPROTOCOL, SocketLimits, serve_control
from streamer.ops.drain import Drainer, DrainResult
from streamer.ops.memory import HeapKeeper
from streamer.ops.load import GpuProbe, observe
from streamer.ops.readiness import Readiness, readiness
from streamer.rtc.encoder_settings import check_encoder_bitrates, check_h264_preset
from streamer.ops.metrics import Metrics
from streamer.rtc.peer import BadOffer, PeerSession
from engines.sources import SourceConfig, SourceRefused
from streamer.services import NullServices, Services
from streamer.web.uploads import IMAGE_TYPES, DecoderBusy, UploadDecoder
from streamer.session.session import Session
from streamer.sinks.whep import attach_viewer
from streamer.web.whip_patch import TRICKLE_TYPE, apply_patch, entity_tag
from streamer.web.urls import SessionUrls
from streamer.web.watch_links import WatchLinks, is_watch_id
from streamer.config import BodyLimits
from streamer.web.httpkit import Refused, Slots, error_middleware, quiet_bad_requests, read_limited, require_type
from streamer.web.multipart import FilePart, FormSpec, read_form
from streamer.web.uploads import Lease

log = logging.getLogger(__name__)

WEB_ROOT = Path(__file__).resolve().parents[2] / "web_client"
DEMO_SOURCE = Path(__file__).resolve().parents[1] / "assets" / "demo_source.jpg"


@dataclass(frozen=True, slots=True)
class Recording:
    """A session's recording, kept after the session ends so its owner can still read how it went."""

    owner: str | None     # the token id that opened the session (None on an open server)
    recorder: Any         # streamer.sinks.recorder.Recorder: start/stop/info


class LiveFuseServer:
    """The app's state: config, injected services, metrics and the open sessions."""

    def __init__(self, config: ServerConfig, services: Services) -> None:
        self.config = config
        self.services = services
        self.metrics = Metrics()
        self.heap = HeapKeeper(on_collected=self.metrics.heap_release.observe)   # memory back after each peer
        self.peers: dict[str, PeerSession] = {}
        self.recordings: FIFOCache[str, Recording] = FIFOCache(maxsize=256)   # by session id, the newest 256
        from streamer.web.restreams import Restreams

        self.restreams = Restreams(config, self.metrics, services.audit)   # RTMP(S) pushes of sessions' output
        self._finishing: set[asyncio.Task] = set()                 # recordings being finalised
        self._pending = 0
        self.started = time.time()
        self.camera = None
        self.socket_limits = SocketLimits(max_message_bytes=config.max_message_bytes)
        self.upload_limits = SourceConfig(max_pixels=config.max_source_pixels, max_bytes=config.max_source_bytes)
        self.uploads = UploadDecoder(max_pending_bytes=config.memory_budget)   # its budget: every upload's memory
        self.upload_slots = Slots(config.max_uploads, "upload bodies are being received", "uploads_busy")
        self.urls = SessionUrls.of(config.public_url)
        self.watch_links = WatchLinks()   # /watch/w-…: one link per page tab, following its sessions
        self.drain = Drainer(self.peers, config.drain_timeout, audit=services.audit, on_done=self._drained)
        self.on_drained: Any = None   # what runs once drained (`livefuse serve`: stop the process)
        self.warm = False             # the shared models have loaded
        self.api: Any = None          # the /v1 routes' state (ApiRoutes): the gRPC service beside them shares it
        self.gpu: GpuProbe | None = None
        if config.vcam:
            from streamer.sinks.vcam import CameraFeed

            self.camera = CameraFeed(config.vcam_width, config.vcam_height, config.vcam_fps,
                                     device=None if config.vcam == "auto" else config.vcam,
                                     backend=config.vcam_backend or None)

    # ---- helpers -------------------------------------------------------------------------------------
    def authorize(self, request: web.Request) -> str:
        token = self.services.authorize(request)
        if token is None:
            self.metrics.refused.labels("unauthorized").inc()
            raise Refused(401, "not authorized", {"WWW-Authenticate": "Bearer"})
        return token

    def readiness(self) -> Readiness:
        return readiness(sessions=len(self.peers) + self._pending, capacity=self.config.max_sessions,
                         draining=self.drain.draining, warm=self.warm)

    def reserve(self) -> None:
        state = self.readiness()
        if state.state in ("full", "draining"):
            self.metrics.refused.labels(state.state).inc()
            raise Refused(503, state.reason(), {"Retry-After": str(self.config.retry_after_s)}, code=state.state)
        self._pending += 1

    async def _drained(self, result: DrainResult) -> None:
        if self.on_drained is not None:
            self.on_drained(result)

    def owned_peer(self, request: web.Request, session_id: str) -> PeerSession:
        """The session named in a request, for its owner (or an admin); 404 for anyone else, the same
        answer as for an unknown id, so that another principal's session ids cannot be confirmed."""
        principal = self.authorize(request)
        peer = self.peers.get(session_id)
        if peer is None or not (peer.session.owned_by(principal) or self.services.is_admin(request)):
            raise Refused(404, f"no session {session_id!r}")
        return peer

    async def open_session(self, request: web.Request, sdp: str, kind: str, record: bool = False) -> PeerSession:
        token = self.authorize(request)
        record = record or self.config.record_sessions
        if record and self.services.record is None:
            raise Refused(400, "this server records no sessions", code="recording_unavailable")
        self.reserve()
        try:
            session = Session(client=request.remote or "", token_id=token)
            session.on_close(self.services.claim(request))
            self.services.session_started(session, request)
            loop = asyncio.get_running_loop()
            pipeline = await loop.run_in_executor(None, self.services.make_pipeline, session)  # loads models
            peer = PeerSession(self.config, self.services, session, metrics=self.metrics, kind=kind,
                               on_closed=self._closed, pipeline=pipeline,
                               overlap=self.config.overlap_for(len(self.peers) + 1))
            try:
                await peer.accept(sdp)
            except BadOffer as exc:
                await peer.close("bad offer")
                self.metrics.refused.labels("bad_sdp").inc()
                raise Refused(400, str(exc), code=exc.code) from None
            except Exception:
                await peer.close("setup failed")
                raise
            if record and kind != "whep":
                await self._start_recording(peer)
            self.peers[session.id] = peer
            self.metrics.sessions.set(len(self.peers))
            self.metrics.sessions_total.labels(kind).inc()
            self.services.audit("session_opened", session=session.id, kind=kind, client=session.client, token=token)
            if self.camera is not None and kind != "whep":
                await self.camera.offer(session.id, peer.worker.outbox)
            if kind != "whep":
                peer.control.restream = self.restreams.hook(peer)
                if self.restreams.urls:
                    self.restreams.start(peer, list(self.restreams.urls))
            return peer
        finally:
            self._pending -= 1

    async def _start_recording(self, peer: PeerSession) -> None:
        from streamer.media.tracks import FusedTrack

        rec = self.services.record(peer.session, FusedTrack(peer.worker.outbox, private=True), peer.listen())
        try:
            await rec.start()
        except Exception as exc:
            await peer.close("recording failed to start")
            raise Refused(503, f"the recording could not start: {exc}", code="recording_failed") from None
        self.recordings[peer.session.id] = Recording(peer.session.token_id, rec)
        self.services.audit("recording_started", session=peer.session.id, key=rec.key)

    async def _finish_recording(self, session_id: str, rec: Any) -> None:
        await rec.stop()
        info = rec.info()
        self.services.audit("recording_" + ("done" if info["state"] == "done" else "failed"), session=session_id,
                            key=info["key"], parts=info["parts"], error=info["error"])

    def _closed(self, peer: PeerSession) -> None:
        held = self.recordings.get(peer.session.id)
        if held is not None:   # finalised in the background: the file closes, the rest goes up
            task = asyncio.ensure_future(self._finish_recording(peer.session.id, held.recorder))
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)
        if self.peers.get(peer.session.id) is peer:
            del self.peers[peer.session.id]
        self.watch_links.session_ended(peer.session.id)
        if self.camera is not None:
            self.camera.release(peer.session.id)
        self.restreams.session_ended(peer.session.id)
        self.metrics.sessions.set(len(self.peers))
        self.heap.session_ended()

    def _viewer_release(self, slot_release: Any) -> Any:
        """What a WHEP viewer gives back when it goes: its slot, then its memory."""
        def release() -> None:
            slot_release()
            self.heap.session_ended()
        return release

    async def close_all(self, _app: web.Application | None = None) -> None:
        self.watch_links.close()
        await self.restreams.close()
        await asyncio.gather(*(p.close("server shutting down") for p in list(self.peers.values())), return_exceptions=True)
        if self.camera is not None:
            self.camera.close()
        if self._finishing:
            await asyncio.gather(*list(self._finishing), return_exceptions=True)
        await asyncio.to_thread(self.uploads.close)

    # ---- routes ----------------------------------------------------------------------------------------
    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(WEB_ROOT / "index.html", headers={"Cache-Control": "no-cache"})

    async def demo_source(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(DEMO_SOURCE)

    async def offer(self, request: web.Request) -> web.Response:
        require_type(request, ("application/json",))
        body = await read_limited(request, self.config.max_sdp_bytes, self.config.body_limits)
        try:
            msg = protocol.loads(body.decode("utf-8"))
        except RecursionError:
            raise Refused(400, "body is not JSON the server accepts: nested too deeply") from None
        except ValueError as exc:   # bad JSON, bad UTF-8, a non-finite or overlong number
            raise Refused(400, f"body is not JSON the server accepts: {exc}") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("sdp"), str) or msg.get("type") != "offer":
            raise Refused(400, 'expected {"sdp": "<offer SDP>", "type": "offer"}')
        if not isinstance(msg.get("record", False), bool):
            raise Refused(400, '"record" must be true or false')
        if msg.get("watch") is not None and not isinstance(msg["watch"], str):
            raise Refused(400, '"watch" must be a watch link id (from POST /sessions/watch)')
        peer = await self.open_session(request, msg["sdp"], "offer", record=msg.get("record", False))
        desc = peer.pc.localDescription
        reply = {"sdp": desc.sdp, "type": desc.type, "session": peer.session.id, "stages": peer.worker.pipeline.names,
                 "urls": self.urls.for_session(peer.session.id, "offer")}
        if msg.get("watch"):   # the tab's watch link now plays this session (a new link if that one is not usable)
            owner = peer.session.token_id or ""
            link = (self.watch_links.attach(msg["watch"], owner, peer.session.id)
                    or self.watch_links.attach(self.watch_links.create(owner).id, owner, peer.session.id))
            reply["watch"] = link.id
            reply["urls"]["watch"] = f"{self.urls.base}/watch/{link.id}"
        return web.json_response(reply)

    async def whip(self, request: web.Request) -> web.Response:
        require_type(request, ("application/sdp",))
        sdp = (await read_limited(request, self.config.max_sdp_bytes, self.config.body_limits)).decode("utf-8", "replace")
        peer = await self.open_session(request, sdp, "whip")
        sid = peer.session.id
        return web.Response(status=201, text=peer.pc.localDescription.sdp, content_type="application/sdp",
                            headers={"Location": self.urls.whip(sid), "X-LiveFuse-Session": sid,
                                     "Link": f'<{self.urls.whep(sid)}>; rel="whep"',
                                     "ETag": entity_tag(peer.pc), "Accept-Patch": TRICKLE_TYPE})

    async def whip_patch(self, request: web.Request) -> web.Response:
        """Trickle ICE on a WHIP session (RFC 9725 4.3; see streamer.web.whip_patch for the answers)."""
        peer = self.owned_peer(request, request.match_info["session"])
        require_type(request, (TRICKLE_TYPE,))
        body = (await read_limited(request, self.config.max_sdp_bytes, self.config.body_limits)).decode("utf-8", "replace")
        await apply_patch(peer.pc, body, request.headers.get("If-Match"))
        return web.Response(status=204, headers={"ETag": entity_tag(peer.pc)})

    async def whip_delete(self, request: web.Request) -> web.Response:
        peer = self.owned_peer(request, request.match_info["session"])
        await peer.close("WHIP DELETE")
        return web.Response(status=200)

    async def whep(self, request: web.Request) -> web.Response:
        require_type(request, ("application/sdp",))
        source = self.owned_peer(request, self.watch_links.resolve(request.match_info["session"]))
        sdp = (await read_limited(request, self.config.max_sdp_bytes, self.config.body_limits)).decode("utf-8", "replace")
        if len(source.viewers) >= self.config.max_viewers:
            self.metrics.refused.labels("viewers_full").inc()
            raise Refused(503, f"session has {self.config.max_viewers} viewers already",
                          {"Retry-After": str(self.config.retry_after_s)})
        viewer = attach_viewer(source, self.metrics, release=self._viewer_release(self.services.claim(request)))
        try:
            answer = await viewer.accept(sdp)
        except BadOffer as exc:
            await viewer.close("bad offer")
            raise Refused(400, str(exc), code=exc.code) from None
        except Exception:
            await viewer.close("setup failed")
            raise
        return web.Response(status=201, text=answer.sdp, content_type="application/sdp",
                            headers={"Location": self.urls.whep_viewer(source.session.id, viewer.id)})

    async def whep_delete(self, request: web.Request) -> web.Response:
        source = self.owned_peer(request, request.match_info["session"])
        viewer = source.viewers.get(request.match_info["viewer"])
        if viewer is None:
            raise Refused(404, f"no viewer {request.match_info['viewer']!r}")
        await viewer.close("WHEP DELETE")
        return web.Response(status=200)

    async def source(self, request: web.Request) -> web.Response:
        peer = self.owned_peer(request, request.match_info["session"])
        loop = asyncio.get_running_loop()
        with self.uploads.budget.lease() as lease:   # the body and the decoded image, until registered
            try:
                with self.upload_slots.take(self.metrics):
                    data, form = await read_image_upload(request, self.config.max_source_bytes, self.config.body_limits, lease)
                # decoding (on the upload pool, within the memory budget) and face work off the event loop
                image = await self.uploads.decode(data, self.upload_limits, lease=lease, hold=2.0)
                del data
                result = await loop.run_in_executor(None, self.services.register_source, peer.session, image, form)
            except DecoderBusy as exc:
                self.metrics.refused.labels("source").inc()
                raise Refused(503, str(exc), {"Retry-After": "1"}, code=exc.as_event()["code"]) from None
            except SourceRefused as exc:
                self.metrics.refused.labels("source").inc()
                raise Refused(422, str(exc), code=exc.as_event()["code"]) from None   # the page reads 422 + code
        peer.send({"type": "source", **result})
        if result.get("warnings"):   # what the live face shows instead of the source (engines/source_mask.py)
            peer.send({"type": "source_warning", "source_id": result.get("source_id"), "warnings": list(result["warnings"])})
        return web.json_response(result)

    async def background(self, request: web.Request) -> web.Response:
        """A picture to put behind the person: read and decoded as a source photo is (the same limits and
        the same 4xx refusals with codes), shrunk to at most MAX_BACKGROUND_SIDE on its long side, kept by
        the session; with `apply` (default "true") the session's background becomes it at once, else the
        client names it later (set_params background {"mode": "image", "image_id": ...})."""
        peer = self.owned_peer(request, request.match_info["session"])
        loop = asyncio.get_running_loop()
        with self.uploads.budget.lease() as lease:
            try:
                with self.upload_slots.take(self.metrics):
                    data, form = await read_image_upload(request, self.config.max_source_bytes, self.config.body_limits, lease)
                image = await self.uploads.decode(data, self.upload_limits, lease=lease, hold=2.0)
                del data
                image = await loop.run_in_executor(None, fit_background, image)
            except DecoderBusy as exc:
                self.metrics.refused.labels("background").inc()
                raise Refused(503, str(exc), {"Retry-After": "1"}, code=exc.as_event()["code"]) from None
            except SourceRefused as exc:      # the source photo's reasons: background_bad_image, background_too_large, ...
                self.metrics.refused.labels("background").inc()
                raise Refused(422, str(exc), code=f"background_{exc.reason}") from None
        image_id = peer.session.add_background(image)
        result: dict[str, Any] = {"image_id": image_id, "width": int(image.shape[1]), "height": int(image.shape[0])}
        if form.get("apply", "true").lower() not in ("false", "0", "no"):
            if "background" not in peer.worker.pipeline.names:
                raise Refused(409, "this server's pipeline has no background stage", code="no_background")
            from engines.background import BackgroundSpec

            peer.session.update(background=BackgroundSpec(mode="image", image_id=image_id))
            result["applied"] = True
        self.services.audit("background", session=peer.session.id, image_id=image_id, size=f"{image.shape[1]}x{image.shape[0]}")
        peer.send({"type": "background", **result})
        return web.json_response(result)

    async def control(self, request: web.Request) -> web.StreamResponse:
        """The session's control protocol over a WebSocket (streamer.web.control_socket), for its owner."""
        peer = self.owned_peer(request, request.match_info["session"])
        if not web.WebSocketResponse(protocols=(CONTROL_SUBPROTOCOL,)).can_prepare(request).ok:
            raise Refused(426, "this route speaks WebSocket only (subprotocol livefuse.control.v1)",
                          {"Upgrade": "websocket"})
        if len(peer.controllers) >= self.socket_limits.per_session:
            raise Refused(503, f"session has {self.socket_limits.per_session} control sockets open already",
                          {"Retry-After": str(self.config.retry_after_s)})
        return await serve_control(request, peer, self.socket_limits)

    async def watch_page(self, request: web.Request) -> web.StreamResponse:
        """The bare player (OBS browser source): it reads the session from its path and the token from
        the URL fragment, which browsers never send, so neither this request nor its log holds a token."""
        return web.FileResponse(WEB_ROOT / "watch.html", headers={"Cache-Control": "no-cache",
                                                                  "Referrer-Policy": "no-referrer"})

    async def watch_link_create(self, request: web.Request) -> web.Response:
        """A new watch link for the caller (streamer.web.watch_links): the page asks once per tab."""
        link = self.watch_links.create(self.authorize(request))
        return web.json_response({**link.as_json(), "url": f"{self.urls.base}/watch/{link.id}"}, status=201)

    async def watch_link_state(self, request: web.Request) -> web.Response:
        """A watch link's state, long-polled: `?seen=TAG` waits for the next change (404 unknown or another's)."""
        name = request.match_info["watch"]
        link = self.watch_links.get(name, self.authorize(request), self.services.is_admin(request))
        if link is None:
            raise Refused(404, f"no watch link {name!r}" if is_watch_id(name) else f"{name!r} is not a watch link id",
                          code="unknown_watch_link")
        link = await self.watch_links.wait(link, request.query.get("seen"))
        return web.json_response(link.as_json(), headers={"Cache-Control": "no-store"})

    async def favicon(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(WEB_ROOT / "favicon.ico", headers={"Cache-Control": "max-age=86400"})

    async def session_info(self, request: web.Request) -> web.Response:
        peer = self.owned_peer(request, request.match_info["session"])
        held = self.recordings.get(peer.session.id)
        return web.json_response({
            "session": peer.session.id, "kind": peer.kind, "connection": peer.pc.connectionState,
            "stages": peer.worker.pipeline.names, "stats": peer.stats.snapshot(), "viewers": list(peer.viewers),
            "control_sockets": len(peer.controllers),
            "controls": peer.session.controls.as_json(),
            "sources": sorted(peer.session.sources),
            "recording": held.recorder.info() if held is not None else None,
        })

    async def recording(self, request: web.Request) -> web.Response:
        """A session's recording, also after the session ended (its owner or an admin; 404 otherwise)."""
        principal = self.authorize(request)
        sid = request.match_info["session"]
        held = self.recordings.get(sid)
        if held is None or not (held.owner == principal or self.services.is_admin(request)):
            raise Refused(404, f"no recording of session {sid!r}")
        return web.json_response(held.recorder.info())

    async def edits(self, request: web.Request) -> web.Response:
        """The edit vocabulary the page builds its sliders from."""
        from engines.edit_vocabulary import vocabulary_json

        return web.json_response(vocabulary_json())

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "sessions": len(self.peers), "max_sessions": self.config.max_sessions,
                                  "uptime_s": round(time.time() - self.started, 1)})

    async def readyz(self, request: web.Request) -> web.Response:
        """200 while this replica takes new sessions; 503 when starting, full or draining (the body says which)."""
        state = self.readiness()
        return web.json_response(state.as_json(), status=200 if state.ready else 503,
                                 headers={"Cache-Control": "no-store"})

    async def admin_drain(self, request: web.Request) -> web.Response:
        """Start the drain (as SIGTERM does); admin tokens only. 202 with the drain's status."""
        self.authorize(request)
        if not self.services.is_admin(request):
            raise Refused(403, "draining the server needs an admin token")
        started = self.drain.start("POST /admin/drain")
        return web.json_response({**self.drain.status(), "started": started}, status=202)

    async def metrics_page(self, request: web.Request) -> web.Response:
        observe(self.metrics, self.readiness(), self.drain.draining, list(self.peers.values()), self.gpu)
        resp = web.Response(body=self.metrics.render())
        resp.headers["Content-Type"] = self.metrics.content_type
        return resp


async def read_image_upload(request: web.Request, limit: int, body: BodyLimits, lease: Lease) -> tuple[bytes, dict[str, str]]:
    """A source image: a raw image/* body (form fields from the query) or multipart with an `image` part
    (through the one multipart reader, `streamer.web.multipart`); its bytes counted against `lease`."""
    form = {k: v for k, v in request.query.items()}
    if request.content_type in IMAGE_TYPES:
        lease.grow(min(request.content_length or limit, limit))
        return await read_limited(request, limit, body, code="image_too_large"), form
    if request.content_type != "multipart/form-data":
        raise Refused(415, f"content type {request.content_type[:100] or 'none'!r} not accepted; send "
                           f"{', '.join(IMAGE_TYPES)} or multipart/form-data", code="unsupported_media_type")
    got = await read_form(request, FormSpec({"image": FilePart(limit, IMAGE_TYPES)}, required=("image",)), body,
                          on_bytes=lease.grow)
    form.update(got.fields)
    return got.files["image"].data or b"", form


MAX_BACKGROUND_SIDE = 1920   # a background picture covers a frame of at most 1080p; larger is memory spent for nothing


def fit_background(image: Any) -> Any:
    """An uploaded background picture, area-shrunk so its long side is at most MAX_BACKGROUND_SIDE."""
    import cv2

    h, w = image.shape[:2]
    k = MAX_BACKGROUND_SIDE / max(h, w)
    if k >= 1.0:
        return image
    return cv2.resize(image, (max(1, round(w * k)), max(1, round(h * k))), interpolation=cv2.INTER_AREA)


SERVER_KEY = web.AppKey("livefuse", LiveFuseServer)
WARMUP_KEY = web.AppKey("livefuse_warmup", asyncio.Future)


def create_app(config: ServerConfig | None = None, services: Services | None = None) -> web.Application:
    config = config or ServerConfig()
    services = services or NullServices()
    check_encoder_bitrates(config.min_bitrate, config.max_bitrate)   # process settings: see encoder_settings
    check_h264_preset(config.h264_preset)
    server = LiveFuseServer(config, services)
    quiet_bad_requests()   # a client's malformed HTTP is a one-line 400 in the log, not a traceback
    # the largest body any route takes; each route enforces its own, smaller limit
    app = web.Application(client_max_size=max(config.max_sdp_bytes, config.max_source_bytes) + 64 * 1024,
                          middlewares=[*services.middlewares, error_middleware()])
    app[SERVER_KEY] = server
    r = app.router
    r.add_get("/", server.index)
    r.add_get("/assets/demo_source.jpg", server.demo_source)
    r.add_get("/favicon.ico", server.favicon)
    r.add_static("/static/", WEB_ROOT, show_index=False)
    r.add_post("/offer", server.offer)
    r.add_post("/whip", server.whip)
    r.add_delete("/whip/{session}", server.whip_delete)
    r.add_patch("/whip/{session}", server.whip_patch)
    r.add_post("/whep/{session}", server.whep)
    r.add_delete("/whep/{session}/{viewer}", server.whep_delete)
    r.add_post("/sessions/{session}/source", server.source)
    r.add_post("/sessions/{session}/background", server.background)
    r.add_post("/sessions/watch", server.watch_link_create)
    r.add_get("/sessions/watch/{watch}", server.watch_link_state)
    r.add_get("/sessions/{session}", server.session_info)
    r.add_get("/sessions/{session}/recording", server.recording)
    r.add_get("/sessions/{session}/control", server.control)
    from streamer.web.outputs_route import session_outputs

    async def outputs(request: web.Request) -> web.Response:   # GET / POST /v1/sessions/{session}/outputs
        return await session_outputs(server, request)

    r.add_get("/v1/sessions/{session}/outputs", outputs)
    r.add_post("/v1/sessions/{session}/outputs", outputs)
    r.add_get("/watch/{session}", server.watch_page)
    r.add_get("/edits", server.edits)
    r.add_get("/healthz", server.healthz)
    r.add_get("/readyz", server.readyz)
    r.add_post("/admin/drain", server.admin_drain)
    r.add_get("/metrics", server.metrics_page)
    backend = services.api or ApiBackend()
    server.api = mount_api(app, ApiContext(authorize=server.authorize, is_admin=services.is_admin, uploads=server.uploads,
                              limits=server.upload_limits, metrics=server.metrics,
                              max_image_bytes=config.max_source_bytes, max_clip_bytes=config.max_clip_bytes,
                              urls=server.urls, body=config.body_limits, upload_slots=server.upload_slots,
                              max_photos=config.max_photos),
              backend)
    mount_results(app, EdgeConfig(config.results_public_url, config.results_private, config.results_purge),
                  backend.jobs if backend.photos is not None else None, server.authorize, services.is_admin)
    app.on_shutdown.append(server.close_all)

    async def _start_services(app_: web.Application) -> None:
        # load shared models in the background: the server answers (health, page) while they load, and
        # a first session that arrives early waits only for what it needs. A daemon thread, not the
        # executor: a server told to stop while still loading (a pod deleted as it starts) exits without
        # waiting for the models it will never use.
        loop = asyncio.get_running_loop()
        warmup: asyncio.Future = loop.create_future()

        def settle(exc: BaseException | None) -> None:
            if not warmup.done():
                warmup.set_exception(exc) if exc is not None else warmup.set_result(None)

        def warm_up() -> None:
            exc: BaseException | None = None
            try:
                services.startup()
                server.heap.settle()           # the shared models stay out of later collections
            except BaseException as e:         # reported on the loop (logged at shutdown)
                exc = e
            finally:
                server.gpu = GpuProbe.make()   # only where an NVIDIA device exists; never imports torch otherwise
                try:
                    loop.call_soon_threadsafe(settle, exc)
                except RuntimeError:           # the loop has closed: the server stopped while this loaded
                    pass

        warmup.add_done_callback(lambda _f: setattr(server, "warm", True))  # a failed warm-up is logged at shutdown
        threading.Thread(target=warm_up, name="warm-up", daemon=True).start()
        app_[WARMUP_KEY] = warmup

    async def _shutdown_services(app_: web.Application) -> None:
        warmup = app_.get(WARMUP_KEY)
        if warmup is not None and not warmup.done():
            log.warning("stopping while the shared models still load: not waiting for them")
            return
        if warmup is not None and warmup.exception() is not None:
            log.error("loading the shared models failed", exc_info=warmup.exception())
        await asyncio.get_running_loop().run_in_executor(None, services.shutdown)

    app.on_startup.append(_start_services)
    app.on_cleanup.append(_shutdown_services)
    return app


def runner_options(config: ServerConfig) -> dict[str, Any]:
    """How aiohttp's connection handler is set for this config (`livefuse serve` and the tests alike).
    Its keep-alive timer also runs from a connection's start, so a request whose headers are not complete
    within `read_timeout_s` has its connection closed: a slow-header client holds a socket, no longer."""
    return {"keepalive_timeout": config.read_timeout_s}


def ssl_context(config: ServerConfig) -> Any:
    if not config.tls_cert:
        return None
    import ssl

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(config.tls_cert, config.tls_key)
    return ctx
