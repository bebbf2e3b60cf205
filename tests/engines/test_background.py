"""The background engine against hand-drawn truth (data/background/person_masks.json): the person's mask
on the project's photos and on pasted scenes, the same person on different rooms, the face untouched,
a colour key that survives the stream's encoder, a still person's steady mask and a moving one's
untrailed mask; and the spec a client sends, refused with reasons.

Figures a photo's matte reaches here, each face read a second time and BlazePose's read as a third vote
(the margins below are set from them): IoU 0.98 / 0.96 on the two photos; on 20 pasted scenes mean 0.978,
every one at or over 0.92 (the lowest, Grace Hopper full height in front of a giant coffee cup: 0.923, some
of the cup's rim beside her still taken for her); the same person on two rooms at or over 0.95 in 35 of 40
pairs, all but the four with that scene and one more with the cup (`livefuse bench background --no-stream
--json`, docs/background.md)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from bench import _person_scenes as ps
from engines.background import (BackgroundError, BackgroundSpec, Matte, MatteConfig, compose_i420, compose_rgb,
                                face_hulls, head_box, merge_look, parse_background, parse_color)
from kernels.numpy.color import i420_to_rgb, rgb_to_i420, rgb_to_lab

ROOMS = ("coffee", "rocket", "chelsea", "brick", "studio")
PLACES = ((1.0, 0.5), (0.8, 0.3))


@pytest.fixture(scope="module")
def matte():
    m = Matte()
    yield m
    m.close()


def _alpha(matte: Matte, scene: ps.Scene, keep=None) -> np.ndarray:
    """A photo's matte, its face's hull kept as the product keeps it (and read a second time)."""
    keep = [scene.face_hull] if keep is None else keep
    if scene.image.shape[1] >= 1.5 * scene.image.shape[0]:
        y, u, v = rgb_to_i420(scene.image)
        return matte.alpha_i420(y, u, v, steady=False, keep=keep)[0]
    return matte.alpha_rgb(scene.image, keep=keep)


def test_parse_background_reads_what_clients_send():
    assert parse_background(None) == BackgroundSpec()
    assert parse_background("off").mode == "none" and not parse_background("none").active
    assert parse_background("blur") == BackgroundSpec(mode="blur", strength=0.7)
    assert parse_background({"mode": "blur", "strength": 0.2}).strength == 0.2
    assert parse_background("#00ff00") == BackgroundSpec(mode="color", color=(0, 255, 0))
    assert parse_background({"mode": "color", "color": "rgb(0, 0, 255)"}).color == (0, 0, 255)
    assert parse_background("Blue").color == (0, 0, 255)
    assert parse_background({"mode": "image", "image_id": "bg-1"}).image_id == "bg-1"
    assert parse_background("image:bg-2") == BackgroundSpec(mode="image", image_id="bg-2")
    assert parse_color("hsl(120, 100%, 50%)") == (0, 255, 0)
    for spec in (BackgroundSpec(), BackgroundSpec(mode="blur", strength=0.3), BackgroundSpec(mode="color", color=(1, 2, 3)),
                 BackgroundSpec(mode="image", image_id="x")):
        assert parse_background(spec.to_json()) == spec
    for bad, reason in (("#12345", "not a CSS colour"), ({"mode": "smoke"}, "not one of"),
                        ({"mode": "blur", "strength": 2}, "outside 0..1"), ({"mode": "blur", "strength": "x"}, "number"),
                        ({"mode": "image"}, "image_id"), ({"mode": "blur", "radius": 3}, "unknown field"),
                        (42, "must be an object"), ({"mode": "color", "color": ""}, "CSS colour")):
        with pytest.raises(BackgroundError, match=reason):
            parse_background(bad)


@pytest.mark.parametrize("name,floor", [("grace_hopper", 0.95), ("astronaut", 0.93)])
def test_person_mask_on_the_photos(matte, name, floor):
    scene = ps.photo_scene(name)
    assert ps.iou(_alpha(matte, scene), scene) >= floor          # measured 0.98 and 0.96


def test_person_mask_on_pasted_scenes(matte):
    ious = {f"{n}/{r}/{h}": ps.iou(_alpha(matte, s), s)
            for n in ("grace_hopper", "astronaut") for r in ROOMS for h, c in PLACES
            for s in [ps.pasted_scene(n, r, height=h, centre_x=c)]}
    values = np.array(list(ious.values()))
    assert values.mean() >= 0.97, ious                            # measured 0.978
    assert values.min() >= 0.91, ious                             # measured 0.923 (Hopper before the cup)
    assert (values >= 0.92).sum() >= 19, ious                     # measured 20 of 20
    # plain rooms are where a streamer sets up: every one of them well over the target
    assert min(v for k, v in ious.items() if "/studio/" in k or "/brick/" in k) >= 0.97, ious   # measured 0.987


def test_same_person_on_two_rooms(matte):
    """Every pair of the five rooms, both framings. Of the 40, the four with Grace Hopper full height before
    the giant coffee cup miss 0.95: its rim circles her head like a hood, and the network takes some of it
    for her (0.92 there); and the astronaut's cup-cat pair at 80 % (0.948)."""
    pairs = {}
    for name in ("grace_hopper", "astronaut"):
        for h, c in PLACES:
            scenes = {r: ps.pasted_scene(name, r, height=h, centre_x=c) for r in ROOMS}
            masks = {r: _alpha(matte, s) for r, s in scenes.items()}
            void = scenes["studio"].void
            for i, r1 in enumerate(ROOMS):
                for r2 in ROOMS[i + 1:]:
                    pairs[(name, h, r1, r2)] = ps.mask_iou(masks[r1], masks[r2], void)
    cup = {k: v for k, v in pairs.items() if "coffee" in k}
    assert min(v for k, v in pairs.items() if k not in cup) >= 0.95, pairs                       # measured 0.955
    assert min(v for k, v in cup.items() if k[:2] != ("grace_hopper", 1.0)) >= 0.94, cup           # measured 0.948
    assert min(cup.values()) >= 0.90, cup                                                          # measured 0.917
    assert sum(v >= 0.95 for v in pairs.values()) >= 34, pairs                                     # measured 35 of 40


