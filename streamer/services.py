"""The injectable parts of the server: the lead swaps these for the real face pipeline, source
registration, prompt path, auth and audit log without touching the network code."""

from __future__ import annotations

import ipaddress
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from engines.images import ImageError, load_image
from engines.sources import SourceRefused
from streamer.pipeline import Pipeline
from streamer.session import Session

log = logging.getLogger(__name__)
audit_log = logging.getLogger("livefuse.audit")

ACCEPTED_IMAGE_FORMATS = ("JPEG", "PNG", "WEBP")


def decode_image(data: bytes, *, max_pixels: int) -> np.ndarray:
    """Bytes from the client -> H x W x 3 uint8 RGB, refusing what is not a small real image.
    The pixel count is checked from the header before the image is decoded."""
    try:
        image = load_image(data, max_pixels=max_pixels, min_side=32, formats=ACCEPTED_IMAGE_FORMATS)
    except ImageError as exc:
        raise SourceRefused(exc.reason, str(exc)) from None
    return image


def default_make_pipeline(session: Session) -> Pipeline:
    """No stages until the face stages are wired in: frames pass through untouched."""
    return Pipeline([])


def default_register_source(session: Session, image_rgb: np.ndarray, form: Mapping[str, str]) -> dict[str, Any]:
    """Keep the decoded image as the session's source and make it the active one."""
    source_id = form.get("source_id") or uuid.uuid4().hex[:12]
    if len(source_id) > 64 or not source_id.replace("-", "").replace("_", "").isalnum():
        raise SourceRefused("bad_request", "source_id must be up to 64 letters, digits, '-' or '_'")
    session.add_source(source_id, image_rgb)
    h, w = image_rgb.shape[:2]
    return {"source_id": source_id, "width": w, "height": h}


def default_set_prompt(session: Session, text: str) -> dict[str, Any]:
    session.update(prompt=text)
    return {"prompt": text}


def default_authorize(request: Any) -> str | None:
    """Open to loopback clients only; anything else needs a real authorize hook."""
    remote = getattr(request, "remote", None) or ""
    try:
        return "loopback" if ipaddress.ip_address(remote).is_loopback else None
    except ValueError:
        return None


def default_audit(event: str, **fields: Any) -> None:
    audit_log.info("%s %s", event, " ".join(f"{k}={v!r}" for k, v in sorted(fields.items())))


@dataclass(frozen=True, slots=True)
class Services:
    make_pipeline: Callable[[Session], Pipeline] = default_make_pipeline
    register_source: Callable[[Session, np.ndarray, Mapping[str, str]], dict[str, Any]] = default_register_source
    set_prompt: Callable[[Session, str], dict[str, Any]] = default_set_prompt
    authorize: Callable[[Any], str | None] = default_authorize
    audit: Callable[..., None] = default_audit
    middlewares: tuple[Any, ...] = ()                                  # aiohttp middlewares (auth)
    session_started: Callable[[Session, Any], None] = lambda session, request: None
    session_ended: Callable[[Session], None] = lambda session: None    # after its pipeline stopped
    startup: Callable[[], None] = lambda: None                         # load shared models before the first client
    shutdown: Callable[[], None] = lambda: None                        # the server is stopping
    extras: Mapping[str, Any] = field(default_factory=dict)


def default_services(product_config: Any = None) -> Services:
    """What `livefuse serve` and `livefuse process` run with: the real product (streamer.assembly)."""
    from streamer.assembly import Product, ProductConfig

    return Product(product_config or ProductConfig()).services()
