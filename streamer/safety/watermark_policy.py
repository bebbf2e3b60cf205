"""Watermark policy: what the 64-bit payload says, and the rule that marking is on unless the server
operator turns it off explicitly (which is itself logged and audited).

Payload layout (big-endian bits): server id (16) | session tag (24) | time bucket (24).
The session tag is the first 24 bits of sha256(session id), so the audit log can find the session; the
time bucket counts `bucket_seconds` since 2024-01-01 UTC (2^24 minutes is 31 years).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kernels.numpy.watermark import WatermarkConfig

log = logging.getLogger(__name__)

EPOCH = 1704067200  # 2024-01-01T00:00:00Z
SERVER_BITS, SESSION_BITS, BUCKET_BITS = 16, 24, 24


@dataclass(frozen=True, slots=True)
class WatermarkPolicy:
    enabled: bool = True
    server_id: int = 0
    bucket_seconds: int = 60
    config: WatermarkConfig = field(default_factory=WatermarkConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.server_id < (1 << SERVER_BITS):
            raise ValueError(f"server_id must fit in {SERVER_BITS} bits, got {self.server_id}")
        if self.bucket_seconds < 1:
            raise ValueError("bucket_seconds must be >= 1")

    def payload(self, session_id: str, now: float | None = None) -> int:
        return make_payload(self.server_id, session_id, time.time() if now is None else now, self.bucket_seconds)


def session_tag(session_id: str) -> int:
    return int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:3], "big")


def make_payload(server_id: int, session_id: str, now: float, bucket_seconds: int = 60) -> int:
    bucket = int((now - EPOCH) // bucket_seconds) % (1 << BUCKET_BITS)
    return (server_id << (SESSION_BITS + BUCKET_BITS)) | (session_tag(session_id) << BUCKET_BITS) | bucket


def parse_payload(payload: int, bucket_seconds: int = 60) -> dict[str, Any]:
    """What a recovered payload says: server, session tag, and the UTC time its bucket began."""
    bucket = payload & ((1 << BUCKET_BITS) - 1)
    tag = (payload >> BUCKET_BITS) & ((1 << SESSION_BITS) - 1)
    server = payload >> (SESSION_BITS + BUCKET_BITS)
    start = EPOCH + bucket * bucket_seconds
    return {
        "server_id": server,
        "session_tag": f"{tag:06x}",
        "time_bucket": bucket,
        "bucket_start_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
    }


def resolve_policy(
    *,
    disable: bool = False,
    server_id: int = 0,
    bucket_seconds: int = 60,
    reason: str = "",
    audit: Callable[..., None] | None = None,
) -> WatermarkPolicy:
    """The server's policy from its settings. Marking stays on unless `disable=True` is passed by the
    operator; that choice is logged as a warning and written to the audit log."""
    if disable:
        log.warning("watermarking DISABLED by server setting (%s): output frames carry no mark", reason or "no reason given")
        if audit is not None:
            audit("watermark_disabled", server_id=server_id, reason=reason or "")
        return WatermarkPolicy(enabled=False, server_id=server_id, bucket_seconds=bucket_seconds)
    return WatermarkPolicy(enabled=True, server_id=server_id, bucket_seconds=bucket_seconds)


def payload_recorder(audit: Callable[..., None], bucket_seconds: int = 60) -> Callable[[str, int], None]:
    """A `WatermarkStage(on_payload=...)` hook that writes each session's new payload to the audit log,
    so a payload found by `livefuse verify` leads back to its session."""

    def record(session_id: str, payload: int) -> None:
        audit("watermark", session=session_id, payload=f"{payload:016x}", **parse_payload(payload, bucket_seconds))

    return record
