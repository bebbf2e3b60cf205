"""Source registration on real photos: the chosen face, its canonical texture and statistics, the cache,
and clear refusals for images that cannot be a source."""

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from engines import mesh
from engines.sources import SourceConfig, SourceRefused, SourceRegistry, decode_image


@pytest.fixture(scope="module")
def registry():
    return SourceRegistry()


def png_bytes(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def refusal(registry, data, **kw) -> SourceRefused:
    with pytest.raises(SourceRefused) as info:
        registry.register(data, **kw)
    return info.value


def test_astronaut_becomes_a_canonical_source(registry, astronaut):
    src = registry.register(astronaut)
    cfg = registry.config
    s = cfg.texture_size
    assert src.texture.shape == (s, s, 3) and src.texture.dtype == np.uint8
    loops = mesh.loops()
    right = src.landmarks[loops["right_eye"], :2].mean(axis=0)
    left = src.landmarks[loops["left_eye"], :2].mean(axis=0)
    np.testing.assert_allclose(right, [s * (0.5 - cfg.eye_distance / 2), s * cfg.eye_height], atol=0.5)
    np.testing.assert_allclose(left, [s * (0.5 + cfg.eye_distance / 2), s * cfg.eye_height], atol=0.5)
    mean, std = src.skin_stats
    assert 50 < mean[0] < 90 and mean[1] > 0 and mean[2] > 0     # light, warm skin tone
    assert src.levels[0] is src.texture and src.levels[1].shape[0] == s // 2
    assert src.lab_levels[0].dtype == np.float32
    assert src.summary()["id"] == src.id


def test_same_content_is_cached_bytes_or_array(registry, grace_hopper):
    a = registry.register(grace_hopper)
    b = registry.register(png_bytes(grace_hopper))      # PNG is lossless: same pixels, same record
    assert a is b


def test_several_faces_largest_by_default_or_by_index(registry, astronaut, grace_hopper):
    # the detector looks at a 128x128 view: crop both portraits so each face is a good part of the group
    group = np.hstack([cv2.resize(astronaut[20:280, 100:360], (300, 300)), cv2.resize(grace_hopper[80:440, 90:450], (300, 300))])
    default = registry.register(group)                    # astronaut's face is the smaller one
    assert default.face_index == 1                        # Hopper is on the right and larger
    first = registry.register(group, index=0)
    assert first.bbox[2] < 300 <= default.bbox[0]
    assert refusal(registry, group, index=5).reason == "bad_index"


def test_refusals_say_why(registry, face_free_images, astronaut):
    assert refusal(registry, face_free_images["coffee"]).reason == "no_face"
    assert refusal(registry, b"not an image at all").reason == "bad_image"
    assert refusal(registry, png_bytes(astronaut)[:200]).reason == "bad_image"   # truncated file
    assert refusal(registry, "astronaut.png").reason == "bad_image"
    assert refusal(registry, astronaut.astype(np.float32)).reason == "bad_image"
    tiny = cv2.resize(astronaut, (192, 192), interpolation=cv2.INTER_AREA)      # face about 34 px wide
    err = refusal(registry, tiny)
    assert err.reason in ("too_small", "no_face") and str(err)
    event = err.as_event()
    assert event["type"] == "error" and event["code"].startswith("source_")


def test_turned_and_huge_images_are_refused(astronaut):
    # the astronaut's head is tilted about 15 degrees in pitch: a stricter limit must refuse it
    strict = SourceRegistry(SourceConfig(max_pitch=5.0))
    err = refusal(strict, astronaut)
    assert err.reason == "too_turned" and "pitch" in str(err)
    small_limit = SourceConfig(max_pixels=100_000)
    with pytest.raises(SourceRefused) as info:
        decode_image(png_bytes(astronaut), small_limit)
    assert info.value.reason == "too_large"


def test_covered_face_is_refused(registry, astronaut, face_free_images):
    occluded = astronaut.copy()
    occluded[130:185, 175:275] = face_free_images["coffee"][100:155, 100:200]   # a cup over mouth and chin
    assert refusal(registry, occluded).reason == "occluded"
    masked = astronaut.copy()
    masked[130:185, 175:275] = (150, 190, 220)                                    # a pale blue face mask
    assert refusal(registry, masked).reason == "occluded"


def test_embedding_tells_people_apart(astronaut, grace_hopper):
    from engines.identity import SAME_PERSON_DISTANCE, IdentityEmbedder, distance

    reg = SourceRegistry(embedder=IdentityEmbedder())
    a, g = reg.register(astronaut), reg.register(grace_hopper)
    assert a.embedding.shape == (128,)
    assert distance(a.embedding, g.embedding) > SAME_PERSON_DISTANCE


def test_bundled_demo_source_registers(registry):
    from streamer.web.server import DEMO_SOURCE

    src = registry.register(DEMO_SOURCE.read_bytes())
    assert src.face_index == 0 and src.texture.shape[0] == registry.config.texture_size


def test_phone_photo_rotation_is_honoured(astronaut):
    """A phone stores a portrait as landscape pixels plus an EXIF orientation; the face must come upright."""
    buf = io.BytesIO()
    sideways = Image.fromarray(np.ascontiguousarray(np.rot90(astronaut)))      # pixels turned 90 degrees left
    exif = Image.Exif()
    exif[0x0112] = 6                                                          # "rotate 90 CW to display"
    sideways.save(buf, format="JPEG", quality=95, exif=exif)
    upright = decode_image(buf.getvalue())
    assert upright.shape == astronaut.shape
    assert np.abs(upright.astype(int) - astronaut).mean() < 6


def _grey(im):
    g = cv2.cvtColor(im, cv2.COLOR_RGB2GRAY)
    return np.stack([g] * 3, axis=-1)


def _warm(im):            # tungsten light: red up, blue down
    return np.clip(im * np.array([1.15, 1.0, 0.75]), 0, 255).astype(np.uint8)


def _colourised(im):      # a black-and-white photo tinted through a warm tone curve
    g = _grey(im)[..., 0].astype(np.float32) / 255
    return np.clip(np.stack([g ** 0.8 * 255, g ** 0.95 * 225, g ** 1.2 * 190], -1), 0, 255).astype(np.uint8)


def _studio(im):          # hard studio light: contrast up, gamma lifted (highlights on forehead and nose)
    x = np.clip((im.astype(np.float32) / 255 - 0.5) * 1.5 + 0.55, 0, 1) ** 0.8
    return (x * 255).astype(np.uint8)


def _face_width(image_face_box, width, im):
    k = width / (image_face_box[2] - image_face_box[0])
    return cv2.resize(im, (int(im.shape[1] * k), int(im.shape[0] * k)), interpolation=cv2.INTER_AREA)


@pytest.mark.parametrize("look", [None, _grey, _warm, _colourised, _studio])
def test_clean_portraits_are_never_refused(astronaut, grace_hopper, look):
    """Every real portrait that loads offline, in five looks, at full size and with the face 100 px wide
    (the issue's colourised studio portrait). Before the ridge-highlight rule, Grace Hopper in studio light
    was refused as "occluded (forehead, nose)" at every size; measured 2026-12-03 over 50 variants
    (5 looks x 5 face widths, 70-300 px): 0 refusals now, 5 before. skimage's camera man is left out: he is
    in profile (refused as turned, rightly)."""
    from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE

    reg = SourceRegistry(cache_size=0)
    for photo, box in ((astronaut, ASTRONAUT_FACE), (grace_hopper, GRACE_HOPPER_FACE)):
        for width in (None, 100):
            img = photo if width is None else _face_width(box, width, photo)
            img = img if look is None else look(img)
            reg.register(np.ascontiguousarray(img))   # raises SourceRefused on a refusal


def test_real_objects_pasted_over_a_face_are_refused(registry, astronaut, grace_hopper, face_free_images):
    """Honestly built occlusions: real objects from real photos (the coffee cup and saucer, the rocket and
    its sky) pasted over the lower face, the centre of the face and one side. Measured 2026-12-03 with
    these and with chelsea's fur and a black card (24 cases, placed by the detected face): 20 refused (the
    same 20 as before the highlight rule); the cat's fur, brown like skin, passes 4 times: a colour check
    cannot see it. Here (placed by the fixture boxes) 11 of these 12 are refused: the cup over Grace
    Hopper's lower face passes (its warm porcelain lands within 16-24 of her skin on the probes)."""
    from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE

    cup = face_free_images["coffee"][60:330, 150:460]
    rocket = face_free_images["rocket"][100:400, 200:350]
    refused, cases = 0, 0
    for photo, (x0, y0, x1, y1) in ((astronaut, ASTRONAUT_FACE), (grace_hopper, GRACE_HOPPER_FACE)):
        w, h = x1 - x0, y1 - y0
        places = [(x0 + 0.1 * w, y0 + 0.5 * h, x1 - 0.1 * w, y1 + 0.1 * h), (x0 - 0.1 * w, y0 + 0.1 * h, x0 + 0.55 * w, y1),
                  (x0 + 0.25 * w, y0 + 0.3 * h, x1 - 0.25 * w, y1 - 0.1 * h)]
        for patch in (cup, rocket):
            for bx0, by0, bx1, by1 in places:
                covered = photo.copy()
                bx0, by0, bx1, by1 = int(bx0), int(by0), int(bx1), int(by1)
                covered[by0:by1, bx0:bx1] = cv2.resize(patch, (bx1 - bx0, by1 - by0))
                cases += 1
                try:
                    registry.register(covered)
                except SourceRefused as exc:
                    assert exc.reason in ("occluded", "no_face")
                    refused += 1
    assert cases == 12 and refused >= 11, refused
