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
    from streamer.server import DEMO_SOURCE

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
