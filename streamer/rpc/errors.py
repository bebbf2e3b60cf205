"""REST refusals as gRPC statuses: one table from (HTTP status, code) to a status code, and the details a
gRPC client reads (google.rpc.Status in the `grpc-status-details-bin` trailer: an ErrorInfo whose reason
is REST's code, a RetryInfo where waiting helps). The REST and gRPC routes refuse the same things with
the same codes; only the envelope differs."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

DOMAIN = "livefuse"

# codes whose meaning beats their HTTP status
BY_CODE: dict[str, grpc.StatusCode] = {
    "source_no_consent": grpc.StatusCode.FAILED_PRECONDITION,
    "no_consent": grpc.StatusCode.FAILED_PRECONDITION,
    "prompt_refused": grpc.StatusCode.PERMISSION_DENIED,
    "source_protected_identity": grpc.StatusCode.PERMISSION_DENIED,
    "protected_identity": grpc.StatusCode.PERMISSION_DENIED,
    "input_not_allowed": grpc.StatusCode.PERMISSION_DENIED,
    "not_ready": grpc.StatusCode.FAILED_PRECONDITION,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "prompt_unavailable": grpc.StatusCode.UNAVAILABLE,
    "queue_unavailable": grpc.StatusCode.UNAVAILABLE,
    "draining": grpc.StatusCode.UNAVAILABLE,
    "deadline_exceeded": grpc.StatusCode.DEADLINE_EXCEEDED,
}
BY_STATUS: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT, 406: grpc.StatusCode.INVALID_ARGUMENT,
    408: grpc.StatusCode.DEADLINE_EXCEEDED, 413: grpc.StatusCode.INVALID_ARGUMENT,
    415: grpc.StatusCode.INVALID_ARGUMENT, 422: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND, 409: grpc.StatusCode.FAILED_PRECONDITION,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED, 503: grpc.StatusCode.RESOURCE_EXHAUSTED,
    504: grpc.StatusCode.DEADLINE_EXCEEDED, 500: grpc.StatusCode.INTERNAL,
}


@dataclass(frozen=True, slots=True)
class RpcRefusal(Exception):
    """A refusal on its way to the caller: the gRPC status, REST's code, the words, the wait."""

    status: grpc.StatusCode
    code: str
    message: str
    retry_after_s: float | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status.name} {self.code}: {self.message}"


def refusal(http_status: int, code: str, message: str, headers: Mapping[str, str] | None = None,
            extra: Mapping[str, Any] | None = None) -> RpcRefusal:
    """The gRPC form of a REST refusal (its status, code, words, Retry-After and extra fields)."""
    status = BY_CODE.get(code) or BY_STATUS.get(http_status) or (
        grpc.StatusCode.INVALID_ARGUMENT if 400 <= http_status < 500 else grpc.StatusCode.INTERNAL)
    retry = (headers or {}).get("Retry-After")
    wait = float(retry) if retry and retry.replace(".", "", 1).isdigit() else None
    if status is grpc.StatusCode.RESOURCE_EXHAUSTED and wait is None:
        wait = 1.0
    meta = {k: str(v) for k, v in (extra or {}).items() if v is not None}
    return RpcRefusal(status, code, message, wait, meta)


def from_http_exception(exc: Any) -> RpcRefusal:
    """An aiohttp HTTPException carrying the JSON body {"error", "code", ...} (httpkit.Refused)."""
    try:
        body = json.loads(exc.text or "{}")
    except ValueError:
        body = {}
    extra = {k: v for k, v in body.items() if k not in ("error", "code")}
    return refusal(exc.status, str(body.get("code") or exc.status), str(body.get("error") or exc.reason),
                   dict(exc.headers), extra)


def rich_status(r: RpcRefusal) -> tuple[tuple[str, bytes], ...]:
    """The trailer: google.rpc.Status with ErrorInfo (+ RetryInfo)."""
    details = []
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=r.code, domain=DOMAIN, metadata=dict(r.metadata)))
    details.append(info)
    if r.retry_after_s is not None:
        whole = math.floor(r.retry_after_s)
        retry = any_pb2.Any()
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
            seconds=int(whole), nanos=int((r.retry_after_s - whole) * 1e9))))
        details.append(retry)
    status = status_pb2.Status(code=r.status.value[0], message=r.message, details=details)
    return (("grpc-status-details-bin", status.SerializeToString()),)


async def abort(context: Any, r: RpcRefusal) -> None:
    """End the call with `r` (raises, as grpc.aio's abort does)."""
    context.set_trailing_metadata(rich_status(r))
    await context.abort(r.status, r.message)


