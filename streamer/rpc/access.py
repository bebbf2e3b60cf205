"""The door of every RPC: the same tokens, rate limits and per-token stream slots as REST's middleware
(streamer.safety.auth), read from the call's `authorization` metadata. A FuseStream holds one of its
token's session slots for as long as it runs, as a WebRTC session does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from streamer.safety.auth import LOOPBACK_PRINCIPAL, AccessPolicy, AuthError, SessionSlot, TokenInfo, TokenStore, is_loopback


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str                     # the token's id, or "loopback" on an open loopback server
    admin: bool
    key: str                           # what rate limits and session slots count by
    max_sessions: int


@dataclass(frozen=True, slots=True)
class RpcAccess:
    """`check(authorization, peer_host, stream=False) -> Caller` or AuthError (401, 429 + Retry-After);
    `open_stream(caller) -> SessionSlot` or AuthError(429, session_limit)."""

    store: TokenStore
    policy: AccessPolicy

    def check(self, authorization: str | None, peer_host: str, *, rate: bool = True) -> Caller:
        if self.policy.require_tokens or authorization:
            info: TokenInfo = self.store.authenticate(authorization)
            caller = Caller(info.id, info.admin, f"token:{info.id}", info.max_sessions)
            per_minute, burst = info.rate_per_minute, info.burst
        elif is_loopback(peer_host):
            per_minute = self.policy.open_rate_per_minute
            burst = max(1, int(per_minute // 6))
            caller = Caller(LOOPBACK_PRINCIPAL, False, f"addr:{peer_host}", self.policy.open_max_sessions)
        else:
            raise AuthError(401, "a bearer token is required", code="unauthorized")
        wait = self.store.take(caller.key, per_minute, burst) if rate else 0.0
        if wait > 0:
            raise AuthError(429, "rate limit exceeded", {"Retry-After": str(max(1, int(wait + 0.999)))},
                            code="rate_limited")
        return caller

    def open_stream(self, caller: Caller) -> SessionSlot:
        return self.store.open_session(caller.key, caller.max_sessions)


def loopback_access() -> RpcAccess:
    """No tokens file: loopback callers only (the Services default, as REST's)."""
    return RpcAccess(TokenStore(), AccessPolicy(require_tokens=False))


def peer_host(peer: str) -> str:
    """grpc's peer string ("ipv4:127.0.0.1:5555", "ipv6:[::1]:5555", "unix:...") -> the address."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    if kind == "unix":
        return "127.0.0.1"
    return rest


def metadata_value(context: Any, key: str) -> str | None:
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return v
    return None


Check = Callable[[str | None, str], Caller]
