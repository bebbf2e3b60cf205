"""Tokens mean tokens: the product served with a tokens file on a loopback bind (as `livefuse serve
--tokens FILE` on 127.0.0.1, or a replica behind a reverse proxy on the same host) answers 401 with
code `unauthorized` to a token-less request on every route but /healthz, /readyz and the page's static
files, the control socket included; `--open-loopback` (SafetyConfig.open_loopback) is the explicit way
back to serving token-less loopback clients."""

from __future__ import annotations

import re

import aiohttp
import pytest

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from streamer.web.cors import cors_middleware
from streamer.safety.auth import AccessPolicy, auth_middleware
from streamer.web.server import create_app
from tests.streamer.web.api.conftest import encode, fuse_form, serve_product
from streamer.services import with_hooks

PUBLIC = {"/", "/healthz", "/readyz", "/favicon.ico", "/assets/demo_source.jpg"}


def filled(path: str, session: str) -> str:
    """A route's path with its placeholders filled (a real session id, so 401 is not a 404 in disguise)."""
    path = path.replace("{session}", session).replace("{job}", "0" * 32).replace("{viewer}", "v1")
    return re.sub(r"\{[^}]+\}", "x", path)


def app_routes(product) -> list[tuple[str, str]]:
    """Every (method, path) the product's app serves."""
    app = create_app(ServerConfig(), with_hooks(product, shutdown=lambda: None))
    return [(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None]


async def test_no_token_on_loopback_is_refused_on_every_route_and_the_control_socket(api_world, astronaut):
    async with serve_product(api_world.product) as (url, http, _):
        async with aiohttp.ClientSession(headers=api_world.headers()) as signed:
            owner = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=400))
            await owner.connect_http(url, signed)
            try:
                checked = []
                for method, path in app_routes(api_world.product):
                    if method == "HEAD" or path in PUBLIC or path.startswith(("/static", "/watch/")):
                        continue
                    target = filled(path, owner.session_id)
                    async with http.request(method, url + target) as r:
                        body = await r.json(content_type=None)
                        assert r.status == 401 and body["code"] == "unauthorized", (method, target, r.status, body)
                        assert r.headers["WWW-Authenticate"].startswith("Bearer")
                    checked.append(f"{method} {path}")
                assert {"POST /v1/fuse", "POST /v1/jobs", "GET /metrics", "GET /edits", "POST /offer",
                        "POST /sessions/{session}/source", "GET /v1/openapi.json"} <= set(checked), checked
                control = f"{url}/sessions/{owner.session_id}/control"
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:   # the owner's live session, no token
                    await http.ws_connect(control, protocols=("livefuse.control.v1",))
                assert refused.value.status == 401
                ws = await signed.ws_connect(control, protocols=("livefuse.control.v1",))   # with the token it opens
                assert (await ws.receive_json(timeout=10))["type"] == "welcome"
                await ws.close()
                for public in ("/healthz", "/readyz", "/", "/static/app.js"):
                    async with http.get(url + public) as r:
                        assert r.status == 200, (public, r.status)
            finally:
                await owner.close()


async def test_open_loopback_serves_token_less_loopback_clients_as_before(api_world, astronaut, grace_hopper):
    kit = api_world.product.safety
    assert kit.access.require_tokens   # the world's tokens file on 127.0.0.1
    opened = AccessPolicy.for_host(kit.config.host, tokens=True, open_loopback=True)
    assert not opened.require_tokens
    middlewares = (cors_middleware(opened.allowed_origins, opened.protected_prefixes), auth_middleware(kit.tokens, opened))
    async with serve_product(api_world.product, middlewares=middlewares) as (url, http, _):
        async with http.get(f"{url}/metrics") as r:
            assert r.status == 200
        async with http.post(f"{url}/v1/fuse", data=fuse_form(encode(astronaut), encode(grace_hopper), consent="true")) as r:
            assert r.status == 200, await r.text()


def test_open_loopback_is_for_loopback_binds_only():
    with pytest.raises(ValueError, match="loopback"):
        AccessPolicy.for_host("0.0.0.0", tokens=True, open_loopback=True)
    assert AccessPolicy.for_host("127.0.0.1", tokens=True).require_tokens
    assert not AccessPolicy.for_host("127.0.0.1").require_tokens   # no tokens file: a laptop's open server
    assert AccessPolicy.for_host("0.0.0.0").require_tokens
