"""The neural path end to end, with tiny models of each family's signature installed by `livefuse models get`
from a loopback server into a models folder: the product finds them by catalogue name (swapper,
embedder, enhancer, parser) and logs each one's licence; a name not installed is refused saying what to
run; the enhancer changes exactly the face and the parser's occluder (a green patch over the cheek) stays
live in `livefuse process`, in `POST /v1/fuse` and on the live stream's frame path (yuv420p planes
through the frame worker), where the enhancer is off until the session turns it on."""

from __future__ import annotations

import io
import json
import logging
import threading

import cv2
import numpy as np
import pytest
from av import VideoFrame
from PIL import Image

from bench import _catalogue_models as cm
from engines.catalogue.download import get
from engines.catalogue import entries as ce
from engines.face_masks import region_mask
from engines.face_nets import FaceNetConfig
from engines.swappers.swapper import SwapperConfig
from streamer.app.assembly import Product, ProductConfig
from streamer.pipeline.stats import StreamStats
from streamer.pipeline.worker import FrameWorker
from streamer.session.session import Session
from streamer.web.kit import SafetyConfig
from tests.engines.catalogue._server import FileServer
from tests.engines.catalogue.conftest import site_catalogue
from tests.streamer.pipeline.stages.test_fusion import detect, frame640
from streamer.services import with_hooks

pytest.importorskip("onnxruntime")
GREEN = (20, 220, 30)
INSTALL = ("inswapper_128", "arcface_w600k_r50", "gfpgan_1.4", "bisenet_resnet_34")


@pytest.fixture(scope="module")
def models_env(tmp_path_factory):
    """LIVEFUSE_CATALOGUE / LIVEFUSE_MODELS for the module: a site catalogue on a loopback server, and the
    four models installed from it the way a user installs them."""
    root = tmp_path_factory.mktemp("neural_path")
    tiny = {}
    for e in ce.load(ce.CATALOGUE_FILE).entries:
        tiny[e.name] = cm.for_entry(e, root / "built" / e.name, batch="N").read_bytes()
    server = FileServer()
    mp = pytest.MonkeyPatch()
    try:
        cat_file = site_catalogue(root / "site.json", server, tiny)
        mp.setenv("LIVEFUSE_CATALOGUE", str(cat_file))
        mp.setenv("LIVEFUSE_MODELS", str(root / "models"))
        cat = ce.load(cat_file)
        for name in INSTALL:
            get(name, accept=[name], catalogue=cat)
        yield root
    finally:
        mp.undo()
        server.close()


@pytest.fixture(scope="module")
def product(models_env):
    p = Product(ProductConfig(
        swapper=SwapperConfig(swapper="inswapper_128", embedder="arcface_w600k_r50", window_ms=0.0),
        enhancer=FaceNetConfig(path="gfpgan_1.4", window_ms=0.0), parser=FaceNetConfig(path="bisenet_resnet_34", window_ms=0.0),
        safety=SafetyConfig(audit_path=str(models_env / "audit.jsonl"), open_loopback=True),
        results=str(models_env / "results")))
    yield p
    p.close()


@pytest.fixture(scope="module")
def scene(grace_hopper):
    """Grace Hopper at 640x480 with a green 'microphone' over her cheek, its mask, and her face."""
    img = frame640(grace_hopper)
    [face] = detect(img)
    lm = face.landmarks[:, :2]
    cx, cy = (lm[234] * 0.55 + lm[1] * 0.45).astype(int)
    out = img.copy()
    out[cy - 12:cy + 12, cx - 12:cx + 12] = GREEN
    green = np.zeros(img.shape[:2], bool)
    green[cy - 12:cy + 12, cx - 12:cx + 12] = True
    return out, green, face


def oval(shape, face, grow=0):
    m = (region_mask(shape[:2], face.landmarks[:, :2], ["face_oval"]) > 0.5).astype(np.uint8)
    return (cv2.dilate(m, np.ones((2 * grow + 1,) * 2, np.uint8)) if grow else m) > 0


def core_of(shape, face, green):
    core = cv2.erode(oval(shape, face).astype(np.uint8), np.ones((41, 41), np.uint8)) > 0
    return core & ~(cv2.dilate(green.astype(np.uint8), np.ones((15, 15), np.uint8)) > 0)


