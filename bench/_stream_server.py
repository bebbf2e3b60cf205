"""The server side of `livefuse bench stream`: a real LiveFuse server in its own process (so its CPU time
can be read from /proc), with the pass-through pipeline or an artificial slow stage."""

from __future__ import annotations

import argparse
import logging
import time

from aiohttp import web

from streamer.config import ServerConfig
from streamer.pipeline import Pipeline
from streamer.server import create_app
from streamer.services import Services


class SleepStage:
    """Stands in for a slow filter: holds each frame for a fixed time, changes nothing."""

    def __init__(self, ms: float) -> None:
        self.name = f"sleep{ms:g}ms"
        self.ms = ms

    def __call__(self, state, session):
        time.sleep(self.ms / 1000.0)
        return state


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--codec", default="VP8")
    p.add_argument("--delay-ms", type=float, default=0.0)
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    stages = [SleepStage(a.delay_ms)] if a.delay_ms > 0 else []
    app = create_app(ServerConfig(port=a.port, codec=a.codec, max_bitrate=3_000_000),
                     Services(make_pipeline=lambda s: Pipeline(list(stages))))
    web.run_app(app, host="127.0.0.1", port=a.port, print=lambda *_: print("ready", flush=True))


if __name__ == "__main__":
    main()
