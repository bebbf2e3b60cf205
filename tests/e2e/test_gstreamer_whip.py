"""An independent WHIP client: GStreamer's webrtcbin (Debian's python3-gi, run as a child process of the
system Python) publishing VP8 and H264 with its own, unmodified offer (`a=setup:actpass`, an RSA DTLS
certificate), sendrecv, to the product server over loopback. It decodes the fused video the server sends
back, the frames it dumps carry the LiveFuse watermark (the photo it sends does not), and its WHIP DELETE
ends the session."""

from __future__ import annotations

import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from PIL import Image

from bench._clients import run_gstreamer
from kernels.numpy import watermark as wm
from streamer.app.assembly import build_services
from streamer.config import ServerConfig
from streamer.web.server import SERVER_KEY, create_app
from tests.streaming_helpers import until

W, H, FRAMES = 320, 240, 45


@pytest.mark.timeout(420)
async def test_gstreamer_webrtcbin_publishes_vp8_and_h264_and_gets_the_fused_watermarked_video_back(
        gstreamer, astronaut, tmp_path, monkeypatch):
    monkeypatch.setenv("LIVEFUSE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    face = tmp_path / "face.png"
    Image.fromarray(astronaut).resize((480, 480)).save(face)
    key = wm.make_key(wm.WatermarkConfig())
    sent = np.asarray(Image.open(face).convert("RGB").resize((W, H)))
    unmarked, _ = wm.extract_many([sent], key)
    assert not unmarked.watermarked, "the photo the client sends must not carry the mark already"
    app = create_app(ServerConfig(), build_services())
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    state = app[SERVER_KEY]
    url = str(server.make_url("/whip"))
    try:
        await until(lambda: state.warm, 180, "the shared models")
        for codec in ("VP8", "H264"):
            dump = tmp_path / f"{codec}.rgb"
            report = await run_gstreamer(url, face, codec=codec, frames=FRAMES, width=W, height=H, dump=dump)
            assert "error" not in report and report["exit_code"] == 0, report
            assert report["post_status"] == 201
            assert report["offer_setup"] == ["a=setup:actpass"]      # webrtcbin's own offer, unmodified
            assert report["answer_setup"] == ["a=setup:passive"]     # the server is the DTLS server
            assert "connected" in report["connection_states"]
            assert report["frames_received"] >= FRAMES
            assert (report["width"], report["height"]) == (W, H)
            frames = np.frombuffer(dump.read_bytes(), np.uint8).reshape(-1, H, W, 3)
            detection, _ = wm.extract_many(list(frames), key)
            assert detection.watermarked, (codec, detection)
            # the WHIP DELETE on the Location ends the session
            assert report["delete_status"] == 200
            await until(lambda: report["session"] not in state.peers, 20, f"the {codec} session to end")
    finally:
        await server.close()
