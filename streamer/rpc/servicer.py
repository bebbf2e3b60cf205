"""The Fusion service (proto/livefuse/v1/fusion.proto) over the product the REST routes serve: the same
PhotoFuser, job queue, consent / identity / prompt gates, memory budget, photo slots, audit log and
metrics (`livefuse_api_requests{route="grpc_<Method>"}`). Handlers run on the server's event loop
(grpc.aio); decoding, the pipeline and encoding run in executors, as REST's do.

A caller's deadline is honoured: the handler is cancelled when it passes, and a photo's work stops at its
next step (`PhotoRequest.deadline`); a stream stops taking frames."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator

import grpc
import numpy as np

from engines.edit_vocabulary import COLOURED
from engines.sources import SourceConfig, SourceRefused, decode_image
from livefuse.v1 import fusion_pb2 as pb
from livefuse.v1 import fusion_pb2_grpc
from streamer.rpc.access import Caller, RpcAccess, metadata_value, peer_host
from streamer.rpc.errors import RpcRefusal, abort, from_http_exception, refusal
from streamer.rpc.stream import FrameSlot
from streamer.safety.auth import AuthError
from streamer.web.api.photos import (FuseRefused, PhotoRequest, encode_image, parse_colours, parse_edits, parse_photo_map,
                                     source_refusal)
from streamer.web.api.routes import (CLIP_TYPES, SOURCE_HOLD, TARGET_HOLD, ApiRoutes, photo_background, photo_fields,
                                     probe_clip)
from streamer.web.httpkit import Refused
from streamer.web.uploads import DecoderBusy

log = logging.getLogger(__name__)

JOB_STATES = {"queued": pb.Job.QUEUED, "running": pb.Job.RUNNING, "done": pb.Job.DONE, "failed": pb.Job.FAILED,
              "cancelled": pb.Job.CANCELLED}
MEDIA = {pb.IMAGE_FORMAT_UNSPECIFIED: "image/png", pb.IMAGE_FORMAT_PNG: "image/png",
         pb.IMAGE_FORMAT_JPEG: "image/jpeg"}
WATCH_POLL_S = 0.1


def _job_pb(d: dict[str, Any]) -> pb.Job:
    job = pb.Job(id=d["id"], state=JOB_STATES.get(d["state"], pb.Job.STATE_UNSPECIFIED),
                 frames_done=int(d.get("frames_done") or 0), error=d.get("error") or "",
                 result_url=d.get("result_url") or "", created=float(d["created"]), updated=float(d["updated"]))
    if d.get("frames_total") is not None:
        job.frames_total = int(d["frames_total"])
    return job


def _share(msg: Any, name: str) -> float | None:
    """An optional 0..1 field (`strength`, `shape`): None when unset, else its value, checked as REST checks."""
    if not msg.HasField(name):
        return None
    value = float(getattr(msg, name))
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise refusal(400, "bad_request", f"{name} must be a number from 0 to 1")
    return value


def _strength(msg: Any) -> float:
    value = _share(msg, "strength")
    return 1.0 if value is None else value


def _prompt(text: str) -> str:
    """The prompt through REST's own field check (its length limit: 400 prompt_too_long)."""
    return photo_fields({"prompt": text})[0]


def _sniff_clip(data: bytes) -> str:
    if data[4:8] == b"ftyp":
        return ".mov" if data[8:10] == b"qt" else ".mp4"
    if data[:4] == b"\x1aE\xdf\xa3":
        return ".webm" if b"webm" in data[:64] else ".mkv"
    return ".mp4"


