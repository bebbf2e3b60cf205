"""HTTP pieces every front door shares (the live routes in `streamer.server`, the REST API in
`streamer.api`): JSON refusals with a stable code, and bodies read in bounded chunks, refused with 413 as
soon as they pass their limit (never read whole first) and with 408 when the sender goes quiet."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

from aiohttp import BodyPartReader, web


class Refused(web.HTTPException):
    """An HTTP refusal with a JSON body {"error": reason} (and a machine-readable "code" where one exists)."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None, code: str | None = None,
                 extra: dict[str, object] | None = None) -> None:
        self.status_code = status
        body = {"error": reason} if code is None else {"error": reason, "code": code}
        body.update(extra or {})
        super().__init__(headers=headers, text=json.dumps(body), content_type="application/json")


def require_type(request: web.Request, allowed: tuple[str, ...]) -> None:
    if request.content_type not in allowed:
        raise Refused(415, f"content type {request.content_type or 'none'!r} not accepted; send {' or '.join(allowed)}")


# how long a body may go without a byte (ServerConfig.read_timeout_s takes its default from here)
DEFAULT_READ_TIMEOUT_S = 15.0


async def in_time(step: Any, stall_s: float, what: str) -> Any:
    """One read of a request, or 408 (and the connection closed) when nothing arrives for `stall_s`."""
    try:
        return await asyncio.wait_for(step, stall_s)
    except TimeoutError:
        raise Refused(408, f"{what} stalled: nothing arrived for {stall_s:g} s",
                      {"Connection": "close"}, code="read_timeout") from None


async def timed_chunks(chunks: AsyncIterator[bytes], stall_s: float, what: str) -> AsyncIterator[bytes]:
    it = aiter(chunks)
    while True:
        try:
            chunk = await in_time(anext(it), stall_s, what)
        except StopAsyncIteration:
            return
        yield chunk


async def read_limited(request: web.Request, limit: int, stall_s: float = DEFAULT_READ_TIMEOUT_S) -> bytes:
    """The whole body, or 413 as soon as it passes `limit` bytes (before reading it all), or 408."""
    if request.content_length is not None and request.content_length > limit:
        raise Refused(413, f"body is {request.content_length} bytes, the limit is {limit}")
    return await read_bounded(timed_chunks(request.content.iter_chunked(64 * 1024), stall_s, "body"), limit, "body")


async def read_bounded(chunks: AsyncIterator[bytes], limit: int, what: str) -> bytes:
    """The chunks joined, or 413 as soon as they pass `limit` (never read whole first)."""
    buf, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"{what} is over the limit of {limit} bytes")
        buf.append(chunk)
    return b"".join(buf)


async def part_chunks(part: BodyPartReader, stall_s: float = DEFAULT_READ_TIMEOUT_S) -> AsyncIterator[bytes]:
    while chunk := await in_time(part.read_chunk(64 * 1024), stall_s, "multipart part"):
        yield chunk


MAX_FORM_PARTS = 16      # an upload holds an image and a few fields (consent, source_id, index)
MAX_FIELD_BYTES = 1024


