"""The HTTP side with real peers: /offer, source upload, health, metrics, and every refusal saying why."""

from __future__ import annotations

import asyncio
import io
import json
import time
import re

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from PIL import Image

from streamer.config import ServerConfig
from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.web.server import SERVER_KEY, create_app, runner_options
from streamer.services import NullServices, Services
from tests.streaming_helpers import keep_decoded


@pytest.fixture
async def served():
    servers = []

    async def start(config: ServerConfig | None = None, services: Services | None = None):
        config = config or ServerConfig()
        app = create_app(config, services or NullServices())
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server(**runner_options(config))
        servers.append(server)
        http = aiohttp.ClientSession()
        servers.append(http)
        return str(server.make_url("")).rstrip("/"), http, app[SERVER_KEY]

    yield start
    for s in reversed(servers):
        await s.close()


def jpeg(img, quality=90) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


async def test_health_and_metrics(served):
    url, http, _ = await served()
    async with http.get(f"{url}/healthz") as r:
        assert r.status == 200 and (await r.json())["status"] == "ok"
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
        assert r.status == 200 and r.content_type == "text/plain"
        assert "livefuse_sessions 0.0" in text and "livefuse_server_latency_seconds_bucket" in text


async def test_edits_route_serves_the_vocabulary(served):
    from engines.edit_vocabulary import EDIT_NAMES, EDIT_SPECS

    url, http, _ = await served()
    async with http.get(f"{url}/edits") as r:
        assert r.status == 200 and r.content_type == "application/json"
        rows = await r.json()
    assert tuple(row["name"] for row in rows) == EDIT_NAMES
    assert rows[0] == {"name": EDIT_SPECS[0].name, "label": EDIT_SPECS[0].label, "kind": EDIT_SPECS[0].kind,
                       "minus": EDIT_SPECS[0].minus, "plus": EDIT_SPECS[0].plus, "help": EDIT_SPECS[0].help,
                       "low": EDIT_SPECS[0].low, "high": EDIT_SPECS[0].high, "colour": None}
    lipstick = next(row for row in rows if row["name"] == "lip_tint")
    assert lipstick["colour"] == "rose" and lipstick["colour_hex"] == "#b92d4b"     # the swatch the page starts at


async def test_offer_streams_and_source_upload(served, astronaut, grace_hopper):
    received: list = []
    url, http, state = await served(services=NullServices(register_source=keep_decoded(received)))
    client = ProbeClient(ClipTrack(clip_background(astronaut, 320, 240), frames=90))
    try:
        body = await client.connect_http(url, http)
        assert body["session"] in state.peers and body["stages"] == []
        await client.wait_frames(20)
        sid = client.session_id
        # a real face photo as the source, multipart like the page sends it
        form = aiohttp.FormData()
        form.add_field("image", jpeg(grace_hopper), filename="grace.jpg", content_type="image/jpeg")
        form.add_field("source_id", "grace")
        async with http.post(f"{url}/sessions/{sid}/source", data=form) as r:
            assert r.status == 200, await r.text()
            assert await r.json() == {"source_id": "grace", "width": 512, "height": 600}
        peer = state.peers[sid]
        assert peer.session.controls.source_id == "grace"
        assert received[0].shape == (600, 512, 3) and "grace" in peer.session.sources
        # raw body works too
        async with http.post(f"{url}/sessions/{sid}/source", data=jpeg(astronaut), headers={"Content-Type": "image/jpeg"}) as r:
            assert r.status == 200
        async with http.get(f"{url}/sessions/{sid}") as r:
            info = await r.json()
            assert info["stats"]["frames_out"] >= 20 and len(info["sources"]) == 2
        async with http.get(f"{url}/metrics") as r:
            text = await r.text()
            assert "livefuse_sessions 1.0" in text and "livefuse_frames_out_total" in text
    finally:
        await client.close()


