"""`/sessions/{id}/control`: the data channel's JSON protocol over a WebSocket, for programs that steer a
live session from outside it (a stream deck, a chat bot, an agent). Every message goes through the
session's one handler (`ControlHandler`, streamer/session/control.py, on the session's control thread, as the
data channel's), and the socket hears what the data channel hears (welcome, stats, events, draining, bye).
Replies go only to the socket that asked.

Bounds: a message above `SocketLimits.max_message_bytes` gets the protocol's `too_large` error, one above
`hard_limit_bytes` closes the socket (1009) unread; more than `rate_per_s` (burst `burst`) messages a second
are answered `rate_limited` and not acted on. Replies (the rate_limited ones too) hold the socket's reading
back while half the outbox waits to be written, so a client that sends faster than it reads slows itself
down and is never closed for it; a client that stops reading loses stats and face events first, then, when a pushed event
finds the outbox full, the socket (1008 "too slow"). The socket closes (1001, "session ended: REASON")
when its session ends."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from streamer.session import protocol

log = logging.getLogger(__name__)

CONTROL_SUBPROTOCOL = "livefuse.control.v1"


@dataclass(frozen=True, slots=True)
class SocketLimits:
    """What one control socket may cost the server."""

    max_message_bytes: int = 16 * 1024   # the data channel's limit (ServerConfig.max_message_bytes)
    rate_per_s: float = 20.0             # messages acted on per second, sustained
    burst: int = 40
    outbox: int = 64                     # messages waiting to be written before stats are dropped
    heartbeat_s: float = 20.0            # ping; a peer that does not answer is closed
    per_session: int = 8                 # sockets open on one session at once

    @property
    def hard_limit_bytes(self) -> int:
        return 4 * self.max_message_bytes


class Bucket:
    """Token bucket over the loop's clock."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate, self.burst, self.left, self.last = rate, float(burst), float(burst), now

    def take(self, now: float) -> float:
        """0.0 when a message may go now, else the seconds until one may."""
        self.left = min(self.burst, self.left + (now - self.last) * self.rate)
        self.last = now
        if self.left >= 1.0:
            self.left -= 1.0
            return 0.0
        return (1.0 - self.left) / self.rate


class ControlSocket:
    """One prepared WebSocket bound to one session (`peer`: a PeerSession)."""

    def __init__(self, peer: Any, ws: web.WebSocketResponse, limits: SocketLimits) -> None:
        self.peer = peer
        self.ws = ws
        self.limits = limits
        self.outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(limits.outbox)
        self.dropped = 0
        self._closing = False
        self._close_reason = ""
        self._room = asyncio.Event()      # set by the writer each time it takes a message out
        self._reply_cap = max(1, limits.outbox // 2)   # replies wait beyond this; pushed messages keep the rest

    def deliver(self, msg: dict[str, Any]) -> None:
        """From the event loop (PeerSession.send): queue `msg`; never waits."""
        if self._closing:
            return
        try:
            self.outbox.put_nowait(msg)
        except asyncio.QueueFull:
            self.dropped += 1
            if msg.get("type") not in ("stats", "face"):   # an event lost to a client that stopped reading: let it go
                log.info("session %s: control socket not reading; closing it", self.peer.session.id)
                self._closing = True
                self._close_reason = "too slow"
                self._flush_then_stop()

    def _message_id(self, data: str | bytes) -> int | None:
        """The `id` a refused message carries (so the client can tell which was refused), or None."""
        if len(data) > self.limits.max_message_bytes:
            return None
        try:
            mid = json.loads(data).get("id")
        except (ValueError, AttributeError, RecursionError):
            return None
        return mid if isinstance(mid, int) and not isinstance(mid, bool) else None

    async def reply(self, msg: dict[str, Any]) -> None:
        """A reply to the client's own message: waits (holding the reading back) while the outbox holds
        `_reply_cap` messages, so the client's pace is set by how fast it reads, not cut off."""
        while not self._closing and self.outbox.qsize() >= self._reply_cap:
            self._room.clear()
            await self._room.wait()
        if not self._closing:
            self.outbox.put_nowait(msg)   # room is left: only this coroutine adds past the cap

    def _flush_then_stop(self) -> None:
        while True:   # make room for the sentinel: the writer stops at it
            try:
                self.outbox.put_nowait(None)
                return
            except asyncio.QueueFull:
                self.outbox.get_nowait()

    async def close(self, reason: str) -> None:
        """The session ends: what is queued (its bye) is written, then the socket closes."""
        if self._closing:
            return
        self._closing = True
        self._close_reason = f"session ended: {reason}"
        self._flush_then_stop()

    async def _writer(self) -> None:
        try:
            while (msg := await self.outbox.get()) is not None:
                self._room.set()
                await self.ws.send_str(protocol.dumps(msg))
        except (ConnectionError, RuntimeError):
            log.debug("session %s: control socket write failed", self.peer.session.id, exc_info=True)
        finally:
            self._room.set()
            code = WSCloseCode.POLICY_VIOLATION if self._close_reason == "too slow" else WSCloseCode.GOING_AWAY
            await self.ws.close(code=code, message=self._close_reason.encode("utf-8")[:120])

    async def run(self) -> None:
        """Serve the socket until either side ends it."""
        peer = self.peer
        loop = asyncio.get_running_loop()
        bucket = Bucket(self.limits.rate_per_s, self.limits.burst, loop.time())
        writer = asyncio.ensure_future(self._writer())
        peer.controllers.add(self)
        self.deliver(peer.control.welcome())
        if peer.closing:   # it began to close while this socket opened: it will not call close() on us
            await self.close("closing")
        try:
            async for frame in self.ws:
                if frame.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    break   # ERROR (e.g. above the hard limit): aiohttp closes the socket
                wait = bucket.take(loop.time())
                if wait > 0:
                    await self.reply(protocol.error("rate_limited", f"more than {self.limits.rate_per_s:g} messages "
                                                    f"a second; retry in {wait:.2f} s", retry_after_s=round(wait, 2),
                                                    id=self._message_id(frame.data)))
                    continue
                reply = await peer.handle(frame.data)
                if reply is not None:
                    await self.reply(reply)
        finally:
            peer.controllers.discard(self)
            self._room.set()
            if not self._closing:
                self._closing = True
                self._flush_then_stop()
            try:
                await asyncio.wait_for(asyncio.shield(writer), 5.0)
            except asyncio.TimeoutError:
                writer.cancel()


async def serve_control(request: web.Request, peer: Any, limits: SocketLimits) -> web.WebSocketResponse:
    """Upgrade `request` (already authorised for `peer`'s session) and serve it until it closes."""
    ws = web.WebSocketResponse(protocols=(CONTROL_SUBPROTOCOL,), max_msg_size=limits.hard_limit_bytes,
                               heartbeat=limits.heartbeat_s, compress=False)
    await ws.prepare(request)
    await ControlSocket(peer, ws, limits).run()
    return ws