def test_a_photos_second_look_clears_the_room_around_the_head():
    """In the whole frame's thumbnail a head is a few dozen pixels, and a cat's fur or a cup's rim beside
    it is taken for hair: the second look reads the head and shoulders at the network's own size. One more
    network run per face, for photos only: a stream's matte never takes it. (BlazePose's vote, the default
    beside it, is off here: the test below has it.)"""
    first, second = Matte(MatteConfig(second_look=0.0, pose_look=False)), Matte(MatteConfig(pose_look=False))
    try:
        for name, room, floor_before, gain in (("grace_hopper", "chelsea", 0.93, 0.05),   # measured 0.912 -> 0.981
                                               ("astronaut", "coffee", 0.95, 0.03)):       # measured 0.924 -> 0.973
            scene = ps.pasted_scene(name, room, height=0.8, centre_x=0.3)
            before, after = ps.iou(_alpha(first, scene), scene), ps.iou(_alpha(second, scene), scene)
            assert before < floor_before and after >= before + gain, (name, room, before, after)
        assert second.network_runs == 3 * first.network_runs == 6        # the box as it is, and mirrored
        # no face, no second look: nothing to anchor it to
        scene = ps.pasted_scene("grace_hopper", "chelsea", height=0.8, centre_x=0.3)
        runs = second.network_runs
        _alpha(second, scene, keep=())
        assert second.network_runs == runs + 1
    finally:
        first.close()
        second.close()


def test_blazeposes_vote_outvotes_a_zoomed_look_that_takes_the_room_for_the_person():
    """Read at the head's scale, the red tank of a motorcycle beside a shoulder is taken for the body (a
    garage no setting was chosen on: bench._person_scenes.held_out_rooms). BlazePose, which finds the body
    first and reads it in its own square, says otherwise, and with the first look it outvotes the zoom; on a
    plain backdrop, where all three agree, the vote moves next to nothing."""
    looks, voted = Matte(MatteConfig(pose_look=False)), Matte()
    try:
        for name, room, before_under, after_over in (("astronaut", "motorcycle", 0.85, 0.93),     # 0.805 -> 0.963
                                                     ("grace_hopper", "motorcycle", 0.90, 0.91)):  # 0.877 -> 0.924
            scene = ps.pasted_scene(name, room, height=0.8, centre_x=0.3)
            before, after = ps.iou(_alpha(looks, scene), scene), ps.iou(_alpha(voted, scene), scene)
            assert before < before_under and after > after_over, (name, before, after)
        scene = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3)
        assert abs(ps.iou(_alpha(voted, scene), scene) - ps.iou(_alpha(looks, scene), scene)) <= 0.01
        assert voted.pose_reads == 3 and looks.pose_reads == 0
    finally:
        looks.close()
        voted.close()


