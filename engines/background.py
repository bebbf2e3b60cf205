"""The background behind the person: what a user asks for (`BackgroundSpec`: none, blur, a colour, a
picture) and one stream's person matte (`Matte`: the segmentation network's mask, steadied over time and
fitted to the frame's edges at full resolution), composed by the kernels in kernels/*/background.py.

The frame arrives as RGB (photos, clips) or as I420 planes (the live stream: Y at full size, U and V at
half); planes are composed plane by plane, so the stream's frame is never converted whole. Planes on a
torch device take the torch twins; the network itself reads a small thumbnail on the host.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

import numpy as np

from engines.pose_segmentation import PoseConfig, PoseSegmenter
from engines.segmentation import PersonSegmenter, SegmentationConfig
from kernels.numpy.background import scratch
from kernels.twins import twin_for

Mode = Literal["none", "blur", "color", "image"]
MODES: tuple[str, ...] = ("none", "blur", "color", "image")
DEFAULT_STRENGTH = 0.7
DEFAULT_COLOR = (0, 255, 0)     # a green key: OBS's chroma key default

log = logging.getLogger(__name__)


class BackgroundError(ValueError):
    """A background request that cannot be honoured; the message says why, for the client."""


@dataclass(frozen=True, slots=True)
class BackgroundSpec:
    """mode "none" leaves the frame alone (the stage costs nothing); "blur" blurs the room by `strength` in
    [0, 1] (the person stays sharp); "color" fills it with `color` (RGB); "image" puts the uploaded
    picture `image_id` behind the person, scaled to cover the frame."""

    mode: Mode = "none"
    strength: float = DEFAULT_STRENGTH
    color: tuple[int, int, int] = DEFAULT_COLOR
    image_id: str = ""

    @property
    def active(self) -> bool:
        return self.mode != "none"

    def to_json(self) -> dict[str, Any]:
        """The spec as the control protocol writes it (only the fields its mode reads)."""
        if self.mode == "blur":
            return {"mode": "blur", "strength": round(self.strength, 3)}
        if self.mode == "color":
            return {"mode": "color", "color": "#%02x%02x%02x" % self.color}
        if self.mode == "image":
            return {"mode": "image", "image_id": self.image_id}
        return {"mode": "none"}


NONE = BackgroundSpec()


def parse_color(text: Any) -> tuple[int, int, int]:
    """RGB of a CSS colour: a name ("green"), #rgb, #rrggbb, #rrggbbaa, rgb(), hsl(); alpha ignored."""
    from PIL import ImageColor

    if not isinstance(text, str) or not text.strip() or len(text) > 64:
        raise BackgroundError("background color must be a CSS colour such as \"#00ff00\" or \"green\"")
    try:
        rgb = ImageColor.getrgb(text.strip())
    except ValueError:
        raise BackgroundError(f"background color {text.strip()[:40]!r} is not a CSS colour "
                              "(use a name, #rrggbb, rgb() or hsl())") from None
    return (int(rgb[0]), int(rgb[1]), int(rgb[2]))


