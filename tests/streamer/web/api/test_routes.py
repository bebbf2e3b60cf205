"""POST /v1/fuse with real photos on the real product: the fused photo comes back watermarked (as
`livefuse verify` reads it), the audit chain holds the request, and every refusal is JSON with its code
and status."""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image

from streamer.app.cli import main
from streamer.safety.audit import verify
from tests.streamer.web.api.conftest import encode, fuse_form


def _face_box(img: np.ndarray) -> tuple[int, int, int, int]:
    from engines.faces import LandmarkerConfig, MediaPipeLandmarker

    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1, mode="image"))
    try:
        x0, y0, x1, y1 = lm.detect(img, 0)[0].bbox
    finally:
        lm.close()
    return int(x0), int(y0), int(x1), int(y1)


async def test_fused_photo_is_watermarked_and_audited(api, api_world, astronaut, grace_hopper, tmp_path, capsys):
    url, http, _ = api
    form = fuse_form(encode(astronaut), encode(grace_hopper), consent="true", prompt="a slight smile",
                     strength="0.9", edits=json.dumps({"lip_tint": 0.4}))
    async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers()) as r:
        body = await r.read()
        assert r.status == 200, body[:300]
        assert r.content_type == "image/png"
        payload, record = r.headers["X-LiveFuse-Watermark"], r.headers["X-LiveFuse-Audit-Record"]
        assert r.headers["X-LiveFuse-Faces"] == "1/1" and "fusion;dur=" in r.headers["Server-Timing"]
    out = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))
    assert out.shape == grace_hopper.shape
    x0, y0, x1, y1 = _face_box(grace_hopper)
    inside = np.abs(out[y0:y1, x0:x1].astype(int) - grace_hopper[y0:y1, x0:x1]).mean()
    assert inside > 8, f"the face barely changed (mean |diff| {inside:.1f})"
    (tmp_path / "fused.png").write_bytes(body)
    assert main(["verify", str(tmp_path / "fused.png"), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["watermarked"] and verdict["payload"].lower().removeprefix("0x").zfill(16) == payload
    fused = [r for r in api_world.records("api_fuse") if r["data"]["request"] == record]
    assert len(fused) == 1 and fused[0]["data"]["watermark"] == payload and fused[0]["data"]["token"] == "alice"
    registered = [r for r in api_world.records("source_registered") if r["data"]["session"] == record]
    assert registered and registered[0]["data"]["consent"] is True
    prompts = [r for r in api_world.records("prompt") if r["data"]["session"] == record]
    assert prompts and prompts[0]["data"]["allowed"] is True
    assert verify(api_world.audit_path).ok


async def test_the_makeup_shade_is_the_form_s_or_the_prompt_s(api, api_world, astronaut, grace_hopper):
    """`colours` paints the lipstick in the shade it names; the prompt's colour word does the same."""
    from engines.face_masks import region_mask
    from tests.faceclips import landmarks_of

    url, http, _ = api
    lips = region_mask(grace_hopper.shape[:2], landmarks_of(grace_hopper), ["lips_outer"], ["lips_inner"]) > 0.8
    outs = {}
    for name, fields in (("coral", {"edits": json.dumps({"lip_tint": 1.0}), "colours": json.dumps({"lip_tint": "coral"})}),
                         ("plum", {"edits": json.dumps({"lip_tint": 1.0}), "colours": json.dumps({"lip_tint": "#6e2a4f"})}),
                         ("prompt", {"prompt": "plum lipstick"})):
        form = fuse_form(encode(astronaut), encode(grace_hopper), consent="true", strength="0", **fields)
        async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers()) as r:
            body = await r.read()
            assert r.status == 200, body[:300]
        outs[name] = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))[lips].astype(float).mean(0)
    assert outs["coral"][0] > outs["plum"][0] + 30 and outs["plum"][2] > outs["coral"][2] + 20, outs   # orange-red / blue-red
    assert np.abs(outs["prompt"] - outs["plum"]).max() < 6, outs          # the word alone gives the same plum