def test_a_part_of_the_room_far_from_the_person_is_not_keyed_as_the_person():
    """On a deep-sky photo the network takes bright galaxies for people: islands of mask a face width or
    more from anyone (bench._person_scenes.held_out_rooms; MatteConfig.island_reach was chosen on it). They
    are dropped, in a photo's matte and in a stream's; with island_reach 0 they stay."""
    kept, dropped = Matte(MatteConfig(island_reach=0.0)), Matte()
    try:
        for name, before_under, after_over in (("astronaut", 0.96, 0.98),      # 0.954 -> 0.991
                                               ("grace_hopper", 0.94, 0.95)):  # 0.934 -> 0.957
            scene = ps.pasted_scene(name, "hubble", height=0.8, centre_x=0.3)
            before, after = ps.iou(_alpha(kept, scene), scene), ps.iou(_alpha(dropped, scene), scene)
            assert before < before_under and after > after_over, (name, before, after)
        assert kept.islands_dropped == 0 and dropped.islands_dropped >= 2
        photo = dropped.islands_dropped
        scene = ps.pasted_scene("astronaut", "hubble", height=0.8, centre_x=0.3)
        y, u, v = rgb_to_i420(scene.image)
        for _ in range(4):
            alpha = dropped.alpha_i420(y, u, v, steady=True, keep=[scene.face_hull])[0]
        assert dropped.islands_dropped > photo and ps.iou(alpha, scene) > 0.98
    finally:
        kept.close()
        dropped.close()


def test_a_matte_whose_pose_model_fails_keeps_its_two_looks(caplog):
    """A missing or broken BlazePose file turns the vote off, says so once (however many mattes share it: the
    photo API's requests do), and the matte is the two looks'."""
    from engines.pose_segmentation import PoseSegmenter

    def broken(_data):
        raise RuntimeError("no interpreter for this file")

    scene = ps.pasted_scene("astronaut", "motorcycle", height=0.8, centre_x=0.3)
    pose = PoseSegmenter(runner_factory=broken)
    looks, failing, next_request = Matte(MatteConfig(pose_look=False)), Matte(pose=pose), Matte(pose=pose)
    try:
        with caplog.at_level("WARNING", logger="engines.background"):
            for matte in (failing, failing, next_request):
                assert np.array_equal(_alpha(matte, scene), _alpha(looks, scene))
        for matte in (failing, next_request):
            assert matte.pose_error == "RuntimeError: no interpreter for this file" and matte.pose_reads == 0
        assert sum("BlazePose" in r.getMessage() for r in caplog.records) == 1
    finally:
        for matte in (looks, failing, next_request):
            matte.close()
        pose.close()


class _SlowPose:
    """A BlazePose stand-in that takes `seconds` and reads the whole frame as the person."""

    error = None

    def __init__(self, seconds: float) -> None:
        self.seconds, self.calls = seconds, 0

    def __call__(self, image, size):
        import time

        self.calls += 1
        time.sleep(self.seconds)
        return np.ones((size[1], size[0]), np.float32)

    def close(self) -> None:
        pass


def test_a_streams_blazepose_read_runs_beside_its_frames_and_votes_where_the_picture_stands():
    """A stream's frame holds 4 ms and BlazePose's read costs about 27, so a stream reads it on a thread of its
    own, once in `stream_pose_frames` frames, and no frame waits for it; the held read votes on the network's
    runs after it lands, where the picture has not moved since the frame it was read from."""
    import time

    still = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3)
    other = ps.pasted_scene("astronaut", "coffee", height=0.8, centre_x=0.7)
    room = cv2.resize((~still.person & ~other.person).astype(np.uint8), (256, 144), interpolation=cv2.INTER_NEAREST) > 0
    pose = _SlowPose(0.4)
    matte, plain = Matte(MatteConfig(stream_pose_frames=6), pose=pose), Matte(MatteConfig(stream_pose_frames=0))
    try:
        def frame(s):
            for m in (matte, plain):
                m.alpha_i420(*rgb_to_i420(s.image), steady=True, keep=[s.face_hull])
            return float(matte._mask[room].mean()) - float(plain._mask[room].mean())   # the vote's share there

        t0 = time.perf_counter()
        frame(still)
        assert time.perf_counter() - t0 < 0.3 and pose.calls <= 1           # the read was not waited for
        assert matte.wait_for_pose() and matte.pose_reads == 0
        for _ in range(4):
            voted = frame(still)
        # a vote of 1 in the room: a third of the mask, steadied in at a quarter a read (measured 0.083)
        assert matte.pose_reads == 1 and voted > 0.05
        # a new picture: the held read is worth nothing where it moved (measured 0.018 left, where the two
        # rooms' grey happens to match and the read still stands)
        assert abs(frame(other)) < 0.03 < voted
        for _ in range(8):
            frame(other)
            matte.wait_for_pose()
        assert pose.calls >= 2                                                # read again as it aged
    finally:
        matte.close()
        plain.close()
    # a clip that asks for the second look reads BlazePose on the spot, on every network run
    scene = ps.pasted_scene("astronaut", "motorcycle", height=0.8, centre_x=0.3)
    clip = Matte()
    try:
        clip.alpha_i420(*rgb_to_i420(scene.image), steady=True, keep=[scene.face_hull], second=True)
        assert clip.pose_reads == 1
    finally:
        clip.close()


