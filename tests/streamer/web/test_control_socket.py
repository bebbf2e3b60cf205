"""The WebSocket control API against a real server with a real aiortc peer session, driven by the
`websockets` client: a prompt sent over the socket reaches the product's edits stage, stats and events
arrive as on the data channel, bad input gets the protocol's error and the stream goes on, the socket is
the owner's only (404 to others, as every session route), and it closes when the session ends or drains."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from streamer.web.control_socket import CONTROL_SUBPROTOCOL
from streamer.safety.auth import TOKEN_SUBPROTOCOL, AccessPolicy, TokenStore
from streamer.web.server import SERVER_KEY, create_app
from tests.streamer.web.test_ownership import services_for

ROOT = Path(__file__).resolve().parents[3]


def ws_url(url: str, sid: str) -> str:
    return url.replace("http://", "ws://", 1) + f"/sessions/{sid}/control"


async def next_message(ws, pred, timeout: float = 15.0) -> dict:
    """The first message from the server that `pred` accepts (others are skipped)."""
    async def find() -> dict:
        while True:
            msg = json.loads(await ws.recv())
            if pred(msg):
                return msg
    return await asyncio.wait_for(find(), timeout)


async def frames_out(http: aiohttp.ClientSession, url: str, sid: str) -> int:
    async with http.get(f"{url}/sessions/{sid}") as r:
        return (await r.json())["stats"]["frames_out"]


@pytest.fixture
async def token_server():
    """A server behind the token middleware (no models): owner alice, stranger bob, admin root."""
    closing: list = []
    store = TokenStore()
    tokens = {name: store.issue(name, burst=100, rate_per_minute=6000, admin=(name == "root"))
              for name in ("alice", "bob", "root")}

    async def start(config: ServerConfig | None = None):
        app = create_app(config or ServerConfig(stats_interval_s=0.2),
                         services_for(store, AccessPolicy.for_host("0.0.0.0")))
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        closing.append(server)
        return str(server.make_url("")).rstrip("/"), app[SERVER_KEY]

    http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {tokens['alice']}"})
    yield start, tokens, http
    await http.close()
    for c in reversed(closing):
        await c.close()


async def open_probe(astronaut, url: str, http) -> ProbeClient:
    probe = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=3000))
    await probe.connect_http(url, http)
    await probe.wait_frames(3)
    return probe


async def test_a_prompt_over_the_socket_reaches_the_products_edits_and_stats_arrive(product, grace_hopper):
    app = create_app(ServerConfig(stats_interval_s=0.3), product)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    state = app[SERVER_KEY]
    probe = ProbeClient(ClipTrack(clip_background(grace_hopper, 320, 240), frames=3000))
    try:
        async with aiohttp.ClientSession() as http:
            await probe.connect_http(url, http)
            sid = probe.session_id
            await probe.wait_frames(3, timeout=60)
            async with connect(ws_url(url, sid), subprotocols=[CONTROL_SUBPROTOCOL]) as ws:
                assert ws.subprotocol == CONTROL_SUBPROTOCOL
                welcome = json.loads(await ws.recv())
                assert welcome["type"] == "welcome" and welcome["session"] == sid
                assert welcome["stages"] == ["faces", "face_out", "fusion", "edits", "background", "watermark"]

                await ws.send(json.dumps({"type": "set_prompt", "text": "a big smile", "id": 7}))
                ack = await next_message(ws, lambda m: m.get("id") == 7)
                assert ack["type"] == "ack" and ack["result"]["allowed"] is True
                # the edits stage, rendering frames, says what it understood: the data channel's event, here
                understood = await next_message(ws, lambda m: m.get("type") == "prompt", timeout=30)
                assert understood["text"] == "a big smile" and understood["understood"].get("smile", 0) > 0.1
                assert any(m.get("type") == "prompt" for m in probe.messages)  # the channel heard it too
                stats = await next_message(ws, lambda m: m.get("type") == "stats")
                assert stats["frames_out"] > 0 and "edits" in stats["stages_ms"]
                async with http.get(f"{url}/sessions/{sid}") as r:
                    assert (await r.json())["controls"]["prompt"] == "a big smile"

                await ws.send(json.dumps({"type": "set_params", "edits": {"lip_tint": 0.5}, "strength": 0.4, "id": 8}))
                ack = await next_message(ws, lambda m: m.get("id") == 8)
                assert ack["type"] == "ack" and ack["result"] == ["edits", "strength"]
                controls = state.peers[sid].session.controls
                assert controls.edits["lip_tint"] == 0.5 and controls.strength == 0.4

                # the safety gate answers over the socket as on the channel; the prompt stays
                await ws.send(json.dumps({"type": "set_prompt", "text": "make me look like Tom Cruise", "id": 9}))
                refused = await next_message(ws, lambda m: m.get("id") == 9)
                assert refused["result"]["allowed"] is False and controls.prompt == "a big smile"

                # the sender ends the session: the socket hears bye, then closes with 1001
                await probe.close()
                bye = await next_message(ws, lambda m: m.get("type") == "bye", timeout=20)
                assert "connection" in bye["reason"]
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 10)
                assert ws.close_code == 1001 and ws.close_reason.startswith("session ended")
            await state.peers[sid].closed.wait() if sid in state.peers else None
            assert sid not in state.peers
    finally:
        await probe.close()
        await server.close()


async def test_bad_input_is_answered_and_the_stream_goes_on(token_server, astronaut):
    start, tokens, http = token_server
    url, state = await start()
    probe = await open_probe(astronaut, url, http)
    sid = probe.session_id
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    try:
        async with connect(ws_url(url, sid), subprotocols=[CONTROL_SUBPROTOCOL], additional_headers=auth) as ws:
            await next_message(ws, lambda m: m["type"] == "welcome")
            before = await frames_out(http, url, sid)
            cases = [("{not json", "bad_json"), ("[1, 2]", "unknown_type"), ('{"type": "shout"}', "unknown_type"),
                     ('{"type": "set_params", "edits": {"horns": 1}}', "invalid"),
                     ('{"type": "set_params", "strength": 7}', "invalid"),
                     ('{"type": "ping", "t": NaN}', "invalid"),
                     (json.dumps({"type": "set_prompt", "text": "x" * 20000}), "too_large"),
                     (b"\xff\xfe", "bad_json")]
            for raw, code in cases:
                await ws.send(raw)
                err = await next_message(ws, lambda m: m["type"] == "error")
                assert err["code"] == code, (raw[:40], err)
            await ws.send(json.dumps({"type": "set_params", "source_id": "nobody", "id": 3}))
            assert (await next_message(ws, lambda m: m.get("id") == 3))["code"] == "unknown_source"
            await ws.send(json.dumps({"type": "ping", "t": 1.5, "id": 4}))
            pong = await next_message(ws, lambda m: m.get("id") == 4)
            assert pong["type"] == "pong" and pong["t"] == 1.5
            await asyncio.sleep(0.5)
            assert await frames_out(http, url, sid) > before + 5     # the stream went on throughout
            assert sid in state.peers and state.peers[sid].pc.connectionState == "connected"

            # a burst above the rate: the excess is answered rate_limited and not acted on
            limits = state.socket_limits
            for i in range(limits.burst + 10):
                await ws.send(json.dumps({"type": "ping", "id": 100 + i}))
            replies = [await next_message(ws, lambda m: m["type"] in ("pong", "error")) for _ in range(limits.burst + 10)]
            assert sum(m["type"] == "error" and m["code"] == "rate_limited" for m in replies) >= 5
            assert sum(m["type"] == "pong" for m in replies) >= limits.burst - 2

        # a message above the hard limit is not read: the socket closes with 1009, the session stays
        async with connect(ws_url(url, sid), subprotocols=[CONTROL_SUBPROTOCOL], additional_headers=auth,
                           max_size=None) as ws:
            await next_message(ws, lambda m: m["type"] == "welcome")
            await ws.send("x" * (state.socket_limits.hard_limit_bytes + 1))
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            assert ws.close_code == 1009
        assert sid in state.peers
    finally:
        await probe.close()


async def test_a_client_that_sends_fast_and_reads_is_answered_rate_limited_and_never_closed(token_server, astronaut):
    """300 messages back to back (the issue's reading client was closed 1008 "too slow" after 150): each
    is answered, pong within the rate and `rate_limited` past it, the socket stays open, and a ping
    after the burst is answered pong once the bucket refills."""
    start, tokens, http = token_server
    url, state = await start()
    probe = await open_probe(astronaut, url, http)
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    n = 300
    try:
        async with connect(ws_url(url, probe.session_id), subprotocols=[CONTROL_SUBPROTOCOL], additional_headers=auth) as ws:
            await next_message(ws, lambda m: m["type"] == "welcome")

            async def burst() -> None:
                for i in range(n):
                    await ws.send(json.dumps({"type": "ping", "id": 1000 + i}))

            sender = asyncio.ensure_future(burst())
            replies = [await next_message(ws, lambda m: m.get("id", 0) >= 1000) for _ in range(n)]
            await sender
            assert sorted(m["id"] for m in replies) == list(range(1000, 1000 + n))   # every one answered
            limited = [m for m in replies if m["type"] == "error"]
            assert limited and all(m["code"] == "rate_limited" and m["retry_after_s"] > 0 for m in limited)
            assert sum(m["type"] == "pong" for m in replies) >= state.socket_limits.burst
            await asyncio.sleep(0.5)
            await ws.send(json.dumps({"type": "ping", "id": 7}))
            assert (await next_message(ws, lambda m: m.get("id") == 7))["type"] == "pong"
            assert ws.close_code is None
    finally:
        await probe.close()


async def test_only_the_owner_opens_the_socket_and_a_browser_token_never_reaches_the_log(token_server, astronaut, caplog):
    start, tokens, http = token_server
    url, state = await start()
    probe = await open_probe(astronaut, url, http)
    sid = probe.session_id
    caplog.set_level(logging.DEBUG)
    try:
        def refused_with(exc_info) -> int:
            return exc_info.value.response.status_code

        with pytest.raises(InvalidStatus) as info:   # another token: 404, as for an id that does not exist
            await connect(ws_url(url, sid), additional_headers={"Authorization": f"Bearer {tokens['bob']}"})
        assert refused_with(info) == 404
        with pytest.raises(InvalidStatus) as unknown:
            await connect(ws_url(url, "no-such-id"), additional_headers={"Authorization": f"Bearer {tokens['bob']}"})
        assert refused_with(unknown) == 404
        assert json.loads(info.value.response.body)["error"] == json.loads(unknown.value.response.body)["error"].replace("no-such-id", sid)
        with pytest.raises(InvalidStatus) as info:   # bob's token as a subprotocol: still bob
            await connect(ws_url(url, sid), subprotocols=[CONTROL_SUBPROTOCOL, TOKEN_SUBPROTOCOL + tokens["bob"]])
        assert refused_with(info) == 404
        with pytest.raises(InvalidStatus) as info:   # no token at all
            await connect(ws_url(url, sid), subprotocols=[CONTROL_SUBPROTOCOL])
        assert refused_with(info) == 401
        with pytest.raises(InvalidStatus) as info:   # a page on an origin that is not listed
            await connect(ws_url(url, sid), origin="http://evil.example",
                          subprotocols=[CONTROL_SUBPROTOCOL, TOKEN_SUBPROTOCOL + tokens["alice"]])
        assert refused_with(info) == 403
        async with http.get(f"{url}/sessions/{sid}/control") as r:     # not an upgrade
            assert r.status == 426 and "WebSocket" in (await r.json())["error"]

        # the owner the way a browser must (token as a subprotocol); the server picks the protocol, not the token
        async with connect(ws_url(url, sid), subprotocols=[CONTROL_SUBPROTOCOL, TOKEN_SUBPROTOCOL + tokens["alice"]]) as ws:
            assert ws.subprotocol == CONTROL_SUBPROTOCOL
            assert (await next_message(ws, lambda m: m["type"] == "welcome"))["session"] == sid
            await ws.send(json.dumps({"type": "set_prompt", "text": "professional look", "id": 1}))
            assert (await next_message(ws, lambda m: m.get("id") == 1))["type"] == "ack"
            async with http.get(f"{url}/sessions/{sid}") as r:
                assert (await r.json())["control_sockets"] == 1
        assert state.peers[sid].session.controls.prompt == "professional look"
        # and an admin may steer every session
        async with connect(ws_url(url, sid), additional_headers={"Authorization": f"Bearer {tokens['root']}"}) as ws:
            assert (await next_message(ws, lambda m: m["type"] == "welcome"))["session"] == sid
        # the server's log (access log included; the test's own websockets client logs its headers at DEBUG)
        server_log = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("websockets"))
        assert "/control" in server_log
        assert not any(tok in server_log for tok in tokens.values())
    finally:
        await probe.close()


async def test_drain_tells_the_socket_and_closes_it_at_the_timeout(token_server, astronaut):
    start, tokens, http = token_server
    url, state = await start(ServerConfig(stats_interval_s=0.2, drain_timeout=1.0))
    probe = await open_probe(astronaut, url, http)
    sid = probe.session_id
    try:
        async with connect(ws_url(url, sid), subprotocols=[CONTROL_SUBPROTOCOL],
                           additional_headers={"Authorization": f"Bearer {tokens['alice']}"}) as ws:
            await next_message(ws, lambda m: m["type"] == "welcome")
            async with aiohttp.ClientSession() as admin:
                async with admin.post(f"{url}/admin/drain", headers={"Authorization": f"Bearer {tokens['root']}"}) as r:
                    assert r.status == 202
            notice = await next_message(ws, lambda m: m["type"] == "draining")
            assert notice["deadline_s"] == 1.0
            closing = await next_message(ws, lambda m: m["type"] == "draining" and m.get("closing"), timeout=10)
            assert "timeout" in closing["message"]
            await next_message(ws, lambda m: m["type"] == "bye", timeout=10)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            assert ws.close_code == 1001
        await state.drain.done.wait()
        assert sid not in state.peers
    finally:
        await probe.close()


async def test_livefuse_control_steers_a_session_from_another_process(token_server, astronaut, tmp_path):
    start, tokens, http = token_server
    url, state = await start()
    probe = await open_probe(astronaut, url, http)
    sid = probe.session_id
    token_file = tmp_path / "token"
    token_file.write_text(tokens["alice"] + "\n")

    async def cli(*args: str, token: str | None = None) -> tuple[int, list[dict], str]:
        cmd = [sys.executable, "-m", "streamer.app.cli", "control", *args, "--url", url]
        if token:
            cmd += ["--token-file", token]
        proc = await asyncio.create_subprocess_exec(*cmd, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, [json.loads(line) for line in out.decode().splitlines()], err.decode()

    try:
        rc, out, err = await cli(sid, "--prompt", "a slight smile", "--edits", "lip_tint=0.3,smile=-0.2",
                                 "--strength", "0.6", token=str(token_file))
        assert rc == 0, err
        assert [m["type"] for m in out] == ["ack", "ack"] and out[0]["result"] == {"prompt": "a slight smile"}
        controls = state.peers[sid].session.controls
        assert controls.prompt == "a slight smile" and controls.strength == 0.6
        assert controls.edits == {"lip_tint": 0.3, "smile": -0.2}
        rc, out, err = await cli(sid, "--enhance", "0.7", token=str(token_file))    # the face enhancer's strength
        assert rc == 0, err
        assert state.peers[sid].session.controls.enhance == 0.7
        rc, out, err = await cli(sid, "--enhance", "2", token=str(token_file))      # out of range: refused
        assert rc == 1 and out[-1]["code"] == "invalid" and state.peers[sid].session.controls.enhance == 0.7
        rc, out, err = await cli(sid, "--shape", "0.3", token=str(token_file))      # how far the proportions move
        assert rc == 0, err
        assert state.peers[sid].session.controls.shape == 0.3
        rc, out, err = await cli(sid, "--shape", "1.5", token=str(token_file))      # out of range: refused
        assert rc == 1 and out[-1]["code"] == "invalid" and "shape" in out[-1]["message"]
        assert state.peers[sid].session.controls.shape == 0.3

        rc, out, err = await cli(sid, "--edits", "horns=1", token=str(token_file))   # refused by the schema
        assert rc == 1 and out[-1]["type"] == "error" and out[-1]["code"] == "invalid"
        rc, out, err = await cli(sid, "--source", "nobody", token=str(token_file))
        assert rc == 1 and out[-1]["code"] == "unknown_source"
        rc, _, err = await cli(sid, "--prompt", "x")                                  # no token: 401
        assert rc == 2 and "401" in err
        bob = tmp_path / "bob"
        bob.write_text(tokens["bob"])
        rc, _, err = await cli(sid, "--prompt", "x", token=str(bob))                  # not the owner: 404
        assert rc == 2 and "404" in err and state.peers[sid].session.controls.prompt == "a slight smile"

        # --watch prints the session's messages until it ends
        cmd = [sys.executable, "-m", "streamer.app.cli", "control", sid, "--watch", "--url", url, "--token-file", str(token_file)]
        proc = await asyncio.create_subprocess_exec(*cmd, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        seen = []
        while not any(m["type"] == "stats" for m in seen):
            seen.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 30)))
        async with http.delete(f"{url}/whip/{sid}") as r:
            assert r.status == 200
        rest, err = await asyncio.wait_for(proc.communicate(), 30)
        seen += [json.loads(line) for line in rest.decode().splitlines()]
        assert proc.returncode == 0, err
        assert seen[0]["type"] == "welcome" and seen[-1]["type"] == "bye"
    finally:
        await probe.close()