async def test_the_shape_field_sets_how_far_the_face_s_proportions_move(api, api_world, astronaut, grace_hopper):
    """`shape` 0 is the texture-only swap, 1 moves the eyes, brows and nose all the way: the larger the
    shape, the further the fused face lies from the texture-only one; out of 0..1 is a 400 that says so."""
    url, http, _ = api
    x0, y0, x1, y1 = _face_box(grace_hopper)
    outs = {}
    for shape in ("0", "0.3", "1"):
        form = fuse_form(encode(astronaut), encode(grace_hopper), consent="true", shape=shape)
        async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers()) as r:
            body = await r.read()
            assert r.status == 200, body[:300]
        outs[shape] = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))[y0:y1, x0:x1].astype(int)
    apart = {s: np.abs(outs[s] - outs["0"]).mean() for s in ("0.3", "1")}
    assert 0.5 < apart["0.3"] < apart["1"] and apart["1"] > 3, apart
    for bad in ("2", "-0.5", "x", "nan"):
        got, body = await _refusal(http, url, api_world.headers(),
                                   fuse_form(encode(astronaut), encode(grace_hopper), consent="true", shape=bad))
        assert (got, body["code"]) == (400, "bad_request") and body["error"] == "shape must be a number from 0 to 1", bad


async def test_accept_jpeg_gives_jpeg_and_unknown_accept_is_406(api, api_world, astronaut, grace_hopper):
    url, http, _ = api
    form = fuse_form(encode(astronaut), encode(grace_hopper), consent="true")
    async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers(Accept="image/jpeg")) as r:
        body = await r.read()
        assert r.status == 200 and r.content_type == "image/jpeg" and body[:2] == b"\xff\xd8"
    form = fuse_form(encode(astronaut), encode(grace_hopper), consent="true")
    async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers(Accept="text/html")) as r:
        assert r.status == 406 and (await r.json())["code"] == "not_acceptable"


async def _refusal(http, url, headers, form) -> tuple[int, dict]:
    async with http.post(f"{url}/v1/fuse", data=form, headers=headers) as r:
        assert r.content_type == "application/json"
        return r.status, await r.json()


async def test_every_refusal_has_its_code_and_status(api, api_world, astronaut, grace_hopper, face_free_images):
    url, http, _ = api
    h = api_world.headers()
    src, tgt = encode(astronaut), encode(grace_hopper)
    free = encode(next(iter(face_free_images.values())))
    cases = {
        "no consent": (fuse_form(src, tgt), 422, "source_no_consent"),
        "consent false": (fuse_form(src, tgt, consent="false"), 422, "source_no_consent"),
        "no face in source": (fuse_form(free, tgt, consent="true"), 422, "source_no_face"),
        "no face in target": (fuse_form(src, free, consent="true"), 422, "target_no_face"),
        "protected identity": (fuse_form(encode(api_world.protected), tgt, consent="true"), 422,
                               "source_protected_identity"),
        "prompt refused": (fuse_form(src, tgt, consent="true", prompt="make me look like Tom Cruise"), 422,
                           "prompt_refused"),
        "not an image": (fuse_form(b"hello, not an image", tgt, consent="true"), 422, "source_bad_image"),
        "missing target": (fuse_form(src, None, consent="true"), 400, "bad_request"),
        "bad strength": (fuse_form(src, tgt, consent="true", strength="2"), 400, "bad_request"),
        "bad shape": (fuse_form(src, tgt, consent="true", shape="1.5"), 400, "bad_request"),
        "bad edits": (fuse_form(src, tgt, consent="true", edits='{"smile": "lots"}'), 400, "bad_request"),
        "unknown edit": (fuse_form(src, tgt, consent="true", edits='{"horns": 1}'), 400, "bad_request"),
        "unknown shade": (fuse_form(src, tgt, consent="true", colours='{"lip_tint": "teal-ish"}'), 400, "bad_request"),
        "shade on a shape": (fuse_form(src, tgt, consent="true", colours='{"smile": "red"}'), 400, "bad_request"),
        "shades not JSON": (fuse_form(src, tgt, consent="true", colours="coral"), 400, "bad_request"),
    }
    for name, (form, status, code) in cases.items():
        got, body = await _refusal(http, url, h, form)
        assert (got, body.get("code")) == (status, code), f"{name}: {got} {body}"
        assert body["error"], name
    got, body = await _refusal(http, url, h, fuse_form(src, tgt, consent="true", prompt="make me look like Tom Cruise"))
    assert body["category"] == "impersonation"
    refused = [r["data"]["code"] for r in api_world.records("api_fuse_refused")]
    assert {"source_no_consent", "target_no_face", "source_protected_identity", "prompt_refused"} <= set(refused)


