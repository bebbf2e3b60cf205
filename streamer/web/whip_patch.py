"""WHIP `PATCH` on a session's resource URL (RFC 9725, section 4.3): trickle ICE, and the answer the RFC
prescribes for what aiortc cannot do.

- The body is an SDP fragment, `application/trickle-ice-sdpfrag` (RFC 8840); any other type is 415.
- The session's entity tag is its ICE session: the server's own `ice-ufrag` from the answer, quoted. It
  is sent as `ETag` in the 201 and changes only with an ICE restart (which never happens here). A PATCH
  whose `If-Match` names another tag is 412 (RFC 9725 4.3.1, RFC 9110 13.1.1).
- Trickle ICE: each `a=candidate` is handed to aiortc's `addIceCandidate`, `a=end-of-candidates` ends the
  remote list (mDNS `.local` candidates are dropped, as in offers); the answer is 204 with no body.
- ICE restart (new `ice-ufrag`/`ice-pwd`, or `If-Match: *`): aiortc has no ICE restart, and a session that
  supports trickle ICE but not ICE restarts answers 422 (RFC 9725 4.3.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiortc import RTCPeerConnection
from aiortc.sdp import candidate_from_sdp

from streamer.web.httpkit import Refused

TRICKLE_TYPE = "application/trickle-ice-sdpfrag"
MAX_CANDIDATES = 64


@dataclass(frozen=True)
class Fragment:
    """What a trickle-ice-sdpfrag body says (RFC 8840 section 9)."""

    ufrag: str | None = None
    pwd: str | None = None
    candidates: tuple[tuple[str | None, str], ...] = field(default_factory=tuple)   # (mid, candidate value)
    end_of_candidates: bool = False


def parse_fragment(text: str) -> Fragment:
    """Read the lines WHIP uses; 400 on a fragment that holds none of them or too many candidates."""
    ufrag = pwd = mid = None
    candidates: list[tuple[str | None, str]] = []
    end = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("a=ice-ufrag:"):
            ufrag = line.split(":", 1)[1].strip()
        elif line.startswith("a=ice-pwd:"):
            pwd = line.split(":", 1)[1].strip()
        elif line.startswith("a=mid:"):
            mid = line.split(":", 1)[1].strip()
        elif line.startswith("a=candidate:"):
            candidates.append((mid, line.split(":", 1)[1].strip()))
        elif line == "a=end-of-candidates":
            end = True
    if len(candidates) > MAX_CANDIDATES:
        raise Refused(400, f"{len(candidates)} candidates in one PATCH; at most {MAX_CANDIDATES}", code="bad_sdpfrag")
    if ufrag is None and pwd is None and not candidates and not end:
        raise Refused(400, "the SDP fragment holds no ICE credentials, candidates or end-of-candidates",
                      code="bad_sdpfrag")
    return Fragment(ufrag, pwd, tuple(candidates), end)


def _sdp_value(sdp: str, attribute: str) -> str | None:
    for line in sdp.splitlines():
        if line.startswith(f"a={attribute}:"):
            return line.split(":", 1)[1].strip()
    return None


def entity_tag(pc: RTCPeerConnection) -> str:
    """The session's ETag: its ICE session, named by the server's ice-ufrag (an opaque quoted string)."""
    local = pc.localDescription
    ufrag = _sdp_value(local.sdp, "ice-ufrag") if local is not None else None
    return f'"{ufrag or "none"}"'


async def apply_patch(pc: RTCPeerConnection, body: str, if_match: str | None) -> None:
    """Trickle the fragment's candidates into `pc`, or refuse as RFC 9725 says (412, 422, 400)."""
    tag = entity_tag(pc)
    if if_match is not None and if_match.strip() != "*" and tag not in [t.strip() for t in if_match.split(",")]:
        raise Refused(412, f"If-Match {if_match!r} does not name this session's ICE session ({tag})",
                      {"ETag": tag}, code="etag_mismatch")
    frag = parse_fragment(body)
    remote_sdp = pc.remoteDescription.sdp if pc.remoteDescription is not None else ""
    new_ufrag = frag.ufrag is not None and frag.ufrag != _sdp_value(remote_sdp, "ice-ufrag")
    new_pwd = frag.pwd is not None and frag.pwd != _sdp_value(remote_sdp, "ice-pwd")
    if (if_match is not None and if_match.strip() == "*") or new_ufrag or new_pwd:
        raise Refused(422, "this session supports trickle ICE but not ICE restarts (aiortc has none); "
                           "start a new session with a new POST", code="ice_restart_unsupported")
    transceivers = pc.getTransceivers()
    default_mid = transceivers[0].mid if transceivers else None
    for mid, value in frag.candidates:
        try:
            candidate = candidate_from_sdp(value)
        except (ValueError, IndexError, AssertionError) as exc:   # aiortc asserts on a short line
            raise Refused(400, f"unreadable candidate {value[:80]!r}: {exc}", code="bad_sdpfrag") from None
        if candidate.ip.endswith(".local"):   # mDNS: resolving it means multicast DNS (see streamer.rtc.ice)
            continue
        candidate.sdpMid = mid if mid is not None else default_mid
        await pc.addIceCandidate(candidate)
    if frag.end_of_candidates:
        await pc.addIceCandidate(None)
