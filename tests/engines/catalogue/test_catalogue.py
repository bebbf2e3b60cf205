"""The catalogue file itself, and the preprocessing each family gets, held to the reference
implementations' published numbers (typed out here with their source, not read from our code)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engines.catalogue import entries as ce
from engines.catalogue.families import FamilyRefused, fits, prep, recognise, to_network
from engines.swappers.cards import BY_NAME, Signature, template

# --- reference figures -----------------------------------------------------------------------------------
# FaceFusion 3.x facefusion/face_helper.py WARP_TEMPLATE_SET (5 points in units of the crop side)
FACEFUSION_TEMPLATES = {
    "arcface_112_v1": [[0.35473214, 0.45658929], [0.64526786, 0.45658929], [0.50000000, 0.61154464],
                       [0.37913393, 0.77687500], [0.62086607, 0.77687500]],
    "arcface_112_v2": [[0.34191607, 0.46157411], [0.65653393, 0.45983393], [0.50022500, 0.64050536],
                       [0.37097589, 0.82469196], [0.63151696, 0.82325089]],
    "arcface_128": [[0.36167656, 0.40387734], [0.63696719, 0.40235469], [0.50019687, 0.56044219],
                    [0.38710391, 0.72160547], [0.61507734, 0.72034453]],
    "ffhq_512": [[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904],
                 [0.39308822, 0.72541100], [0.61150205, 0.72490465]],
    "dfl_whole_face": [[0.35342266, 0.39285716], [0.62797622, 0.39285716], [0.48660713, 0.54017860],
                       [0.38839287, 0.68750011], [0.59821427, 0.68750011]],
}
# facexlib utils/face_restoration_helper.py FaceRestoreHelper.face_template (GFPGAN, CodeFormer), px at 512
FACEXLIB_512 = [[192.98138, 239.94708], [318.90277, 240.1936], [256.63416, 314.01935], [201.26117, 371.41043],
                [313.08905, 371.15118]]
# GFPGAN gfpgan/utils.py GFPGANer.enhance: img2tensor(bgr2rgb=True) / 255, normalize(0.5, 0.5); output
# tensor2img(rgb2bgr=True, min_max=(-1, 1))
GFPGAN_IN = {"colour": "RGB", "mean": 0.5, "std": 0.5, "out": (-1.0, 1.0)}
# yakhyo/face-parsing onnx_inference.py: BGR2RGB, 512x512, / 255, mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225)
BISENET_IN = {"size": 512, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
# FaceFusion face_masker.create_occlusion_mask: the BGR crop resized to 256, / 255, NHWC, no mean/std
XSEG_IN = {"size": 256, "colour": "BGR", "layout": "NHWC"}
# InsightFace model_zoo/inswapper.py: blobFromImage(crop, 1/255, (128, 128), (0, 0, 0), swapRB=True)
INSWAPPER_IN = {"size": 128, "scale": 1 / 255.0, "mean": 0.0}
# FaceFusion 3.x processors/modules/face_swapper.py create_static_model_set, and its normalize_crop_frame
# (ghost's output times std plus mean, then clipped to [0, 1]; simswap's taken as it comes, clipped):
SIMSWAP_IN = {"template": "arcface_112_v1", "size": 256, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
              "out": (0.0, 1.0)}
GHOST_IN = {"template": "arcface_112_v1", "size": 256, "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5),
            "out": (-1.0, 1.0)}


@pytest.fixture(scope="module")
def cat():
    return ce.load(ce.CATALOGUE_FILE)


def test_every_entry_is_complete_and_its_licence_plain(cat):
    names = cat.names()
    for want in ("inswapper_128", "simswap_256", "ghost_1_256", "arcface_w600k_r50", "gfpgan_1.4",
                 "restoreformer_plus_plus", "codeformer", "gpen_bfr_256", "gpen_bfr_512", "bisenet_resnet_34", "xseg_1"):
        assert want in names
    for e in cat.entries:
        assert e.urls and all(u.startswith("https://") and u.endswith("/" + e.file) for u in e.urls), e.name
        assert e.sha256 is None or len(e.sha256) == 64
        assert e.sha256_source, e.name                              # where the hash came from, or why there is none
        assert e.licence.url.startswith("https://") and e.licence.name
        assert e.inputs and e.outputs and e.preprocessing["template"] in ("arcface_112_v1", "arcface_112_v2",
                                                                          "arcface_128", "ffhq_512", "dfl_whole_face")
    commercial = {e.name: e.commercial for e in cat.entries}
    assert not any(commercial[n] for n in ("inswapper_128", "inswapper_128_fp16", "simswap_256", "arcface_w600k_r50",
                                           "codeformer", "gpen_bfr_256", "gpen_bfr_512"))
    assert all(commercial[n] for n in ("gfpgan_1.4", "restoreformer_plus_plus", "bisenet_resnet_34", "xseg_1"))
    # the commercial-use models whose use still has strings attached say so
    for n in ("ghost_1_256", "bisenet_resnet_34", "xseg_1", "gfpgan_1.4"):
        assert cat.get(n).caveat


def test_a_malformed_catalogue_is_refused(tmp_path):
    raw = json.loads(ce.CATALOGUE_FILE.read_text())
    raw["models"].append(dict(raw["models"][0]))
    with pytest.raises(ce.CatalogueError, match="duplicate model names: inswapper_128"):
        ce.parse(raw)
    raw = json.loads(ce.CATALOGUE_FILE.read_text())
    raw["models"][0]["licence"] = "Nope"
    with pytest.raises(ce.CatalogueError, match="licence 'Nope' is not defined"):
        ce.parse(raw)
    bad = tmp_path / "c.json"
    bad.write_text("{")
    with pytest.raises(ce.CatalogueError, match="not valid JSON"):
        ce.load(bad)


def test_swapper_entries_agree_with_the_swapper_cards(cat):
    for e in cat.entries:
        if e.kind not in ("swapper", "embedder"):
            continue
        card = BY_NAME[e.card]
        p = prep(e)
        assert (card.layout, card.size) == (p.template, p.size), e.name
        assert np.allclose(card.mean, p.mean) and np.allclose(card.std, p.std), e.name
        if p.output_range is not None:
            assert tuple(card.output_range) == p.output_range, e.name
        assert [(t.name, t.shape) for t in card.inputs] == [(t.name, t.shape) for t in e.inputs], e.name


@pytest.mark.parametrize("layout", sorted(FACEFUSION_TEMPLATES))
def test_templates_are_the_published_ones(layout):
    for size in (112, 128, 256, 512):
        got = template(layout, size).points
        want = np.asarray(FACEFUSION_TEMPLATES[layout], np.float32) * size
        assert np.abs(got - want).max() < 2e-3 * size / 112, (layout, size)
    if layout == "ffhq_512":
        assert np.abs(template("ffhq_512", 512).points - np.asarray(FACEXLIB_512, np.float32)).max() < 1e-3


def _pixel_through(entry, rgb):
    crop = np.zeros((1, prep(entry).size, prep(entry).size, 3), np.uint8)
    crop[:] = rgb
    return to_network(crop, prep(entry))


def test_preprocessing_matches_each_reference(cat):
    rgb = np.array([200, 120, 40], np.uint8)
    x = rgb / 255.0
    # GFPGAN (and the restoration families fed alike): RGB, (x - 0.5) / 0.5, NCHW
    for n in ("gfpgan_1.4", "restoreformer_plus_plus", "codeformer", "gpen_bfr_512", "gpen_bfr_256"):
        y = _pixel_through(cat.get(n), rgb)
        assert y.shape[1] == 3
        assert np.allclose(y[0, :, 0, 0], (x - GFPGAN_IN["mean"]) / GFPGAN_IN["std"], atol=1e-6), n
        assert prep(cat.get(n)).output_range == GFPGAN_IN["out"]
    # BiSeNet: RGB, ImageNet mean/std, 512
    e = cat.get("bisenet_resnet_34")
    y = _pixel_through(e, rgb)
    assert prep(e).size == BISENET_IN["size"]
    assert np.allclose(y[0, :, 0, 0], (x - BISENET_IN["mean"]) / np.asarray(BISENET_IN["std"]), atol=1e-6)
    # XSeg: BGR in [0, 1], NHWC, 256
    e = cat.get("xseg_1")
    y = _pixel_through(e, rgb)
    assert y.shape == (1, XSEG_IN["size"], XSEG_IN["size"], 3)
    assert np.allclose(y[0, 0, 0], x[::-1], atol=1e-6)
    # SimSwap and GHOST: RGB, their mean and std, 256, on FaceFusion's arcface_112_v1 crop
    for n, ref in (("simswap_256", SIMSWAP_IN), ("ghost_1_256", GHOST_IN)):
        e = cat.get(n)
        y = _pixel_through(e, rgb)
        assert (prep(e).template, prep(e).size) == (ref["template"], ref["size"]), n
        assert y.shape == (1, 3, ref["size"], ref["size"]), n
        assert np.allclose(y[0, :, 0, 0], (x - np.asarray(ref["mean"])) / np.asarray(ref["std"]), atol=1e-6), n
        assert tuple(BY_NAME[e.card].output_range) == ref["out"], n
    # inswapper: RGB in [0, 1] at 128
    e = cat.get("inswapper_128")
    y = _pixel_through(e, rgb)
    assert y.shape == (1, 3, INSWAPPER_IN["size"], INSWAPPER_IN["size"])
    assert np.allclose(y[0, :, 0, 0], x * 255 * INSWAPPER_IN["scale"] - INSWAPPER_IN["mean"], atol=1e-6)


def test_each_tiny_file_is_recognised_as_its_family(cat, tiny_files, tmp_path):
    import onnxruntime as ort

    for e in cat.entries:
        if e.kind not in ("enhancer", "parser"):
            continue
        path = tmp_path / e.file
        path.write_bytes(tiny_files[e.name])
        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        sig = Signature(tuple((i.name, tuple(i.shape)) for i in s.get_inputs()),
                        tuple((o.name, tuple(o.shape)) for o in s.get_outputs()))
        assert fits(e, sig)
        got = recognise(sig, e.kind, file_name=e.file, catalogue=cat)
        assert got.card == e.card and prep(got) == prep(e), e.name
        assert recognise(sig, e.kind, name=e.name, catalogue=cat) is e
    # a 256 enhancer asked for as a 512 one, and a file of no known signature, are refused with what was expected
    gpen256 = Signature((("input", (1, 3, 256, 256)),), (("output", (1, 3, 256, 256)),))
    with pytest.raises(FamilyRefused, match="is not a gfpgan_1.4 model"):
        recognise(gpen256, "enhancer", name="gfpgan_1.4", catalogue=cat)
    odd = Signature((("input", (1, 3, 100, 100)),), (("output", (1, 3, 100, 100)),))
    with pytest.raises(FamilyRefused, match=r"no known enhancer.*gfpgan_1.4: input Nx3x512x512"):
        recognise(odd, "enhancer", file_name="odd.onnx", catalogue=cat)
