"""A player page on another origin can use WHIP/WHEP: the preflight is answered without a token, answers
to a listed origin (refusals too) carry CORS headers and expose Location; an unlisted origin gets none."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from streamer.web.cors import cors_middleware
from streamer.safety.auth import AccessPolicy, TokenStore, auth_middleware
from streamer.web.server import create_app
from streamer.services import NullServices

PLAYER = "https://player.example"


@pytest.fixture
async def served():
    store = TokenStore()
    token = store.issue("player", burst=50)
    policy = AccessPolicy(require_tokens=True, allowed_origins=(PLAYER,))
    app = create_app(ServerConfig(), NullServices(middlewares=(
        cors_middleware(policy.allowed_origins, policy.protected_prefixes), auth_middleware(store, policy))))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    async with aiohttp.ClientSession() as http:
        yield str(server.make_url("")).rstrip("/"), http, token
    await server.close()


async def test_the_preflight_is_answered_without_a_token(served):
    url, http, _ = served
    headers = {"Origin": PLAYER, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}
    async with http.options(f"{url}/whip", headers=headers) as r:
        assert r.status == 204
        assert r.headers["Access-Control-Allow-Origin"] == PLAYER
        assert "POST" in r.headers["Access-Control-Allow-Methods"] and "DELETE" in r.headers["Access-Control-Allow-Methods"]
        assert "Authorization" in r.headers["Access-Control-Allow-Headers"]
        assert "Origin" in r.headers.getall("Vary")


async def test_a_whip_session_from_a_listed_origin_can_read_its_location(served, astronaut):
    url, http, token = served
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=300))
    try:
        client.pc.addTransceiver(client.track, direction="sendrecv")
        from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on

        with gathering_on(LOOPBACK_ADDRESSES):
            await client.pc.setLocalDescription(await client.pc.createOffer())
        async with http.post(f"{url}/whip", data=client.pc.localDescription.sdp, headers={
                "Origin": PLAYER, "Authorization": f"Bearer {token}", "Content-Type": "application/sdp"}) as r:
            assert r.status == 201, await r.text()
            assert r.headers["Access-Control-Allow-Origin"] == PLAYER
            assert "Location" in r.headers["Access-Control-Expose-Headers"]
            location = r.headers["Location"]
        async with http.delete(f"{url}{location}", headers={"Origin": PLAYER, "Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == PLAYER
    finally:
        await client.close()


@pytest.mark.parametrize("auth", [None, "Bearer wrong"])
async def test_refusals_to_a_listed_origin_are_readable_by_its_page(served, auth):
    url, http, _ = served
    headers = {"Origin": PLAYER, "Content-Type": "application/sdp", **({"Authorization": auth} if auth else {})}
    async with http.post(f"{url}/whip", data="v=0", headers=headers) as r:
        assert r.status == 401
        assert r.headers["Access-Control-Allow-Origin"] == PLAYER


async def test_an_unlisted_origin_gets_no_cors_headers_and_is_refused(served):
    url, http, token = served
    async with http.options(f"{url}/whip", headers={"Origin": "https://evil.example",
                                                    "Access-Control-Request-Method": "POST"}) as r:
        assert "Access-Control-Allow-Origin" not in r.headers
    async with http.post(f"{url}/whip", data="v=0", headers={"Origin": "https://evil.example",
                                                            "Authorization": f"Bearer {token}"}) as r:
        assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers


async def test_the_page_and_health_routes_are_not_cors_routes(served):
    url, http, _ = served
    async with http.get(f"{url}/healthz", headers={"Origin": PLAYER}) as r:
        assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers
