"""Offers from real WebRTC stacks pass the pre-check; variants that would stall aiortc's parser or cannot
make a secure call are refused, quickly, with a reason that names the problem."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from aiortc import RTCPeerConnection
from aiortc.sdp import SessionDescription

from streamer.rtc.offer_limits import OfferRefused, check_offer

# The shape of a Chromium 12x offer (audio + video + data channel, unified plan, mDNS host candidate),
# trimmed to a few codecs; aiortc's parser accepts it (checked below).
CHROMIUM_OFFER = "\r\n".join([
    "v=0",
    "o=- 4611731400430051336 2 IN IP4 127.0.0.1",
    "s=-",
    "t=0 0",
    "a=group:BUNDLE 0 1 2",
    "a=extmap-allow-mixed",
    "a=msid-semantic: WMS 7f3c2a",
    "m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126",
    "c=IN IP4 0.0.0.0",
    "a=rtcp:9 IN IP4 0.0.0.0",
    "a=candidate:1467250027 1 udp 2122260223 4b7e7c5e-8a1c-4c3e-9f0e-2d6f0a7c9b11.local 54321 typ host generation 0 network-id 1",
    "a=ice-ufrag:8hhY",
    "a=ice-pwd:UVfD7ONtqE1o2VlCk5d3Ep5r",
    "a=ice-options:trickle",
    "a=fingerprint:sha-256 D2:FA:0E:C3:22:59:5E:14:95:69:92:3D:13:B4:84:24:2C:C2:A2:C0:3E:FD:34:8E:5E:EA:6F:AF:52:CE:E6:0F",
    "a=setup:actpass",
    "a=mid:0",
    "a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level",
    "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time",
    "a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid",
    "a=sendrecv",
    "a=msid:7f3c2a 1b2c3d4e-aaaa-bbbb-cccc-000000000001",
    "a=rtcp-mux",
    "a=rtcp-rsize",
    "a=rtpmap:111 opus/48000/2",
    "a=rtcp-fb:111 transport-cc",
    "a=fmtp:111 minptime=10;useinbandfec=1",
    "a=rtpmap:63 red/48000/2",
    "a=fmtp:63 111/111",
    "a=rtpmap:9 G722/8000",
    "a=rtpmap:0 PCMU/8000",
    "a=rtpmap:8 PCMA/8000",
    "a=rtpmap:13 CN/8000",
    "a=rtpmap:110 telephone-event/48000",
    "a=rtpmap:126 telephone-event/8000",
    "a=ssrc:1001 cname:Qs9zPlbhTz4nJYkh",
    "a=ssrc:1001 msid:7f3c2a 1b2c3d4e-aaaa-bbbb-cccc-000000000001",
    "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103 45 46",
    "c=IN IP4 0.0.0.0",
    "a=rtcp:9 IN IP4 0.0.0.0",
    "a=ice-ufrag:8hhY",
    "a=ice-pwd:UVfD7ONtqE1o2VlCk5d3Ep5r",
    "a=ice-options:trickle",
    "a=fingerprint:sha-256 D2:FA:0E:C3:22:59:5E:14:95:69:92:3D:13:B4:84:24:2C:C2:A2:C0:3E:FD:34:8E:5E:EA:6F:AF:52:CE:E6:0F",
    "a=setup:actpass",
    "a=mid:1",
    "a=extmap:14 urn:ietf:params:rtp-hdrext:toffset",
    "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time",
    "a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid",
    "a=sendrecv",
    "a=msid:7f3c2a 1b2c3d4e-aaaa-bbbb-cccc-000000000002",
    "a=rtcp-mux",
    "a=rtcp-rsize",
    "a=rtpmap:96 VP8/90000",
    "a=rtcp-fb:96 goog-remb",
    "a=rtcp-fb:96 transport-cc",
    "a=rtcp-fb:96 ccm fir",
    "a=rtcp-fb:96 nack",
    "a=rtcp-fb:96 nack pli",
    "a=rtpmap:97 rtx/90000",
    "a=fmtp:97 apt=96",
    "a=rtpmap:102 H264/90000",
    "a=rtcp-fb:102 goog-remb",
    "a=rtcp-fb:102 transport-cc",
    "a=rtcp-fb:102 ccm fir",
    "a=rtcp-fb:102 nack",
    "a=rtcp-fb:102 nack pli",
    "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f",
    "a=rtpmap:103 rtx/90000",
    "a=fmtp:103 apt=102",
    "a=rtpmap:45 AV1/90000",
    "a=rtcp-fb:45 goog-remb",
    "a=rtcp-fb:45 transport-cc",
    "a=rtcp-fb:45 ccm fir",
    "a=rtcp-fb:45 nack",
    "a=rtcp-fb:45 nack pli",
    "a=fmtp:45 level-idx=5;profile=0;tier=0",
    "a=rtpmap:46 rtx/90000",
    "a=fmtp:46 apt=45",
    "a=ssrc-group:FID 2001 2002",
    "a=ssrc:2001 cname:Qs9zPlbhTz4nJYkh",
    "a=ssrc:2001 msid:7f3c2a 1b2c3d4e-aaaa-bbbb-cccc-000000000002",
    "a=ssrc:2002 cname:Qs9zPlbhTz4nJYkh",
    "a=ssrc:2002 msid:7f3c2a 1b2c3d4e-aaaa-bbbb-cccc-000000000002",
    "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
    "c=IN IP4 0.0.0.0",
    "a=ice-ufrag:8hhY",
    "a=ice-pwd:UVfD7ONtqE1o2VlCk5d3Ep5r",
    "a=ice-options:trickle",
    "a=fingerprint:sha-256 D2:FA:0E:C3:22:59:5E:14:95:69:92:3D:13:B4:84:24:2C:C2:A2:C0:3E:FD:34:8E:5E:EA:6F:AF:52:CE:E6:0F",
    "a=setup:actpass",
    "a=mid:2",
    "a=sctp-port:5000",
    "a=max-message-size:262144",
    "",
])


async def _aiortc_offer(*kinds: str, channel: bool = False) -> str:
    pc = RTCPeerConnection()
    try:
        for kind in kinds:
            pc.addTransceiver(kind, direction="sendrecv")
        if channel:
            pc.createDataChannel("control")
        await pc.setLocalDescription(await pc.createOffer())
        return pc.localDescription.sdp
    finally:
        await pc.close()


@pytest.fixture(scope="module")
def offers() -> dict[str, str]:
    async def make():
        return {"video": await _aiortc_offer("video"),
                "video+channel": await _aiortc_offer("video", channel=True),
                "audio+video+channel": await _aiortc_offer("audio", "video", channel=True),
                "channel": await _aiortc_offer(channel=True),
                "audio": await _aiortc_offer("audio")}
    return asyncio.run(make())


def _refused(sdp: str, code: str, *words: str, **kw) -> OfferRefused:
    with pytest.raises(OfferRefused) as err:
        check_offer(sdp, **kw)
    assert err.value.code == code, err.value.reason
    for w in words:
        assert w in err.value.reason, err.value.reason
    return err.value


def _drop(sdp: str, prefix: str) -> str:
    return "".join(line for line in sdp.splitlines(keepends=True) if not line.startswith(prefix))


@pytest.mark.parametrize("name", ["video", "video+channel", "audio+video+channel"])
def test_offers_from_aiortc_pass(offers, name):
    check_offer(offers[name])


def test_a_chromium_style_offer_with_three_sections_passes():
    assert len(SessionDescription.parse(CHROMIUM_OFFER).media) == 3  # aiortc reads it as well
    check_offer(CHROMIUM_OFFER)


def test_too_large(offers):
    big = offers["video"] + "a=x-padding:" + "p" * 70_000 + "\r\n"
    _refused(big, "too_large", "bytes", "65536")
    _refused(offers["video"], "too_large", "1000", max_bytes=1000)


def test_hundreds_of_media_sections_are_refused_at_once(offers):
    """The issue's 47 KB offer: 600 small video sections, 2.7 s of aiortc parsing on the event loop."""
    head, _, rest = offers["video"].partition("m=video")
    video = "m=video" + rest
    small = "".join(f"m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtcp-mux\r\na=mid:{i}\r\na=rtpmap:96 VP8/90000\r\n"
                    for i in range(1, 600))
    flood = head + video + small
    assert len(flood) < 64 * 1024
    t = time.perf_counter()
    _refused(flood, "too_many_media", "600 media sections", "at most 8")
    assert time.perf_counter() - t < 0.05
    _refused(flood.replace("\r\nm=", "\x1cm="), "too_many_media")  # aiortc also splits on \x1c
    check_offer(head + video * 8)  # 8 is still fine


