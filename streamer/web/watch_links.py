"""Watch links: one address per browser tab that follows the tab's current session.

A session id changes on every Stop / Start (a new peer connection is a new session), so a watch page
(an OBS browser source) pointed at a session goes dark for good when the camera restarts. A watch link
(`/watch/w-…`) stays: the page asks for one once per tab (`POST /sessions/watch`), names it in every offer
(`{"watch": id}`), and the link then points at that session until the next one. WHEP (`POST /whep/w-…`)
plays whatever session the link points at now.

`GET /sessions/watch/{id}?seen=TAG` tells the watch page the link's state: `waiting` (no stream yet),
`live` (and which session) or `ended` (the last stream stopped). It is a long poll: when `seen` is the
state the page already has, the answer waits (up to `LONG_POLL_S`) for the next change, so a page learns
of a restart at once and costs one request per half minute while nothing happens.

A link belongs to the principal that made it (the same rule as sessions: anyone else gets 404, as for an id
that does not exist). A link the server does not know (it restarted) is taken again by the first offer that
names it, so a tab keeps its link, and OBS its source, across a server restart too. Ids carry 96 random
bits; at most `MAX_LINKS` are kept, the oldest idle ones forgotten first.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

WATCH_ID_PATTERN = re.compile(r"^w-[A-Za-z0-9_-]{16}$")
LONG_POLL_S = 25.0
MAX_LINKS = 4096


def is_watch_id(text: str) -> bool:
    return bool(WATCH_ID_PATTERN.match(text or ""))


def new_watch_id() -> str:
    return "w-" + secrets.token_urlsafe(12)   # 16 characters


@dataclass
class WatchLink:
    id: str
    owner: str
    session: str | None = None     # the session it plays now (None: waiting or ended)
    ended: bool = False            # a session was here and stopped
    streams: int = 0               # sessions it has followed
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def state(self) -> str:
        return "live" if self.session else "ended" if self.ended else "waiting"

    def tag(self) -> str:
        """What the watch page sends back as `seen`: changes whenever the answer would."""
        return f"{self.state()}:{self.session or ''}:{self.streams}"

    def as_json(self) -> dict[str, Any]:
        return {"watch": self.id, "state": self.state(), "session": self.session, "streams": self.streams,
                "tag": self.tag()}

    def _changed(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class WatchLinks:
    """The links this server holds, by id; every method runs on the event loop."""

    def __init__(self, max_links: int = MAX_LINKS) -> None:
        self.max_links = max_links
        self._links: OrderedDict[str, WatchLink] = OrderedDict()
        self._closing = False

    def create(self, owner: str) -> WatchLink:
        link = WatchLink(new_watch_id(), owner)
        self._put(link)
        return link

    def get(self, link_id: str, owner: str | None, admin: bool = False) -> WatchLink | None:
        """The link for its owner (or an admin); None for an unknown id and for anyone else alike."""
        link = self._links.get(link_id)
        if link is None or not (admin or (owner is not None and link.owner == owner)):
            return None
        return link

    def attach(self, link_id: str, owner: str, session_id: str) -> WatchLink | None:
        """Point a link at a new session of its owner; a well-formed id the server does not know is taken
        (the server restarted under an open tab). None when the id is malformed or another's."""
        if not is_watch_id(link_id):
            return None
        link = self._links.get(link_id)
        if link is None:
            link = WatchLink(link_id, owner)
            self._put(link)
        elif link.owner != owner:
            return None
        link.session, link.ended = session_id, False
        link.streams += 1
        self._links.move_to_end(link_id)
        link._changed()
        return link

    def session_ended(self, session_id: str) -> None:
        for link in self._links.values():
            if link.session == session_id:
                link.session, link.ended = None, True
                link._changed()

    def resolve(self, name: str) -> str:
        """A WHEP or watch path's name -> a session id: a link's current session (or the name itself,
        which then answers 404 as an unknown session), any other name unchanged."""
        link = self._links.get(name)
        if link is not None:
            return link.session or name
        return name

    async def wait(self, link: WatchLink, seen: str | None, timeout: float = LONG_POLL_S) -> WatchLink:
        """Return at once when `seen` is not the link's state; else when it changes, or after `timeout`."""
        if seen == link.tag() and not self._closing:
            try:
                await asyncio.wait_for(link.changed.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        return link

    def close(self) -> None:
        """Wake every waiting poll (the server is stopping: nothing should hold its shutdown)."""
        self._closing = True
        for link in self._links.values():
            link._changed()

    def _put(self, link: WatchLink) -> None:
        self._links[link.id] = link
        while len(self._links) > self.max_links:
            idle = next((k for k, v in self._links.items() if v.session is None), None)
            self._links.pop(idle if idle is not None else next(iter(self._links)))
