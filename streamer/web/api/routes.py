"""The /v1 routes on the one app `streamer.web.server.create_app` builds: the same middleware (host, origin,
token, rate limit), the same upload decoder and limits, the app's metrics. What a route does with a
request is the product's (`ApiBackend`, filled by `streamer.app.assembly`); the defaults answer 503.

Every refusal is JSON `{"error", "code"}` with the status a client can act on; nothing heavy runs on the
event loop (images decode on the upload decoder's threads, the pipeline in the default executor).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from engines.sources import SourceConfig, SourceRefused
from engines.prompt.language import MAX_PROMPT_CHARS
from streamer.web.api.openapi import openapi
from streamer.web.api.photos import (FuseRefused, PhotoRequest, encode_image, parse_colours, parse_edits,
                                     parse_optional_share, parse_photo_map, parse_strength, source_refusal)
from streamer.config import BodyLimits
from streamer.web.httpkit import Refused, Slots
from streamer.ops.metrics import Metrics
from streamer.web.multipart import FieldLimit, FilePart, Form, FormSpec, read_form
from streamer.web.uploads import IMAGE_TYPES, DecoderBusy, Lease, UploadDecoder
from streamer.web.urls import SessionUrls

log = logging.getLogger(__name__)

CLIP_TYPES = {"video/mp4": ".mp4", "video/quicktime": ".mov", "video/x-matroska": ".mkv", "video/webm": ".webm"}
SSE_KEEPALIVE_S = 15.0
# the prompt part is read up to 4 bytes a character (MAX_PROMPT_CHARS of any script in UTF-8); past that it
# is refused as too long, as a prompt one character over the limit is
PROMPT_FIELD = FieldLimit(4 * MAX_PROMPT_CHARS, 400, "prompt_too_long", f"prompt is longer than {MAX_PROMPT_CHARS} characters")
# what a photo holds of the memory budget, in decoded-image sizes: the target's decode, the pipeline's
# working copies and the encoded result (`livefuse bench service --json`'s memory row measures it);
# the source's decode and its registration crop
TARGET_HOLD = 5.0
SOURCE_HOLD = 2.0


@dataclass(frozen=True, slots=True)
class ApiBackend:
    """The product's side of the API. `photos.fuse(PhotoRequest) -> PhotoResult` (thread-safe, blocking);
    `photos.models.add_listener` hears each model batch's size. `jobs`: the clip-job queue (or None)."""

    photos: Any = None
    jobs: Any = None


@dataclass(frozen=True, slots=True)
class ApiContext:
    """What the routes need from the server they are mounted on (passed in, so the api package never
    imports the server module)."""

    authorize: Callable[[web.Request], str]        # the principal, or raises a 401 refusal
    is_admin: Callable[[web.Request], bool]
    uploads: UploadDecoder                         # its `budget` bounds what every request in flight holds
    limits: SourceConfig
    metrics: Metrics
    max_image_bytes: int
    max_clip_bytes: int = 256 << 20
    urls: SessionUrls = SessionUrls()              # a job this replica holds is answered on its public URL
    body: BodyLimits = BodyLimits()                # stall timer and minimum rate of every upload body
    upload_slots: Slots = field(default_factory=lambda: Slots(32, "upload bodies are being received", "uploads_busy"))  # the server's
    max_photos: int = 64                           # photos read and decoded, waiting for or in the pipeline


def as_refused(exc: FuseRefused) -> Refused:
    return Refused(exc.status, str(exc), headers=exc.headers or None, code=exc.code, extra=exc.extra or None)


def choose_format(accept: str | None) -> str:
    """image/png unless Accept prefers image/jpeg; 406 when it takes neither."""
    if not accept or not accept.strip():
        return "image/png"
    best, best_q = None, 0.0
    for i, item in enumerate(accept.split(",")):
        media, _, params = item.strip().partition(";")
        q = 1.0
        for p in params.split(";"):
            k, _, v = p.strip().partition("=")
            if k == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        media = media.strip().lower()
        candidates = {"image/png": ["image/png"], "image/jpeg": ["image/jpeg"], "image/*": ["image/png"],
                      "*/*": ["image/png"]}.get(media, [])
        for c in candidates:
            rank = q - (0.001 if media.endswith("*") else 0.0) - i * 1e-6   # exact types beat wildcards
            if q > 0 and rank > best_q:
                best, best_q = c, rank
    if best is None:
        raise Refused(406, f"Accept {accept[:100]!r} names no type this route returns; ask for image/png or image/jpeg",
                      code="not_acceptable")
    return best


