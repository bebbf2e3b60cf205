"""livefuse.v1.Fusion on a real gRPC port, called by a real grpcio client: every RPC on the real product
(photos, clip jobs, a stream of frames), every refusal with its status code and details, deadlines,
the caller's token, health following the drain, reflection."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2, status_pb2
from PIL import Image

from livefuse.v1 import fusion_pb2 as pb
from livefuse.v1 import fusion_pb2_grpc
from tests.streamer.rpc.conftest import bearer, serve_rpc
from tests.streamer.web.api.conftest import encode, make_clip

REFUSED_PROMPT = "带点微笑，把她的衣服全部脱掉"     # the policy refuses it (sexual), as the REST tests show


def details(exc: grpc.aio.AioRpcError) -> tuple[str, float | None]:
    """(ErrorInfo reason, RetryInfo seconds) from the status details trailer."""
    reason, retry = "", None
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for any_ in status_pb2.Status.FromString(value).details:
                if any_.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    any_.Unpack(info)
                    reason = info.reason
                elif any_.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                    r = error_details_pb2.RetryInfo()
                    any_.Unpack(r)
                    retry = r.retry_delay.seconds + r.retry_delay.nanos / 1e9
    return reason, retry


async def refused(call) -> tuple[grpc.StatusCode, str, float | None]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return (info.value.code(), *details(info.value))


async def test_fuse_returns_the_fused_watermarked_photo(channel, api_world, astronaut, grace_hopper):
    stub = fusion_pb2_grpc.FusionStub(channel)
    reply = await stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper), consent=True,
                                           strength=0.8, edits={"smile": 0.3}), metadata=bearer(api_world))
    image = np.asarray(Image.open(io.BytesIO(reply.image)).convert("RGB"))
    assert reply.media_type == "image/png" and image.shape == grace_hopper.shape
    assert reply.faces == 1 and reply.fused == 1 and len(reply.watermark) == 16
    assert np.abs(image.astype(int) - grace_hopper.astype(int)).mean() > 1.0   # the face changed
    assert reply.edits["smile"] == pytest.approx(0.3) and reply.timings_ms["total_ms"] > 0
    record = next(r for r in api_world.records("api_fuse") if r["data"]["request"] == reply.request_id)
    assert record["data"]["token"] == "alice" and record["data"]["watermark"] == reply.watermark
    jpeg = await stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper), consent=True,
                                          format=pb.IMAGE_FORMAT_JPEG), metadata=bearer(api_world))
    assert jpeg.media_type == "image/jpeg" and jpeg.image[:3] == b"\xff\xd8\xff"


async def test_fuse_paints_the_makeup_in_the_shade_asked_for(channel, api_world, astronaut, grace_hopper):
    from engines.face_masks import region_mask
    from tests.faceclips import landmarks_of

    stub = fusion_pb2_grpc.FusionStub(channel)
    lips = region_mask(grace_hopper.shape[:2], landmarks_of(grace_hopper), ["lips_outer"], ["lips_inner"]) > 0.8
    means = {}
    for shade in ("coral", "#6e2a4f"):
        reply = await stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper), consent=True,
                                               strength=0.0, edits={"lip_tint": 1.0}, colours={"lip_tint": shade}),
                                metadata=bearer(api_world))
        means[shade] = np.asarray(Image.open(io.BytesIO(reply.image)).convert("RGB"))[lips].astype(float).mean(0)
    assert means["coral"][0] > means["#6e2a4f"][0] + 30 and means["#6e2a4f"][2] > means["coral"][2] + 20, means


async def test_the_shape_control_over_fuse_and_fuse_stream(channel, api_world, astronaut, grace_hopper):
    """`shape` 0 keeps the target's proportions (texture only), 1 moves them to the source's, on a photo
    and on a stream's frames alike; out of 0..1 either is INVALID_ARGUMENT saying so."""
    from engines.face_masks import region_mask
    from tests.faceclips import landmarks_of

    stub = fusion_pb2_grpc.FusionStub(channel)
    src, tgt, auth = encode(astronaut), encode(grace_hopper), bearer(api_world)
    face = region_mask(grace_hopper.shape[:2], landmarks_of(grace_hopper), ["face_oval"]) > 0.5
    h, w = grace_hopper.shape[:2]

    async def stream(controls: pb.Controls):
        yield pb.StreamRequest(start=pb.StreamStart(source=src, consent=True, controls=controls,
                                                    format=pb.IMAGE_FORMAT_RAW_RGB))
        yield pb.StreamRequest(frame=pb.Frame(seq=0, raw=pb.RawImage(width=w, height=h, rgb=grace_hopper.tobytes())))

    photos, frames = {}, {}
    for shape in (0.0, 1.0):
        reply = await stub.Fuse(pb.FuseRequest(source=src, target=tgt, consent=True, shape=shape), metadata=auth)
        photos[shape] = np.asarray(Image.open(io.BytesIO(reply.image)).convert("RGB"))[face].astype(int)
        (frame,) = await _drain(stub.FuseStream(stream(pb.Controls(shape=shape)), metadata=auth))
        assert frame.faces == 1 and not frame.error
        frames[shape] = np.frombuffer(frame.raw.rgb, np.uint8).reshape(h, w, 3)[face].astype(int)
    assert np.abs(photos[1.0] - photos[0.0]).mean() > 3
    assert np.abs(frames[1.0] - frames[0.0]).mean() > 3
    for call in (stub.Fuse(pb.FuseRequest(source=src, target=tgt, consent=True, shape=1.5), metadata=auth),
                 _drain(stub.FuseStream(stream(pb.Controls(shape=-0.5)), metadata=auth))):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert (info.value.code(), details(info.value)[0]) == (grpc.StatusCode.INVALID_ARGUMENT, "bad_request")
        assert "shape must be a number from 0 to 1" in info.value.details()


