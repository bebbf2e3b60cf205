"""A prompt's background words (engines.background_words: "blur the background", "背景虚化", "green
screen", "replace the background with ...") set the session's background; the rest of the prompt goes to
the prompt gate for the face edits as before. A picture asked for by words is the session's latest uploaded
one; with none uploaded the request is refused, saying how to add one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from engines.background_words import LATEST_PICTURE, read_background
from engines.prompt.language import MAX_PROMPT_CHARS
from streamer.session.session import Session

NO_PICTURE = ("No background picture in this session yet: upload one (the page's Background control, "
              "or POST /sessions/{id}/background), then ask again.")


def set_background_prompt(session: Session, text: str, set_prompt: Callable[[Session, str], dict[str, Any]],
                          audit: Callable[..., None]) -> dict[str, Any]:
    """`set_prompt` (the gate) for what is not about the background; the reply gains `background` (what
    the session's background is now) when the prompt asked for one."""
    words = read_background(text) if len(text) <= 2000 else None
    if words is None:
        return set_prompt(session, text)
    spec = words.spec
    if spec is not None and spec.mode == "image" and spec.image_id == LATEST_PICTURE:
        pictures = list(session.backgrounds)
        if not pictures:
            audit("background_prompt", session=session.id, clause=words.clause[:200], refused="no_picture")
            session.notify({"type": "prompt_refused", "text": text[:MAX_PROMPT_CHARS], "reason": NO_PICTURE,
                            "category": "background", "clause": words.clause, "method": "term"})
            return {"allowed": False, "reason": NO_PICTURE, "category": "background", "clause": words.clause,
                    "method": "term", "prompt": session.controls.prompt}
        spec = replace(spec, image_id=pictures[-1])
    session.update(background=spec)
    shown = spec.to_json() if spec is not None else {"mode": "none"}
    audit("background_prompt", session=session.id, clause=words.clause[:200], background=shown)
    if words.rest:
        out = dict(set_prompt(session, words.rest))
    else:
        out = {"allowed": True, "understood": True, "prompt": session.controls.prompt}
    out["background"] = shown
    return out