def test_a_streams_second_look_is_read_once_a_second_and_held_between():
    """A stream's 4 ms cannot hold two more network runs a frame, so it reads each face's head a second
    time once in 30 frames (a second at 30 fps) and holds that read: a still person in a busy
    room keeps the photo's matte, and the frames between cost what they cost without it."""
    scene = ps.pasted_scene("grace_hopper", "chelsea", height=0.8, centre_x=0.3)
    rng = np.random.default_rng(3)
    # (BlazePose's held vote off in both: the test before this one has it)
    first = Matte(MatteConfig(stream_look_frames=0, stream_pose_frames=0))
    held = Matte(MatteConfig(stream_pose_frames=0))
    try:
        for _ in range(34):                                   # a still person: the network on one frame in three
            y, u, v = rgb_to_i420(_noisy(scene.image, rng, 2.0))
            a_first = first.alpha_i420(y, u, v, keep=[scene.face_hull])[0]
            a_held = held.alpha_i420(y, u, v, keep=[scene.face_hull])[0]
        before, after = ps.iou(a_first, scene), ps.iou(a_held, scene)
        assert before < 0.93 and after >= before + 0.05, (before, after)      # measured 0.911 -> 0.981
        assert first.network_runs == 12 and first.looks_read == 0
        assert held.looks_read == 2 and held.network_runs == 12 + 2 * 2       # frames 0 and 30, each mirrored
    finally:
        first.close()
        held.close()


def test_a_stream_reads_one_head_a_network_run_however_many_faces():
    """Two more network runs a face at once would stall a group's frame: a stream reads one face's head
    per network run, a new face first, and holds each read until its time comes round again."""
    scene = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3)
    other = scene.face_hull + np.array([500.0, 0.0])            # a second face, elsewhere in the frame
    y, u, v = rgb_to_i420(scene.image)
    matte = Matte(MatteConfig(every=1, stream_look_frames=4))
    try:
        reads = []
        for _ in range(6):
            matte.alpha_i420(y, u, v, keep=[scene.face_hull, other])
            reads.append(matte.looks_read)
        assert reads == [1, 2, 2, 2, 3, 4]                       # each face again 4 frames after its read
        assert matte.network_runs == 6 + 2 * 4
    finally:
        matte.close()


def test_a_photos_second_look_on_torch_tensors_gives_the_same_matte(matte):
    torch = pytest.importorskip("torch")
    scene = ps.pasted_scene("grace_hopper", "chelsea", height=0.8, centre_x=0.3)
    y, u, v = rgb_to_i420(scene.image)
    on_host = matte.alpha_i420(y, u, v, steady=False, keep=[scene.face_hull])[0]
    on_torch = matte.alpha_i420(*(torch.from_numpy(p) for p in (y, u, v)), steady=False, keep=[scene.face_hull])[0]
    assert np.abs(on_host - on_torch.numpy()).max() < 1e-4          # measured 3.5e-6
    rgb_host = matte.alpha_rgb(scene.image, keep=[scene.face_hull])
    rgb_torch = matte.alpha_rgb(torch.from_numpy(scene.image), keep=[scene.face_hull]).numpy()
    # the crop's area shrink rounds differently by a level here and there: a few edge pixels move
    assert np.abs(rgb_host - rgb_torch).mean() < 1e-3 and ps.mask_iou(rgb_host, rgb_torch) > 0.999
    # a stream's held second look reads the planes on their device alike
    mattes = Matte(), Matte()
    try:
        for _ in range(4):
            a_host = mattes[0].alpha_i420(y, u, v, keep=[scene.face_hull])[0]
            a_torch = mattes[1].alpha_i420(*(torch.from_numpy(p) for p in (y, u, v)), keep=[scene.face_hull])[0]
            assert np.abs(a_host - a_torch.numpy()).max() < 1e-3
            assert all(m.wait_for_pose() for m in mattes)    # their BlazePose reads land on the same frame
        assert mattes[0].looks_read == mattes[1].looks_read == 1
    finally:
        for m in mattes:
            m.close()


