"""A PeerSession over real aiortc peers: a loopback answer, the control channel, stage failures, events
from any thread, stats, and a peer that vanishes without a word is released."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from aiohttp.test_utils import TestServer

from streamer.config import ServerConfig
from streamer.rtc.peer import PeerSession
from streamer.pipeline.pipeline import Pipeline
from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.web.server import SERVER_KEY, create_app
from streamer.services import NullServices
from streamer.session.session import Session
from tests.streaming_helpers import Boom, InvertBelowCode


async def connected(astronaut, stages=(), config=None, frames=300):
    config = config or ServerConfig(stats_interval_s=0.3)
    server = PeerSession(config, NullServices(make_pipeline=lambda s: Pipeline(list(stages))), Session())
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=frames))
    answer = await server.accept((await client.offer()).sdp)
    await client.accept(answer.sdp)
    await client.wait_message(lambda m: m["type"] == "welcome")
    return server, client


async def test_loopback_answer_has_only_127_candidates(astronaut):
    server = PeerSession(ServerConfig(idle_timeout_s=30), NullServices(make_pipeline=lambda s: Pipeline([])), Session())
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=5))
    await client.accept((await server.accept((await client.offer()).sdp)).sdp)
    try:
        cands = [l for l in server.pc.localDescription.sdp.splitlines() if l.startswith("a=candidate")]
        assert cands and all(" 127.0.0.1 " in c for c in cands), cands
        assert not any(" srflx " in c or " relay " in c for c in cands)
    finally:
        await client.close()
        await server.close()


async def test_control_messages_change_the_session(astronaut):
    server, client = await connected(astronaut)
    try:
        client.send({"type": "set_prompt", "text": "a slight smile", "id": 1})
        ack = await client.wait_message(lambda m: m.get("id") == 1)
        assert ack["type"] == "ack" and server.session.controls.prompt == "a slight smile"
        client.send({"type": "set_params", "strength": 0.4, "edits": {"smile": 0.3}, "id": 2})
        await client.wait_message(lambda m: m.get("id") == 2 and m["type"] == "ack")
        assert server.session.controls.strength == 0.4 and server.session.controls.edits["smile"] == 0.3
        client.send({"type": "set_params", "source_id": "nobody", "id": 3})
        err = await client.wait_message(lambda m: m.get("id") == 3)
        assert err["type"] == "error" and err["code"] == "unknown_source"
        client.send({"type": "ping", "t": 12.5, "id": 4})
        assert (await client.wait_message(lambda m: m.get("id") == 4))["t"] == 12.5
        client.send({"type": "set_params", "fusion": "neural", "id": 5})    # no swap stage in this pipeline
        err = await client.wait_message(lambda m: m.get("id") == 5)
        assert err["type"] == "error" and err["code"] == "no_swapper" and server.session.controls.fusion is None
        client.send({"type": "set_params", "fusion": "geometric", "id": 6})
        await client.wait_message(lambda m: m.get("id") == 6 and m["type"] == "ack")
        assert server.session.controls.fusion == "geometric"
    finally:
        await client.close()
        await server.close()


async def test_garbage_and_oversized_messages_get_errors_while_the_stream_goes_on(astronaut):
    server, client = await connected(astronaut)
    try:
        await client.wait_frames(5)
        before = len(client.received)
        client.send("{{{ not json")
        assert (await client.wait_message(lambda m: m["type"] == "error"))["code"] == "bad_json"
        client.send(json.dumps({"type": "set_prompt", "text": "x" * 100}) + " " * 20000)
        assert (await client.wait_message(lambda m: m.get("code") == "too_large"))["type"] == "error"
        client.send(json.dumps({"type": "set_params", "strength": "max"}))
        assert "strength" in (await client.wait_message(lambda m: m.get("code") == "invalid"))["message"]
        await client.wait_frames(before + 10)
        assert server.pc.connectionState == "connected" and server.channel.readyState == "open"
        assert server.session.controls.prompt == ""
    finally:
        await client.close()
        await server.close()


async def test_failing_stage_passes_frames_and_tells_the_client(astronaut):
    server, client = await connected(astronaut, stages=[Boom(), InvertBelowCode()])
    try:
        await client.wait_frames(10)
        err = await client.wait_message(lambda m: m.get("code") == "stage_failed")
        assert err["stage"] == "boom" and "on purpose" in err["message"]
        stats = await client.wait_message(lambda m: m["type"] == "stats" and m["errors"] > 0)
        assert set(stats["stages_ms"]) == {"boom", "invert"} and stats["fps_out"] > 0
        assert {"fps_in", "fps_out", "server_delay_ms", "dropped", "frames_in", "frames_out"} <= set(stats)
    finally:
        await client.close()
        await server.close()


async def test_events_from_a_worker_thread_reach_the_client(astronaut):
    server, client = await connected(astronaut)
    try:
        threading.Thread(target=server.session.notify, args=({"kind": "face_lost", "track": 3},)).start()
        event = await client.wait_message(lambda m: m.get("kind") == "face_lost")
        assert event == {"type": "event", "kind": "face_lost", "track": 3}
    finally:
        await client.close()
        await server.close()


VANISHING_CLIENT = textwrap.dedent(
    """
    import asyncio, sys, aiohttp, skimage.data
    from bench._probe import ClipTrack, ProbeClient, clip_background

    async def main(url):
        client = ProbeClient(ClipTrack(clip_background(skimage.data.astronaut(), 160, 120)))
        async with aiohttp.ClientSession() as http:
            await client.connect_http(url, http)
            await client.wait_frames(5)
            print(client.session_id, flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_a_vanished_peer_is_released_within_30_s():
    app = create_app(ServerConfig(idle_timeout_s=4))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    state = app[SERVER_KEY]
    proc = subprocess.Popen([sys.executable, "-c", VANISHING_CLIENT, str(server.make_url("")).rstrip("/")],
                            stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[3], text=True)
    try:
        line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline), 60)
        sid = line.strip()
        peer = state.peers[sid]
        assert peer.worker.alive
        proc.send_signal(signal.SIGKILL)  # no goodbye: no DTLS close, no SCTP abort
        proc.wait()
        t0 = time.monotonic()
        while sid in state.peers and time.monotonic() - t0 < 30:
            await asyncio.sleep(0.2)
        released = time.monotonic() - t0
        assert sid not in state.peers, "session still open 30 s after its peer vanished"
        assert not peer.worker.alive and peer.session.closed.is_set()
        assert not [t for t in threading.enumerate() if t.name == f"livefuse-frames-{sid}"]
        assert released < 30
    finally:
        if proc.poll() is None:
            proc.kill()
        await server.close()


