"""ICE settings that keep a loopback server on loopback.

Two aiortc/aioice defaults get in the way when the server is bound to 127.0.0.1: `RTCConfiguration()`
without ice servers adds Google's public STUN server, and aioice's host-address list
(`aioice.ice.get_host_addresses`) leaves 127.0.0.1 out and offers the machine's other interfaces.
aioice has no per-connection knob for the host addresses, so `gathering_on(...)` scopes a choice of
addresses to the calling task with a ContextVar; connections gathered outside it keep aioice's own list.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from typing import Iterator, Sequence

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer

_HOST_ADDRESSES: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar("livefuse_ice_hosts", default=None)
_original_get_host_addresses = aioice.ice.get_host_addresses

LOOPBACK_ADDRESSES = ("127.0.0.1",)


def _scoped_get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    chosen = _HOST_ADDRESSES.get()
    if chosen is None:
        return _original_get_host_addresses(use_ipv4, use_ipv6)
    return [a for a in chosen if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]


def _install() -> None:
    if aioice.ice.get_host_addresses is not _scoped_get_host_addresses:
        aioice.ice.get_host_addresses = _scoped_get_host_addresses


@contextlib.contextmanager
def gathering_on(addresses: Sequence[str] | None) -> Iterator[None]:
    """Candidates gathered inside this block (in this task and tasks it starts) use only `addresses`;
    None keeps aioice's own list. Wrap `await pc.setLocalDescription(...)` in it."""
    _install()
    token = _HOST_ADDRESSES.set(tuple(addresses) if addresses is not None else None)
    try:
        yield
    finally:
        _HOST_ADDRESSES.reset(token)


def rtc_configuration(servers: Sequence[str] = (), username: str | None = None, credential: str | None = None,
                      *, loopback: bool = False) -> RTCConfiguration:
    """An explicit server list: never aiortc's default public STUN server; none at all on loopback."""
    if loopback or not servers:
        return RTCConfiguration(iceServers=[])
    return RTCConfiguration(iceServers=[RTCIceServer(urls=list(servers), username=username, credential=credential)])


_MDNS_CANDIDATE = re.compile(r"^a=candidate:\S+ \d+ \S+ \d+ [0-9a-fA-F-]+\.local \d+ .*$", re.MULTILINE)


def strip_mdns_candidates(sdp: str) -> str:
    """Drop browser mDNS (`<uuid>.local`) host candidates: resolving them means multicast DNS on the LAN,
    and on a loopback server they can never be reached anyway."""
    out = _MDNS_CANDIDATE.sub("", sdp)
    return re.sub(r"(\r?\n){2,}", lambda m: m.group(1), out)
