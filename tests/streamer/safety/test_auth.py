"""Access control against a small aiohttp app: no token, bad token, expired, rate limit, session limit,
origin allowlist, loopback running open; and session data purged at the end."""

from __future__ import annotations

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from streamer.safety.auth import (REQUEST_SLOT, AccessPolicy, AuthError, TokenStore, auth_middleware, is_loopback,
                                  ssl_context, token_id_of)
from engines.sources import SourceRegistry
from streamer.safety.privacy import purge_session
from streamer.session.session import Session


class Clock:
    def __init__(self):
        self.t = 1_000_000.0

    def __call__(self):
        return self.t


def make_app(store, policy, slots):
    async def offer(request):
        if request.query.get("fail"):
            return web.json_response({"error": "bad sdp"}, status=400)
        slots.append(request[REQUEST_SLOT])
        return web.json_response({"ok": True, "token": token_id_of(request)})

    async def upload(request):
        return web.json_response({"token": token_id_of(request)})

    async def health(request):
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[auth_middleware(store, policy)])
    app.router.add_post("/offer", offer)
    app.router.add_post("/sessions/{session}/source", upload)
    app.router.add_delete("/whip/{session}", upload)
    app.router.add_get("/healthz", health)
    return app


@pytest.fixture
async def setup():
    clock = Clock()
    store = TokenStore(clock=clock)
    slots = []
    policy = AccessPolicy.for_host("0.0.0.0", allowed_origins=("https://cam.example",))
    client = TestClient(TestServer(make_app(store, policy, slots)))
    await client.start_server()
    yield client, store, clock, slots
    await client.close()


def bearer(tok):
    return {"Authorization": f"Bearer {tok}"}


async def test_no_token_bad_token_and_expired(setup):
    client, store, clock, _ = setup
    r = await client.post("/offer")
    assert r.status == 401 and "Bearer" in r.headers["WWW-Authenticate"]
    assert (await r.json())["error"] == "a bearer token is required"
    r = await client.post("/offer", headers=bearer("not-a-token"))
    assert r.status == 401 and (await r.json())["error"] == "unknown token"
    r = await client.post("/offer", headers={"Authorization": "Basic abc"})
    assert r.status == 401
    tok = store.issue("alice", ttl=60)
    r = await client.post("/sessions/s1/source", headers=bearer(tok))
    assert r.status == 200 and (await r.json())["token"] == "alice"
    clock.t += 61
    r = await client.post("/sessions/s1/source", headers=bearer(tok))
    assert r.status == 401 and (await r.json())["error"] == "token expired"
    assert (await client.get("/healthz")).status == 200  # the public routes stay open


