"""HTTP pieces every front door shares (the live routes in `streamer.web.server`, the REST API in
`streamer.web.api`): JSON refusals that always carry a machine-readable code, and request bodies read under
one clock (`BodyClock`): refused with 408 when the sender goes quiet (the stall timer) or falls below a
minimum transfer rate (the whole-body deadline, which grows with what has arrived), with 413 as soon as
they pass their limit (never read whole first), and with 400 when the client goes away mid-body.

Multipart bodies have their own reader on this clock: `streamer.web.multipart`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, AsyncIterator, Awaitable, Iterator

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from streamer.config import BodyLimits

log = logging.getLogger(__name__)

# the code a refusal carries when its raiser names none: every refusal is machine-readable
STATUS_CODES: dict[int, str] = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    406: "not_acceptable", 408: "read_timeout", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
    421: "misdirected_request", 422: "unprocessable", 426: "upgrade_required", 429: "rate_limited",
    431: "headers_too_large", 500: "internal", 503: "unavailable",
}


def status_code_name(status: int) -> str:
    return STATUS_CODES.get(status, "client_error" if status < 500 else "server_error")


class Refused(web.HTTPException):
    """An HTTP refusal with a JSON body {"error": reason, "code": code} (the status's generic code when
    none is given), plus `extra` fields."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None, code: str | None = None,
                 extra: dict[str, object] | None = None) -> None:
        self.status_code = status
        body = {"error": reason, "code": code or status_code_name(status)}
        body.update(extra or {})
        super().__init__(headers=headers, text=json.dumps(body), content_type="application/json")
        if (headers or {}).get("Connection", "").lower() == "close":
            self.force_close()   # what is left of the body is never parsed as a next request


def require_type(request: web.Request, allowed: tuple[str, ...]) -> None:
    if request.content_type not in allowed:
        raise Refused(415, f"content type {request.content_type[:100] or 'none'!r} not accepted; send {' or '.join(allowed)}",
                      code="unsupported_media_type")


CLOSE = {"Connection": "close"}   # a refusal mid-body: what is left of it is not read


class BodyClock:
    """One request body's clock: every read of it goes through `read`, which answers 408 (and closes
    the connection) when the sender stalls or falls below the rate floor, and 400 when it disconnects."""

    def __init__(self, limits: BodyLimits, what: str = "body") -> None:
        self.limits, self.what = limits, what
        self._loop = asyncio.get_running_loop()
        self.started = self._loop.time()
        self.received = 0

    def _deadline(self) -> float:
        """When the rate floor is broken unless more arrives (inf: no floor)."""
        if self.limits.min_rate <= 0:
            return float("inf")
        return self.started + self.limits.grace_s + self.received / self.limits.min_rate

    def too_slow(self) -> Refused:
        took = self._loop.time() - self.started
        return Refused(408, f"{self.what} arrived too slowly: {self.received} bytes in {took:.0f} s, under the "
                            f"minimum of {self.limits.min_rate:g} bytes/s after {self.limits.grace_s:g} s",
                       CLOSE, code="too_slow")

    async def read(self, step: Awaitable[bytes]) -> bytes:
        """One read (a coroutine returning bytes), timed; b"" at the body's end."""
        left = self._deadline() - self._loop.time()
        if left <= 0:
            _close(step)
            raise self.too_slow()
        wait = min(self.limits.stall_s, left)
        try:
            chunk = await asyncio.wait_for(step, wait)
        except TimeoutError:
            if wait < self.limits.stall_s:
                raise self.too_slow() from None
            raise Refused(408, f"{self.what} stalled: nothing arrived for {self.limits.stall_s:g} s",
                          CLOSE, code="read_timeout") from None
        except (ConnectionError, HttpProcessingError, asyncio.IncompleteReadError) as exc:
            # the client went away or broke its framing mid-body; the answer is for the log and any proxy
            log.info("%s: the client's body ended early: %s", self.what, type(exc).__name__)
            raise Refused(400, f"the {self.what} ended before its end", CLOSE, code="incomplete_body") from None
        self.received += len(chunk)
        return chunk

    async def chunks(self, request: web.Request, size: int = 64 * 1024) -> AsyncIterator[bytes]:
        while chunk := await self.read(request.content.read(size)):
            yield chunk


def _close(step: Any) -> None:
    close = getattr(step, "close", None)
    if close is not None:
        close()


async def read_limited(request: web.Request, limit: int, limits: BodyLimits | float = BodyLimits(),
                       code: str = "too_large") -> bytes:
    """The whole body, or 413 as soon as it passes `limit` bytes (before reading it all), or 408/400 as
    `BodyClock` says. `limits` may be a bare stall time (s)."""
    if not isinstance(limits, BodyLimits):
        limits = BodyLimits(stall_s=float(limits))
    if request.content_length is not None and request.content_length > limit:
        raise Refused(413, f"body is {request.content_length} bytes, the limit is {limit}", CLOSE, code=code)
    return await read_bounded(BodyClock(limits).chunks(request), limit, "body", code)


async def read_bounded(chunks: AsyncIterator[bytes], limit: int, what: str, code: str = "too_large") -> bytes:
    """The chunks joined, or 413 as soon as they pass `limit` (never read whole first)."""
    buf, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"{what} is over the limit of {limit} bytes", CLOSE, code=code)
        buf.append(chunk)
    return b"".join(buf)


class Slots:
    """A count of things in progress at once (upload bodies in transfer, photos in the pipeline), on the
    event loop only: `with slots.take(metrics):` or 503 + Retry-After with `code` when all are taken."""

    def __init__(self, most: int, what: str, code: str, retry_after_s: int = 1) -> None:
        if most < 1:
            raise ValueError(f"slots must be at least 1, got {most}")
        self.most, self.what, self.code, self.retry_after_s = most, what, code, retry_after_s
        self.taken = 0

    @contextlib.contextmanager
    def take(self, metrics: Any = None) -> Iterator[None]:
        if self.taken >= self.most:
            if metrics is not None:
                metrics.refused.labels(self.code).inc()
            raise Refused(503, f"{self.most} {self.what} already; try again shortly",
                          {"Retry-After": str(self.retry_after_s), **CLOSE}, code=self.code)
        self.taken += 1
        try:
            yield
        finally:
            self.taken -= 1


class _QuietBadRequests(logging.Filter):
    """aiohttp logs a request line or header it cannot parse (garbage sent after a complete request,
    a client's framing error) as an error with a traceback; it is the client's fault, answered 400: one
    INFO line without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg = f"{record.msg}: a malformed HTTP request was refused with 400 ({type(exc).__name__})"
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_QUIET = _QuietBadRequests()


def quiet_bad_requests() -> None:
    """Install the filter above on aiohttp's server logger (idempotent)."""
    logger = logging.getLogger("aiohttp.server")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)


def error_middleware():
    """Every answer in JSON with a code: aiohttp's own refusals (404 no such route, 405, 413 over the
    app's body cap) become `Refused`-shaped, and an unexpected exception becomes a 500 that names no
    path, stack or internal detail (the log has them)."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        try:
            return await handler(request)
        except Refused:
            raise
        except web.HTTPException as exc:
            if exc.status < 400 or exc.content_type == "application/json":
                raise
            headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after", "www-authenticate", "location")}
            raise Refused(exc.status, exc.reason or "refused", headers or None) from None
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception:
            log.exception("%s %s failed", request.method, request.path[:200])
            raise Refused(500, "the server failed on this request; it is logged", code="internal") from None

    return middleware
