"""One landmark network shared by every stream in the process: calls that arrive together run as one batch.

Each session's face stage runs on its own worker thread and asks for its faces' landmarks once a frame.
On a GPU, one batch of 8 or 32 crops costs little more than one crop, so a shared runner gathers the
calls that arrive within `window_ms` of the first (up to `max_batch` crops), runs them as one batch and
hands each caller its own rows. On CUDA the batch goes through a pinned host buffer and its own stream,
so the copy in and out overlaps nothing else's work on the default stream. A call waits at most the
window plus one batch; a failing batch fails each of its callers with the error, and the runner goes on.

`ArrayBatchRunner` is the runtime-free part (any NumPy callable, inputs one array or a tuple of arrays
sharing their first axis): the neural swapper batches its faces through it.

Runners are shared by key through `shared_runner(key, make)` and counted: the last `close()` stops the
worker thread.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class BatchStats:
    calls: int = 0
    batches: int = 0
    items: int = 0
    largest: int = 0

    def as_dict(self) -> dict[str, float]:
        return {"calls": self.calls, "batches": self.batches, "items": self.items, "largest_batch": self.largest,
                "mean_batch": round(self.items / self.batches, 2) if self.batches else 0.0}


def _rows(x: Any) -> int:
    return len(x[0]) if isinstance(x, tuple) else len(x)


def _concat(xs: list[Any]) -> Any:
    if isinstance(xs[0], tuple):
        return tuple(np.concatenate([x[i] for x in xs]) for i in range(len(xs[0])))
    return np.concatenate(xs)


@dataclass
class _Request:
    x: Any                       # one array, or a tuple of arrays with the same number of rows
    done: Future = field(default_factory=Future)


class ArrayBatchRunner:
    """Gathers the calls of many threads into batches for `net`, a callable taking NumPy arrays (one, or a
    tuple whose members share their first axis) and returning a list of arrays in row order. Any runtime
    fits behind it (ONNX Runtime here; `SharedBatchRunner` adds torch with pinned buffers)."""

    takes_numpy = True
    thread_name = "batcher"

    def __init__(self, net: Callable[[Any], list[Any]], max_batch: int = 32, window_ms: float = 2.0,
                 on_last_close: Callable[[], None] | None = None) -> None:
        self._net = net
        self._max_batch, self._window_s = max(1, int(max_batch)), max(0.0, window_ms) / 1000.0
        self._queue: list[_Request] = []
        self._cv = threading.Condition()
        self._users = 1
        self._closed = False
        self._on_last_close = on_last_close
        self.stats = BatchStats()
        self._thread = threading.Thread(target=self._serve, name=self.thread_name, daemon=True)
        self._thread.start()

    def acquire(self) -> "ArrayBatchRunner":
        with self._cv:
            if self._closed:
                raise RuntimeError("this shared runner is closed")
            self._users += 1
        return self

    def __call__(self, x: Any) -> list[np.ndarray]:
        if isinstance(x, tuple):
            x = tuple(np.ascontiguousarray(a, np.float32) for a in x)
        else:
            x = np.ascontiguousarray(x, np.float32)
        req = _Request(x)
        with self._cv:
            if self._closed:
                raise RuntimeError("this shared runner is closed")
            self._queue.append(req)
            self.stats.calls += 1
            self._cv.notify_all()
        return req.done.result()

    def close(self) -> None:
        """One user fewer; the last one stops the worker (calls still queued fail, none hang)."""
        with self._cv:
            self._users -= 1
            if self._users > 0 or self._closed:
                return
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=5.0)
        if self._on_last_close is not None:
            self._on_last_close()

    def _take_batch(self) -> list[_Request] | None:
        """The first waiting call, and whatever arrives within the window after it (up to max_batch rows)."""
        import time

        with self._cv:
            while not self._queue and not self._closed:
                self._cv.wait()
            if self._closed:
                for req in self._queue:
                    req.done.set_exception(RuntimeError("the shared runner was closed"))
                self._queue.clear()
                return None
            deadline = time.monotonic() + self._window_s
            while sum(_rows(r.x) for r in self._queue) < self._max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            batch, n = [], 0
            while self._queue and (not batch or n + _rows(self._queue[0].x) <= self._max_batch):
                req = self._queue.pop(0)
                batch.append(req)
                n += _rows(req.x)
            return batch

    def _serve(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                outs = self._run(_concat([r.x for r in batch]))
            except BaseException as exc:   # every caller learns why; the next batch runs as usual
                for req in batch:
                    req.done.set_exception(exc)
                continue
            start = 0
            for req in batch:
                n = _rows(req.x)
                req.done.set_result([o[start:start + n] for o in outs])
                start += n
            with self._cv:
                self.stats.batches += 1
                self.stats.items += start
                self.stats.largest = max(self.stats.largest, start)

    def _run(self, x: Any) -> list[np.ndarray]:
        return list(self._net(x))


class SharedBatchRunner(ArrayBatchRunner):
    """A runner of `net` (a torch module taking an NHWC float batch, giving outputs in the file's order)
    that many landmarkers call at once. NumPy in and out (`takes_numpy`), like LiteRT's runner."""

    thread_name = "landmark-batcher"

    def __init__(self, net: Callable[[Any], list[Any]], device: str = "cpu", max_batch: int = 32,
                 window_ms: float = 2.0, on_last_close: Callable[[], None] | None = None) -> None:
        import torch

        self._device = torch.device(device)
        self._cuda = self._device.type == "cuda"
        self._stream = torch.cuda.Stream(device=self._device) if self._cuda else None
        self._pinned: Any = None
        super().__init__(net, max_batch=max_batch, window_ms=window_ms, on_last_close=on_last_close)

    def _run(self, x: np.ndarray) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            host = torch.from_numpy(x)
            if not self._cuda:
                return [o.numpy() for o in self._net(host)]
            if self._pinned is None or self._pinned.shape[0] < len(x) or self._pinned.shape[1:] != host.shape[1:]:
                self._pinned = torch.empty((max(len(x), self._max_batch),) + tuple(host.shape[1:]),
                                           dtype=torch.float32, pin_memory=True)
            staged = self._pinned[: len(x)]
            staged.copy_(host)
            with torch.cuda.stream(self._stream):
                outs = [o.to("cpu", non_blocking=True) for o in self._net(staged.to(self._device, non_blocking=True))]
            self._stream.synchronize()
            return [o.numpy() for o in outs]


_SHARED: dict[tuple, ArrayBatchRunner] = {}
_SHARED_LOCK = threading.Lock()


def shared_runner(key: tuple, make: Callable[[Callable[[], None]], ArrayBatchRunner]) -> Any:
    """The live runner for `key`, one more user counted; else `make(forget)` builds it (`forget` takes it
    out of the table once its last user closes it)."""
    with _SHARED_LOCK:
        live = _SHARED.get(key)
        if live is not None:
            try:
                return live.acquire()
            except RuntimeError:   # closed a moment ago: make a new one
                pass

        def forget() -> None:
            with _SHARED_LOCK:
                if _SHARED.get(key) is made:
                    del _SHARED[key]

        made = make(forget)
        _SHARED[key] = made
        return made
