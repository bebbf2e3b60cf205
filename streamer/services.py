"""The hooks the server calls into the product: the one seam between the network code and what runs on
the frames. `Services` is the seam's shape; `streamer.app.assembly.Product` satisfies it; `NullServices` is
the neutral one (no stages, no source registration, the prompt stored as given, loopback clients only,
audit events to the log), so the server runs and is tested without any model. `with_hooks` swaps single
hooks of either (tests, benches)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from engines.sources import SourceRefused
from streamer.pipeline.pipeline import Pipeline
from streamer.safety.auth import is_loopback
from streamer.session.session import Session

log = logging.getLogger(__name__)
audit_log = logging.getLogger("livefuse.audit")


def no_stages(session: Session) -> Pipeline:
    return Pipeline([])


def no_sources(session: Session, image_rgb: np.ndarray, form: Mapping[str, str]) -> dict[str, Any]:
    raise SourceRefused("unavailable", "this server takes no source faces")


def store_prompt(session: Session, text: str) -> dict[str, Any]:
    session.update(prompt=text)
    return {"prompt": text}


def loopback_only(request: Any) -> str | None:
    return "loopback" if is_loopback(getattr(request, "remote", None) or "") else None


def nobody_is_admin(request: Any) -> bool:
    return False


def _holds_nothing() -> None:
    return None


def claims_nothing(request: Any) -> Callable[[], None]:
    return _holds_nothing


def log_event(event: str, **fields: Any) -> None:
    audit_log.info("%s %s", event, " ".join(f"{k}={v!r}" for k, v in sorted(fields.items())))


def _nothing(*args: Any) -> None:
    return None


class Services(Protocol):
    """What the server asks of the product. Attributes may be plain values, methods or properties."""

    def make_pipeline(self, session: Session) -> Pipeline: ...
    def register_source(self, session: Session, image_rgb: np.ndarray, form: Mapping[str, str]) -> dict[str, Any]: ...
    def set_prompt(self, session: Session, text: str) -> dict[str, Any]: ...
    def authorize(self, request: Any) -> str | None: ...
    def is_admin(self, request: Any) -> bool: ...
    def audit(self, event: str, **fields: Any) -> None: ...
    def claim(self, request: Any) -> Callable[[], None]: ...
    def session_started(self, session: Session, request: Any) -> None: ...
    def session_ended(self, session: Session) -> None: ...
    def startup(self) -> None: ...
    def shutdown(self) -> None: ...
    def reload(self) -> None: ...

    @property
    def middlewares(self) -> tuple[Any, ...]: ...
    @property
    def record(self) -> Callable[[Session, Any, Any], Any] | None: ...
    @property
    def api(self) -> Any: ...
    @property
    def rpc_access(self) -> Any: ...


class with_hooks:
    """`base`'s hooks with the named ones replaced: `with_hooks(product, make_pipeline=...)`."""

    def __init__(self, base: Any, **hooks: Any) -> None:
        self._base, self._hooks = base, hooks

    def __getattr__(self, name: str) -> Any:
        hooks = self.__dict__["_hooks"]
        return hooks[name] if name in hooks else getattr(self.__dict__["_base"], name)


@dataclass(frozen=True, slots=True)
class NullServices:
    """The neutral hooks, each replaceable by keyword."""

    make_pipeline: Callable[[Session], Pipeline] = no_stages
    """A new session's stages; called in an executor (it may load models)."""
    register_source: Callable[[Session, np.ndarray, Mapping[str, str]], dict[str, Any]] = no_sources
    """An uploaded photo (decoded RGB) and its form fields -> the reply; raises SourceRefused. Runs in an
    executor."""
    set_prompt: Callable[[Session, str], dict[str, Any]] = store_prompt
    """A prompt from the client -> the reply (the hook decides and applies it). Runs off the event loop."""
    authorize: Callable[[Any], str | None] = loopback_only
    """A request -> the principal it acts for (token id, "loopback"), or None: 401. A session belongs to
    the principal that opened it."""
    is_admin: Callable[[Any], bool] = nobody_is_admin
    """An authorized request -> whether it may use every session, not only its principal's own."""
    audit: Callable[..., None] = log_event
    """One audit record: `audit(event, **fields)`."""
    middlewares: tuple[Any, ...] = ()
    """aiohttp middlewares for every route (token checks, origin checks)."""
    claim: Callable[[Any], Callable[[], None]] = claims_nothing
    """What a request took on its way in (a token's session slot), as the one call that gives it back:
    the server hands it to the session or WHEP viewer the request opened, which calls it when it ends."""
    session_started: Callable[[Session, Any], None] = _nothing
    """A session (and the request that opened it) is about to stream."""
    session_ended: Callable[[Session], None] = _nothing
    """A session's pipeline has stopped: drop what the product holds for it. Runs in an executor."""
    startup: Callable[[], None] = _nothing
    """Load shared models before the first client; runs in an executor at server start."""
    shutdown: Callable[[], None] = _nothing
    """The server is stopping."""
    record: Callable[[Session, Any, Any], Any] | None = None
    """(session, its processed video track, the sender's audio track or None) -> a recording with
    `start()`, `stop()` (async) and `info()`; None: this server records no sessions (asking is a 400)."""
    api: Any = None
    """The REST API's product side (`streamer.web.api.routes.ApiBackend`: photos, clip jobs); None: the /v1
    routes answer 503."""
    reload: Callable[[], None] = _nothing
    """Re-read what may change under a running server (the tokens file); `livefuse serve` runs it on SIGHUP."""
    rpc_access: Any = None
    """The gRPC service's door (`streamer.rpc.access.RpcAccess`: the same tokens and limits as
    `middlewares`); None: loopback callers only."""
