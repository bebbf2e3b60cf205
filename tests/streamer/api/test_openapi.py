"""GET /v1/openapi.json: a valid OpenAPI 3.1 document that names every /v1 route the app serves, with
each route's methods, and no route the app does not serve."""

from __future__ import annotations

import re

from openapi_spec_validator import validate

from streamer.config import ServerConfig
from streamer.server import create_app
from streamer.services import Services


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
    served = _served(create_app(ServerConfig(), api_world.product.services()))   # the same services as the server's
    assert described == served


def test_every_route_of_a_bare_app_is_described():
    """Without a product (the neutral services) the routes and the description still match."""
    app = create_app(ServerConfig(), Services())
    from streamer.api.openapi import openapi

    spec = openapi(jobs=False)
    validate(spec)
    described = {p: set(ops) - {"parameters"} for p, ops in spec["paths"].items()}
    assert described == _served(app)
    for path in described:
        assert re.fullmatch(r"/v1/[a-z{}/._]+", path)
