"""DTLS that interoperates with RSA and ECDSA peers in either role, and says why when it does not.

aiortc 1.16 gives every connection an ECDSA certificate and an SSL context whose cipher list is
ECDHE-ECDSA only. In (D)TLS 1.2 the suite's signature algorithm is the *server's* certificate, so when
aiortc is the DTLS client of a peer with an RSA certificate (GStreamer's webrtcbin, and the WHIP
publishers built on it) the peer finds "no shared cipher". Two choices, both made here:

- `answer_passive`: to an offer saying `a=setup:actpass` LiveFuse answers `a=setup:passive`, so it is the
  DTLS server and its own ECDSA certificate picks the suite; every client that offers actpass works
  whatever its certificate (RFC 8842 lets the answerer pick either; browsers answer active, which is why
  aiortc does).
- `InteropCertificate`: the client-side cipher list also carries the ECDHE-RSA suites, for peers that
  insist on being the DTLS server (`a=setup:passive`) with an RSA certificate. As a server with an
  ECDSA key the RSA suites are never chosen, so widening costs nothing.

aiortc has no public way to hand a connection its certificate or answer role, so `use_certificate` and
`answer_passive` each touch one documented private seam (the certificate list the peer connection
creates its transports from; `RTCDtlsTransport._set_role`), checked at import time so an aiortc upgrade
that moves them fails loudly instead of silently going back to active.

`watch_dtls(pc, label, offer_setup)` logs the reason a handshake failed (the alert sent or received, our
role, what the peer offered) as a warning on this module's logger.
"""

from __future__ import annotations

import logging
from typing import Any

from aiortc import RTCCertificate, RTCPeerConnection
from aiortc.rtcdtlstransport import RTCDtlsTransport
from OpenSSL import SSL

__all__ = ["CIPHERS", "InteropCertificate", "answer_passive", "use_certificate", "watch_dtls"]

log = logging.getLogger(__name__)

# ECDSA first (our own certificate); the RSA suites only matter when we are the DTLS client
CIPHERS = (b"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:"
           b"ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:"
           b"ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES256-GCM-SHA384:"
           b"ECDHE-RSA-AES128-SHA:ECDHE-RSA-AES256-SHA")

_CERTS_ATTR = "_RTCPeerConnection__certificates"
if not hasattr(RTCDtlsTransport, "_set_role") or not hasattr(RTCCertificate, "_create_ssl_context"):
    raise ImportError("aiortc moved the DTLS seams streamer.rtc.dtls relies on; see its docstring")

# TLS alert descriptions (RFC 8446 6.2 / RFC 5246 7.2), the ones a failed handshake ends with
_ALERTS = {0: "close_notify", 10: "unexpected_message", 20: "bad_record_mac", 40: "handshake_failure",
           42: "bad_certificate", 43: "unsupported_certificate", 45: "certificate_expired",
           46: "certificate_unknown", 47: "illegal_parameter", 48: "unknown_ca", 50: "decode_error",
           51: "decrypt_error", 70: "protocol_version", 71: "insufficient_security", 80: "internal_error",
           110: "unsupported_extension"}
_HINTS = {"handshake_failure": "no cipher suite or SRTP profile in common (an RSA peer with an ECDSA-only "
                               "client list fails this way)",
          "insufficient_security": "no cipher suite strong enough for both sides"}


class InteropCertificate(RTCCertificate):
    """aiortc's certificate with a cipher list for either certificate type on the other side, and a
    record of the TLS alerts its handshakes sent and received (for `watch_dtls`)."""

    def __init__(self, key: Any, cert: Any) -> None:
        super().__init__(key, cert)
        self.alerts: list[str] = []

    def _create_ssl_context(self, srtp_profiles: list[Any]) -> SSL.Context:
        ctx = super()._create_ssl_context(srtp_profiles)
        ctx.set_cipher_list(CIPHERS)
        ctx.set_info_callback(self._info)
        return ctx

    def _info(self, conn: SSL.Connection, where: int, ret: int) -> None:
        if where & SSL.SSL_CB_ALERT:
            level = "fatal" if ret >> 8 == 2 else "warning"
            name = _ALERTS.get(ret & 0xFF, f"alert {ret & 0xFF}")
            if name != "close_notify":
                way = "sent" if where & SSL.SSL_CB_WRITE else "received"
                self.alerts.append(f"{way} {level} alert {name}")


def use_certificate(pc: RTCPeerConnection, certificate: RTCCertificate | None = None) -> RTCCertificate:
    """Give a new connection (before any transceiver or remote description) `certificate`, by default a
    fresh ECDSA `InteropCertificate`."""
    if pc.getTransceivers() or pc.sctp is not None:
        raise RuntimeError("use_certificate must run before the connection has transports")
    if certificate is None:
        base = RTCCertificate.generateCertificate()
        certificate = InteropCertificate(base._key, base._cert)
    if not isinstance(getattr(pc, _CERTS_ATTR, None), list):
        raise RuntimeError("aiortc's RTCPeerConnection no longer keeps its certificates where streamer.rtc.dtls expects")
    setattr(pc, _CERTS_ATTR, [certificate])
    return certificate


def _transports(pc: RTCPeerConnection) -> list[RTCDtlsTransport]:
    out = [t.receiver.transport for t in pc.getTransceivers()]
    if pc.sctp is not None:
        out.append(pc.sctp.transport)
    return list({id(t): t for t in out}.values())


def answer_passive(pc: RTCPeerConnection, offer_setup: str) -> bool:
    """After setRemoteDescription(offer), before createAnswer: to `actpass` (the offer's a=setup, as
    `offer_limits.check_offer` read it) be the DTLS server (the answer then says `a=setup:passive`). True
    when the role was chosen here; other offers keep aiortc's rule (active -> we are server, passive -> we
    are client)."""
    if offer_setup != "actpass":
        return False
    for transport in _transports(pc):
        if transport._role == "auto":
            transport._set_role("server")
    return True


def watch_dtls(pc: RTCPeerConnection, label: str, setup: str | None) -> None:
    """Log a warning with the reason when a DTLS handshake of `pc` fails; debug when it succeeds."""
    for transport in _transports(pc):
        def changed(t: RTCDtlsTransport = transport) -> None:
            if t.state not in ("connected", "failed"):
                return
            cert = next((c for c in getattr(pc, _CERTS_ATTR, []) if isinstance(c, InteropCertificate)), None)
            alerts = ", ".join(cert.alerts) if cert is not None and cert.alerts else "no TLS alert (timeout, "\
                "fingerprint mismatch or no SRTP profile)"
            role = "server (passive)" if t._role == "server" else "client (active)"
            if t.state == "failed":
                hint = next((h for k, h in _HINTS.items() if k in alerts), "")
                log.warning("%s: DTLS handshake failed as %s, peer offered a=setup:%s: %s%s", label, role,
                            setup, alerts, f" ({hint})" if hint else "")
            else:
                log.debug("%s: DTLS connected as %s", label, role)

        transport.on("statechange", changed)
