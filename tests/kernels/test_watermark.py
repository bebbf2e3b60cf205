"""The watermark kernels: invisible, readable after rescale/crop/re-encode, silent on unmarked photos."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels import watermark_code as code
from kernels.numpy import watermark as wm
from kernels.torch import watermark as twm
from tests.watermark_clips import PAYLOAD, crop, downscale, moving_clip, reencode


@pytest.fixture(scope="module")
def key():
    return wm.make_key()


@pytest.fixture(scope="module")
def clip(astronaut):
    return moving_clip(astronaut, n=24)


def code_bit_accuracy(det: wm.Detection) -> float:
    expected = 1.0 - 2.0 * code.encode_payload(PAYLOAD).astype(np.float32)
    return float(np.mean(np.sign(det.soft) == expected))


def test_code_corrects_errors_and_crc_rejects_noise():
    rng = np.random.default_rng(1)
    sym = 1.0 - 2.0 * code.encode_payload(PAYLOAD).astype(np.float32)
    noisy = sym + rng.normal(0, 0.9, sym.shape)   # ~13 % of the code bits flipped
    assert np.mean(np.sign(noisy) != sym) > 0.08
    assert code.bits_to_payload(code.viterbi(noisy)) == PAYLOAD
    fakes = [code.bits_to_payload(code.viterbi(rng.normal(0, 1, sym.shape))) for _ in range(50)]
    assert fakes == [None] * 50


@pytest.mark.parametrize("size", [(640, 480), (1280, 720), (318, 238)])
def test_mark_is_invisible_and_reads_back(astronaut, grace_hopper, key, size):
    for photo in (astronaut, grace_hopper):
        frame = moving_clip(photo, n=1, size=size)[0]
        marked = wm.embed(frame, wm.pattern_for(key, frame.shape[:2], PAYLOAD))
        assert wm.psnr(marked, frame) >= 40.0
        det = wm.extract(marked, key)
        assert det.watermarked and det.payload == PAYLOAD


def test_embed_is_a_pure_luma_change(astronaut, key):
    frame = moving_clip(astronaut, n=1)[0]
    marked = wm.embed(frame, wm.pattern_for(key, frame.shape[:2], PAYLOAD)).astype(np.int16)
    d = marked - frame.astype(np.int16)
    m = int(np.abs(d).max())
    unclipped = (frame >= m).all(axis=2) & (frame <= 255 - m).all(axis=2)
    assert np.array_equal(d[..., 0][unclipped], d[..., 1][unclipped])
    assert np.array_equal(d[..., 0][unclipped], d[..., 2][unclipped])


@pytest.mark.parametrize("attack", ["downscale50", "crop10", "downscale50+crop10"])
def test_survives_geometry(clip, key, attack):
    marked = wm.embed(clip[-1], wm.pattern_for(key, clip[-1].shape[:2], PAYLOAD))
    img = {"downscale50": lambda m: downscale(m), "crop10": lambda m: crop(m),
           "downscale50+crop10": lambda m: crop(downscale(m))}[attack](marked)
    det = wm.extract(img, key)
    assert det.payload == PAYLOAD, (attack, code_bit_accuracy(det))
    assert code_bit_accuracy(det) > 0.9


@pytest.mark.parametrize("codec,rate", [("libvpx", 500_000), ("libx264", 1_000_000)])
def test_survives_reencode_and_several_frames_help(clip, key, codec, rate):
    pattern = wm.pattern_for(key, clip[0].shape[:2], PAYLOAD)
    decoded = reencode([wm.embed(f, pattern) for f in clip], codec, rate)
    single = wm.extract(decoded[-1], key)
    assert single.payload == PAYLOAD
    many, n = wm.extract_many(decoded[-6:], key)
    assert n == 6 and many.payload == PAYLOAD
    singles = [code_bit_accuracy(wm.extract(f, key)) for f in decoded[-6:]]
    assert code_bit_accuracy(many) > np.mean(singles)


def test_no_false_detection_on_unmarked_photos(astronaut, grace_hopper, face_free_images, key):
    photos = [astronaut, grace_hopper, *face_free_images.values()]
    for photo in photos:
        for img in (photo, downscale(photo), crop(photo)):
            det = wm.extract(img, key)
            assert not det.watermarked and det.payload is None and det.confidence == 0.0


def test_another_key_reads_nothing(clip, key):
    marked = wm.embed(clip[0], wm.pattern_for(key, clip[0].shape[:2], PAYLOAD))
    other = wm.make_key(wm.WatermarkConfig(seed=12345))
    assert not wm.extract(marked, other).watermarked


def test_bad_input_is_refused(key, astronaut):
    with pytest.raises(ValueError):
        wm.embed(astronaut, wm.pattern_for(key, (480, 640), PAYLOAD))
    with pytest.raises(ValueError):
        code.payload_to_bits(1 << 64)


def test_torch_twin_agrees_on_odd_size(grace_hopper, key):
    frame = moving_clip(grace_hopper, n=1, size=(318, 238))[0]
    np_out = wm.embed(frame, wm.pattern_for(key, frame.shape[:2], PAYLOAD))
    t_out = twm.embed(torch.from_numpy(frame), twm.pattern_for(key, frame.shape[:2], PAYLOAD))
    assert np.array_equal(t_out.numpy(), np_out)
    a = wm.canonical(np_out, key.config)
    b = twm.canonical(torch.from_numpy(np_out), key.config).numpy()
    assert a.shape == b.shape
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.9
    det = twm.extract(t_out, key)
    assert det.watermarked and det.payload == PAYLOAD


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_torch_twin_on_cuda_matches_numpy(astronaut, key):
    frame = moving_clip(astronaut, n=1, size=(318, 238))[0]
    np_out = wm.embed(frame, wm.pattern_for(key, frame.shape[:2], PAYLOAD))
    t_out = twm.embed(torch.from_numpy(frame).cuda(), twm.pattern_for(key, frame.shape[:2], PAYLOAD, device="cuda"))
    assert np.array_equal(t_out.cpu().numpy(), np_out)
    assert twm.extract(t_out, key).payload == PAYLOAD


def test_the_y_plane_pattern_is_the_rgb_one_in_luma_and_the_torch_twin_agrees(key):
    rgb_p = wm.pattern_for(key, (240, 320), 0x1234)
    y_p = wm.luma_pattern_for(key, (240, 320), 0x1234)
    d_rgb = rgb_p.pos[..., 0].astype(np.int16) - rgb_p.neg[..., 0]
    d_y = y_p.pos.astype(np.int16) - y_p.neg
    assert y_p.pos.shape == (240, 320)
    assert np.abs(d_y - d_rgb * wm.LUMA_SCALE).max() <= 1.0        # the same mark, scaled to Y levels
    plane = np.full((240, 320), 120, np.uint8)
    t = twm.embed_luma(torch.from_numpy(plane), twm.luma_pattern_for(key, (240, 320), 0x1234)).numpy()
    assert np.array_equal(t, wm.embed(plane, y_p))
    in_place = torch.from_numpy(plane.copy())                      # out= the plane: marked where it lies
    assert twm.embed_luma(in_place, twm.luma_pattern_for(key, (240, 320), 0x1234), out=in_place) is in_place
    assert np.array_equal(in_place.numpy(), t)


@pytest.mark.parametrize("shape", [(700, 1000), (256, 256), (257, 90), (1, 5)])
def test_a_pattern_built_in_strips_is_the_one_built_whole(key, shape):
    """`pattern_for` builds its maps a strip of rows at a time (a 4096 x 4096 photo's maps whole are
    about 300 MB); each pixel is the same as from the whole-frame remap."""
    whole = np.rint(wm._delta(key, shape, PAYLOAD)).astype(np.int16)
    pos, neg = wm._split(whole)
    rgb = wm.pattern_for(key, shape, PAYLOAD)
    assert (rgb.pos == pos[:, :, None]).all() and (rgb.neg == neg[:, :, None]).all() and rgb.pos.shape == (*shape, 3)
    lpos, lneg = wm._split(np.rint(wm._delta(key, shape, PAYLOAD) * np.float32(wm.LUMA_SCALE)).astype(np.int16))
    luma = wm.luma_pattern_for(key, shape, PAYLOAD)
    assert (luma.pos == lpos).all() and (luma.neg == lneg).all()
