"""The frame's planes on a torch device (torch's CPU device here; CUDA where there is one): the upload is
the decoder's bytes, regions convert and write back as the host planes do, an unchanged frame goes out
as the decoded frame with nothing downloaded, and the whole product pipeline (faces, fusion, edits, a
hand kept, watermark) gives the host planes' I420 within a stated tolerance, every pixel outside the
faces exactly the decoded one plus the watermark."""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np
import pytest
import torch
from av import VideoFrame

from engines.faces import MaskPatch
from engines.sources import SourceRegistry
from kernels.numpy import watermark as wm
from streamer.pipeline.convert import frame_to_rgb, frame_to_state, state_to_frame, to_planes
from streamer.media.device_planes import DeviceUpload, check_device, fill_i420
from streamer.pipeline.overlap import OverlappedFrameWorker
from streamer.pipeline.stats import StreamStats
from streamer.pipeline.worker import FrameWorker
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.safety.watermark_policy import WatermarkPolicy
from streamer.session.session import Session
from streamer.pipeline.stages.edits import EditsStage
from streamer.pipeline.stages.faces import FaceStage
from streamer.pipeline.stages.fusion import FusionStage
from streamer.pipeline.stages.watermark import WatermarkStage
from tests.faceclips import place
from tests.streamer.media.planes_checks import (assert_outside_faces_is_decoded_plus_mark, decoded as _decoded,
                                                fusing_session, swaying_clip)

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


@pytest.mark.parametrize("device", DEVICES)
def test_the_upload_is_the_decoders_bytes_with_its_row_padding_left_out(astronaut, device):
    wide = cv2.resize(astronaut, (642, 480))
    frame = _decoded(wide)                                      # 642 wide: the decoder pads its rows
    assert frame.planes[0].line_size > frame.width
    want = frame.to_ndarray()
    host = np.empty_like(want)
    fill_i420(host, frame)
    assert np.array_equal(host, want)
    upload = DeviceUpload(device)
    for rgb in (wide, astronaut[:240, :320], wide):   # the size changes and back
        f = _decoded(rgb)
        p = upload.planes(f)
        assert p.device == str(torch.device(device)) and isinstance(p.buffer, torch.Tensor)
        assert np.array_equal(p.buffer.cpu().numpy(), f.to_ndarray())


def test_device_planes_convert_and_write_back_exactly_as_the_host_planes(astronaut):
    frame = _decoded(astronaut[:400, :510])
    host, dev = to_planes(frame), frame_to_state(frame, device="cpu").planes
    assert host.device is None and dev.device == "cpu"
    box = dev.snap(101.3, 57.9, 301.2, 260.5)
    a, box_a = host.region(box)
    b, box_b = dev.region(box)
    assert box_a == box_b and isinstance(b, torch.Tensor) and np.array_equal(b.numpy(), a)
    assert dev.region((120, 80, 200, 160))[0] is b              # inside an open region: the same tensor
    for arr in (a, b):
        arr[10:20, 30:41] = arr.new_tensor((250, 10, 10), dtype=torch.uint8) if isinstance(arr, torch.Tensor) else (250, 10, 10)
    mask = np.zeros((30, 24), np.float32)
    mask[:, :12] = 1.0
    mask[:, 12:] = 0.5                                           # a hand: half of it kept fully, half feathered
    host.keep([MaskPatch(125, 60, mask)])
    dev.keep([MaskPatch(125, 60, mask)])
    before = host.buffer.copy()
    assert np.array_equal(host.i420(), dev.i420())              # the same bytes: the twins are OpenCV's fixed point
    assert host.changed and dev.changed
    moved = host.buffer[:400] != before[:400]
    assert 0 < moved.sum() <= 10 * 11                           # only the painted pixels, less what the hand kept
    assert not moved[66:76, 125:137].any()                      # the fully kept part of the hand: as decoded
    whole_host, whole_dev = host.rgb(), dev.rgb()               # whole-frame consumers get the planes' kind
    assert isinstance(whole_dev, torch.Tensor) and np.array_equal(whole_dev.numpy(), whole_host)
    state = frame_to_state(frame, device="cpu")
    assert isinstance(state.image, torch.Tensor) and np.array_equal(state.image.numpy(), frame_to_rgb(frame))
    out = np.zeros((400, 510, 3), np.uint8)
    state.planes.rgb_into(out, (20, 30, 60, 90))                # host crops for the landmarker
    assert np.array_equal(out[30:90, 20:60], frame_to_rgb(frame)[30:90, 20:60]) and not out[:30].any()
    made = frame_to_rgb(frame)
    made[100:200, 50:300] = 77                                  # a whole-frame consumer's NumPy result goes up
    host_again = to_planes(frame)
    host_again.put_rgb(made)
    state.planes.put_rgb(made)
    assert np.array_equal(state.planes.i420(), host_again.i420())
    back = state.planes.rgb().numpy()[100:200, 50:300].astype(np.int16)
    assert np.abs(back - 77).mean() < 0.1                       # what it made, through the planes' write-back rule