def test_many_codecs_times_many_feedback_lines_are_refused_quickly(offers):
    codecs = "".join(f"a=rtpmap:{96 + i % 30} VP8/90000\r\n" for i in range(1500))
    bomb = offers["video"] + codecs + "a=rtcp-fb:* nack\r\n" * 1500
    t = time.perf_counter()
    _refused(bomb, "too_complex", "a=rtpmap", max_bytes=1 << 20)
    _refused(offers["video"] + "a=rtcp-fb:* nack\r\n" * 600, "too_complex", "a=rtcp-fb")
    _refused(offers["video"] + "".join(f"a=ssrc:{i} cname:x\r\n" for i in range(100)), "too_complex", "a=ssrc")
    assert time.perf_counter() - t < 0.05


def test_no_fingerprint(offers):
    _refused(_drop(offers["video"], "a=fingerprint"), "no_fingerprint", "media section 1 (video)", "a=fingerprint")


def test_md5_fingerprint_is_refused(offers):
    md5 = "a=fingerprint:md5 " + ":".join(["AB"] * 16) + "\r\n"
    sdp = _drop(offers["video"], "a=fingerprint").replace("a=setup:", md5 + "a=setup:")
    _refused(sdp, "weak_fingerprint", "'md5'", "sha-256")
    _refused(offers["video"].replace("a=setup:", md5 + "a=setup:"), "weak_fingerprint")  # even beside a good one


