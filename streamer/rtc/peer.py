"""One RTCPeerConnection per client, bound to a Session: received video goes through the session's
pipeline and comes back on the same connection; the data channel carries the control protocol. Received
audio goes to the session's WHEP viewers, held back to stay in step with the processed video (never back
to the sender, who would hear an echo of themselves)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from aiortc import RTCDataChannel, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.contrib.media import MediaRelay
from aiortc.mediastreams import MediaStreamTrack

from streamer.session import protocol
from streamer.rtc.audio import AIORTC_AUDIO_PREFETCH, DelayedAudioTrack
from streamer.config import ServerConfig
from streamer.session.control import ControlHandler
from streamer.rtc.dtls import answer_passive, use_certificate, watch_dtls
from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration, strip_mdns_candidates
from streamer.pipeline.stats import StreamStats
from streamer.media.tracks import FusedTrack, pump
from streamer.pipeline.worker import FrameWorker
from streamer.rtc.offer_limits import OfferRefused, check_offer
from streamer.pipeline.pipeline import Pipeline
from streamer.services import Services
from streamer.session.session import Session

__all__ = ["PeerSession", "BadOffer", "answer_offer", "new_peer_connection"]

log = logging.getLogger(__name__)


class BadOffer(ValueError):
    """The client's SDP could not be used (HTTP 400 with this reason, in plain words: never the text of
    an aiortc exception, which names our internals and tells the client nothing it can fix). `code` is
    stable, for clients and metrics (`streamer.rtc.offer_limits` names them)."""

    def __init__(self, reason: str, code: str = "bad_sdp") -> None:
        super().__init__(reason)
        self.code = code


UNUSABLE_OFFER = "the SDP offer could not be used"


def new_peer_connection(config: ServerConfig) -> RTCPeerConnection:
    """A connection whose DTLS works with RSA and ECDSA peers (see streamer.rtc.dtls)."""
    pc = RTCPeerConnection(rtc_configuration(config.ice_servers, config.ice_username, config.ice_credential,
                                             loopback=config.loopback))
    use_certificate(pc)
    return pc


def codec_preferences(codec: str, offer_sdp: str) -> list[Any]:
    """Video codecs with `codec` first when the offer carries it; aiortc's order otherwise."""
    caps = RTCRtpSender.getCapabilities("video").codecs
    if f"{codec.lower()}/90000" not in offer_sdp.lower():
        return list(caps)
    first = [c for c in caps if c.mimeType.lower() == f"video/{codec.lower()}"]
    return first + [c for c in caps if c not in first]


async def answer_offer(pc: RTCPeerConnection, config: ServerConfig, sdp: str, video_track: MediaStreamTrack | None,
                       direction: str = "sendrecv", audio_track: MediaStreamTrack | None = None,
                       context: str = "peer") -> RTCSessionDescription:
    """(video transceiver first, so our codec order and return track apply; an audio track to send, when
    given and the offer has audio) -> setRemote -> createAnswer -> setLocal with ICE gathered (aiortc has
    no trickle ICE). To `a=setup:actpass` the answer is `passive` (streamer.rtc.dtls says why). `context` names
    the session in the log (a refused offer, a failed DTLS handshake)."""
    try:  # cheap, bounded, and before aiortc's parser (whose cost grows with some line counts) sees it
        setup = check_offer(sdp, max_bytes=config.max_sdp_bytes)
    except OfferRefused as exc:
        raise BadOffer(exc.reason, exc.code) from None
    if "m=video" in sdp:
        t = pc.addTransceiver(video_track if video_track is not None else "video", direction=direction)
        t.setCodecPreferences(codec_preferences(config.codec, sdp))
    if audio_track is not None and "m=audio" in sdp:
        pc.addTransceiver(audio_track, direction="sendonly")
    try:
        await pc.setRemoteDescription(RTCSessionDescription(sdp=strip_mdns_candidates(sdp), type="offer"))
        answer_passive(pc, setup)
        answer = await pc.createAnswer()
    except Exception as exc:  # aiortc raises ValueError, KeyError, AttributeError... on bad SDP
        log.debug("%s: aiortc refused the offer", context, exc_info=True)
        raise BadOffer(UNUSABLE_OFFER) from exc
    watch_dtls(pc, context, setup)
    with gathering_on(LOOPBACK_ADDRESSES if config.loopback else None):
        await pc.setLocalDescription(answer)
    return pc.localDescription