class _Watched:
    """The planes' kernel twin with some of its functions replaced (to count calls)."""

    def __init__(self, base, **replaced) -> None:
        self._base, self._replaced = base, replaced

    def __getattr__(self, name):
        return self._replaced[name] if name in self._replaced else getattr(self._base, name)

def test_an_unchanged_frame_goes_out_as_decoded_with_nothing_downloaded(grace_hopper):
    img, _ = place(grace_hopper, size=(640, 480), scale=0.55)
    frame = _decoded(img)
    state = frame_to_state(frame, device="cpu")
    p = state.planes
    downloads = []
    p.ops = _Watched(p.ops, host=lambda t: downloads.append(tuple(t.shape)) or t.cpu().numpy())
    region, _ = p.region(p.snap(200, 100, 400, 300))            # opened, read, not changed
    assert int(region.float().mean()) > 0
    session = Session("unchanged")
    out = Pipeline([FusionStage(), EditsStage(None, unavailable="not in this test")])(state, session.frame_context())
    assert not out.errors
    assert state_to_frame(out, frame) is frame and not p.changed and downloads == []


@pytest.fixture(scope="module")
def sources(astronaut):
    return {"astronaut": SourceRegistry().register(astronaut)}


class _HandOverMouth:
    """A stage that puts a hand's mask over each face's mouth (what the hand check gives a face a hand
    covers), the same on both paths."""

    name = "hand"

    def __call__(self, state: FrameState, context) -> FrameState:
        faces = []
        for f in state.faces:
            x, y = (int(v) for v in f.landmarks[14, :2])        # below the lower lip
            mask = np.ones((24, 40), np.float32)
            faces.append(dataclasses.replace(f, keep=MaskPatch(x - 20, y - 6, mask)))
        state.faces = faces
        return state


def _product(policy):
    return Pipeline([FaceStage(), _HandOverMouth(), FusionStage(), EditsStage(None, unavailable="not in this test"),
                     WatermarkStage(policy, clock=lambda: 1.8e9)])


