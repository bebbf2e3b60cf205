"""Clip jobs end to end on the real product: POST /v1/jobs -> 202, live progress over Server-Sent
Events, the result (it plays, keeps its audio, carries the watermark) in S3-compatible storage behind a
presigned URL; jobs belong to their token; cancel; refusals; a store that is down fails the job with
its reason and writes nothing; a job whose runner died is marked failed with a reason."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import av
import pytest

from streamer.web.api.jobs import Job, JobConfig, JobQueue, MemoryJobStates
from streamer.web.api.routes import ApiBackend
from streamer.app.cli import main
from streamer.storage.s3 import S3Settings, S3Store
from tests.streamer.web.api.conftest import encode, job_form, make_clip, serve_product

FRAMES = 24


@pytest.fixture(scope="module")
def clip_bytes(tmp_path_factory, grace_hopper):
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", grace_hopper, FRAMES).read_bytes()


def s3_jobs(product, store) -> JobQueue:
    """The product's own clip runner, with its results in `store`."""
    return JobQueue(JobConfig(progress_every_s=0.0), product._run_clip, store, audit=product.audit)


async def events_until_done(http, url: str, headers) -> list[tuple[str, dict]]:
    out = []
    async with http.get(url, headers=headers) as r:
        assert r.status == 200 and r.content_type == "text/event-stream"
        event = None
        async for raw in r.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                out.append((event, json.loads(line[6:])))
    return out


async def test_clip_job_end_to_end_to_s3(api_world, moto_s3, astronaut, clip_bytes, tmp_path, capsys):
    product = api_world.product
    queue = s3_jobs(product, S3Store("results", "livefuse"))
    try:
        async with serve_product(product, api=ApiBackend(photos=product.photos, jobs=queue)) as (url, http, _):
            async with http.post(f"{url}/v1/jobs", data=job_form(encode(astronaut), clip_bytes, consent="true",
                                                                 prompt="a slight smile"),
                                 headers=api_world.headers()) as r:
                body = await r.json()
                assert r.status == 202, body
                assert body["state"] == "queued" and r.headers["Location"] == f"/v1/jobs/{body['id']}"
                assert body["frames_total"] == FRAMES
            job_id = body["id"]
            events = await events_until_done(http, f"{url}/v1/jobs/{job_id}/events", api_world.headers())
            states = [e for e, _ in events]
            assert states[-1] == "done" and "running" in states, states
            progress = [d["frames_done"] for e, d in events if e == "running"]
            assert progress == sorted(progress) and len(set(progress)) > 2, progress
            async with http.get(f"{url}/v1/jobs/{job_id}", headers=api_world.headers()) as r:
                job = await r.json()
            assert job["state"] == "done" and job["frames_done"] == FRAMES and job["error"] is None
            assert job["result_url"].startswith(moto_s3.endpoint + "/results/livefuse/jobs/" + job_id)
            with urllib.request.urlopen(job["result_url"], timeout=10) as r:   # plain HTTP, as a CDN would
                (tmp_path / "result.mp4").write_bytes(r.read())
    finally:
        queue.close()
    with av.open(str(tmp_path / "result.mp4")) as c:
        assert c.streams.audio, "the result lost its audio"
        frames = sum(1 for _ in c.decode(video=0))
    assert frames == FRAMES
    assert main(["verify", str(tmp_path / "result.mp4"), "--json", "--max-frames", "6"]) == 0
    assert json.loads(capsys.readouterr().out)["watermarked"]
    done = [r for r in api_world.records("job_done") if r["data"]["job"] == job_id]
    assert done and done[0]["data"]["token"] == "alice"
    assert [r for r in api_world.records("source_registered") if r["data"]["session"] == job_id]


