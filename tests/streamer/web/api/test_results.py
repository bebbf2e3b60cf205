"""The results origin (GET /results/<key>) over an S3 store (moto on loopback): a real clip job's result
streamed from the bucket with the edge's Cache-Control, its ETag and Last-Modified, Range (206),
If-None-Match (304) and HEAD; only a result key is served; a deleted result is gone. (A local results
folder through a real Varnish: tests/deploy/test_varnish_edge.py.)"""

from __future__ import annotations

import asyncio
import time

import yarl

from streamer.config import ServerConfig
from streamer.storage.s3 import S3Store
from streamer.web.api.routes import ApiBackend
from tests.streamer.web.api.conftest import encode, job_form, make_clip, serve_product
from tests.streamer.web.api.test_jobs import s3_jobs


async def test_an_s3_result_through_the_origin(api_world, moto_s3, astronaut, grace_hopper, tmp_path):
    moto_s3.client().create_bucket(Bucket="results")
    product = api_world.product
    queue = s3_jobs(product, S3Store("results", "livefuse"))
    clip = make_clip(tmp_path / "clip.mp4", grace_hopper, 8).read_bytes()
    config = ServerConfig(results_public_url="https://cdn.example.com/results")
    try:
        async with serve_product(product, config, api=ApiBackend(photos=product.photos, jobs=queue)) as (url, http, _):
            async with http.post(f"{url}/v1/jobs", data=job_form(encode(astronaut), clip, consent="true"),
                                 headers=api_world.headers()) as r:
                job = await r.json()
                assert r.status == 202, job
            deadline = time.monotonic() + 120
            while job["state"] not in ("done", "failed") and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                async with http.get(f"{url}/v1/jobs/{job['id']}", headers=api_world.headers()) as r:
                    job = await r.json()
            assert job["state"] == "done", job
            assert job["result_url"].startswith(f"https://cdn.example.com/results/jobs/{job['id']}/")
            origin = url + "/results/" + job["result_url"].split("/results/", 1)[1]
            async with http.get(origin) as r:   # no token: the key is the capability
                body = await r.read()
                assert r.status == 200 and r.headers["Cache-Control"] == "public, max-age=31536000, immutable"
                etag, modified = r.headers["ETag"], r.headers["Last-Modified"]
                assert body[4:8] == b"ftyp" and r.headers["Content-Type"] == "video/mp4" and modified.endswith("GMT")
            async with http.get(origin, headers={"Range": "bytes=10-29"}) as r:
                assert r.status == 206 and await r.read() == body[10:30]
                assert r.headers["Content-Range"] == f"bytes 10-29/{len(body)}"
            async with http.get(origin, headers={"If-None-Match": etag}) as r:
                assert r.status == 304 and r.headers["ETag"] == etag
            async with http.head(origin) as r:
                assert r.status == 200 and int(r.headers["Content-Length"]) == len(body)
            for other in (f"jobs/{job['id']}/input.mp4", f"jobs/{job['id']}", "jobs/%2e%2e/%2e%2e/tokens.json"):
                async with http.get(yarl.URL(f"{url}/results/{other}", encoded=True)) as r:
                    assert r.status == 404   # only a result's key, never an input or a path out
            async with http.delete(f"{url}/v1/jobs/{job['id']}/result", headers=api_world.headers()) as r:
                assert r.status == 200 and (await r.json())["result_url"] is None
            async with http.get(origin) as r:
                assert r.status == 404 and r.headers["Cache-Control"] == "no-store"
    finally:
        queue.close()
