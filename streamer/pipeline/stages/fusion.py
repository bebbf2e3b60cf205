"""Fusion stage: each tracked face takes on its source identity, keeping its own pose, expression and light.

Per face, at face-crop size (a face wider than `FusionConfig.work_px` takes its source, colour, shading
and seam at that width, its live detail laid back at full size): the destination mesh is the live mesh
moved toward the source's proportions, as far as the session's `shape` control says (else
`FusionConfig.shape_weight`; 0 keeps the live face's shape and changes its skin alone), eyes and mouth as
rigid pieces so expression survives, the outline fixed so the seam stays put; visible triangles (back
faces culled) are rasterised once into an id map; one remap samples the source texture and one the live
frame (the live face follows the same shape change, so the kept mouth interior and eyes line up); the
source is moved to the live skin's Lab statistics (smoothed over time; lightness by its mean alone, so the
skin's detail keeps its contrast) and given the live low-frequency shading and colour; a multi-band blend inside a
feathered mask puts it in; a support mask keeps every pixel outside the face bit-exact, and a face's
`keep` mask (a hand in front of it, from the face stage) gives those pixels back from the input, feathered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping

import cv2
import numpy as np
from cachetools import FIFOCache

from engines import mesh
from engines.fusion_mesh import align, fusion_mesh, signed_areas
from engines.sources import SourceFace
from streamer.session.face_map import FaceFollower, source_choice
from kernels.numpy import warp as np_warp
from kernels.numpy.masks import polygon_mask, ramp as _ramp
from kernels.twins import twin_for
from streamer.media.planes import Planes
from streamer.pipeline.pipeline import FrameState
from streamer.session.session import FrameContext, fusion_mode
from streamer.pipeline.stages.still import StillFaces

if TYPE_CHECKING:  # pragma: no cover
    from engines.faces import Face
    from streamer.session.session import Controls


NOSE_TIP, UPPER_LIP = 1, 0     # MediaPipe mesh landmark ids


@dataclass(frozen=True, slots=True)
class FusionConfig:
    shape_weight: float = 0.4        # at strength 1 the geometry moves this far toward the source's proportions,
                                     # where the session's `Controls.shape` does not say (0: texture only)
    colour_memory: float = 0.85      # weight of the previous frame's live skin statistics (temporal smoothing)
    relight: float = 1.0             # how much of the live low-frequency shading the source takes
    relight_sigma: float = 0.10      # shading scale, fraction of face width
    relight_colour: float = 1.0      # how much of the live skin's low-frequency colour (a*, b*) the source takes at
                                     # that scale: the face's warmth and redness follow the ears and neck around it
    source_contrast: bool = True     # lightness keeps the source's spread (only its mean moves to the live skin's):
                                     # relighting brings the live shading, and scaling the spread would scale the
                                     # skin's fine detail with it (docs/fusion.md, Skin detail)
    erode: float = 0.04              # mask pulled inside the outline, fraction of face width
    feather: float = 0.035           # mask edge softness (Gaussian sigma), fraction of face width
    blend_levels: int = 3            # multi-band levels; 0 = feathered alpha only
    keep_feather: float = 0.012      # softness of the kept mouth/eye edges, fraction of face width
    keep_grow: float = 0.01          # kept regions grown by this, fraction of face width
    yaw_full: float = 30.0           # full effect up to this yaw (degrees) ...
    yaw_zero: float = 50.0           # ... fading to none here
    edge_fade: float = 0.25          # fade out as this fraction of the face width leaves the frame
    stats_step: int = 2              # colour statistics on every n-th pixel
    region_margin: float = 0.12      # planes: the RGB region reaches this fraction of the face width past the
                                     # fused box, so the live samples (and the edits' ROI) fall inside it
    work_px: int = 192               # faces wider than this (frame pixels) take their source, colour, shading and
                                     # seam at this width, the live picture's finer detail laid back at full
                                     # resolution; narrower ones work at full resolution, as all do with 0
                                     # (docs/fusion.md, Working resolution: where more pixels stop showing)
    work_scale_max: float = 0.8      # ... only where that shrinks the face to this fraction or less: closer to 1,
                                     # the steps that stay at full size cost more than the smaller ones save


def smoothstep(e0: float, e1: float, x: float) -> float:
    t = min(1.0, max(0.0, (x - e0) / (e1 - e0)))
    return t * t * (3.0 - 2.0 * t)


def face_weight(face: Face, frame_shape: tuple[int, int], cfg: FusionConfig) -> float:
    """1 for a frontal face well inside the frame, fading to 0 past `yaw_zero` or as it leaves the frame."""
    h, w = frame_shape
    yaw_w = 1.0 - smoothstep(cfg.yaw_full, cfg.yaw_zero, abs(face.pose[0]))
    x0, y0, x1, y1 = face.bbox
    fw = max(x1 - x0, 1.0)
    margin = min(x0, y0, w - x1, h - y1)
    edge_w = smoothstep(-cfg.edge_fade * fw, 0.0, margin)
    return yaw_w * edge_w


def shape_weights(src: SourceFace) -> np.ndarray:
    """Per-landmark share of the source's proportions to take: all above the nose tip, none from the upper
    lip down. The source's landmarks carry its expression too (a smile lifts the cheeks and chin), and the
    lower face is where expression lives, so the live lower face keeps its own shape."""
    y = src.landmarks[:, 1]
    y_nose, y_lip = y[NOSE_TIP], y[UPPER_LIP]
    return np.clip((y_lip - y) / max(y_lip - y_nose, 1e-3), 0.0, 1.0).astype(np.float32)


def shape_share(controls: Controls, cfg: FusionConfig) -> float:
    """How far a face at full weight moves toward the source's proportions: the session's `shape`, else
    the server's `shape_weight`."""
    return float(controls.shape) if controls.shape is not None else cfg.shape_weight


