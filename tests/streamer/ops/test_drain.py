"""Readiness, drain, public URLs and load gauges on a real in-process server with real peers
(tests/cluster runs the same through HAProxy, Prometheus and `livefuse serve` processes)."""

from __future__ import annotations

import io
import json

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from streamer.ops.readiness import readiness
from streamer.safety.audit import AuditConfig, AuditLog, verify
from streamer.web.server import SERVER_KEY, create_app
from streamer.services import NullServices, Services
from streamer.web.urls import SessionUrls


@pytest.fixture
async def served():
    closers = []

    async def start(config: ServerConfig, services: Services | None = None):
        app = create_app(config, services or NullServices())
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        http = aiohttp.ClientSession()
        closers.extend([server, http])
        return str(server.make_url("")).rstrip("/"), http, app[SERVER_KEY]

    yield start
    for c in reversed(closers):
        await c.close()


def test_readiness_states():
    assert readiness(sessions=0, capacity=2, draining=False).state == "ready"
    assert readiness(sessions=0, capacity=2, draining=False, warm=False).state == "starting"
    assert readiness(sessions=2, capacity=2, draining=False).state == "full"
    assert readiness(sessions=1, capacity=2, draining=True).state == "draining"
    assert readiness(sessions=1, capacity=4, draining=False).load_ratio == 0.25


def test_public_url_is_checked_and_urls_are_absolute():
    with pytest.raises(ValueError):
        ServerConfig(public_url="ftp://x")
    with pytest.raises(ValueError):
        ServerConfig(public_url="http://10.0.0.7:8080/?a=1")
    assert ServerConfig.from_env({"LIVEFUSE_PUBLIC_URL": "http://10.0.0.7:8080", "LIVEFUSE_DRAIN_TIMEOUT": "60"}).drain_timeout == 60
    u = SessionUrls.of("http://10.0.0.7:8080/")
    assert u.for_session("abc", "whip") == {"session": "http://10.0.0.7:8080/sessions/abc",
                                            "source": "http://10.0.0.7:8080/sessions/abc/source",
                                            "whep": "http://10.0.0.7:8080/whep/abc", "whip": "http://10.0.0.7:8080/whip/abc"}
    assert SessionUrls.of("").source("abc") == "/sessions/abc/source"


async def test_drain_timeout_tells_the_client_closes_it_and_refuses_new_sessions(served, astronaut):
    url, http, server = await served(ServerConfig(drain_timeout=1.5, public_url="http://127.0.0.1:9"))
    drained = []
    server.on_drained = drained.append
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120)))
    try:
        body = await client.connect_http(url, http)
        assert body["urls"]["source"] == f"http://127.0.0.1:9/sessions/{body['session']}/source"
        await client.wait_frames(5)
        async with http.get(f"{url}/readyz") as r:
            assert r.status == 200 and (await r.json())["state"] == "ready"
        assert server.drain.start("test") and not server.drain.start("again")   # one drain
        async with http.get(f"{url}/readyz") as r:
            assert r.status == 503 and (await r.json())["state"] == "draining"
        late = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120)))
        offer = await late.offer()
        async with http.post(f"{url}/offer", json={"sdp": offer.sdp, "type": "offer"}) as r:
            assert r.status == 503 and r.headers["Retry-After"] == "10" and (await r.json())["code"] == "draining"
        await late.close()
        first = await client.wait_message(lambda m: m.get("type") == "draining")
        assert first["deadline_s"] == 1.5 and not first.get("closing")
        await client.wait_message(lambda m: m.get("type") == "draining" and m.get("closing"), timeout=5)
        bye = await client.wait_message(lambda m: m.get("type") == "bye", timeout=5)
        assert "drain timeout" in bye["reason"]
        await server.drain.done.wait()
        assert drained and drained[0].closed_at_timeout == 1 and drained[0].ended == 0 and not server.peers
        async with http.get(f"{url}/metrics") as r:
            text = await r.text()
        assert "livefuse_draining 1.0" in text and "livefuse_sessions_capacity 8.0" in text
    finally:
        await client.close()


async def test_admin_drain_needs_an_admin(served):
    url, http, server = await served(ServerConfig())
    async with http.post(f"{url}/admin/drain") as r:
        assert r.status == 403 and not server.drain.draining
    url2, http2, server2 = await served(ServerConfig(), NullServices(is_admin=lambda request: True))
    async with http2.post(f"{url2}/admin/drain") as r:
        body = await r.json()
        assert r.status == 202 and body["started"] and body["draining"] and server2.drain.draining
    await server2.drain.done.wait()   # no sessions: drained at once
    assert server2.drain.result.ended == 0


async def test_load_gauges_follow_the_sessions(served, astronaut):
    from bench._stream_server import SleepStage
    from streamer.pipeline.pipeline import Pipeline

    url, http, server = await served(ServerConfig(max_sessions=4),
                                     NullServices(make_pipeline=lambda session: Pipeline([SleepStage(10)])))
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120)))
    try:
        await client.connect_http(url, http)
        await client.wait_frames(15)
        async with http.get(f"{url}/metrics") as r:
            lines = dict(l.rsplit(" ", 1) for l in (await r.text()).splitlines() if l and not l.startswith("#"))
        assert float(lines["livefuse_load_ratio"]) == 0.25 and float(lines["livefuse_sessions_capacity"]) == 4
        assert float(lines["livefuse_draining"]) == 0 and float(lines["livefuse_ready"]) == 1
        assert 0.15 < float(lines["livefuse_frame_budget_used_ratio"]) < 0.9   # 10 ms of a 33 ms frame interval
        assert not any(k.startswith("livefuse_gpu_") for k in lines)          # no GPU here: no GPU series
    finally:
        await client.close()


def test_audit_stdout_carries_the_same_chained_records(tmp_path):
    out = io.StringIO()
    log = AuditLog(AuditConfig(str(tmp_path / "audit.jsonl"), stdout=True), echo=out)
    for i in range(3):
        log.append("drain_started" if i == 0 else "session_closed", n=i)
    log.close()
    file_lines = (tmp_path / "audit.000001.jsonl").read_text().splitlines()
    assert out.getvalue().splitlines() == file_lines and len(file_lines) == 3
    assert [json.loads(l)["seq"] for l in file_lines] == [1, 2, 3] and verify(tmp_path / "audit.jsonl").ok