def test_head_box_holds_the_head_and_shoulders_and_stays_in_the_frame():
    hull = np.array([[600, 200], [700, 200], [700, 330], [600, 330]], np.float32)      # a face 100 px wide
    everything = np.ones((144, 256), np.float32)
    x0, y0, x1, y1 = head_box(hull, (1280, 720), everything, 1.2)
    assert x0 <= 600 - 100 and x1 >= 700 + 100 and y0 <= 200 - 90 and y1 >= 330 + 200   # shoulders below
    assert all(v % 2 == 0 for v in (x0, y0, x1, y1)) and 0 <= x0 < x1 <= 1280 and 0 <= y0 < y1 <= 720
    # a first mask that sees only a narrow person keeps the box to the person (and never less than the face)
    narrow = np.zeros((144, 256), np.float32)
    narrow[40:144, 122:136] = 1.0                                 # x 610-680 in frame pixels
    nx0, _, nx1, _ = head_box(hull, (1280, 720), narrow, 1.2)
    assert nx1 - nx0 < x1 - x0 and nx0 <= 600 and nx1 >= 700
    assert head_box(hull * 0.05, (1280, 720), everything, 1.2) is None                  # a 5 px face


def test_merge_look_fades_into_the_first_mask_inside_the_frame_only():
    mask = np.zeros((144, 256), np.float32)
    look = np.ones((256, 256), np.float32)
    merge_look(mask, look, (0, 0, 640, 720), (1280, 720), 0.1)
    assert mask[72, 10] == 1.0 and mask[0, 0] == 1.0              # the frame's edges take the look whole
    assert 0.0 < mask[72, 126] < 1.0 and mask[72, 129] == 0.0     # inside the frame it fades, and stops at the box
    assert np.all(np.diff(mask[72, 100:130]) <= 0)


def test_face_is_untouched_and_the_person_never_blurred(matte):
    for name in ("grace_hopper", "astronaut"):
        scene = ps.pasted_scene(name, "rocket", height=0.8, centre_x=0.3)
        y, u, v = rgb_to_i420(scene.image)
        alphas = matte.alpha_i420(y, u, v, steady=False, keep=[scene.face_hull])
        before = i420_to_rgb(y, u, v)
        face = scene.face_region()
        for spec in (BackgroundSpec("blur", 1.0), BackgroundSpec("color", color=(0, 255, 0))):
            after = i420_to_rgb(*compose_i420(y, u, v, alphas, spec))
            mse = np.mean((after[face].astype(np.float64) - before[face]) ** 2)
            assert mse == 0 or 10 * np.log10(255 ** 2 / mse) >= 45.0
            # wherever the matte says "person" (Y and the 2x2 block's chroma), the pixels are the frame's own
            inside = (alphas[0] >= 1.0) & np.repeat(np.repeat(alphas[1] >= 1.0, 2, 0), 2, 1)
            assert inside.mean() > 0.1 and np.array_equal(after[inside], before[inside])


def test_face_hulls_come_from_landmarks():
    pts = np.array([[10, 10, 0], [50, 12, 0], [30, 60, 0], [30, 30, 0]], np.float32)
    (hull,) = face_hulls([pts])
    assert len(hull) == 3