async def test_every_refusal_has_its_status_code_and_reason(channel, api_world, astronaut, grace_hopper,
                                                            face_free_images):
    stub = fusion_pb2_grpc.FusionStub(channel)
    src, tgt, auth = encode(astronaut), encode(grace_hopper), bearer(api_world)

    def fuse(**fields):
        return stub.Fuse(pb.FuseRequest(**{"source": src, "target": tgt, "consent": True, **fields}), metadata=auth)

    C = grpc.StatusCode
    assert (await refused(fuse(consent=False)))[:2] == (C.FAILED_PRECONDITION, "source_no_consent")
    assert (await refused(fuse(source=encode(api_world.protected))))[:2] == (C.PERMISSION_DENIED, "source_protected_identity")
    assert (await refused(fuse(prompt=REFUSED_PROMPT)))[:2] == (C.PERMISSION_DENIED, "prompt_refused")
    assert (await refused(fuse(strength=1.5)))[:2] == (C.INVALID_ARGUMENT, "bad_request")
    assert (await refused(fuse(shape=2.0)))[:2] == (C.INVALID_ARGUMENT, "bad_request")
    assert (await refused(fuse(prompt="x" * 501)))[:2] == (C.INVALID_ARGUMENT, "prompt_too_long")
    assert (await refused(fuse(edits={"no_such_edit": 0.1})))[:2] == (C.INVALID_ARGUMENT, "bad_request")
    assert (await refused(fuse(colours={"lip_tint": "teal-ish"})))[:2] == (C.INVALID_ARGUMENT, "bad_request")
    assert (await refused(fuse(colours={"smile": "red"})))[:2] == (C.INVALID_ARGUMENT, "bad_request")
    assert (await refused(fuse(face_map="0=nobody")))[:2] == (C.INVALID_ARGUMENT, "bad_map")
    assert (await refused(fuse(target=encode(face_free_images["coffee"]))))[:2] == (C.INVALID_ARGUMENT, "target_no_face")
    assert (await refused(fuse(source=b"not an image")))[0] == C.INVALID_ARGUMENT
    assert (await refused(fuse(source=b"")))[:2] == (C.INVALID_ARGUMENT, "bad_request")
    assert (await refused(stub.GetJob(pb.GetJobRequest(id="0" * 32), metadata=auth)))[:2] == (C.NOT_FOUND, "not_found")
    # no token, or an unknown one: refused before any work
    assert (await refused(stub.Fuse(pb.FuseRequest(source=src, target=tgt, consent=True))))[:2] == \
        (C.UNAUTHENTICATED, "unauthorized")
    assert (await refused(stub.Fuse(pb.FuseRequest(source=src, target=tgt, consent=True),
                                    metadata=(("authorization", "Bearer nope"),))))[0] == C.UNAUTHENTICATED