class PeerSession:
    """A sending client (page, WHIP, bench): its connection, frame worker, processed track and viewers."""

    def __init__(self, config: ServerConfig, services: Services, session: Session, *, metrics: Any = None,
                 kind: str = "offer", on_closed: Callable[["PeerSession"], None] | None = None,
                 overlap: bool | None = None,
                 pipeline: Pipeline | None = None) -> None:
        """`pipeline`: built by the caller off the event loop (model loading is slow); when None it is
        made here with `services.make_pipeline`."""
        self.config = config
        self.services = services
        self.session = session
        self.metrics = metrics
        self.kind = kind
        self.on_closed = on_closed
        self.pc = new_peer_connection(config)
        self.stats = StreamStats(metrics)
        if pipeline is None:
            pipeline = services.make_pipeline(session)
        if overlap is None:           # the server passes its choice for how many streams run; alone otherwise
            overlap = config.overlap_for(1)
        if overlap and len(pipeline.stages) > 1:
            from streamer.pipeline.overlap import OverlappedFrameWorker

            self.worker: FrameWorker = OverlappedFrameWorker(session, pipeline, self.stats, on_error=self._stage_failed,
                                                             pixels=config.pixel_device)
        else:
            self.worker = FrameWorker(session, pipeline, self.stats, on_error=self._stage_failed, pixels=config.pixel_device)
        # the control protocol's handler; the data channel and WebSocket controllers carry its bytes
        self.control = ControlHandler(session, services, stages=lambda: self.worker.pipeline.names,
                                      tracked=self.stats.tracked, max_message_bytes=config.max_message_bytes,
                                      metrics=metrics)
        self.fused: FusedTrack | None = None
        self.channel: RTCDataChannel | None = None
        self.viewers: dict[str, Any] = {}
        # WebSocket control clients (streamer.web.control_socket): each hears every message the channel does
        self.controllers: set[Any] = set()
        self.last_activity = time.monotonic()
        self.closed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._unsent: deque[dict[str, Any]] = deque(maxlen=64)  # events raised before the channel opened
        self._video_track: MediaStreamTrack | None = None
        self.audio: MediaStreamTrack | None = None      # the sender's audio, as received
        self.audio_relay = MediaRelay()                  # one reader of it, any number of listeners
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # control messages are handled in order, off the event loop (prompt checks encode text)
        self._control = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"control-{session.id[:6]}")

    # ---- setup -------------------------------------------------------------------------------------
    async def accept(self, sdp: str) -> RTCSessionDescription:
        self._loop = asyncio.get_running_loop()
        self.fused = FusedTrack(self.worker.outbox)
        self.worker.start()
        pc = self.pc
        pc.on("track", self._on_track)
        pc.on("datachannel", self._on_datachannel)
        pc.on("connectionstatechange", self._on_state)

        answer = await answer_offer(pc, self.config, sdp, self.fused, context=f"session {self.session.id}")
        self.session.set_event_sink(self._event_from_any_thread)
        self._spawn(self._watchdog())
        self._spawn(self._stats_loop())
        return answer

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "video" and self._video_track is None:
            self._video_track = track
            self._spawn(pump(track, self._on_frame))
        elif track.kind == "audio" and self.audio is None:
            # the relay reads the track continuously (aiortc's queue stays empty) whoever listens; this
            # listener only keeps the session marked alive
            self.audio = track
            self._spawn(pump(self.audio_relay.subscribe(track, buffered=False), self._touch))
        else:  # a second video or audio track is not used: drain it
            self._spawn(pump(track, self._touch))

    def listen(self) -> MediaStreamTrack | None:
        """A new listener's copy of the sender's audio, held back as long as the video spends in the
        pipeline so that lips and words stay together (None until the sender's audio has arrived);
        as it arrives with `config.hold_audio` off."""
        if self.audio is None:
            return None
        copy = self.audio_relay.subscribe(self.audio)
        if not self.config.hold_audio:
            return copy
        return DelayedAudioTrack(copy, self.stats.delay_ms, video_wait_ms=self.stats.frame_interval_ms,
                                 audio_wait_frames=AIORTC_AUDIO_PREFETCH)

    def _on_frame(self, frame: Any) -> None:
        self.last_activity = time.monotonic()
        self.worker.submit(frame)

    def _touch(self, _frame: Any = None) -> None:
        self.last_activity = time.monotonic()

    def _on_state(self) -> None:
        state = self.pc.connectionState
        log.info("session %s: connection %s", self.session.id, state)
        if state in ("failed", "closed"):
            self._spawn(self.close(f"connection {state}"))

    # ---- control channel ---------------------------------------------------------------------------
    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        self.channel = channel

        @channel.on("message")
        def _message(raw: str | bytes) -> None:
            self._touch()
            if self._closing:
                return
            done = asyncio.get_running_loop().run_in_executor(self._control, self.control.handle, raw)
            done.add_done_callback(lambda d: self._send_reply(self._reply_of(d)))

        self.send(self.control.welcome())
        while self._unsent:
            self.send(self._unsent.popleft())

    def _reply_of(self, done: "asyncio.Future[dict[str, Any] | None]") -> dict[str, Any] | None:
        if done.cancelled():
            return None
        if done.exception() is not None:   # a fault of ours: the sender still hears that its message failed
            log.error("session %s: a control message raised", self.session.id, exc_info=done.exception())
            return protocol.error("internal", "the server could not handle this message")
        return done.result()

    def _send_reply(self, reply: dict[str, Any] | None) -> None:
        """A data-channel message's reply goes back on the channel only (a WebSocket's, on its socket)."""
        ch = self.channel
        if reply is None or ch is None or ch.readyState != "open":
            return
        try:
            ch.send(protocol.dumps(reply))
        except Exception:
            log.debug("session %s: send failed", self.session.id, exc_info=True)

    @property
    def closing(self) -> bool:
        """close() has begun: no more control messages are acted on."""
        return self._closing

    async def handle(self, raw: str | bytes) -> dict[str, Any] | None:
        """One control message from another carrier (a WebSocket): the data channel's handler, on the same
        control thread, in arrival order; its reply (None once the session is closing)."""
        self._touch()
        if self._closing:
            return None
        try:
            done = asyncio.get_running_loop().run_in_executor(self._control, self.control.handle, raw)
        except RuntimeError:   # the control thread has shut down: the session is closing
            return None
        try:
            await asyncio.wait({done})
        except asyncio.CancelledError:
            done.cancel()
            raise
        return self._reply_of(done)

    def send(self, msg: dict[str, Any]) -> bool:
        """To the data channel and every WebSocket control client (events, stats, bye, draining)."""
        for controller in list(self.controllers):
            controller.deliver(msg)
        ch = self.channel
        if ch is None or ch.readyState != "open":
            if msg.get("type") not in ("stats", "bye", "face"):   # face events are a stream: the next one follows
                self._unsent.append(msg)
            return False
        try:
            ch.send(protocol.dumps(msg))
            return True
        except Exception:
            log.debug("session %s: send failed", self.session.id, exc_info=True)
            return False

    def _event_from_any_thread(self, event: dict[str, Any]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        msg = event if "type" in event else {"type": "event", **event}
        try:
            loop.call_soon_threadsafe(self.send, msg)
        except RuntimeError:
            pass  # the loop is gone: the session is over

    def _stage_failed(self, stage: str, message: str) -> None:
        self.session.notify(protocol.error("stage_failed", f"{stage}: {message}", stage=stage))

    # ---- life ----------------------------------------------------------------------------------------
    async def _stats_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.stats_interval_s)
            snap = self.stats.snapshot()
            snap["viewers"] = len(self.viewers)
            self.send(snap)

    async def _watchdog(self) -> None:
        """A peer that vanishes without a goodbye sends no more media or control: release it."""
        while True:
            await asyncio.sleep(min(1.0, self.config.idle_timeout_s / 4))
            if time.monotonic() - self.last_activity > self.config.idle_timeout_s:
                self._spawn(self.close(f"idle for {self.config.idle_timeout_s:.0f} s"))
                return

    def _release_session(self) -> None:
        """Everything the session held goes: the services' records (sources, prompt), then its slots."""
        try:
            self.services.session_ended(self.session)
        except Exception:
            log.exception("session %s: session_ended hook failed", self.session.id)
        self.session.run_close_callbacks()
        self.session.closed.set()

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self, reason: str = "closed") -> None:
        if self._closing:
            await self.closed.wait()
            return
        self._closing = True
        log.info("session %s: closing (%s)", self.session.id, reason)
        self.send({"type": "bye", "reason": reason})
        await asyncio.gather(*(c.close(reason) for c in list(self.controllers)), return_exceptions=True)
        for viewer in list(self.viewers.values()):
            await viewer.close("source ended")
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        self.session.set_event_sink(None)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.worker.stop)
        self._control.shutdown(wait=False, cancel_futures=True)
        await self.pc.close()
        await loop.run_in_executor(None, self._release_session)
        self.services.audit("session_closed", session=self.session.id, reason=reason,
                            frames_in=self.stats.frames_in, frames_out=self.stats.frames_out)
        self.closed.set()
        if self.on_closed is not None:
            self.on_closed(self)
