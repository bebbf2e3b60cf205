"""Frames as yuv420p planes: regions convert exactly like the whole frame, only changed pixels are written
back, and on a real clip the planes path gives the whole-frame RGB path's faces (within a stated
tolerance) while every pixel outside the faces is exactly what the watermark alone makes of the decoded
input."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from engines.sources import SourceRegistry
from kernels.numpy import watermark as wm
from kernels.numpy.color import i420_to_rgb
from streamer.pipeline.convert import frame_to_rgb, frame_to_state, state_to_frame, to_planes
from streamer.pipeline.pipeline import Pipeline
from streamer.safety.watermark_policy import WatermarkPolicy
from streamer.session.session import Session
from streamer.pipeline.stages.edits import EditsStage
from streamer.pipeline.stages.faces import FaceStage
from streamer.pipeline.stages.fusion import FusionConfig, FusionStage
from streamer.pipeline.stages.watermark import WatermarkStage
from tests.faceclips import place
from tests.streamer.media.planes_checks import (assert_outside_faces_is_decoded_plus_mark, decoded as _decoded,
                                                fusing_session, swaying_clip)


def test_a_region_is_the_whole_frames_conversion_there_and_writes_back_only_what_changed(astronaut):
    frame = _decoded(astronaut)
    planes = to_planes(frame)
    whole = frame_to_rgb(frame)
    box = planes.snap(101.3, 57.9, 301.2, 260.5)
    assert box == (100, 56, 302, 262)
    rgb, got = planes.region(box)
    assert got == box and np.array_equal(rgb, whole[56:262, 100:302])
    inner, same = planes.region((120, 80, 200, 160))       # inside an open region: the same array
    assert same == box and inner is rgb
    rgb[10:20, 30:41] = (250, 10, 10)                      # a red patch, odd-sized, odd-placed
    before = planes.buffer.copy()
    planes.flush()
    diff_y = planes.y != before[:512]
    assert diff_y.sum() == 10 * 11 and diff_y[66:76, 130:141].all()
    uv_before = before[512:].reshape(2, 256, 256)
    assert (planes.u != uv_before[0]).sum() <= 5 * 6 and (planes.u != uv_before[0])[33:38, 65:71].any()
    patch = i420_to_rgb(planes.y, planes.u, planes.v)[66:76, 131:140]
    assert np.abs(patch.astype(int) - (250, 10, 10)).max() <= 12   # inner pixels: the patch, through 4:2:0


def test_a_box_overlapping_an_open_region_grows_it_to_the_union_keeping_its_changes(astronaut):
    """The edits' box around a close face reaches past fusion's region: one region over both, what the
    first one changed carried over, the frame converted for it and written back once, exactly as if the
    union had been opened first."""
    frame = _decoded(astronaut)
    planes = to_planes(frame)
    whole = frame_to_rgb(frame)
    first, box = planes.region((100, 56, 302, 262))
    first[10:20, 30:41] = (250, 10, 10)                    # fusion's change
    grown, union = planes.region((90, 40, 300, 250))       # the edits' box, a little larger up and left
    assert union == (90, 40, 302, 262) and grown is not first
    assert np.array_equal(grown[26:36, 40:51], first[10:20, 30:41])          # the change carried over
    untouched = np.ones(grown.shape[:2], bool)
    untouched[26:36, 40:51] = False
    assert np.array_equal(grown[untouched], whole[40:262, 90:302][untouched])   # the rest: the frame's
    grown[200:210, 5:15] = (10, 250, 10)                   # the edits' change, outside the first box
    planes.flush()
    want = to_planes(frame)
    once, _ = want.region((90, 40, 302, 262))
    once[26:36, 40:51] = (250, 10, 10)
    once[200:210, 5:15] = (10, 250, 10)
    want.flush()
    assert np.array_equal(planes.buffer, want.buffer)


def _product_stages(sources, policy):
    session = fusing_session("planes-vs-rgb", sources)

    def stages():
        return [FusionStage(), EditsStage(None, unavailable="not in this test"), WatermarkStage(policy, clock=lambda: 1.8e9)]
    return session, Pipeline(stages()), Pipeline(stages())


@pytest.fixture(scope="module")
def sources(astronaut):
    return {"astronaut": SourceRegistry().register(astronaut)}


# The tolerance the planes path holds to on the fused faces, against the whole-frame RGB path (decoded
# RGB -> stages -> whole-frame RGB -> yuv420p), both output frames read back as RGB: mean absolute
# difference <= 0.5 level and PSNR >= 45 dB inside the faces' boxes. The two differ by how the watermark
# is added (on each RGB channel and rounded through the whole-frame conversion, against rounded once in Y)
# and by the RGB -> yuv420p rounding of the fused pixels (measured 2026-12-03: mean 0.29-0.30, PSNR
# 51.3-52.2 dB, a few pixels up to 28 levels apart at the fused region's chroma edge).
FACE_MEAN_ABS_MAX = 0.5
FACE_PSNR_MIN = 45.0


@pytest.mark.parametrize("size,face_scale", [((640, 480), 0.55), ((1280, 720), 0.55), ((1280, 720), 1.2)])
def test_planes_path_matches_the_rgb_path_on_a_real_clip(grace_hopper, sources, size, face_scale):
    """face_scale 1.2 gives a face wider than FusionConfig.work_px: fusion's working-resolution path."""
    policy = WatermarkPolicy(server_id=7)
    session, rgb_pipe, planes_pipe = _product_stages(sources, policy)
    faces = FaceStage()
    key = wm.make_key(policy.config)
    try:
        for frame in swaying_clip(grace_hopper, size, 6, face_scale):
            ctx = session.frame_context()
            old = frame_to_state(frame, planes=False)
            old = faces(old, ctx)
            assert len(old.faces) == 1
            cfg = FusionConfig()
            wide = (old.faces[0].bbox[2] - old.faces[0].bbox[0]) * cfg.work_scale_max >= 1.05 * cfg.work_px
            assert wide == (face_scale > 1)
            new = frame_to_state(frame)
            assert new.planes is not None
            new.faces, new.raw_landmarks = list(old.faces), dict(old.raw_landmarks)
            old = rgb_pipe(old, ctx)
            new = planes_pipe(new, ctx)
            assert not old.errors and not new.errors
            assert old.fused and new.fused == old.fused and new.edits == old.edits and new.watermark == old.watermark
            out_old, out_new = state_to_frame(old, frame), state_to_frame(new, frame)
            # outside the faces: exactly the watermark alone on the decoded planes
            _, face = assert_outside_faces_is_decoded_plus_mark(out_new.to_ndarray(), frame, key, int(new.watermark, 16),
                                                                old.faces[0].bbox)
            # inside: the fused, edited face as the RGB path made it, within the stated tolerance
            ra, rb = frame_to_rgb(out_old).astype(np.float32), frame_to_rgb(out_new).astype(np.float32)
            d = np.abs(ra[face] - rb[face])
            psnr = 10 * np.log10(255.0 ** 2 / max(float((d ** 2).mean()), 1e-9))
            assert d.mean() <= FACE_MEAN_ABS_MAX and psnr >= FACE_PSNR_MIN, (d.mean(), psnr, d.max())
            assert np.abs(ra[face] - frame_to_rgb(frame)[face].astype(np.float32)).mean() > 3.0  # the face did change
    finally:
        faces.close()
        rgb_pipe.close()
        planes_pipe.close()


