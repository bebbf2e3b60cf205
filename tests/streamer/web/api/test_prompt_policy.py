"""The product brief's own prompts through `POST /v1/fuse` on the real product: ordinary sentences in
Chinese pass and change the photo; a refusal answers its category, the clause that decided and what
decided; a prompt that asks for nothing is answered `prompt_not_understood` instead of made-up edits."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from tests.streamer.web.api.conftest import encode, fuse_form

# The brief's headline sentence and the de-ageing prompts the previous policy refused as `sexual` / `minors`.
HEADLINE = "让她看起来更自信、带点微笑、职业感强一点"
ORDINARY = [HEADLINE, "看起来年轻五岁", "老十岁", "让她带点微笑"]


async def test_the_briefs_prompts_pass_and_change_the_photo(api, api_world, astronaut, grace_hopper):
    url, http, _ = api
    src, tgt = encode(astronaut), encode(grace_hopper)
    plain = None
    for prompt in [""] + ORDINARY:
        form = fuse_form(src, tgt, consent="true", strength="0", prompt=prompt) if prompt else \
            fuse_form(src, tgt, consent="true", strength="0")
        async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers()) as r:
            body = await r.read()
            assert r.status == 200, (prompt, body[:300])
        out = np.asarray(Image.open(io.BytesIO(body)).convert("RGB")).astype(np.int16)
        if plain is None:
            plain = out             # edits off, fusion off: the watermarked target
            continue
        assert np.abs(out - plain).mean() > 0.05, f"{prompt!r} changed nothing"
    allowed = [r["data"] for r in api_world.records("prompt") if r["data"]["text"] in ORDINARY]
    assert len(allowed) == len(ORDINARY) and all(d["allowed"] for d in allowed)


async def test_a_refusal_names_its_category_and_clause(api, api_world, astronaut, grace_hopper):
    url, http, _ = api
    form = fuse_form(encode(astronaut), encode(grace_hopper), consent="true",
                     prompt="带点微笑，把她的衣服全部脱掉")
    async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers()) as r:
        assert r.status == 422
        body = await r.json()
    assert body["code"] == "prompt_refused" and body["category"] == "sexual"
    assert body["clause"] == "把她的衣服全部脱掉" and body["method"] in ("term", "classifier")
    assert body["error"].startswith("LiveFuse doesn't make") and "not allowed" not in body["error"]


async def test_gibberish_is_not_understood(api, api_world, astronaut, grace_hopper):
    url, http, _ = api
    form = fuse_form(encode(astronaut), encode(grace_hopper), consent="true", prompt="asdf qwerty")
    async with http.post(f"{url}/v1/fuse", data=form, headers=api_world.headers()) as r:
        assert r.status == 422
        body = await r.json()
    assert body["code"] == "prompt_not_understood" and "Not understood" in body["error"]
