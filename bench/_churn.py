"""Sessions and WHEP viewers opened and closed against a running server by real aiortc peers, and the
process figures (RSS, threads, fds) that tell whether each one gave back what it took.

Shared by `livefuse bench soak` (a server in a child process, for minutes) and the resource test in
tests/streamer/web/test_resources.py (a server in the test's process, 100 of each): one client, so what
the test holds flat is what the soak measures.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration

END_WAYS = ("close", "delete")   # the sender closes its connection / says DELETE /whip (after its viewer)


@dataclass(frozen=True, slots=True)
class ChurnConfig:
    """One cycle: a sender connects (WHIP, so it can be DELETEd) with a small clip, `viewers` WHEP viewers
    watch it, each waits for `frames` decoded frames at its own receiver, then all end: viewers first
    (DELETE, or closing their connection, in turn), then the sender by `END_WAYS[cycle % 2]`."""

    width: int = 160
    height: int = 120
    frames: int = 3
    viewers: int = 1
    timeout_s: float = 20.0


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """What a process holds now, from /proc (Linux): resident memory, threads, open file descriptors."""

    rss_mb: float
    threads: int
    fds: int

    def as_dict(self) -> dict[str, float | int]:
        return {"rss_mb": self.rss_mb, "threads": self.threads, "fds": self.fds}


def process_figures(pid: int | str = "self") -> ProcessFigures:
    rss_kb, threads = 0, 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return ProcessFigures(round(rss_kb / 1024.0, 1), threads, len(os.listdir(f"/proc/{pid}/fd")))


class Viewer:
    """A receive-only WHEP client that counts the frames it decodes."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(rtc_configuration(loopback=True))
        self.location: str | None = None
        self.frames = 0
        self._reader: asyncio.Task | None = None
        self.pc.on("track", self._on_track)

    def _on_track(self, track: Any) -> None:
        if track.kind == "video":
            self._reader = asyncio.ensure_future(self._read(track))

    async def _read(self, track: Any) -> None:
        try:
            while True:
                await track.recv()
                self.frames += 1
        except MediaStreamError:
            pass

    async def watch(self, http: Any, url: str, sid: str) -> None:
        self.pc.addTransceiver("video", direction="recvonly")
        with gathering_on(LOOPBACK_ADDRESSES):
            await self.pc.setLocalDescription(await self.pc.createOffer())
        async with http.post(f"{url}/whep/{sid}", data=self.pc.localDescription.sdp,
                             headers={"Content-Type": "application/sdp"}) as r:
            if r.status != 201:
                raise RuntimeError(f"/whep answered {r.status}: {await r.text()}")
            self.location = r.headers["Location"]
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=await r.text(), type="answer"))

    async def wait_frames(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.frames < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"viewer got {self.frames} frames in {timeout} s, wanted {n} "
                                   f"({await self.describe()})")
            await asyncio.sleep(0.02)

    async def describe(self) -> str:
        """Where a viewer stands: connection states and what its receivers counted (for failures)."""
        parts = [f"connection {self.pc.connectionState}", f"ice {self.pc.iceConnectionState}",
                 f"track {'yes' if self._reader is not None else 'no'}"]
        for t in self.pc.getTransceivers():
            stats = await t.receiver.getStats()
            for s in stats.values():
                if getattr(s, "type", "") == "inbound-rtp":
                    parts.append(f"{s.kind}: {s.packetsReceived} packets")
        return ", ".join(parts)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        await self.pc.close()


async def whip_sender(url: str, http: Any, background: np.ndarray) -> ProbeClient:
    """A sending peer signalled over WHIP (no data channel: WHIP senders have none)."""
    client = ProbeClient(ClipTrack(background, frames=None))
    try:
        client.pc.addTransceiver(client.track, direction="sendrecv")
        client.pc.on("track", client._on_track)
        with gathering_on(LOOPBACK_ADDRESSES):
            await client.pc.setLocalDescription(await client.pc.createOffer())
        async with http.post(f"{url}/whip", data=client.pc.localDescription.sdp,
                             headers={"Content-Type": "application/sdp"}) as r:
            if r.status != 201:
                raise RuntimeError(f"/whip answered {r.status}: {await r.text()}")
            client.session_id = r.headers["X-LiveFuse-Session"]
            await client.accept(await r.text())
    except BaseException:      # a refused or failed connect gives back its sockets too
        await client.close()
        raise
    return client


async def cycle(url: str, http: Any, background: np.ndarray, config: ChurnConfig, index: int) -> dict[str, Any]:
    """One session with its viewers, from connect to every end; the seconds each part took."""
    t0 = time.monotonic()
    sender = await whip_sender(url, http, background)
    viewers: list[Viewer] = []
    try:
        await sender.wait_frames(config.frames, timeout=config.timeout_s)
        for _ in range(config.viewers):
            viewer = Viewer()
            viewers.append(viewer)
            await viewer.watch(http, url, sender.session_id)
        for viewer in viewers:
            before = len(sender.received)
            try:
                await viewer.wait_frames(config.frames, timeout=config.timeout_s)
            except TimeoutError as exc:   # was it the viewer's stream, or the session's?
                raise TimeoutError(f"{exc}; meanwhile the sender got {len(sender.received) - before} frames back") from None
        t1 = time.monotonic()
        for k, viewer in enumerate(viewers):
            if (index + k) % 2 == 0:
                async with http.delete(f"{url}{viewer.location}") as r:
                    if r.status != 200:
                        raise RuntimeError(f"DELETE {viewer.location} answered {r.status}")
            await viewer.close()
        if END_WAYS[index % 2] == "delete":
            async with http.delete(f"{url}/whip/{sender.session_id}") as r:
                if r.status != 200:
                    raise RuntimeError(f"DELETE /whip answered {r.status}")
    finally:
        for viewer in viewers:
            await viewer.close()
        await sender.close()
    return {"connect_s": round(t1 - t0, 3), "session": sender.session_id}


async def wait_until(predicate: Any, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step)
    return True


def background(width: int, height: int) -> np.ndarray:
    """The astronaut photo (a real face) fitted to the clip size."""
    import skimage.data

    return clip_background(np.ascontiguousarray(skimage.data.astronaut()[..., :3]), width, height)


def issue_token(tokens: Any, name: str, env: dict[str, str], *, rate: float, max_sessions: int) -> str:
    """A token of the churn's own in a new tokens file (`livefuse tokens issue`), so what a run measures
    is the churn and not the loopback client's rate limit."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "streamer.app.cli", "tokens", "issue", str(tokens), name,
                          "--rate", f"{rate:g}", "--max-sessions", str(max_sessions)], env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.split()[0]


async def until_ready(http: Any, url: str, proc: Any, timeout: float = 180.0) -> None:
    """Until the server's /readyz answers 200 (its shared models loaded); RuntimeError if it exits first."""
    import aiohttp

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with http.get(f"{url}/readyz") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"livefuse serve exited with {proc.returncode}")
        await asyncio.sleep(0.1)
    raise RuntimeError(f"livefuse serve was not ready in {timeout:g} s")