async def read_upload(ctx: ApiContext, request: web.Request, spec: FormSpec, lease: Lease) -> Form:
    """An upload route's form through the one multipart reader, its body counted as one of the uploads
    in transfer and its in-memory bytes against the request's memory lease."""
    with ctx.upload_slots.take(ctx.metrics):
        try:
            return await read_form(request, spec, ctx.body, on_bytes=lease.grow)
        except DecoderBusy as exc:
            ctx.metrics.refused.labels("memory_busy").inc()
            raise Refused(503, str(exc), {"Retry-After": "1", "Connection": "close"}, code="busy") from None


def photo_background(field: str, has_picture: bool) -> Any:
    """The `background` form field (blur, a CSS colour, none) and whether a background_image part came ->
    a BackgroundSpec or None, or a 400 bad_background saying why."""
    from engines.background import BackgroundError, parse_background

    word = field.strip().lower()
    if has_picture:
        if word not in ("", "image"):
            raise Refused(400, f"background is {field.strip()[:40]!r} but a background_image was sent too; "
                               "send one of them", code="bad_background")
        return None                                  # the picture decides (PhotoRequest.background_image)
    if word == "image":
        raise Refused(400, "background \"image\" needs a background_image file part", code="bad_background")
    try:
        spec = parse_background(field or None)
    except BackgroundError as exc:
        raise Refused(400, str(exc), code="bad_background") from None
    return spec if spec.active else None


def photo_fields(form: dict[str, str]) -> tuple[str, float, dict[str, float], dict[str, str]]:
    """(prompt, strength, edits, colours) from the form, or a 400."""
    prompt = form.get("prompt", "")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise Refused(400, f"prompt is {len(prompt)} characters, the limit is {MAX_PROMPT_CHARS}", code="prompt_too_long")
    try:
        strength = parse_strength(form.get("strength"))
        raw = form.get("edits", "")
        try:
            edits = parse_edits(json.loads(raw) if raw else None)
        except ValueError:
            raise FuseRefused(400, "bad_request", "edits must be a JSON object") from None
        raw = form.get("colours", "")
        try:
            colours = parse_colours(json.loads(raw) if raw else None)
        except ValueError:
            raise FuseRefused(400, "bad_request", "colours must be a JSON object") from None
    except FuseRefused as exc:
        raise as_refused(exc) from None
    return prompt, strength, edits, colours


