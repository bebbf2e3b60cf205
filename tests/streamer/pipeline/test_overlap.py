"""The overlapped worker gives exactly the frames the plain worker gives (real face + fusion stages on a
real photo), runs the face stage of the next frame while the rest finish the current one, counts frames
replaced between its halves as drops, reports a failure in either half through the worker's one error
hook, and lets both threads go on stop."""

from __future__ import annotations

import fractions
import threading

import cv2
import numpy as np
from av import VideoFrame

from engines.sources import SourceRegistry
from streamer.pipeline.overlap import OverlappedFrameWorker
from streamer.pipeline.stats import StreamStats
from streamer.pipeline.worker import FrameWorker
from streamer.pipeline.pipeline import Pipeline
from streamer.session.session import Session
from streamer.pipeline.stages.faces import FaceStage
from streamer.pipeline.stages.fusion import FusionStage
from tests.streaming_helpers import Boom


def _clip(photo: np.ndarray, n: int, size=(318, 238)) -> list[VideoFrame]:
    """The photo on an odd-sized canvas, moving a few pixels per frame (known motion)."""
    w, h = size
    s = 0.9 * h / photo.shape[0]
    out = []
    for i in range(n):
        m = np.array([[s, 0, (w - photo.shape[1] * s) / 2 + 2 * i], [0, s, (h - photo.shape[0] * s) / 2 + i]])
        img = cv2.warpAffine(photo, m, (w, h), borderValue=(90, 90, 90))
        f = VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
        f.pts, f.time_base = i * 3000, fractions.Fraction(1, 90000)
        out.append(f)
    return out


def _session(astronaut: np.ndarray) -> Session:
    src = SourceRegistry().register(astronaut)
    s = Session("overlap")
    s.add_source(src.id, src)
    return s


def _published(worker: FrameWorker, frames: list[VideoFrame]) -> list[VideoFrame]:
    """Submit one frame at a time and wait for it to come out, so neither worker drops any."""
    got: list[VideoFrame] = []
    done = threading.Event()

    seen = [0]

    def wake() -> None:   # also called on close: only new frames count
        seq, item = worker.outbox.latest()
        if seq != seen[0] and item is not None:
            seen[0] = seq
            got.append(item[0])
            done.set()

    worker.outbox.subscribe(wake)
    worker.start()
    try:
        for f in frames:
            done.clear()
            worker.submit(f)
            assert done.wait(30), "no frame came out"
    finally:
        worker.stop()
    return got


def test_overlapped_worker_gives_the_same_frames_as_the_plain_one(astronaut, grace_hopper):
    frames = _clip(grace_hopper, 4)
    session = _session(astronaut)
    plain = _published(FrameWorker(session, Pipeline([FaceStage(), FusionStage()]), StreamStats()), frames)
    stats = StreamStats()
    over = _published(OverlappedFrameWorker(session, Pipeline([FaceStage(), FusionStage()]), stats), frames)
    assert [f.pts for f in over] == [f.pts for f in frames] == [f.pts for f in plain]
    for a, b, src in zip(plain, over, frames):
        pa, pb = a.to_ndarray(), b.to_ndarray()
        assert np.array_equal(pa, pb)
        assert np.abs(pa.astype(int) - src.to_ndarray().astype(int)).max() > 20   # the face was really fused
    snap = stats.snapshot()
    assert set(snap["stages_ms"]) == {"faces", "fusion"} and snap["dropped"] == 0 and snap["errors"] == 0


class _Gate:
    """A stage that waits for `event` (set by another stage) on its first frame: only a worker that runs
    the two stages concurrently on different frames gets past it."""

    def __init__(self, name: str, wait: threading.Event | None = None, signal: threading.Event | None = None) -> None:
        self.name, self.wait, self.signal, self.calls = name, wait, signal, 0
        self.overlapped: dict[int, bool] = {}   # pts -> did the front start the next frame meanwhile

    def __call__(self, state, session):
        self.calls += 1
        if self.signal is not None and self.calls == 2:
            self.signal.set()               # the front has started frame 2
        if self.wait is not None and self.calls == 1:
            self.overlapped[state.pts] = self.wait.wait(10)
        return state