async def test_the_rate_limit_is_resource_exhausted_with_a_retry_delay(api_world, astronaut, grace_hopper, tmp_path):
    from streamer.rpc.access import RpcAccess
    from streamer.safety.auth import AccessPolicy, TokenStore

    store = TokenStore()
    token = store.issue("carol", rate_per_minute=1, burst=1)
    access = RpcAccess(store, AccessPolicy(require_tokens=True))
    async with serve_rpc(api_world.product, rpc_access=access) as served:
        async with grpc.aio.insecure_channel(served.grpc_target) as ch:
            stub = fusion_pb2_grpc.FusionStub(ch)
            auth = (("authorization", f"Bearer {token}"),)
            # the first call passes the door (and is refused later, for want of consent); the second is over the rate
            first = await refused(stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper)),
                                            metadata=auth))
            second = await refused(stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper)),
                                             metadata=auth))
    assert first[:2] == (grpc.StatusCode.FAILED_PRECONDITION, "source_no_consent")
    code, reason, retry = second
    assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "rate_limited") and retry is not None and retry >= 1


async def test_photos_past_the_bound_are_resource_exhausted_with_a_retry_delay(api_world, astronaut, grace_hopper):
    from streamer.config import ServerConfig

    async with serve_rpc(api_world.product, ServerConfig(max_photos=1)) as served:
        async with grpc.aio.insecure_channel(served.grpc_target) as ch:
            stub = fusion_pb2_grpc.FusionStub(ch)

            async def one():
                try:
                    await stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper), consent=True),
                                    metadata=bearer(api_world))
                    return "ok", None
                except grpc.aio.AioRpcError as exc:
                    return details(exc)

            results = await asyncio.gather(*(one() for _ in range(4)))
    assert ("ok", None) in results and ("busy", 1.0) in results, results


async def test_a_deadline_stops_the_work(channel, api_world, astronaut, grace_hopper, monkeypatch):
    """A photo whose caller gives up: DEADLINE_EXCEEDED, and the server's work stops at its next step (the
    audit log says where; no fused photo is recorded for it). The target's face search is made to take
    1.5 s here (the real search, after a sleep), so the deadline passes while it runs."""
    models = api_world.product.photos.models
    real = models.detect

    def slow_detect(image):
        time.sleep(1.5)
        return real(image)

    monkeypatch.setattr(models, "detect", slow_detect)
    stub = fusion_pb2_grpc.FusionStub(channel)
    before = {r["data"]["request"] for r in api_world.records("api_fuse")}
    stopped = [r for r in api_world.records("api_fuse_refused") if r["data"].get("code") == "deadline_exceeded"]
    t0 = time.monotonic()
    code, _, _ = await refused(stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper),
                                                         consent=True), metadata=bearer(api_world), timeout=0.8))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - t0 < 1.4   # told at the deadline
    records: list = []
    for _ in range(50):
        records = [r for r in api_world.records("api_fuse_refused") if r["data"].get("code") == "deadline_exceeded"]
        if len(records) > len(stopped):
            break
        await asyncio.sleep(0.2)
    assert len(records) == len(stopped) + 1, "the photo's work did not stop at its deadline"
    assert records[-1]["data"]["step"] == "fusion" and records[-1]["data"]["token"] == "alice"
    assert {r["data"]["request"] for r in api_world.records("api_fuse")} == before


def frames_of(photo: np.ndarray, n: int) -> list[bytes]:
    return [encode(np.roll(photo, 4 * i, axis=1), "JPEG", 85) for i in range(n)]


async def test_fuse_stream_in_order(channel, api_world, astronaut, grace_hopper):
    stub = fusion_pb2_grpc.FusionStub(channel)
    frames = frames_of(grace_hopper, 6)

    async def requests():
        yield pb.StreamRequest(start=pb.StreamStart(source=encode(astronaut), consent=True,
                                                    controls=pb.Controls(strength=0.9)))
        for i, f in enumerate(frames):
            yield pb.StreamRequest(frame=pb.Frame(seq=i, encoded=f))
            await asyncio.sleep(0.6)   # slower than the server fuses: nothing is skipped

    out = [f async for f in stub.FuseStream(requests(), metadata=bearer(api_world))]
    assert [f.seq for f in out] == list(range(6))
    assert all(f.faces == 1 and len(f.watermark) == 16 and not f.error and f.media_type == "image/jpeg" for f in out)
    assert out[-1].skipped == 0
    raw = await _one_raw_frame(stub, api_world, astronaut, grace_hopper)
    assert (raw.raw.width, raw.raw.height, len(raw.raw.rgb)) == (512, 600, 512 * 600 * 3)