def destination_mesh(live: np.ndarray, src: SourceFace, amount: float) -> np.ndarray:
    """The live landmarks moved `amount` of the way toward the source's proportions (pose kept)."""
    fm = fusion_mesh()
    delta = align(src.landmarks, live)[:, :2] - live[:, :2]
    delta *= shape_weights(src)[:, None]
    delta[fm.oval] = 0.0
    for group in fm.rigid_groups:
        delta[group] = delta[group].mean(axis=0)
    return live[:, :2] + np.float32(amount) * delta


@dataclass(slots=True)
class _Geometry:
    """Everything about one face's fusion that is not pixel work, at half the crop's resolution (the crop
    sides are multiples of 4, so the half grid aligns exactly)."""
    box: tuple[int, int, int, int]   # x0, y0, x1, y1 in the frame
    ids: np.ndarray                  # half-resolution triangle id map
    tab_src: np.ndarray
    tab_live: np.ndarray
    level: int
    alpha: np.ndarray                # half resolution, strength and fades included
    skin: np.ndarray                 # half resolution, where colour statistics and shading are read
    support: np.ndarray              # half resolution
    keep: np.ndarray | None          # half resolution: 1 where the live mouth / eyes are laid back over the blend
    face_w: float                    # face width in frame pixels (scales shading and seams)
    work: tuple[int, int] | None = None   # (h, w) the colour, shading and seam run at; None: the box's full size