async def test_rate_limit_then_recovery(setup):
    client, store, clock, _ = setup
    tok = store.issue("bob", rate_per_minute=60, burst=3)
    codes = [(await client.post("/sessions/s1/source", headers=bearer(tok))).status for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    r = await client.post("/sessions/s1/source", headers=bearer(tok))
    assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
    clock.t += 2.0  # one request a second refills
    assert (await client.post("/sessions/s1/source", headers=bearer(tok))).status == 200
    other = store.issue("carol", burst=3)
    assert (await client.post("/sessions/s1/source", headers=bearer(other))).status == 200  # limits are per token


async def test_teardown_is_never_rate_limited(setup):
    client, store, clock, _ = setup
    tok = store.issue("erin", rate_per_minute=60, burst=2)
    assert [(await client.post("/sessions/s1/source", headers=bearer(tok))).status for _ in range(3)] == [200, 200, 429]
    deletes = [await client.delete(f"/whip/s{i}", headers=bearer(tok)) for i in range(5)]
    assert [r.status for r in deletes] == [200] * 5                      # still authenticated ...
    assert (await client.delete("/whip/s1", headers=bearer("not-a-token"))).status == 401   # ... never open


async def test_session_limit_and_release(setup):
    client, store, clock, slots = setup
    tok = store.issue("dave", max_sessions=2, burst=50)
    assert (await client.post("/offer", headers=bearer(tok))).status == 200
    assert (await client.post("/offer", headers=bearer(tok))).status == 200
    r = await client.post("/offer", headers=bearer(tok))
    assert r.status == 429 and "session limit" in (await r.json())["error"]
    slots[0].release()
    slots[0].release()  # idempotent
    assert store.open_sessions("token:dave") == 1
    assert (await client.post("/offer", headers=bearer(tok))).status == 200
    # a failed offer gives its slot back at once
    slots[1].release()
    assert (await client.post("/offer?fail=1", headers=bearer(tok))).status == 400
    assert store.open_sessions("token:dave") == 1


async def test_origin_allowlist(setup):
    client, store, _, _ = setup
    tok = store.issue("erin", burst=50)
    ok = await client.post("/sessions/s1/source", headers={**bearer(tok), "Origin": "https://cam.example"})
    assert ok.status == 200
    bad = await client.post("/sessions/s1/source", headers={**bearer(tok), "Origin": "https://evil.example"})
    assert bad.status == 403 and "not allowed" in (await bad.json())["error"]


async def test_loopback_runs_open_but_still_rate_limited():
    store = TokenStore(clock=Clock())
    policy = AccessPolicy.for_host("127.0.0.1", open_rate_per_minute=30)
    assert not policy.require_tokens and AccessPolicy.for_host("0.0.0.0").require_tokens
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("192.0.2.2")
    slots = []
    async with TestClient(TestServer(make_app(store, policy, slots))) as client:
        r = await client.post("/offer")
        assert r.status == 200 and (await r.json())["token"] == "loopback"
        codes = [(await client.post("/sessions/s1/source")).status for _ in range(6)]
        assert codes[-1] == 429  # burst of 5 for 30/min


def test_token_store_saves_hashes_only(tmp_path):
    store = TokenStore()
    raw = store.issue("frank", max_sessions=1)
    path = tmp_path / "tokens.json"
    store.save(path)
    assert raw not in path.read_text()
    loaded = TokenStore.load(path)
    assert loaded.authenticate(f"Bearer {raw}").id == "frank"
    loaded.revoke("frank")
    with pytest.raises(AuthError):
        loaded.authenticate(f"Bearer {raw}")


def test_tls_context(tmp_path):
    with pytest.raises(FileNotFoundError, match="TLS file"):
        ssl_context(tmp_path / "cert.pem", tmp_path / "key.pem")
    import datetime

    from cryptography import x509  # installed with aiortc (DTLS)
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    ctx = ssl_context(tmp_path / "cert.pem", tmp_path / "key.pem")
    assert ctx.minimum_version.name == "TLSv1_2"


def test_session_data_purged_at_end(astronaut):
    records = []
    s = Session("s-purge")
    s.add_source("a", SourceRegistry().register(astronaut))
    s.update(prompt="a slight smile")
    dropped = purge_session(s, audit=lambda e, **f: records.append((e, f)))
    assert dropped == {"sources": 1} and s.sources == {}
    assert s.controls.prompt == "" and s.controls.source_id is None
    assert s.closed.is_set() and records == [("session_purged", {"session": "s-purge", "sources": 1})]


async def _status(client, path="/offer", **headers) -> tuple[int, dict]:
    r = await client.post(path, headers=headers) if path == "/offer" else await client.get(path, headers=headers)
    return r.status, await r.json()


async def test_a_loopback_server_answers_only_to_loopback_names():
    policy = AccessPolicy.for_host("127.0.0.1", open_rate_per_minute=6000)
    async with TestClient(TestServer(make_app(TokenStore(), policy, []))) as client:
        for host in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example"):
            for path in ("/offer", "/healthz"):  # DNS rebinding reads any route, not only the protected ones
                status, body = await _status(client, path, Host=host)
                assert status == 421 and "not a name this server answers to" in body["error"], (host, path)
        for host in ("localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:9", "[::1]", "[::1]:8080"):
            assert (await _status(client, Host=host))[0] == 200, host


async def test_origin_must_be_the_servers_own_not_the_requests_host():
    policy = AccessPolicy.for_host("127.0.0.1", open_rate_per_minute=6000)
    async with TestClient(TestServer(make_app(TokenStore(), policy, []))) as client:
        port = client.server.port
        own = f"http://127.0.0.1:{port}"
        assert (await _status(client, Host=f"127.0.0.1:{port}", Origin=own))[0] == 200
        assert (await _status(client, Host=f"localhost:{port}", Origin=f"http://localhost:{port}"))[0] == 200
        for origin in ("http://evil.example", f"http://localhost:{port}", f"https://127.0.0.1:{port}",
                       "http://127.0.0.1:1", "null"):
            status, body = await _status(client, Host=f"127.0.0.1:{port}", Origin=origin)
            assert status == 403 and "not allowed" in body["error"], origin


async def test_public_names_off_loopback_and_the_attackers_host_is_not_trusted():
    store = TokenStore()
    tok = store.issue("alice", burst=50)
    auth = bearer(tok)
    named = AccessPolicy.for_host("0.0.0.0", public_hosts=("cam.example",), allowed_origins=("https://app.example",))
    async with TestClient(TestServer(make_app(store, named, []))) as client:
        # evil Host and matching evil Origin: the Host itself is refused
        assert (await _status(client, Host="evil.example", Origin="http://evil.example", **auth))[0] == 421
        assert (await _status(client, Host="cam.example", Origin="http://cam.example", **auth))[0] == 200
        assert (await _status(client, Host="cam.example", Origin="https://app.example", **auth))[0] == 200
        assert (await _status(client, Host="cam.example", Origin="http://evil.example", **auth))[0] == 403
    unnamed = AccessPolicy.for_host("0.0.0.0")  # no names configured: no Origin is taken as the server's own
    async with TestClient(TestServer(make_app(store, unnamed, []))) as client:
        assert (await _status(client, Host="evil.example", Origin="http://evil.example", **auth))[0] == 403
        assert (await _status(client, Host="evil.example", **auth))[0] == 200   # not a browser page: tokens decide
