"""Tokens from `livefuse tokens` open the real product server when it runs beyond loopback; nothing else does."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from streamer.app.assembly import Product, ProductConfig
from streamer.app.cli import main
from streamer.config import ServerConfig
from streamer.web.kit import SafetyConfig
from streamer.web.server import create_app


def test_issue_list_revoke(tmp_path, capsys):
    path = tmp_path / "tokens.json"
    assert main(["tokens", "issue", str(path), "obs-studio", "--max-sessions", "2"]) == 0
    token = capsys.readouterr().out.strip()
    assert len(token) > 30 and token not in path.read_text()  # only its hash is kept
    assert path.stat().st_mode & 0o077 == 0
    assert main(["tokens", "list", str(path)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(t["id"], t["max_sessions"]) for t in listed] == [("obs-studio", 2)]
    assert main(["tokens", "revoke", str(path), "obs-studio"]) == 0
    assert "revoked 1" in capsys.readouterr().err
    assert main(["tokens", "list", str(tmp_path / "nope.json")]) == 2


def test_serve_beyond_loopback_needs_tokens(capsys):
    with pytest.raises(SystemExit, match="needs bearer tokens"):
        main(["serve", "--host", "0.0.0.0", "--port", "8099"])


async def test_product_server_off_loopback_admits_only_tokens(tmp_path, capsys):
    path = tmp_path / "tokens.json"
    assert main(["tokens", "issue", str(path), "viewer"]) == 0
    token = capsys.readouterr().out.strip()
    product = Product(ProductConfig(safety=SafetyConfig(host="0.0.0.0", tokens_file=str(path),
                                                        audit_path=str(tmp_path / "audit.jsonl"))))
    server = TestServer(create_app(ServerConfig(), product), host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    offer = {"sdp": "v=0 not sdp", "type": "offer"}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/offer", json=offer) as r:
                assert r.status == 401
            async with http.post(f"{url}/offer", json=offer, headers={"Authorization": "Bearer wrong"}) as r:
                assert r.status == 401
            async with http.post(f"{url}/offer", json=offer, headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 400  # past the door: now it is the SDP that is wrong
            async with http.get(f"{url}/healthz") as r:
                assert r.status == 200  # health stays open for probes
    finally:
        await server.close()