def test_catalogue_names_load_and_each_licence_is_logged(product, caplog):
    caplog.set_level(logging.INFO, logger="streamer.app.assembly")
    assert product.swapper.card.name == "inswapper_128" and product.enhancer.entry.name == "gfpgan_1.4"
    assert product.face_parser.entry.name == "bisenet_resnet_34"
    lines = [r.getMessage() for r in caplog.records if "model licence" in r.getMessage()]
    joined = "\n".join(lines)
    for role, want in (("swapper", "inswapper_128: InsightFace model licence"), ("embedder", "arcface_w600k_r50"),
                       ("enhancer", "gfpgan_1.4: Apache-2.0"), ("parser", "bisenet_resnet_34: MIT")):
        assert f"model licence ({role}): {want}" in joined, joined
    assert "NON-COMMERCIAL" in joined and "commercial use allowed" in joined
    names = product.make_pipeline(Session()).names
    assert names.index("parse") < names.index("fusion") < names.index("swap") < names.index("enhance") < names.index("edits")


def test_a_name_not_installed_is_refused_saying_what_to_run(models_env, tmp_path, capsys):
    p = Product(ProductConfig(enhancer=FaceNetConfig(path="codeformer"),
                              safety=SafetyConfig(audit_path=str(tmp_path / "a.jsonl"))))
    with pytest.raises(ce.CatalogueError, match="codeformer is not installed .*livefuse models get codeformer"):
        p.enhancer  # noqa: B018
    from streamer.app.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["process", str(tmp_path / "in.mp4"), "-o", str(tmp_path / "o.mp4"), "--enhancer", "codeformer",
              "--audit-log", str(tmp_path / "b.jsonl")])
    assert "livefuse models get codeformer" in str(exc.value)
    with pytest.raises(SystemExit) as exc:
        main(["process", str(tmp_path / "in.mp4"), "-o", str(tmp_path / "o.mp4"), "--enhancer", "no_such_thing",
              "--audit-log", str(tmp_path / "b.jsonl")])
    assert "neither a file nor a catalogue enhancer" in str(exc.value) and "gfpgan_1.4" in str(exc.value)


def assert_occluder_kept(out, own):
    """The occluder's pixels are its own, up to the watermark and the encode.

    The watermark adds a zero-mean pattern of 2.5 rms luma levels whose peaks (about 4 rms) plus the encode's
    error reach about 12 on single pixels, and whose mean over the 18x18 occluder moves between about 1 and 3.1
    from run to run with the session's payload. A 10 % blend of the face over the green moves every pixel
    about 11 the same way, which the signed per-channel mean shows at once.
    """
    d = out - own
    assert np.abs(d).mean() < 5.0 and np.abs(d).max() <= 14, (np.abs(d).mean(), np.abs(d).max())
    assert np.all(np.abs(d.mean(axis=0)) < 3.5), d.mean(axis=0)


def _clip(path, image, frames=6):
    import av
    import fractions

    h, w = image.shape[:2]
    with av.open(str(path), "w") as out:
        v = out.add_stream("libx264", rate=24)
        v.width, v.height, v.pix_fmt = w, h, "yuv420p"
        v.options = {"crf": "4", "preset": "ultrafast"}
        for i in range(frames):
            f = VideoFrame.from_ndarray(image, format="rgb24")
            f.pts, f.time_base = i, fractions.Fraction(1, 24)
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode(None):
            out.mux(p)
    return path


