"""Every upload route (`POST /v1/fuse`, `POST /v1/jobs`, `POST /sessions/{id}/source`) against what a
hostile or broken client sends, over raw sockets where a client library would refuse to send it: each
malformed body gets its 4xx and `code` (streamer.web.multipart), no traceback reaches the log, the server
keeps serving; a stalled and a trickled upload are each refused in bounded time and give their slot
back; a seeded fuzz of multipart bodies gets no 5xx."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import re
import time

import aiohttp
import pytest

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from tests.streamer.web.api.conftest import encode, fuse_form, serve_product

# short clocks so the slow-client cases run in seconds: 1 s stall, and after 1 s at least 20 kB/s
CONFIG = ServerConfig(read_timeout_s=1.0, body_grace_s=1.0, min_body_rate=20_000)
B = "livefuseBoundary7MA4YWxkTrZu0gW"


@pytest.fixture(scope="module")
def photos(astronaut, grace_hopper) -> tuple[bytes, bytes]:
    return encode(astronaut), encode(grace_hopper)


@contextlib.asynccontextmanager
async def route_server(route: str, api_world):
    """(host, port, path, headers, file part names, server) for one upload route, on loopback, with a live
    session for the source route."""
    async with serve_product(api_world.product, CONFIG) as (url, http, server):
        host, port = url.removeprefix("http://").split(":")
        auth = api_world.headers()
        if route == "source":
            async with aiohttp.ClientSession(headers=auth) as signed:
                client = ProbeClient(ClipTrack(clip_background(api_world.protected, 160, 120), frames=400))
                try:
                    await client.connect_http(url, signed)
                    yield host, int(port), f"/sessions/{client.session_id}/source", auth, (("image", "image/jpeg"),), server
                finally:
                    await client.close()
        elif route == "fuse":
            yield host, int(port), "/v1/fuse", auth, (("source", "image/jpeg"), ("target", "image/jpeg")), server
        else:
            yield host, int(port), "/v1/jobs", auth, (("source", "image/jpeg"), ("target", "video/mp4")), server


def part(name: str, data: bytes, ctype: str = "image/jpeg", filename: str | None = "x.jpg", extra: bytes = b"") -> bytes:
    fn = b"" if filename is None else b'; filename="' + filename.encode("latin-1") + b'"'
    return (b"--" + B.encode() + b'\r\nContent-Disposition: form-data; name="' + name.encode() + b'"' + fn + b"\r\n"
            + (b"Content-Type: " + ctype.encode() + b"\r\n" if ctype else b"") + extra + b"\r\n" + data + b"\r\n")


def field(name: str, value: str) -> bytes:
    return part(name, value.encode(), ctype="", filename=None)


def close() -> bytes:
    return b"--" + B.encode() + b"--\r\n"


def request(path: str, headers: dict[str, str], body: bytes, *, ctype: str | None = None,
            length: int | None = None) -> bytes:
    ctype = f"multipart/form-data; boundary={B}" if ctype is None else ctype
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Type: {ctype}",
            f"Content-Length: {len(body) if length is None else length}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


async def answer(reader: asyncio.StreamReader, timeout: float = 20.0) -> tuple[int, dict, dict]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    status = int(head.split(b" ", 2)[1])
    headers = {k.lower(): v for k, v in re.findall(r"([\w-]+): ([^\r]*)", head.decode("latin-1"))}
    length = int(headers.get("content-length", "0"))
    body = await asyncio.wait_for(reader.readexactly(length), timeout)
    return status, headers, json.loads(body) if headers.get("content-type", "").startswith("application/json") else {}


async def send(host: str, port: int, raw: bytes, split: int | None = None) -> tuple[int, dict, dict]:
    """`raw` on a fresh connection (in two writes 0.2 s apart when `split`), and the answer."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(raw[:split])
        await writer.drain()
        if split is not None:
            await asyncio.sleep(0.2)
            with contextlib.suppress(ConnectionError):
                writer.write(raw[split:])
                await writer.drain()
        return await answer(reader)
    finally:
        writer.close()


def good_parts(names: tuple[tuple[str, str], ...], photos: tuple[bytes, bytes]) -> list[bytes]:
    """The route's file parts (name, type) and its consent field."""
    return [part(n, photos[i % 2], ctype=t) for i, (n, t) in enumerate(names)] + [field("consent", "true")]


ROUTES = ("fuse", "jobs", "source")


