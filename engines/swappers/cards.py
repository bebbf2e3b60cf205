"""Swapper and embedder model cards, one declarative table: what each family's ONNX file looks like (input
and output names and shapes) and what it expects (crop size, alignment template, value range, colour
order, how the source vector is made). A user's file is recognised by its signature; an unknown or
mismatched file is refused with a message naming what was expected.

Facts about the families come from the public projects that run them (InsightFace, FaceFusion,
Deep-Live-Cam); the code is ours. Template points are the 5-point layouts (eye centres, nose tip, mouth
corners) in crop pixels at the card's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from engines.align import ARCFACE_112, CropTemplate
from engines.cards import file_sha256

# 5-point layouts, in pixels of a 112 (v1, v2) or 128 (arcface_128) square. v2 is engines.align's ArcFace
# template (the one InsightFace's recognition models are trained on); v1 the older layout SimSwap and GHOST use
_ARCFACE_112_V1 = ((39.7300, 51.1380), (72.2700, 51.1380), (56.0000, 68.4930), (42.4630, 87.0100), (69.5370, 87.0100))
_ARCFACE_112_V2 = tuple((float(x), float(y)) for x, y in ARCFACE_112.points)
_ARCFACE_128 = tuple((x + 8.0, y) for x, y in _ARCFACE_112_V2)   # InsightFace's norm_crop at 128: v2 shifted 8 px
# ffhq_512: the face-restoration crop (facexlib's FaceRestoreHelper template at 512, which GFPGAN, CodeFormer,
# RestoreFormer++ and GPEN-512 are trained on: the whole face and some hair); dfl_whole_face: DeepFaceLab's
# whole-face crop (XSeg), as FaceFusion writes it in units of the crop side
_FFHQ_512 = ((192.98138, 239.94708), (318.90277, 240.19360), (256.63416, 314.01935), (201.26117, 371.41043),
             (313.08905, 371.15118))
_DFL_WHOLE_FACE = ((0.35342266, 0.39285716), (0.62797622, 0.39285716), (0.48660713, 0.54017860),
                   (0.38839287, 0.68750011), (0.59821427, 0.68750011))
LAYOUTS: dict[str, tuple[tuple[tuple[float, float], ...], float]] = {
    "arcface_112_v1": (_ARCFACE_112_V1, 112.0),
    "arcface_112_v2": (_ARCFACE_112_V2, 112.0),
    "arcface_128": (_ARCFACE_128, 128.0),
    "ffhq_512": (_FFHQ_512, 512.0),
    "dfl_whole_face": (_DFL_WHOLE_FACE, 1.0),
}

SourceVector = Literal["emap", "normalised"]
Role = Literal["swapper", "embedder"]


class SwapperRefused(ValueError):
    """A model file that cannot be used: missing, unreadable, of an unknown signature, or not pinned hash."""


def template(layout: str, size: int) -> CropTemplate:
    """The named 5-point layout scaled to a `size` px crop."""
    pts, base = LAYOUTS[layout]
    return CropTemplate(f"{layout}@{size}", size, (np.asarray(pts, np.float32) * np.float32(size / base)))


@dataclass(frozen=True, slots=True)
class Tensor:
    """One graph input or output: its name (None = any) and shape; a None dim (or the batch dim) is free."""

    name: str | None
    shape: tuple[int | None, ...]

    def fits(self, name: str, shape: Sequence[int | str | None]) -> bool:
        if self.name is not None and name != self.name:
            return False
        if len(shape) != len(self.shape):
            return False
        for i, (want, got) in enumerate(zip(self.shape, shape)):
            fixed = isinstance(got, int) and got > 0
            if i == 0 and (not fixed or got == 1):   # batch: 1 or symbolic
                continue
            if want is not None and (not fixed or got != want):
                return False
        return True

    def describe(self) -> str:
        dims = "x".join("N" if i == 0 else ("?" if d is None else str(d)) for i, d in enumerate(self.shape))
        return f"{self.name or '*'} {dims}"


@dataclass(frozen=True, slots=True)
class SwapCard:
    """One family of swap (or embedding) networks, as a user's file must look and be fed."""

    name: str
    role: Role
    inputs: tuple[Tensor, ...]          # matched by name where named, else in order
    outputs: tuple[Tensor, ...]
    size: int                           # crop side, px
    layout: str                         # key of LAYOUTS
    mean: tuple[float, float, float]    # network input = (rgb / 255 - mean) / std, per channel
    std: tuple[float, float, float]
    output_range: tuple[float, float] = (0.0, 1.0)   # output value that means black, white
    bgr: bool = False                   # the network's channel order
    source: SourceVector = "normalised"  # swappers: how the embedder's vector becomes the `source` input
    licence: str = ""
    known_files: str = ""
    notes: str = ""

    @property
    def template(self) -> CropTemplate:
        return template(self.layout, self.size)

    def signature(self) -> str:
        return (", ".join(t.describe() for t in self.inputs) + " -> " + ", ".join(t.describe() for t in self.outputs))


