"""The results edge for real: Debian's Varnish, started here with deploy/varnish/livefuse.vcl, in front of
`livefuse serve`'s results origin, a clip job's result fetched through it. The second GET is a HIT with an
Age; If-None-Match gives 304 and Range 206 through the edge; a deleted result is gone from the edge (the
server's PURGE); a private result is never cached. Without varnishd the test skips, unless
LIVEFUSE_REQUIRE_CLUSTER=1 (CI), where it fails."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from tests.streamer.web.api.conftest import api_world, encode, job_form, make_clip  # noqa: F401 - the API tests' world
from streamer.services import with_hooks

REPO = Path(__file__).resolve().parents[2]
VCL = REPO / "deploy" / "varnish" / "livefuse.vcl"


def find_varnishd() -> str:
    path = shutil.which("varnishd") or ("/usr/sbin/varnishd" if os.access("/usr/sbin/varnishd", os.X_OK) else None)
    if path is None:
        if os.environ.get("LIVEFUSE_REQUIRE_CLUSTER") == "1":
            pytest.fail("LIVEFUSE_REQUIRE_CLUSTER=1 but varnishd is not installed (make debian-tools installs "
                        "Debian's varnish)")
        pytest.skip("the results edge's tests need Debian's varnish: make debian-tools (sudo apt-get install varnish)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def varnish(origin_port: int, port: int):
    """varnishd in the foreground on 127.0.0.1:`port`, the repo's VCL, its backend the origin's port."""
    binary = find_varnishd()
    work = Path(tempfile.mkdtemp(prefix="livefuse-varnish-"))
    shutil.copy(VCL, work / "livefuse.vcl")
    (work / "backend.vcl").write_text(
        f'backend origin {{ .host = "127.0.0.1"; .port = "{origin_port}"; }}\n'
        'acl purgers { "127.0.0.1"; "::1"; }\n')
    proc = subprocess.Popen([binary, "-F", "-j", "none", "-n", str(work / "n"), "-a", f"127.0.0.1:{port}",
                             "-p", f"vcl_path={work}", "-f", str(work / "livefuse.vcl"), "-s", "malloc,64m"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
                pytest.fail(f"varnishd did not start: {out[-2000:]}")
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


@contextlib.asynccontextmanager
async def origin_and_edge(product, *, private: bool = False):
    """`livefuse serve`'s app on one port, Varnish in front of it on another; the app hands out result URLs
    on the edge and purges it."""

    from streamer.config import ServerConfig
    from streamer.web.server import create_app

    origin, edge = free_port(), free_port()
    config = ServerConfig(port=origin, results_public_url=f"http://127.0.0.1:{edge}/results",
                          results_private=private, results_purge=(f"http://127.0.0.1:{edge}",))
    app = create_app(config, with_hooks(product, shutdown=lambda: None))
    server = TestServer(app, host="127.0.0.1", port=origin)
    await server.start_server()
    try:
        with varnish(origin, edge):
            yield f"http://127.0.0.1:{origin}", f"http://127.0.0.1:{edge}"
    finally:
        await server.close()


def fetch(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers by lower-case name, body)."""
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def ban(edge: str, prefix: str) -> tuple[int, bytes]:
    req = urllib.request.Request(f"{edge}/", method="BAN", headers={"X-Ban-Prefix": prefix})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def finished_job(http, base: str, world, source: bytes, clip: bytes) -> dict:
    async with http.post(f"{base}/v1/jobs", data=job_form(source, clip, consent="true"), headers=world.headers()) as r:
        assert r.status == 202, await r.text()
        job = await r.json()
    deadline = time.monotonic() + 120
    while job["state"] not in ("done", "failed", "cancelled") and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        async with http.get(f"{base}/v1/jobs/{job['id']}", headers=world.headers()) as r:
            job = await r.json()
    assert job["state"] == "done", job
    return job


@pytest.fixture(scope="module")
def clip(tmp_path_factory, grace_hopper) -> bytes:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", grace_hopper, 8).read_bytes()


async def test_results_through_the_edge(api_world, astronaut, clip):  # noqa: F811
    import aiohttp

    find_varnishd()
    async with origin_and_edge(api_world.product) as (base, edge), aiohttp.ClientSession() as http:
        job = await finished_job(http, base, api_world, encode(astronaut), clip)
        url = job["result_url"]
        assert url.startswith(f"{edge}/results/jobs/{job['id']}/") and url.endswith("/result.mp4")
        # the origin: immutable, validators, ranges; no token needed (the key is the capability)
        status, headers, body = await asyncio.to_thread(fetch, url.replace(edge, base))
        assert status == 200 and headers["cache-control"] == "public, max-age=31536000, immutable"
        assert headers["etag"] and headers["last-modified"] and headers["accept-ranges"] == "bytes"
        assert len(body) > 1000 and body[4:8] == b"ftyp"
        # the edge: a MISS, then a HIT with an Age
        first = await asyncio.to_thread(fetch, url)
        await asyncio.sleep(1.2)
        second = await asyncio.to_thread(fetch, url)
        assert first[0] == 200 and first[1]["x-cache"] == "MISS" and first[2] == body
        assert second[0] == 200 and second[1]["x-cache"] == "HIT" and int(second[1]["age"]) >= 1 and second[2] == body
        not_modified = await asyncio.to_thread(fetch, url, **{"If-None-Match": headers["etag"]})
        assert not_modified[0] == 304 and not_modified[2] == b""
        ranged = await asyncio.to_thread(fetch, url, Range="bytes=100-199")
        assert ranged[0] == 206 and ranged[2] == body[100:200]
        assert ranged[1]["content-range"] == f"bytes 100-199/{len(body)}"
        # BAN by prefix (an operator's tool, from the purgers ACL) drops it; the next GET is a MISS again
        assert (await asyncio.to_thread(ban, edge, f"/results/jobs/{job['id']}/"))[0] == 200
        assert (await asyncio.to_thread(ban, edge, "/v1/jobs"))[0] == 400
        assert (await asyncio.to_thread(fetch, url))[1]["x-cache"] == "MISS"
        # deleting the result takes it off the origin and the edge
        async with http.delete(f"{base}/v1/jobs/{job['id']}/result", headers=api_world.headers()) as r:
            assert r.status == 200, await r.text()
            assert (await r.json())["result_url"] is None
        gone = await asyncio.to_thread(fetch, url)
        assert gone[0] == 404 and gone[1].get("x-cache") != "HIT"
        record = [r for r in api_world.records("job_result_deleted") if r["data"]["job"] == job["id"]]
        assert record and record[0]["data"]["purged"] == 1 and not record[0]["data"].get("purge_failed")
        async with http.delete(f"{base}/v1/jobs/{job['id']}/result", headers=api_world.headers("bob")) as r:
            assert r.status == 404   # another token's job is not there


async def test_a_private_result_is_never_cached(api_world, astronaut, clip):  # noqa: F811
    import aiohttp

    find_varnishd()
    async with origin_and_edge(api_world.product, private=True) as (base, edge), aiohttp.ClientSession() as http:
        job = await finished_job(http, base, api_world, encode(astronaut), clip)
        url = job["result_url"]
        replies = []
        for _ in range(3):
            replies.append(await asyncio.to_thread(fetch, url))
            await asyncio.sleep(0.5)
    assert all(status == 200 and h["cache-control"] == "private, no-store" for status, h, _ in replies)
    assert all(h["x-cache"] != "HIT" and h.get("age", "0") == "0" for _, h, _ in replies)
    assert replies[0][2] == replies[-1][2]