async def _one_raw_frame(stub, api_world, astronaut, grace_hopper):
    async def requests():
        yield pb.StreamRequest(start=pb.StreamStart(source=encode(astronaut), consent=True, format=pb.IMAGE_FORMAT_RAW_RGB))
        h, w = grace_hopper.shape[:2]
        yield pb.StreamRequest(frame=pb.Frame(seq=0, raw=pb.RawImage(width=w, height=h, rgb=grace_hopper.tobytes())))

    (frame,) = [f async for f in stub.FuseStream(requests(), metadata=bearer(api_world))]
    return frame


async def test_fuse_stream_newest_frame_wins_when_the_caller_sends_faster_than_it_reads(channel, api_world, astronaut,
                                                                                       grace_hopper):
    """30 frames sent at once, none read until all are sent: the server fuses the newest waiting frame each
    time and skips the rest; what comes back is in order, ends with the last frame sent, and says how
    many were skipped."""
    stub = fusion_pb2_grpc.FusionStub(channel)
    frames = frames_of(grace_hopper, 30)
    call = stub.FuseStream(metadata=bearer(api_world))
    await call.write(pb.StreamRequest(start=pb.StreamStart(source=encode(astronaut), consent=True)))
    for i, f in enumerate(frames):
        await call.write(pb.StreamRequest(frame=pb.Frame(seq=i, encoded=f)))
    await call.done_writing()
    out = []
    while (msg := await call.read()) is not grpc.aio.EOF:
        out.append(msg)
    seqs = [f.seq for f in out]
    assert seqs == sorted(set(seqs)) and seqs[-1] == 29
    assert len(out) < 30 and out[-1].skipped == 30 - len(out)
    assert all(len(f.watermark) == 16 and not f.error for f in out)   # each one through the stages


async def test_fuse_stream_refusals_and_its_deadline(served, channel, api_world, astronaut, grace_hopper):
    stub = fusion_pb2_grpc.FusionStub(channel)

    async def start_only(**fields):
        yield pb.StreamRequest(start=pb.StreamStart(**{"source": encode(astronaut), **fields}))

    call = stub.FuseStream(start_only(consent=False), metadata=bearer(api_world))
    assert (await refused(_drain(call)))[:2] == (grpc.StatusCode.FAILED_PRECONDITION, "source_no_consent")
    call = stub.FuseStream(start_only(consent=True, controls=pb.Controls(prompt=REFUSED_PROMPT)), metadata=bearer(api_world))
    assert (await refused(_drain(call)))[:2] == (grpc.StatusCode.PERMISSION_DENIED, "prompt_refused")

    async def frames_forever():
        yield pb.StreamRequest(start=pb.StreamStart(source=encode(astronaut), consent=True))
        frame = encode(grace_hopper)
        for i in range(10_000):
            yield pb.StreamRequest(frame=pb.Frame(seq=i, encoded=frame))
            await asyncio.sleep(0.05)

    call = stub.FuseStream(frames_forever(), metadata=bearer(api_world), timeout=2.5)
    assert (await refused(_drain(call)))[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.sleep(1.0)   # a frame in the pipeline when the deadline passed may still finish
    fused = served.rpc.servicer.frames_fused
    await asyncio.sleep(1.5)
    assert served.rpc.servicer.frames_fused == fused, "frames were still fused after the deadline"


async def _drain(call):
    return [m async for m in call]


async def test_health_follows_readiness_and_turns_not_serving_on_drain(api_world):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with serve_rpc(api_world.product) as served:
        async with grpc.aio.insecure_channel(served.grpc_target) as ch:
            health = health_pb2_grpc.HealthStub(ch)

            async def status(service: str) -> int:
                return (await health.Check(health_pb2.HealthCheckRequest(service=service))).status

            SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
            deadline = time.monotonic() + 10
            while await status("") != SERVING and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert await status("") == SERVING and await status("livefuse.v1.Fusion") == SERVING
            watch = health.Watch(health_pb2.HealthCheckRequest(service="livefuse.v1.Fusion"))
            assert (await watch.read()).status == SERVING
            served.server.drain.start("test")
            assert (await asyncio.wait_for(watch.read(), 5)).status == NOT_SERVING
            watch.cancel()
            assert await status("") == NOT_SERVING
            assert await status("liveness") == SERVING       # the process still answers (as /healthz)
            # a new stream is refused while draining
            stub = fusion_pb2_grpc.FusionStub(ch)

            async def start():
                yield pb.StreamRequest(start=pb.StreamStart(source=b"x", consent=True))

            code, reason, _ = await refused(_drain(stub.FuseStream(start(), metadata=bearer(api_world))))
            assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "draining")


