"""DTLS matrix: a WHIP client offering each `a=setup` role with an ECDSA or an RSA certificate connects and
gets video back; with aiortc's stock choices (answer active, ECDSA-only client suites) the RSA actpass cell
fails the way GStreamer did, and the server's log says why."""

from __future__ import annotations

import asyncio
import datetime
import logging

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from aiortc import RTCCertificate, RTCPeerConnection, RTCSessionDescription
from aiortc.rtcdtlstransport import SRTP_PROFILES
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import rsa
from OpenSSL import SSL

from bench._probe import ClipTrack, ProbeClient
from streamer.rtc import dtls, peer
from streamer.config import ServerConfig
from streamer.rtc.ice import rtc_configuration
from streamer.web.server import create_app
from streamer.services import NullServices


class OpenSSLDefaultRSACertificate(RTCCertificate):
    """A peer like GStreamer's webrtcbin: an RSA certificate and OpenSSL's ordinary suite list."""

    def _create_ssl_context(self, srtp_profiles):
        ctx = super()._create_ssl_context(srtp_profiles)
        ctx.set_cipher_list(b"HIGH:!aNULL:!MD5")
        return ctx

    @classmethod
    def generate(cls) -> "OpenSSLDefaultRSACertificate":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "rsa-peer")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
        return cls(key, cert)


def client_pc(cert_type: str) -> RTCPeerConnection:
    pc = RTCPeerConnection(rtc_configuration(loopback=True))
    if cert_type == "rsa":   # aiortc offers no public seam for this either; the test peer sets it directly
        pc._RTCPeerConnection__certificates = [OpenSSLDefaultRSACertificate.generate()]
    return pc


async def publish(base: str, cert_type: str, setup: str, frames: int = 1) -> tuple[str, ProbeClient]:
    """WHIP publish with the offer's a=setup rewritten to `setup`; (state reached, client)."""
    bg = np.full((120, 160, 3), 90, np.uint8)
    client = ProbeClient(ClipTrack(bg, frames=300), pc=client_pc(cert_type))
    offer = await client.offer()
    sdp = offer.sdp.replace("a=setup:actpass", f"a=setup:{setup}")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/whip", data=sdp, headers={"Content-Type": "application/sdp"}) as resp:
            assert resp.status == 201, await resp.text()
            answer = await resp.text()
    expected = {"actpass": "passive", "active": "passive", "passive": "active"}[setup]
    assert f"a=setup:{expected}" in answer
    await client.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    for _ in range(150):
        if client.pc.connectionState in ("connected", "failed", "closed"):
            break
        await asyncio.sleep(0.05)
    if client.pc.connectionState == "connected":
        await client.wait_frames(frames, timeout=10)
    return client.pc.connectionState, client


@pytest.fixture
async def base():
    server = TestServer(create_app(ServerConfig(), NullServices()), host="127.0.0.1", port=0)
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


@pytest.mark.parametrize("cert_type", ["ecdsa", "rsa"])
@pytest.mark.parametrize("setup", ["actpass", "active", "passive"])
async def test_every_role_and_certificate_connects(base, cert_type, setup):
    state, client = await publish(base, cert_type, setup)
    try:
        assert state == "connected"
        assert client.received, "no video came back"
    finally:
        await client.close()


async def test_stock_aiortc_choices_fail_with_rsa_and_the_log_says_why(base, monkeypatch, caplog):
    """The control: aiortc's own choices reproduce the reported failure, so the matrix above can fail."""
    monkeypatch.setattr(peer, "answer_passive", lambda pc, sdp: False)
    monkeypatch.setattr(dtls, "CIPHERS", b"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:"
                                         b"ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA")
    caplog.set_level(logging.WARNING, logger="streamer.rtc.dtls")
    bg = np.full((120, 160, 3), 90, np.uint8)
    client = ProbeClient(ClipTrack(bg, frames=300), pc=client_pc("rsa"))
    offer = await client.offer()
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/whip", data=offer.sdp, headers={"Content-Type": "application/sdp"}) as resp:
            answer = await resp.text()
    assert "a=setup:active" in answer
    await client.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    try:
        for _ in range(150):
            if client.pc.connectionState in ("connected", "failed", "closed") and caplog.records:
                break
            await asyncio.sleep(0.05)
        assert client.pc.connectionState != "connected"
        lines = [r.getMessage() for r in caplog.records if r.name == "streamer.rtc.dtls"]
        assert any("DTLS handshake failed as client (active)" in m and "a=setup:actpass" in m
                   and "handshake_failure" in m for m in lines), lines
    finally:
        await client.close()
async def test_use_certificate_refuses_a_connection_with_transports():
    pc = RTCPeerConnection()
    pc.addTransceiver("video")
    with pytest.raises(RuntimeError):
        dtls.use_certificate(pc)


async def test_interop_context_offers_rsa_and_ecdsa_suites():
    cert = dtls.use_certificate(RTCPeerConnection())
    conn = SSL.Connection(cert._create_ssl_context(SRTP_PROFILES))
    names = conn.get_cipher_list()
    assert any("ECDHE-RSA" in n for n in names) and any("ECDHE-ECDSA" in n for n in names)