def test_colour_key_survives_the_stream_encoder(matte):
    from tests.watermark_clips import reencode

    scene = ps.pasted_scene("grace_hopper", "rocket", height=0.8, centre_x=0.3)
    rng = np.random.default_rng(0)
    frames = []
    for _ in range(10):
        f = np.clip(scene.image + rng.normal(0, 2.0, scene.image.shape), 0, 255).astype(np.uint8)
        y, u, v = rgb_to_i420(f)
        alphas = matte.alpha_i420(y, u, v, steady=True, keep=[scene.face_hull])
        frames.append(i420_to_rgb(*compose_i420(y, u, v, alphas, BackgroundSpec("color", color=(0, 255, 0)))))
    matte.reset()
    face_width = scene.face[2] - scene.face[0]
    far = cv2.distanceTransform((~scene.person).astype(np.uint8), cv2.DIST_L2, 5) > face_width
    ref = rgb_to_lab(np.array([[[0, 255, 0]]], np.uint8))[0, 0].astype(np.float64)
    for codec in ("libvpx", "libx264"):
        p99 = [np.percentile(np.linalg.norm(rgb_to_lab(out)[far].astype(np.float64) - ref, axis=1), 99)
               for out in reencode(frames, codec, 1_000_000)]
        if codec == "libx264":
            assert max(p99) <= 3.0, p99                                # measured 0.47 on every frame
        else:
            # libvpx's realtime CBR codes one macroblock row coarser on some frames: a band of the key
            # off by up to 4.6 for a frame (frame 3 of these 10); the others measured 0.47-2.63
            assert np.median(p99) <= 3.0 and max(p99) <= 5.0, p99


def _grown(hull, px=24, size=(1280, 720)) -> np.ndarray:
    """The face hull's pixels and `px` around them (the matte keeps the hull as the person)."""
    import cv2

    m = np.zeros(size[::-1], np.uint8)
    cv2.fillPoly(m, [np.round(hull).astype(np.int32)], 1)
    return cv2.dilate(m, np.ones((2 * px + 1, 2 * px + 1), np.uint8)) > 0


def _noisy(image, rng, sigma=3.0):
    return np.clip(image + rng.normal(0, sigma, image.shape), 0, 255).astype(np.uint8)


def test_still_person_mask_is_steady():
    scene = ps.pasted_scene("astronaut", "studio", height=0.8, centre_x=0.3)
    rng = np.random.default_rng(1)
    matte = Matte()
    try:
        masks = []
        for _ in range(20):
            y, u, v = rgb_to_i420(_noisy(scene.image, rng))
            masks.append(matte.alpha_i420(y, u, v)[0] > 0.5)
        change = [np.mean(masks[i] != masks[i - 1]) for i in range(1, len(masks))]
        assert max(change) <= 0.005                                 # measured under 0.0005
        assert matte.network_runs == 10                             # a still picture: every other frame
    finally:
        matte.close()


def test_a_still_pictures_reads_keep_the_fit_and_a_swaying_ones_refit(monkeypatch):
    """A still picture's network reads change nothing the guided fit would see: the fit made on the first
    read stands, and the matte is the one fitting every read gives; a person swaying 4 px a frame is
    fitted on every read."""
    from kernels.numpy import background as kn

    fits = []
    fit = kn.guided_coefficients
    monkeypatch.setattr(kn, "guided_coefficients", lambda *a, **k: fits.append(1) or fit(*a, **k))
    for step in (0, 4):
        runs, alphas = [], {}
        for level in (0.02, 0.0):                                  # kept fits, and a fit on every read
            # BlazePose's held vote off: the reads it lands on refit once as it steadies in, as any new read would
            matte, rng = Matte(MatteConfig(refit_level=level, stream_pose_frames=0)), np.random.default_rng(7)
            fits.clear()
            try:
                for i in range(24):
                    scene = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3 + i * step / 1280)
                    y, u, v = rgb_to_i420(_noisy(scene.image, rng, 2.0))
                    alphas[level] = matte.alpha_i420(y, u, v, keep=[scene.face_hull])[0]
                runs.append((len(fits), matte.network_runs))
            finally:
                matte.close()
        (kept, reads), (every, same) = runs
        assert reads == same == 8 + 2 and every == 8               # 8 reads (and the head's), each fitted ...
        assert kept <= 2 if step == 0 else kept == every, (step, kept)   # ... or not: still 1 fit (swaying 8)
        if step == 0:
            assert ps.iou(alphas[0.02], scene) >= ps.iou(alphas[0.0], scene) - 0.002
            assert np.abs(alphas[0.02] - alphas[0.0]).mean() < 0.002


def test_moving_person_leaves_no_trail():
    matte = Matte()
    rng = np.random.default_rng(2)
    try:
        for i, cx in enumerate(np.linspace(0.3, 0.6, 8)):
            scene = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=float(cx))
            y, u, v = rgb_to_i420(_noisy(scene.image, rng))
            alpha = matte.alpha_i420(y, u, v)[0]
            if i:
                assert ps.iou(alpha, scene) >= 0.93                  # follows at once
                behind = prev_person & ~scene.person                 # where she stood a frame ago
                assert np.mean(alpha[behind] > 0.5) < 0.1
            prev_person = scene.person
        assert matte.network_runs == 8                              # a moving one: every frame
    finally:
        matte.close()