BROWSER_OFFER_CANDIDATES = (
    "a=candidate:1 1 udp 2122260223 6a1b7c36-3f7e-4a8b-9d2f-1e2d3c4b5a69.local 54321 typ host generation 0\r\n"
    "a=candidate:2 1 udp 2122194687 127.0.0.1 40000 typ host generation 0\r\n"
)


def test_mdns_candidates_are_stripped_and_real_ones_kept():
    from streamer.rtc.ice import strip_mdns_candidates

    sdp = "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n" + BROWSER_OFFER_CANDIDATES + "a=end-of-candidates\r\n"
    out = strip_mdns_candidates(sdp)
    assert ".local" not in out and "127.0.0.1 40000 typ host" in out
    assert "\r\n\r\n" not in out and out.endswith("a=end-of-candidates\r\n")


async def test_offer_with_an_mdns_candidate_still_connects(astronaut):
    """A browser-style offer: an unresolvable mDNS candidate first, the loopback one after it."""
    server = PeerSession(ServerConfig(), NullServices(), Session())
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=200))
    offer = await client.offer()
    lines = offer.sdp.split("\r\n")
    first = next(i for i, l in enumerate(lines) if l.startswith("a=candidate"))
    lines.insert(first, BROWSER_OFFER_CANDIDATES.split("\r\n")[0])
    try:
        answer = await server.accept("\r\n".join(lines))
        await client.accept(answer.sdp)
        await client.wait_frames(5)
    finally:
        await client.close()
        await server.close()


async def test_an_event_raised_before_the_channel_opens_is_delivered(astronaut):
    server = PeerSession(ServerConfig(), NullServices(), Session())
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=100))
    try:
        answer = await server.accept((await client.offer()).sdp)
        assert server.channel is None
        server.session.notify({"kind": "early", "n": 1})
        await client.accept(answer.sdp)
        assert (await client.wait_message(lambda m: m.get("kind") == "early"))["n"] == 1
    finally:
        await client.close()
        await server.close()


