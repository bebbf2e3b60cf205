"""Three real replicas behind HAProxy (health-checking /readyz) and scraped by Prometheus, driven by real
WebRTC peers: spread, full replicas skipped, session URLs that lead home, the autoscaler's query, drain
on SIGTERM, and a replica killed hard. The tests run in file order and share one cluster: the last two
take a replica each away."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import subprocess
import sys
import time

import aiohttp
import pytest
from PIL import Image

from bench._cluster import CHECK_INTERVAL_S, REPO, adapter_query, hpa_desired, scaling, wait_for
from bench._probe import ClipTrack, ProbeClient, clip_background

pytestmark = pytest.mark.timeout(240) if hasattr(pytest.mark, "timeout") else []

SIZE = (320, 240)


class Stream:
    """One session through the front: a ProbeClient and what the replica handed back."""

    def __init__(self, client: ProbeClient, body: dict) -> None:
        self.client, self.body = client, body
        self.urls = body["urls"]

    def frames(self) -> int:
        return len([r for r in self.client.received if r.index is not None])


async def open_stream(url: str, http: aiohttp.ClientSession, photo, fps: float = 15.0) -> Stream:
    client = ProbeClient(ClipTrack(clip_background(photo, *SIZE), fps=fps))
    body = await client.connect_http(url, http)
    return Stream(client, body)


async def end(cluster, s: Stream, http: aiohttp.ClientSession) -> None:
    """End a session the way a client does (DELETE on its own replica), then drop the connection."""
    node = cluster.node_of(s.urls["session"])
    async with http.delete(f"{node.url}/whip/{s.body['session']}") as r:
        assert r.status in (200, 404)
    await s.client.close()


def sessions_on(cluster) -> dict[str, int]:
    return {n.name: n.readyz()[1]["sessions"] for n in cluster.nodes if n.proc.poll() is None}


async def test_sessions_spread_and_every_url_leads_to_its_replica(cluster, astronaut, grace_hopper):
    async with aiohttp.ClientSession() as http:
        streams = [await open_stream(cluster.front, http, astronaut) for _ in range(3)]
        try:
            homes = [cluster.node_of(s.urls["session"]) for s in streams]
            assert len({h.name for h in homes}) == 3, [h.name for h in homes]   # round robin over ready replicas
            for s, home in zip(streams, homes):
                assert all(u.startswith(home.url + "/") for u in s.urls.values()), s.urls
                await s.client.wait_frames(10, timeout=20)
                sid = s.body["session"]
                async with http.get(s.urls["session"]) as r:
                    assert r.status == 200 and (await r.json())["session"] == sid
                other = next(n for n in cluster.nodes if n is not home)
                async with http.get(f"{other.url}/sessions/{sid}") as r:
                    assert r.status == 404                       # only the replica that holds it knows it
            # the source upload URL reaches the replica holding the session (through no front at all)
            buf = io.BytesIO()
            Image.fromarray(grace_hopper).save(buf, format="JPEG")
            form = aiohttp.FormData()
            form.add_field("image", buf.getvalue(), filename="g.jpg", content_type="image/jpeg")
            form.add_field("consent", "true")
            async with http.post(streams[0].urls["source"], data=form) as r:
                assert r.status in (200, 422), await r.text()     # 422 = refused by policy, not "no such session"
                assert r.status != 404
            # WHEP on the URL handed out: a viewer of that session, its Location on the same replica
            from aiortc import RTCSessionDescription

            from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on

            viewer = ProbeClient(ClipTrack(clip_background(astronaut, *SIZE), frames=1))
            viewer.pc.addTransceiver("video", direction="recvonly")
            viewer.pc.on("track", viewer._on_track)
            with gathering_on(LOOPBACK_ADDRESSES):
                await viewer.pc.setLocalDescription(await viewer.pc.createOffer())
            async with http.post(streams[1].urls["whep"], data=viewer.pc.localDescription.sdp,
                                 headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 201, await r.text()
                location, answer = r.headers["Location"], await r.text()
            assert location.startswith(homes[1].url + f"/whep/{streams[1].body['session']}/")
            await viewer.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
            try:
                await viewer.wait_frames(5, timeout=20)
            finally:
                async with http.delete(location) as r:
                    assert r.status == 200
                await viewer.close()
            # WHIP through the front: the Location it hands out is absolute, and DELETE on it ends the session
            pub = ProbeClient(ClipTrack(clip_background(astronaut, *SIZE), fps=15))
            offer = await pub.offer()
            async with http.post(f"{cluster.front}/whip", data=offer.sdp, headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 201, await r.text()
                whip_loc, answer = r.headers["Location"], await r.text()
            home = cluster.node_of(whip_loc)
            await pub.accept(answer)
            await pub.wait_frames(5, timeout=20)
            async with http.delete(whip_loc) as r:
                assert r.status == 200
            await pub.close()
            wait_for(lambda: home.readyz()[1]["sessions"] == 1, 10, "the WHIP session gone from its replica")
        finally:
            for s in streams:
                await end(cluster, s, http)
    wait_for(lambda: sum(sessions_on(cluster).values()) == 0, 15, "every session closed")


async def test_full_replica_gets_none_and_the_query_gives_the_load(cluster, astronaut):
    a, b, c = cluster.nodes
    async with aiohttp.ClientSession() as http:
        streams = [await open_stream(a.url, http, astronaut) for _ in range(2)]   # a: full (2 of 2)
        try:
            status, body = a.readyz()
            assert status == 503 and body["state"] == "full"
            offer = await ProbeClient(ClipTrack(clip_background(astronaut, *SIZE))).offer()
            async with http.post(f"{a.url}/offer", json={"sdp": offer.sdp, "type": "offer"}) as r:
                assert r.status == 503 and r.headers["Retry-After"] and (await r.json())["code"] == "full"
            wait_for(lambda: cluster.backend_status()["r0"] == "DOWN", 5 * CHECK_INTERVAL_S + 2, "front skips full r0")
            for _ in range(3):
                s = await open_stream(cluster.front, http, astronaut)
                streams.append(s)
                assert cluster.node_of(s.urls["session"]) is not a
            counts = sessions_on(cluster)
            assert counts["r0"] == 2 and counts["r1"] + counts["r2"] == 3, counts
            # the autoscaler's own query, on the real Prometheus, once it has scraped the figures above
            cfg = scaling()
            expected = sum(counts[n.name] / cluster.max_sessions for n in cluster.nodes) / 3
            query = cfg["hpa"]["fleet_average_promql"]

            def scraped() -> bool:
                got = cluster.promql(query)
                return bool(got) and abs(float(got[0]["value"][1]) - expected) < 1e-6

            wait_for(scraped, 10, f"prometheus: {query} == {expected}", step=0.2)
            value = float(cluster.promql(query)[0]["value"][1])
            total = float(cluster.promql(cfg["keda"]["query"])[0]["value"][1])
            per_pod = {r["metric"]["instance"]: float(r["value"][1]) for r in cluster.promql(cfg["metric"])}
            assert per_pod[f"127.0.0.1:{a.port}"] == 1.0 and len(per_pod) == 3
            desired = hpa_desired(3, value, cfg["target"])
            assert desired == 4                                    # (1 + 1 + 0.5) / 3 = 0.83 > 0.7: one more pod
            assert hpa_desired(3, total / 3, float(cfg["keda"]["threshold"])) == desired   # KEDA: ceil(sum / threshold)
            # what the HPA really reads: the chart's Prometheus Adapter rule, expanded as the adapter does
            rule = cfg["hpa"]["adapter_rule"]
            assert {r["metric"]["pod"] for r in cluster.promql(rule["seriesQuery"])} == {n.name for n in cluster.nodes}
            q = adapter_query(rule["metricsQuery"], cfg["hpa"]["metric_name"], [n.name for n in cluster.nodes])
            by_pod = {r["metric"]["pod"]: float(r["value"][1]) for r in cluster.promql(q)}
            assert by_pod == {n.name: counts[n.name] / cluster.max_sessions for n in cluster.nodes}, (q, by_pod)
            assert hpa_desired(3, sum(by_pod.values()) / 3, float(cfg["hpa"]["target_average_value"])) == desired
            for st in streams:
                await st.client.wait_frames(10, timeout=20)
            budget_q = cfg["frame_budget"]["promql"]
            wait_for(lambda: 0.0 < float(cluster.promql(budget_q)[0]["value"][1]) < 5.0, 10,
                     f"prometheus: {budget_q} between 0 and 5 while frames flow", step=0.2)
        finally:
            for s in streams:
                await end(cluster, s, http)
    wait_for(lambda: sum(sessions_on(cluster).values()) == 0, 15, "every session closed")
    wait_for(lambda: set(cluster.backend_status().values()) == {"UP"}, 5, "every replica back up")


async def test_sigterm_drains_keeps_the_running_session_then_exits_0(cluster, astronaut):
    victim = cluster.nodes[2]
    async with aiohttp.ClientSession() as http:
        s = await open_stream(victim.url, http, astronaut)
        await s.client.wait_frames(10, timeout=20)
        victim.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        wait_for(lambda: victim.readyz()[0] == 503, 2, "unready after SIGTERM")
        assert victim.readyz()[1]["state"] == "draining" and time.monotonic() - t0 < 1.0
        wait_for(lambda: cluster.backend_status()["r2"] == "DOWN", 5 * CHECK_INTERVAL_S + 2, "front skips r2")
        before = s.frames()
        newcomers = [await open_stream(cluster.front, http, astronaut) for _ in range(2)]
        assert all(cluster.node_of(n.urls["session"]) is not victim for n in newcomers)
        await asyncio.sleep(2.0)
        assert s.frames() > before + 10, (before, s.frames())   # still streaming while it drains
        assert victim.proc.poll() is None
        await s.client.wait_message(lambda m: m.get("type") == "draining", timeout=5)
        await end(cluster, s, http)                             # the session ends: the replica may go
        rc = victim.proc.wait(timeout=20)
        assert rc == 0
        for n in newcomers:
            await end(cluster, n, http)
    verify = subprocess.run([sys.executable, "-m", "streamer.app.cli", "audit", "verify", str(victim.audit_log), "--json"],
                            capture_output=True, text=True, cwd=str(REPO), env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    report = json.loads(verify.stdout)
    assert verify.returncode == 0 and report["ok"], report
    lines = [json.loads(line) for line in (victim.folder / "stdout.jsonl").read_text().splitlines() if line.strip()]
    events = [r["event"] for r in lines]
    assert "drain_started" in events and events[-1] == "drain_finished", events[-5:]
    assert [r["seq"] for r in lines] == list(range(1, len(lines) + 1)) and lines[-1]["seq"] == report["last_seq"]


async def test_sigkill_front_stops_routing_within_the_check_interval(cluster, astronaut):
    keep, victim = cluster.nodes[0], cluster.nodes[1]
    async with aiohttp.ClientSession() as http:
        s = await open_stream(keep.url, http, astronaut)
        await s.client.wait_frames(10, timeout=20)
        victim.proc.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        took = wait_for(lambda: cluster.backend_status()["r1"] == "DOWN", 10, "front marks r1 down", step=0.02)
        assert took <= 2 * CHECK_INTERVAL_S + 1.0, took
        before = s.frames()
        for _ in range(2):   # every new session lands on the one replica left, none fails
            n = await open_stream(cluster.front, http, astronaut)
            assert cluster.node_of(n.urls["session"]) is keep
            await end(cluster, n, http)
        await asyncio.sleep(1.5)
        assert s.frames() > before + 10
        await end(cluster, s, http)
        assert victim.proc.wait(timeout=5) == -signal.SIGKILL and time.monotonic() - t0 < 30
