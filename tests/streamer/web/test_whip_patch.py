"""WHIP PATCH (RFC 9725 4.3) against the real server with a real aiortc publisher: a trickle client that
POSTs its offer without candidates and PATCHes them after connects, its trickled candidate reaches the
server's ICE agent, and the answers the RFC prescribes: 204 for trickle, 422 for an ICE restart (aiortc has
none), 412 for a stale If-Match, 415 for another body type, 400 for a fragment that says nothing."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from aiortc import RTCPeerConnection, RTCSessionDescription

from bench._probe import ClipTrack, clip_background
from streamer.config import ServerConfig
from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration
from streamer.web.server import SERVER_KEY, create_app
from streamer.services import NullServices
from tests.streaming_helpers import until

FRAG = "application/trickle-ice-sdpfrag"


def _split_candidates(sdp: str) -> tuple[str, list[str]]:
    lines = sdp.splitlines()
    return "\r\n".join(l for l in lines if not l.startswith("a=candidate:") and l != "a=end-of-candidates") + "\r\n", \
        [l for l in lines if l.startswith("a=candidate:")]


def _value(sdp: str, attribute: str) -> str:
    return next(l.split(":", 1)[1] for l in sdp.splitlines() if l.startswith(f"a={attribute}:"))


@pytest.mark.timeout(90)
async def test_trickled_candidates_connect_a_session_and_ice_restart_gets_422(astronaut):
    app = create_app(ServerConfig(), NullServices())
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    state = app[SERVER_KEY]
    pc = RTCPeerConnection(rtc_configuration(loopback=True))
    pc.addTrack(ClipTrack(clip_background(astronaut, 320, 240), fps=15))
    try:
        async with aiohttp.ClientSession() as http:
            with gathering_on(LOOPBACK_ADDRESSES):
                await pc.setLocalDescription(await pc.createOffer())
            offer, candidates = _split_candidates(pc.localDescription.sdp)
            assert candidates
            async with http.post(f"{url}/whip", data=offer, headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 201, await r.text()
                answer, location, etag = await r.text(), r.headers["Location"], r.headers["ETag"]
                assert r.headers["Accept-Patch"] == FRAG
            await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
            sid = location.rsplit("/", 1)[1]
            ice = state.peers[sid].pc.getTransceivers()[0].receiver.transport.transport._connection
            assert not [c for c in ice.remote_candidates if c.type == "host"]
            ufrag, pwd = _value(offer, "ice-ufrag"), _value(offer, "ice-pwd")
            frag = f"a=ice-ufrag:{ufrag}\r\na=ice-pwd:{pwd}\r\nm=audio 9 RTP/AVP 0\r\na=mid:0\r\n" + \
                "\r\n".join(candidates) + "\r\na=end-of-candidates\r\n"
            async with http.patch(f"{url}{location}", data=frag, headers={"Content-Type": FRAG, "If-Match": etag}) as r:
                assert r.status == 204 and await r.read() == b""
                assert r.headers["ETag"] == etag
            sent_ports = {int(c.split()[5]) for c in candidates}
            assert {c.port for c in ice.remote_candidates if c.type == "host"} & sent_ports
            await until(lambda: state.peers[sid].stats.frames_in >= 5, 30, "frames after the trickled candidates")

            # ICE restart: new credentials (If-Match: * as RFC 9725 4.4 has it) -> 422, the session goes on
            restart = "a=ice-ufrag:fresh\r\na=ice-pwd:freshfreshfreshfreshfresh\r\nm=audio 9 RTP/AVP 0\r\na=mid:0\r\n"
            async with http.patch(f"{url}{location}", data=restart, headers={"Content-Type": FRAG, "If-Match": "*"}) as r:
                assert r.status == 422
                assert (await r.json())["code"] == "ice_restart_unsupported"
            async with http.patch(f"{url}{location}", data=restart, headers={"Content-Type": FRAG}) as r:
                assert r.status == 422
            async with http.patch(f"{url}{location}", data=frag, headers={"Content-Type": FRAG, "If-Match": '"stale"'}) as r:
                assert r.status == 412 and r.headers["ETag"] == etag
            async with http.patch(f"{url}{location}", data=frag, headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 415
            async with http.patch(f"{url}{location}", data="v=0\r\n", headers={"Content-Type": FRAG}) as r:
                assert r.status == 400
            bad = f"a=ice-ufrag:{ufrag}\r\na=ice-pwd:{pwd}\r\na=candidate:garbage\r\n"
            async with http.patch(f"{url}{location}", data=bad, headers={"Content-Type": FRAG}) as r:
                assert r.status == 400
            async with http.patch(f"{url}/whip/no-such-id", data=frag, headers={"Content-Type": FRAG}) as r:
                assert r.status == 404
            assert sid in state.peers and state.peers[sid].pc.connectionState == "connected"
            async with http.delete(f"{url}{location}") as r:
                assert r.status == 200
    finally:
        await pc.close()
        await server.close()