async def test_a_source_with_glasses_is_accepted_and_the_client_told_what_stays_live(served, astronaut, grace_hopper):
    """Grace Hopper's glasses are masked on her texture (engines/source_mask.py): the upload is accepted, its
    reply and a `source_warning` event name them."""
    from engines.sources import SourceRegistry

    registry = SourceRegistry()

    def register(session, image, form):
        source = registry.register(image)
        session.add_source("grace", source)
        return {"source_id": "grace", **{k: v for k, v in source.summary().items() if k == "warnings"}}

    url, http, state = await served(services=NullServices(register_source=register))
    client = ProbeClient(ClipTrack(clip_background(astronaut, 320, 240), frames=200))
    try:
        await client.connect_http(url, http)
        await client.wait_frames(5)
        async with http.post(f"{url}/sessions/{client.session_id}/source", data=jpeg(grace_hopper),
                             headers={"Content-Type": "image/jpeg"}) as r:
            assert r.status == 200, await r.text()
            reply = await r.json()
        event = await client.wait_message(lambda m: m.get("type") == "source_warning")
    finally:
        await client.close()
    assert reply["warnings"] == ["masked: glasses"]
    assert event == {"type": "source_warning", "source_id": "grace", "warnings": ["masked: glasses"]}


async def test_source_refusals(served, astronaut):
    url, http, state = await served(ServerConfig(max_source_bytes=200_000))
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=200))
    try:
        await client.connect_http(url, http)
        sid = client.session_id
        src = f"{url}/sessions/{sid}/source"
        async with http.post(src, data=b"GIF89a not really", headers={"Content-Type": "image/png"}) as r:
            body = await r.json()
            assert r.status == 422 and "not a recognised image" in body["error"] and body["code"] == "source_bad_image"
        async with http.post(src, data=b"hello", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415 and "text/plain" in (await r.json())["error"]
        noisy = (astronaut.astype("uint16") * 7 % 256).astype("uint8")
        big = jpeg(noisy, quality=100)
        assert len(big) > 200_000
        async with http.post(src, data=big, headers={"Content-Type": "image/jpeg"}) as r:
            assert r.status == 413
        tiny = jpeg(astronaut[:20, :20])
        async with http.post(src, data=tiny, headers={"Content-Type": "image/jpeg"}) as r:
            assert r.status == 422 and "too small" in (await r.json())["error"]
        async with http.post(f"{url}/sessions/nosuch/source", data=jpeg(astronaut), headers={"Content-Type": "image/jpeg"}) as r:
            assert r.status == 404
        many = aiohttp.FormData(default_to_multipart=True)
        for i in range(1000):   # each part costs a parse on the event loop: refused at the 17th
            many.add_field(f"f{i}", "x")
        async with http.post(src, data=many) as r:
            assert r.status == 413 and "parts" in (await r.json())["error"]
        nested = (b"--outer\r\nContent-Type: multipart/mixed; boundary=inner\r\nContent-Disposition: form-data; "
                  b"name=\"image\"\r\n\r\n--inner\r\nContent-Type: image/jpeg\r\n\r\nxx\r\n--inner--\r\n--outer--\r\n")
        async with http.post(src, data=nested, headers={"Content-Type": "multipart/form-data; boundary=outer"}) as r:
            body = await r.json()   # a nested multipart is no image: refused by its type
            assert (r.status, body["code"]) == (415, "unsupported_media_type") and "multipart/mixed" in body["error"]
        long_field = aiohttp.FormData()
        long_field.add_field("source_id", "a" * 5000)
        long_field.add_field("image", jpeg(astronaut), filename="a.jpg", content_type="image/jpeg")
        async with http.post(src, data=long_field) as r:
            assert r.status == 413 and "source_id" in (await r.json())["error"]
        assert state.peers[sid].session.sources == {}  # nothing was half-stored
    finally:
        await client.close()


async def test_offer_refusals(served):
    url, http, _ = await served(ServerConfig(max_sdp_bytes=4096))
    async with http.post(f"{url}/offer", data="v=0", headers={"Content-Type": "text/plain"}) as r:
        assert r.status == 415 and "application/json" in (await r.json())["error"]
    async with http.post(f"{url}/offer", data="{nope", headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400 and "not JSON" in (await r.json())["error"]
    async with http.post(f"{url}/offer", json={"sdp": "hello", "type": "offer"}) as r:
        assert r.status == 400 and "SDP" in (await r.json())["error"]
    broken = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n"
    async with http.post(f"{url}/offer", json={"sdp": broken, "type": "offer"}) as r:
        body = await r.json()
        assert r.status == 400 and body["code"] == "no_ice" and "a=ice-ufrag" in body["error"]
    async with http.post(f"{url}/offer", json={"sdp": "v=0\r\n" + "a=x\r\n" * 2000, "type": "offer"}) as r:
        assert r.status == 413
    async with http.post(f"{url}/whep/unknown", data="v=0", headers={"Content-Type": "application/sdp"}) as r:
        assert r.status == 404
    async with http.delete(f"{url}/whip/unknown") as r:
        assert r.status == 404
    async with http.get(f"{url}/metrics") as r:
        assert 'livefuse_requests_refused_total{reason="bad_sdp"} 2.0' in await r.text()


PYTHON_NAMES = re.compile(r"\w+(Error|Exception)\b|NoneType|Traceback|object has no attribute")


@pytest.mark.parametrize("route", ["/offer", "/whip"])
async def test_malformed_offers_are_refused_in_plain_words(served, astronaut, route):
    url, http, state = await served()
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=10))
    good = (await client.offer()).sdp
    await client.close()
    lines = good.split("\r\n")
    cases = {
        "no fingerprint": ("\r\n".join(l for l in lines if not l.startswith("a=fingerprint")), "no_fingerprint"),
        "no setup": ("\r\n".join(l for l in lines if not l.startswith("a=setup")), "bad_dtls"),
        "bad setup": (good.replace("a=setup:actpass", "a=setup:sideways"), "bad_dtls"),
        "no ICE credentials": ("\r\n".join(l for l in lines if not l.startswith("a=ice-pwd")), "no_ice"),
        "600 video sections": (good + "".join(f"m=video {9 + i} UDP/TLS/RTP/SAVPF 96\r\n" for i in range(600)),
                               "too_many_media"),
        "plain RTP": (good.replace("UDP/TLS/RTP/SAVPF", "RTP/AVP"), "bad_protocol"),
        "md5 fingerprint": (re.sub(r"a=fingerprint:sha-256 \S+", "a=fingerprint:md5 " + ":".join(["AB"] * 16), good),
                            "weak_fingerprint"),
    }
    for name, (sdp, reason) in cases.items():
        if route == "/offer":
            request = http.post(f"{url}/offer", json={"sdp": sdp, "type": "offer"})
        else:
            request = http.post(f"{url}/whip", data=sdp, headers={"Content-Type": "application/sdp"})
        async with request as r:
            body = await r.json()
            assert r.status == 400 and body["code"] == reason, (name, body)
            assert not PYTHON_NAMES.search(body["error"]), (name, body)
    assert state.peers == {}