def _strength(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise BackgroundError("background strength must be a number from 0 to 1")
    if not 0.0 <= float(value) <= 1.0:
        raise BackgroundError(f"background strength {value} is outside 0..1")
    return float(value)


def parse_background(value: Any) -> BackgroundSpec:
    """A spec from what a client sends: None / "none" / "off", "blur", a CSS colour, "image:ID", or an
    object {"mode": ..., "strength": ..., "color": ..., "image_id": ...}. Raises BackgroundError."""
    if value is None:
        return NONE
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("", "none", "off"):
            return NONE
        if word == "blur":
            return BackgroundSpec(mode="blur")
        if word.startswith("image:"):
            return parse_background({"mode": "image", "image_id": value.strip()[6:]})
        return BackgroundSpec(mode="color", color=parse_color(value))
    if not isinstance(value, dict):
        raise BackgroundError("background must be an object such as {\"mode\": \"blur\", \"strength\": 0.7}")
    known = {"mode", "strength", "color", "image_id"}
    extra = sorted(set(value) - known)
    if extra:
        raise BackgroundError(f"background has unknown field(s) {', '.join(map(str, extra))[:80]}; "
                              f"it takes {', '.join(sorted(known))}")
    mode = value.get("mode", "none")
    if mode not in MODES:
        raise BackgroundError(f"background mode {str(mode)[:20]!r} is not one of {', '.join(MODES)}")
    if mode == "none":
        return NONE
    if mode == "blur":
        return BackgroundSpec(mode="blur", strength=_strength(value.get("strength", DEFAULT_STRENGTH)))
    if mode == "color":
        return BackgroundSpec(mode="color", color=parse_color(value.get("color", "#00ff00")))
    image_id = value.get("image_id")
    if not isinstance(image_id, str) or not image_id or len(image_id) > 128:
        raise BackgroundError("background mode \"image\" needs the image_id of an uploaded picture")
    return BackgroundSpec(mode="image", image_id=image_id)


@dataclass(frozen=True, slots=True)
class MatteConfig:
    """segmentation: which network reads the frame. radius, eps: the guided filter (at the mask's size).
    low, high: the mask levels that become fully background / fully person. still_weight, motion_level,
    noise: the steadying over time (kernels.numpy.background.steady). every: the network reads a stream's
    frame once `every` frames have passed since its last read, and any frame where the picture moved far
    since then (more than `probe_share` of a sparse grid of pixels, every `probe_step`-th row and column,
    changed by more than `probe_level` grey levels: far above a camera's noise; a person moving about 9 px
    a frame at 720p), unless the same test passes on the last read frame with its person moved as the one
    face moved and its room left where it was (a person walking: the last coefficients are carried along
    with the face, IoU as with the network every frame); on the frames between, the last coefficients are
    applied to the new frame's own luma, so the person's outline still follows the picture (a person
    swaying 4 px a frame keeps IoU 0.98, 8 px 0.97). carry_every: on a frame a read falls due, the last
    read moved with the face stands in for it while that test holds (the frame is the last read one with
    its person moved by the face's move, or not moved), until `carry_every` frames have passed since the
    read: each such frame is checked against the read one point by point on the sparse grid, so a read
    would give the same outline moved. A still, swaying or walking person's stream is read one frame in
    three; a change over `probe_share` of the grid that the move does not explain (an arm raised, a turn,
    a second person) is read at once, a smaller one at the next read, two frames later at most (one with
    `carry_every` 2, the cadence `every` alone gives).
    refit_level: on a read whose steadied mask moved nowhere by more than this since the coefficients were
    fitted, and whose grey moved nowhere past the camera's `noise` (averaged as the steadying averages
    it), the last fit stands (kernels: fit_holds), brought up as it was: a still picture's reads cost the
    network and the steadying; 0 fits every read.
    blur_factor: the blur runs at 1/blur_factor of the frame. blur_hold: a blurred room serves the frames
    after it while the room stands still and the person has not moved past its reach (compose_i420), for
    at most blur_hold frames (8: about a quarter of a second at 30 fps, so the room's light and a small
    thing moving in it show soon). half_size_edges: a stream's alpha is fitted to
    its luma at the chroma planes' size (half the frame's sides: 2.5 times finer than the network's mask)
    and brought up bilinearly for Y (a stream's compositing brings it up only along the person's edge,
    compose_i420), which costs about half the full-size fit; photos are fitted at full size.
    second_look: a photo (not steadied), and a clip that asks (Matte.alpha_rgb's `second`), has each face's
    head and shoulders read a second time on every network run (a stream, on some: below): the box
    `second_look` face widths either side of the face, a face width above it and twice `second_look` below,
    cut to the first mask's person, squared with a quarter of its side around it and read at the network's own
    input size. In the whole frame's thumbnail a head is 20-40 px, too few for the network to tell a busy room
    from hair and shoulders; the second read is what the mask holds in that box (docs/background.md).
    second_mirror: the box is read as it is and mirrored, and the two averaged: the network's mistakes in a
    busy room are not mirror images of each other, its person is. The second look costs two network runs per
    face (about 10 ms more on a 720p photo), which a stream's 4 ms does not hold on every frame; 0 turns it
    off. second_feather: the share of the box's side over which its mask fades into the first one.
    stream_look_frames: a stream reads each face's head a second time once in `stream_look_frames` frames (a
    second at 30 fps; 0: never), on a frame the network reads, one face per run at most (a new face first,
    then the oldest read), and holds each read between: on the network's other runs a held read, moved along
    with its face, goes into the new mask where the picture has not moved since it was read
    (kernels.numpy.background.moved), and the new run's own read stays where it has. A still person keeps the
    second look's mask; a hand or a turn has the first look where it moves until the next read.
    pose_look: BlazePose's person segmentation (engines.pose_segmentation) is a third vote, read on the spot
    wherever the second look runs on every network run (photos, and clips that ask): the mask is the mean of
    the first look, the first look with the second written in, and BlazePose's read of the frame
    (`pose_side` pixels on its long side). A network that finds the body first and reads it in its own
    square errs elsewhere than the selfie network's two zooms: where one of those takes a thing beside the
    person for the person, the other two outvote it (docs/background.md, rooms the looks were not tuned
    on). No body found: the two looks alone, as without it. It costs about 27 ms a read (the detector and
    the landmark network, one core), which a stream's frame does not hold: a stream reads it once in
    `stream_pose_frames` frames (a second at 30 fps; 0: never) on a worker thread of its own, so no frame
    waits for it, and holds the read: on the network's runs after it arrives, the vote is cast where the
    picture has not moved since the frame it was read from (kernels.numpy.background.moved), and the held
    looks' mask stays where it has.
    island_reach: a part of the mask (over half person, 8-connected) that holds no face and that BlazePose's
    vote, where there is one, does not read as a person, and that lies more than `island_reach` widths of
    the largest face from every part that does, is something in the room taken for a person (a bright
    galaxy on a deep-sky backdrop, a lamp): it is dropped, with its fringe, before the fit
    (kernels.numpy.background.drop_islands). A raised hand is joined to its person by the arm, or read as
    person by BlazePose; a second person's head is a face of its own. island_area: a part over this many
    areas of the largest face stays wherever it is (a second person seen from behind, whose face is not
    found, is several; the galaxies and lamps the network takes are under one). No face found: nothing is
    dropped; island_reach 0 keeps every part."""

    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    radius: int = 2
    eps: float = 1e-3
    low: float = 0.35
    high: float = 0.65
    still_weight: float = 0.25
    motion_level: float = 0.05
    noise: float = 0.01
    every: int = 2
    probe_step: int = 16
    probe_level: int = 16
    probe_share: float = 0.05
    carry_every: int = 3
    refit_level: float = 0.02
    blur_factor: int = 8
    blur_hold: int = 8
    half_size_edges: bool = True
    second_look: float = 1.2
    second_mirror: bool = True
    second_feather: float = 0.1
    stream_look_frames: int = 30
    pose_look: bool = True
    pose_side: int = 640
    stream_pose_frames: int = 30
    pose: PoseConfig = field(default_factory=PoseConfig)
    island_reach: float = 1.5
    island_area: float = 2.0


@dataclass(frozen=True, slots=True)
class PoseRead:
    """A stream's held BlazePose read: `prob` at the mask's size (None: no body found), the grey of the
    frame it was read from (the mask's size) and that frame's number."""

    prob: np.ndarray | None
    grey: np.ndarray
    frame: int


@dataclass(frozen=True, slots=True)
class HeadLook:
    """One face's second look at the first mask's size: `prob` covers the mask's pixels from (x, y) (inside
    the mask), read while the face's centre was at `centre` (mask pixels, x then y). A stream's also keeps
    the grey it read there (`grey`, `prob`'s shape) and the stream frame it was read on."""

    x: int
    y: int
    prob: np.ndarray
    centre: tuple[float, float]
    grey: np.ndarray | None = None
    frame: int = 0
    weights: dict = field(default_factory=dict, compare=False)   # its fade, by which sides lie inside the mask


class Matte:
    """One stream's person matte. `alpha_rgb(image)` / `alpha_i420(y, u, v)` give the frame's alpha (1 on the
    person, 0 on the room) at full size (and half size for the chroma planes). With `steady` (streams) the
    mask is steadied against the previous frame's; photos and the first frame take the network's alone."""

    def __init__(self, config: MatteConfig = MatteConfig(), segmenter: PersonSegmenter | None = None,
                 reuse: bool = False, pose: PoseSegmenter | None = None) -> None:
        """`segmenter` / `pose`: networks to share (the caller closes them); by default the matte makes its
        own on first use and closes them with itself."""
        self.config = config
        self.reuse = reuse           # the alphas land in buffers kept from frame to frame (valid until the next call)
        self._ws: dict[str, np.ndarray] = {}
        self._own = segmenter is None
        self.segmenter = segmenter if segmenter is not None else PersonSegmenter(config.segmentation)
        self._own_pose = pose is None
        self.pose = pose if pose is not None else PoseSegmenter(config.pose)
        self.pose_reads = 0          # BlazePose's reads that found a body and voted (MatteConfig.pose_look)
        self.pose_error: str | None = None   # why BlazePose could not read, once it failed (the looks go on alone)
        self._pose_worker: Any = None        # a stream's one thread for its BlazePose reads, made on first use
        self._pose_job: Any = None           # (future, grey, frame, generation) of the read under way
        self._pose_held: PoseRead | None = None
        self._generation = 0                 # reset() moves it on: a read from before is dropped
        self.pose_cpu_ms = 0.0               # a stream's BlazePose reads' CPU on their own thread, in all
        self._mask: np.ndarray | None = None
        self._guide: np.ndarray | None = None
        self._coef: Any = None
        self._fit: tuple[np.ndarray, np.ndarray] | None = None   # (mask, guide) the coefficients were fitted to
        self._up: tuple[Any, Any] | None = None      # (coefficients, them brought up to the alpha's size)
        self._key: Any = None
        self._probe: np.ndarray | None = None
        self._ref_luma: np.ndarray | None = None     # the last fresh frame's half-size grey (host)
        self._ref_centre: np.ndarray | None = None   # and where its one face was (frame pixels)
        self._frames = 0
        self._read_at = 0            # the stream frame the network last read
        self.network_runs = 0
        self.fresh = True            # the network read this frame
        self.still = False           # the last mask was reused where it stood (the picture still)
        self.room_still = False      # the picture stands where the network last read it, but maybe for the
                                     # person (a new read of a still picture, or the mask carried with the face)
        self.carried = 0             # frames whose mask was the last one moved along with the face
        self.shift: np.ndarray | None = None   # this frame's carry (frame pixels), or None
        self.half_grey: Any = None   # a stream's last frame's 2 x 2 grey means (half_plane; the matte's buffer)
        self._held: list[HeadLook] = []   # a stream's second looks, one per face
        self.looks_read = 0          # a stream's second looks read (each face's counts once)
        self.islands_dropped = 0     # parts of the network's masks dropped as far from every face (island_reach)

    def reset(self) -> None:
        """Forget the stream's history (a new scene, a new stream)."""
        self._mask = self._guide = self._coef = self._up = self._key = self._probe = self._fit = None
        self._ref_luma = self._ref_centre = self.shift = None
        self._held = []
        self._frames = self._read_at = 0
        self._pose_held = None
        self._generation += 1

    def _coefficients(self, thumb: np.ndarray, frame_size: tuple[int, int], steady: bool, like: Any,
                      keep: Sequence[np.ndarray] = (), crop: Crop | None = None, second: bool = False):
        """The guided filter's coefficients for this frame: the network's mask of the thumbnail with each
        face's second look (`crop` reads the frame: on every run with `second`, else a stream's held one)
        and BlazePose's vote, without the parts far from every face, steadied against the last one
        (streams), fitted to the thumbnail's grey; on the device of `like`."""
        from kernels.numpy import background as kn

        c = self.config
        guide = kn.thumbnail_guide(thumb)
        mask = self.segmenter(thumb, frame_size)
        self.network_runs += 1
        looks = crop is not None and keep and c.second_look > 0
        vote = None
        if crop is not None and second:
            looked = self._second_look(mask, frame_size, keep, crop, twin_for(like)) if looks else mask
            mask, vote = self._with_pose(mask, looked, frame_size, crop, twin_for(like))
        elif steady:
            first = mask
            if looks and c.stream_look_frames > 0:
                mask = self._held_look(mask, guide, frame_size, keep, crop, twin_for(like))
            if crop is not None and c.pose_look and c.stream_pose_frames > 0 and self.pose_error is None:
                mask, vote = self._held_pose(first, mask, guide, frame_size, crop, twin_for(like))
        mask = self._without_islands(mask, keep, frame_size, vote)
        if steady:
            mask = kn.steady(self._mask, mask, self._guide, guide, c.still_weight, c.motion_level, c.noise)
            self._mask, self._guide = mask, guide
            if (self._fit is not None and self._coef is not None and c.refit_level > 0
                    and kn.fit_holds(self._fit, mask, guide, c.refit_level, c.noise)):
                return self._coef                # what the fit would read has not changed: the last fit stands
            self._fit = (mask, guide)
        a, b = kn.guided_coefficients(mask, guide, c.radius, c.eps, c.low, c.high)
        twin = twin_for(like)
        return twin.put(a, like), twin.put(b, like)

    def _coef_for(self, frame: Any, size: tuple[int, int], thumbnail, steady: bool, luma: Any = None,
                  keep: Sequence[np.ndarray] = (), crop: Crop | None = None, second: bool = False):
        """This frame's coefficients: fresh once `every` frames of a stream have passed since the last read
        (and always for photos), else the last ones, which the new frame's own luma then shapes (kernels:
        apply_coefficients). When the picture moved, but only as one person moving with their face would
        (`luma`: the half-size grey; `keep`: the faces' hulls), the last ones are carried along with the
        face instead of running the network (`shift`); so they are on a frame a read falls due, until
        `carry_every` frames have passed since the last read."""
        twin = twin_for(frame)
        key = (size, twin.ON_HOST)
        if steady and self._key != key:                  # a new size or device: a new history
            self.reset()
        c = self.config
        probe = twin.host(frame[::c.probe_step, ::c.probe_step]).astype(np.int16) if steady and c.every > 1 else None
        fresh = not steady or self._coef is None or self._frames - self._read_at >= max(1, c.every)
        carrying = (fresh and steady and self._coef is not None   # due, but the last read moved with the face
                    and self._frames - self._read_at < c.carry_every)   # may stand in for it
        still, shift, room_still = not fresh, None, False
        if probe is not None and self._probe is not None and probe.shape == self._probe.shape:
            changed = np.count_nonzero(np.abs(probe - self._probe) > c.probe_level) / probe.size
            room_still = changed <= c.probe_share     # the picture stands where the network last read it
            if not fresh or carrying:
                still = room_still and not carrying
                shift = None if still else self._carry(luma, keep, size)
                if not carrying or shift is not None:    # (a due read the carry cannot stand in for: read)
                    fresh = not still and shift is None
                    room_still = still or shift is not None
        coef = self._coefficients(np.asarray(twin.host(thumbnail())), size, steady, frame, keep, crop, second) \
            if fresh else self._coef
        self.fresh, self.still, self.room_still, self.shift = fresh, still, bool(room_still), shift
        self.carried += shift is not None
        if steady:
            if fresh:
                self._read_at = self._frames
                self._coef, self._probe = coef, probe
                self._ref_luma = None if luma is None or len(keep) != 1 or c.every < 2 else np.array(twin.host(luma))
                self._ref_centre = None if self._ref_luma is None else _centre(keep[0])
            self._frames += 1
            self._key = key
        return coef

    def _read_looks(self, mask: np.ndarray, size: tuple[int, int], keep: Sequence[np.ndarray], crop: Crop,
                    twin: Any, guide: np.ndarray | None = None, frame: int = 0) -> list[HeadLook]:
        """Each face's head-and-shoulders box read again by the network (MatteConfig.second_look), at the
        size of `mask` (the first read's); with the grey of `guide` there when given (a stream's)."""
        c = self.config
        looks = []
        for hull in keep:
            box = head_box(hull, size, mask, c.second_look)
            if box is None:
                continue
            x0, y0, x1, y1 = box
            look_size = self.segmenter.input_size(x1 - x0, y1 - y0)
            thumb = np.asarray(twin.host(crop(box, look_size)))
            prob = self.segmenter(thumb, (x1 - x0, y1 - y0))
            self.network_runs += 1
            if c.second_mirror:
                prob += self.segmenter(np.ascontiguousarray(thumb[:, ::-1]), (x1 - x0, y1 - y0))[:, ::-1]
                prob *= 0.5
                self.network_runs += 1
            placed = look_at_mask(prob, box, size, mask.shape)
            if placed is not None:
                x, y, q = placed
                grey = None if guide is None else guide[y:y + q.shape[0], x:x + q.shape[1]].copy()
                looks.append(HeadLook(x, y, q, _mask_centre(hull, size, mask.shape), grey, frame))
        return looks

    def _with_pose(self, first: np.ndarray, looked: np.ndarray, size: tuple[int, int], crop: Crop,
                   twin: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """(the mean of the first look, `looked` (the first with the second look written in) and BlazePose's
        read (MatteConfig.pose_look), that read); (`looked`, None) when that is off or finds no body."""
        if not self.config.pose_look or self.pose_error is not None:
            return looked, None
        vote = self._pose_vote(first.shape, size, crop, twin)
        return (looked, None) if vote is None else (_three_votes(first, looked, vote), vote)

    def _without_islands(self, mask: np.ndarray, keep: Sequence[np.ndarray], size: tuple[int, int],
                         vote: np.ndarray | None) -> np.ndarray:
        """`mask` without the parts that lie far from every face (MatteConfig.island_reach): the faces'
        hulls and BlazePose's `vote` (where it reads a person) are what is known to be the person."""
        import cv2

        from kernels.numpy import background as kn

        reach = self.config.island_reach
        if reach <= 0 or not len(keep):
            return mask
        parts = kn.mask_parts(mask)
        if parts[0] <= 2:              # the room and at most one part: nothing to drop
            return mask
        mh, mw = mask.shape
        scale = np.array([mw / size[0], mh / size[1]])
        seeds = np.zeros(mask.shape, np.uint8) if vote is None else (vote > 0.5).astype(np.uint8)
        width = area = 0.0
        for hull in keep:
            pts = np.asarray(hull, np.float64)[:, :2] * scale
            width = max(width, float(np.ptp(pts[:, 0])))
            area = max(area, float(cv2.contourArea(pts.astype(np.float32))))
            cv2.fillConvexPoly(seeds, np.round(pts).astype(np.int32), 1)
        out, dropped = kn.drop_islands(mask, parts, seeds, reach * max(width, 1.0),
                                       self.config.island_area * max(area, 1.0))
        self.islands_dropped += dropped
        return out

    def _held_pose(self, first: np.ndarray, looked: np.ndarray, guide: np.ndarray, size: tuple[int, int],
                   crop: Crop, twin: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """A stream's `looked` mask with its held BlazePose read's vote (MatteConfig.stream_pose_frames), and
        that vote as it counts (None: none held): the read that has arrived is taken in; a new one is
        started on the worker when none is under way and the held one is `stream_pose_frames` old; the vote
        is cast where the picture has not moved since."""
        from concurrent.futures import ThreadPoolExecutor

        from kernels.numpy import background as kn

        c, now = self.config, self._frames
        job = self._pose_job
        if job is not None and job[0].done():
            self._pose_job = None
            future, grey, frame, generation = job
            try:
                prob, cpu_ms = future.result()
                self.pose_cpu_ms += cpu_ms
            except Exception as exc:     # as a photo's: the looks go on alone, said once
                self.pose_error = f"{type(exc).__name__}: {exc}"
                log.warning("background: BlazePose's vote is off: %s", self.pose_error)
                return looked, None
            if generation == self._generation and grey.shape == guide.shape:
                self._pose_held = PoseRead(prob, grey, frame)
                self.pose_reads += prob is not None
        held = self._pose_held
        if self._pose_job is None and (held is None or now - held.frame >= c.stream_pose_frames):
            if self.pose.error is not None:
                self.pose_error = self.pose.error
                return looked, None
            if self._pose_worker is None:
                self._pose_worker = ThreadPoolExecutor(1, thread_name_prefix="blazepose")
            thumb = self._pose_thumbnail(size, crop, twin)
            self._pose_job = (self._pose_worker.submit(_timed, self.pose, thumb, (first.shape[1], first.shape[0])),
                              guide.copy(), now, self._generation)
        if held is None or held.prob is None or held.grey.shape != guide.shape:
            return looked, None
        voted = _three_votes(first, looked, held.prob)
        voted -= looked
        worth = kn.moved(held.grey, guide, c.motion_level, c.noise)
        np.subtract(1.0, worth, out=worth)
        voted *= worth
        voted += looked
        worth *= held.prob                # the vote as it counted: no new array on the frame thread
        return voted, worth

    def _pose_thumbnail(self, size: tuple[int, int], crop: Crop, twin: Any) -> np.ndarray:
        """The whole frame, on the host, at `pose_side` on its long side (even sides): what BlazePose reads."""
        w, h = size
        k = min(1.0, self.config.pose_side / max(w, h))
        small = (max(2, int(round(w * k))) & ~1, max(2, int(round(h * k))) & ~1)
        return np.asarray(twin.host(crop((0, 0, w & ~1, h & ~1), small)))

    def wait_for_pose(self, timeout: float = 5.0) -> bool:
        """Wait for a stream's BlazePose read under way (tests and benchmarks, to be deterministic; a stream
        never waits); True when none is left running."""
        job = self._pose_job
        if job is None:
            return True
        from concurrent.futures import wait

        return bool(wait([job[0]], timeout).done)

    def _pose_vote(self, shape: tuple[int, int], size: tuple[int, int], crop: Crop, twin: Any) -> np.ndarray | None:
        """BlazePose's person probability over the frame at the mask's `shape` (MatteConfig.pose_look), read
        from the frame brought to `pose_side` on its long side; None when it finds no body, or cannot read
        (then `pose_error` says why, once in the log, and the matte goes on without it)."""
        if self.pose.error is not None:      # it failed before (another matte sharing it has said why)
            self.pose_error = self.pose.error
            return None
        try:
            vote = self.pose(self._pose_thumbnail(size, crop, twin), (shape[1], shape[0]))
        except Exception as exc:   # a missing or broken model file: the selfie network's looks still stand
            self.pose_error = f"{type(exc).__name__}: {exc}"
            log.warning("background: BlazePose's vote is off: %s", self.pose_error)
            return None
        self.pose_reads += vote is not None
        return vote

    def _second_look(self, mask: np.ndarray, size: tuple[int, int], keep: Sequence[np.ndarray], crop: Crop,
                     twin: Any) -> np.ndarray:
        """`mask` with each face's second look read now and written in."""
        out = mask.copy()
        for look in self._read_looks(mask, size, keep, crop, twin):
            blend_look(out, look.prob, look.x, look.y, self.config.second_feather)
        return out

    def _held_look(self, mask: np.ndarray, guide: np.ndarray, size: tuple[int, int], keep: Sequence[np.ndarray],
                   crop: Crop, twin: Any) -> np.ndarray:
        """A stream's `mask` with each face's held second look (MatteConfig.stream_look_frames): one face
        without a read, or with the oldest one past its time, is read on this run; the others' held reads
        are moved with their faces and written in only where the picture has not moved since."""
        from kernels.numpy import background as kn

        c = self.config
        now = self._frames
        centres = [_mask_centre(h, size, mask.shape) for h in keep]
        held: dict[int, HeadLook] = {}
        for look in self._held:                     # each read stays with the face nearest it, if still near
            d = [np.hypot(cx - look.centre[0], cy - look.centre[1]) for cx, cy in centres]
            j = int(np.argmin(d)) if len(d) > 1 else 0
            if d[j] <= look.prob.shape[1] / 2 and (j not in held or held[j].frame < look.frame):
                held[j] = look
        due = sorted((j for j in range(len(keep)) if j not in held or now - held[j].frame >= c.stream_look_frames),
                     key=lambda j: held[j].frame if j in held else -1)
        for j in due:                               # a new face first, then the oldest read; one read a run
            fresh = self._read_looks(mask, size, [keep[j]], crop, twin, guide, now)
            if fresh:
                held[j] = fresh[0]
                self.looks_read += 1
                break
        out = mask.copy()
        for j, look in held.items():
            if look.frame == now:
                blend_look(out, look.prob, look.x, look.y, c.second_feather)
                continue
            x = look.x + int(round(centres[j][0] - look.centre[0]))
            y = look.y + int(round(centres[j][1] - look.centre[1]))
            rh, rw = look.prob.shape
            x0, y0, x1, y1 = max(0, x), max(0, y), min(mask.shape[1], x + rw), min(mask.shape[0], y + rh)
            if x1 - x0 < 2 or y1 - y0 < 2:
                continue
            sub = (slice(y0 - y, y1 - y), slice(x0 - x, x1 - x))
            worth = kn.moved(look.grey[sub], guide[y0:y1, x0:x1], c.motion_level, c.noise)
            np.subtract(1.0, worth, out=worth)
            blend_look(out, look.prob, x, y, c.second_feather, worth, look.weights)
        self._held = list(held.values())
        return out

    def _carry(self, luma: Any, keep: Sequence[np.ndarray], size: tuple[int, int]) -> np.ndarray | None:
        """The shift (frame pixels) that carries the last mask to this frame, when the one face moved and
        the frame is that person moved over a still room (kernels.numpy.background.person_moved_share);
        else None."""
        from kernels.numpy import background as kn

        if luma is None or len(keep) != 1 or self._ref_luma is None or self._mask is None:
            return None
        shift = _centre(keep[0]) - self._ref_centre
        now = np.asarray(twin_for(luma).host(luma))
        if now.shape != self._ref_luma.shape:
            return None
        scale = now.shape[1] / size[0]
        c = self.config
        share = kn.person_moved_share(self._ref_luma, self._mask, now, tuple(shift * scale),
                                      max(1, c.probe_step // 2), c.probe_level)
        return shift if share <= c.probe_share else None

    def alpha_rgb(self, image: Any, steady: bool = False, keep: Sequence[np.ndarray] = (),
                  second: bool | None = None) -> Any:
        """float32 H x W alpha of a uint8 RGB image (NumPy array or torch tensor, like the image); `keep`:
        polygons ((N, 2) pixels) that are the person whatever the network says (the faces' hulls).
        `second`: read each kept face's head a second time (MatteConfig.second_look; default: when not
        `steady`, a photo; a clip, steadied but not bound to a stream's frame time, asks for it)."""
        twin = twin_for(image)
        k = twin.background
        h, w = image.shape[:2]
        size = self.segmenter.input_size(w, h)
        crop = lambda b, s: k.rgb_thumbnail(image[b[1]:b[3], b[0]:b[2]], s)  # noqa: E731
        coef = self._coef_for(image, (w, h), lambda: k.rgb_thumbnail(image, size), steady, keep=keep, crop=crop,
                              second=_second(steady, second))
        if not twin.ON_HOST:
            luma = (image[..., 0].float() * 0.299 + image[..., 1].float() * 0.587 + image[..., 2].float() * 0.114)
        else:
            import cv2

            luma = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
        return k.keep_polygons(self._apply(coef, (w, h), luma, k), keep)

    def alpha_i420(self, y: Any, u: Any, v: Any, steady: bool = True,
                   keep: Sequence[np.ndarray] = (), full: bool = True, second: bool | None = None) -> tuple[Any, Any]:
        """(alpha for Y at full size, alpha for U and V at half size) of an I420 frame (even sides); `keep`
        and `second` as for alpha_rgb. With `reuse` they are this matte's buffers, overwritten by its next call.
        `full=False` (a stream's compositing, which brings Y's alpha up only along the person's edge,
        compose_i420 with `keep`): Y's is None where the alpha is fitted at half size."""
        twin = twin_for(y)
        k = twin.background
        h, w = y.shape
        size = self.segmenter.input_size(w, h)
        buf = self._buffer if self.reuse and twin.ON_HOST else (lambda *a: None)
        hs = (h // 2, w // 2)
        crop, second = _i420_crop(k, y, u, v), _second(steady, second)
        self.half_grey = None
        if self.config.half_size_edges:
            luma = self.half_grey = k.half_plane(y, out=buf("luma_half", hs, np.uint8))
            coef = self._coef_for(y, (w, h), lambda: k.i420_thumbnail(y, u, v, size), steady, luma, keep, crop, second)
            half = self._apply(coef, (w, h), luma, k, buf("alpha_half", hs, np.float32))
            k.keep_polygons(half, [np.asarray(p) * 0.5 for p in keep])
            if not full:
                return None, half
            up = k.upsample_alpha(half, (w, h), out=buf("alpha", (h, w), np.float32))
            return k.keep_polygons(up, keep), half
        coef = self._coef_for(y, (w, h), lambda: k.i420_thumbnail(y, u, v, size), steady, keep=keep, crop=crop,
                              second=second)
        alpha = self._apply(coef, (w, h), y, k, buf("alpha", (h, w), np.float32))
        k.keep_polygons(alpha, keep)
        return alpha, k.half_alpha(alpha)

    def _apply(self, coef: Any, frame_size: tuple[int, int], luma: Any, k: Any, out: Any = None) -> Any:
        """The alpha at `luma`'s size: the coefficients brought up (kept while they stay) and applied to
        the frame's grey, moved first by this frame's carry (`shift`, frame pixels, rounded to the alpha's
        whole pixels: the coefficients are smooth over a network cell of 5 frame pixels, the grey gives
        the edge)."""
        h, w = luma.shape
        shift = (0, 0) if self.shift is None else (int(round(float(self.shift[0]) * w / frame_size[0])),
                                                    int(round(float(self.shift[1]) * h / frame_size[1])))
        work = self._ws if self.reuse and twin_for(luma).ON_HOST else None
        return k.apply_coefficients(self._upsampled(coef, (h, w), k), luma, out=out, shift=shift, work=work)

    def _upsampled(self, coef: Any, size: tuple[int, int], k: Any) -> Any:
        """The coefficients brought up to the alpha's `size` (kernels: upsample_coefficients), made again
        only when they change: on the frames the network rests on, only the grey is new."""
        if self._up is None or self._up[0] is not coef or self._up[1].size != size:
            self._up = (coef, k.upsample_coefficients(coef, size))
        return self._up[1]

    def _buffer(self, name: str, shape: tuple[int, int], dtype: Any) -> np.ndarray:
        b = self._ws.get(name)
        if b is None or b.shape != shape or b.dtype != dtype:
            b = self._ws[name] = np.empty(shape, dtype)
        return b

    def close(self) -> None:
        if self._own:
            self.segmenter.close()
        if self._pose_worker is not None:      # never waited on: a read under way finishes on its own thread
            self._pose_worker.shutdown(wait=False, cancel_futures=True)
            self._pose_worker = self._pose_job = None
        if self._own_pose:
            self.pose.close()


def _three_votes(first: np.ndarray, looked: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """The mask BlazePose's vote makes (MatteConfig.pose_look): the mean of the first look, the first look
    with the second written in, and BlazePose's read, as a new array."""
    out = first + looked
    out += pose
    out *= np.float32(1.0 / 3.0)
    return out


def _timed(read: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """`read(*args)` and the CPU it took on this thread (ms): a stream's BlazePose read, on its worker."""
    import time

    t0 = time.thread_time()
    out = read(*args)
    return out, (time.thread_time() - t0) * 1000.0


def _centre(polygon: np.ndarray) -> np.ndarray:
    return np.asarray(polygon, np.float64)[:, :2].mean(axis=0)


def _mask_centre(polygon: np.ndarray, frame_size: tuple[int, int], mask_shape: tuple[int, int]) -> tuple[float, float]:
    cx, cy = _centre(polygon)
    return float(cx * mask_shape[1] / frame_size[0]), float(cy * mask_shape[0] / frame_size[1])


def face_hulls(faces: Sequence[Any]) -> list[np.ndarray]:
    """The convex hull ((N, 2) pixels) of each face's landmarks: regions the matte keeps as the person."""
    import cv2

    out = []
    for face in faces:
        pts = np.asarray(getattr(face, "landmarks", face), np.float32)
        if pts.ndim == 2 and len(pts) >= 3:
            out.append(cv2.convexHull(np.ascontiguousarray(pts[:, :2]))[:, 0])
    return out


# reads the frame's box (x0, y0, x1, y1: even frame pixels) as an RGB thumbnail of a (width, height)
Crop = Callable[[tuple[int, int, int, int], tuple[int, int]], Any]


def _second(steady: bool, asked: bool | None) -> bool:
    """Whether a matte call takes the second look: as asked, else only unsteadied (a photo)."""
    return (not steady) if asked is None else asked


def _i420_crop(k: Any, y: Any, u: Any, v: Any) -> Crop:
    def crop(b: tuple[int, int, int, int], size: tuple[int, int]) -> Any:
        x0, y0, x1, y1 = b
        return k.i420_thumbnail(y[y0:y1, x0:x1], u[y0 // 2:y1 // 2, x0 // 2:x1 // 2],
                                v[y0 // 2:y1 // 2, x0 // 2:x1 // 2], size)
    return crop


def head_box(hull: np.ndarray, frame_size: tuple[int, int], mask: np.ndarray,
             reach: float) -> tuple[int, int, int, int] | None:
    """The box (x0, y0, x1, y1; even frame pixels) of one face's second look (MatteConfig.second_look):
    `reach` face widths either side, one above, 2 x `reach` below, cut to the box of `mask`'s person
    (a probability at any size, over the whole frame) but never to less than the face, then squared
    with a quarter of its side added around it and cut to the frame. None for a face under 8 px wide."""
    w, h = frame_size
    pts = np.asarray(hull, np.float64)[:, :2]
    (fx0, fy0), (fx1, fy1) = pts.min(axis=0), pts.max(axis=0)
    fw = fx1 - fx0
    if fw < 8:
        return None
    fc = (fx0 + fx1) / 2
    x0, x1, y0, y1 = fc - reach * fw, fc + reach * fw, fy0 - fw, fy1 + 2 * reach * fw
    ys, xs = np.nonzero(mask > 0.5)
    if len(xs):
        sx, sy = w / mask.shape[1], h / mask.shape[0]
        x0, x1 = max(x0, xs.min() * sx), min(x1, (xs.max() + 1) * sx)
        y0, y1 = max(y0, ys.min() * sy), min(y1, (ys.max() + 1) * sy)
    x0, x1, y0, y1 = min(x0, fx0), max(x1, fx1), min(y0, fy0), max(y1, fy1)
    half = max(x1 - x0, y1 - y0) * 0.75
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    bx0, by0 = max(0, int(cx - half)) & ~1, max(0, int(cy - half)) & ~1
    bx1, by1 = min(w, int(cx + half)) & ~1, min(h, int(cy + half)) & ~1
    return (bx0, by0, bx1, by1) if bx1 - bx0 >= 16 and by1 - by0 >= 16 else None


def look_at_mask(look: np.ndarray, box: tuple[int, int, int, int], frame_size: tuple[int, int],
                 mask_shape: tuple[int, int]) -> tuple[int, int, np.ndarray] | None:
    """(x, y, the read at the mask's size) of `look` (the network's probability of the frame's `box`) for a
    whole frame's mask of `mask_shape`; None where the box covers under 2 x 2 of the mask's pixels."""
    import cv2

    mh, mw = mask_shape
    w, h = frame_size
    x0, y0, x1, y1 = box
    ix0, ix1 = int(round(x0 * mw / w)), int(round(x1 * mw / w))
    iy0, iy1 = int(round(y0 * mh / h)), int(round(y1 * mh / h))
    if ix1 - ix0 < 2 or iy1 - iy0 < 2:
        return None
    return ix0, iy0, cv2.resize(np.asarray(look, np.float32), (ix1 - ix0, iy1 - iy0), interpolation=cv2.INTER_AREA)


def blend_look(mask: np.ndarray, prob: np.ndarray, x: int, y: int, feather: float,
               worth: np.ndarray | None = None, cache: dict | None = None) -> None:
    """Write `prob` (a read at the mask's size) into `mask` from (x, y) in place, the part inside the mask,
    fading into the mask over `feather` of its side where it lies inside the mask, and weighted by
    `worth` (what the read is still worth on the part inside the mask) when given. `cache` keeps the
    fade from call to call (a stream's held read: HeadLook.weights)."""
    mh, mw = mask.shape
    rh, rw = prob.shape
    ramp = max(1.0, feather * max(rw, rh))

    def weights(n: int, lo_open: bool, hi_open: bool) -> np.ndarray:
        i = np.arange(n, dtype=np.float32) + 0.5
        lo = np.minimum(i / ramp, 1.0) if lo_open else np.ones(n, np.float32)
        hi = np.minimum((n - i) / ramp, 1.0) if hi_open else np.ones(n, np.float32)
        return np.minimum(lo, hi)

    x0, y0, x1, y1 = max(0, x), max(0, y), min(mw, x + rw), min(mh, y + rh)
    if x1 <= x0 or y1 <= y0:
        return
    sides = (y > 0, y + rh < mh, x > 0, x + rw < mw)
    wt = None if cache is None else cache.get(sides)
    if wt is None:
        wt = np.outer(weights(rh, sides[0], sides[1]), weights(rw, sides[2], sides[3]))
        if cache is not None:
            cache[sides] = wt
    sub = (slice(y0 - y, y1 - y), slice(x0 - x, x1 - x))
    region = mask[y0:y1, x0:x1]
    step = prob[sub] - region
    step *= wt[sub]
    if worth is not None:
        step *= worth
    region += step


def merge_look(mask: np.ndarray, look: np.ndarray, box: tuple[int, int, int, int], frame_size: tuple[int, int],
               feather: float) -> None:
    """Write `look` (the network's probability of the frame's `box`) into `mask` (the whole frame's, at its
    own size) in place, fading into it over `feather` of the box's side where the box is inside the frame."""
    placed = look_at_mask(look, box, frame_size, mask.shape)
    if placed is not None:
        blend_look(mask, placed[2], placed[0], placed[1], feather)


def _color_i420(color: tuple[int, int, int]) -> tuple[float, float, float]:
    from kernels.numpy.color import rgb_to_i420

    y, u, v = rgb_to_i420(np.full((2, 2, 3), color, np.uint8))
    return float(y[0, 0]), float(u[0, 0]), float(v[0, 0])


class Backdrop:
    """What goes behind the person, made once per picture and frame size and kept: a picture scaled to
    cover the frame (as RGB and as I420 planes). Not thread-safe; one per stream or per photo call."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._rgb: Any = None
        self._planes: tuple | None = None
        self._blurred: tuple | None = None      # the last blurred room, for a still picture
        self._blur_key: tuple | None = None
        self._blurred_fills: tuple | None = None   # ... and as composite_i420's room fills (rounded)
        self._trusted: Any = None               # ... where it shows the room alone (kernels: trusted_room)
        self._blur_age = 0                      # frames composed over it since it was made

    def picture(self, picture: Any, key: Any, size: tuple[int, int], like: Any = None) -> Any:
        """RGB picture covering `size` = (w, h), of `like`'s kind and device (default: `picture`'s)."""
        target = twin_for(like if like is not None else picture)
        device = None if target.ON_HOST else (like if like is not None else picture).device
        full = (key, size, str(device))
        if self._key != full:
            self._key, self._planes = full, None
            rgb = twin_for(picture).background.cover(picture, size)
            self._rgb = rgb if target.ON_HOST else target.asarray(rgb, like if like is not None else picture)
        return self._rgb

    def picture_planes(self, picture: Any, key: Any, size: tuple[int, int], like: Any = None) -> tuple:
        """The covering picture as I420 planes on `like`'s device, converted once."""
        rgb = self.picture(picture, key, size, like)
        if self._planes is None:
            self._planes = tuple(twin_for(rgb).color.rgb_to_i420(rgb))
        return self._planes


def compose_rgb(image: Any, alpha: Any, spec: BackgroundSpec, picture: Any = None, backdrop: Backdrop | None = None,
                picture_key: Any = None, blur_factor: int = 8) -> Any:
    """uint8 RGB with the room behind the person replaced as `spec` says (`picture` for mode image)."""
    k = twin_for(image).background
    h, w = image.shape[:2]
    if spec.mode == "blur":
        bg = k.background_blur(image, alpha, k.blur_sigma(spec.strength, h, blur_factor), blur_factor)
    elif spec.mode == "color":
        bg = tuple(float(c) for c in spec.color)
    elif spec.mode == "image":
        if picture is None:
            raise BackgroundError(f"background picture {spec.image_id!r} is not available")
        bg = (backdrop or Backdrop()).picture(picture, picture_key if picture_key is not None else spec.image_id, (w, h),
                                              like=image)
    else:
        return image
    return k.composite(image, bg, alpha)


def compose_i420(y: Any, u: Any, v: Any, alphas: tuple[Any, Any], spec: BackgroundSpec, picture: Any = None,
                 backdrop: Backdrop | None = None, picture_key: Any = None, blur_factor: int = 8,
                 in_place: bool = False, still: bool = False, matte_held: bool = False, blur_hold: int = 8,
                 work: dict | None = None, keep: Sequence[np.ndarray] = (), y_half: Any = None) -> tuple[Any, Any, Any]:
    """(Y, U, V) with the room behind the person replaced as `spec` says: new planes, or with `in_place`
    the planes given, written over. A blurred room is made again only when it must (`backdrop` keeps the
    last): `still` (the matte's room_still: the picture stands where the network last read it, but maybe
    for the person) lets the last blurred room serve this frame as long as every pixel of room the frame
    shows was filled from room when it was made, as a new blur would fill it give or take ROOM_SLACK
    (kernels: room_within; `matte_held`, the matte the last frame's, skips that test), and it is younger
    than `blur_hold` frames (the room's light changes):
    the room a moving person uncovered is then filled from the room around it, as a fresh blur fills
    it. `work`: a dict the caller keeps from frame to frame, where the arithmetic's float buffers live
    (NumPy planes). `alphas` as Matte.alpha_i420 gives them; with Y's None (`full=False`) the planes are
    composed by the half-size alpha (kernels: composite_i420: Y's alpha brought up and `keep`'s polygons
    raised to 1 only along the person's edge), the same pixels as with Y's alpha given. `y_half`: Y's 2 x 2
    means (Matte.half_grey), which a blur shrinks from when given."""
    k = twin_for(y).background
    a_y, a_uv = alphas
    h, w = y.shape
    outs = (y, u, v) if in_place else (None, None, None)

    def y_alpha() -> Any:
        return a_y if a_y is not None else k.keep_polygons(k.upsample_alpha(a_uv, (w, h)), keep)

    fills = None
    if spec.mode == "blur":
        s = k.blur_sigma(spec.strength, h, blur_factor)
        half = max(1, blur_factor // 2)
        key = (h, w, s, twin_for(y).ON_HOST)
        small = (max(1, w // blur_factor), max(1, h // blur_factor))
        room = None
        held = (still and backdrop is not None and backdrop._blurred is not None and backdrop._blur_key == key
                and backdrop._blur_age < blur_hold)
        if held and not matte_held:
            room = k.room_weight(a_uv, small)
            held = k.room_within(room, backdrop._trusted, s)
        if held:
            bgs = backdrop._blurred
            backdrop._blur_age += 1
        else:
            room = k.room_weight(a_uv, small) if room is None else room    # once for the three planes
            old = backdrop._blurred if backdrop is not None and backdrop._blurred is not None else (None, None, None)
            if room.shape[:2] == small[::-1] == (u.shape[0] // half, u.shape[1] // half):
                bgs = k.background_blur_i420((y, u, v), room, s, blur_factor, out=old, y_half=y_half)
            else:
                bgs = (k.background_blur(y, y_alpha(), s, blur_factor, out=old[0]),
                       k.background_blur(u, a_uv, s, half, room, out=old[1]),
                       k.background_blur(v, a_uv, s, half, room, out=old[2]))
            if backdrop is not None:
                backdrop._blurred, backdrop._blur_key, backdrop._blurred_fills = bgs, key, None
                backdrop._trusted, backdrop._blur_age = k.trusted_room(room, s), 1
        if backdrop is not None and a_y is None and twin_for(y).ON_HOST:
            if backdrop._blurred_fills is None:
                backdrop._blurred_fills = tuple(k.room_fill(b, b.shape) for b in bgs)
            fills = backdrop._blurred_fills
    elif spec.mode == "color":
        bgs = _color_i420(spec.color)
        if a_y is None and work is not None and twin_for(y).ON_HOST:
            key = ("fill", bgs, y.shape)                # the current colour's only: a picker dragged keeps one
            if work.get("fill_key") != key:
                work["fill_key"], work["fills"] = key, tuple(k.room_fill(b, p.shape) for b, p in zip(bgs, (y, u, v)))
            fills = work["fills"]
    elif spec.mode == "image":
        if picture is None:
            raise BackgroundError(f"background picture {spec.image_id!r} is not available")
        bgs = (backdrop or Backdrop()).picture_planes(picture, picture_key if picture_key is not None else spec.image_id,
                                                      (w, h), like=y)
    else:
        return y, u, v
    if a_y is None:
        return k.composite_i420((y, u, v), bgs, a_uv, keep, out=None if not in_place else (y, u, v), fills=fills,
                                work=work if twin_for(y).ON_HOST else None)

    host_work = work if twin_for(y).ON_HOST else None
    return tuple(k.composite(p, b, a, out=o, work=scratch(host_work, p.shape, p.shape))
                 for p, b, a, o in zip((y, u, v), bgs, (a_y, a_uv, a_uv), outs))
