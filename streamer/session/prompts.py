"""PromptCache: prompt text -> Condition, encoded in the background so a new prompt never stalls a frame.

`get(text)` answers at once: the cached Condition, or None while the encoding runs on the cache's own
worker thread (the frame keeps its previous condition meanwhile). Keys are the normalised text plus the
encoder id, so "Smile!", " smile! " and the full-width "ｓｍｉｌｅ！" share one entry, and two encoders never
share one. `hits`, `misses`, `errors`, `evictions` are plain ints for /metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Protocol, Sequence

from engines.prompt.model import Condition, empty_condition

from engines.prompt.language import normalise_prompt

log = logging.getLogger(__name__)


class ConditionEncoder(Protocol):
    id: str

    def encode(self, texts: Sequence[str]) -> list[Condition]: ...


class PromptCache:
    def __init__(self, model: ConditionEncoder, capacity: int = 256) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.model = model
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self.errors = 0
        self.evictions = 0
        self._items: OrderedDict[tuple[str, str], Condition] = OrderedDict()
        self._pending: dict[tuple[str, str], Future] = {}
        self._failed: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prompt-encode")
        self._closed = False

    @property
    def encoder_id(self) -> str:
        return self.model.id

    def key(self, text: str) -> tuple[str, str]:
        return normalise_prompt(text), self.model.id

    def get(self, text: str) -> Condition | None:
        """The Condition for `text`, or None while it is being encoded (the encoding starts on first ask).
        An empty prompt is the zero condition at once. A prompt whose encoding failed stays None; see
        `error(text)`."""
        key = self.key(text)
        if not key[0]:
            return empty_condition(key[1])
        with self._lock:
            cond = self._items.get(key)
            if cond is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return cond
            if key in self._pending or key in self._failed:
                return None
            self.misses += 1
            if self._closed:
                return None
            self._pending[key] = self._pool.submit(self._encode, key)
        return None

    def error(self, text: str) -> str | None:
        """Why the encoding of `text` failed, if it did."""
        with self._lock:
            return self._failed.get(self.key(text))

    def wait(self, text: str, timeout: float | None = None) -> Condition | None:
        """Blocking get, up to `timeout` s (None: the reading is not ready or failed); for the control
        path, the CLI and tests, never the frame path."""
        cond = self.get(text)
        if cond is not None:
            return cond
        with self._lock:
            fut = self._pending.get(self.key(text))
        if fut is not None:
            try:
                fut.result(timeout)
            except TimeoutError:
                return None
        with self._lock:
            return self._items.get(self.key(text))

    def _encode(self, key: tuple[str, str]) -> None:
        t0 = time.perf_counter()
        try:
            (cond,) = self.model.encode([key[0]])
        except Exception as exc:  # reported through error(); the stream keeps its previous condition
            log.warning("prompt encoding failed for %r: %s", key[0][:80], exc)
            with self._lock:
                self.errors += 1
                self._failed[key] = f"{type(exc).__name__}: {exc}"
                self._pending.pop(key, None)
            return
        if cond.encode_ms == 0.0:   # a model that does not time itself: the cache's own clock
            cond = replace(cond, encode_ms=(time.perf_counter() - t0) * 1000.0)
        with self._lock:
            self._items[key] = cond
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
                self.evictions += 1
            self._pending.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "errors": self.errors, "evictions": self.evictions,
                    "size": len(self._items), "pending": len(self._pending)}

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)


def load_prompt_cache(encoder: str | None = None, artifact: str | None = None, capacity: int = 256) -> PromptCache:
    """The server's one cache: e5 and its committed artifact by default (or `encoder="minilm"`, or a local
    folder). Raises EncoderError or CalibrationError (both name the fix) when the encoder is missing,
    incompatible or uncalibrated."""
    from engines.prompt.model import load_prompt_model

    return PromptCache(load_prompt_model(encoder, artifact), capacity=capacity)
