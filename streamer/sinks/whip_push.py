"""Restream over WHIP (RFC 9725): a session's output and audio sent to a WHIP endpoint (Twitch's and other
platforms' WebRTC ingest, another media server, another LiveFuse) by an aiortc peer of its own.

The address is the endpoint's URL; its bearer token rides in the URL's user part
(`https://TOKEN@host/whip`, or `https://:TOKEN@host/whip`), which logs, events and status never show
(`redact`). The peer offers send-only video (and audio when the session has it), POSTs the offer as
`application/sdp` with `Authorization: Bearer TOKEN`, takes the `201`'s answer and `Location`, and
DELETEs that resource when it stops. When the connection fails or the endpoint refuses, it offers again
with backoff, each time on fresh copies of the session's tracks. It runs on the server's event loop, as
the session's own peer does; aiortc encodes on its own, so nothing here waits on the frame path."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable
from urllib.parse import urljoin, urlsplit, urlunsplit

from streamer.sinks.addresses import UNREADABLE, origin

log = logging.getLogger(__name__)

Event = Callable[[dict[str, Any]], None]


def split_whip(url: str) -> tuple[str, str | None]:
    """(the endpoint's URL without its user part, the bearer token or None); ValueError for anything that
    is not http(s)://HOST/PATH (the message never carries the token)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ValueError(f"restream address {redact_whip(url)} is not a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError("a WHIP address is https://TOKEN@HOST/PATH (http:// only for loopback tests)")
    token = parts.password or parts.username or None
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{port}" if port else ""
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), token


def redact_whip(url: str) -> str:
    """The endpoint without its token: https://host/path (a query, which may carry keys too, hidden)."""
    base = origin(url)
    if base is None:
        return UNREADABLE
    parts = urlsplit(url)
    return f"{base}{parts.path}{'?***' if parts.query else ''}"


class WhipPush:
    """One WHIP destination for one session. `tracks()` gives fresh (video, audio or None) copies of the
    session's output for each attempt."""

    def __init__(self, url: str, tracks: Callable[[], tuple[Any, Any]], on_event: Event | None = None,
                 backoff_s: tuple[float, float] = (0.5, 3.0), timeout_s: float = 10.0) -> None:
        self.endpoint, self._token = split_whip(url)
        self.name = redact_whip(url)
        self._tracks = tracks
        self._on_event = on_event or (lambda e: None)
        self.backoff_s, self.timeout_s = backoff_s, timeout_s
        self.state = "connecting"
        self.error: str | None = None
        self.connects = 0
        self.frames = 0          # frames the peer's video sender has sent, all connections
        self._pc: Any = None
        self._resource: str | None = None
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    def status(self) -> dict[str, Any]:
        return {"url": self.name, "state": self.state, "frames": self.frames, "dropped": 0, "connects": self.connects,
                "error": self.error, "kind": "whip"}

    def _set(self, state: str, error: str | None = None) -> None:
        changed = (state, error) != (self.state, self.error)
        self.state, self.error = state, error
        if changed:
            self._on_event({"type": "restream", **self.status()})

    async def _run(self) -> None:
        import aiohttp

        low, high = self.backoff_s
        wait = low
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as http:
            while not self._stop.is_set():
                try:
                    await self._connect(http)
                    wait = low
                    await self._until_broken()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:   # refused, unreachable, a bad answer: say so, offer again
                    message = f"{type(exc).__name__}: {exc}"[:300]
                    if self._token:
                        message = message.replace(self._token, "***")
                    if self.error != message:
                        log.warning("restream %s: %s; retrying", self.name, message)
                    self._set("reconnecting", message)
                await self._teardown(http)
                if self._stop.is_set():
                    break
                try:
                    await asyncio.wait_for(self._stop.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                wait = min(high, wait * 2)
        self._set("stopped", self.error)

    async def _connect(self, http: Any) -> None:
        from aiortc import RTCPeerConnection, RTCSessionDescription

        video, audio = self._tracks()
        pc = self._pc = RTCPeerConnection()
        pc.addTransceiver(_Counted(video, self), direction="sendonly")
        if audio is not None:
            pc.addTransceiver(audio, direction="sendonly")
        await pc.setLocalDescription(await pc.createOffer())   # aiortc gathers every candidate here
        headers = {"Content-Type": "application/sdp"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        async with http.post(self.endpoint, data=pc.localDescription.sdp, headers=headers) as r:
            body = await r.text()
            if r.status != 201:
                raise RuntimeError(f"the WHIP endpoint answered {r.status}: {body[:200]}")
            location = r.headers.get("Location")
        self._resource = urljoin(self.endpoint, location) if location else None
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        self.connects += 1
        self._set("live", None)
        log.info("restream %s: live over WHIP", self.name)

    async def _until_broken(self) -> None:
        """Until the connection fails or closes (raises then), or the push is stopped."""
        pc = self._pc
        while not self._stop.is_set():
            if pc.connectionState in ("failed", "closed"):
                raise RuntimeError(f"the WebRTC connection {pc.connectionState}")
            try:
                await asyncio.wait_for(self._stop.wait(), 0.5)
            except asyncio.TimeoutError:
                pass

    async def _teardown(self, http: Any) -> None:
        pc, self._pc = self._pc, None
        resource, self._resource = self._resource, None
        if resource:
            try:
                headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
                async with http.delete(resource, headers=headers):
                    pass
            except Exception:   # the endpoint is gone already: nothing to end there
                pass
        if pc is not None:
            for sender in pc.getSenders():
                if sender.track is not None:
                    sender.track.stop()
            await pc.close()

    async def stop(self) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self.timeout_s + 2)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self._task.cancel()

    def close(self) -> None:   # SessionRestream's synchronous close: the loop finishes the stop
        self._stop.set()


def _counted_class() -> type:
    from aiortc.mediastreams import MediaStreamTrack

    class Counted(MediaStreamTrack):
        """The session's video track, each frame the peer takes counted on the push."""

        kind = "video"

        def __init__(self, track: Any, push: WhipPush) -> None:
            super().__init__()
            self._track, self._push = track, push

        async def recv(self) -> Any:
            frame = await self._track.recv()
            self._push.frames += 1
            return frame

        def stop(self) -> None:
            super().stop()
            self._track.stop()

    return Counted


def _Counted(track: Any, push: WhipPush) -> Any:   # noqa: N802 - a class made on first use (aiortc imports lazily)
    global _COUNTED
    if _COUNTED is None:
        _COUNTED = _counted_class()
    return _COUNTED(track, push)


_COUNTED: Any = None
