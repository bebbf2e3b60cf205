"""`livefuse bench stream`'s own parts: the pre-encoded client clip decodes to the frames it stands for,
and a run with two clients on one real server measures both streams."""

import asyncio

import av
import numpy as np
import pytest
import skimage.data

from bench._probe import EncodedClipTrack, clip_background, read_index_from_frame

pytestmark = pytest.mark.timeout(240)


def test_the_encoded_clip_decodes_to_its_painted_frames_and_every_lap_starts_on_an_idr():
    track = EncodedClipTrack(clip_background(skimage.data.astronaut(), 320, 240), loop=60, gop=30)
    decoder = av.CodecContext.create("h264", "r")
    got = []
    for n in range(90):                          # a lap and a half: the second lap decodes on from the first
        for frame in decoder.decode(av.Packet(track._packets[n % track.loop])):
            got.append(read_index_from_frame(frame))
    assert got == [n % 60 for n in range(90)]
    fresh = av.CodecContext.create("h264", "r")  # a viewer joining at a lap's start decodes at once
    assert len(fresh.decode(av.Packet(track._packets[30]))) == 1
    with pytest.raises(ValueError, match="whole number of GOPs"):
        EncodedClipTrack(clip_background(skimage.data.astronaut(), 320, 240), loop=50, gop=30)


def test_two_streams_on_one_server_are_each_measured():
    from bench.stream import one_run

    r = asyncio.run(one_run(320, 240, "H264", 0.0, 3.0, 30.0, 1.5, streams=2, client_encoder="pre"))
    assert r["streams"] == 2 and len(r["per_stream"]) == 2
    for s in r["per_stream"]:
        assert s["fps_out"] > 15 and s["unreadable_frames"] == 0
        assert s["latency_ms"]["p50"] is not None and s["latency_ms"]["p50"] < 1000
    assert r["fps_out"] == min(s["fps_out"] for s in r["per_stream"])
    assert r["server_frames_out"] == sum(s["server_frames_out"] for s in r["per_stream"])
    assert np.isfinite(r["server_cpu_ms_per_frame"]) and r["server_cpu_ms_per_frame"] > 0


def test_a_product_run_with_the_background_on_is_timed_and_its_frames_still_matched():
    """The background stage replaces the room, where the client paints each frame's index: the bench server
    keeps that band across the stage, so latency is still read frame by frame, and the stage is timed."""
    from bench.stream import one_run

    r = asyncio.run(one_run(320, 240, "H264", 0.0, 3.0, 30.0, 1.5, pipeline="product", client_encoder="pre",
                            background="#00ff00"))
    assert r["background"] == "#00ff00" and r["setup"]["background"] == {"mode": "color", "color": "#00ff00"}
    assert r["server_stages_ms"]["background"]["p50"] > 0.05       # the stage ran on the measured frames
    assert r["unreadable_frames"] == 0 and r["latency_ms"]["p50"] is not None
    assert r["fps_out"] > 15
