"""Access control: bearer tokens (required whenever the server binds beyond loopback), per-token rate
and session limits, and an origin allowlist, as an aiohttp middleware over a token store.

Tokens are stored as sha256 hashes only; `TokenStore.issue` returns the raw token once. The middleware
guards the routes that open sessions or take uploads; for session-opening requests it takes a session
slot, which the server hands to the session and releases when the session ends (it is released at once
if the handler fails).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import secrets
import ssl
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import yarl
from aiohttp import web

log = logging.getLogger(__name__)

_Key = getattr(web, "RequestKey", None)
# request[REQUEST_TOKEN] -> TokenInfo | None (None: open loopback); request[REQUEST_SLOT] -> SessionSlot
REQUEST_TOKEN: Any = _Key("livefuse_token", object) if _Key else "livefuse_token"
REQUEST_SLOT: Any = _Key("livefuse_session_slot", object) if _Key else "livefuse_session_slot"


class AuthError(Exception):
    """A refusal at the door: its status, words, headers and machine-readable code."""

    CODES = {401: "unauthorized", 403: "forbidden", 421: "misdirected_request", 429: "rate_limited"}

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None, code: str | None = None) -> None:
        super().__init__(reason)
        self.status, self.reason, self.headers = status, reason, headers or {}
        self.code = code or self.CODES.get(status, "refused")


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: str
    expires: float | None = None          # unix time; None = never
    max_sessions: int = 4
    rate_per_minute: float = 60.0
    burst: int = 20
    admin: bool = False                   # may see and end every session, not only its own


LOOPBACK_PRINCIPAL = "loopback"           # who token-less loopback clients act as; no token may take the name
RECHECK_S = 1.0                           # a tokens file is looked at (stat) at most this often


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class SessionSlot:
    """One of a token's concurrent sessions; `release()` is idempotent."""

    def __init__(self, store: "TokenStore", token_id: str) -> None:
        self.store, self.token_id, self._released = store, token_id, False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.store._release(self.token_id)


def _read_tokens(path: Path) -> dict[str, TokenInfo]:
    """The tokens of a file; entries written before a field existed take its default."""
    raw = json.loads(path.read_text())
    entries = {}
    for t in raw["tokens"]:
        t = dict(t)
        digest = t.pop("sha256")
        entries[digest] = TokenInfo(**t)
    return entries