_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
_HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
_ZERO = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))

CARDS: tuple[SwapCard, ...] = (
    SwapCard("inswapper_128", "swapper",
             inputs=(Tensor("target", (1, 3, 128, 128)), Tensor("source", (1, 512))),
             outputs=(Tensor("output", (1, 3, 128, 128)),),
             size=128, layout="arcface_128", mean=_ZERO[0], std=_ZERO[1], source="emap",
             licence="InsightFace: non-commercial research use only",
             known_files="inswapper_128.onnx, inswapper_128_fp16.onnx (InsightFace; FaceFusion, Deep-Live-Cam)",
             notes="source = normalise(normalise(arcface) @ emap); emap is the file's last 512x512 initializer"),
    SwapCard("hyperswap_256", "swapper",
             inputs=(Tensor("source", (1, 512)), Tensor("target", (1, 3, 256, 256))),
             outputs=(Tensor("output", (1, 3, 256, 256)), Tensor("mask", (1, 1, 256, 256))),
             size=256, layout="arcface_128", mean=_HALF[0], std=_HALF[1], output_range=(-1.0, 1.0),
             licence="FaceFusion: ResearchRAIL-MS (research, non-commercial)",
             known_files="hyperswap_1a_256.onnx, hyperswap_1b_256.onnx, hyperswap_1c_256.onnx (FaceFusion 3.3+)",
             notes="its own mask output is multiplied into the paste-back mask"),
    SwapCard("simswap_256", "swapper",
             inputs=(Tensor("target", (1, 3, 256, 256)), Tensor("source", (1, 512))),
             outputs=(Tensor("output", (1, 3, 256, 256)),),
             size=256, layout="arcface_112_v1", mean=_IMAGENET[0], std=_IMAGENET[1],
             licence="SimSwap: non-commercial research use only",
             known_files="simswap_256.onnx (FaceFusion)",
             notes="pair it with the embedder it was trained with (FaceFusion converts ArcFace first)"),
    SwapCard("ghost_256", "swapper",
             inputs=(Tensor("target", (1, 3, 256, 256)), Tensor("source", (1, 512))),
             outputs=(Tensor("output", (1, 3, 256, 256)),),
             size=256, layout="arcface_112_v1", mean=_HALF[0], std=_HALF[1], output_range=(-1.0, 1.0),
             licence="GHOST (ai-forever): Apache-2.0 code; check the weights' terms",
             known_files="ghost_1_256.onnx, ghost_2_256.onnx, ghost_3_256.onnx (FaceFusion)",
             notes="same signature as simswap_256: chosen by file name or --swapper-card"),
    SwapCard("simswap_512", "swapper",
             inputs=(Tensor("target", (1, 3, 512, 512)), Tensor("source", (1, 512))),
             outputs=(Tensor("output", (1, 3, 512, 512)),),
             size=512, layout="arcface_112_v1", mean=_ZERO[0], std=_ZERO[1],
             licence="SimSwap: non-commercial research use only",
             known_files="simswap_unofficial_512.onnx (FaceFusion)"),
    SwapCard("arcface_112", "embedder",
             inputs=(Tensor(None, (1, 3, 112, 112)),), outputs=(Tensor(None, (1, 512)),),
             size=112, layout="arcface_112_v2", mean=_HALF[0], std=(0.5, 0.5, 0.5),
             licence="InsightFace models: non-commercial research use only",
             known_files="w600k_r50.onnx (InsightFace buffalo_l), arcface_w600k_r50.onnx (FaceFusion)",
             notes="input (rgb - 127.5) / 127.5; the raw 512-d vector is L2-normalised here"),
)
BY_NAME: dict[str, SwapCard] = {c.name: c for c in CARDS}
SWAPPER_NAMES = tuple(c.name for c in CARDS if c.role == "swapper")