class ApiRoutes:
    def __init__(self, ctx: ApiContext, backend: ApiBackend) -> None:
        self.ctx, self.backend = ctx, backend
        self.photo_slots = Slots(ctx.max_photos, "photos are in progress", "busy")   # taken once a body is read
        self._spec = json.dumps(openapi(jobs=backend.jobs is not None), indent=1)

    def _listen(self, model: str, size: int) -> None:
        self.ctx.metrics.batch_size.labels(model).observe(size)

    async def _start(self, app: web.Application) -> None:
        if self.backend.photos is not None:
            self.backend.photos.models.add_listener(self._listen)

    async def _stop(self, app: web.Application) -> None:
        if self.backend.photos is not None:
            self.backend.photos.models.remove_listener(self._listen)

    def _count(self, route: str, status: int, t0: float) -> None:
        self.ctx.metrics.api_requests.labels(route, str(status)).inc()
        self.ctx.metrics.api_latency.labels(route).observe(time.perf_counter() - t0)

    async def spec(self, request: web.Request) -> web.Response:
        self.ctx.authorize(request)
        return web.Response(text=self._spec, content_type="application/json")

    async def decode(self, data: bytes, role: str, lease: Lease, hold: float) -> Any:
        try:
            return await self.ctx.uploads.decode(data, self.ctx.limits, lease=lease, hold=hold)
        except SourceRefused as exc:
            if exc.reason == "busy":
                self.ctx.metrics.refused.labels("memory_busy").inc()
            raise as_refused(source_refusal(exc, role)) from None

    async def _counted(self, route: str, handler: Any, request: web.Request) -> web.Response:
        """`handler(request)`, its status and time counted under `route` (refusals and failures too)."""
        t0 = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            self._count(route, status, t0)

    async def fuse(self, request: web.Request) -> web.Response:
        return await self._counted("fuse", self._fuse, request)

    async def _fuse(self, request: web.Request) -> web.Response:
        principal = self.ctx.authorize(request)
        media_type = choose_format(request.headers.get("Accept"))
        if self.backend.photos is None:
            raise Refused(503, "this server does not fuse photos", code="unavailable")
        limit = self.ctx.max_image_bytes
        spec = FormSpec({"source": FilePart(limit, IMAGE_TYPES), "target": FilePart(limit, IMAGE_TYPES),
                         "background_image": FilePart(limit, IMAGE_TYPES)},   # optional: a picture behind the person
                        required=("source", "target"), fields={"prompt": PROMPT_FIELD})
        with self.ctx.uploads.budget.lease() as lease:   # everything this photo holds, given back at its end
            form = await read_upload(self.ctx, request, spec, lease)
            prompt, strength, edits, colours = photo_fields(form.fields)
            background = photo_background(form.fields.get("background", ""), "background_image" in form.files)
            try:
                face_map = parse_photo_map(form.fields.get("map"))
                shape = parse_optional_share(form.fields.get("shape"), "shape")
                enhance = parse_optional_share(form.fields.get("enhance"), "enhance")
            except FuseRefused as exc:
                raise as_refused(exc) from None
            with self.photo_slots.take(self.ctx.metrics):
                source = await self.decode(form.files["source"].data, "source", lease, SOURCE_HOLD)
                target = await self.decode(form.files["target"].data, "target", lease, TARGET_HOLD)
                picture = (await self.decode(form.files["background_image"].data, "background_image", lease, TARGET_HOLD)
                           if "background_image" in form.files else None)
                form.files.clear()   # the compressed bytes are not needed past their decode
                req = PhotoRequest(source=source, target=target, principal=principal,
                                   consent=form.fields.get("consent", ""), prompt=prompt, strength=strength,
                                   shape=shape, enhance=enhance, edits=edits, colours=colours, face_map=face_map,
                                   background=background, background_image=picture)
                del picture
                del source, target
                response = await self._fuse_photo(req, media_type)
                await response.prepare(request)   # written while the lease holds its bytes
                await response.write_eof()
                return response

    async def _fuse_photo(self, req: PhotoRequest, media_type: str) -> web.Response:
        photos = self.backend.photos
        loop = asyncio.get_running_loop()

        def work() -> tuple[Any, bytes]:
            result = photos.fuse(req)
            t = time.perf_counter()
            body = encode_image(result.image, media_type, photos.config.jpeg_quality)
            result.timings["encode_ms"] = round((time.perf_counter() - t) * 1000.0, 2)
            return result, body

        try:
            result, body = await loop.run_in_executor(None, work)
        except FuseRefused as exc:
            self.ctx.metrics.refused.labels("api_" + exc.code).inc()
            raise as_refused(exc) from None
        timing = ", ".join(f"{k[:-3]};dur={v}" for k, v in result.timings.items() if k.endswith("_ms"))
        return web.Response(body=body, content_type=media_type, headers={
            "X-LiveFuse-Watermark": result.watermark, "X-LiveFuse-Audit-Record": result.request_id,
            "X-LiveFuse-Faces": f"{result.faces}/{len(result.fused)}", "Server-Timing": timing,
            "Cache-Control": "no-store"})

    # ---- clip jobs ----------------------------------------------------------------------------------
    def _jobs(self) -> Any:
        if self.backend.jobs is None or self.backend.photos is None:
            raise Refused(503, "this server runs no clip jobs", code="unavailable")
        return self.backend.jobs

    def _owned(self, request: web.Request) -> Any:
        principal = self.ctx.authorize(request)
        job_id = request.match_info["job"]
        job = self._jobs().get(job_id, principal, self.ctx.is_admin(request))
        if job is None:
            raise Refused(404, f"no job {job_id[:64]!r}", code="not_found")
        return job

    def _job_json(self, job: Any) -> dict[str, Any]:
        url = self._jobs().result_url(job)
        if url is not None and url.startswith("file://"):   # a local results folder: served by this API
            url = self.ctx.urls.job_result(job.id, self._jobs().shared)
        return job.public(url)

    async def create_job(self, request: web.Request) -> web.Response:
        return await self._counted("jobs", self._create_job, request)

    async def _create_job(self, request: web.Request) -> web.Response:
        from streamer.web.api.jobs import JobSpec, QueueFull
        from streamer.session.session import Session

        principal = self.ctx.authorize(request)
        jobs = self._jobs()
        job_id = jobs.new_id()
        folder_made: list[Path] = []
        try:
            with self.ctx.uploads.budget.lease() as lease:
                source_bytes, clip, suffix, form = await self._read_job_form(request, job_id, folder_made, lease)
                prompt, strength, _, _ = photo_fields(form)
                source = await self.decode(source_bytes, "source", lease, SOURCE_HOLD)
            loop = asyncio.get_running_loop()
            session = Session(job_id, token_id=principal)
            try:   # consent, face, denylist and prompt first: cheap refusals before any clip is read
                await loop.run_in_executor(None, self.backend.photos.admit, session, source, form.get("consent", ""), prompt)
            except FuseRefused as exc:
                self.ctx.metrics.refused.labels("api_" + exc.code).inc()
                raise as_refused(exc) from None
            if clip is None:
                clip, suffix = await self._fetch_target(form["target_url"], job_id, folder_made)
            frames = await loop.run_in_executor(None, probe_clip, clip, self.ctx.limits.max_pixels)
            spec = JobSpec(id=job_id, owner=principal, clip=clip, source=source, consent=form.get("consent", ""),
                           prompt=prompt, strength=strength, suffix=suffix, frames_total=frames)
            try:
                job = await loop.run_in_executor(None, jobs.submit, spec)   # a shared queue uploads the inputs first
            except QueueFull as exc:
                raise Refused(503, str(exc), {"Retry-After": "30"}, code="queue_full") from None
            except Exception:   # the shared queue or the store is unreachable: nothing was queued
                log.warning("job %s could not be queued", job_id, exc_info=True)
                raise Refused(503, "the job could not be queued (the job store is unreachable); try again later",
                              {"Retry-After": "30"}, code="queue_unavailable") from None
        except BaseException:
            for folder in folder_made:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return web.json_response(self._job_json(job), status=202, headers={"Location": self.ctx.urls.job(job.id, jobs.shared)})

    async def _fetch_target(self, url: str, job_id: str, made: list[Path]) -> tuple[Path, str]:
        """A clip the server reads itself (`target_url`), if the input allowlist admits it."""
        from streamer.storage.stores import InputRefused, fetch_url

        suffix = Path(url.split("?")[0]).suffix.lower()
        suffix = suffix if suffix in CLIP_TYPES.values() else ".mp4"
        clip = self._jobs().spool_path(job_id, suffix)
        made.append(clip.parent)
        allow, limit = tuple(self._jobs().config.input_allow), self.ctx.max_clip_bytes
        try:
            await asyncio.get_running_loop().run_in_executor(None, lambda: fetch_url(url, clip, allow=allow, max_bytes=limit))
        except InputRefused as exc:
            status = {"input_not_allowed": 403, "input_too_large": 413, "input_bad_url": 400}.get(exc.code, 422)
            raise Refused(status, str(exc), code=exc.code) from None
        return clip, suffix

    async def _read_job_form(self, request: web.Request, job_id: str, made: list[Path],
                             lease: Lease) -> tuple[bytes, Path | None, str, dict[str, str]]:
        """The source image (in memory, within the image limit), the clip (streamed to the job's spool
        file, within the clip limit) and the text fields."""
        suffix = [".mp4"]

        def spool(media_type: str, filename: str) -> Path:
            named = Path(filename).suffix.lower()
            suffix[0] = CLIP_TYPES.get(media_type) or (named if named in CLIP_TYPES.values() else ".mp4")
            clip = self._jobs().spool_path(job_id, suffix[0])
            made.append(clip.parent)
            return clip

        spec = FormSpec({"source": FilePart(self.ctx.max_image_bytes, IMAGE_TYPES),
                         "target": FilePart(self.ctx.max_clip_bytes, tuple(CLIP_TYPES), spool=spool)},
                        required=("source",), fields={"prompt": PROMPT_FIELD})
        form = await read_upload(self.ctx, request, spec, lease)
        upload = form.files.get("target")
        clip = upload.path if upload is not None else None
        if clip is not None and form.fields.get("target_url"):
            raise Refused(400, "send the clip as a 'target' part or a 'target_url', not both", code="bad_request")
        if clip is None and not form.fields.get("target_url"):
            raise Refused(400, "multipart body has no 'target' part (or 'target_url' field)", code="bad_request")
        return form.files["source"].data or b"", clip, suffix[0], form.fields

    async def get_job(self, request: web.Request) -> web.Response:
        job = self._owned(request)
        return web.json_response(self._job_json(job), headers={"Cache-Control": "no-store"})

    async def cancel_job(self, request: web.Request) -> web.Response:
        job = self._owned(request)
        job = self._jobs().cancel(job.id, job.owner, True)
        return web.json_response(self._job_json(job))

    async def job_events(self, request: web.Request) -> web.StreamResponse:
        """Server-Sent Events: an event whenever the job changes, until it ends. The job runs on whether
        or not anyone listens."""
        job = self._owned(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        jobs = self._jobs()
        version, quiet = -1, 0.0
        try:
            while True:
                job = jobs.get(job.id, job.owner, True)
                if job is None:
                    break
                if job.version != version:
                    version, quiet = job.version, 0.0
                    data = json.dumps(self._job_json(job))
                    await response.write(f"id: {job.version}\nevent: {job.state}\ndata: {data}\n\n".encode())
                    if job.finished:
                        break
                elif quiet >= SSE_KEEPALIVE_S:
                    quiet = 0.0
                    await response.write(b": keep-alive\n\n")
                await asyncio.sleep(0.1)
                quiet += 0.1
        except ConnectionResetError:
            return response   # the client left; the job goes on
        await response.write_eof()
        return response

    async def job_result(self, request: web.Request) -> web.StreamResponse:
        """The result: from a local results folder, the file; from object storage, a redirect to its
        presigned URL (which a CDN may front)."""
        job = self._owned(request)
        url = self._jobs().result_url(job)
        if url is None:
            raise Refused(409, f"job {job.id} is {job.state}, it has no result", code="not_ready")
        if url.startswith("file://"):
            from streamer.storage.base import media_type

            path = self._jobs().store.path(job.result_key)
            return web.FileResponse(path, headers={"Content-Type": media_type(path)})
        raise web.HTTPFound(url)


def probe_clip(path: Path, max_pixels: int | None = None) -> int | None:
    """The clip's frame count (an estimate when its header has none); a 422 when it holds no video, a
    413 when its frames are over the photos' pixel limit. The refusal names neither path nor decoder
    message (the log has them)."""
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise Refused(422, "the target clip has no video stream", code="target_bad_clip")
            v = container.streams.video[0]
            width, height = int(v.codec_context.width or 0), int(v.codec_context.height or 0)
            if max_pixels is not None and width * height > max_pixels:
                raise Refused(413, f"the target clip's frames are {width}x{height}, over the limit of {max_pixels} "
                                   "pixels a frame (the same as a photo's)", code="target_too_large")
            if v.frames:
                return int(v.frames)
            rate = v.average_rate or v.guessed_rate
            if container.duration and rate:
                return int(container.duration / 1e6 * float(rate))
            return None
    except av.error.FFmpegError as exc:
        log.info("a target clip was refused: %s", exc)
        raise Refused(422, "the target is not a clip this server reads (mp4, mov, mkv or webm with a video stream)",
                      code="target_bad_clip") from None


def mount(app: web.Application, ctx: ApiContext, backend: ApiBackend) -> ApiRoutes:
    """Add the /v1 routes to `app` (the one app the server builds)."""
    routes = ApiRoutes(ctx, backend)
    if backend.jobs is not None and hasattr(backend.jobs, "memory"):
        backend.jobs.memory = ctx.uploads.budget   # clip frames in flight count beside the photos
    r = app.router
    r.add_get("/v1/openapi.json", routes.spec)
    r.add_post("/v1/fuse", routes.fuse)
    if backend.jobs is not None:
        r.add_post("/v1/jobs", routes.create_job)
        r.add_get("/v1/jobs/{job}", routes.get_job)
        r.add_delete("/v1/jobs/{job}", routes.cancel_job)
        r.add_get("/v1/jobs/{job}/events", routes.job_events)
        r.add_get("/v1/jobs/{job}/result", routes.job_result)
    app.on_startup.append(routes._start)
    app.on_cleanup.append(routes._stop)
    return routes