async def test_size_type_and_token_refusals(api, api_world, astronaut, grace_hopper):
    url, http, server = api
    huge = np.zeros((5000, 9000, 3), np.uint8)   # a side past 8192 px: refused from the header
    form = fuse_form(encode(astronaut), encode(huge, "PNG"), consent="true")
    got, body = await _refusal(http, url, api_world.headers(), form)
    assert got in (413, 422) and body["code"].startswith("target_"), body
    over = server.config.max_source_bytes + 1
    form = fuse_form(b"\xff" * over, encode(grace_hopper), consent="true")
    got, body = await _refusal(http, url, api_world.headers(), form)
    assert (got, body["code"]) == (413, "source_too_large")
    async with http.post(f"{url}/v1/fuse", data=b"{}", headers=api_world.headers(**{"Content-Type": "application/json"})) as r:
        assert r.status == 415
    async with http.post(f"{url}/v1/fuse", data=fuse_form(encode(astronaut), encode(grace_hopper), consent="true"),
                         headers={"Authorization": "Bearer not-a-token"}) as r:
        assert r.status == 401
    async with http.get(f"{url}/metrics", headers=api_world.headers()) as r:   # /metrics asks for a token too
        text = await r.text()
    assert 'livefuse_api_requests_total{route="fuse",status="413"}' in text


async def test_map_gives_faces_by_reading_order_their_choice(api, api_world, astronaut, grace_hopper):
    """A target with two real portraits side by side: `map=0=source,1=keep` fuses the left face toward
    the source and leaves the right one as the input (up to the watermark, which a strength-0 request of
    the same photo carries alone); bad maps get their codes."""
    from engines.identity import IdentityEmbedder, distance
    from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE, group_frame
    from tests.streamer.pipeline.stages.test_fusion import detect

    pair, _ = group_frame([(grace_hopper, GRACE_HOPPER_FACE, 150, (200, 260)), (astronaut, ASTRONAUT_FACE, 150, (560, 260))],
                          size=(760, 520))
    url, http, _ = api

    async def fuse(**fields):
        form = fuse_form(encode(astronaut), encode(pair, "PNG"), consent="true", **fields)   # (Hopper is denylisted here)
        async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers()) as r:
            body = await r.read()
            return r.status, r.headers, body

    status, headers, body = await fuse(map="0=source, 1=keep")
    assert status == 200, body[:300]
    assert headers["X-LiveFuse-Faces"] == "2/1"
    out = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))
    status, _, marked_body = await fuse(strength="0")
    marked = np.asarray(Image.open(io.BytesIO(marked_body)).convert("RGB"))
    left, right = sorted(detect(pair), key=lambda f: f.bbox[0])
    box = lambda f: (slice(int(f.bbox[1]), int(f.bbox[3])), slice(int(f.bbox[0]), int(f.bbox[2])))  # noqa: E731
    assert np.abs(out[box(left)].astype(int) - pair[box(left)]).mean() > 8
    assert np.abs(out[box(right)].astype(int) - marked[box(right)]).max() == 0   # kept: the input plus the watermark
    emb = IdentityEmbedder()
    source = emb.embed(astronaut, detect(astronaut)[0])
    assert distance(emb.embed(out, left), source) < distance(emb.embed(pair, left), source)
    for fields, code, want in (({"map": "0=alice"}, "bad_map", 400), ({"map": "0=keep,zero=source"}, "bad_map", 400),
                               ({"map": ",".join(f"{i}=keep" for i in range(17))}, "bad_map", 400),
                               ({"map": "2=keep"}, "map_bad_index", 422)):
        status, _, body = await fuse(**fields)
        reply = json.loads(body)
        assert status == want and reply["code"] == code, (fields, reply)
