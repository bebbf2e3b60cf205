"""`livefuse control SESSION`: steer a running session from outside it over its WebSocket control API
(`/sessions/{id}/control`, the data channel's protocol): set its prompt, edits, source and strength, and
with `--watch` print every message the session sends (stats, events, bye) as JSON lines until it ends.

The token comes from $LIVEFUSE_TOKEN or --token-file (never the command line, which other users can
read); it travels in the Authorization header. Exit 0 when every message was acknowledged, 1 when the
server answered one with an error, 2 when the socket could not be opened (401, 404, unreachable)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

HELP = "steer a running session over its WebSocket control API (prompt, edits, source, strength)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="the session id (POST /offer's `session`, WHIP's X-LiveFuse-Session)")
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the server (default http://127.0.0.1:8080)")
    parser.add_argument("--token-file", help="file holding the bearer token (default: $LIVEFUSE_TOKEN, if set)")
    parser.add_argument("--prompt", help="the prompt text (\"\" clears it)")
    parser.add_argument("--edits", help="slider values, NAME=VALUE[,NAME=VALUE...] (see GET /edits)")
    parser.add_argument("--strength", type=float, help="fusion strength, 0..1")
    parser.add_argument("--shape", type=float, help="how far the face's proportions move toward the source's, 0..1 "
                                                    "(0: its skin alone changes)")
    parser.add_argument("--enhance", type=float, help="face enhancer strength, 0..1 (where the server runs one)")
    parser.add_argument("--source", help="source id to fuse (one the session holds)")
    parser.add_argument("--watch", action="store_true", help="then print every message until the session ends")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each reply (default 10)")


def parse_edits(text: str) -> dict[str, float]:
    """`smile=0.5,lip_tint=-0.2` -> {"smile": 0.5, "lip_tint": -0.2}; the server checks names and ranges."""
    edits: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--edits: {item!r} is not NAME=VALUE")
        edits[name.strip()] = float(value)
    return edits


def messages(args: argparse.Namespace) -> list[dict[str, Any]]:
    """What the arguments ask for, as protocol messages (ids from 1)."""
    out: list[dict[str, Any]] = []
    if args.prompt is not None:
        out.append({"type": "set_prompt", "text": args.prompt})
    params: dict[str, Any] = {}
    if args.edits:
        params["edits"] = parse_edits(args.edits)
    if args.strength is not None:
        params["strength"] = args.strength
    if getattr(args, "shape", None) is not None:
        params["shape"] = args.shape
    if getattr(args, "enhance", None) is not None:
        params["enhance"] = args.enhance
    if args.source is not None:
        params["source_id"] = args.source
    if params:
        out.append({"type": "set_params", **params})
    for i, msg in enumerate(out, start=1):
        msg["id"] = i
    return out


def control_url(base: str, session: str) -> str:
    from urllib.parse import quote

    base = base.rstrip("/")
    scheme, sep, rest = base.partition("://")
    ws = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(scheme.lower())
    if not sep or ws is None:
        raise ValueError(f"--url {base!r}: expected http://HOST:PORT or https://HOST:PORT")
    return f"{ws}://{rest}/sessions/{quote(session, safe='')}/control"


def read_token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip() or None
    return os.environ.get("LIVEFUSE_TOKEN") or None


def emit(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg, ensure_ascii=False) + "\n")
    sys.stdout.flush()


async def converse(url: str, token: str | None, outgoing: list[dict[str, Any]], *, watch: bool,
                   timeout: float) -> int:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    from streamer.web.control_socket import CONTROL_SUBPROTOCOL

    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        ws = await connect(url, subprotocols=[CONTROL_SUBPROTOCOL], additional_headers=headers,
                           open_timeout=timeout, max_size=1 << 20)
    except InvalidStatus as exc:
        body = exc.response.body.decode("utf-8", "replace") if exc.response.body else ""
        try:
            body = json.loads(body).get("error", body)
        except (ValueError, AttributeError):
            pass
        print(f"livefuse control: {exc.response.status_code}: {body or exc.response.reason_phrase}", file=sys.stderr)
        return 2
    except (OSError, asyncio.TimeoutError) as exc:
        print(f"livefuse control: cannot reach {url}: {exc}", file=sys.stderr)
        return 2
    failed = False
    async with ws:
        try:
            for msg in outgoing:
                await ws.send(json.dumps(msg))
                while True:   # stats and events may come before the reply
                    reply = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                    if watch or reply.get("id") == msg["id"] or reply.get("type") == "bye":
                        emit(reply)
                    if reply.get("id") == msg["id"]:
                        failed |= reply.get("type") == "error"
                        break
                    if reply.get("type") == "bye":
                        return 1
            if watch:
                async for raw in ws:
                    emit(json.loads(raw))
        except asyncio.TimeoutError:
            print(f"livefuse control: no reply within {timeout:g} s", file=sys.stderr)
            return 1
        except ConnectionClosed as exc:
            if outgoing and not watch:
                print(f"livefuse control: the socket closed: {exc}", file=sys.stderr)
                return 1
    if ws.close_code not in (None, 1000, 1001):
        print(f"livefuse control: the socket closed with {ws.close_code} {ws.close_reason}", file=sys.stderr)
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    try:
        outgoing = messages(args)
        url = control_url(args.url, args.session)
    except ValueError as exc:
        print(f"livefuse control: {exc}", file=sys.stderr)
        return 2
    if not outgoing and not args.watch:
        print("livefuse control: nothing to do: give --prompt, --edits, --strength, --shape, --enhance, --source "
              "or --watch", file=sys.stderr)
        return 2
    try:
        return asyncio.run(converse(url, read_token(args), outgoing, watch=args.watch, timeout=args.timeout))
    except KeyboardInterrupt:
        return 0
