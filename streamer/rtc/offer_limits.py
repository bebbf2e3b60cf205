"""A cheap look at an SDP offer before aiortc parses it.

aiortc's parser runs on the event loop and its cost grows with the product of some line counts: a 47 KB
offer with 600 video sections holds the loop for 2.7 s, and one section with 1500 a=rtpmap and 3000
a=rtcp-fb lines for 4 s, freezing every other session. Offers that cannot lead to a secure WebRTC call
(plain RTP, no or a weak DTLS fingerprint, no ICE credentials) are also refused here, with a reason a
client developer can act on, instead of failing later inside aiortc or in the DTLS handshake.

One pass over the lines, a fraction of a millisecond for any offer within the size limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MAX_BYTES = 64 * 1024   # ServerConfig.max_sdp_bytes; a browser's offer is 3-10 KB
DEFAULT_MAX_MEDIA = 8           # audio + video + data channel is 3; room for simulcast-free extra tracks

RTP_PROTOCOL = "UDP/TLS/RTP/SAVPF"
SCTP_PROTOCOLS = ("UDP/DTLS/SCTP", "DTLS/SCTP")   # the second from older browsers; aiortc takes both
FINGERPRINT_BYTES = {"sha-256": 32, "sha-384": 48, "sha-512": 64}   # what aiortc can check
SETUP_VALUES = ("actpass", "active", "passive")

_M_LINE = re.compile(r"m=([a-z]+) ([0-9]{1,5})(?:/[0-9]+)? ([A-Za-z/]+) (\S.*)", re.ASCII)
_ICE_CHARS = re.compile(r"[A-Za-z0-9+/]+", re.ASCII)
_HEX_PAIRS = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2})*", re.ASCII)


@dataclass(frozen=True, slots=True)
class OfferLimits:
    """Line counts that keep aiortc's parse (and the ICE work after it) small. A browser's video section
    has about 40 payload types, 100 a=rtcp-fb lines, 4 a=ssrc lines and a few candidates."""

    max_formats: int = 64        # payload types on one m-line, and a=rtpmap lines in one section
    max_feedback: int = 512      # a=rtcp-fb lines in the whole offer (aiortc adds each to every codec)
    max_ssrc: int = 64           # a=ssrc lines in one section (aiortc searches them all for each)
    max_candidates: int = 64     # a=candidate lines in one section


class OfferRefused(ValueError):
    """The offer will not be handed to aiortc. `reason` says what is wrong in a client developer's words;
    `code` is stable, for metrics and clients."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(slots=True)
class _Section:
    index: int
    kind: str
    protocol: str
    ufrag: str | None = None
    pwd: str | None = None
    fingerprints: int = 0
    setup: str | None = None
    rtcp_mux: bool = False
    rtpmaps: int = 0
    ssrcs: int = 0
    candidates: int = 0

    @property
    def name(self) -> str:
        return f"media section {self.index} ({self.kind})"


