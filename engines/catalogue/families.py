"""What a catalogue entry says about running its file: the signature a file must have (to recognise a
user's own file, or to refuse a file that is not what its name claims) and the preprocessing (crop
template and size, colour order, value range, tensor layout) turned into the two conversions every
runner needs: crops -> network input, network output -> RGB 0..255.

The enhancer and parser runners use this; the swapper keeps its own cards (engines/swappers/cards.py),
which a test holds equal to the catalogue's swapper entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engines.align import CropTemplate
from engines.catalogue.entries import Catalogue, Entry, load
from engines.swappers.cards import Signature, Tensor, template


class FamilyRefused(ValueError):
    """A file that does not fit the family it is brought as, or no family at all."""


@dataclass(frozen=True, slots=True)
class Prep:
    """How a family's network is fed and read."""

    template: str
    size: int
    bgr: bool
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    output_range: tuple[float, float] | None
    nhwc: bool = False

    @property
    def crop(self) -> CropTemplate:
        return template(self.template, self.size)


def prep(entry: Entry) -> Prep:
    p = entry.preprocessing
    rng = p.get("output_range")
    return Prep(template=p["template"], size=int(p["size"]), bgr=p.get("colour", "RGB").upper() == "BGR",
                mean=tuple(float(v) for v in p["mean"]), std=tuple(float(v) for v in p["std"]),
                output_range=(float(rng[0]), float(rng[1])) if rng else None, nhwc=p.get("layout") == "NHWC")


def to_network(crops: np.ndarray, p: Prep) -> np.ndarray:
    """N x S x S x 3 uint8 RGB -> the network's float32 input (its colour order, range and layout):
    x = (rgb / 255 - mean) / std per channel, as one scale and one offset per channel, in place."""
    crops = np.asarray(crops)
    scale = (1.0 / (255.0 * np.asarray(p.std, np.float32))).astype(np.float32)
    offset = (-np.asarray(p.mean, np.float32) / np.asarray(p.std, np.float32)).astype(np.float32)
    if p.bgr:
        scale, offset = scale[::-1], offset[::-1]
    if p.nhwc:
        x = crops[..., ::-1].astype(np.float32) if p.bgr else crops.astype(np.float32)
        x *= scale[::-1] if p.bgr else scale
        x += offset[::-1] if p.bgr else offset
        return np.ascontiguousarray(x)
    import cv2

    n, h, w, _ = crops.shape
    x = np.empty((n, 3, h, w), np.float32)
    for i in range(n):                       # planes split in C, then widened into the float32 layout
        planes = cv2.split(np.ascontiguousarray(crops[i]))
        for c in range(3):
            x[i, c] = planes[2 - c] if p.bgr else planes[c]
    x *= scale.reshape(1, 3, 1, 1)[:, ::-1] if p.bgr else scale.reshape(1, 3, 1, 1)
    x += offset.reshape(1, 3, 1, 1)[:, ::-1] if p.bgr else offset.reshape(1, 3, 1, 1)
    return x


def image_from_network(y: np.ndarray, p: Prep) -> np.ndarray:
    """An image-valued output (N x 3 x S x S, or NHWC) -> N x S x S x 3 float32 RGB in [0, 255]."""
    import cv2

    lo, hi = p.output_range or (0.0, 1.0)
    y = np.array(y, np.float32, copy=True)
    np.clip(y, lo, hi, out=y)
    y -= np.float32(lo)
    y *= np.float32(255.0 / (hi - lo))
    if p.nhwc:
        return np.ascontiguousarray(y[..., ::-1]) if p.bgr else y
    order = (2, 1, 0) if p.bgr else (0, 1, 2)
    return np.stack([cv2.merge([y[i, c] for c in order]) for i in range(len(y))])   # planes joined in C


def _tensors(specs) -> tuple[Tensor, ...]:
    return tuple(Tensor(s.name, tuple(s.shape)) for s in specs)


def _fits(want: Sequence[Tensor], got: Sequence[tuple[str, tuple]], allow_extra: bool) -> bool:
    if len(got) < len(want) or (not allow_extra and len(got) != len(want)):
        return False
    if all(t.name is not None for t in want):
        table = dict(got)
        return all(t.name in table and t.fits(t.name, table[t.name]) for t in want)
    return all(t.fits(n, s) for t, (n, s) in zip(want, got))


def fits(entry: Entry, sig: Signature) -> bool:
    """The file's inputs are the entry's; its outputs begin with the entry's (a parser exported with its
    auxiliary heads still attached has more outputs; the first is the one read)."""
    return _fits(_tensors(entry.inputs), sig.inputs, False) and \
        _fits(_tensors(entry.outputs), sig.outputs[:len(entry.outputs)], False)


def signature_text(entry: Entry) -> str:
    return (", ".join(t.describe() for t in _tensors(entry.inputs)) + " -> "
            + ", ".join(t.describe() for t in _tensors(entry.outputs)))


def recognise(sig: Signature, kind: str, *, file_name: str = "", name: str | None = None,
              catalogue: Catalogue | None = None) -> Entry:
    """The catalogue entry of `kind` a file is: the one named (which it must fit), else the one whose
    signature it has; among several with one signature, the one its file name starts with, else the
    first when they are all fed alike (their preprocessing is the same), else refused."""
    cat = catalogue or load()
    pool = [e for e in cat.entries if e.kind == kind]
    label = file_name or "the file"
    if name is not None:
        chosen = next((e for e in pool if e.name == name), None)
        if chosen is None:
            raise FamilyRefused(f"unknown {kind} {name!r}; catalogue {kind}s: {', '.join(e.name for e in pool)}")
        if not fits(chosen, sig):
            raise FamilyRefused(f"{label} is not a {chosen.name} model: it has {sig.describe()}; "
                                f"{chosen.name} has {signature_text(chosen)}")
        return chosen
    found = [e for e in pool if fits(e, sig)]
    if not found:
        expected = "; ".join(f"{e.name}: {signature_text(e)}" for e in pool)
        raise FamilyRefused(f"{label} is no known {kind}: it has {sig.describe()}; expected one of {expected}")
    if len(found) == 1:
        return found[0]
    stem = file_name.lower()
    named = [e for e in found if stem.startswith(e.file.rsplit(".", 1)[0].lower()) or stem.startswith(e.card.lower())]
    if len(named) >= 1:
        return max(named, key=lambda e: len(e.file))
    if len({prep(e) for e in found}) == 1:
        return found[0]
    raise FamilyRefused(f"{label} fits several {kind}s ({', '.join(e.name for e in found)}) fed differently; "
                        f"name it by its catalogue name")