@dataclass(frozen=True, slots=True)
class Signature:
    """A file's graph inputs and outputs as (name, shape) pairs; symbolic dims as strings or None."""

    inputs: tuple[tuple[str, tuple], ...]
    outputs: tuple[tuple[str, tuple], ...]

    def describe(self) -> str:
        def one(name: str, shape: tuple) -> str:
            return f"{name} " + "x".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in shape)

        return ", ".join(one(*i) for i in self.inputs) + " -> " + ", ".join(one(*o) for o in self.outputs)


def _fits(want: Sequence[Tensor], got: Sequence[tuple[str, tuple]]) -> bool:
    if len(want) != len(got):
        return False
    if all(t.name is not None for t in want):
        table = dict(got)
        return all(t.name in table and t.fits(t.name, table[t.name]) for t in want)
    return all(t.fits(n, s) for t, (n, s) in zip(want, got))


def matches(card: SwapCard, sig: Signature) -> bool:
    return _fits(card.inputs, sig.inputs) and _fits(card.outputs, sig.outputs)


def check_file(path: str | Path, sha256: str | None = None) -> Path:
    """The file as a Path, refused when it is missing or (with a pin) its sha256 differs."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise SwapperRefused(f"{p}: no such model file")
    if sha256:
        got = file_sha256(p)
        if got != sha256.lower():
            raise SwapperRefused(f"{p.name}: sha256 {got}, but it was pinned to {sha256.lower()}")
    return p


def recognise(sig: Signature, role: Role, *, file_name: str = "", card: str | None = None) -> SwapCard:
    """The card whose signature the file has. Several cards may share a signature (SimSwap and GHOST at
    256): then the one named by `card`, else the one whose name the file name starts with, else refused."""
    pool = [c for c in CARDS if c.role == role]
    if card is not None:
        chosen = BY_NAME.get(card)
        if chosen is None or chosen.role != role:
            raise SwapperRefused(f"unknown {role} card {card!r}; choose from {', '.join(c.name for c in pool)}")
        if not matches(chosen, sig):
            raise SwapperRefused(f"{file_name or 'the file'} is not a {chosen.name} model: it has "
                                 f"{sig.describe()}; {chosen.name} has {chosen.signature()}")
        return chosen
    found = [c for c in pool if matches(c, sig)]
    if not found:
        expected = "; ".join(f"{c.name}: {c.signature()}" for c in pool)
        raise SwapperRefused(f"{file_name or 'the file'} is no known {role}: it has {sig.describe()}; "
                             f"expected one of {expected}")
    if len(found) > 1:
        stem = file_name.lower()
        named = [c for c in found if stem.startswith(c.name.split("_")[0])]
        if len(named) != 1:
            raise SwapperRefused(f"{file_name or 'the file'} fits several cards ({', '.join(c.name for c in found)}); "
                                 "name one with --swapper-card")
        return named[0]
    return found[0]