def check_offer(sdp: str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_media: int = DEFAULT_MAX_MEDIA,
                limits: OfferLimits = OfferLimits()) -> str:
    """The offer's DTLS setup (`actpass`, `active` or `passive`, its first media section's) when `sdp` is
    an offer worth giving to aiortc; OfferRefused saying why it is not."""
    if not isinstance(sdp, str):
        raise OfferRefused("not_sdp", f"the offer must be SDP text, not {type(sdp).__name__}")
    size = len(sdp) if len(sdp) > max_bytes else len(sdp.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise OfferRefused("too_large", f"the offer is {size} bytes; at most {max_bytes} are accepted")
    lines = sdp.splitlines()  # what aiortc splits on, so both see the same lines
    first = next((line for line in lines if line.strip()), "")
    if first.strip() != "v=0":
        raise OfferRefused("not_sdp", "the offer is not SDP: it must start with the line v=0")
    media_count = sum(1 for line in lines if line.startswith("m="))
    if media_count > max_media:
        raise OfferRefused("too_many_media", f"the offer has {media_count} media sections (m= lines); at most "
                           f"{max_media} are accepted (audio, video and a data channel need 3)")
    if media_count == 0:
        raise OfferRefused("no_video", "the offer has no media sections (m= lines); it needs a video one")

    session = _Section(0, "session", "")
    sections: list[_Section] = []
    feedback = 0
    current = session
    for line in lines:
        if line.startswith("m="):
            current = _media_line(line, len(sections) + 1, limits)
            sections.append(current)
        elif line.startswith("a="):
            name, _, value = line[2:].partition(":")
            if name == "fingerprint":
                _fingerprint(value, current)
                current.fingerprints += 1
            elif name == "ice-ufrag":
                current.ufrag = _ice_credential(value, "ice-ufrag", 4, current)
            elif name == "ice-pwd":
                current.pwd = _ice_credential(value, "ice-pwd", 22, current)
            elif name == "setup":
                if value.strip() not in SETUP_VALUES:
                    raise OfferRefused("bad_dtls", f"{_where(current)}: a=setup:{value[:20]} is not one of "
                                       f"{', '.join(SETUP_VALUES)} (an offer sends actpass)")
                current.setup = value.strip()
            elif name == "rtcp-mux":
                current.rtcp_mux = True
            elif name == "rtpmap":
                current.rtpmaps += 1
                _at_most(current.rtpmaps, limits.max_formats, "a=rtpmap lines", current)
            elif name == "rtcp-fb":
                feedback += 1
                if feedback > limits.max_feedback:
                    raise OfferRefused("too_complex", f"the offer has more than {limits.max_feedback} "
                                       "a=rtcp-fb lines; that many cannot be parsed quickly")
            elif name == "ssrc":
                current.ssrcs += 1
                _at_most(current.ssrcs, limits.max_ssrc, "a=ssrc lines", current)
            elif name == "candidate":
                current.candidates += 1
                _at_most(current.candidates, limits.max_candidates, "a=candidate lines", current)

    if not any(s.kind == "video" for s in sections):
        kinds = ", ".join(s.kind for s in sections)
        raise OfferRefused("no_video", f"the offer has no video section (it has: {kinds}); LiveFuse filters "
                           "a camera stream, so add a video transceiver (sendrecv, or recvonly to watch)")
    for s in sections:
        if not (s.ufrag or session.ufrag) or not (s.pwd or session.pwd):
            raise OfferRefused("no_ice", f"{s.name} has no a=ice-ufrag / a=ice-pwd (at its level or the "
                               "session's); ICE cannot run without them")
        if not (s.fingerprints or session.fingerprints):
            raise OfferRefused("no_fingerprint", f"{s.name} has no a=fingerprint; DTLS needs the certificate's "
                               "fingerprint (sha-256, sha-384 or sha-512)")
        if not (s.setup or session.setup):
            raise OfferRefused("bad_dtls", f"{s.name} has no a=setup; an offer sends a=setup:actpass")
        if s.kind in ("audio", "video") and not s.rtcp_mux:
            raise OfferRefused("no_rtcp_mux", f"{s.name} has no a=rtcp-mux; WebRTC sends RTP and RTCP on one port")
    return sections[0].setup or session.setup


def _media_line(line: str, index: int, limits: OfferLimits) -> _Section:
    m = _M_LINE.fullmatch(line.strip())
    if m is None:
        raise OfferRefused("bad_media", f"media section {index}: {line[:60]!r} is not 'm=<media> <port> "
                           "<protocol> <formats>'")
    kind, protocol, formats = m.group(1), m.group(3), m.group(4).split()
    section = _Section(index, kind, protocol)
    if kind in ("audio", "video"):
        if protocol != RTP_PROTOCOL:
            raise OfferRefused("bad_protocol", f"{section.name} uses {protocol[:30]}; WebRTC media must use "
                               f"{RTP_PROTOCOL} (RTP encrypted with DTLS-SRTP)")
        bad = next((f for f in formats if not (f.isascii() and f.isdigit() and int(f) <= 127)), None)
        if bad is not None:
            raise OfferRefused("bad_media", f"{section.name}: payload type {bad[:12]!r} is not a number from 0 to 127")
        _at_most(len(formats), limits.max_formats, "payload types", section)
    elif kind == "application":
        if protocol not in SCTP_PROTOCOLS:
            raise OfferRefused("bad_protocol", f"{section.name} uses {protocol[:30]}; a data channel must use "
                               f"{SCTP_PROTOCOLS[0]}")
    else:
        raise OfferRefused("bad_media", f"media section {index} is {kind[:20]!r}; only audio, video and "
                           "application (a data channel) are accepted")
    return section


def _fingerprint(value: str, where: _Section) -> None:
    algorithm, _, digest = value.strip().partition(" ")
    algorithm = algorithm.lower()
    if algorithm not in FINGERPRINT_BYTES:
        raise OfferRefused("weak_fingerprint", f"{_where(where)}: fingerprint algorithm {algorithm[:20]!r} is not "
                           "accepted; use sha-256, sha-384 or sha-512 (md5 and sha-1 are broken)")
    digest = digest.strip()
    if not _HEX_PAIRS.fullmatch(digest) or len(digest) != 3 * FINGERPRINT_BYTES[algorithm] - 1:
        raise OfferRefused("bad_fingerprint", f"{_where(where)}: the {algorithm} fingerprint must be "
                           f"{FINGERPRINT_BYTES[algorithm]} hex byte pairs separated by ':'")


def _ice_credential(value: str, name: str, shortest: int, where: _Section) -> str:
    value = value.strip()
    if not shortest <= len(value) <= 256 or not _ICE_CHARS.fullmatch(value):
        raise OfferRefused("no_ice", f"{_where(where)}: a={name} must be {shortest} to 256 characters of "
                           "letters, digits, '+' or '/'")
    return value


def _at_most(count: int, limit: int, what: str, where: _Section) -> None:
    if count > limit:
        raise OfferRefused("too_complex", f"{_where(where)} has more than {limit} {what}")


def _where(section: _Section) -> str:
    return "the session part of the offer" if section.index == 0 else section.name
