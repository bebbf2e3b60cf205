"""FrameSlot keeps the newest item, counts the ones replaced unseen, and wakes a waiting taker."""

from __future__ import annotations

import threading
import time

from streamer.media.slot import FrameSlot


def test_slot_keeps_newest_and_counts_drops():
    slot: FrameSlot[int] = FrameSlot()
    assert slot.put(1) is False
    assert slot.put(2) is True
    assert slot.put(3) is True
    assert slot.take(timeout=0) == 3
    assert slot.take(timeout=0.01) is None
    assert (slot.puts, slot.dropped) == (3, 2)


def test_slot_take_wakes_on_put_from_another_thread_and_on_close():
    slot: FrameSlot[str] = FrameSlot()
    threading.Timer(0.05, slot.put, args=("x",)).start()
    t0 = time.monotonic()
    assert slot.take(timeout=2) == "x"
    assert time.monotonic() - t0 < 1.0
    threading.Timer(0.05, slot.close).start()
    assert slot.take(timeout=2) is None
    assert slot.closed and slot.put("late") is False
