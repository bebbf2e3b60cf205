"""Clip jobs shared by two replicas through Redis (Debian's redis-server, started here on loopback) and
S3-compatible storage (moto): a job accepted by one replica runs on the other and outlives the first;
either replica answers for it; ownership holds across replicas; a cancel through one replica stops the
run on the other; a job whose replica died is marked failed with the reason."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from streamer.web.api.jobs import Job, JobConfig, JobQueue
from streamer.web.api.routes import ApiBackend
from streamer.config import ServerConfig
from streamer.storage.s3 import S3Store
from tests.moto_s3 import free_port
from tests.streamer.web.api.conftest import encode, job_form, make_clip, serve_product
from tests.streamer.web.api.test_jobs import FRAMES, events_until_done

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs Debian's redis-server")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    port = free_port()
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(folder)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    from streamer.web.api.redis_jobs import connect

    client = connect(url)
    for _ in range(100):
        try:
            client.ping()
            break
        except Exception:
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(10)


def replica(product, url: str, workers: int, prefix: str) -> JobQueue:
    from streamer.web.api.redis_jobs import RedisJobStates, RedisTransport, connect

    client = connect(url)
    return JobQueue(JobConfig(workers=workers, progress_every_s=0.0), product._run_clip,
                    S3Store("results", "livefuse"), states=RedisJobStates(client, prefix),
                    transport=lambda store: RedisTransport(client, store, prefix), audit=product.audit)


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory, grace_hopper):
    return make_clip(tmp_path_factory.mktemp("long") / "long.mp4", grace_hopper, 96).read_bytes()


async def test_two_replicas_share_one_job_api(api_world, moto_s3, redis_url, astronaut, grace_hopper, tmp_path):
    import av
    import urllib.request


    product = api_world.product
    clip = make_clip(tmp_path / "clip.mp4", grace_hopper, FRAMES).read_bytes()
    prefix = f"lf-{time.time_ns()}:"
    a = replica(product, redis_url, workers=0, prefix=prefix)    # accepts jobs, runs none
    b = replica(product, redis_url, workers=1, prefix=prefix)
    b.start()
    try:
        async with serve_product(product, api=ApiBackend(photos=product.photos, jobs=b)) as (url_b, http_b, _):
            async with serve_product(product, ServerConfig(public_url="http://127.0.0.1:9"),
                                     api=ApiBackend(photos=product.photos, jobs=a)) as (url_a, http_a, _):
                async with http_a.post(f"{url_a}/v1/jobs", data=job_form(encode(astronaut), clip, consent="true"),
                                       headers=api_world.headers()) as r:
                    assert r.status == 202
                    job_id = (await r.json())["id"]
                    # any replica answers for a shared job: its URL stays on the address the client used
                    assert r.headers["Location"] == f"/v1/jobs/{job_id}"
            # replica A is gone; B ran the job it accepted and answers for it
            events = await events_until_done(http_b, f"{url_b}/v1/jobs/{job_id}/events", api_world.headers())
            assert events[-1][0] == "done", events[-1]
            async with http_b.get(f"{url_b}/v1/jobs/{job_id}", headers=api_world.headers("bob")) as r:
                assert r.status == 404
            async with http_b.get(f"{url_b}/v1/jobs/{job_id}", headers=api_world.headers()) as r:
                job = await r.json()
            assert job["frames_done"] == FRAMES
            with urllib.request.urlopen(job["result_url"], timeout=10) as r:
                (tmp_path / "result.mp4").write_bytes(r.read())
    finally:
        a.close()
        b.close()
    with av.open(str(tmp_path / "result.mp4")) as c:
        assert c.streams.audio and sum(1 for _ in c.decode(video=0)) == FRAMES
    keys = [o["Key"] for o in moto_s3.client().list_objects_v2(Bucket="results").get("Contents", [])]
    # the result under its unguessable key; the shared inputs were removed
    assert len(keys) == 1 and re.fullmatch(rf"livefuse/jobs/{job_id}/[0-9a-f]{{32}}/result\.mp4", keys[0]), keys


async def test_cancel_through_one_replica_stops_the_run_on_the_other(api_world, moto_s3, redis_url, astronaut,
                                                                     long_clip):
    import asyncio

    product = api_world.product
    prefix = f"lf-{time.time_ns()}:"
    a, b = replica(product, redis_url, 0, prefix), replica(product, redis_url, 1, prefix)
    b.start()
    try:
        async with serve_product(product, api=ApiBackend(photos=product.photos, jobs=a)) as (url_a, http_a, _):
            async with http_a.post(f"{url_a}/v1/jobs", data=job_form(encode(astronaut), long_clip, consent="true"),
                                   headers=api_world.headers()) as r:
                job_id = (await r.json())["id"]
            for _ in range(400):   # B picks it up and starts
                async with http_a.get(f"{url_a}/v1/jobs/{job_id}", headers=api_world.headers()) as r:
                    job = await r.json()
                if job["state"] == "running" and job["frames_done"] > 0:
                    break
                await asyncio.sleep(0.05)
            assert job["state"] == "running", job
            async with http_a.delete(f"{url_a}/v1/jobs/{job_id}", headers=api_world.headers()) as r:
                assert r.status == 200
            events = await events_until_done(http_a, f"{url_a}/v1/jobs/{job_id}/events", api_world.headers())
    finally:
        a.close()
        b.close()
    state, job = events[-1]
    assert state == "cancelled" and job["frames_done"] < 96 and job["result_url"] is None


def test_a_job_whose_replica_died_is_failed_by_the_other(api_world, redis_url):
    from streamer.web.api.redis_jobs import RedisJobStates, connect

    prefix = f"lf-{time.time_ns()}:"
    states = RedisJobStates(connect(redis_url), prefix)
    states.put(Job("d" * 32, "alice", state="running", frames_done=40, heartbeat=time.time() - 300))
    survivor = replica(api_world.product, redis_url, 0, prefix)
    job = survivor.get("d" * 32, "alice")
    assert job.state == "failed" and "its runner stopped (no heartbeat for 300 s)" in job.error
    assert states.get("d" * 32).state == "failed"   # recorded where every replica reads it
    survivor.close()
