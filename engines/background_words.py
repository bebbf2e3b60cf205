"""Background requests inside a prompt ("blur the background", "背景虚化", "green screen background",
"replace the background with my picture"), read by a small term table: the prompt heads are trained for
face edits and are not retrained for this. A clause the table matches becomes a background request and
leaves the prompt; the other clauses go on to the face edits as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engines.background import BackgroundError, BackgroundSpec, parse_color

# what a clause asks for -> the words that say it (case-insensitive regular expressions, several languages)
TERMS: dict[str, tuple[str, ...]] = {
    "blur": (r"\bblur\w*\b.*\b(background|backdrop|room)\b", r"\b(background|backdrop)\b.*\bblur", r"\bbokeh\b",
             r"背景虚化", r"虚化背景", r"模糊背景", r"背景模糊", r"背景.*ぼか", r"배경.*흐리",
             r"desenfoc\w*.*fondo", r"fondo.*desenfocado", r"fond flou", r"flou\w*.*(fond|arrière-plan)",
             r"hintergrund.*(unscharf|verschwommen|weichzeichn)", r"размы\w*.*фон", r"фон.*размыт"),
    "green": (r"\bgreen ?screen\b", r"\bchroma ?key\b", r"绿幕", r"綠幕", r"绿色背景", r"グリーンバック", r"グリーンスクリーン",
              r"fondo verde", r"fond vert", r"grüner hintergrund", r"зел[её]ный фон"),
    "blue": (r"\bblue ?screen\b", r"蓝幕", r"蓝色背景", r"ブルーバック", r"fondo azul", r"fond bleu", r"blauer hintergrund"),
    "image": (r"\breplace (the |my )?(background|backdrop)\b", r"\bchange (the |my )?(background|backdrop) to\b",
              r"\b(my|the) (picture|photo|image) (as|for) (the |my )?background\b", r"\bbackground (of|with) my (picture|photo|image)\b",
              r"背景换成", r"换背景", r"换个背景", r"背景.*(変え|置き換え)", r"remplace\w* (le|l'arrière-plan|l’arrière-plan) ?fond",
              r"cambia\w* (el )?fondo", r"hintergrund (ersetzen|austauschen|ändern)"),
    "none": (r"\b(keep|original|real|normal|my own) (the )?(background|room)\b", r"\bno background (effect|blur|change)\b",
             r"\b(remove|turn off|stop) the background (blur|effect|colou?r|picture)\b", r"背景不变", r"原背景", r"元の背景"),
}
_COLOUR = re.compile(r"\b(?:an? |the )?([a-z]+|#[0-9a-f]{3,8}) (?:background|backdrop)\b|"
                     r"\b(?:background|backdrop) (?:colou?r )?(?:to |in |of )?([a-z]+|#[0-9a-f]{3,8})\b", re.IGNORECASE)
_COMPILED = {action: tuple(re.compile(p, re.IGNORECASE) for p in patterns) for action, patterns in TERMS.items()}
_CLAUSES = re.compile(r"[,;，、；。!！?？\n]+")
LATEST_PICTURE = ""      # an image request's id before it is resolved: the session's latest uploaded picture


@dataclass(frozen=True, slots=True)
class BackgroundWords:
    """What a prompt asked of the background: `spec` (None: back to the room as it is; an image request's
    image_id is LATEST_PICTURE until the caller picks one), the clause that asked, and `rest`, the prompt
    without the background clauses."""

    spec: BackgroundSpec | None
    clause: str
    rest: str


def _action(clause: str) -> BackgroundSpec | None | str:
    """A clause's background request, "" when it asks none."""
    for action in ("none", "image", "blur", "green", "blue"):
        if any(p.search(clause) for p in _COMPILED[action]):
            if action == "none":
                return None
            if action == "blur":
                return BackgroundSpec(mode="blur")
            if action == "image":
                return BackgroundSpec(mode="image", image_id=LATEST_PICTURE)
            return BackgroundSpec(mode="color", color=(0, 255, 0) if action == "green" else (0, 0, 255))
    m = _COLOUR.search(clause)
    if m:
        word = m.group(1) or m.group(2)
        try:
            return BackgroundSpec(mode="color", color=parse_color(word))
        except BackgroundError:
            return ""
    return ""


def read_background(text: str) -> BackgroundWords | None:
    """The prompt's background request (the last clause that asks one wins), or None when it asks none."""
    clauses = [c.strip() for c in _CLAUSES.split(text) if c.strip()]
    found: tuple[BackgroundSpec | None, str] | None = None
    rest = []
    for clause in clauses:
        action = _action(clause)
        if action == "":
            rest.append(clause)
        else:
            found = (action, clause)
    if found is None:
        return None
    return BackgroundWords(found[0], found[1], ", ".join(rest))
