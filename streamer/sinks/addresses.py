"""What may be shown of an output's address: its origin, never the stream key or token it carries."""

from __future__ import annotations

from urllib.parse import urlsplit

UNREADABLE = "(an unreadable address)"


def origin(url: str) -> str | None:
    """scheme://host[:port] of an address, without the credentials it may carry; None when unreadable."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return None
    return f"{parts.scheme}://{parts.hostname or '?'}{port}"