def _span(lo: float, hi: float, limit: int) -> tuple[int, int] | None:
    """An integer interval covering [lo, hi] inside [0, limit] whose length is a multiple of 4."""
    a, b = max(0, math.floor(lo)), min(limit, math.ceil(hi))
    n = -(-(b - a) // 4) * 4
    n = min(n, limit - limit % 4)
    if n < 8:
        return None
    a = min(a, limit - n)
    return a, a + n


def _work_levels(levels: int, scale: float) -> int:
    """Multi-band levels at a working scale that keep the bands' transition widths in frame pixels (the
    support ring around the face is sized for `levels` at full resolution)."""
    if levels <= 0:
        return 0
    return max(0, levels - round(math.log2(1.0 / scale)))


class ReferenceRouter:
    """Maps live faces to sources by who they are: each reference is a person's identity embedding (from a
    photo of someone expected in the stream) and the source that person should wear. A face is embedded
    once per track (an identity embedding: only when a track first appears), then the answer is kept."""

    def __init__(self, embedder: Any, references: list[tuple[np.ndarray, str]], threshold: float = 0.6) -> None:
        self.embedder = embedder
        self.references = [(np.asarray(e, np.float32), sid) for e, sid in references]
        self.threshold = threshold

    def route(self, image: np.ndarray, face: Face) -> str | None:
        if not self.references:
            return None
        emb = self.embedder.embed(image, face)
        dists = [float(np.linalg.norm(emb - e)) for e, _ in self.references]
        best = int(np.argmin(dists))
        return self.references[best][1] if dists[best] < self.threshold else None


def chosen_source_id(face: Face, controls: Controls, routed: str | None = None,
                     mapped: Mapping[int, str] | None = None) -> str | None:
    """The session's name for the source a face wears (None: left unchanged): its per-face mapping
    (`mapped`, a `FaceFollower`'s answer for the frame, else `Controls.face_sources`; KEEP leaves it
    alone), else `routed` (a router's answer), else the one source for all (`Controls.source_id`)."""
    face_sources = controls.face_sources if mapped is None else mapped
    return source_choice(face, face_sources, routed if routed is not None else controls.source_id)


class FusionStage:
    """The geometric fusion backend. It runs when the frame's fusion mode (`Controls.fusion`, else
    `default_mode`) is "geometric" or "both"."""

    name = "fusion"

    def __init__(self, config: FusionConfig = FusionConfig(), router: ReferenceRouter | None = None,
                 default_mode: str = "geometric", follower: FaceFollower | None = None,
                 still: StillFaces | None = None) -> None:
        """`follower`: carries per-face mappings over lost and found tracks (shared with the swap stage of
        the same session); without one a mapping holds for its track id only. `still`: a still face on
        the planes path reuses its previous result (streamer/pipeline/stages/still.py); None = always fresh."""
        self.config = config
        self.router = router
        self.follower = follower
        self.still = still
        self.default_mode = default_mode
        self._routes: FIFOCache[int, str | None] = FIFOCache(maxsize=256)   # track id -> source id the router found
        self._colour: FIFOCache[int, tuple[np.ndarray, np.ndarray]] = FIFOCache(maxsize=64)   # tracks come and go
        self._textures: FIFOCache[tuple[str, int], Any] = FIFOCache(maxsize=32)   # device copies of source textures
        self._validity: FIFOCache[tuple[str, int], Any] = FIFOCache(maxsize=32)   # ... and of their validity masks

    # -- source choice -------------------------------------------------------------------------------
    def source_id_for(self, face: Face, controls: Controls, image: Any = None,
                      mapped: Mapping[int, str] | None = None) -> str | None:
        """By track (`mapped`, else `Controls.face_sources`), else by reference identity (the router), else
        the one source for all (`Controls.source_id`)."""
        routed = None
        face_sources = controls.face_sources if mapped is None else mapped
        by_track = face_sources.get(face.track_id) if face.track_id >= 0 else None
        if by_track is None and self.router is not None and face.track_id >= 0 and image is not None:
            if face.track_id not in self._routes:
                frame = image.rgb() if isinstance(image, Planes) else image
                frame = twin_for(frame).host(frame)
                self._routes[face.track_id] = self.router.route(frame, face)
            routed = self._routes[face.track_id]
        return chosen_source_id(face, controls, routed, mapped)

    def source_for(self, face: Face, controls: Controls, sources: Mapping[str, SourceFace], image: Any = None,
                   mapped: Mapping[int, str] | None = None) -> SourceFace | None:
        sid = self.source_id_for(face, controls, image, mapped)
        return sources.get(sid) if sid is not None else None

    # -- per frame -----------------------------------------------------------------------------------
    def __call__(self, state: FrameState, context: FrameContext) -> FrameState:
        controls = context.controls
        still = self.still
        if still is not None:
            still.begin(context.session_id)
        strength = float(min(max(controls.strength, 0.0), 1.0))
        if not controls.enabled or strength <= 0.0 or not state.faces:
            return state
        mode = fusion_mode(controls, self.default_mode)
        if mode == "neural":   # the swap stage alone fuses
            return state
        planes = state.planes
        image = state.image if planes is None else None   # a planes frame is never converted whole here
        frame = planes.rgb if planes is not None else image   # the follower converts only when it embeds
        mapped = self.follower.mapping(state.faces, controls.face_sources, frame) if self.follower is not None else None
        ops = twin_for(planes.y if planes is not None else image)   # the path follows the frame's pixels
        h, w = state.shape
        out = None
        fused = []
        for i, face in enumerate(state.faces):
            name = self.source_id_for(face, controls, planes if planes is not None else image, mapped)
            src = context.sources.get(name) if name is not None else None
            if src is None:
                continue
            weight = strength * face_weight(face, (h, w), self.config)
            if weight <= 1e-3:
                continue
            entry = {"track_id": face.track_id, "source_id": src.id, "source": name, "weight": round(weight, 3)}
            steer = (src.id, entry["weight"], shape_share(controls, self.config), mode, controls.keep_mouth,
                     controls.keep_eyes, (h, w))
            if still is not None and ops.ON_HOST and still.reuse(planes, face, steer):
                fused.append({**entry, "reused": True})
                continue
            geo = self._geometry(face, src, weight, controls, (h, w))
            if geo is None:
                continue
            key = face.track_id if face.track_id >= 0 else -1 - i
            if planes is not None:      # RGB of the face's region alone, written back to the planes later
                x0, y0, x1, y1 = geo.box
                m = self.config.region_margin * geo.face_w + 4
                box = planes.snap(x0 - m, y0 - m, x1 + m, y1 + m)
                region, (ox, oy, _, _) = planes.region(box)
                live = ops.copy(region)
                self._fuse_pixels(ops, region, live, src, geo, key, offset=(ox, oy))
                if still is not None and ops.ON_HOST:   # the delta over the whole box asked for: whatever the fusion wrote in it
                    a, b, c, d = box
                    crop = np.s_[b - oy:d - oy, a - ox:c - ox]
                    still.remember(face, steer, box, box, live[crop], region[crop])
            else:
                if out is None:
                    out = ops.copy(image)
                self._fuse_pixels(ops, out, image, src, geo, key)
            fused.append({**entry, "reused": False})
        if planes is not None and fused:
            planes.keep([f.keep for f in state.faces if f.keep is not None])   # a hand keeps its own pixels
        if out is not None:
            ops.blend.keep_patches(out, image, (f.keep for f in state.faces))   # a hand in front keeps its pixels
            state.image = out
        state.fused = fused
        return state

    def _geometry(self, face: Face, src: SourceFace, weight: float, controls: Controls,
                  frame_shape: tuple[int, int]) -> _Geometry | None:
        cfg = self.config
        h, w = frame_shape
        live = np.asarray(face.landmarks, np.float32)
        dest = destination_mesh(live, src, weight * shape_share(controls, cfg))
        lo = np.minimum(dest.min(axis=0), live[:, :2].min(axis=0))
        hi = np.maximum(dest.max(axis=0), live[:, :2].max(axis=0))
        fw = float(hi[0] - lo[0])
        if fw < 8:
            return None
        fsig = max(0.8, cfg.feather * fw)
        spread = 2 ** max(cfg.blend_levels, 0) + int(2 * fsig) + 2   # how far the blend may reach past the mask
        pad = spread + 4
        sx, sy = _span(lo[0] - pad, hi[0] + pad, w), _span(lo[1] - pad, hi[1] + pad, h)
        if sx is None or sy is None:
            return None
        (x0, x1), (y0, y1) = sx, sy
        hh, ww = (y1 - y0) // 2, (x1 - x0) // 2
        fm = fusion_mesh()
        tris = src.triangles
        area = signed_areas(tris, dest)
        visible = area < -1e-3
        visible[fm.n_tessellation:] = True                 # openings are inside the face: never culled
        order = np.nonzero(visible)[0]
        depth = live[tris[order], 2].mean(axis=1)
        order = order[np.argsort(-depth, kind="stable")]   # far first: near triangles overwrite
        t = tris[order]
        # half-grid pixel (j, i) sits at frame point (x0 + 2j + 0.5, y0 + 2i + 0.5)
        half = (dest - np.array([x0 + 0.5, y0 + 0.5], np.float32)) * np.float32(0.5)
        ids = np_warp.rasterize_triangles((hh, ww), half, t)
        work, fw_work = None, fw
        if 0 < cfg.work_px <= cfg.work_scale_max * fw:   # a face well wider than the working width: pixels at that width
            s = cfg.work_px / fw
            work = (max(8, round((y1 - y0) * s)), max(8, round((x1 - x0) * s)))
            fw_work = fw * work[1] / (x1 - x0)
        # texture level: the smallest copy still at least as large as the face where it is drawn
        level = 0
        tex_w = float(np.ptp(src.landmarks[:, 0]))
        while level + 1 < len(src.levels) and tex_w / 2 ** (level + 1) >= fw_work:
            level += 1
        sf = 2.0 ** level
        src_pts = (src.landmarks[:, :2] + 0.5) / sf - 0.5
        tab_src, tab_live = np_warp.affine_tables([src_pts, live[:, :2]], dest, t)
        # masks, feathered by distance ramps (one linear-time distance transform each); distances in
        # half-grid pixels, so x2 for frame pixels
        loops = mesh.loops()
        covered = (ids >= 0).astype(np.uint8)
        oval = polygon_mask((hh, ww), [half[loops["face_oval"]]]) > 0.5
        core = covered & oval
        d_in = cv2.distanceTransform(core, cv2.DIST_L2, 3) * 2.0
        er = cfg.erode * fw
        alpha = _ramp((d_in - er) / (2.5 * fsig))
        keep = []
        if controls.keep_mouth:
            keep.append(half[loops["lips_inner"]])
        if controls.keep_eyes:
            keep += [half[loops["left_eye"]], half[loops["right_eye"]]]
        keep_live = None
        if keep:
            km = (polygon_mask((hh, ww), keep) > 0.5).astype(np.uint8)
            d_k = cv2.distanceTransform(1 - km, cv2.DIST_L2, 3) * 2.0
            keep_live = 1.0 - _ramp((d_k - cfg.keep_grow * fw) / max(1.0, 2.5 * cfg.keep_feather * fw))
            alpha *= 1.0 - keep_live
        alpha *= np.float32(weight)
        skin_ex = polygon_mask((hh, ww), [half[loops[n]] for n in fm.skin_exclude]) > 0.5
        skin = ((d_in > er) & ~skin_ex).astype(np.float32)
        # support: where the output may differ from the (shape-warped) live crop; 0 well inside the crop
        d_out = cv2.distanceTransform(1 - covered, cv2.DIST_L2, 3) * 2.0
        support = _ramp((spread - d_out) / (0.5 * spread))
        return _Geometry((x0, y0, x1, y1), ids, tab_src, tab_live, level, alpha, skin, support, keep_live, fw, work)

    def _smoothed_stats(self, key: int, stats: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        prev = self._colour.get(key)
        if prev is not None:
            m = self.config.colour_memory
            stats = (m * prev[0] + (1 - m) * stats[0], m * prev[1] + (1 - m) * stats[1])
        self._colour[key] = stats
        return stats

    def _texture(self, ops: ModuleType, src: SourceFace, level: int, like: Any):
        if ops.ON_HOST:
            return src.lab_levels[level]
        key = (src.id, level)
        tex = self._textures.get(key)
        if tex is None:
            tex = self._textures[key] = ops.put(src.lab_levels[level], like)
        return tex

    def _sampled_validity(self, ops: ModuleType, src: SourceFace, level: int, like: Any, map_x, map_y):
        """The source's validity mask (engines/source_mask.py) where the source texture is sampled, or None
        when nothing of it is masked: fusion's weight follows it, so what covered the source's face
        (glasses, a hand) leaves the live face's own skin there."""
        if src.validity is None:
            return None
        tex = src.validity[level]
        if not ops.ON_HOST:
            key = (src.id, level)
            tex = self._validity.get(key)
            if tex is None:
                tex = self._validity[key] = ops.put(src.validity[level][..., None], like)
        v = ops.warp.remap(tex, map_x, map_y)
        return v[..., 0] if v.ndim == 3 else v

    def _fuse_pixels(self, ops: ModuleType, out, image, src: SourceFace, geo: _Geometry, key: int,
                     offset: tuple[int, int] = (0, 0)) -> None:
        """Fuse one face into `out`; `image` is the live picture it samples. Both are the frame, or a
        region of it whose top-left corner sits at `offset` in the frame.

        With a working size (`geo.work`) the source, the colour match, the shading and the multi-band seam
        run there, on the live crop area-averaged to it (bg_w); the result goes back to full size as
        bg + up(change) - A (bg - up(bg_w)), A the effective alpha: where the source covers the face its
        detail is the working size's, everywhere else (kept mouth and eyes, the seam's outer side, the
        support ring) the live picture keeps every full-resolution pixel."""
        cfg = self.config
        ox, oy = offset
        x0, y0, x1, y1 = geo.box
        full = (y1 - y0, x1 - x0)
        work = geo.work or full
        fw = geo.face_w
        W, C, B = ops.warp, ops.color, ops.blend
        ids = ops.put(geo.ids, out)
        maps = W.triangle_maps(ids, [ops.put(geo.tab_src, out), ops.put(geo.tab_live, out)], origin=(x0 + 0.5, y0 + 0.5),
                               identity=[False, True], step=2.0)
        (msx, msy), (mlx, mly) = [(W.resize_to(mx, shape), W.resize_to(my, shape)) for (mx, my), shape in zip(maps, (work, full))]
        fg_lab = W.remap(self._texture(ops, src, geo.level, out), msx, msy)
        valid = self._sampled_validity(ops, src, geo.level, out, msx, msy)   # at the working size
        if ox or oy:                      # in place: fresh crop-sized buffers cost page faults
            mlx -= np.float32(ox)
            mly -= np.float32(oy)
        bg = W.remap(image, mlx, mly)
        if geo.work is None:
            bg_w, sx = bg, 1.0
            bg_lab = C.rgb_to_lab(C.half_size(bg))        # statistics and shading at half resolution
            skin = ops.put(geo.skin, out)
            step = max(1, cfg.stats_step // 2)
        else:
            bg_w, sx = W.area_resize(bg, work), work[1] / full[1]
            bg_lab = C.rgb_to_lab(bg_w * np.float32(1.0 / 255.0))
            skin = W.resize_to(ops.put(geo.skin, out), work)
            step = 1
        try:
            live_stats = tuple(ops.host(v) for v in C.lab_stats(bg_lab, skin, step))
        except ValueError:
            return
        target = self._smoothed_stats(key, live_stats)
        if cfg.source_contrast:
            target = (target[0], np.array([src.skin_stats[1][0], target[1][1], target[1][2]], np.float32))
        fg_lab = C.transfer_stats(fg_lab, src.skin_stats, target)
        if cfg.relight > 0 or cfg.relight_colour > 0:
            fg_lab = C.relight(fg_lab, bg_lab, skin, sigma=cfg.relight_sigma * fw * sx, amount=cfg.relight,
                               colour=cfg.relight_colour)
        fg_rgb = C.lab_to_rgb(fg_lab)
        weight_h = geo.support if geo.keep is None else geo.support * (1.0 - geo.keep)
        if geo.work is None:
            alpha = W.resize_to(ops.put(geo.alpha, out), full)
            if valid is not None:
                alpha = alpha * valid
            delta = B.multiband_delta(fg_rgb, bg, alpha, cfg.blend_levels)
            weight = W.resize_to(ops.put(weight_h, out), full)
            res = delta * weight[..., None] + bg
        else:
            alpha = W.resize_to(ops.put(geo.alpha, out), work)
            a_half = ops.put(geo.alpha * weight_h, out)
            if valid is not None:
                alpha = alpha * valid
                a_half = a_half * W.resize_to(valid, geo.alpha.shape)
            delta = B.multiband_delta(fg_rgb, bg_w, alpha, _work_levels(cfg.blend_levels, sx))
            delta *= W.resize_to(ops.put(weight_h, out), work)[..., None]
            res = B.detail_blend(bg, bg_w, delta, a_half)   # uint8; A from the half grid
        x0, y0, x1, y1 = x0 - ox, y0 - oy, x1 - ox, y1 - oy
        crop = out[y0:y1, x0:x1]          # what earlier faces already made of this box
        inside = W.resize_to(ops.put(geo.support, out), full) > 0
        B.write_where(crop, res, inside)      # in place, where inside

    def close(self) -> None:
        self._routes.clear()
        self._colour.clear()
        if self.still is not None:
            self.still.clear()
        self._textures.clear()
        self._validity.clear()