async def test_full_server_says_retry_after(served, astronaut):
    url, http, state = await served(ServerConfig(max_sessions=1, retry_after_s=7))
    first = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=300))
    second = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=300))
    try:
        await first.connect_http(url, http)
        with pytest.raises(RuntimeError, match="503"):
            await second.connect_http(url, http)
        offer = second.pc.localDescription
        async with http.post(f"{url}/offer", json={"sdp": offer.sdp, "type": "offer"}) as r:
            assert r.status == 503 and r.headers["Retry-After"] == "7"
        await state.peers[first.session_id].close("make room")
        assert state.peers == {}
    finally:
        await first.close()
        await second.close()


async def test_authorize_hook_refuses(served):
    url, http, _ = await served(services=NullServices(authorize=lambda request: None))
    async with http.post(f"{url}/offer", json={"sdp": "v=0", "type": "offer"}) as r:
        assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer"


def _first_video_codec(sdp: str) -> str:
    lines = sdp.splitlines()
    m = next(l for l in lines if l.startswith("m=video"))
    pt = m.split()[3]
    return next(l.split(" ", 1)[1] for l in lines if l.startswith(f"a=rtpmap:{pt} "))


@pytest.mark.parametrize("codec", ["VP8", "H264"])
async def test_codec_preference_is_applied_to_the_answer(served, astronaut, codec):
    url, http, state = await served(ServerConfig(codec=codec))
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=120))
    try:
        body = await client.connect_http(url, http)
        assert _first_video_codec(body["sdp"]).upper().startswith(f"{codec}/90000")
        await client.wait_frames(5)
    finally:
        await client.close()


async def test_tls_serves_https(tmp_path):
    import datetime
    import ssl

    from aiohttp import web
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    from streamer.web.server import ssl_context

    config = ServerConfig(tls_cert=str(tmp_path / "c.pem"), tls_key=str(tmp_path / "k.pem"))
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context(config))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        client_ctx = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
        client_ctx.check_hostname = False
        async with aiohttp.ClientSession() as http:
            async with http.get(f"https://127.0.0.1:{port}/healthz", ssl=client_ctx) as r:
                assert r.status == 200 and (await r.json())["status"] == "ok"
    finally:
        await runner.cleanup()


