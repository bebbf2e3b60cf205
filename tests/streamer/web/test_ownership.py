"""Sessions belong to the principal that opened them, with real aiortc peers against the real server
behind the token middleware: another token gets 404 on every route that names the session, an admin
sees all, a revoked token is refused without a restart; and WHEP viewers give their session slot back
on every way out."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from aiortc import RTCPeerConnection, RTCSessionDescription

from streamer.config import ServerConfig
from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration
from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.safety.auth import AccessPolicy, TokenStore, auth_middleware, is_admin, slot_release, token_id_of
from streamer.web.server import SERVER_KEY, create_app
from streamer.services import NullServices, Services


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Watcher:
    """A receive-only WHEP client."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(rtc_configuration(loopback=True))
        self.location: str | None = None

    async def watch(self, http: aiohttp.ClientSession, url: str, sid: str) -> int:
        self.pc.addTransceiver("video", direction="recvonly")
        with gathering_on(LOOPBACK_ADDRESSES):
            await self.pc.setLocalDescription(await self.pc.createOffer())
        async with http.post(f"{url}/whep/{sid}", data=self.pc.localDescription.sdp,
                             headers={"Content-Type": "application/sdp"}) as r:
            if r.status == 201:
                self.location = r.headers["Location"]
                await self.pc.setRemoteDescription(RTCSessionDescription(sdp=await r.text(), type="answer"))
            return r.status

    async def close(self) -> None:
        await self.pc.close()


def services_for(store: TokenStore, policy: AccessPolicy) -> Services:
    """The hooks `streamer.app.assembly.Product.services` wires for access control, without any model."""
    return NullServices(authorize=token_id_of, is_admin=is_admin, claim=slot_release,
                    middlewares=(auth_middleware(store, policy),), reload=store.reload)


@pytest.fixture
async def served():
    closing: list = []

    async def start(store: TokenStore, policy: AccessPolicy | None = None, config: ServerConfig | None = None):
        app = create_app(config or ServerConfig(), services_for(store, policy or AccessPolicy.for_host("0.0.0.0")))
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        closing.append(server)
        return str(server.make_url("")).rstrip("/"), app[SERVER_KEY]

    def client(token: str | None = None) -> aiohttp.ClientSession:
        http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"} if token else None)
        closing.append(http)
        return http

    yield start, client
    for c in reversed(closing):
        await c.close()


def sender(astronaut) -> ProbeClient:
    return ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=600))


async def test_another_token_gets_404_on_every_route_that_names_the_session(served, astronaut):
    start, client = served
    store = TokenStore()
    alice, bob, root = store.issue("alice", burst=50), store.issue("bob", burst=50), store.issue("root", admin=True)
    url, state = await start(store)
    a, b, admin = client(alice), client(bob), client(root)
    probe, watcher = sender(astronaut), Watcher()
    try:
        await probe.connect_http(url, a)
        sid = probe.session_id
        assert state.peers[sid].session.token_id == "alice"
        assert await watcher.watch(a, url, sid) == 201          # the owner watches her own session
        async with b.get(f"{url}/sessions/no-such-id") as r:
            unknown = (r.status, (await r.json())["error"].replace("no-such-id", sid))
        viewer_path = watcher.location
        attempts = [b.get(f"{url}/sessions/{sid}"),
                    b.post(f"{url}/sessions/{sid}/source", data=b"\xff\xd8", headers={"Content-Type": "image/jpeg"}),
                    b.post(f"{url}/whep/{sid}", data="v=0\r\n", headers={"Content-Type": "application/sdp"}),
                    b.delete(f"{url}{viewer_path}"),
                    b.patch(f"{url}/whip/{sid}", data="a=end-of-candidates\r\n",
                            headers={"Content-Type": "application/trickle-ice-sdpfrag"}),
                    b.delete(f"{url}/whip/{sid}")]
        for attempt in attempts:
            async with attempt as r:
                # the same answer as for an id that does not exist: nothing tells bob the session is there
                assert (r.status, (await r.json())["error"]) == unknown
        assert sid in state.peers and len(state.peers[sid].viewers) == 1
        async with a.get(f"{url}/sessions/{sid}") as r:
            assert r.status == 200 and (await r.json())["viewers"] == [viewer_path.rsplit("/", 1)[1]]
        async with admin.get(f"{url}/sessions/{sid}") as r:
            assert r.status == 200
        async with admin.delete(f"{url}/whip/{sid}") as r:
            assert r.status == 200
        assert sid not in state.peers
    finally:
        await watcher.close()
        await probe.close()


async def test_token_less_loopback_clients_own_their_sessions_as_loopback(served, astronaut):
    start, client = served
    store = TokenStore()
    tok = store.issue("alice", burst=50)
    url, state = await start(store, AccessPolicy.for_host("127.0.0.1"))
    probe = sender(astronaut)
    try:
        await probe.connect_http(url, client())
        sid = probe.session_id
        assert state.peers[sid].session.token_id == "loopback"
        async with client(tok).get(f"{url}/sessions/{sid}") as r:
            assert r.status == 404
        async with client().get(f"{url}/sessions/{sid}") as r:
            assert r.status == 200
    finally:
        await probe.close()


def revoke_in_file(path, token_id: str) -> None:
    """What `livefuse tokens revoke` does: another process rewrites the file."""
    other = TokenStore.load(path)
    other.revoke(token_id)
    other.save(path)