class FusionServicer(fusion_pb2_grpc.FusionServicer):
    def __init__(self, server: Any, api: ApiRoutes, access: RpcAccess) -> None:
        """`server`: the LiveFuseServer (config, services, readiness, metrics); `api`: the /v1 routes'
        state (their limits, budget, photo slots and product backend)."""
        self.server, self.api, self.access = server, api, access
        self.services = server.services
        self.metrics = server.metrics
        self.frames_fused = 0          # FuseStream frames through the pipeline, every stream (tests read it)

    # ---- the door ----------------------------------------------------------------------------------------
    def _caller(self, context: Any) -> Caller:
        try:
            return self.access.check(metadata_value(context, "authorization"), peer_host(context.peer()))
        except AuthError as exc:
            self.metrics.refused.labels("unauthorized" if exc.status == 401 else exc.code).inc()
            raise refusal(exc.status, exc.code, exc.reason, exc.headers) from None

    async def _run(self, method: str, context: Any, body: Any) -> Any:
        """`body()` counted under grpc_<method>; every refusal ends the call with its status and details."""
        t0 = time.perf_counter()
        code = "INTERNAL"
        try:
            result = await body()
            code = "OK"
            return result
        except RpcRefusal as r:
            code = r.status.name
            await abort(context, r)
        except Refused as exc:
            r = from_http_exception(exc)
            code = r.status.name
            await abort(context, r)
        except FuseRefused as exc:
            self.metrics.refused.labels("api_" + exc.code).inc()
            r = refusal(exc.status, exc.code, str(exc), exc.headers, exc.extra)
            code = r.status.name
            await abort(context, r)
        except asyncio.CancelledError:
            code = "CANCELLED" if context.time_remaining() is None or context.time_remaining() > 0 else "DEADLINE_EXCEEDED"
            raise
        except grpc.aio.AbortError:
            raise
        except Exception:   # a failure of ours: the log says why, the caller gets INTERNAL without our internals
            log.exception("gRPC %s failed", method)
            await abort(context, refusal(500, "internal", "the server failed on this call (its log says why)"))
        finally:
            self.metrics.api_requests.labels(f"grpc_{method}", code).inc()
            self.metrics.api_latency.labels(f"grpc_{method}").observe(time.perf_counter() - t0)

    def _photos(self) -> Any:
        if self.api.backend.photos is None:
            raise refusal(503, "unavailable", "this server does not fuse photos")
        return self.api.backend.photos

    def _jobs(self) -> Any:
        if self.api.backend.jobs is None or self.api.backend.photos is None:
            raise refusal(503, "unavailable", "this server runs no clip jobs")
        return self.api.backend.jobs

    def _check_size(self, data: bytes, role: str, limit: int) -> None:
        if not data:
            raise refusal(400, "bad_request", f"{role} is empty: send the image's bytes")
        if len(data) > limit:
            raise refusal(413, f"{role}_too_large", f"{role} is {len(data)} bytes; the limit is {limit}")

    # ---- Fuse --------------------------------------------------------------------------------------------
    async def Fuse(self, request: pb.FuseRequest, context: Any) -> pb.FuseResponse:
        return await self._run("Fuse", context, lambda: self._fuse(request, context))

    async def _fuse(self, request: pb.FuseRequest, context: Any) -> pb.FuseResponse:
        caller = self._caller(context)
        photos = self._photos()
        if request.format not in MEDIA:
            raise refusal(406, "not_acceptable", "a photo comes back as PNG or JPEG")
        media_type = MEDIA[request.format]
        limit = self.api.ctx.max_image_bytes
        self._check_size(request.source, "source", limit)
        self._check_size(request.target, "target", limit)
        if request.background_image:
            self._check_size(request.background_image, "background_image", limit)
        prompt, strength, shape = _prompt(request.prompt), _strength(request), _share(request, "shape")
        edits = parse_edits(dict(request.edits)) if request.edits else {}
        colours = parse_colours(dict(request.colours)) if request.colours else {}
        face_map = parse_photo_map(request.face_map)
        background = photo_background(request.background, bool(request.background_image))
        remaining = context.time_remaining()
        deadline = time.monotonic() + remaining if remaining is not None else None
        ctx = self.api.ctx
        with ctx.uploads.budget.lease() as lease:
            try:
                lease.grow(len(request.source) + len(request.target) + len(request.background_image))   # as REST counts a body's bytes
            except DecoderBusy as exc:
                self.metrics.refused.labels("memory_busy").inc()
                raise refusal(503, "busy", str(exc), {"Retry-After": "1"}) from None
            with self.api.photo_slots.take(self.metrics):
                source = await self.api.decode(request.source, "source", lease, SOURCE_HOLD)
                target = await self.api.decode(request.target, "target", lease, TARGET_HOLD)
                picture = (await self.api.decode(request.background_image, "background_image", lease, TARGET_HOLD)
                           if request.background_image else None)
                req = PhotoRequest(source=source, target=target, principal=caller.principal,
                                   consent="true" if request.consent else "", prompt=prompt, strength=strength,
                                   shape=shape, edits=edits, colours=colours, face_map=face_map,
                                   background=background, background_image=picture, deadline=deadline)
                del source, target, picture

                def work() -> tuple[Any, bytes]:
                    result = photos.fuse(req)
                    if deadline is not None and time.monotonic() >= deadline:   # nobody waits for the encoding
                        raise refusal(504, "deadline_exceeded", "the caller's deadline passed before encoding")
                    t = time.perf_counter()
                    body = encode_image(result.image, media_type, photos.config.jpeg_quality)
                    result.timings["encode_ms"] = round((time.perf_counter() - t) * 1000.0, 2)
                    return result, body

                result, body = await asyncio.get_running_loop().run_in_executor(None, work)
        return pb.FuseResponse(image=body, media_type=media_type, request_id=result.request_id,
                               watermark=result.watermark, faces=result.faces, fused=len(result.fused),
                               edits=result.edits, timings_ms={k: float(v) for k, v in result.timings.items()})

    # ---- jobs --------------------------------------------------------------------------------------------
    async def CreateJob(self, request: pb.CreateJobRequest, context: Any) -> pb.Job:
        return await self._run("CreateJob", context, lambda: self._create_job(request, context))

    async def _create_job(self, request: pb.CreateJobRequest, context: Any) -> pb.Job:
        import shutil

        from streamer.web.api.jobs import JobSpec, QueueFull
        from streamer.session.session import Session

        caller = self._caller(context)
        jobs = self._jobs()
        ctx = self.api.ctx
        self._check_size(request.source, "source", ctx.max_image_bytes)
        which = request.WhichOneof("target")
        if which is None:
            raise refusal(400, "bad_request", "send the clip's bytes (clip) or a target_url")
        if which == "clip" and len(request.clip) > ctx.max_clip_bytes:
            raise refusal(413, "target_too_large", f"the clip is {len(request.clip)} bytes; the limit is {ctx.max_clip_bytes}")
        prompt, strength = _prompt(request.prompt), _strength(request)
        consent = "true" if request.consent else ""
        loop = asyncio.get_running_loop()
        job_id = jobs.new_id()
        made: list[Any] = []
        try:
            with ctx.uploads.budget.lease() as lease:
                source = await self.api.decode(request.source, "source", lease, SOURCE_HOLD)
            session = Session(job_id, token_id=caller.principal)
            try:   # consent, face, denylist and prompt first: cheap refusals before any clip is written
                await loop.run_in_executor(None, self.api.backend.photos.admit, session, source, consent, prompt)
            except FuseRefused as exc:
                self.metrics.refused.labels("api_" + exc.code).inc()
                raise
            if which == "clip":
                suffix = CLIP_TYPES.get(request.clip_type) or _sniff_clip(request.clip[:64])
                clip = jobs.spool_path(job_id, suffix)
                made.append(clip.parent)
                with ctx.uploads.budget.lease() as lease:   # the message's clip counts until it is on disk
                    try:
                        lease.grow(len(request.clip))
                    except DecoderBusy as exc:
                        self.metrics.refused.labels("memory_busy").inc()
                        raise refusal(503, "busy", str(exc), {"Retry-After": "1"}) from None
                    await loop.run_in_executor(None, clip.write_bytes, request.clip)
            else:
                clip, suffix = await self.api._fetch_target(request.target_url, job_id, made)
            frames = await loop.run_in_executor(None, probe_clip, clip, ctx.limits.max_pixels)
            spec = JobSpec(id=job_id, owner=caller.principal, clip=clip, source=source, consent=consent,
                           prompt=prompt, strength=strength, suffix=suffix, frames_total=frames)
            try:
                job = await loop.run_in_executor(None, jobs.submit, spec)
            except QueueFull as exc:
                raise refusal(503, "queue_full", str(exc), {"Retry-After": "30"}) from None
            except Exception:
                log.warning("job %s could not be queued", job_id, exc_info=True)
                raise refusal(503, "queue_unavailable", "the job could not be queued (the job store is unreachable); "
                              "try again later", {"Retry-After": "30"}) from None
        except BaseException:
            for folder in made:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return _job_pb(self.api._job_json(job))

    def _owned(self, job_id: str, caller: Caller) -> Any:
        job = self._jobs().get(job_id, caller.principal, caller.admin)
        if job is None:
            raise refusal(404, "not_found", f"no job {job_id[:64]!r}")
        return job

    async def GetJob(self, request: pb.GetJobRequest, context: Any) -> pb.Job:
        async def body() -> pb.Job:
            return _job_pb(self.api._job_json(self._owned(request.id, self._caller(context))))

        return await self._run("GetJob", context, body)

    async def CancelJob(self, request: pb.CancelJobRequest, context: Any) -> pb.Job:
        async def body() -> pb.Job:
            job = self._owned(request.id, self._caller(context))
            job = self._jobs().cancel(job.id, job.owner, True)
            return _job_pb(self.api._job_json(job))

        return await self._run("CancelJob", context, body)

    async def DeleteResult(self, request: pb.DeleteResultRequest, context: Any) -> pb.Job:
        async def body() -> pb.Job:
            from streamer.web.api.results import delete_result

            caller = self._caller(context)
            job = self._owned(request.id, caller)
            if job.result_key is None:
                raise refusal(404, "not_found", f"job {job.id} has no result")
            job, _, _ = await delete_result(self._jobs(), self._edge(), job, caller.principal)
            return _job_pb(self.api._job_json(job))

        return await self._run("DeleteResult", context, body)

    def _edge(self) -> Any:
        from streamer.storage.edge import EdgeConfig

        c = self.server.config
        return EdgeConfig(c.results_public_url, c.results_private, c.results_purge)

    async def WatchJob(self, request: pb.WatchJobRequest, context: Any) -> None:
        """The job whenever it changes, until it ends; the job runs on whether or not anyone watches."""
        async def body() -> None:
            job = self._owned(request.id, self._caller(context))
            jobs = self._jobs()
            version = -1
            while True:
                job = jobs.get(job.id, job.owner, True)
                if job is None:
                    return
                if job.version != version:
                    version = job.version
                    await context.write(_job_pb(self.api._job_json(job)))
                    if job.finished:
                        return
                await asyncio.sleep(WATCH_POLL_S)

        await self._run("WatchJob", context, body)

    # ---- FuseStream ------------------------------------------------------------------------------------
    async def FuseStream(self, request_iterator: AsyncIterator[pb.StreamRequest], context: Any) -> None:
        await self._run("FuseStream", context, lambda: self._stream(request_iterator, context))

    async def _stream(self, requests: AsyncIterator[pb.StreamRequest], context: Any) -> None:
        from streamer.session.session import Session

        caller = self._caller(context)
        state = self.server.readiness()
        if state.state == "draining":
            raise refusal(503, "draining", state.reason(), {"Retry-After": str(self.server.config.retry_after_s)})
        try:
            first = await requests.__anext__()
        except StopAsyncIteration:
            first = None
        if first is None or first.WhichOneof("kind") != "start":
            raise refusal(400, "bad_request", "a FuseStream starts with a StreamStart message")
        start = first.start
        fmt = start.format or pb.IMAGE_FORMAT_JPEG
        if fmt not in (pb.IMAGE_FORMAT_PNG, pb.IMAGE_FORMAT_JPEG, pb.IMAGE_FORMAT_RAW_RGB):
            raise refusal(400, "bad_request", "format is PNG, JPEG or RAW_RGB")
        self._check_size(start.source, "source", self.api.ctx.max_image_bytes)
        try:
            slot = self.access.open_stream(caller)
        except AuthError as exc:
            raise refusal(exc.status, exc.code, exc.reason, {"Retry-After": str(self.server.config.retry_after_s)}) from None
        loop = asyncio.get_running_loop()
        session = Session(client=peer_host(context.peer()), token_id=caller.principal)
        pipeline = None
        # the stream's frames on one thread of their own, in order, as a live session's worker runs them; the
        # pipeline is closed on that thread too, after a frame still in it (a caller that leaves mid-frame)
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpc-stream")
        try:
            with self.api.ctx.uploads.budget.lease() as lease:
                source = await self.api.decode(start.source, "source", lease, SOURCE_HOLD)
                try:
                    await loop.run_in_executor(None, self.services.register_source, session, source,
                                               {"source_id": "source", "consent": "true" if start.consent else ""})
                except SourceRefused as exc:
                    raise refusal(*_source_status(exc)) from None
                del source
            await self._apply_controls(session, start.controls)
            pipeline = await loop.run_in_executor(None, self.services.make_pipeline, session)
            self.services.audit("rpc_stream_started", session=session.id, token=caller.principal)
            frames = FrameSlot()
            reader = asyncio.create_task(self._read_frames(requests, session, frames))
            fused = 0
            try:
                while True:
                    item = await frames.take()
                    if item is None:
                        break
                    frame, skipped = item
                    out = await loop.run_in_executor(worker, self._fuse_frame, pipeline, session, frame, fmt)
                    out.skipped = skipped
                    fused += 1
                    self.frames_fused += 1
                    await context.write(out)
                if reader.done() and reader.exception() is not None:
                    raise reader.exception()  # type: ignore[misc]
            finally:
                reader.cancel()
                self.services.audit("rpc_stream_ended", session=session.id, token=caller.principal, frames=fused,
                                    skipped=frames.skipped)
        finally:
            slot.release()

            def finish() -> None:
                if pipeline is not None:
                    pipeline.close()
                self.services.session_ended(session)

            worker.submit(finish)
            worker.shutdown(wait=False)

    async def _apply_controls(self, session: Any, controls: pb.Controls) -> None:
        changes: dict[str, Any] = {}
        if controls.HasField("strength"):
            changes["strength"] = _strength(controls)
        if controls.HasField("shape"):
            changes["shape"] = _share(controls, "shape")
        if controls.set_edits:
            changes["edits"] = parse_edits(dict(controls.edits))
        if controls.colours:   # "" gives an edit's shade back, as set_params' null
            named = {k: v for k, v in controls.colours.items() if v}
            parse_colours(named)
            reset = [k for k, v in controls.colours.items() if not v]
            if not set(reset) <= set(COLOURED):
                raise FuseRefused(400, "bad_request", f"colours: only {', '.join(COLOURED)} take a colour")
            changes["colours"] = {**named, **{k: None for k, v in controls.colours.items() if not v}}
        if changes:
            session.update(**changes)
        if controls.HasField("prompt"):
            decision = await asyncio.get_running_loop().run_in_executor(
                None, self.services.set_prompt, session, _prompt(controls.prompt))
            if decision.get("allowed") is False:
                raise refusal(422, "prompt_refused", str(decision.get("reason")),
                              extra={k: decision.get(k) for k in ("category", "clause", "method")})
            if decision.get("understood") is False:
                raise refusal(422, "prompt_not_understood", str(decision.get("reason")))

    async def _read_frames(self, requests: AsyncIterator[pb.StreamRequest], session: Any, frames: FrameSlot) -> None:
        """The caller's messages as they arrive: frames into the slot (the newest wins), controls applied."""
        try:
            async for msg in requests:
                kind = msg.WhichOneof("kind")
                if kind == "frame":
                    if frames.put(msg.frame):
                        self.metrics.dropped.inc()
                elif kind == "controls":
                    await self._apply_controls(session, msg.controls)
                else:
                    raise refusal(400, "bad_request", "a stream has one StreamStart, first")
        finally:
            frames.close()

    def _fuse_frame(self, pipeline: Any, session: Any, frame: pb.Frame, fmt: int) -> pb.FusedFrame:
        """One frame through the session's stages (an executor thread). A frame the server cannot read
        comes back with `error` set; a stage that fails passes the frame through and says so."""
        from streamer.pipeline.pipeline import FrameState

        limits: SourceConfig = self.api.ctx.limits
        out = pb.FusedFrame(seq=frame.seq)
        try:
            if frame.WhichOneof("image") == "raw":
                raw = frame.raw
                if raw.width * raw.height > (limits.max_pixels or 1 << 62) or len(raw.rgb) != raw.width * raw.height * 3 \
                        or not raw.width or not raw.height:
                    raise SourceRefused("bad_image", f"a raw frame needs width x height x 3 bytes within "
                                                     f"{limits.max_pixels} pixels")
                image = np.frombuffer(raw.rgb, np.uint8).reshape(raw.height, raw.width, 3).copy()
            else:
                image = decode_image(frame.encoded, limits)
        except SourceRefused as exc:
            out.error = f"frame_{exc.reason}: {exc}"
            return out
        state = pipeline(FrameState(image=image), session.frame_context())
        out.faces = len(state.faces)
        out.watermark = state.watermark or ""
        out.timings_ms.update({k: float(v) for k, v in state.timings.items()})
        if state.errors:
            out.error = "; ".join(f"{stage}_failed" for stage in state.errors)
        result = np.ascontiguousarray(state.image)
        if fmt == pb.IMAGE_FORMAT_RAW_RGB:
            out.raw.width, out.raw.height, out.raw.rgb = result.shape[1], result.shape[0], result.tobytes()
            out.media_type = "application/x-raw-rgb"
        else:
            media = "image/png" if fmt == pb.IMAGE_FORMAT_PNG else "image/jpeg"
            out.encoded = encode_image(result, media)
            out.media_type = media
        return out


def _source_status(exc: SourceRefused) -> tuple[int, str, str, dict[str, str] | None]:
    r = source_refusal(exc)
    return r.status, r.code, str(r), r.headers or None