async def test_jobs_belong_to_their_token_and_cancel(api, api_world, astronaut, clip_bytes):
    url, http, _ = api
    ids = []
    for _ in range(2):   # one runs, one waits in the queue (one worker)
        async with http.post(f"{url}/v1/jobs", data=job_form(encode(astronaut), clip_bytes, consent="true"),
                             headers=api_world.headers()) as r:
            assert r.status == 202
            ids.append((await r.json())["id"])
    for method in ("GET", "DELETE"):
        async with http.request(method, f"{url}/v1/jobs/{ids[1]}", headers=api_world.headers("bob")) as r:
            assert r.status == 404 and (await r.json())["code"] == "not_found"
    async with http.get(f"{url}/v1/jobs/{ids[1]}/events", headers=api_world.headers("bob")) as r:
        assert r.status == 404
    async with http.delete(f"{url}/v1/jobs/{ids[1]}", headers=api_world.headers()) as r:
        assert r.status == 200 and (await r.json())["state"] == "cancelled"
    async with http.delete(f"{url}/v1/jobs/{ids[0]}", headers=api_world.headers()) as r:
        assert r.status == 200 and (await r.json())["state"] in ("queued", "running", "cancelled", "done")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with http.get(f"{url}/v1/jobs/{ids[0]}", headers=api_world.headers()) as r:
            first = await r.json()
        if first["state"] in ("cancelled", "done", "failed"):
            break
        await asyncio.sleep(0.1)
    assert first["state"] in ("cancelled", "done"), first
    if first["state"] == "cancelled":
        assert first["result_url"] is None and first["error"] == "cancelled by the client"
    async with http.get(f"{url}/v1/jobs/{ids[1]}/result", headers=api_world.headers()) as r:
        assert r.status == 409


async def test_a_job_in_a_local_results_folder_is_served_by_the_api(api, api_world, astronaut, clip_bytes):
    url, http, _ = api
    async with http.post(f"{url}/v1/jobs", data=job_form(encode(astronaut), clip_bytes, consent="true"),
                         headers=api_world.headers()) as r:
        job_id = (await r.json())["id"]
    events = await events_until_done(http, f"{url}/v1/jobs/{job_id}/events", api_world.headers())
    assert events[-1][0] == "done", events[-1]
    assert events[-1][1]["result_url"] == f"/v1/jobs/{job_id}/result"
    async with http.get(f"{url}/v1/jobs/{job_id}/result", headers=api_world.headers()) as r:
        assert r.status == 200 and r.content_type == "video/mp4" and len(await r.read()) > 1000


async def test_a_replica_behind_a_balancer_hands_out_job_urls_on_itself(api_world, astronaut, clip_bytes):
    """A job in this replica's own queue is answered only here: its Location and result URL lead back to the
    replica's public URL (as a session's URLs do), not to whichever replica the balancer picks next."""
    from streamer.config import ServerConfig

    pod = "http://127.0.0.1:9"   # the replica's public URL; the requests below still reach it directly
    async with serve_product(api_world.product, ServerConfig(public_url=pod)) as (url, http, _):
        async with http.post(f"{url}/v1/jobs", data=job_form(encode(astronaut), clip_bytes, consent="true"),
                             headers=api_world.headers()) as r:
            body = await r.json()
            assert r.status == 202, body
            assert r.headers["Location"] == f"{pod}/v1/jobs/{body['id']}"
        events = await events_until_done(http, f"{url}/v1/jobs/{body['id']}/events", api_world.headers())
    assert events[-1][0] == "done", events[-1]
    assert events[-1][1]["result_url"] == f"{pod}/v1/jobs/{body['id']}/result"


async def test_job_refusals(api, api_world, astronaut, clip_bytes, face_free_images):
    url, http, _ = api
    h = api_world.headers()
    cases = {
        "no consent": (job_form(encode(astronaut), clip_bytes), 422, "source_no_consent"),
        "protected": (job_form(encode(api_world.protected), clip_bytes, consent="true"), 422, "source_protected_identity"),
        "prompt": (job_form(encode(astronaut), clip_bytes, consent="true", prompt="make me look like Tom Cruise"),
                   422, "prompt_refused"),
        "not a clip": (job_form(encode(astronaut), b"not a video at all" * 100, consent="true"), 422, "target_bad_clip"),
        "no clip": (job_form(encode(astronaut), None, consent="true"), 400, "bad_request"),
    }
    for name, (form, status, code) in cases.items():
        async with http.post(f"{url}/v1/jobs", data=form, headers=h) as r:
            body = await r.json()
            assert (r.status, body.get("code")) == (status, code), f"{name}: {r.status} {body}"


