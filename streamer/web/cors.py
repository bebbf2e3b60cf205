"""CORS for the signaling routes, so a player page on another origin (a WHEP player, a WHIP publisher in
a web app) can use them: the preflight is answered before any token is asked for (a browser sends none
with it), and every answer to a listed origin, refusals included, says so and exposes the headers a
WHIP/WHEP client reads (`Location` above all: the resource it DELETEs or PATCHes next).

Only origins the operator lists (`--allow-origin`, the same list the origin check admits) get CORS
headers; any other page still gets nothing it can read, and the origin check refuses its requests."""

from __future__ import annotations

from typing import Iterable

from aiohttp import web

from streamer.safety.auth import listed_origin

ALLOW_METHODS = "GET, POST, PATCH, DELETE, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, If-Match"
EXPOSE_HEADERS = "Location, Link, ETag, Retry-After, X-LiveFuse-Session"
MAX_AGE_S = 600


def cors_middleware(allowed_origins: Iterable[str], prefixes: Iterable[str]):
    allowed = tuple(allowed_origins)
    routes = tuple(prefixes)

    def covered(path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in routes)

    def stamp(response: web.StreamResponse, origin: str) -> None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
        response.headers.add("Vary", "Origin")

    @web.middleware
    async def middleware(request: web.Request, handler):
        origin = request.headers.get("Origin")
        if origin is None or not covered(request.path) or not listed_origin(origin, allowed):
            return await handler(request)
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            response = web.Response(status=204, headers={
                "Access-Control-Allow-Methods": ALLOW_METHODS, "Access-Control-Allow-Headers": ALLOW_HEADERS,
                "Access-Control-Max-Age": str(MAX_AGE_S)})
            stamp(response, origin)
            return response
        try:
            response = await handler(request)
        except web.HTTPException as exc:      # a refusal the page must be able to read
            stamp(exc, origin)
            raise
        stamp(response, origin)
        return response

    return middleware