def malformed_cases(names: tuple[tuple[str, str], ...], photos: tuple[bytes, bytes]) -> dict[str, tuple[bytes, dict, int, str]]:
    """name -> (body, request options, status, code)."""
    first = names[0][0]
    whole = b"".join(good_parts(names, photos)) + close()
    cut = b"".join(good_parts(names, photos))[: len(photos[0]) // 2]
    return {
        "no boundary": (b"xx", {"ctype": "multipart/form-data"}, 400, "bad_multipart"),
        "boundary over 70 characters": (whole.replace(B.encode(), b"b" * 71), {"ctype": "multipart/form-data; boundary=" + "b" * 71},
                                        400, "bad_multipart"),
        "no delimiter at all": (b"x" * 5000, {}, 400, "bad_multipart"),
        "unterminated body": (b"".join(good_parts(names, photos)), {}, 400, "bad_multipart"),
        "body cut mid-part": (cut, {}, 400, "bad_multipart"),
        # the body's excess arrives after the declared length (in the same segment aiohttp's HTTP parser
        # reads it as a second, garbage request and answers that 400 itself)
        "content-length under the body": (whole, {"length": len(whole) // 3, "split": True}, 400, "bad_multipart"),
        "NUL in a part header": (part(first, photos[0], extra=b"X-Note: a\x00b\r\n") + close(), {}, 400, "bad_multipart"),
        "control byte in a part header": (part(first, photos[0], extra=b"X-Note: a\x07b\r\n") + close(), {}, 400, "bad_multipart"),
        "NUL in a filename": (part(first, photos[0], filename="a\x00.jpg") + close(), {}, 400, "bad_multipart"),
        "a 100 KB part header line": (part(first, photos[0], extra=b"X-Pad: " + b"a" * 100_000 + b"\r\n") + close(), {},
                                      400, "bad_multipart"),
        "1000 part headers": (part(first, photos[0], extra=b"".join(b"X-H%d: v\r\n" % i for i in range(1000))) + close(), {},
                              400, "bad_multipart"),
        "a part with no name": (part("", photos[0]) + close(), {}, 400, "bad_multipart"),
        "repeated file part": (b"".join(good_parts(names, photos)) + part(first, photos[0]) + close(), {}, 400, "repeated_part"),
        "repeated consent": (b"".join(good_parts(names, photos)) + field("consent", "no") + close(), {}, 400, "repeated_part"),
        "missing part": (field("consent", "true") + close(), {}, 400, "bad_request"),
        "too many parts": (b"".join(field(f"f{i}", "v") for i in range(40)) + close(), {}, 413, "too_many_parts"),
        "oversized field": (field("note", "v" * 5000) + close(), {}, 413, "field_too_large"),
        "a file part of another type": (part(first, photos[0], ctype="text/html") + close(), {}, 415, "unsupported_media_type"),
        "not multipart": (b"hello", {"ctype": "text/plain"}, 415, "unsupported_media_type"),
        "a field that is not UTF-8": (part("note", b"\xff\xfe", ctype="", filename=None) + close(), {}, 400, "bad_field"),
    }


def leaks(text: str) -> bool:
    """A file path, a stack or an internal address in what a client reads."""
    return bool(re.search(r"(?:/[\w.-]+){2,}|Traceback|File \"|127\.0\.0\.1|s3://", text))


def tracebacks(caplog) -> list[str]:
    return [f"{r.name}: {r.getMessage()[:200]} {r.exc_info[1]!r}" if r.exc_info else r.getMessage()[:300]
            for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("route", ROUTES)
async def test_each_malformed_body_gets_its_status_and_code_and_no_traceback(route, api_world, photos, caplog):
    caplog.set_level(logging.INFO)
    async with route_server(route, api_world) as (host, port, path, auth, names, server):
        for name, (body, opts, status, code) in malformed_cases(names, photos).items():
            split = opts.pop("split", False)
            raw = request(path, auth, body, **opts)
            got, headers, reply = await send(host, port, raw, len(raw) - len(body) + opts["length"] if split else None)
            assert (got, reply.get("code")) == (status, code), f"{route}, {name}: {got} {reply}"
            assert not leaks(reply["error"].replace(path, "")), reply
        assert server.upload_slots.taken == 0 and server.uploads.pending_bytes == 0
        async with aiohttp.ClientSession() as http:   # still serving
            async with http.get(f"http://{host}:{port}/healthz") as r:
                assert r.status == 200
    assert not tracebacks(caplog), tracebacks(caplog)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("route", ROUTES)
async def test_a_client_that_goes_away_mid_upload_leaves_no_traceback_and_no_slot(route, api_world, photos, caplog):
    caplog.set_level(logging.INFO)
    async with route_server(route, api_world) as (host, port, path, auth, names, server):
        body = b"".join(good_parts(names, photos)) + close()
        _, writer = await asyncio.open_connection(host, port)
        writer.write(request(path, auth, body)[: 400 + len(body) // 2])
        await writer.drain()
        await asyncio.sleep(0.3)
        assert server.upload_slots.taken == 1        # the half-sent body holds one upload slot ...
        writer.transport.abort()                       # ... until its client vanishes
        for _ in range(50):
            if server.upload_slots.taken == 0:
                break
            await asyncio.sleep(0.1)
        assert server.upload_slots.taken == 0 and server.uploads.pending_bytes == 0
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://{host}:{port}/healthz") as r:
                assert r.status == 200
    assert not tracebacks(caplog), tracebacks(caplog)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("how", ["stalled", "trickled"])
async def test_a_stalled_or_trickled_upload_is_refused_in_bounded_time_and_gives_its_slot_back(route, how, api_world, photos):
    """Stalled: 3000 bytes short of its end, then silence: 408 read_timeout after the 1 s stall timer
    (never 413). Trickled: 2 kB every 0.5 s, fast enough for the stall timer and far under the 20 kB/s
    floor: 408 too_slow once the 1 s grace is spent."""
    async with route_server(route, api_world) as (host, port, path, auth, names, server):
        body = b"".join(good_parts(names, photos)) + close()
        raw = request(path, auth, body)
        reader, writer = await asyncio.open_connection(host, port)
        t0 = time.monotonic()
        try:
            if how == "stalled":
                writer.write(raw[:-3000])
                await writer.drain()
                status, headers, reply = await answer(reader, 10)
            else:
                async def trickle() -> None:
                    for i in range(0, len(raw), 2000):
                        writer.write(raw[i:i + 2000])
                        await writer.drain()
                        await asyncio.sleep(0.5)

                feeder = asyncio.ensure_future(trickle())
                try:
                    status, headers, reply = await answer(reader, 10)
                finally:
                    feeder.cancel()
            took = time.monotonic() - t0
        finally:
            writer.close()
        want = "read_timeout" if how == "stalled" else "too_slow"
        assert (status, reply["code"]) == (408, want), reply
        assert headers.get("connection", "").lower() == "close"
        assert took < 6, took
        assert server.upload_slots.taken == 0 and server.uploads.pending_bytes == 0


FUZZ_SEED = int(os.environ.get("LIVEFUSE_FUZZ_SEED", "20261205"))
FUZZ_BODIES = 60   # per route


def fuzz_body(rng: random.Random, names: tuple[tuple[str, str], ...], photos: tuple[bytes, bytes]) -> tuple[bytes, dict]:
    """A multipart body from the valid one, broken in its structure, headers, sizes or length."""
    parts = good_parts(names, photos) + [field(rng.choice(["note", "strength", "edits", "map", "x"]),
                                               rng.choice(["hello", "0.5", '{"smile": 0.3}', "0=keep", "é" * 600]))]
    pick = rng.random()
    if pick < 0.15:
        rng.shuffle(parts)
    elif pick < 0.3:
        parts = [p for p in parts if rng.random() > 0.4]
    elif pick < 0.45:
        parts = [p[: rng.randint(0, len(p))] for p in parts]
    elif pick < 0.6:
        i = rng.randrange(len(parts))
        parts[i] = parts[i].replace(b"\r\n", rng.choice([b"\n", b"\r", b"", b"\r\n\r\n", b"\r\n "]), rng.randint(1, 3))
    elif pick < 0.7:
        parts.append(part(rng.choice(names)[0], rng.randbytes(rng.randint(0, 50_000)), ctype=rng.choice(["", "image/png", "video/mp4"])))
    elif pick < 0.8:
        parts.insert(0, rng.randbytes(rng.randint(0, 3000)))
    elif pick < 0.9:
        i = rng.randrange(len(parts))
        cut = rng.randrange(len(parts[i]))
        parts[i] = parts[i][:cut] + rng.randbytes(rng.randint(1, 20)) + parts[i][cut:]
    body = b"".join(parts) + (close() if rng.random() < 0.8 else b"")
    opts: dict = {}
    if rng.random() < 0.15:
        opts["length"] = rng.randint(0, len(body))
    if rng.random() < 0.1:
        opts["ctype"] = rng.choice(["multipart/form-data", f"multipart/form-data; boundary={B[:5]}",
                                    f"multipart/mixed; boundary={B}", f'multipart/form-data; boundary="{B}"'])
    return body, opts


@pytest.mark.timeout(600)
@pytest.mark.parametrize("route", ROUTES)
async def test_seeded_multipart_fuzz_gets_no_5xx(route, api_world, photos, caplog):
    caplog.set_level(logging.INFO)
    rng = random.Random(f"{FUZZ_SEED}-{route}")
    statuses: dict[int, int] = {}
    async with route_server(route, api_world) as (host, port, path, auth, names, server):
        for k in range(FUZZ_BODIES):
            body, opts = fuzz_body(rng, names, photos)
            raw = request(path, auth, body, **opts)
            split = len(raw) - len(body) + opts["length"] if "length" in opts else None   # the excess comes later
            try:
                status, _, reply = await send(host, port, raw, split)
            except asyncio.IncompleteReadError:
                status, reply = -1, {}   # closed with no answer: only for a Content-Length under what was sent
            statuses[status] = statuses.get(status, 0) + 1
            assert status < 500, f"seed {FUZZ_SEED}, {route}, body {k}: {status} {reply}"
            assert status == -1 or status < 400 or reply.get("code"), (k, status, reply)
        assert server.upload_slots.taken == 0
        for _ in range(600):   # a job the fuzz got accepted holds its frame's share until it ends
            if server.uploads.pending_bytes == 0:
                break
            await asyncio.sleep(0.1)
        assert server.uploads.pending_bytes == 0
    print(f"\n{route}: {dict(sorted(statuses.items()))}")
    assert not tracebacks(caplog), tracebacks(caplog)


async def test_the_prompt_limit_is_500_characters_in_any_script(api_world, photos):
    """As the OpenAPI description and the WebSocket's set_prompt say: 500 characters (1500 bytes of CJK)
    pass the form; 501 characters, or 600 emoji (2400 bytes), are refused 400 prompt_too_long."""
    async with route_server("fuse", api_world) as (host, port, path, auth, names, _):
        for prompt, refused in (("微" * 500, False), ("a" * 501, True), ("😀" * 600, True)):
            body = b"".join(good_parts(names, photos)) + field("prompt", prompt) + close()
            status, _, reply = await send(host, port, request(path, auth, body))
            if refused:
                assert (status, reply["code"]) == (400, "prompt_too_long"), (len(prompt), status, reply)
            else:   # read whole and handed to the prompt gate (which may still refuse or not understand it)
                assert reply.get("code") not in ("prompt_too_long", "field_too_large"), reply


async def test_photos_past_the_memory_budget_are_told_busy_and_served_once_it_is_back(api_world, photos):
    """While the memory budget is held (as by photos in flight), a photo is refused at once, 503 busy with
    Retry-After, its body's bytes given back; once the budget is back the same photo is served. A target
    whose decode and working copies alone are over the whole budget is 413, not busy."""
    async with route_server("fuse", api_world) as (host, port, path, auth, names, server):
        budget = server.uploads.budget
        assert api_world.product.jobs.memory is budget   # clip jobs' frames count in the same budget
        body = b"".join(good_parts(names, photos)) + close()
        held = budget.lease()
        held.grow(budget.total - budget.used - 200_000)   # room for the bodies, not for a decode
        status, headers, reply = await send(host, port, request(path, auth, body))
        assert status == 503 and reply["code"] in ("busy", "source_busy", "target_busy") and headers["retry-after"], reply
        assert budget.used == held.held
        held.release()
        status, _, reply = await send(host, port, request(path, auth, body))
        assert status == 200, reply
        assert budget.used == 0
    small = dataclasses.replace(CONFIG, memory_budget=1 << 20)   # 1 MiB: under one 512 x 512 photo's share
    async with serve_product(api_world.product, small) as (url, http, _):
        async with http.post(url + "/v1/fuse", data=fuse_form(*photos, consent="true"), headers=api_world.headers()) as r:
            reply = await r.json()
            assert r.status == 413 and reply["code"] in ("source_too_large", "target_too_large"), reply


async def test_a_bad_clip_is_refused_without_naming_the_servers_files(api_world, photos):
    """A `target` that is no clip: 422 target_bad_clip, its error naming neither the spool path nor the
    decoder's message (the log has them)."""
    async with route_server("jobs", api_world) as (host, port, path, auth, names, _):
        body = (part("source", photos[0]) + part("target", b"not a clip at all " * 500, ctype="video/mp4")
                + field("consent", "true") + close())
        status, _, reply = await send(host, port, request(path, auth, body))
        assert (status, reply["code"]) == (422, "target_bad_clip"), reply
        assert not leaks(reply["error"]) and "input" not in reply["error"], reply
