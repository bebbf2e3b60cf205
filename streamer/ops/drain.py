"""Graceful drain, the way a replica leaves a cluster without dropping a stream (LiveKit's worker drain):
stop taking new sessions at once (readiness turns 503), let the running ones end on their own, and only
when `timeout` passes tell each remaining client, close it cleanly, then stop the process.

Live sessions last minutes to hours, so the default timeout is minutes (900 s); the pod's grace period
must be longer. Starting a drain twice (a preStop hook, then the SIGTERM after it) is one drain."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

log = logging.getLogger(__name__)

CLOSE_REASON = "server draining: the drain timeout passed"


@dataclass(frozen=True, slots=True)
class DrainResult:
    """How a drain ended: sessions that ended on their own, sessions closed at the timeout, seconds taken."""

    ended: int
    closed_at_timeout: int
    seconds: float


class Drainer:
    """Owns the draining flag and the one drain task. `peers` is the server's live mapping of open
    sessions (objects with `send(msg)`, `close(reason)` and a `closed` asyncio.Event); `audit` is the
    audit hook; `on_done` runs after the last session is gone (the server stops the process there)."""

    def __init__(self, peers: Mapping[str, Any], timeout: float, *, audit: Callable[..., None],
                 on_done: Callable[[DrainResult], Awaitable[None] | None] | None = None) -> None:
        self.peers = peers
        self.timeout = timeout
        self.audit = audit
        self.on_done = on_done
        self.started_at: float | None = None     # time.monotonic() when the drain began
        self.deadline: float | None = None
        self.result: DrainResult | None = None
        self._task: asyncio.Task | None = None
        self.done = asyncio.Event()

    @property
    def draining(self) -> bool:
        return self.started_at is not None

    def start(self, reason: str) -> bool:
        """Begin draining (from the event loop). False when a drain is already running."""
        if self.draining:
            log.info("drain already running (%s ignored)", reason)
            return False
        self.started_at = time.monotonic()
        self.deadline = self.started_at + self.timeout
        open_now = len(self.peers)
        log.warning("draining (%s): no new sessions; %d running, closed after %.0f s at the latest",
                    reason, open_now, self.timeout)
        self.audit("drain_started", reason=reason, sessions=open_now, timeout_s=self.timeout)
        notice = {"type": "draining", "reason": reason, "deadline_s": self.timeout,
                  "message": "this server is shutting down; the stream goes on until it ends or the deadline passes"}
        for peer in list(self.peers.values()):
            peer.send(dict(notice))
        self._task = asyncio.ensure_future(self._run())
        return True

    def status(self) -> dict[str, Any]:
        left = None if self.deadline is None else max(0.0, round(self.deadline - time.monotonic(), 1))
        return {"draining": self.draining, "sessions": len(self.peers), "deadline_in_s": left,
                "timeout_s": self.timeout}

    async def _run(self) -> None:
        assert self.started_at is not None
        at_start = set(self.peers)
        left = await self._wait_for_sessions(self.timeout)
        closed = 0
        if left:
            closed = len(left)
            log.warning("drain timeout (%.0f s): closing %d session(s)", self.timeout, closed)
            for peer in left:
                peer.send({"type": "draining", "reason": "timeout", "closing": True, "message": CLOSE_REASON})
            await asyncio.gather(*(p.close(CLOSE_REASON) for p in left), return_exceptions=True)
        seconds = round(time.monotonic() - self.started_at, 3)
        self.result = DrainResult(ended=len(at_start) - closed, closed_at_timeout=closed, seconds=seconds)
        self.audit("drain_finished", ended=self.result.ended, closed_at_timeout=closed, seconds=seconds)
        log.warning("drained in %.1f s (%d ended on their own, %d closed at the timeout)",
                    seconds, self.result.ended, closed)
        self.done.set()
        if self.on_done is not None:
            maybe = self.on_done(self.result)
            if maybe is not None:
                await maybe

    async def _wait_for_sessions(self, timeout: float) -> list[Any]:
        """Wait until no session is open (new ones cannot open) or `timeout` passes; what is still open."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.peers:
            waits = [asyncio.ensure_future(p.closed.wait()) for p in list(self.peers.values())]
            remaining = end - loop.time()
            if remaining <= 0:
                for w in waits:
                    w.cancel()
                break
            _, pending = await asyncio.wait(waits, timeout=min(remaining, 1.0), return_when=asyncio.FIRST_COMPLETED)
            for w in pending:
                w.cancel()
            await asyncio.sleep(0)  # let the server's on_closed run before the mapping is read again
        return list(self.peers.values())
