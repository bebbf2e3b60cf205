"""The named face edits: the one list the prompt head, the renderer, the protocol and the page share.

Each edit is a control in [low, high] with 0 = no change; the sign is the direction. The page builds its
sliders from this list (served as `GET /edits`), the prompt head reads one output per name, and the
renderer plans geometry edits as a warp and appearance edits as masked colour work.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, Literal, Mapping

from engines.colours import PALETTE, hex_of

EditKind = Literal["geometry", "appearance"]


@dataclass(frozen=True, slots=True)
class EditSpec:
    """One edit: its wire name, what a person reads, and what each end of its range does."""

    name: str          # the key in set_params.edits, the prompt head's output, the renderer's control
    label: str         # the slider's caption
    kind: EditKind     # geometry: a warp of the face; appearance: colour or texture inside a face region
    minus: str         # what `low` does, in a word or two
    plus: str          # what `high` does
    help: str          # what the renderer does, both ways
    low: float = -1.0
    high: float = 1.0
    colour: str | None = None   # makeup painted in a colour: the palette name it takes by default
                                # (engines/colours.py); a prompt's colour word or set_params.colours changes it

    def clip(self, value: float) -> float:
        return min(self.high, max(self.low, value))


EDIT_SPECS: tuple[EditSpec, ...] = (
    EditSpec("smile", "Smile", "geometry", "frown", "smile", "mouth corners up and out (< 0: down, a sadder mouth)"),
    EditSpec("eye_size", "Eye size", "geometry", "smaller", "larger", "local zoom centred on each eye (< 0: smaller eyes)"),
    EditSpec("face_slim", "Face slim", "geometry", "fuller", "slimmer", "jaw line pulled toward the face's midline (< 0: fuller face)"),
    EditSpec("nose_width", "Nose width", "geometry", "narrower", "wider", "nose wings pushed apart (> 0) or together (< 0)"),
    EditSpec("brow_raise", "Brows", "geometry", "lower", "raise", "eyebrows lifted (< 0: lowered)"),
    EditSpec("lip_fullness", "Fuller lips", "geometry", "thinner", "fuller",
             "each lip's outer edge moved out, the mouth's opening and the teeth kept (< 0: thinner lips)"),
    EditSpec("chin", "Chin", "geometry", "shorter", "longer",
             "the chin drawn down and to a point, a V-line (< 0: a shorter, rounder chin)"),
    EditSpec("nose_length", "Nose length", "geometry", "shorter", "longer",
             "the nose tip moved down along the face (< 0: up, a shorter nose)"),
    EditSpec("forehead", "Forehead", "geometry", "shorter", "taller",
             "the forehead's top and the hairline above it moved up the face (< 0: down, a shorter forehead)"),
    EditSpec("eye_contact", "Eye contact", "geometry", "as filmed", "at the camera",
             "each iris moved to where it sits in a look into the lens, the lids kept (0: the eyes as filmed)", low=0.0),
    EditSpec("skin_smooth", "Smooth skin", "appearance", "sharper", "smoother",
             "edge-preserving smoothing of the skin by a guided filter (< 0: sharpened texture)"),
    EditSpec("even_tone", "Even tone", "appearance", "as filmed", "even",
             "the skin's redness and blotches turned to the colour of the skin around them, its light and texture kept",
             low=0.0),
    EditSpec("skin_warmth", "Skin warmth", "appearance", "cooler", "warmer", "skin toward red/yellow (< 0: cooler, bluer)"),
    EditSpec("brightness", "Brightness", "appearance", "darker", "brighter", "face lifted toward white (< 0: darker)"),
    EditSpec("skin_glow", "Glow", "appearance", "matte", "dewy",
             "highlighter on the cheekbones, the nose's bridge, the forehead and the chin (< 0: matte, shine taken off the skin)"),
    EditSpec("tan", "Tan", "appearance", "paler", "tanned",
             "skin darker and golder together, as skin tans: blue absorbed most (< 0: paler, less golden)"),
    EditSpec("lip_tint", "Lipstick", "appearance", "paler", "tinted",
             "lips toward the lipstick's colour (< 0: paler, nude)", colour="rose"),
    EditSpec("lip_gloss", "Lip gloss", "appearance", "matte", "glossy",
             "a wet highlight along the lips' middle (< 0: matte, the lips' own shine taken off)"),
    EditSpec("blush", "Blush", "appearance", "less", "more", "the blush's colour on the cheeks (< 0: less red)", colour="pink"),
    EditSpec("contour", "Contour", "appearance", "less", "more", "shading under the cheekbones (< 0: lighter hollows)"),
    EditSpec("eye_makeup", "Eyeshadow", "appearance", "lighter", "more",
             "the lids' shadow in its colour, up to the crease, a light and a dark lid darkened alike (< 0: lighter lids)",
             colour="black"),
    EditSpec("eyeliner", "Eyeliner", "appearance", "none", "winged",
             "a soft winged line along each upper lash line in its colour, thin at the inner corner", low=0.0, colour="black"),
    EditSpec("brow_tint", "Brow fill", "appearance", "lighter", "filled in",
             "brows filled in with their shade, a little past their edges (< 0: lighter brows)", colour="brown"),
    EditSpec("saturation", "Saturation", "appearance", "muted", "vivid", "colour of the face (< 0: toward grey)"),
)

EDIT_NAMES: tuple[str, ...] = tuple(s.name for s in EDIT_SPECS)
COLOURED: tuple[str, ...] = tuple(s.name for s in EDIT_SPECS if s.colour)
GEOMETRY: tuple[str, ...] = tuple(s.name for s in EDIT_SPECS if s.kind == "geometry")
APPEARANCE: tuple[str, ...] = tuple(s.name for s in EDIT_SPECS if s.kind == "appearance")
SPECS_BY_NAME: Mapping[str, EditSpec] = MappingProxyType({s.name: s for s in EDIT_SPECS})


def vocabulary_json() -> list[dict[str, Any]]:
    """The list as the page reads it: one object per edit, in slider order; a coloured edit also carries
    its default colour as hex (the swatch)."""
    return [asdict(s) | ({"colour_hex": hex_of(PALETTE[s.colour])} if s.colour else {}) for s in EDIT_SPECS]
