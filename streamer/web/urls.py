"""The URLs a replica hands out for a session (and for a clip job it holds). Behind a load balancer the
follow-up requests of a session (WHIP DELETE/PATCH, WHEP, source upload) must reach the replica that holds it,
so with a public URL (`--public-url http://POD_IP:8080`) they are absolute on this replica; without one they
stay relative (one server: whatever address the client used is the right one). A job in this replica's own
queue is held the same way; a job in the shared queue (`--jobs-redis`) is answered by every replica, so its
URLs stay relative to the address the client used (the Ingress)."""

from __future__ import annotations

from dataclasses import dataclass

import yarl


def public_host(url: str) -> str | None:
    """The host name of a public URL (a name the replica must answer to), None when there is none."""
    return yarl.URL(url).host if url else None


@dataclass(frozen=True, slots=True)
class SessionUrls:
    """Where each follow-up request of a session goes: on `base` (no trailing slash), or relative."""

    base: str = ""

    @classmethod
    def of(cls, public_url: str) -> "SessionUrls":
        return cls(public_url.rstrip("/"))

    def session(self, sid: str) -> str:
        return f"{self.base}/sessions/{sid}"

    def source(self, sid: str) -> str:
        return f"{self.base}/sessions/{sid}/source"

    def whip(self, sid: str) -> str:
        return f"{self.base}/whip/{sid}"

    def whep(self, sid: str) -> str:
        return f"{self.base}/whep/{sid}"

    def whep_viewer(self, sid: str, viewer: str) -> str:
        return f"{self.base}/whep/{sid}/{viewer}"

    def job(self, jid: str, shared: bool) -> str:
        return f"{'' if shared else self.base}/v1/jobs/{jid}"

    def job_result(self, jid: str, shared: bool) -> str:
        return f"{self.job(jid, shared)}/result"

    def for_session(self, sid: str, kind: str) -> dict[str, str]:
        """The URLs of one session, as the offer/WHIP replies carry them."""
        urls = {"session": self.session(sid), "source": self.source(sid), "whep": self.whep(sid)}
        if kind == "whip":
            urls["whip"] = self.whip(sid)
        return urls
