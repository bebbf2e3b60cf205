"""The VTube Studio client against a fake VTS that follows the published plugin API (tests/vts_fake.py):
the token asked for once and kept, parameters at the frame rate and every half second when still, a
restarted app reconnected with the same token, a denied plugin that stops and says so, a revoked token
asked for again."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from engines.face_rig import ARKIT_NAMES, FaceFrame
from streamer.sinks.vtube_studio import PARAMETERS, TokenFile, VtsClient, VtsSettings, vts_parameters
from tests.vts_fake import FakeVts, VtsApp


def frame(t: float, yaw: float = 10.0, blink_left: float = 0.0) -> FaceFrame:
    scores = np.zeros(len(ARKIT_NAMES))
    scores[ARKIT_NAMES.index("eyeBlinkLeft")] = blink_left
    scores[ARKIT_NAMES.index("jawOpen")] = 0.4
    return FaceFrame(t=t, found=True, track_id=1, scores=scores, yaw=yaw, pitch=-5.0, roll=2.0,
                     quaternion=(0.0, 0.087, 0.0, 0.996), position=(0.01, 0.0, 0.0), gaze=(3.0, 0.0, 3.0, 0.0))


async def _feed(client: VtsClient, seconds: float, fps: float = 60.0, t0: float = 0.0) -> float:
    """Frames at `fps` for `seconds` (the frame thread's part, here on the test's loop)."""
    t = t0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        client.offer(frame(t))
        t += 1.0 / fps
        await asyncio.sleep(1.0 / fps)
    return t


async def _until(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        await asyncio.sleep(0.02)
    return cond()


def _rate(app: VtsApp, since: float) -> float:
    stamps = [t for t, _ in app.injects if t >= since]
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 2 else 0.0


async def test_parameters_at_frame_rate_keepalive_and_a_restarted_app(tmp_path):
    app = VtsApp()
    vts = await FakeVts(app).start()
    tokens = tmp_path / "tokens.json"
    client = VtsClient(vts.url, VtsSettings(token_file=str(tokens)))
    try:
        assert await _until(lambda: client.state == "live", 5.0), client.status()
        t = await _feed(client, 0.4)
        since = time.monotonic()
        t = await _feed(client, 1.0, t0=t)
        assert _rate(app, since) >= 30.0, _rate(app, since)
        assert app.token_requests == 1 and app.errors == []
        _, data = app.injects[-1]
        assert data["mode"] == "set" and data["faceFound"] is True
        assert [p["id"] for p in data["parameterValues"]] == list(PARAMETERS)
        assert json.loads(tokens.read_text()) == {vts.url: next(iter(app.tokens))}
        assert oct(tokens.stat().st_mode & 0o777) == "0o600"

        # still: no new frames; the last values go again at least every second, face not found
        count = len(app.injects)
        await asyncio.sleep(1.2)
        late = app.injects[count:]
        assert len(late) >= 2 and all(d["faceFound"] is False for _, d in late)

        # VTS quits and starts again on its port: the client comes back with its stored token
        await vts.stop()
        await asyncio.sleep(0.3)
        assert await _until(lambda: client.state != "live", 3.0)
        restarted_at = time.monotonic()
        vts = await FakeVts(app, port=vts.port).start()
        feeding = asyncio.ensure_future(_feed(client, 6.0, t0=t))
        try:
            assert await _until(lambda: app.injects and app.injects[-1][0] > restarted_at, 5.0), client.status()
        finally:
            feeding.cancel()
        assert app.token_requests == 1 and client.connects == 2
    finally:
        client.close()
        await vts.stop()


async def test_a_denied_plugin_stops_and_says_so(tmp_path):
    app = VtsApp(deny=True)
    vts = await FakeVts(app).start()
    client = VtsClient(vts.url, VtsSettings(token_file=str(tmp_path / "t.json")))
    try:
        assert await _until(lambda: client.state == "denied", 5.0), client.status()
        assert "denied" in (client.error or "") and app.injects == []
        await asyncio.sleep(0.5)
        assert app.token_requests == 1          # one popup, not a popup every retry
        assert not (tmp_path / "t.json").exists()
    finally:
        client.close()
        await vts.stop()


async def test_a_revoked_token_is_asked_for_again(tmp_path):
    app = VtsApp()
    vts = await FakeVts(app).start()
    tokens = TokenFile(tmp_path / "t.json")
    tokens.put(vts.url, "revoked-token")
    client = VtsClient(vts.url, VtsSettings(token_file=str(tokens.path)))
    try:
        assert await _until(lambda: client.state == "live", 5.0), client.status()
        await _feed(client, 0.3)
        assert app.auth_requests == 2 and app.token_requests == 1 and app.injects
        assert tokens.get(vts.url) in app.tokens
    finally:
        client.close()
        await vts.stop()


async def test_nothing_listening_is_retried_without_error_to_the_caller(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = VtsClient(f"ws://127.0.0.1:{port}", VtsSettings(token_file=str(tmp_path / "t.json")))
    try:
        client.offer(frame(0.0))
        assert await _until(lambda: client.state == "disconnected" and client.error, 5.0)
        app = VtsApp()
        vts = await FakeVts(app, port=port).start()
        try:
            assert await _until(lambda: client.state == "live", 6.0), client.status()
        finally:
            await vts.stop()
    finally:
        client.close()


def test_parameter_mapping_ranges_and_mirror():
    f = frame(0.0, yaw=45.0, blink_left=1.0)
    mirrored = {p["id"]: p["value"] for p in vts_parameters(f)}
    plain = {p["id"]: p["value"] for p in vts_parameters(f, mirror=False)}
    assert mirrored["FaceAngleX"] == 30.0 and plain["FaceAngleX"] == -30.0   # clipped to VTS's range
    assert mirrored["EyeOpenRight"] == 0.0 and mirrored["EyeOpenLeft"] == 1.0  # the user's left eye: the mirror's right
    assert plain["EyeOpenLeft"] == 0.0 and plain["EyeOpenRight"] == 1.0
    assert mirrored["MouthOpen"] == pytest.approx(0.4) and mirrored["MouthSmile"] == pytest.approx(0.5)
    assert mirrored["FaceAngleY"] == 5.0   # pitch -5 (chin up) reads as up
    for p in vts_parameters(f):
        assert -30.0 <= p["value"] <= 30.0 or p["id"] == "FaceAngleZ"


def test_refuses_an_address_that_is_not_a_websocket():
    with pytest.raises(ValueError, match="ws://"):
        VtsClient("http://localhost:8001")


@pytest.mark.parametrize("size", [5, 1500, 70000])
def test_a_live_frame_written_by_hand_is_what_a_websocket_server_reads(size):
    """The live client writes its text frames itself (header, fresh mask, masked payload); websockets'
    own parser, on the server's side, reads each back as one whole text message."""
    from websockets.frames import Frame, Opcode
    from websockets.streams import StreamReader

    from streamer.sinks.vtube_studio import masked_text_frame

    text = ("é" + "x" * size)[:size].encode()
    raw = masked_text_frame(text)
    assert raw[1] & 0x80                      # masked, as a client's frames must be
    reader = StreamReader()
    reader.feed_data(raw)
    parse = Frame.parse(reader.read_exact, mask=True)
    with pytest.raises(StopIteration) as done:
        next(parse)
    frame = done.value.value
    assert (frame.opcode, frame.fin, bytes(frame.data)) == (Opcode.TEXT, True, text) and not reader.buffer


def test_each_live_frame_has_its_own_mask():
    from streamer.sinks.vtube_studio import _Masks

    masks = _Masks()
    keys = [masks.next() for _ in range(600)]          # across the pool's refills
    assert all(len(k) == 4 for k in keys) and len(set(keys)) > 590