async def test_reflection_lists_the_services(served):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    def listed() -> tuple[set[str], list[str]]:
        from google.protobuf.descriptor_pool import DescriptorPool

        with grpc.insecure_channel(served.grpc_target) as ch:
            db = ProtoReflectionDescriptorDatabase(ch)
            fusion = DescriptorPool(db).FindServiceByName("livefuse.v1.Fusion")   # its schema, read from the server
            return set(db.get_services()), [m.name for m in fusion.methods]

    services, methods = await asyncio.to_thread(listed)
    assert {"livefuse.v1.Fusion", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services
    assert {"Fuse", "CreateJob", "GetJob", "CancelJob", "WatchJob", "FuseStream"} <= set(methods)


@pytest.fixture(scope="module")
def clip(tmp_path_factory, grace_hopper) -> bytes:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", grace_hopper, 12).read_bytes()


async def test_clip_jobs_create_watch_get_cancel(channel, api_world, astronaut, clip):
    stub = fusion_pb2_grpc.FusionStub(channel)
    auth = bearer(api_world)
    job = await stub.CreateJob(pb.CreateJobRequest(source=encode(astronaut), clip=clip, clip_type="video/mp4",
                                                   consent=True), metadata=auth)
    assert job.state in (pb.Job.QUEUED, pb.Job.RUNNING) and len(job.id) == 32
    seen = [j async for j in stub.WatchJob(pb.WatchJobRequest(id=job.id), metadata=auth, timeout=120)]
    states = [j.state for j in seen]
    assert states[-1] == pb.Job.DONE, seen[-1].error
    assert seen[-1].frames_done == 12 and seen[-1].result_url
    got = await stub.GetJob(pb.GetJobRequest(id=job.id), metadata=auth)
    assert got.state == pb.Job.DONE and got.result_url == seen[-1].result_url
    # its result deleted: the job stays done, with no result; a second delete finds none
    assert (await refused(stub.DeleteResult(pb.DeleteResultRequest(id=job.id), metadata=bearer(api_world, "bob"))))[0] == \
        grpc.StatusCode.NOT_FOUND
    deleted = await stub.DeleteResult(pb.DeleteResultRequest(id=job.id), metadata=auth)
    assert deleted.state == pb.Job.DONE and deleted.result_url == ""
    assert (await refused(stub.DeleteResult(pb.DeleteResultRequest(id=job.id), metadata=auth)))[:2] == \
        (grpc.StatusCode.NOT_FOUND, "not_found")
    assert [r for r in api_world.records("job_result_deleted") if r["data"]["job"] == job.id]
    # another token cannot see it; a refused source is refused before anything is queued
    assert (await refused(stub.GetJob(pb.GetJobRequest(id=job.id), metadata=bearer(api_world, "bob"))))[0] == \
        grpc.StatusCode.NOT_FOUND
    assert (await refused(stub.CreateJob(pb.CreateJobRequest(source=encode(astronaut), clip=clip), metadata=auth)))[:2] == \
        (grpc.StatusCode.FAILED_PRECONDITION, "source_no_consent")
    assert (await refused(stub.CreateJob(pb.CreateJobRequest(source=encode(astronaut), consent=True), metadata=auth)))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    # cancel: a second job, cancelled while queued or running
    second = await stub.CreateJob(pb.CreateJobRequest(source=encode(astronaut), clip=clip, consent=True), metadata=auth)
    cancelled = await stub.CancelJob(pb.CancelJobRequest(id=second.id), metadata=auth)
    assert cancelled.state in (pb.Job.CANCELLED, pb.Job.RUNNING, pb.Job.DONE)
    final = [j async for j in stub.WatchJob(pb.WatchJobRequest(id=second.id), metadata=auth, timeout=120)][-1]
    assert final.state in (pb.Job.CANCELLED, pb.Job.DONE)


async def test_fuse_puts_a_background_behind_the_person_and_refuses_a_bad_one(channel, served, api_world, astronaut,
                                                                           face_free_images):
    """REST's background field and picture, over gRPC: the same product, the same codes; the calls are in the
    server's metrics under grpc_Fuse."""
    import aiohttp

    from bench import _person_scenes as ps
    from tests.streamer.web.api.test_fuse_background import _room

    scene = ps.photo_scene("grace_hopper")
    far = _room(scene)
    stub = fusion_pb2_grpc.FusionStub(channel)
    reply = await stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(scene.image, "PNG"), consent=True,
                                           background="lime"), metadata=bearer(api_world))
    out = np.asarray(Image.open(io.BytesIO(reply.image)).convert("RGB"))
    assert np.abs(np.median(out[far], axis=0) - [0, 255, 0]).max() <= 3 and len(reply.watermark) == 16
    pictured = await stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(scene.image, "PNG"), consent=True,
                                              background_image=encode(face_free_images["rocket"])), metadata=bearer(api_world))
    room = np.asarray(Image.open(io.BytesIO(pictured.image)).convert("RGB"))
    assert np.abs(room[far].astype(int) - scene.image[far]).mean() > 30
    bad = await refused(stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(scene.image, "PNG"), consent=True,
                                                 background="not-a-colour"), metadata=bearer(api_world)))
    assert bad[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "bad_background")
    async with aiohttp.ClientSession() as http, \
            http.get(f"{served.http_url}/metrics", headers=api_world.headers()) as r:
        metrics = await r.text()
    assert 'livefuse_api_requests_total{route="grpc_Fuse",status="OK"}' in metrics
    assert 'livefuse_api_requests_total{route="grpc_Fuse",status="INVALID_ARGUMENT"}' in metrics