def test_a_walking_person_is_carried_with_their_face_between_network_runs():
    """Walking 25-26 px a frame: the frames between the network's runs take the last matte moved
    as the face moved, as exact as the network's own, two frames in a row (MatteConfig.carry_run) before
    the network reads again; a face that does not move with the person (a wrong track) carries nothing,
    and the network reads every frame."""
    base = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3)
    for follows in (True, False):
        matte = Matte()
        rng = np.random.default_rng(4)
        try:
            ious, prev_person, start = [], None, base.person
            for i in range(12):
                scene = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3 + i * 25.5 / 1280)
                hull = scene.face_hull if follows else base.face_hull
                y, u, v = rgb_to_i420(_noisy(scene.image, rng, 2.0))
                alpha = matte.alpha_i420(y, u, v, keep=[hull])[0]
                if i:                                     # (the hull is the person whatever the network says)
                    room_now = ~scene.person & ~_grown(hull)
                    assert np.mean(alpha[prev_person & room_now] > 0.5) < 0.1, (follows, i)   # no trail where she stood
                    # nor where the held second look read her head: it gives way where the picture moved
                    assert np.mean(alpha[start & room_now] > 0.5) < 0.1, (follows, i)
                if i and follows:
                    ious.append(ps.iou(alpha, scene))
                prev_person = scene.person
            assert matte.looks_read == 1                             # read on the first run, held since
            if follows:
                assert (matte.network_runs, matte.carried) == (4 + 2, 8)     # read on frames 0, 3, 6, 9
                assert min(ious) >= 0.96, ious                       # measured 0.987, as with the network each frame
            else:
                assert (matte.network_runs, matte.carried) == (12 + 2, 0)
        finally:
            matte.close()


def test_rgb_and_planes_agree_and_image_mode_covers(matte, astronaut):
    scene = ps.pasted_scene("grace_hopper", "brick", height=0.8, centre_x=0.3)
    y, u, v = rgb_to_i420(scene.image)
    a_planes = matte.alpha_i420(y, u, v, steady=False)[0]
    a_rgb = matte.alpha_rgb(scene.image)
    assert ps.mask_iou(a_planes, a_rgb) >= 0.98
    spec = BackgroundSpec(mode="image", image_id="astro")
    out = compose_rgb(scene.image, a_rgb, spec, picture=astronaut)
    assert out.shape == scene.image.shape
    corner = out[:40, -200:].astype(float)                          # the picture's top right fills the corner
    assert np.abs(corner.mean(axis=(0, 1)) - scene.image[:40, -200:].mean(axis=(0, 1))).max() > 10
    with pytest.raises(BackgroundError, match="not available"):
        compose_rgb(scene.image, a_rgb, spec, picture=None)


def test_a_swaying_person_skips_the_network_and_keeps_the_outline():
    """Swaying 4 px a frame: between the network's reads the last coefficients shape the new frame's luma;
    with her face followed, the last read moved with the face stands in on the frames a read falls due,
    and the network reads one frame in three (MatteConfig.carry_every)."""
    for follows in (False, True):
        matte = Matte()
        rng = np.random.default_rng(3)
        try:
            ious = []
            for i in range(12):
                scene = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3 + i * 4 / 1280)
                y, u, v = rgb_to_i420(_noisy(scene.image, rng, 2.0))
                keep = [scene.face_hull] if follows else []
                ious.append(ps.iou(matte.alpha_i420(y, u, v, keep=keep)[0], scene))
            assert min(ious) >= 0.96, (follows, ious)               # measured 0.98 (followed: 0.982-0.989)
            if follows:
                assert matte.network_runs == 4 + 2 and matte.carried == 4   # frames 0, 3, 6, 9 (and the head)
            else:
                assert matte.network_runs <= 7                      # every other frame at 4 px a frame
        finally:
            matte.close()


