"""The named colours a makeup edit can be painted in: one palette that the prompt's colour words, the
control protocol (`set_params.colours`), the page's swatches and the renderer all read.

A colour is a parameter of an edit (lip_tint, blush, eye_makeup, eyeliner, brow_tint), not an edit of its own: "coral
lipstick" is lip_tint with the colour coral. The values are sRGB, chosen as the shade a cosmetics
swatch of that name shows; the renderer moves the region toward it at the colour level, so the skin's
fine texture and shading stay (kernels/numpy/edits.py). Their CIELAB hues are what `livefuse eval
edits` checks the output against.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Mapping

RGB = tuple[int, int, int]

PALETTE: Mapping[str, RGB] = MappingProxyType({
    "red": (200, 16, 46),
    "rose": (185, 45, 75),
    "pink": (224, 112, 138),
    "hot pink": (224, 33, 138),
    "nude": (192, 138, 120),
    "coral": (240, 113, 90),
    "peach": (242, 162, 126),
    "orange": (232, 96, 44),
    "brick": (168, 67, 47),
    "dusty rose": (176, 104, 106),
    "berry": (142, 35, 68),
    "plum": (110, 42, 79),
    "wine": (123, 30, 46),
    "mauve": (168, 106, 133),
    "purple": (107, 63, 160),
    "brown": (122, 74, 54),
    "bronze": (156, 106, 60),
    "gold": (201, 160, 74),
    "black": (42, 34, 38),
    "blue": (61, 95, 168),
    "green": (62, 122, 78),
})

_HEX = re.compile(r"#?([0-9a-fA-F]{6})")


def resolve(value: str) -> RGB:
    """A palette name ("coral") or an sRGB hex ("#f0715a") -> (r, g, b); ValueError that lists the names."""
    text = str(value).strip().lower()
    if text in PALETTE:
        return PALETTE[text]
    m = _HEX.fullmatch(text)
    if m:
        h = m.group(1)
        return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)
    raise ValueError(f"unknown colour {str(value)[:40]!r}: give #rrggbb or one of {', '.join(PALETTE)}")


def hex_of(rgb: RGB) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)