async def test_livefuse_serve_command_serves_the_page_with_env_config():
    import asyncio
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, LIVEFUSE_PORT=str(port), LIVEFUSE_MAX_SESSIONS="3")
    proc = subprocess.Popen([sys.executable, "-m", "streamer.app.cli", "serve"], cwd=Path(__file__).resolve().parents[3],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        async with aiohttp.ClientSession() as http:
            # it answers before the models load; its imports alone took 29 s once with the machine's load at 7
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                        health = await r.json()
                        break
                except aiohttp.ClientConnectionError:
                    if proc.poll() is not None:
                        pytest.fail("livefuse serve exited: " + proc.stderr.read()[-2000:])
                    await asyncio.sleep(0.1)
            else:
                proc.terminate()
                pytest.fail("livefuse serve did not start: " + proc.communicate(timeout=10)[1][-2000:])
            assert health["max_sessions"] == 3
            async with http.get(f"http://127.0.0.1:{port}/") as r:
                page = await r.text()
                assert r.status == 200 and 'id="remote"' in page and "/static/app.js" in page
            async with http.get(f"http://127.0.0.1:{port}/static/connection.js") as r:
                assert r.status == 200 and "export class LiveFuseConnection" in await r.text()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("body", ["[" * 20_000 + "]" * 20_000, '{"sdp": "v=0", "type": "offer", "n": ' + "7" * 5000 + "}",
                                  '{"sdp": "v=0", "type": "offer", "n": NaN}'])
async def test_offers_whose_json_python_cannot_hold_are_refused_with_400(served, body):
    url, http, _ = await served()
    async with http.post(f"{url}/offer", data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400 and "not JSON the server accepts" in (await r.json())["error"]
    async with http.get(f"{url}/healthz") as r:
        assert r.status == 200


async def test_a_request_whose_headers_never_finish_loses_its_connection_while_others_are_served(served):
    url, http, _ = await served(ServerConfig(read_timeout_s=0.5))
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    t0 = time.monotonic()
    writer.write(b"POST /offer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n")  # and no more
    await writer.drain()
    async with http.get(f"{url}/healthz") as r:          # everyone else is answered meanwhile
        assert r.status == 200
    assert await asyncio.wait_for(reader.read(), 10) == b""   # closed by the server, with nothing sent
    assert 0.4 < time.monotonic() - t0 < 5
    writer.close()


async def test_a_body_that_stalls_is_refused_with_408(served):
    url, http, _ = await served(ServerConfig(read_timeout_s=0.5))
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /whip HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/sdp\r\n"
                 b"Content-Length: 1000\r\n\r\nv=0\r\n")           # 1000 bytes promised, 5 sent
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 408")
    length = int(re.search(rb"Content-Length: (\d+)", head, re.I).group(1))
    body = await asyncio.wait_for(reader.readexactly(length), 10)
    assert json.loads(body)["code"] == "read_timeout"
    writer.close()
    async with http.get(f"{url}/healthz") as r:
        assert r.status == 200


async def test_auto_overlap_gives_each_stream_three_cores(served, astronaut, monkeypatch):
    """On a 3-core host the first stream gets the overlapped worker (its two frame threads have a core
    each, its search thread and codecs the third), the second the plain one."""
    import streamer.config
    from streamer.pipeline.overlap import OverlappedFrameWorker
    from streamer.pipeline.worker import FrameWorker
    from streamer.pipeline.pipeline import Pipeline

    class Mark:
        name = "mark"

        def __call__(self, state, context):
            return state

    monkeypatch.setattr(streamer.config, "usable_cores", lambda: 3)
    url, http, state = await served(services=NullServices(make_pipeline=lambda s: Pipeline([Mark(), Mark()])))
    clients = [ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=300)) for _ in range(2)]
    try:
        for c in clients:
            await c.connect_http(url, http)
        first, second = (state.peers[c.session_id].worker for c in clients)
        assert isinstance(first, OverlappedFrameWorker)
        assert type(second) is FrameWorker
    finally:
        for c in clients:
            await c.close()
