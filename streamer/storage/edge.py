"""Results through a cache edge (a CDN or the chart's Varnish): how result objects are named, what
Cache-Control they are served with, the URL a client is handed, and the purge that takes a deleted result
off the edge.

A result lives under an immutable, unguessable key (`jobs/<job id>/<128 random bits>/result.<ext>`): it
never changes under its name, so an edge may keep it for a year (`public, max-age=31536000, immutable`)
and a URL cannot be guessed from a job id. An operator who wants no shared cache to keep results serves
them `private, no-store`. Deleting a result sends PURGE <path> to every address of every configured
cache (a Kubernetes headless Service resolves to each cache pod)."""

from __future__ import annotations

import http.client
import logging
import re
import secrets
import socket
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

PUBLIC = "public, max-age=31536000, immutable"
PRIVATE = "private, no-store"
RESULTS_PATH = "/results/"
# the only keys the results origin serves: a job's result (never its inputs, never a recording)
RESULT_KEY = re.compile(r"jobs/[0-9a-f]{32}/[0-9a-f]{32}/result\.(mp4|mov|mkv|webm)")


def result_key(job_id: str, suffix: str) -> str:
    """A new, unguessable key for a job's result."""
    return f"jobs/{job_id}/{secrets.token_hex(16)}/result{suffix}"


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    """`public_url`: the base the API's result URLs start with (the edge's address and path, e.g.
    https://cdn.example.com/results); "" = the API's own /results/ origin. `private`: results are
    `Cache-Control: private, no-store`. `purge`: caches to PURGE a deleted result from (http://host:port)."""

    public_url: str = ""
    private: bool = False
    purge: tuple[str, ...] = ()

    @property
    def cache_control(self) -> str:
        return PRIVATE if self.private else PUBLIC

    def url(self, key: str, origin: str) -> str:
        """The URL a client fetches `key` by: under `public_url`, else under `origin` (this API's base)."""
        base = (self.public_url or origin.rstrip("/") + RESULTS_PATH.rstrip("/")).rstrip("/")
        return f"{base}/{key}"

    def edge_path(self, key: str) -> str:
        """The path the edge caches `key` under (what a PURGE names)."""
        prefix = urlsplit(self.public_url).path.rstrip("/") if self.public_url else RESULTS_PATH.rstrip("/")
        return f"{prefix}/{key}"


def _addresses(host: str, port: int) -> list[tuple[int, tuple]]:
    seen, out = set(), []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if sockaddr[0] not in seen:
            seen.add(sockaddr[0])
            out.append((family, sockaddr))
    return out


def purge(caches: Iterable[str], path: str, timeout: float = 5.0) -> tuple[int, list[str]]:
    """PURGE `path` at every address of every cache; (purged, failures in words). Blocking: run it in an
    executor. A cache that cannot be reached is a failure, never an exception."""
    purged, failed = 0, []
    for cache in caches:
        u = urlsplit(cache)
        port = u.port or (443 if u.scheme == "https" else 80)
        try:
            targets = _addresses(u.hostname or "", port)
        except OSError as exc:
            failed.append(f"{u.hostname}: {exc}")
            continue
        for family, sockaddr in targets:
            addr = sockaddr[0]
            cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
            conn = cls(addr if family == socket.AF_INET else f"[{addr}]", port, timeout=timeout)
            try:
                conn.request("PURGE", path, headers={"Host": u.netloc})
                status = conn.getresponse().status
                if status in (200, 204, 404):
                    purged += 1
                else:
                    failed.append(f"{addr}:{port} answered {status}")
            except OSError as exc:
                failed.append(f"{addr}:{port}: {exc}")
            finally:
                conn.close()
    if failed:
        log.warning("purging %s from the edge: %s", path, "; ".join(failed))
    return purged, failed