async def test_message_and_image_limits(api_world, astronaut, grace_hopper):
    """A photo over max_source_bytes is refused as REST refuses it (source_too_large); a message over the
    server's largest (a clip plus its source) is refused by gRPC itself, RESOURCE_EXHAUSTED."""
    from streamer.config import ServerConfig

    async with serve_rpc(api_world.product, ServerConfig(max_source_bytes=60_000, max_clip_bytes=60_000)) as served:
        async with grpc.aio.insecure_channel(served.grpc_target, options=[("grpc.max_send_message_length", -1)]) as ch:
            stub = fusion_pb2_grpc.FusionStub(ch)
            big = encode(grace_hopper, "JPEG", 92)
            assert 60_000 < len(big) < 120_000   # over the image limit, within the message limit
            code, reason, _ = await refused(stub.Fuse(pb.FuseRequest(source=encode(astronaut, "JPEG", 70), target=big,
                                                                     consent=True), metadata=bearer(api_world)))
            assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "target_too_large")
            huge = bytes(400_000)
            code, _, _ = await refused(stub.Fuse(pb.FuseRequest(source=huge, target=huge, consent=True),
                                                 metadata=bearer(api_world)))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_failure_of_the_server_is_internal_without_its_internals(api_world, astronaut, grace_hopper, monkeypatch):
    """A bug in the photo path (here the encoder raising) is INTERNAL with a sentence, never a traceback,
    path or exception text, and the server goes on serving."""
    from streamer.rpc import servicer

    def broken(*args, **kwargs):
        raise RuntimeError("/secret/path/to/codec.so exploded")

    async with serve_rpc(api_world.product) as served:
        async with grpc.aio.insecure_channel(served.grpc_target) as ch:
            stub = fusion_pb2_grpc.FusionStub(ch)
            monkeypatch.setattr(servicer, "encode_image", broken)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper), consent=True),
                                metadata=bearer(api_world))
            assert info.value.code() == grpc.StatusCode.INTERNAL and "secret" not in (info.value.details() or "")
            assert details(info.value)[0] == "internal"
            monkeypatch.undo()
            ok = await stub.Fuse(pb.FuseRequest(source=encode(astronaut), target=encode(grace_hopper), consent=True),
                                 metadata=bearer(api_world))
            assert ok.faces == 1
