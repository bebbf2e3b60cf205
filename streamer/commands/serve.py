"""`livefuse serve`: the web page, WebRTC signaling (/offer, WHIP, WHEP), control and metrics."""

from __future__ import annotations

import argparse

HELP = "serve the page and the live stream (http://127.0.0.1:8080 by default)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("every option can also be set as LIVEFUSE_<NAME> in the environment")
    g.add_argument("--host", help="bind address (default 127.0.0.1; loopback gathers only 127.0.0.1 ICE candidates)")
    g.add_argument("--port", type=int, help="port (default 8080)")
    g.add_argument("--cert", dest="tls_cert", help="TLS certificate (PEM); browsers need https off localhost")
    g.add_argument("--key", dest="tls_key", help="TLS private key (PEM)")
    g.add_argument("--codec", choices=["VP8", "H264", "vp8", "h264"], help="preferred returned video codec (default VP8)")
    g.add_argument("--min-bitrate", type=int, help="encoder lower bound, bits/s (default 250000)")
    g.add_argument("--max-bitrate", type=int, help="encoder upper bound, bits/s (default 1500000)")
    g.add_argument("--max-sessions", type=int, help="concurrent streams before 503 (default 8)")
    g.add_argument("--ice-server", dest="ice_servers", action="append",
                   help="STUN/TURN URL, repeatable (ignored when bound to loopback)")
    g.add_argument("--ice-username", help="TURN username")
    g.add_argument("--ice-credential", help="TURN credential")
    g.add_argument("--idle-timeout", dest="idle_timeout_s", type=float, help="release a silent peer after this many s (default 10)")


def run(args: argparse.Namespace) -> int:
    import logging

    for noisy in ("aioice", "aiortc"):  # per-candidate chatter at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from aiohttp import web

    from streamer.config import ServerConfig
    from streamer.server import create_app, ssl_context
    from streamer.services import default_services

    overrides = {k: getattr(args, k, None) for k in (
        "host", "port", "tls_cert", "tls_key", "min_bitrate", "max_bitrate", "max_sessions", "ice_username",
        "ice_credential", "idle_timeout_s")}
    if args.codec:
        overrides["codec"] = args.codec.upper()
    if args.ice_servers:
        overrides["ice_servers"] = tuple(args.ice_servers)
    config = ServerConfig.from_env(**overrides)
    app = create_app(config, default_services())
    shown = "localhost" if config.loopback else config.host
    logging.getLogger("livefuse").info("LiveFuse on %s://%s:%d  (codec %s, max %d sessions)", config.scheme, shown,
                                       config.port, config.codec, config.max_sessions)
    web.run_app(app, host=config.host, port=config.port, ssl_context=ssl_context(config), print=None)
    return 0