def test_composing_by_the_half_size_alpha_gives_the_same_frame(matte, astronaut):
    """The stream's path (Y's alpha brought up only along the person's edge) against the whole planes'."""
    from engines.background import Backdrop

    scene = ps.pasted_scene("grace_hopper", "rocket", height=0.8, centre_x=0.3)
    y, u, v = rgb_to_i420(scene.image)
    whole = matte.alpha_i420(y, u, v, steady=False, keep=[scene.face_hull])
    edge = matte.alpha_i420(y, u, v, steady=False, keep=[scene.face_hull], full=False)
    assert edge[0] is None and np.array_equal(edge[1], whole[1])
    backdrop, work = Backdrop(), {}
    for spec in (BackgroundSpec("blur", 0.7), BackgroundSpec("color", color=(0, 255, 0)),
                 BackgroundSpec("image", image_id="astro")):
        want = compose_i420(y, u, v, whole, spec, picture=astronaut)
        for still in (False, True):                                  # a still picture reuses the blurred room
            planes = tuple(p.copy() for p in (y, u, v))
            compose_i420(*planes, edge, spec, picture=astronaut, backdrop=backdrop, in_place=True, still=still,
                         work=work, keep=[scene.face_hull])
            assert all(np.array_equal(g, w) for g, w in zip(planes, want)), (spec.mode, still)
    for c in range(5):                                               # a colour picker dragged: one colour's fills kept
        compose_i420(y.copy(), u.copy(), v.copy(), edge, BackgroundSpec("color", color=(c, 255, 0)), work=work,
                     keep=[scene.face_hull])
    assert [k for k in work if "fill" in str(k)] == ["fill_key", "fills"] and len(work["fills"]) == 3


def test_a_walking_persons_blurred_room_serves_the_frames_it_reaches(monkeypatch):
    """While the matte is carried with the face the room stands still, so a blur made on the network's
    frame serves the next as long as the room she uncovers lies within its reach: it shows the room
    blurred from around it, as a fresh blur shows it, never her own colours. Two steps are past its reach,
    so the second frame carried after a network run blurs anew. A weak blur reaches less far than she
    walked and is made anew on every frame.
    Before a textured room (brick) the uncovered strip shows the room's blurred average where a fresh blur
    shows blurred brick: a smoother band, one frame in three."""
    from engines.background import Backdrop
    from kernels.numpy import background as kn

    calls = []
    blur = kn.background_blur_i420
    monkeypatch.setattr(kn, "background_blur_i420", lambda *a, **k: calls.append(1) or blur(*a, **k))
    # room, strength, blurs made in 12 frames (the strong blur: on the network's frames and on the second
    # frame carried after each, 8, and on a frame whose uncovered room lies just past the reach: brick's
    # frame 4), bounds: the room's 99.9th percentile, the uncovered strip's mean
    for room_name, strength, blurs, p999, strip in (("studio", 0.7, (8, 9), 8, 4), ("studio", 0.2, (12, 12), 8, 4),
                                                    ("brick", 0.7, (8, 9), 24, 14)):
        matte, backdrop, rng = Matte(), Backdrop(), np.random.default_rng(5)
        calls.clear()
        try:
            diffs, strips, prev_person = [], [], None
            for i in range(12):
                scene = ps.pasted_scene("grace_hopper", room_name, height=0.8, centre_x=0.3 + i * 25.5 / 1280)
                y, u, v = rgb_to_i420(_noisy(scene.image, rng, 2.0))
                alphas = matte.alpha_i420(y, u, v, keep=[scene.face_hull], full=False)
                spec = BackgroundSpec("blur", strength)
                got = compose_i420(y, u, v, alphas, spec, backdrop=backdrop, still=matte.room_still,
                                   matte_held=matte.still, keep=[scene.face_hull])
                n = len(calls)
                want = compose_i420(y, u, v, alphas, spec, keep=[scene.face_hull])   # a blur of this frame
                del calls[n:]
                room = ~scene.person & ~scene.void
                d = np.abs(got[0].astype(int) - want[0].astype(int))
                diffs.append(d[room])
                if prev_person is not None:
                    strips.append(d[prev_person & room])             # the room she uncovered
                prev_person = scene.person
            assert blurs[0] <= len(calls) <= blurs[1] and matte.carried == 8, len(calls)
            d = np.concatenate(diffs)
            # measured: studio 0.04 / 4 / 2.1 (her own colours, were a weak blur reused: 28); brick 0.08 / 13 / 10.8
            assert d.mean() <= 0.3 and np.percentile(d, 99.9) <= p999, (d.mean(), np.percentile(d, 99.9))
            assert max(s.mean() for s in strips) <= strip, [s.mean() for s in strips]
        finally:
            matte.close()
