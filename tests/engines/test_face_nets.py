"""The enhancer and the parser with tiny ONNX models of each family's signature (bench/_catalogue_models.py)
on a real photo: the enhancer changes the face oval only, by its strength, one batched call for many
faces and threads; CodeFormer's fidelity reaches its weight input; the parser finds a green occluder over
the face and the mouth interior, and its keep mask holds them; XSeg's NHWC BGR path gives the same."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from bench import _catalogue_models as cm
from engines.catalogue.families import FamilyRefused, prep, to_network
from engines.enhancer import FaceEnhancer
from engines.face_nets import FaceNetConfig
from engines.face_parser import MOUTH_INTERIOR, FaceParser
from engines.swappers.swapper import crop_landmarks
from engines.face_masks import region_mask
from tests.faceclips import landmarks_of

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def hopper_lm(grace_hopper):
    return landmarks_of(grace_hopper)


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    d = tmp_path_factory.mktemp("face_nets")
    return {"gfpgan": cm.enhancer(d / "gfpgan_1.4.onnx", 512, batch="N"),
            "gpen256": cm.enhancer(d / "gpen_bfr_256.onnx", 256),
            "codeformer": cm.enhancer(d / "codeformer.onnx", 512, weight_input=True),
            "bisenet": cm.bisenet(d / "bisenet_resnet_34.onnx", batch="N"),
            "xseg": cm.xseg(d / "xseg_1.onnx")}


def oval(image, lm):
    return region_mask(image.shape[:2], lm[:, :2], ["face_oval"]) > 0.5


def test_enhancer_changes_the_face_oval_only_by_its_strength(grace_hopper, hopper_lm, nets):
    e = FaceEnhancer(FaceNetConfig(str(nets["gfpgan"])))
    try:
        assert e.entry.name == "gfpgan_1.4" and e.prep.template == "ffhq_512" and e.warm_up_ms is not None
        inside = oval(grace_hopper, hopper_lm)
        grown = cv2.dilate(inside.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
        deltas = {}
        for strength in (1.0, 0.5):
            out = grace_hopper.copy()
            assert e.enhance_faces(out, grace_hopper, [hopper_lm], strength) == [0]
            diff = out.astype(int) - grace_hopper.astype(int)
            assert not diff[~grown].any()                       # bit-exact outside the (slightly grown) oval
            core = cv2.erode(inside.astype(np.uint8), np.ones((41, 41), np.uint8)) > 0
            deltas[strength] = float(np.median(diff[core]))
        # the tiny model brightens by DELTA in [-1, 1] units = DELTA * 127.5 levels (less where it clips)
        assert deltas[1.0] == pytest.approx(cm.DELTA * 127.5, abs=3)
        assert deltas[0.5] == pytest.approx(deltas[1.0] / 2, abs=2)
        out = grace_hopper.copy()
        assert e.enhance_faces(out, grace_hopper, [hopper_lm], 0.0) == [] and np.array_equal(out, grace_hopper)
    finally:
        e.close()


def test_enhancer_batches_faces_from_many_threads(grace_hopper, hopper_lm, nets):
    e = FaceEnhancer(FaceNetConfig(str(nets["gfpgan"]), window_ms=30.0))
    try:
        crop, _ = e.crop(grace_hopper, hopper_lm)
        want = e.enhance(crop[None])[0]
        results: list = [None] * 6
        barrier = threading.Barrier(6)

        def one(i):
            barrier.wait()
            results[i] = e.enhance(np.stack([crop, crop]))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(np.allclose(r, want[None], atol=1e-3) for r in results)
        assert e.stats.largest > 2                              # rows of several callers met in one call
    finally:
        e.close()


def test_fixed_batch_file_and_codeformer_weight(grace_hopper, hopper_lm, nets):
    g = FaceEnhancer(FaceNetConfig(str(nets["gpen256"])))
    try:
        assert g.entry.name == "gpen_bfr_256" and g.prep.template == "arcface_128" and not g.model.dynamic_batch
        crop, _ = g.crop(grace_hopper, hopper_lm)
        two = g.enhance(np.stack([crop, crop]))               # a batch-1 file runs the rows one by one
        assert two.shape == (2, 256, 256, 3) and np.allclose(two[0], two[1])
    finally:
        g.close()
    outs = {}
    for w in (0.0, 1.0):
        c = FaceEnhancer(FaceNetConfig(str(nets["codeformer"])), fidelity=w)
        try:
            assert c.entry.name == "codeformer"
            crop, _ = c.crop(grace_hopper, hopper_lm)
            outs[w] = c.enhance(crop[None])[0]
        finally:
            c.close()
    assert np.median(outs[1.0] - outs[0.0]) == pytest.approx(2 * cm.DELTA * 127.5, abs=3)
    with pytest.raises(ValueError):
        FaceEnhancer(FaceNetConfig(str(nets["codeformer"])), fidelity=2.0)
    with pytest.raises(FamilyRefused, match="is not a gfpgan_1.4 model"):
        FaceEnhancer(FaceNetConfig(str(nets["gpen256"]), name="gfpgan_1.4"))
    with pytest.raises(FamilyRefused, match="no such model file"):
        FaceEnhancer(FaceNetConfig("/nonexistent/gfpgan_1.4.onnx"))


def test_parser_keeps_an_occluder_and_the_mouth_interior(grace_hopper, hopper_lm, nets):
    p = FaceParser(FaceNetConfig(str(nets["bisenet"])))
    try:
        assert p.entry.card == "bisenet_19" and p.has_classes and p.prep.template == "ffhq_512"
        img = grace_hopper.copy()
        # a green "microphone" over the left cheek, and the mouth opening painted dark
        lm = hopper_lm[:, :2]
        cx, cy = lm[234].astype(int)                           # MediaPipe 234: the face's edge at the cheek
        img[cy - 20:cy + 20, cx:cx + 40] = (20, 220, 30)
        mouth = np.zeros(img.shape[:2], np.uint8)                # an open mouth's dark interior between the corners
        centre = tuple(int(v) for v in (lm[13] + lm[14]) / 2)
        half_w = int(0.3 * np.linalg.norm(lm[61] - lm[291]))
        cv2.ellipse(mouth, centre, (half_w, 8), 0, 0, 360, 1, -1)
        mouth = mouth > 0
        img[mouth] = (25, 15, 15)
        crop, m = p.crop(img, hopper_lm)
        [parse] = p.parse(crop[None])
        # the classes are what the tiny network computes on the crop (its reference in NumPy)
        assert np.array_equal(parse.classes, cm.reference_classes(to_network(crop[None], p.prep))[0])
        keep = p.keep_mask(parse)
        green = np.all(crop == (20, 220, 30), axis=-1)
        assert keep[cv2.erode(green.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0].min() > 0.95
        skin_px = (parse.classes == 1)
        assert keep[cv2.erode(skin_px.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0].max() < 0.05
        dark = parse.classes == MOUTH_INTERIOR
        painted = cv2.warpAffine(mouth.astype(np.uint8), m, crop.shape[1::-1], flags=cv2.INTER_NEAREST) > 0
        inner = cv2.erode(painted.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
        assert inner.any() and dark[inner].all()                # the mouth interior is class 11 ...
        assert keep[inner].min() > 0.95                         # ... kept live with the mouth kept ...
        assert p.keep_mask(parse, keep_mouth=False)[inner].max() < 0.05   # ... and changed without
        assert p.region(parse, "skin").sum() == skin_px.sum()
    finally:
        p.close()


def test_xseg_gives_the_same_occluder_from_bgr_nhwc(grace_hopper, hopper_lm, nets):
    p = FaceParser(FaceNetConfig(str(nets["xseg"])))
    try:
        assert p.entry.card == "xseg" and not p.has_classes and p.prep.nhwc and p.prep.bgr
        img = grace_hopper.copy()
        cx, cy = hopper_lm[234, :2].astype(int)
        img[cy - 20:cy + 20, cx:cx + 40] = (20, 220, 30)
        crop, _ = p.crop(img, hopper_lm)
        [parse] = p.parse(crop[None])
        keep = p.keep_mask(parse, soften=0)
        green = np.all(crop == (20, 220, 30), axis=-1)
        assert green.any() and keep[green].min() > 0.95
        assert np.median(keep[~green]) < 0.05
        with pytest.raises(ValueError, match="need a BiSeNet"):
            p.region(parse, "lips")
    finally:
        p.close()


def test_class_map_is_argmax_with_its_tie_rule():
    from engines.face_parser import class_map

    y = np.random.default_rng(0).normal(size=(19, 40, 40)).astype(np.float32)
    y[3, :10] = y[5, :10] = y[0, :10] = 50.0          # ties: the first class wins, as argmax says
    y[7, 20:30] = y[9, 20:30] = 60.0
    assert np.array_equal(class_map(y), y.argmax(axis=0))