async def test_a_store_that_is_down_fails_the_job_with_its_reason_and_writes_nothing(api_world, moto_s3, astronaut,
                                                                                   clip_bytes):
    product = api_world.product
    store = S3Store("results", "livefuse", S3Settings(attempts=2, backoff_s=0.05, connect_timeout_s=1))
    queue = s3_jobs(product, store)
    try:
        async with serve_product(product, api=ApiBackend(photos=product.photos, jobs=queue)) as (url, http, _):
            moto_s3.stop()
            async with http.post(f"{url}/v1/jobs", data=job_form(encode(astronaut), clip_bytes, consent="true"),
                                 headers=api_world.headers()) as r:
                job_id = (await r.json())["id"]
            events = await events_until_done(http, f"{url}/v1/jobs/{job_id}/events", api_world.headers())
    finally:
        queue.close()
        moto_s3.start()
    state, job = events[-1]
    assert state == "failed" and job["result_url"] is None
    assert job["error"].startswith("uploading the result failed: the result store did not take it"), job["error"]
    assert not any(leak in job["error"] for leak in ("s3://", "results", "127.0.0.1", "http")), job["error"]
    failed = api_world.records("job_failed")[-1]["data"]   # the store's own words are in the audit record
    assert failed["job"] == job_id and "failed after 2 tries" in failed["detail"], failed
    assert moto_s3.client().list_objects_v2(Bucket="results").get("KeyCount", 0) == 0


def test_a_job_whose_runner_died_is_marked_failed_with_a_reason(tmp_path):
    """A running job whose heartbeat stopped (its runner's process is gone) is failed by the reaper of
    whoever shares its state; jobs this queue's own workers run are left alone."""
    from streamer.storage.local import LocalStore

    states = MemoryJobStates()
    queue = JobQueue(JobConfig(stale_after_s=30), lambda *a: {}, LocalStore(tmp_path), states=states)
    now = time.time()
    states.put(Job("a" * 32, "alice", state="running", frames_done=7, heartbeat=now - 120))
    states.put(Job("b" * 32, "alice", state="running", heartbeat=now - 5))
    reaped = queue.reap(now)
    assert [j.id for j in reaped] == ["a" * 32]
    dead = queue.get("a" * 32, "alice")
    assert dead.state == "failed" and "runner stopped (no heartbeat for 120 s)" in dead.error
    assert queue.get("b" * 32, "alice").state == "running"
    states.put(Job("c" * 32, "alice", state="running", heartbeat=now - 90))
    assert "no heartbeat for 90 s" in queue.get("c" * 32, "alice").error   # asking about it is enough
    assert queue.cancel("a" * 32, "alice").state == "failed"   # a finished job stays as it ended


def test_a_replica_that_stops_mid_job_fails_it_with_that_reason(api_world, astronaut, grace_hopper, tmp_path):
    """Closing the queue (the server stopping) is not a client's cancel: the job says what happened."""
    import numpy as np

    from streamer.web.api.jobs import JobSpec
    from streamer.storage.local import LocalStore

    product = api_world.product
    queue = JobQueue(JobConfig(progress_every_s=0.0), product._run_clip, LocalStore(tmp_path / "results"))
    clip = queue.spool_path("e" * 32, ".mp4")
    make_clip(clip, grace_hopper, 96)
    queue.submit(JobSpec(id="e" * 32, owner="alice", clip=clip, source=np.ascontiguousarray(astronaut), consent="true"))
    deadline = time.monotonic() + 60
    while queue.get("e" * 32, "alice").frames_done < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    queue.close()
    job = queue.get("e" * 32, "alice")
    assert job.state == "failed" and job.error == "the server stopped while the job ran; submit it again"
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.mp4"))


async def test_a_job_reads_its_clip_from_an_allowlisted_url_only(api_world, moto_s3, astronaut, clip_bytes, tmp_path):
    """`target_url` instead of a `target` part: s3:// and http(s):// inputs on the allowlist are read
    (bounded, no redirects followed); anything else is refused before any work."""
    from aiohttp import web

    product = api_world.product
    s3 = moto_s3.client()
    s3.create_bucket(Bucket="uploads")
    s3.put_object(Bucket="uploads", Key="clips/in.mp4", Body=clip_bytes)
    media = web.Application()
    media.router.add_get("/clips/in.mp4", lambda r: web.Response(body=clip_bytes, content_type="video/mp4"))
    media.router.add_get("/clips/moved.mp4", lambda r: web.HTTPFound("http://127.0.0.1:9/elsewhere.mp4"))
    from aiohttp.test_utils import TestServer

    media_server = TestServer(media, host="127.0.0.1", port=0)
    await media_server.start_server()
    http_base = str(media_server.make_url("")).rstrip("/")
    queue = JobQueue(JobConfig(input_allow=("s3://uploads/clips/", f"{http_base}/clips/")), product._run_clip,
                     S3Store("results", "livefuse"), audit=product.audit)
    try:
        async with serve_product(product, api=ApiBackend(photos=product.photos, jobs=queue)) as (url, http, _):
            async def post(target_url: str):
                async with http.post(f"{url}/v1/jobs", data=job_form(encode(astronaut), None, consent="true",
                                                                     target_url=target_url),
                                     headers=api_world.headers()) as r:
                    return r.status, await r.json()

            for good in ("s3://uploads/clips/in.mp4", f"{http_base}/clips/in.mp4"):
                status, job = await post(good)
                assert status == 202 and job["frames_total"] == FRAMES, (good, job)
                events = await events_until_done(http, f"{url}/v1/jobs/{job['id']}/events", api_world.headers())
                assert events[-1][0] == "done", events[-1]
            for bad, code in (("s3://uploads/private/in.mp4", "input_not_allowed"),
                              ("s3://uploads/clipsX/in.mp4", "input_not_allowed"),
                              ("file:///etc/passwd", "input_bad_url"),
                              (f"{http_base}/clips/moved.mp4", "input_unreadable"),
                              ("s3://uploads/clips/missing.mp4", "input_unreadable")):
                status, body = await post(bad)
                assert body.get("code") == code, (bad, status, body)
    finally:
        queue.close()
        await media_server.close()


