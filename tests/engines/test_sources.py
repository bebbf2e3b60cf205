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
    (5 looks x 5 face widths, 70-300 px): 0 refusals now, 5 before (and 0 with the validity mask,
    2026-12-05). skimage's camera man is left out: he is
    in profile (refused as turned, rightly)."""
    from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE

    reg = SourceRegistry(cache_size=0)
    for photo, box in ((astronaut, ASTRONAUT_FACE), (grace_hopper, GRACE_HOPPER_FACE)):
        for width in (None, 100):
            img = photo if width is None else _face_width(box, width, photo)
            img = img if look is None else look(img)
            reg.register(np.ascontiguousarray(img))   # raises SourceRefused on a refusal


def _box(face_box, fx0, fy0, fx1, fy1):
    x0, y0, x1, y1 = face_box
    w, h = x1 - x0, y1 - y0
    return int(x0 + fx0 * w), int(y0 + fy0 * h), int(x0 + fx1 * w), int(y0 + fy1 * h)


def _paste(photo, face_box, patch, where):
    x0, y0, x1, y1 = _box(face_box, *where)
    out = photo.copy()
    out[y0:y1, x0:x1] = cv2.resize(patch, (x1 - x0, y1 - y0))
    return out


def _side_light(photo, face_box):
    """A window on the person's left: the face's far side at 35 % of its light, the near side at 125 %."""
    x0, _, x1, _ = face_box
    gain = np.clip(0.35 + 0.9 * (np.arange(photo.shape[1], dtype=np.float32) - x0) / (x1 - x0), 0.35, 1.25)
    return np.clip(photo * gain[None, :, None], 0, 255).astype(np.uint8)


def _beard(photo, face_box):
    """Dark stubble over jaw and chin: 45 % of the pixels of an ellipse, the mouth left bare."""
    rng = np.random.default_rng(1)
    x0, y0, x1, y1 = _box(face_box, 0.1, 0.6, 0.9, 1.05)
    h, w = y1 - y0, x1 - x0
    yy, xx = np.mgrid[0:h, 0:w]
    jaw = ((xx - w / 2) / (w / 2)) ** 2 + ((yy - 0.2 * h) / (0.85 * h)) ** 2 < 1
    mouth = ((xx - w / 2) / (0.22 * w)) ** 2 + ((yy - 0.2 * h) / (0.15 * h)) ** 2 < 1
    hair = (rng.random((h, w)) < 0.45) & jaw & ~mouth
    out = photo.astype(np.float32)
    region = out[y0:y1, x0:x1]
    region[hair] = region[hair] * 0.25 + np.array([45, 32, 25]) * 0.75
    return np.clip(out, 0, 255).astype(np.uint8)


def _freckles(photo, face_box):
    """120 brown spots over nose and cheeks, 2-4 % of the face width across."""
    rng = np.random.default_rng(2)
    x0, y0, x1, y1 = _box(face_box, 0.15, 0.3, 0.85, 0.75)
    out, r = photo.copy(), max(1, (x1 - x0) // 90)
    for _ in range(120):
        centre = (int(rng.integers(x0, x1)), int(rng.integers(y0, y1)))
        cv2.circle(out, centre, int(rng.integers(r, 2 * r + 1)), (150, 95, 70), -1)
    return out


def _tattoo(photo, face_box):
    """A ring and three waves in dark blue ink on the person's left cheek."""
    x0, y0, x1, y1 = _box(face_box, 0.6, 0.45, 0.9, 0.75)
    out = photo.copy()
    cv2.circle(out, ((x0 + x1) // 2, (y0 + y1) // 2), (x1 - x0) // 4, (40, 50, 90), 2)
    xs = np.arange(x0, x1)
    for k in range(3):
        ys = y0 + (k + 1) * (y1 - y0) // 4 + 3 * np.sin((xs - x0) / 4.0)
        cv2.polylines(out, [np.stack([xs, ys], 1).astype(np.int32)], False, (40, 50, 90), 1)
    return out


def _masked_share(src) -> float:
    """Share of the source's skin (face oval less eyes, brows, lips) that fusion will not take."""
    from engines.source_mask import skin_region

    if src.validity is None:
        return 0.0
    skin = skin_region(src.validity[0].shape, src.landmarks)
    return float((src.validity[0][skin] < 0.5).mean())


@pytest.mark.parametrize("look", [_side_light, _beard, _freckles, _tattoo])
def test_skin_that_differs_is_not_a_cover(astronaut, grace_hopper, look):
    """Side light, a beard, freckles and a tattoo are the person's face: accepted, and masked no more than
    the bare photo is (the astronaut's fringe over her forehead is found and filled from the bare side,
    0 % of her skin left masked; Grace Hopper's glasses, 23 % of hers). Measured 2026-12-05: each look
    within 1 point of the bare photo."""
    from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE

    reg = SourceRegistry(cache_size=0)
    for photo, box in ((astronaut, ASTRONAUT_FACE), (grace_hopper, GRACE_HOPPER_FACE)):
        bare = reg.register(photo)
        made = reg.register(look(photo, box))
        assert _masked_share(made) <= _masked_share(bare) + 0.03, (made.masked, bare.masked)
        assert ("glasses" in made.masked) == ("glasses" in bare.masked), made.masked


def test_half_a_face_covered_is_refused_naming_the_part(registry, astronaut, grace_hopper, face_free_images):
    """Real objects from real photos over half the face: the rocket and its sky over the person's right
    side (the image's left), the coffee cup over the astronaut's lower half, a black card over both eyes.
    Each refusal says which part, in the `occluded` code the page already words."""
    from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE

    cup = face_free_images["coffee"][60:330, 150:460]
    rocket = face_free_images["rocket"][100:400, 200:350]
    card = np.full((10, 10, 3), 20, np.uint8)
    cases = [(astronaut, ASTRONAUT_FACE, rocket, (-0.1, 0.1, 0.55, 1.0), "the right side of the face is covered"),
             (grace_hopper, GRACE_HOPPER_FACE, rocket, (-0.1, 0.1, 0.55, 1.0), "the right side of the face is covered"),
             (astronaut, ASTRONAUT_FACE, cup, (0.1, 0.5, 0.9, 1.1), "the lower half of the face is covered"),
             (astronaut, ASTRONAUT_FACE, card, (0.0, 0.2, 1.0, 0.45), "both eyes are covered"),
             (grace_hopper, GRACE_HOPPER_FACE, card, (0.0, 0.2, 1.0, 0.45), "both eyes are covered")]
    for photo, box, patch, where, words in cases:
        err = refusal(registry, _paste(photo, box, patch, where))
        assert err.reason == "occluded" and words in str(err), str(err)
        assert err.as_event()["code"] == "source_occluded"


def test_a_smaller_cover_is_masked_and_reported_not_refused(registry, astronaut, face_free_images):
    """The cup over the centre of the face (nose, mouth): accepted, its pixels masked (fusion leaves the
    live skin there) and named in the registration reply's warnings."""
    from tests.faceclips import ASTRONAUT_FACE

    src = registry.register(_paste(astronaut, ASTRONAUT_FACE, face_free_images["coffee"][60:330, 150:460], (0.25, 0.3, 0.75, 0.9)))
    bare = registry.register(astronaut)
    assert _masked_share(src) > _masked_share(bare) + 0.15
    warnings = src.summary()["warnings"]
    assert any("the lower half of the face" in w for w in warnings), warnings


def test_glasses_are_masked_not_refused(registry, grace_hopper, astronaut):
    """Grace Hopper's glasses: accepted, reported, and the whole eye zone (frames and lenses) masked;
    the astronaut wears none and none are reported."""
    from engines.source_mask import eye_zone

    hopper = registry.register(grace_hopper)
    assert "masked: glasses" in hopper.summary()["warnings"]
    zone = eye_zone(hopper.validity[0].shape, hopper.landmarks)
    assert (hopper.validity[0][zone] < 0.1).mean() > 0.9
    assert "masked: glasses" not in registry.register(astronaut).summary()["warnings"]


def _mask_of(registry, photo):
    """The canonical texture as registration makes it, before and after `build_mask`, and the mask (the
    hands the registry finds included)."""
    from engines.source_mask import build_mask
    from engines.sources import canonical_cover, canonical_texture

    face = max(registry.detect(photo), key=lambda f: f.bbox[2] - f.bbox[0])
    raw, lms = canonical_texture(photo, face, registry.config)
    hands = registry.hands(photo, face)
    hand, reach = (canonical_cover(p, face, registry.config) for p in hands) if hands else (None, None)
    out, smask = build_mask(raw, lms, registry.config.mask, hands=hand, hand_reach=reach)
    return raw, out, lms, smask


def _fill_edge_contrast(texture, lms, smask) -> float:
    """Mean grey gradient where a fill meets bare skin, over the mean gradient of the bare skin: about 1
    when the fill continues the skin around it, higher where its edge shows as a line or a step."""
    from engines.source_mask import skin_region

    grey = cv2.cvtColor(texture, cv2.COLOR_RGB2GRAY).astype(np.float32)
    grad = cv2.magnitude(cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3))
    skin = skin_region(grey.shape, lms)
    inner = cv2.erode(skin.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    edge = cv2.morphologyEx(smask.filled.astype(np.uint8), cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8)) > 0
    edge &= inner & ~(smask.covered & ~smask.filled)
    assert edge.sum() > 50
    return float(grad[edge].mean() / grad[skin & ~smask.covered].mean())


def test_a_one_sided_cover_is_filled_from_the_mirrored_side(registry, astronaut):
    """A blue patch over the person's left cheek alone: filled from the right cheek, so the texture there is
    skin again and valid, in the light of the cheek it fills: the mirrored skin takes the offset between
    the two sides read on the bare skin around the patch. Measured 2026-12-07 on this photo: the fill's
    mean colour 9 levels from the bare photo's there (43 with the mirrored pixels as they are: the other
    cheek is lit more brightly), its edge's contrast 1.0 of the bare skin's (3.0 as they are). The other
    cheek's highlight comes along (22-27 levels at the cheekbone): detail, not light."""
    from engines.source_mask import skin_region
    from tests.faceclips import ASTRONAUT_FACE

    reg = SourceRegistry(cache_size=0)
    bare = reg.register(astronaut)
    covered = _paste(astronaut, ASTRONAUT_FACE, np.full((10, 10, 3), (60, 90, 140), np.uint8), (0.62, 0.45, 0.85, 0.7))
    src = reg.register(covered)
    cheek = np.zeros(bare.texture.shape[:2], bool)
    x0, y0 = src.landmarks[425, :2].astype(int)      # the person's left cheek, below the eye
    cheek[y0 - 6:y0 + 6, x0 - 6:x0 + 6] = True
    cheek &= skin_region(cheek.shape, src.landmarks)
    assert cheek.sum() > 50
    gap = np.abs(src.texture[cheek].astype(float).mean(axis=0) - bare.texture[cheek].astype(float).mean(axis=0)).max()
    assert gap < 35, gap
    assert src.validity is None or src.validity[0][cheek].mean() > 0.9

    raw, out, lms, smask = _mask_of(registry, covered)
    bare_raw = _mask_of(registry, astronaut)[0]
    filled = smask.filled
    assert filled.sum() > 500
    gap = np.abs(out[filled].astype(float).mean(axis=0) - bare_raw[filled].astype(float).mean(axis=0)).max()
    assert gap < 18, gap
    assert _fill_edge_contrast(out, lms, smask) < 1.5


def test_a_fill_leaves_no_patch_on_the_forehead(registry, astronaut):
    """The astronaut's fringe over her forehead, filled from the bare side: the fill's edge is no line
    across the forehead (the cover grown by its mixed edge pixels, the fill in the light around it,
    its edge feathered). Measured 2026-12-07: contrast 1.35 of the bare skin's, 1.71 with the fill's
    pixels copied as they are."""
    raw, out, lms, smask = _mask_of(registry, astronaut)
    assert smask.filled.sum() > 200
    assert _fill_edge_contrast(out, lms, smask) < 1.5


def _hand_over(hopper, astronaut, centre, scale):
    """Grace Hopper's portrait with a hand in front of her face: `bench._scenes.skin_hand`, a hand
    silhouette textured with the astronaut's real skin (no photo of a real hand ships in any package found
    here), which MediaPipe's palm detector and hand landmarks take for a hand."""
    from bench._scenes import ASTRONAUT_SKIN, skin_hand

    return skin_hand(astronaut, ASTRONAUT_SKIN, centre=centre, scale=scale, frame=hopper)


def test_a_hand_over_half_the_face_is_refused_naming_the_part(registry, grace_hopper, astronaut):
    """A hand is skin-coloured, so no colour test finds it: the registry looks for hands with the stream's
    own hand networks, and a hand over the lower half of the face refuses the photo, saying so. Without the
    hand check the same photo is accepted, its hand taken for the person's skin."""
    photo, _ = _hand_over(grace_hopper, astronaut, centre=(262, 380), scale=0.9)
    err = refusal(registry, photo)
    assert err.reason == "occluded" and "the lower half of the face is covered by a hand" in str(err), str(err)
    blind = SourceRegistry(SourceConfig(hands=False), cache_size=0).register(photo)
    assert not any("lower half" in m for m in blind.masked), blind.masked


def test_a_hand_over_one_side_is_masked_and_filled(registry, grace_hopper, astronaut):
    """A hand over the person's right cheek and temple: accepted, the hand masked well past its landmarks'
    outline (a finger they miss would travel as the source's skin) and filled from the bare left side. Of
    the hand's own pixels inside the face (its exact coverage, brought into the texture), measured
    2026-12-07: 92 % filled (52 %) or left to the live face (40 %), the rest its edge's soft pixels; without
    the hand check 30 %, the part of the hand in front of her glasses' zone, which is masked anyway."""
    from engines.face_masks import region_mask
    from engines.faces import MaskPatch
    from engines.sources import canonical_cover

    photo, cover = _hand_over(grace_hopper, astronaut, centre=(210, 330), scale=0.9)
    src = SourceRegistry(cache_size=0).register(photo)
    assert any(m.startswith("the right side of the face") for m in src.masked), src.masked
    face = max(registry.detect(photo), key=lambda f: f.bbox[2] - f.bbox[0])
    hand = canonical_cover(MaskPatch(0, 0, cover), face) > 0.9
    hand &= region_mask(hand.shape, src.landmarks, ["face_oval"]) > 0.5
    assert hand.sum() > 3000
    blind_registry = SourceRegistry(SourceConfig(hands=False), cache_size=0)
    for reg, rec, lo, hi in ((registry, src, 0.85, 1.0), (blind_registry, blind_registry.register(photo), 0.0, 0.4)):
        seen = _mask_of(reg, photo)[3]
        taken = seen.filled | (rec.validity[0] < 0.5)
        assert lo <= taken[hand].mean() <= hi, (reg.config.hands, taken[hand].mean())


def test_a_failing_hand_look_registers_the_photo_without_it(astronaut, caplog):
    """The look for hands refines the mask; when its networks fail the photo is registered as the colour
    tests see it, and the failure is logged."""
    def broken():
        raise RuntimeError("no hand model here")

    reg = SourceRegistry(cache_size=0, hand_finder_factory=broken)
    src = reg.register(astronaut)
    assert src.texture.shape == (256, 256, 3)
    assert any("look for hands failed" in r.getMessage() for r in caplog.records)