async def test_two_faces_get_different_sources_over_a_real_peer(astronaut, grace_hopper):
    """A real aiortc client sends two real portraits side by side; the stats list both tracked faces,
    map_face gives each its own choice, and bad map_face messages get clear errors."""
    from engines.identity import IdentityEmbedder
    from engines.sources import SourceRegistry
    from streamer.session.face_map import KEEP, MAX_MAPPED_FACES, FaceFollower
    from streamer.pipeline.stages.faces import FaceStage
    from streamer.pipeline.stages.fusion import FusionStage
    from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE, group_frame

    embedder = IdentityEmbedder()
    reg = SourceRegistry(embedder=embedder)
    a, h = reg.register(astronaut), reg.register(grace_hopper)
    frame, _ = group_frame([(astronaut, ASTRONAUT_FACE, 110, (170, 240)), (grace_hopper, GRACE_HOPPER_FACE, 110, (470, 240))],
                           size=(640, 480))
    session = Session()
    session.add_source("alice", a, activate=False)
    session.add_source("grace", h, activate=False)
    stages = [FaceStage(), FusionStage(follower=FaceFollower(embedder))]
    server = PeerSession(ServerConfig(stats_interval_s=0.3),
                         NullServices(make_pipeline=lambda s: Pipeline(stages)), session)
    client = ProbeClient(ClipTrack(frame, frames=600, motion_px=0))
    await client.accept((await server.accept((await client.offer()).sdp)).sdp)
    try:
        stats = await client.wait_message(lambda m: m["type"] == "stats" and len(m.get("faces", [])) == 2, timeout=20)
        left, right = sorted(stats["faces"], key=lambda f: f["box"][0])
        assert left["box"][2] < 320 < right["box"][0] and all(f["source_id"] is None for f in (left, right))
        client.send({"type": "map_face", "track_id": left["track_id"], "source_id": "grace", "id": 1})
        client.send({"type": "map_face", "track_id": right["track_id"], "source_id": "alice", "id": 2})
        for i in (1, 2):
            ack = await client.wait_message(lambda m, i=i: m.get("id") == i)
            assert ack["type"] == "ack", ack
        assert ack["result"] == {str(left["track_id"]): "grace", str(right["track_id"]): "alice"}
        stats = await client.wait_message(lambda m: m["type"] == "stats" and len(m["faces"]) == 2
                                          and all(f["source_id"] for f in m["faces"]), timeout=20)
        got = {f["track_id"]: f["source_id"] for f in stats["faces"]}
        assert got == {left["track_id"]: "grace", right["track_id"]: "alice"}
        # bad input: each a clear error, the map unchanged
        client.send({"type": "map_face", "track_id": left["track_id"], "source_id": "nobody", "id": 3})
        client.send({"type": "map_face", "track_id": 777, "source_id": "grace", "id": 4})
        client.send({"type": "set_params", "face_sources": {"5": "nobody"}, "id": 5})
        for i, code in ((3, "unknown_source"), (4, "unknown_track"), (5, "unknown_source")):
            err = await client.wait_message(lambda m, i=i: m.get("id") == i)
            assert err["type"] == "error" and err["code"] == code, err
        for t in range(1000, 1000 + MAX_MAPPED_FACES - 2):       # fill the map up to its limit
            session.map_face(t, KEEP)
        client.send({"type": "map_face", "track_id": left["track_id"], "source_id": KEEP, "id": 6})   # a change: allowed
        assert (await client.wait_message(lambda m: m.get("id") == 6))["type"] == "ack"
        session.map_face(left["track_id"], None)
        session.map_face(999, KEEP)
        client.send({"type": "map_face", "track_id": left["track_id"], "source_id": "grace", "id": 7})
        err = await client.wait_message(lambda m: m.get("id") == 7)
        assert err["code"] == "too_many_faces" and str(MAX_MAPPED_FACES) in err["message"]
        client.send({"type": "map_face", "track_id": right["track_id"], "source_id": None, "id": 8})   # clearing: always
        assert (await client.wait_message(lambda m: m.get("id") == 8))["type"] == "ack"
        assert right["track_id"] not in session.controls.face_sources
    finally:
        await client.close()
        await server.close()