def test_the_y_plane_mark_reads_back_from_the_decoded_rgb(astronaut):
    """The Y-plane pattern carries the RGB pattern's mark: extract() on the planes path's output finds it."""
    policy = WatermarkPolicy(server_id=9)
    stage = WatermarkStage(policy, clock=lambda: 1.8e9)
    img = cv2.resize(astronaut, (640, 480))
    state = stage(frame_to_state(_decoded(img)), Session("wm-y").frame_context())
    out = state_to_frame(state, _decoded(img))
    det = wm.extract(frame_to_rgb(out), wm.make_key(policy.config))
    assert det.watermarked and f"{det.payload:016x}" == state.watermark


def test_the_face_stage_on_planes_reads_only_its_rois_and_finds_the_same_landmarks(grace_hopper):
    """While a face is followed the landmarker's input is converted only where its crops read; the
    landmarks are those the whole-frame RGB gives (the same pixels where it reads)."""
    whole, planes_stage = FaceStage(), FaceStage()
    try:
        for n in range(5):
            img, _ = place(grace_hopper, size=(1280, 720), scale=0.6, shift=(4.0 * n, 2.0 * n))
            frame = _decoded(img, pts=n * 3000)
            a = whole(frame_to_state(frame, planes=False), None)
            b = planes_stage(frame_to_state(frame), None)
            assert len(a.faces) == len(b.faces) == 1
            np.testing.assert_array_equal(a.faces[0].landmarks, b.faces[0].landmarks)
        boxes = planes_stage.detector.reads(150)                    # the next frame, 17 ms after the last
        assert boxes is not None and len(boxes) == 1                # following: one ROI, not the frame
        x0, y0, x1, y1 = boxes[0]
        assert (x1 - x0) * (y1 - y0) < 0.5 * 1280 * 720
    finally:
        whole.close()
        planes_stage.close()
