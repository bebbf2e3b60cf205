"""The assembled product on real photos: a fused, edited, watermarked stream, the safety gates in front of
it, and a session that leaves nothing behind but its audit trail."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engines.face_masks import region_mask
from engines.sources import SourceRefused
from kernels.numpy import watermark as wm
from streamer.app.assembly import Product, ProductConfig
from streamer.pipeline.pipeline import FrameState
from streamer.safety.audit import iter_records, verify
from streamer.web.kit import SafetyConfig
from streamer.session.session import Session
from tests.watermark_clips import moving_clip


def run_clip(product, session, frames):
    pipeline = product.make_pipeline(session)
    try:
        return [pipeline(FrameState(image=f.copy(), pts=i * 3000), session.frame_context())
                for i, f in enumerate(frames)], pipeline.names
    finally:
        pipeline.close()


def test_fused_edited_and_marked(product, astronaut, grace_hopper):
    session = Session("assembly-live")
    out = product.register_source(session, astronaut, {"consent": "true", "source_id": "demo"})
    assert out["source_id"] == "demo" and len(out["embedding_sha256"]) == 64
    assert product.set_prompt(session, "a slight smile, warmer skin")["allowed"]
    frames = moving_clip(grace_hopper, n=12)
    states, names = run_clip(product, session, frames)
    assert names == ["faces", "face_out", "fusion", "edits", "background", "watermark"]
    last, src = states[-1], frames[-1]
    assert not last.errors, last.errors
    assert len(last.faces) == 1
    face = region_mask(src.shape[:2], last.faces[0].landmarks, ["face_oval"], feather_px=0) > 0.5
    diff = np.abs(last.image.astype(np.int16) - src.astype(np.int16)).max(axis=2)
    assert diff[face].mean() > 8            # the face took on the source
    far = np.ones_like(face)
    x0, y0, x1, y1 = (int(v) for v in last.faces[0].bbox)
    far[max(0, y0 - 60):y1 + 60, max(0, x0 - 60):x1 + 60] = False
    assert wm.psnr(last.image[far], src[far]) > 38   # elsewhere only the invisible watermark
    assert last.edits                      # the prompt reached the renderer by the last frame
    det = wm.extract(last.image, wm.make_key())
    assert det.payload is not None and f"{det.payload:016x}" == last.watermark


def test_gates_refuse_and_keep_the_previous_state(product, astronaut, face_free_images):
    session = Session("assembly-gates")
    with pytest.raises(SourceRefused) as info:
        product.register_source(session, astronaut, {})
    assert info.value.reason == "no_consent" and session.sources == {}
    with pytest.raises(SourceRefused) as info:
        product.register_source(session, face_free_images["coffee"], {"consent": "yes"})
    assert info.value.reason == "no_face"
    assert product.set_prompt(session, "professional look")["allowed"]
    refused = product.set_prompt(session, "make me look like Taylor Swift")
    assert refused["allowed"] is False and session.controls.prompt == "professional look"


def test_session_end_purges_and_the_audit_trail_verifies(product, astronaut):
    session = Session("assembly-end")
    product.register_source(session, astronaut, {"consent": "on"})
    product.set_prompt(session, "brighter")
    product.session_ended(session)
    assert session.sources == {} and session.controls.prompt == "" and session.closed.is_set()
    product.safety.audit.flush()
    path = product.config.safety.audit_path
    records = [json.loads(line) for _, _, line in iter_records(path)]
    mine = [r["event"] for r in records if r["data"].get("session") == "assembly-end"]
    assert mine == ["source_registered", "prompt", "session_purged"]
    assert all("image" not in r["data"] for r in records)  # hashes only, never pixels
    assert verify(path).ok


def test_watermark_cannot_be_left_out_of_the_stage_list():
    with pytest.raises(ValueError, match="disable_watermark"):
        ProductConfig(stages=("faces", "fusion"))
    with pytest.raises(ValueError, match="unknown stages"):
        ProductConfig(stages=("faces", "sparkle", "watermark"))


def test_a_swapper_adds_the_neural_stage_shared_by_every_session(swap_files, tmp_path, astronaut, grace_hopper):
    from engines.swappers.swapper import SwapperConfig

    cfg = ProductConfig(safety=SafetyConfig(audit_path=str(tmp_path / "audit.jsonl")), stages=("faces", "fusion", "watermark"),
                        swapper=SwapperConfig(swapper=str(swap_files["inswapper_128"]), embedder=str(swap_files["embedder"])))
    p = Product(cfg)
    try:
        one, two = Session("swap-1"), Session("swap-2")
        p.register_source(one, astronaut, {"consent": "true", "source_id": "demo"})
        assert p.swapper.embed_calls == 1          # the source vector is made at registration, not on a frame
        states, names = run_clip(p, one, moving_clip(grace_hopper, n=3))
        assert p.swapper.embed_calls == 1
        assert names == ["faces", "face_out", "fusion", "swap", "watermark"]
        last = states[-1]
        assert not last.errors, last.errors
        assert last.fused == [] and [d["card"] for d in last.swapped] == ["inswapper_128"]   # neural by default
        a, b = p.make_pipeline(one), p.make_pipeline(two)
        assert a.stages[3].swapper is b.stages[3].swapper is p.swapper   # one model for all sessions
        a.close(), b.close()
    finally:
        p.close()
    with pytest.raises(ValueError, match="--fusion both needs a swap model"):
        ProductConfig(fusion_mode="both")
FIRST_PROMPT_FRAME = r"""
import json, sys
import numpy as np, skimage.data
from bench._probe import clip_background
from streamer.app.assembly import Product, ProductConfig
from streamer.pipeline.pipeline import FrameState
from streamer.web.kit import SafetyConfig
from streamer.session.session import Session

