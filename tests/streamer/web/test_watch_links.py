"""Watch links (streamer/web/watch_links.py): one /watch/w-… address per page tab that follows the tab's
sessions across Stop / Start, its long-polled state, and who may read it. The HTTP half runs the real
server with real aiortc peers on loopback."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from streamer.web.server import SERVER_KEY, create_app, runner_options
from streamer.services import NullServices
from streamer.web.watch_links import WatchLinks, is_watch_id


async def test_a_link_follows_its_owners_sessions_and_says_when_one_ended():
    links = WatchLinks()
    link = links.create("alice")
    assert is_watch_id(link.id) and link.state() == "waiting"
    assert links.get(link.id, "bob") is None and links.get(link.id, None) is None   # another's: as unknown
    assert links.get(link.id, "bob", admin=True) is link
    assert links.attach(link.id, "alice", "s1") is link and link.state() == "live" and links.resolve(link.id) == "s1"
    links.session_ended("s1")
    assert link.state() == "ended" and links.resolve(link.id) == link.id   # 404 as an unknown session
    assert links.attach(link.id, "alice", "s2").session == "s2" and link.streams == 2
    assert links.attach(link.id, "bob", "s3") is None and link.session == "s2"      # not bob's to move
    assert links.attach("w-short", "alice", "s4") is None                           # malformed
    # a well-formed id the server does not know (it restarted under an open tab) is taken again
    again = links.attach("w-" + "a" * 16, "alice", "s5")
    assert again is not None and again.session == "s5" and links.resolve(again.id) == "s5"
    assert links.resolve("s2") == "s2"   # a session id passes through


async def test_the_long_poll_waits_for_a_change_and_returns_at_once_when_behind():
    links = WatchLinks()
    link = links.create("alice")
    t0 = time.monotonic()
    assert (await links.wait(link, "stale-tag", timeout=5)).state() == "waiting"
    assert time.monotonic() - t0 < 0.5
    waiter = asyncio.ensure_future(links.wait(link, link.tag(), timeout=5))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    links.attach(link.id, "alice", "s1")
    assert (await asyncio.wait_for(waiter, 1)).session == "s1"
    t0 = time.monotonic()
    assert (await links.wait(link, link.tag(), timeout=0.3)).session == "s1"   # nothing changed: the timeout
    assert time.monotonic() - t0 >= 0.25
    waiter = asyncio.ensure_future(links.wait(link, link.tag(), timeout=5))
    await asyncio.sleep(0.1)
    links.close()                                                          # a stopping server wakes them all
    await asyncio.wait_for(waiter, 1)


def test_old_idle_links_go_first_when_full():
    links = WatchLinks(max_links=3)
    live = links.create("a")
    links.attach(live.id, "a", "s1")
    idle = [links.create("a") for _ in range(3)]
    assert links.get(live.id, "a") is live            # the live one stays
    assert links.get(idle[0].id, "a") is None and links.get(idle[-1].id, "a") is idle[-1]


@pytest.fixture
async def served():
    opened = []

    async def start():
        config = ServerConfig(idle_timeout_s=5)
        app = create_app(config, NullServices())
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server(**runner_options(config))
        http = aiohttp.ClientSession()
        opened.extend([server, http])
        return str(server.make_url("")).rstrip("/"), http, app[SERVER_KEY]

    yield start
    for thing in reversed(opened):
        await thing.close()


async def _connect(url: str, http: aiohttp.ClientSession, watch: str | None) -> tuple[ProbeClient, dict]:
    from skimage import data

    client = ProbeClient(ClipTrack(clip_background(data.astronaut(), 160, 120), frames=400))
    offer = await client.offer()
    body = {"sdp": offer.sdp, "type": offer.type}
    if watch is not None:
        body["watch"] = watch
    async with http.post(f"{url}/offer", json=body) as resp:
        reply = await resp.json()
        assert resp.status == 200, reply
    client.session_id = reply["session"]
    await client.accept(reply["sdp"])
    return client, reply


async def test_the_watch_link_plays_each_new_session_of_the_tab_over_whep(served):
    """The page's flow: a link first, then offers that name it; WHEP on the link reaches the session of the
    moment; the long poll says waiting, live (which session), ended, and live again on the next Start."""
    url, http, state = await served()
    async with http.post(f"{url}/sessions/watch") as resp:
        assert resp.status == 201
        made = await resp.json()
    wid = made["watch"]
    assert is_watch_id(wid) and made["url"] == f"/watch/{wid}" and made["state"] == "waiting"
    async with http.get(f"{url}/watch/{wid}") as resp:           # the page itself
        assert resp.status == 200 and "watch.js" in await resp.text()
    async with http.post(f"{url}/whep/{wid}", data="v=0", headers={"Content-Type": "application/sdp"}) as resp:
        assert resp.status == 404                                  # nothing to play yet

    first, reply = await _connect(url, http, wid)
    try:
        assert reply["watch"] == wid and reply["urls"]["watch"] == f"/watch/{wid}"
        async with http.get(f"{url}/sessions/watch/{wid}", params={"seen": made["tag"]}) as resp:
            live = await resp.json()
        assert live["state"] == "live" and live["session"] == first.session_id
        # a WHEP offer on the link is answered by the session of the moment (201 + its Location)
        from aiortc import RTCPeerConnection

        pc = RTCPeerConnection()
        pc.addTransceiver("video", direction="recvonly")
        await pc.setLocalDescription(await pc.createOffer())
        async with http.post(f"{url}/whep/{wid}", data=pc.localDescription.sdp,
                             headers={"Content-Type": "application/sdp"}) as resp:
            assert resp.status == 201, await resp.text()
            assert resp.headers["Location"].startswith(f"/whep/{first.session_id}/")
        await pc.close()
        # the long poll holds while nothing changes, and returns when the session stops (Stop)
        poll = asyncio.ensure_future(http.get(f"{url}/sessions/watch/{wid}", params={"seen": live["tag"]}))
        await asyncio.sleep(0.5)
        assert not poll.done()
        await state.peers[first.session_id].close("Stop")
        async with await asyncio.wait_for(poll, 5) as resp:
            ended = await resp.json()
        assert ended["state"] == "ended" and ended["session"] is None
    finally:
        await first.close()

    second, reply = await _connect(url, http, wid)                # Start again: the same link
    try:
        async with http.get(f"{url}/sessions/watch/{wid}", params={"seen": ended["tag"]}) as resp:
            again = await resp.json()
        assert again["state"] == "live" and again["session"] == second.session_id != first.session_id
        assert reply["watch"] == wid and state.watch_links.resolve(wid) == second.session_id
    finally:
        await second.close()


async def test_unknown_or_malformed_links_are_404_and_a_bad_watch_field_is_400(served):
    url, http, _state = await served()
    for name in ("w-" + "x" * 16, "not-a-link"):
        async with http.get(f"{url}/sessions/watch/{name}") as resp:
            body = await resp.json()
            assert resp.status == 404 and body["code"] == "unknown_watch_link", body
    async with http.post(f"{url}/offer", json={"sdp": "v=0", "type": "offer", "watch": 7}) as resp:
        assert resp.status == 400 and "watch" in (await resp.json())["error"]
    async with http.get(f"{url}/favicon.ico") as resp:
        assert resp.status == 200 and (await resp.read())[:4] == b"\x00\x00\x01\x00"   # an ICO file
