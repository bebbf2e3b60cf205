"""Session data is purged when a session ends: source faces, embeddings, controls (the prompt among them).

Nothing a client sent (source images, frames) is written to disk by the safety layer; recording is
the file sink's job and only when explicitly enabled. Call `purge_session` from the session's close path.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

from streamer.session.session import Controls


def purge_session(session: Any, audit: Callable[..., None] | None = None) -> dict[str, int]:
    """Drop everything the session holds about a face or a prompt; returns what was dropped."""
    dropped = {"sources": session.clear_sources()}
    defaults = Controls()
    session.update(**{f.name: getattr(defaults, f.name) for f in fields(Controls)})  # one atomic reset
    session.closed.set()
    if audit is not None:
        audit("session_purged", session=session.id, **dropped)
    return dropped
