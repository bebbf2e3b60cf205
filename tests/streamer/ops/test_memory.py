"""The heap keeper frees a finished session's reference cycles soon after it ends, on its own thread."""

from __future__ import annotations

import gc
import threading
import weakref

from streamer.ops.memory import HeapKeeper


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None
        self.buffer = bytearray(1 << 20)


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_cycle_left_by_an_ended_session_is_freed_by_the_pass_after_it():
    gc.disable()     # as on a busy server whose oldest generation is not collected for many sessions
    try:
        ref = _cycle()
        assert ref() is not None     # plain reference counting cannot free a cycle
        durations: list[float] = []
        keeper = HeapKeeper(on_collected=durations.append)
        keeper.session_ended()
        assert keeper.wait_idle(10)
        assert ref() is None and len(durations) == 1 and durations[0] >= 0
    finally:
        gc.enable()


def test_ends_that_arrive_together_share_passes_and_none_is_missed():
    passes = []
    started, release = threading.Event(), threading.Event()

    def slow(seconds: float) -> None:
        passes.append(seconds)
        started.set()
        release.wait(5)

    keeper = HeapKeeper(on_collected=slow)
    keeper.session_ended()
    assert started.wait(5)
    refs = [_cycle() for _ in range(3)]
    for _ in range(20):              # ended while the first pass runs: one more pass covers them all
        keeper.session_ended()
    release.set()
    assert keeper.wait_idle(10)
    assert len(passes) == 2
    assert all(r() is None for r in refs)


def test_settle_keeps_the_startup_heap_out_of_later_passes():
    keeper = HeapKeeper()
    try:
        keeper.settle()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