def test_front_stage_runs_on_the_next_frame_while_the_back_finishes(grace_hopper):
    frames = _clip(grace_hopper, 3)
    second_started = threading.Event()
    front, back = _Gate("front", signal=second_started), _Gate("back", wait=second_started)
    seen: list[bool] = []
    worker = OverlappedFrameWorker(Session("gate"), Pipeline([front, back]), StreamStats())
    worker.finished = lambda state: seen.append(back.overlapped.get(state.pts, True))
    worker.start()
    try:
        worker.submit(frames[0])
        while front.calls < 1:
            threading.Event().wait(0.01)
        worker.submit(frames[1])
        assert second_started.wait(10)
    finally:
        worker.stop()
    assert seen and seen[0] is True          # the back's first frame saw the front begin the second


def test_frames_replaced_between_the_halves_are_counted_and_stop_ends_both_threads(grace_hopper):
    frames = _clip(grace_hopper, 6)
    release = threading.Event()
    stats = StreamStats()
    back = _Gate("back", wait=release)
    worker = OverlappedFrameWorker(Session("drops"), Pipeline([_Gate("front"), back]), stats)
    worker.start()
    worker.submit(frames[0])
    while back.calls < 1:                     # the back holds frame 0 ...
        threading.Event().wait(0.01)
    for i, f in enumerate(frames[1:], 1):     # ... while the front passes five more into the middle slot
        worker.submit(f)
        while worker.middle.puts < i + 1:
            threading.Event().wait(0.005)
    release.set()
    worker.stop()
    assert not worker.alive
    assert worker.middle.dropped == 4 and stats.dropped == 4   # frames 1-4 were replaced by 5, unseen by the back


def test_an_empty_pipeline_passes_the_decoded_frames_through_untouched(grace_hopper):
    frames = _clip(grace_hopper, 3)
    out = _published(OverlappedFrameWorker(Session("empty"), Pipeline([]), StreamStats()), frames)
    assert [f is g for f, g in zip(out, frames)] == [True] * 3


def test_a_failure_in_either_half_reaches_the_one_error_hook_once(grace_hopper):
    frames = _clip(grace_hopper, 3)
    reported: list[tuple[str, str]] = []
    stats = StreamStats()
    broken_back = Boom()
    broken_back.name = "boom-back"
    worker = OverlappedFrameWorker(Session("errors"), Pipeline([Boom(), broken_back]), stats,
                                   on_error=lambda stage, message: reported.append((stage, message)))
    out = _published(worker, frames)
    assert [f.pts for f in out] == [f.pts for f in frames]                 # every frame still comes out
    assert reported == [("boom", "RuntimeError: boom stage failed on purpose"),
                        ("boom-back", "RuntimeError: boom stage failed on purpose")] * 3
    assert stats.errors == 6 and stats.snapshot()["errors"] == 6


async def test_real_peers_get_their_frames_back_in_order_through_the_overlapped_worker(astronaut, monkeypatch):
    """Inside a real PeerSession (which gives the worker its error hook), with two real aiortc peers:
    frames come back processed, in order, each pts 3000 ticks per index."""
    import streamer.rtc.peer
    from streamer.config import ServerConfig
    from streamer.rtc.peer import PeerSession
    from bench._probe import CODE_ROWS_PX, ClipTrack, ProbeClient, clip_background
    from streamer.services import NullServices
    from tests.streaming_helpers import InvertBelowCode

    monkeypatch.setattr(streamer.rtc.peer, "FrameWorker", OverlappedFrameWorker)
    bg = clip_background(astronaut, 320, 240)
    front, back = InvertBelowCode(), _Gate("mark")
    server = PeerSession(ServerConfig(idle_timeout_s=30), NullServices(make_pipeline=lambda s: Pipeline([front, back])), Session())
    assert isinstance(server.worker, OverlappedFrameWorker)
    client = ProbeClient(ClipTrack(bg, fps=30, frames=60), keep_images=100)
    await client.accept((await server.accept((await client.offer()).sdp)).sdp)
    try:
        await client.wait_frames(30, timeout=20)
    finally:
        await client.close()
        await server.close("test over")
    got = [r for r in client.received if r.index is not None]
    idx = [r.index for r in got]
    assert len(got) >= 30 and idx == sorted(idx) and len(set(idx)) == len(idx)
    steps = [(b.pts - a.pts) / (b.index - a.index) for a, b in zip(got, got[1:])]
    assert all(abs(s - 3000) <= 5 for s in steps), steps
    r = next(r for r in got if r.image is not None and r.index > 5)
    assert np.abs(r.image[2 * CODE_ROWS_PX:].astype(int) - bg[2 * CODE_ROWS_PX:]).mean() > 60   # inverted
    assert back.calls >= 30 and {"invert", "mark"} <= set(server.stats.snapshot()["stages_ms"])
    assert not server.worker.alive