product = Product(ProductConfig(safety=SafetyConfig(audit_path=sys.argv[1])))
product.warm_up()
session = Session()
pipeline = product.make_pipeline(session)
image = clip_background(np.ascontiguousarray(skimage.data.astronaut()[..., :3]), 320, 240)
for k in range(3):
    pipeline(FrameState(image=image.copy(), pts=k * 3000), session.frame_context())
product.set_prompt(session, "a slight smile")
before = set(sys.modules)
state = pipeline(FrameState(image=image.copy(), pts=9000), session.frame_context())
print(json.dumps({"imported": sorted(set(sys.modules) - before), "edits": state.edits}))
"""


def test_a_warmed_product_imports_nothing_on_the_frame_thread_when_the_first_prompt_arrives(tmp_path):
    """An import on a frame thread holds the GIL and stops every stream (MediaPipe's, 0.7 s, on the
    first prompt froze a session's video for 1.4 s): warm_up leaves nothing for the first frames."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", FIRST_PROMPT_FRAME, str(tmp_path / "audit.jsonl")],
                         cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["edits"].get("smile", 0) > 0          # the prompt reached the frame
    assert result["imported"] == []


def test_a_stream_reuses_a_still_face_and_a_clip_does_not(product, astronaut, grace_hopper):
    """The session's stream pipeline lets a still face keep its landmarks and reuse fusion's and edits'
    last result (ProductConfig.still); the clips' pipeline (`livefuse process`, clip jobs) computes every
    frame."""
    import av

    from streamer.pipeline.convert import frame_to_state
    from tests.faceclips import add_noise, place

    rng = np.random.default_rng(5)
    img, _ = place(grace_hopper, scale=0.7)
    frames = []
    for n in range(14):
        f = av.VideoFrame.from_ndarray(add_noise(img, 2.0, rng), format="rgb24").reformat(format="yuv420p")
        f.pts = n * 3000
        frames.append(f)
    reused, kept = {}, {}
    for name, make in (("stream", product.make_pipeline), ("clip", product.clip_pipeline)):
        session = Session(f"assembly-still-{name}")
        product.register_source(session, astronaut, {"consent": "true", "source_id": "demo"})
        session.update(edits={"smile": 0.5})
        pipeline = make(session)
        try:
            states = [pipeline(frame_to_state(f), session.frame_context()) for f in frames]
        finally:
            pipeline.close()
        assert all(s.planes is not None and s.fused and not s.errors for s in states)
        reused[name] = sum(d["reused"] for s in states for d in s.fused)
        kept[name] = pipeline.stages[0].detector.landmark_runs["kept"]
    assert reused["stream"] >= 3 and reused["clip"] == 0, reused
    assert kept["stream"] >= 3 and kept["clip"] == 0, kept


def test_a_clips_background_reads_each_head_twice_and_a_streams_does_not(product):
    """A clip's matte is steadied as a stream's and takes a photo's second look at each head
    (tests/streamer/pipeline/stages/test_background.py shows what it buys); a stream's frame time has no room."""
    for make, second in ((product.make_pipeline, False), (product.clip_pipeline, True)):
        pipeline = make(Session(f"assembly-background-{second}"))
        try:
            (stage,) = [s for s in pipeline.stages if s.name == "background"]
            assert stage.live and bool(stage.second_look) == second
        finally:
            pipeline.close()


def test_the_product_and_the_null_services_both_have_every_hook_the_server_calls():
    """`Services` is the seam's shape: the product and the neutral hooks each answer all of it, so a hook
    added to the seam and forgotten on either side fails here, not on a live request."""
    import inspect

    from streamer.app.assembly import Product
    from streamer.services import NullServices, Services

    hooks = {n for n, _ in inspect.getmembers(Services) if not n.startswith("_")}
    assert {"make_pipeline", "set_prompt", "authorize", "middlewares", "api", "record"} <= hooks
    for impl in (Product, NullServices):
        missing = sorted(n for n in hooks if not hasattr(impl, n) and n not in getattr(impl, "__dataclass_fields__", {}))
        assert not missing, f"{impl.__name__} lacks {missing}"