async def test_revoked_token_is_refused_on_its_next_request_without_a_restart(served, astronaut, tmp_path):
    start, client = served
    path = tmp_path / "tokens.json"
    seed = TokenStore()
    alice, bob = seed.issue("alice", burst=50), seed.issue("bob", burst=50)
    seed.save(path)
    ticks = Ticks()
    store = TokenStore.load(path, monotonic=ticks)
    url, state = await start(store)
    a, b = client(alice), client(bob)
    probe = sender(astronaut)
    try:
        await probe.connect_http(url, a)
        sid = probe.session_id
        async with a.get(f"{url}/sessions/{sid}") as r:
            assert r.status == 200
        revoke_in_file(path, "alice")
        ticks.t += 1.5  # the file is looked at again at most once a second
        async with a.get(f"{url}/sessions/{sid}") as r:
            assert r.status == 401 and (await r.json())["error"] == "unknown token"
        async with a.delete(f"{url}/whip/{sid}") as r:
            assert r.status == 401
        async with b.get(f"{url}/healthz") as r:
            assert r.status == 200
        async with b.get(f"{url}/sessions/{sid}") as r:
            assert r.status == 404  # bob's token was re-read too, and still is not alice
    finally:
        await probe.close()


async def test_sighup_rereads_the_tokens_file(tmp_path):
    from streamer.app.commands.serve import reload_on_sighup

    path = tmp_path / "tokens.json"
    seed = TokenStore()
    raw = seed.issue("alice")
    seed.save(path)
    store = TokenStore.load(path, monotonic=Ticks())   # the clock never moves: only SIGHUP re-reads
    assert store.authenticate(f"Bearer {raw}").id == "alice"
    revoke_in_file(path, "alice")
    await reload_on_sighup(NullServices(reload=store.reload))(None)
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(50):
            await asyncio.sleep(0.01)
            if not store.entries():
                break
        assert store.entries() == []
    finally:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)


def test_token_files_without_roles_still_load_and_admin_is_kept(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"sha256": "ab" * 32, "id": "old", "expires": None, "max_sessions": 2,
                                            "rate_per_minute": 60.0, "burst": 20}]}))
    store = TokenStore.load(path)
    assert store.entries()[0]["admin"] is False
    store.issue("root", admin=True)
    store.save(path)
    assert [(e["id"], e["admin"]) for e in TokenStore.load(path).entries()] == [("old", False), ("root", True)]
    with pytest.raises(ValueError, match="reserved"):
        store.issue("loopback")


IDLE_S = 1.5   # short, to see idle viewers go, but long enough for a loaded machine to set up a connection


async def wait_until(check, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("condition not reached")


@pytest.mark.parametrize("principal", ["token", "loopback"])
async def test_twenty_viewers_in_a_row_leave_room_for_the_next_offer(served, astronaut, principal):
    start, client = served
    store = TokenStore()
    if principal == "token":  # 4 open at once per token
        http = client(store.issue("alice", max_sessions=4, rate_per_minute=6000, burst=500))
        policy = AccessPolicy.for_host("0.0.0.0")
    else:                     # 16 open at once per address
        http = client()
        policy = AccessPolicy(require_tokens=False, open_rate_per_minute=6000)
    url, state = await start(store, policy, ServerConfig(idle_timeout_s=IDLE_S))
    probe = sender(astronaut)
    try:
        await probe.connect_http(url, http)
        sid = probe.session_id
        for i in range(20):
            watcher = Watcher()
            assert await watcher.watch(http, url, sid) == 201, f"viewer {i} refused"
            if i % 2:
                async with http.delete(f"{url}{watcher.location}") as r:
                    assert r.status == 200
            elif i % 4 == 0:  # the viewer goes away once connected: the server sees the connection close
                await wait_until(lambda: watcher.pc.connectionState == "connected")
                await watcher.close()
            else:             # the viewer goes away before it connects: idle, the server lets it go
                await watcher.close()
            await wait_until(lambda: not state.peers[sid].viewers)
            await watcher.close()
        assert sum(store.open_slots().values()) == 1        # only the sending session
        second = sender(astronaut)
        try:
            await second.connect_http(url, http)
        finally:
            await second.close()
    finally:
        await probe.close()


async def test_open_close_cycles_leave_the_slot_table_empty(served, astronaut):
    start, client = served
    store = TokenStore()
    http = client(store.issue("alice", max_sessions=2, rate_per_minute=60000, burst=5000))
    url, state = await start(store, config=ServerConfig(idle_timeout_s=IDLE_S))
    for i in range(100):
        probe, watcher = sender(astronaut), Watcher()
        try:
            await probe.connect_http(url, http)
            sid = probe.session_id
            assert await watcher.watch(http, url, sid) == 201, f"cycle {i}: viewer refused"
            way = i % 4
            if way == 0:    # the viewer leaves by DELETE, then the session
                async with http.delete(f"{url}{watcher.location}") as r:
                    assert r.status == 200
                async with http.delete(f"{url}/whip/{sid}") as r:
                    assert r.status == 200
            elif way == 1:  # the session ends under its viewer
                async with http.delete(f"{url}/whip/{sid}") as r:
                    assert r.status == 200
            elif way == 2:  # the viewer's connection closes (connected, or now and then not yet), then the session
                if i % 16 != 6:
                    await wait_until(lambda: watcher.pc.connectionState == "connected")
                await watcher.close()
                await wait_until(lambda: not state.peers[sid].viewers)
                async with http.delete(f"{url}/whip/{sid}") as r:
                    assert r.status == 200
            else:           # the sender hangs up: the session ends, its viewer with it
                await wait_until(lambda: probe.pc.connectionState == "connected")
                await probe.close()
                await wait_until(lambda: sid not in state.peers)
        finally:
            await watcher.close()
            await probe.close()
    await wait_until(lambda: not state.peers)
    assert store.open_slots() == {}