def test_malformed_fingerprint(offers):
    sdp = re.sub(r"a=fingerprint:sha-256 \S+", "a=fingerprint:sha-256 12:34", offers["video"])
    _refused(sdp, "bad_fingerprint", "32 hex byte pairs")


def test_plain_rtp_is_refused(offers):
    _refused(offers["video"].replace("UDP/TLS/RTP/SAVPF", "RTP/AVP"), "bad_protocol", "RTP/AVP", "UDP/TLS/RTP/SAVPF")
    _refused(offers["video+channel"].replace("UDP/DTLS/SCTP", "TCP/SCTP"), "bad_protocol", "data channel")


@pytest.mark.parametrize("name", ["channel", "audio"])
def test_an_offer_without_video_is_refused(offers, name):
    _refused(offers[name], "no_video", "no video section", "video transceiver")


@pytest.mark.parametrize("attribute", ["a=ice-ufrag", "a=ice-pwd"])
def test_missing_ice_credentials(offers, attribute):
    _refused(_drop(offers["video"], attribute), "no_ice", "a=ice-ufrag / a=ice-pwd")


def test_ice_credentials_at_session_level_count(offers):
    creds = "a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuv\r\n"
    moved = _drop(_drop(offers["video"], "a=ice-ufrag"), "a=ice-pwd").replace("m=video", creds + "m=video", 1)
    check_offer(moved)
    _refused(moved.replace("a=ice-pwd:abcdefghijklmnopqrstuv", "a=ice-pwd:short"), "no_ice", "22 to 256")


@pytest.mark.parametrize("sdp, code, words", [
    ("hello", "not_sdp", ("v=0",)),
    ("", "not_sdp", ("v=0",)),
    ("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n", "no_video", ("no media sections",)),
    ("v=0\r\nm=video\r\n", "bad_media", ("m=<media> <port> <protocol> <formats>",)),
    ("v=0\r\nm=text 9 UDP/TLS/RTP/SAVPF 96\r\n", "bad_media", ("'text'",)),
    ("v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96 300\r\n", "bad_media", ("'300'",)),
])
def test_what_is_not_an_offer(sdp, code, words):
    _refused(sdp, code, *words)
    with pytest.raises(OfferRefused, match="SDP text"):
        check_offer(b"v=0")  # type: ignore[arg-type]


def test_rtcp_mux_and_setup_are_required(offers):
    _refused(_drop(offers["video"], "a=rtcp-mux"), "no_rtcp_mux", "a=rtcp-mux")
    _refused(_drop(offers["video"], "a=setup"), "bad_dtls", "a=setup:actpass")
    _refused(offers["video"].replace("a=setup:actpass", "a=setup:bogus"), "bad_dtls", "bogus")


def test_a_browser_sized_offer_is_checked_in_well_under_a_millisecond():
    t = time.perf_counter()
    for _ in range(100):
        check_offer(CHROMIUM_OFFER)
    assert (time.perf_counter() - t) / 100 < 1e-3


def test_the_offer_setup_is_returned():
    """The DTLS role LiveFuse answers with (streamer.rtc.dtls.answer_passive) follows the setup read here."""
    assert check_offer(CHROMIUM_OFFER) == "actpass"
    assert check_offer(CHROMIUM_OFFER.replace("a=setup:actpass", "a=setup:active", 1)) == "active"
