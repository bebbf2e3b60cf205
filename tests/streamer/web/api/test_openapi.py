"""GET /v1/openapi.json: a valid OpenAPI 3.1 document that names every /v1 route the app serves, with
each route's methods, and no route the app does not serve."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest
from openapi_spec_validator import validate

from streamer.config import ServerConfig
from streamer.web.server import create_app
from streamer.services import NullServices
from tests.streamer.web.api.conftest import serve_product


def _served(app) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if path.startswith("/v1/") and route.method != "HEAD":
            out.setdefault(path, set()).add(route.method.lower())
    return out


async def test_served_description_is_valid_and_complete(api, api_world):
    url, http, server = api
    async with http.get(f"{url}/v1/openapi.json", headers=api_world.headers()) as r:
        assert r.status == 200 and r.content_type == "application/json"
        spec = await r.json()
    validate(spec)
    assert spec["openapi"].startswith("3.1")
    described = {p: {m for m in ops if m in ("get", "post", "delete", "put", "patch")} for p, ops in spec["paths"].items()}
    served = _served(create_app(ServerConfig(), api_world.product))   # the same services as the server's
    assert described == served


def test_every_route_of_a_bare_app_is_described():
    """Without a product (the neutral services) the routes and the description still match."""
    app = create_app(ServerConfig(), NullServices())
    from streamer.web.api.openapi import openapi

    spec = openapi(jobs=False)
    validate(spec)
    described = {p: set(ops) - {"parameters"} for p, ops in spec["paths"].items()}
    assert described == _served(app)
    for path in described:
        assert re.fullmatch(r"/v1/[a-z{}/._]+", path)


ST_SEED = 20261205
ST_EXAMPLES = 25


@pytest.mark.timeout(300)
async def test_schemathesis_finds_nothing_against_a_server_with_tokens(api_world, tmp_path):
    """An independent OpenAPI fuzzer (Schemathesis, `--checks all`: no 5xx, every status, content type
    and header the server answers is in the description, schema-valid data accepted or refused as it
    documents, schema-violating data refused, no request served without the documented token) against
    the product with a tokens file on loopback, holding a valid token; a fixed seed and a bounded number
    of examples per operation, so a failure replays. Its settings: tests/streamer/web/api/schemathesis.toml."""
    st = Path(sys.executable).with_name("st")
    async with serve_product(api_world.product) as (url, _, _server):
        proc = await asyncio.create_subprocess_exec(
            str(st), "--config-file", str(Path(__file__).with_name("schemathesis.toml")), "--no-color",
            "run", f"{url}/v1/openapi.json", "--checks", "all", "--seed", str(ST_SEED),
            "--max-examples", str(ST_EXAMPLES), "--workers", "1", "--request-timeout", "30",
            "-H", f"Authorization: Bearer {api_world.tokens['alice']}", "--report-dir", str(tmp_path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=tmp_path)
        out = (await proc.communicate())[0].decode("utf-8", "replace")
    summary = re.search(r"(\d+) generated, (\d+) passed", out)
    assert proc.returncode == 0 and summary, out[-6000:]
    assert int(summary.group(1)) >= 100, out[-2000:]   # it did reach the API
