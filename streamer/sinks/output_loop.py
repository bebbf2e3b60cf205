"""The avatar outputs' own event loop: one daemon thread per process runs the WebSocket clients of every
session (VTube Studio), so nothing they wait on (a connect, an Allow popup, a slow app) reaches the
server's loop or a frame thread, and `livefuse process`, which has no loop, runs the same clients."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Coroutine

_lock = threading.Lock()
_shared: "OutputLoop | None" = None


class OutputLoop:
    """An asyncio loop in a daemon thread; `submit` runs a coroutine on it from any thread."""

    def __init__(self, name: str = "avatar-outputs") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Stop the loop (tests); tasks still running are cancelled."""
        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(5.0)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5.0)


def output_loop() -> OutputLoop:
    """The process's shared outputs loop, started on first use."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = OutputLoop()
        return _shared