def _frames(path):
    import av

    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def test_process_enhances_the_face_and_keeps_the_occluder(product, scene, tmp_path):
    from streamer.app.clips import process_file

    img, green, face = scene
    src = _clip(tmp_path / "in.mp4", img)
    decoded = _frames(src)[-1].astype(int)
    services = with_hooks(product, make_pipeline=product.clip_pipeline)
    outs = {}
    for name, enhance in (("on", None), ("off", 0.0)):
        dst = tmp_path / f"{name}.mp4"
        summary = process_file(str(src), str(dst), services, source="demo", progress=False, enhance=enhance, crf=4)
        assert summary["stage_errors"] == 0
        outs[name] = _frames(dst)[-1].astype(int)
    core = core_of(img.shape, face, green)
    lift = float(np.median(outs["on"][core] - outs["off"][core]))
    assert lift == pytest.approx(cm.DELTA * 127.5, abs=6)                 # the enhancer ran at strength 1 by default
    outside = ~oval(img.shape, face, grow=10)
    diff = outs["on"] - outs["off"]              # outside the face: only the two runs' watermarks and encodes differ
    assert abs(float(np.median(diff[outside]))) <= 0.5 and np.abs(diff).max(axis=2)[outside].mean() < 3.0
    inner = cv2.erode(green.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
    for out in outs.values():
        assert_occluder_kept(out[inner], decoded[inner])                  # the occluder is the frame's own


async def test_v1_fuse_enhances_and_keeps_the_occluder(product, scene, astronaut):
    from tests.streamer.web.api.conftest import fuse_form, serve_product

    img, green, face = scene
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    async with serve_product(product) as (url, http, _):
        outs = {}
        for name, fields in (("default", {}), ("off", {"enhance": "0"}), ("half", {"enhance": "0.5"})):
            from tests.streamer.web.api.conftest import encode

            form = fuse_form(encode(astronaut), buf.getvalue(), consent="true", **fields)
            async with http.post(f"{url}/v1/fuse", data=form) as r:
                body = await r.read()
                assert r.status == 200, body[:300]
            outs[name] = np.asarray(Image.open(io.BytesIO(body)).convert("RGB")).astype(int)
        form = fuse_form(encode(astronaut), buf.getvalue(), consent="true", enhance="1.5")
        async with http.post(f"{url}/v1/fuse", data=form) as r:
            assert r.status == 400 and "enhance must be a number from 0 to 1" in json.dumps(await r.json())
    core = core_of(img.shape, face, green)
    full = float(np.median(outs["default"][core] - outs["off"][core]))
    assert full == pytest.approx(cm.DELTA * 127.5, abs=6)                 # on by default in /v1/fuse
    assert float(np.median(outs["half"][core] - outs["off"][core])) == pytest.approx(full / 2, abs=4)
    outside = ~oval(img.shape, face, grow=10)
    assert np.abs(outs["default"] - outs["off"]).max(axis=2)[outside].mean() < 1.0
    inner = cv2.erode(green.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
    assert_occluder_kept(outs["default"][inner], img[inner].astype(int))  # the occluder is the photo's own
    assert np.abs(outs["default"][core] - img[core].astype(int)).mean() > 10   # while the rest of the face changed


def _stream(product, session, image, frames=3):
    """Frames through the live stream's worker (yuv420p planes, the session's own pipeline); the last out."""
    worker = FrameWorker(session, product.make_pipeline(session), StreamStats())
    got, done = [], threading.Event()

    def wake() -> None:
        seq, item = worker.outbox.latest()
        if item is not None and len(got) < seq:
            got.append(item[0])
            done.set()

    worker.outbox.subscribe(wake)
    worker.start()
    try:
        import fractions

        for i in range(frames):
            f = VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p")
            f.pts, f.time_base = i * 3000, fractions.Fraction(1, 90000)
            done.clear()
            worker.submit(f)
            assert done.wait(60), "no frame came out"
    finally:
        worker.stop()
    return got[-1].to_ndarray(format="rgb24").astype(int)


def test_live_stream_enhancer_off_by_default_on_when_asked_occluder_live(product, scene, astronaut):
    img, green, face = scene
    src = product.registry.register(astronaut)

    def session(**controls):
        s = Session()
        s.add_source(src.id, src)
        s.update(source_id=src.id, **controls)
        return s

    default = _stream(product, session(), img)
    on = _stream(product, session(enhance=1.0), img)
    decoded = VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p").to_ndarray(format="rgb24").astype(int)
    core = core_of(img.shape, face, green)
    assert float(np.median(on[core] - default[core])) == pytest.approx(cm.DELTA * 127.5, abs=8)
    outside = ~oval(img.shape, face, grow=10)
    diff = on - default                          # outside the face: only the two sessions' watermarks differ
    assert abs(float(np.median(diff[outside]))) <= 0.5 and np.abs(diff).max(axis=2)[outside].mean() < 3.0
    inner = cv2.erode(green.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
    for out in (default, on):
        assert_occluder_kept(out[inner], decoded[inner])                  # the occluder stays live
        assert np.abs(out[core] - decoded[core]).mean() > 5               # the face itself was swapped