def _file_version(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is rewritten (in place or by rename); None when it is gone."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_ino, st.st_size


class TokenStore:
    """Tokens by hash, with per-key rate buckets and session slots. A store loaded from a file follows
    it: `livefuse tokens revoke` rewrites the file, and the next request after at most RECHECK_S (or a
    `reload()`, which `livefuse serve` runs on SIGHUP) sees the change without a restart."""

    def __init__(self, tokens: Iterable[tuple[str, TokenInfo]] = (), *, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._by_digest: dict[str, TokenInfo] = dict(tokens)
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}   # key -> (tokens left, last refill time)
        self._sessions: dict[str, int] = {}
        self._path: Path | None = None
        self._version: tuple[int, int, int] | None = None
        self._next_check = 0.0

    # -- tokens -------------------------------------------------------------------------------------
    def issue(self, token_id: str, *, ttl: float | None = None, max_sessions: int = 4,
              rate_per_minute: float = 60.0, burst: int = 20, admin: bool = False) -> str:
        if token_id == LOOPBACK_PRINCIPAL:  # it would own every token-less loopback client's sessions
            raise ValueError(f"{LOOPBACK_PRINCIPAL!r} is reserved for token-less loopback clients")
        raw = secrets.token_urlsafe(32)
        expires = self._clock() + ttl if ttl is not None else None
        with self._lock:
            self._by_digest[_digest(raw)] = TokenInfo(token_id, expires, max_sessions, rate_per_minute, burst, admin)
        return raw

    def entries(self) -> list[dict[str, Any]]:
        """What is known about each token, without its hash."""
        with self._lock:
            return [asdict(i) for i in self._by_digest.values()]

    def revoke(self, token_id: str) -> None:
        with self._lock:
            self._by_digest = {d: i for d, i in self._by_digest.items() if i.id != token_id}

    @classmethod
    def load(cls, path: str | os.PathLike, **kw: Any) -> "TokenStore":
        """JSON: {"tokens": [{"sha256": HEX, "id": NAME, "expires": UNIX|null, "max_sessions": N, "admin": B, ...}]};
        the store keeps following the file (see the class)."""
        p = Path(path)
        version = _file_version(p)
        store = cls(_read_tokens(p).items(), **kw)
        store._path, store._version = p, version
        store._next_check = store._monotonic() + RECHECK_S
        return store

    def reload(self) -> bool:
        """Re-read the tokens file now; a file that cannot be read keeps the tokens as they were (and
        says so in the log). True when the tokens were replaced."""
        if self._path is None:
            return False
        version = _file_version(self._path)
        try:
            tokens = _read_tokens(self._path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("tokens file %s not re-read, keeping the tokens loaded before: %s", self._path, exc)
            return False
        with self._lock:
            self._by_digest, self._version = tokens, version
        log.info("tokens file %s re-read: %d token(s)", self._path, len(tokens))
        return True

    def _follow_file(self) -> None:
        """Reload when the file changed since it was read; looks at most once per RECHECK_S."""
        if self._path is None:
            return
        now = self._monotonic()
        if now < self._next_check:
            return
        self._next_check = now + RECHECK_S
        if _file_version(self._path) != self._version:
            self.reload()

    def save(self, path: str | os.PathLike) -> None:
        with self._lock:
            data = {"tokens": [{"sha256": d, **asdict(i)} for d, i in self._by_digest.items()]}
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        os.chmod(tmp, 0o600)
        os.replace(tmp, p)

    def authenticate(self, header: str | None) -> TokenInfo:
        if not header:
            raise AuthError(401, "a bearer token is required", {"WWW-Authenticate": 'Bearer realm="livefuse"'})
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise AuthError(401, "use 'Authorization: Bearer TOKEN'", {"WWW-Authenticate": 'Bearer realm="livefuse"'})
        self._follow_file()
        info = self._by_digest.get(_digest(raw.strip()))
        if info is None:
            raise AuthError(401, "unknown token", {"WWW-Authenticate": 'Bearer error="invalid_token"'})
        if info.expires is not None and self._clock() >= info.expires:
            raise AuthError(401, "token expired", {"WWW-Authenticate": 'Bearer error="invalid_token", error_description="expired"'})
        return info

    # -- limits -------------------------------------------------------------------------------------
    def take(self, key: str, rate_per_minute: float, burst: int) -> float:
        """Token-bucket rate limit: 0.0 if allowed, else the seconds to wait."""
        now = self._clock()
        rate = rate_per_minute / 60.0
        with self._lock:
            left, last = self._buckets.get(key, (float(burst), now))
            left = min(float(burst), left + (now - last) * rate)
            if left >= 1.0:
                self._buckets[key] = (left - 1.0, now)
                return 0.0
            self._buckets[key] = (left, now)
            return (1.0 - left) / rate if rate > 0 else float("inf")

    def open_session(self, token_id: str, max_sessions: int) -> SessionSlot:
        with self._lock:
            n = self._sessions.get(token_id, 0)
            if n >= max_sessions:
                raise AuthError(429, f"session limit reached ({max_sessions} open for this token)", code="session_limit")
            self._sessions[token_id] = n + 1
        return SessionSlot(self, token_id)

    def open_sessions(self, token_id: str) -> int:
        with self._lock:
            return self._sessions.get(token_id, 0)

    def _release(self, token_id: str) -> None:
        with self._lock:
            left = self._sessions.get(token_id, 0) - 1
            if left > 0:
                self._sessions[token_id] = left
            else:  # no entry for a key with nothing open: the table does not grow with every client seen
                self._sessions.pop(token_id, None)

    def open_slots(self) -> dict[str, int]:
        """Key -> sessions open, for every key with at least one."""
        with self._lock:
            return dict(self._sessions)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


LOOPBACK_NAMES: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS: tuple[str, ...] = ("", "0.0.0.0", "::")


def split_host(header: str) -> tuple[str, int | None]:
    """A Host header -> (lower-case name, port or None): "[::1]:8080" -> ("::1", 8080)."""
    header = header.strip().lower()
    if header.startswith("["):
        name, _, rest = header[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif header.count(":") == 1:
        name, _, port = header.partition(":")
    else:
        name, port = header, ""
    return name.rstrip("."), int(port) if port.isdigit() else None


def public_names(bind: str, public_hosts: Iterable[str] = ()) -> tuple[str, ...]:
    """The names clients may reach a server by: loopback names for a loopback bind, the bind address
    when it is a specific one, and the configured public names."""
    names = [split_host(h)[0] for h in public_hosts]
    if is_loopback(bind):
        names[:0] = LOOPBACK_NAMES
    elif bind not in WILDCARD_BINDS:
        names.insert(0, split_host(bind)[0])
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    require_tokens: bool = True
    allowed_origins: tuple[str, ...] = ()          # page origins allowed besides the server's own
    # the names the server answers to (Host); empty: not checked, and no Origin but allowed_origins passes
    public_hosts: tuple[str, ...] = ()
    # the signaling and API routes a listed page origin may call across origins (CORS, streamer.web.cors)
    protected_prefixes: tuple[str, ...] = ("/offer", "/whip", "/whep", "/sessions", "/admin", "/v1")
    # the only routes the access checks (origin, token, rate) leave alone: health, readiness and the
    # page's own files (the page, its scripts, its icon and demo face, the watch player's page); every
    # other route, /metrics and /edits included, asks for a token whenever tokens are required
    public_paths: tuple[str, ...] = ("/", "/healthz", "/readyz", "/favicon.ico", "/assets/demo_source.jpg")
    # ... and /results/<key>, a clip result through the cache edge, where the unguessable key is the capability
    public_prefixes: tuple[str, ...] = ("/static/", "/watch/", "/results/")
    session_routes: tuple[tuple[str, str], ...] = (("POST", "/offer"), ("POST", "/whip"), ("POST", "/whep"))
    open_rate_per_minute: float = 120.0            # per client address when running open on loopback
    open_max_sessions: int = 16

    def guards(self, path: str) -> bool:
        """Whether a request for `path` passes the access checks (all but the public routes do)."""
        return not (path in self.public_paths or any(path.startswith(p) for p in self.public_prefixes))

    @classmethod
    def for_host(cls, host: str, public_hosts: Iterable[str] = (), *, tokens: bool = False, open_loopback: bool = False,
                 **kw: Any) -> "AccessPolicy":
        """Tokens are required off loopback, and on loopback too once a tokens file is given (`tokens`),
        unless `open_loopback` keeps loopback open (a laptop; never behind a proxy on the same host,
        where every outside client arrives from loopback). The Host a request names must be one of
        `public_names(host, public_hosts)` (a loopback server: loopback names only)."""
        if open_loopback and not is_loopback(host):
            raise ValueError(f"open_loopback is for a loopback bind only, not {host!r}")
        require = not is_loopback(host) or (tokens and not open_loopback)
        return cls(require_tokens=require, public_hosts=public_names(host, public_hosts), **kw)


def _refusal(exc: AuthError) -> web.Response:
    return web.json_response({"error": exc.reason, "code": exc.code}, status=exc.status, headers=exc.headers)


def _host_ok(request: web.Request, policy: AccessPolicy) -> bool:
    """The request names this server: a page on another name that resolves here (DNS rebinding) does not."""
    if not policy.public_hosts:
        return True
    return split_host(request.host or "")[0] in policy.public_hosts


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _own_origin(origin: str, request: web.Request, policy: AccessPolicy) -> bool:
    """`origin` is scheme://host[:port] of this server as the request reached it, the host one of its
    public names (never the request's Host taken on trust)."""
    if not policy.public_hosts:
        return False
    try:
        url = yarl.URL(origin)
    except ValueError:
        return False
    name, port = split_host(request.host or "")
    if url.scheme != request.scheme or not url.host or url.host.lower().rstrip(".") not in policy.public_hosts:
        return False
    return url.host.lower().rstrip(".") == name and url.port == (port or _DEFAULT_PORTS.get(request.scheme))


def _origin_ok(request: web.Request, policy: AccessPolicy) -> bool:
    """No Origin (not a browser page), the server's own, or one listed; "null" (sandboxed frames, files)
    only when listed."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return listed_origin(origin, policy.allowed_origins) or _own_origin(origin, request, policy)


def listed_origin(origin: str, allowed: Iterable[str]) -> bool:
    """`origin` is one the operator listed ("*": any real origin; "null" only when listed itself)."""
    allowed = tuple(allowed)
    return origin in allowed or (origin != "null" and "*" in allowed)


# A browser cannot set Authorization on a WebSocket: it offers the token as one of its subprotocols
# instead, `livefuse.token.<TOKEN>` next to the protocol it speaks (the server answers with that one,
# never echoes the token). Request headers other than the request line stay out of the access log.
TOKEN_SUBPROTOCOL = "livefuse.token."


def bearer_header(request: web.Request) -> str | None:
    """The request's bearer credentials: the Authorization header, else a WebSocket upgrade's token
    subprotocol as `Bearer TOKEN`."""
    header = request.headers.get("Authorization")
    if header or request.headers.get("Upgrade", "").lower() != "websocket":
        return header
    for offered in request.headers.getall("Sec-WebSocket-Protocol", ()):
        for name in offered.split(","):
            name = name.strip()
            if name.startswith(TOKEN_SUBPROTOCOL) and len(name) > len(TOKEN_SUBPROTOCOL):
                return f"Bearer {name[len(TOKEN_SUBPROTOCOL):]}"
    return None


def auth_middleware(store: TokenStore, policy: AccessPolicy):
    """aiohttp middleware: host check (every route), then for every route but the public ones
    (`AccessPolicy.guards`) origin check, bearer token, rate limit, session slot (in that order)."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        path = request.path
        if not _host_ok(request, policy):
            return _refusal(AuthError(421, f"host {request.host!r} is not a name this server answers to"))
        if not policy.guards(path):
            return await handler(request)
        try:
            if not _origin_ok(request, policy):
                raise AuthError(403, f"origin {request.headers.get('Origin', '')[:100]} is not allowed", code="origin_not_allowed")
            header = bearer_header(request)
            if policy.require_tokens or header:
                info: TokenInfo | None = store.authenticate(header)
                key, rate, burst, max_sessions = f"token:{info.id}", info.rate_per_minute, info.burst, info.max_sessions
            else:
                info = None
                key = f"addr:{request.remote}"
                rate, burst, max_sessions = policy.open_rate_per_minute, max(1, int(policy.open_rate_per_minute // 6)), policy.open_max_sessions
            # teardown is never rate-limited: a client that ends its session frees what it held
            wait = 0.0 if request.method == "DELETE" else store.take(key, rate, burst)
            if wait > 0:
                raise AuthError(429, "rate limit exceeded", {"Retry-After": str(max(1, int(wait + 0.999)))},
                                code="rate_limited")
            request[REQUEST_TOKEN] = info
            slot = None
            if any(request.method == m and (path == p or path.startswith(p + "/")) for m, p in policy.session_routes):
                slot = store.open_session(key, max_sessions)
                request[REQUEST_SLOT] = slot
        except AuthError as exc:
            return _refusal(exc)
        try:
            response = await handler(request)
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        if slot is not None and response.status >= 400:
            slot.release()
        return response

    return middleware


def token_id_of(request: Any) -> str | None:
    """For the server's `authorize(request) -> token id` hook, behind the middleware: the token's id,
    or "loopback" when the server runs open on loopback."""
    info = request.get(REQUEST_TOKEN, "missing") if hasattr(request, "get") else "missing"
    if info == "missing":
        return None
    return info.id if info is not None else LOOPBACK_PRINCIPAL


def _holds_nothing() -> None:
    return None


def slot_release(request: Any) -> Callable[[], None]:
    """For the server's `claim(request)` hook: the release of the session slot the middleware took for
    this request (a session or a WHEP viewer holds one for as long as it is open); a no-op when none."""
    slot = request.get(REQUEST_SLOT) if hasattr(request, "get") else None
    return slot.release if isinstance(slot, SessionSlot) else _holds_nothing


def is_admin(request: Any) -> bool:
    """For the server's `is_admin(request)` hook: the request's token carries the admin role."""
    info = request.get(REQUEST_TOKEN) if hasattr(request, "get") else None
    return isinstance(info, TokenInfo) and info.admin


def ssl_context(certfile: str | os.PathLike, keyfile: str | os.PathLike) -> ssl.SSLContext:
    """Server-side TLS (1.2 or newer) from PEM files."""
    for p in (certfile, keyfile):
        if not Path(p).is_file():
            raise FileNotFoundError(f"TLS file {p} not found")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(certfile), str(keyfile))
    return ctx
