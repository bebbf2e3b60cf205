"""HTTP pieces every front door shares (the live routes in `streamer.server`, the REST API in
`streamer.api`): JSON refusals with a stable code, and bodies read in bounded chunks, refused with 413 as
soon as they pass their limit, never read whole first."""

from __future__ import annotations

import json
from typing import AsyncIterator

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


async def read_limited(request: web.Request, limit: int) -> bytes:
    """The whole body, or 413 as soon as it passes `limit` bytes (before reading it all)."""
    if request.content_length is not None and request.content_length > limit:
        raise Refused(413, f"body is {request.content_length} bytes, the limit is {limit}")
    return await read_bounded(request.content.iter_chunked(64 * 1024), limit, "body")


async def read_bounded(chunks: AsyncIterator[bytes], limit: int, what: str) -> bytes:
    """The chunks joined, or 413 as soon as they pass `limit` (never read whole first)."""
    buf, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"{what} is over the limit of {limit} bytes")
        buf.append(chunk)
    return b"".join(buf)


async def part_chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    while chunk := await part.read_chunk(64 * 1024):
        yield chunk


MAX_FORM_PARTS = 16      # an upload holds an image and a few fields (consent, source_id, index)
MAX_FIELD_BYTES = 1024


