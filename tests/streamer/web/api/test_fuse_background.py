"""POST /v1/fuse with a background: the `background` field (blur, a CSS colour) or a `background_image`
part replaces the room behind the person in the fused, watermarked photo, the face as fusion made it;
a bad field or picture is refused with its code before any work."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from bench import _person_scenes as ps
from tests.streamer.web.api.conftest import encode, fuse_form


def _room(scene) -> np.ndarray:
    import cv2

    far = cv2.erode((~scene.person & ~scene.void).astype(np.uint8), np.ones((41, 41), np.uint8)).astype(bool)
    return far


async def _fuse(http, url, headers, form):
    async with http.post(f"{url}/v1/fuse", data=form, headers=headers) as r:
        body = await r.read()
        return r.status, body, r.headers


async def test_background_field_and_picture_on_a_fused_photo(api, api_world, astronaut, face_free_images):
    url, http, _ = api
    scene = ps.photo_scene("grace_hopper")
    far = _room(scene)
    # a green key, by its CSS name
    form = fuse_form(encode(astronaut), encode(scene.image, "PNG"), consent="true", background="lime")
    status, body, headers = await _fuse(http, url, api_world.headers(), form)
    assert status == 200, body[:300]
    assert headers["X-LiveFuse-Watermark"] and "background;dur=" in headers["Server-Timing"]
    out = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))
    assert np.abs(np.median(out[far], axis=0) - [0, 255, 0]).max() <= 3
    # every request's matte reads through the photo API's one BlazePose: its networks load once
    pose = api_world.product.photos.models.pose
    detector = pose._detector
    assert detector is not None
    # blur: the room loses its detail
    form = fuse_form(encode(astronaut), encode(scene.image, "PNG"), consent="true", background="blur")
    status, body, _ = await _fuse(http, url, api_world.headers(), form)
    blurred = np.asarray(Image.open(io.BytesIO(body)).convert("RGB")).astype(np.float32)
    detail = lambda img: np.abs(np.diff(img, axis=1)).mean(axis=2)[far[:, 1:]].mean()  # noqa: E731
    assert status == 200 and detail(blurred) < 0.6 * detail(scene.image.astype(np.float32))
    # a picture part: the room becomes the rocket photo
    form = fuse_form(encode(astronaut), encode(scene.image, "PNG"), consent="true")
    form.add_field("background_image", encode(face_free_images["rocket"]), filename="room.jpg", content_type="image/jpeg")
    status, body, _ = await _fuse(http, url, api_world.headers(), form)
    assert status == 200, body[:300]
    pictured = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))
    assert np.abs(pictured[far].astype(int) - scene.image[far]).mean() > 30
    assert pose._detector is detector            # the same networks served the three requests


async def test_bad_backgrounds_are_refused_with_codes(api, api_world, astronaut, grace_hopper):
    url, http, _ = api
    cases = [({"background": "not-a-colour"}, None, 400, "bad_background"),
             ({"background": "image"}, None, 400, "bad_background"),
             ({"background": "blur"}, encode(astronaut), 400, "bad_background"),
             ({}, b"GIF89a not really", 422, "background_image_bad_image"),
             ({}, encode(astronaut[:20, :20]), 422, "background_image_bad_image")]
    for fields, picture, status, code in cases:
        form = fuse_form(encode(astronaut), encode(grace_hopper), consent="true", **fields)
        if picture is not None:
            form.add_field("background_image", picture, filename="bg.jpg", content_type="image/jpeg")
        got, body, _ = await _fuse(http, url, api_world.headers(), form)
        import json

        assert (got, json.loads(body)["code"]) == (status, code), body[:200]
