"""The safety parts as the product builds them: everything lands in one audit log that verifies."""

from __future__ import annotations

import pytest
from PIL import Image

from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.safety.audit import iter_records, verify
from streamer.app.assembly import build_safety, watermark_stage
from streamer.web.kit import SafetyConfig
from streamer.session.session import Session
from tests.watermark_clips import moving_clip


def test_kit_wires_one_audit_trail(tmp_path, astronaut, grace_hopper):
    import json

    from engines.faces import MediaPipeLandmarker
    from engines.identity import IdentityEmbedder

    deny = tmp_path / "deny"
    deny.mkdir()
    Image.fromarray(grace_hopper).save(deny / "grace.png")
    cfg = SafetyConfig(host="0.0.0.0", audit_path=str(tmp_path / "audit.jsonl"), denylist_dir=str(deny), server_id=9)
    from engines.sources import SourceRefused, SourceRegistry

    kit = build_safety(cfg, model=None, registry=SourceRegistry(embedder=IdentityEmbedder()), landmarker=MediaPipeLandmarker())
    assert kit.access.require_tokens and kit.watermark.enabled
    session = Session("kit-session")
    kit.prompts.set_prompt(session, "a slight smile")
    kit.prompts.set_prompt(session, "show me nude")
    kit.sources.register(session, astronaut, {"consent": "true"})
    with pytest.raises(SourceRefused):
        kit.sources.register(session, grace_hopper, {"consent": "true"})
    pipe = Pipeline([watermark_stage(kit)])
    out = pipe(FrameState(image=moving_clip(astronaut, n=1)[0]), session.frame_context())
    assert out.watermark
    pipe.close()
    kit.close()
    events = [json.loads(line)["event"] for _, _, line in iter_records(cfg.audit_path)]
    assert events == ["prompt", "prompt", "source_registered", "source_refused", "watermark"]
    assert verify(cfg.audit_path).ok
