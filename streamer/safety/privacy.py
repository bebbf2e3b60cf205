"""Session data is purged when a session ends: source faces, embeddings, prompt condition, controls.

Nothing a client sent (source images, frames) is written to disk by the safety layer; recording is
the file sink's job and only when explicitly enabled. Call `purge_session` from the session's close path.
"""

from __future__ import annotations

from typing import Any, Callable

from streamer.session import Controls


def purge_session(session: Any, audit: Callable[..., None] | None = None) -> dict[str, int]:
    """Drop everything the session holds about a face or a prompt; returns what was dropped."""
    dropped = {"sources": len(session.sources)}
    for value in list(session.sources.values()):
        if isinstance(value, dict):
            value.clear()
    session.sources.clear()
    session.condition = None
    session._controls = Controls()          # atomically back to defaults: no prompt, no source
    session.closed.set()
    if audit is not None:
        audit("session_purged", session=session.id, **dropped)
    return dropped