# The tolerance the device planes hold to against the host planes, per plane of the output I420, over
# every frame: mean absolute difference <= 0.05 level and max <= 16 levels. The conversions are bit-exact
# twins, so the landmarks are the same; what differs is fusion's and the edits' torch kernels (grid_sample
# against OpenCV's 1/32-pixel remap, float Lab against OpenCV's), on a few pixels of the face (measured
# 2026-12-03 on torch's CPU device, 640x480 and 1280x720: mean 0.002-0.004 in each plane, max 1-5 levels).
PLANE_MEAN_ABS_MAX = 0.05
PLANE_MAX_ABS_MAX = 16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [(640, 480), (1280, 720)])
def test_the_product_pipeline_on_device_planes_gives_the_host_planes_i420(grace_hopper, sources, size, device):
    policy = WatermarkPolicy(server_id=7)
    session = fusing_session("device-vs-host", sources)
    host_pipe, dev_pipe = _product(policy), _product(policy)
    upload = DeviceUpload(device)
    key = wm.make_key(policy.config)
    w, h = size
    try:
        for n, frame in enumerate(swaying_clip(grace_hopper, size, 5)):
            ctx = session.frame_context()
            a = host_pipe(frame_to_state(frame), ctx)
            b = dev_pipe(frame_to_state(frame, device=upload), ctx)
            assert b.planes.device == str(torch.device(device))
            assert not a.errors and not b.errors
            assert len(a.faces) == len(b.faces) == 1
            np.testing.assert_array_equal(a.faces[0].landmarks, b.faces[0].landmarks)
            assert a.fused and b.fused == a.fused and b.edits == a.edits and b.watermark == a.watermark
            got_a, got_b = state_to_frame(a, frame).to_ndarray(), state_to_frame(b, frame).to_ndarray()
            for name, sl in (("Y", slice(0, h)), ("U", slice(h, h + h // 4)), ("V", slice(h + h // 4, None))):
                d = np.abs(got_a[sl].astype(np.int16) - got_b[sl])
                assert d.mean() <= PLANE_MEAN_ABS_MAX and d.max() <= PLANE_MAX_ABS_MAX, (n, name, d.mean(), d.max())
            # outside the faces: the decoded Y plus the watermark, and the decoded U and V, exactly
            y_expected, _ = assert_outside_faces_is_decoded_plus_mark(got_b, frame, key, int(b.watermark, 16),
                                                                      b.faces[0].bbox)
            # under the hand (away from its chroma edge): the decoded pixels plus the mark, fused face or not
            k = b.faces[0].keep
            hy, hx = slice(k.y0 + 2, k.y0 + 22), slice(k.x0 + 2, k.x0 + 38)
            assert np.array_equal(got_b[:h][hy, hx], y_expected[hy, hx])
            fx0, fy0, fx1, fy1 = (int(v) for v in b.faces[0].bbox)
            face = (slice(fy0, fy1), slice(fx0, fx1))
            assert np.abs(got_b[:h][face].astype(np.int16) - y_expected[face]).mean() > 3.0   # the face did change
    finally:
        host_pipe.close()
        dev_pipe.close()


def test_the_y_plane_mark_on_device_planes_is_the_host_planes_mark_and_reads_back(astronaut):
    policy = WatermarkPolicy(server_id=9)
    img = np.ascontiguousarray(astronaut[:480, :512])
    frame = _decoded(img)
    outs = []
    converted = []
    for device in (None, "cpu"):
        stage = WatermarkStage(policy, clock=lambda: 1.8e9)
        state = frame_to_state(frame, device=device)
        ops = state.planes.ops
        to_rgb = ops.color.i420_to_rgb
        state.planes.ops = _Watched(ops, color=_Watched(ops.color, i420_to_rgb=lambda *p, f=to_rgb: converted.append(1) or f(*p)))
        state = stage(state, Session("wm-device").frame_context())
        outs.append((state_to_frame(state, frame).to_ndarray(), state.watermark))
    assert converted == []                                      # the mark needs the Y plane alone: nothing is converted
    (host, p_host), (dev, p_dev) = outs
    assert p_host == p_dev and np.array_equal(host, dev)
    det = wm.extract(frame_to_rgb(VideoFrame.from_ndarray(dev, format="yuv420p")), wm.make_key(policy.config))
    assert det.watermarked and f"{det.payload:016x}" == p_dev


@pytest.mark.parametrize("worker_cls", [FrameWorker, OverlappedFrameWorker])
def test_the_frame_workers_put_the_planes_where_the_setting_says(astronaut, worker_cls):
    policy = WatermarkPolicy(server_id=3)
    seen = []

    class Probe:
        name = "probe"

        def __call__(self, state, context):
            seen.append(state.planes.device)
            return state

    frame = _decoded(np.ascontiguousarray(astronaut[:240, :320]))
    outs = []
    for pixels in (None, "cpu"):
        session = Session("worker")                               # one session id: one payload
        worker = worker_cls(session, Pipeline([Probe(), WatermarkStage(policy, clock=lambda: 1.8e9)]), StreamStats(),
                            pixels=pixels)
        if worker_cls is OverlappedFrameWorker:
            context = session.frame_context()
            out = worker.back_half(frame, worker.front_half(frame, context), context)
        else:
            out = worker.process(frame)
        outs.append(out.to_ndarray())
    assert seen == [None, "cpu"] and np.array_equal(outs[0], outs[1])


def test_a_device_that_is_not_here_is_named_in_the_refusal():
    assert check_device("cpu") is None
    assert "is not a torch device" in check_device("gpu0")
    if HAS_CUDA:
        assert "only" in check_device(f"cuda:{torch.cuda.device_count()}")
    else:
        assert "finds no CUDA device" in check_device("cuda:0")
        with pytest.raises(RuntimeError, match="finds no CUDA device"):
            DeviceUpload("cuda")
