"""Model calls shared by every caller in the process: calls that arrive together run as one batch.

`DynamicBatcher` (at the end) batches any model over a list of items (the photo API's landmarker and identity
embedder); `SharedBatchRunner` batches the torch landmark network's crops for live streams.

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


BatchListener = Callable[[str, int], None]   # (model name, batch size) after each batch


class DynamicBatcher:
    """Any model call over a list of items, shared by the threads that call it: calls that arrive within
    `window_ms` of the first (up to `max_batch` items) run as one `fn(items)` on the batcher's own thread,
    and each caller gets its own result. Where a model is cheaper per item in a batch (a GPU, dlib's
    batched descriptor) requests that arrive together share its calls; where it is not, the queue still
    serves one model from one thread instead of many threads fighting over its lock.

    `fn(items) -> results` returns one result per item, in order; an Exception instance in its place
    fails only that caller, and an exception raised by `fn` fails the whole batch (each caller learns
    why; the next batch runs as usual). With `enabled=False` each call runs `fn([item])` on the caller's
    thread (the baseline batching is measured against). Listeners hear every batch's size (metrics)."""

    def __init__(self, fn: Callable[[list[Any]], list[Any]], *, name: str, max_batch: int = 8,
                 window_ms: float = 5.0, enabled: bool = True) -> None:
        self.name, self._fn = name, fn
        self.max_batch, self.window_s = max(1, int(max_batch)), max(0.0, window_ms) / 1000.0
        self.enabled = enabled
        self.stats = BatchStats()
        self._listeners: list[BatchListener] = []
        self._queue: list[tuple[Any, Future]] = []
        self._cv = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(target=self._serve, name=f"batcher-{name}", daemon=True)
            self._thread.start()

    def add_listener(self, listener: BatchListener) -> None:
        with self._cv:
            self._listeners.append(listener)

    def remove_listener(self, listener: BatchListener) -> None:
        with self._cv:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def __call__(self, item: Any) -> Any:
        if not self.enabled:
            with self._cv:
                if self._closed:
                    raise RuntimeError(f"the {self.name} batcher is closed")
                self.stats.calls += 1
            out = self._fn([item])
            self._count(1)
            return _result(out, 1, self.name)[0].result()
        done: Future = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError(f"the {self.name} batcher is closed")
            self._queue.append((item, done))
            self.stats.calls += 1
            self._cv.notify_all()
        return done.result()

    def close(self) -> None:
        """Stop the worker; calls still queued fail (none hang)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _take(self) -> list[tuple[Any, Future]] | None:
        import time

        with self._cv:
            while not self._queue and not self._closed:
                self._cv.wait()
            if self._closed:
                for _, done in self._queue:
                    done.set_exception(RuntimeError(f"the {self.name} batcher was closed"))
                self._queue.clear()
                return None
            deadline = time.monotonic() + self.window_s
            while len(self._queue) < self.max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch:]
            return batch

    def _serve(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                results = _result(self._fn([item for item, _ in batch]), len(batch), self.name)
            except BaseException as exc:   # every caller learns why; the next batch runs as usual
                for _, done in batch:
                    done.set_exception(exc)
                self._count(len(batch))
                continue
            for (_, done), res in zip(batch, results):
                if res.exception() is not None:
                    done.set_exception(res.exception())
                else:
                    done.set_result(res.result())
            self._count(len(batch))

    def _count(self, n: int) -> None:
        with self._cv:
            self.stats.batches += 1
            self.stats.items += n
            self.stats.largest = max(self.stats.largest, n)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(self.name, n)
            except Exception:   # a metrics hook must not fail the callers
                pass


def _result(out: Any, n: int, name: str) -> list[Future]:
    """`fn`'s list as settled futures (an Exception in a slot fails that slot only)."""
    if not isinstance(out, (list, tuple)) or len(out) != n:
        raise RuntimeError(f"the {name} model returned {len(out) if hasattr(out, '__len__') else out!r} "
                           f"results for {n} items")
    futures = []
    for value in out:
        f: Future = Future()
        if isinstance(value, BaseException):
            f.set_exception(value)
        else:
            f.set_result(value)
        futures.append(f)
    return futures