async def test_a_job_survives_its_client_leaving(api, api_world, astronaut, clip_bytes):
    """The events stream is closed after its first event; the job runs to the end regardless."""
    url, http, _ = api
    async with http.post(f"{url}/v1/jobs", data=job_form(encode(astronaut), clip_bytes, consent="true"),
                         headers=api_world.headers()) as r:
        job_id = (await r.json())["id"]
    async with http.get(f"{url}/v1/jobs/{job_id}/events", headers=api_world.headers()) as r:
        first = await r.content.readline()
        assert first.startswith(b"id: ")
    # the client went away; ask again later, on a new connection
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with http.get(f"{url}/v1/jobs/{job_id}", headers=api_world.headers()) as r:
            job = await r.json()
        if job["state"] in ("done", "failed", "cancelled"):
            break
        await asyncio.sleep(0.1)
    assert job["state"] == "done" and job["frames_done"] == FRAMES


async def test_clip_frames_over_the_photo_pixel_limit_are_refused_413(api_world, astronaut, clip_bytes):
    """A clip's frames are held to the pixel limit a photo is (ServerConfig.max_source_pixels): the 320 x
    240 clip against a limit one pixel under it is refused before it is queued."""
    import numpy as np

    from streamer.config import ServerConfig

    source = encode(np.ascontiguousarray(astronaut[:256, 128:384]))   # the face, itself under the limit
    async with serve_product(api_world.product, ServerConfig(max_source_pixels=320 * 240 - 1)) as (url, http, _):
        async with http.post(f"{url}/v1/jobs", data=job_form(source, clip_bytes, consent="true"),
                             headers=api_world.headers()) as r:
            body = await r.json()
            assert (r.status, body["code"]) == (413, "target_too_large") and "320x240" in body["error"], body
    async with serve_product(api_world.product, ServerConfig(max_source_pixels=320 * 240)) as (url, http, _):
        async with http.post(f"{url}/v1/jobs", data=job_form(source, clip_bytes, consent="true"),
                             headers=api_world.headers()) as r:
            assert r.status == 202, await r.text()


def test_a_jobs_frames_wait_for_the_memory_budget(api_world, astronaut, clip_bytes, tmp_path):
    """A running job holds a frame's share of the server's memory budget (the queue's `memory`, set where
    the routes are mounted); while photos hold all of it, the next job stays queued, and runs once they
    give it back."""
    from streamer.web.api.jobs import JobSpec
    from streamer.storage.local import LocalStore
    from streamer.web.uploads import MemoryBudget

    product = api_world.product
    queue = JobQueue(JobConfig(progress_every_s=0.0), product._run_clip, LocalStore(str(tmp_path / "results")))
    queue.memory = budget = MemoryBudget(64 << 20)
    held = budget.lease()
    held.grow(budget.total)   # every byte taken, as by photos in flight
    try:
        job_id = queue.new_id()
        clip = queue.spool_path(job_id, ".mp4")
        clip.write_bytes(clip_bytes)
        queue.submit(JobSpec(id=job_id, owner="alice", clip=clip, source=astronaut, consent="true"))
        time.sleep(2.0)
        assert queue.get(job_id, "alice").state == "queued"
        held.release()
        deadline = time.monotonic() + 120
        while not queue.get(job_id, "alice").finished and time.monotonic() < deadline:
            time.sleep(0.1)
        assert queue.get(job_id, "alice").state == "done", queue.get(job_id, "alice")
        assert budget.used == 0
    finally:
        queue.close()
