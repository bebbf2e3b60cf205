"""A LiveFuse client for services and scripts: `Client` (blocking) and `AsyncClient` (asyncio), each over
gRPC (`grpc://host:port`, `grpcs://` for TLS) or REST (`http://`, `https://`), the same methods and results
whichever the URL names:

    from livefuse.client import Client
    with Client("grpcs://fuse.example.com:50051", token="...") as lf:
        out = lf.fuse(open("me.jpg", "rb").read(), open("group.jpg", "rb").read(), consent=True, prompt="a warm smile")
    open("fused.png", "wb").write(out.image)

A refusal raises `LiveFuseError` with the server's code (`source_no_consent`, `prompt_refused`, ...), its
status and, where waiting helps, `retry_after` seconds. `fuse_stream` (frames in, fused frames out) is
gRPC only. Over REST the blocking client uses the standard library and the async one aiohttp; it imports
nothing of the server.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterable, Iterator, Mapping
from urllib.parse import urlsplit

__all__ = ["AsyncClient", "Client", "FuseResult", "JobInfo", "LiveFuseError", "StreamFrame"]

DEFAULT_TIMEOUT_S = 120.0
MAX_MESSAGE = 512 << 20                     # what the client accepts; the server's own limits apply first
JOB_STATES = {0: "unspecified", 1: "queued", 2: "running", 3: "done", 4: "failed", 5: "cancelled"}
FORMATS = {"png": 1, "jpeg": 2, "raw": 3}


class LiveFuseError(Exception):
    """The server refused or failed: `code` is its stable code (REST's `code`, gRPC's ErrorInfo reason),
    `status` the HTTP status or gRPC status name, `retry_after` seconds to wait (or None)."""

    def __init__(self, code: str, message: str, status: int | str, retry_after: float | None = None,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status
        self.retry_after = retry_after
        self.details = dict(details or {})


@dataclass(frozen=True, slots=True)
class FuseResult:
    image: bytes
    media_type: str
    request_id: str                         # the audit record's id
    watermark: str
    faces: int
    fused: int
    edits: dict[str, float] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: str
    state: str                              # queued, running, done, failed, cancelled
    frames_done: int = 0
    frames_total: int | None = None
    error: str | None = None
    result_url: str | None = None
    created: float = 0.0
    updated: float = 0.0

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class StreamFrame:
    seq: int
    image: bytes                            # encoded (media_type) or raw RGB rows (width x height x 3)
    media_type: str
    width: int = 0
    height: int = 0
    faces: int = 0
    watermark: str = ""
    skipped: int = 0
    error: str = ""


# ---- shared pieces ---------------------------------------------------------------------------------------
def _scheme(url: str) -> tuple[str, str, bool]:
    """("grpc" | "rest", target, tls): grpc://h:p -> ("grpc", "h:p", False); http(s) URLs stay whole."""
    parts = urlsplit(url)
    if parts.scheme in ("grpc", "grpcs"):
        if not parts.netloc:
            raise ValueError(f"{url!r}: write grpc://HOST:PORT")
        return "grpc", parts.netloc, parts.scheme == "grpcs"
    if parts.scheme in ("http", "https"):
        return "rest", url.rstrip("/"), parts.scheme == "https"
    raise ValueError(f"{url!r}: the URL must start with grpc://, grpcs://, http:// or https://")


def _job_from_json(d: Mapping[str, Any]) -> JobInfo:
    return JobInfo(id=d["id"], state=d["state"], frames_done=int(d.get("frames_done") or 0),
                   frames_total=d.get("frames_total"), error=d.get("error"), result_url=d.get("result_url"),
                   created=float(d.get("created") or 0), updated=float(d.get("updated") or 0))


def _job_from_pb(job: Any) -> JobInfo:
    return JobInfo(id=job.id, state=JOB_STATES.get(job.state, "unspecified"), frames_done=int(job.frames_done),
                   frames_total=int(job.frames_total) if job.HasField("frames_total") else None,
                   error=job.error or None, result_url=job.result_url or None, created=job.created, updated=job.updated)


def _grpc_error(exc: Any) -> LiveFuseError:
    """A grpc.RpcError (blocking or grpc.aio) as a LiveFuseError: the ErrorInfo's reason and the RetryInfo
    from the google.rpc.Status in the `grpc-status-details-bin` trailer."""
    from google.rpc import error_details_pb2, status_pb2

    code, retry, details = "", None, {}
    for key, value in (exc.trailing_metadata() or ()):
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for any_ in status.details:
            if any_.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                any_.Unpack(info)
                code, details = info.reason, dict(info.metadata)
            elif any_.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                r = error_details_pb2.RetryInfo()
                any_.Unpack(r)
                retry = r.retry_delay.seconds + r.retry_delay.nanos / 1e9
    name = exc.code().name if exc.code() is not None else "UNKNOWN"
    return LiveFuseError(code or name.lower(), exc.details() or "", name, retry, details)


def _fuse_pb(source: bytes, target: bytes, prompt: str, strength: float | None, consent: bool,
             edits: Mapping[str, float] | None, face_map: str, fmt: str, background: str = "",
             background_image: bytes | None = None, shape: float | None = None) -> Any:
    from livefuse.v1 import fusion_pb2 as pb

    req = pb.FuseRequest(source=source, target=target, prompt=prompt, consent=consent, edits=dict(edits or {}),
                         face_map=face_map, format=FORMATS[_fmt(fmt)], background=background,
                         background_image=background_image or b"")
    if strength is not None:
        req.strength = float(strength)
    if shape is not None:
        req.shape = float(shape)
    return req


def _fmt(fmt: str) -> str:
    fmt = fmt.lower().removeprefix("image/").replace("jpg", "jpeg")
    if fmt not in ("png", "jpeg"):
        raise ValueError("format is png or jpeg")
    return fmt


def _fuse_result_pb(r: Any) -> FuseResult:
    return FuseResult(image=r.image, media_type=r.media_type, request_id=r.request_id, watermark=r.watermark,
                      faces=r.faces, fused=r.fused, edits=dict(r.edits), timings_ms=dict(r.timings_ms))


def _job_pb(source: bytes, clip: bytes | None, target_url: str | None, clip_type: str, prompt: str,
            strength: float | None, consent: bool) -> Any:
    from livefuse.v1 import fusion_pb2 as pb

    if (clip is None) == (target_url is None):
        raise ValueError("give the clip's bytes or a target_url, one of them")
    req = pb.CreateJobRequest(source=source, clip_type=clip_type, prompt=prompt, consent=consent)
    if clip is not None:
        req.clip = clip
    else:
        req.target_url = target_url
    if strength is not None:
        req.strength = float(strength)
    return req


def _stream_requests(source: bytes, frames: Iterable[Any], consent: bool, prompt: str, strength: float | None,
                     fmt: str) -> Iterator[Any]:
    from livefuse.v1 import fusion_pb2 as pb

    controls = pb.Controls(prompt=prompt)
    if strength is not None:
        controls.strength = float(strength)
    yield pb.StreamRequest(start=pb.StreamStart(source=source, consent=consent, controls=controls,
                                                format=FORMATS[fmt.lower().replace("jpg", "jpeg")]))
    for seq, frame in enumerate(frames):
        yield pb.StreamRequest(frame=_frame_pb(pb, seq, frame))


def _frame_pb(pb: Any, seq: int, frame: Any) -> Any:
    """bytes (JPEG/PNG) or an H x W x 3 uint8 RGB array (anything with .shape and .tobytes())."""
    if isinstance(frame, (bytes, bytearray, memoryview)):
        return pb.Frame(seq=seq, encoded=bytes(frame))
    h, w = int(frame.shape[0]), int(frame.shape[1])
    return pb.Frame(seq=seq, raw=pb.RawImage(width=w, height=h, rgb=frame.tobytes()))


def _stream_frame(f: Any) -> StreamFrame:
    if f.WhichOneof("image") == "raw":
        return StreamFrame(f.seq, f.raw.rgb, f.media_type, f.raw.width, f.raw.height, f.faces, f.watermark,
                           f.skipped, f.error)
    return StreamFrame(f.seq, f.encoded, f.media_type, 0, 0, f.faces, f.watermark, f.skipped, f.error)


def _metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def _channel_options() -> list[tuple[str, int]]:
    return [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]


def _credentials(ca: str | None) -> Any:
    import grpc

    return grpc.ssl_channel_credentials(open(ca, "rb").read() if ca else None)


def _multipart(fields: Mapping[str, str], files: Mapping[str, tuple[str, bytes, str]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = bytearray()
    for name, value in fields.items():
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n').encode()
        out += value.encode() + b"\r\n"
    for name, (filename, data, media) in files.items():
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                f"Content-Type: {media}\r\n\r\n").encode()
        out += data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def _sniff(data: bytes) -> str:
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[4:8] == b"ftyp":
        return "video/quicktime" if data[8:10] == b"qt" else "video/mp4"
    if data[:4] == b"\x1aE\xdf\xa3":
        return "video/webm" if b"webm" in data[:64] else "video/x-matroska"
    return "application/octet-stream"


def _fuse_form(source: bytes, target: bytes, prompt: str, strength: float | None, consent: bool,
               edits: Mapping[str, float] | None, face_map: str, background: str = "",
               background_image: bytes | None = None, shape: float | None = None) -> tuple[bytes, str]:
    fields = {"consent": "true" if consent else ""}
    if background:
        fields["background"] = background
    if prompt:
        fields["prompt"] = prompt
    if strength is not None:
        fields["strength"] = repr(float(strength))
    if shape is not None:
        fields["shape"] = repr(float(shape))
    if edits:
        fields["edits"] = json.dumps(dict(edits))
    if face_map:
        fields["map"] = face_map
    files = {"source": ("source", source, _sniff(source)), "target": ("target", target, _sniff(target))}
    if background_image:
        files["background_image"] = ("background", background_image, _sniff(background_image))
    return _multipart(fields, files)


def _job_form(source: bytes, clip: bytes | None, target_url: str | None, clip_type: str, prompt: str,
              strength: float | None, consent: bool) -> tuple[bytes, str]:
    if (clip is None) == (target_url is None):
        raise ValueError("give the clip's bytes or a target_url, one of them")
    fields = {"consent": "true" if consent else ""}
    if prompt:
        fields["prompt"] = prompt
    if strength is not None:
        fields["strength"] = repr(float(strength))
    files = {"source": ("source", source, _sniff(source))}
    if clip is not None:
        files["target"] = ("clip", clip, clip_type or _sniff(clip))
    else:
        fields["target_url"] = str(target_url)
    return _multipart(fields, files)


def _fuse_result_rest(body: bytes, headers: Mapping[str, str]) -> FuseResult:
    faces, _, fused = (headers.get("X-LiveFuse-Faces") or "0/0").partition("/")
    timings = {}
    for item in (headers.get("Server-Timing") or "").split(","):
        name, _, dur = item.strip().partition(";dur=")
        if name and dur:
            timings[f"{name}_ms"] = float(dur)
    return FuseResult(image=body, media_type=headers.get("Content-Type", ""),
                      request_id=headers.get("X-LiveFuse-Audit-Record", ""),
                      watermark=headers.get("X-LiveFuse-Watermark", ""), faces=int(faces or 0), fused=int(fused or 0),
                      timings_ms=timings)


def _rest_error(status: int, body: bytes, headers: Mapping[str, str]) -> LiveFuseError:
    try:
        data = json.loads(body)
        code, message = str(data.get("code") or status), str(data.get("error") or "")
        extra = {k: v for k, v in data.items() if k not in ("code", "error")}
    except (ValueError, AttributeError):
        code, message, extra = str(status), body[:200].decode("utf-8", "replace"), {}
    retry = headers.get("Retry-After")
    return LiveFuseError(code, message, status, float(retry) if retry and retry.isdigit() else None, extra)


def _sse_events(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield json.loads("\n".join(data))
            data = []


# ---- blocking ----------------------------------------------------------------------------------------------
class Client:
    """Blocking client. `url`: grpc://, grpcs://, http:// or https://; `token`: the bearer token;
    `ca`: a PEM file the server's certificate is checked against (the system's store when None)."""

    def __init__(self, url: str, token: str | None = None, *, ca: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.kind, self.target, tls = _scheme(url)
        self.token, self.timeout = token, timeout
        self._channel: Any = None
        self._ssl: ssl.SSLContext | None = None
        if self.kind == "grpc":
            import grpc

            from livefuse.v1 import fusion_pb2_grpc

            opts = _channel_options()
            self._channel = (grpc.secure_channel(self.target, _credentials(ca), opts) if tls
                             else grpc.insecure_channel(self.target, opts))
            self._stub = fusion_pb2_grpc.FusionStub(self._channel)
        elif tls:
            self._ssl = ssl.create_default_context(cafile=ca)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()

    # -- gRPC --
    def _call(self, method: str, request: Any, timeout: float | None) -> Any:
        import grpc

        try:
            return getattr(self._stub, method)(request, timeout=timeout or self.timeout, metadata=_metadata(self.token))
        except grpc.RpcError as exc:
            raise _grpc_error(exc) from None

    # -- REST --
    def _http(self, method: str, path: str, body: bytes | None = None, content_type: str | None = None,
              accept: str | None = None, timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        req = urllib.request.Request(self.target + path, data=body, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if content_type:
            req.add_header("Content-Type", content_type)
        if accept:
            req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as resp:
                return resp.read(), dict(resp.headers.items())
        except urllib.error.HTTPError as exc:
            raise _rest_error(exc.code, exc.read(), dict(exc.headers.items())) from None

    # -- the methods --
    def fuse(self, source: bytes, target: bytes, *, consent: bool = False, prompt: str = "",
             strength: float | None = None, edits: Mapping[str, float] | None = None, face_map: str = "",
             format: str = "png", background: str = "", background_image: bytes | None = None,
             shape: float | None = None, timeout: float | None = None) -> FuseResult:
        """One photo: `source`'s face fused into `target`'s faces (both JPEG, PNG or WebP bytes); `background`
        ("blur", a CSS colour, "none") or `background_image` (a picture) goes behind the person; `shape`
        (0..1) is how far the face's proportions move toward the source's (None: the server's default)."""
        if self.kind == "grpc":
            req = _fuse_pb(source, target, prompt, strength, consent, edits, face_map, format, background, background_image,
                           shape)
            return _fuse_result_pb(self._call("Fuse", req, timeout))
        body, ctype = _fuse_form(source, target, prompt, strength, consent, edits, face_map, background, background_image,
                                 shape)
        data, headers = self._http("POST", "/v1/fuse", body, ctype, f"image/{_fmt(format)}", timeout)
        return _fuse_result_rest(data, headers)

    def create_job(self, source: bytes, clip: bytes | None = None, *, target_url: str | None = None,
                   clip_type: str = "", consent: bool = False, prompt: str = "", strength: float | None = None,
                   timeout: float | None = None) -> JobInfo:
        if self.kind == "grpc":
            req = _job_pb(source, clip, target_url, clip_type, prompt, strength, consent)
            return _job_from_pb(self._call("CreateJob", req, timeout))
        body, ctype = _job_form(source, clip, target_url, clip_type, prompt, strength, consent)
        return _job_from_json(json.loads(self._http("POST", "/v1/jobs", body, ctype, timeout=timeout)[0]))

    def get_job(self, job_id: str) -> JobInfo:
        if self.kind == "grpc":
            from livefuse.v1 import fusion_pb2 as pb

            return _job_from_pb(self._call("GetJob", pb.GetJobRequest(id=job_id), None))
        return _job_from_json(json.loads(self._http("GET", f"/v1/jobs/{job_id}")[0]))

    def cancel_job(self, job_id: str) -> JobInfo:
        if self.kind == "grpc":
            from livefuse.v1 import fusion_pb2 as pb

            return _job_from_pb(self._call("CancelJob", pb.CancelJobRequest(id=job_id), None))
        return _job_from_json(json.loads(self._http("DELETE", f"/v1/jobs/{job_id}")[0]))

    def watch_job(self, job_id: str, timeout: float | None = None) -> Iterator[JobInfo]:
        """The job each time it changes, until it ends (the last one has the result's URL)."""
        if self.kind == "grpc":
            import grpc

            from livefuse.v1 import fusion_pb2 as pb

            try:
                for job in self._stub.WatchJob(pb.WatchJobRequest(id=job_id), timeout=timeout,
                                               metadata=_metadata(self.token)):
                    yield _job_from_pb(job)
            except grpc.RpcError as exc:
                raise _grpc_error(exc) from None
            return
        req = urllib.request.Request(f"{self.target}/v1/jobs/{job_id}/events")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as resp:
                for event in _sse_events(resp):
                    yield _job_from_json(event)
        except urllib.error.HTTPError as exc:
            raise _rest_error(exc.code, exc.read(), dict(exc.headers.items())) from None

    def fuse_stream(self, source: bytes, frames: Iterable[Any], *, consent: bool = False, prompt: str = "",
                    strength: float | None = None, format: str = "jpeg",
                    timeout: float | None = None) -> Iterator[StreamFrame]:
        """Frames (JPEG/PNG bytes or H x W x 3 RGB arrays) in, fused frames out, in order; when frames are
        sent faster than they are fused, the newest waiting one wins (`StreamFrame.skipped`). gRPC only."""
        if self.kind != "grpc":
            raise ValueError("fuse_stream needs a grpc:// or grpcs:// URL")
        import grpc

        try:
            for f in self._stub.FuseStream(_stream_requests(source, frames, consent, prompt, strength, format),
                                           timeout=timeout, metadata=_metadata(self.token)):
                yield _stream_frame(f)
        except grpc.RpcError as exc:
            raise _grpc_error(exc) from None


# ---- asyncio -----------------------------------------------------------------------------------------------
class AsyncClient:
    """The same methods as `Client`, awaited (`watch_job` and `fuse_stream` are async iterators); gRPC
    through grpc.aio, REST through aiohttp. Use it as `async with AsyncClient(url, token) as lf:`."""

    def __init__(self, url: str, token: str | None = None, *, ca: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.kind, self.target, self._tls = _scheme(url)
        self.token, self.timeout, self._ca = token, timeout, ca
        self._channel: Any = None
        self._session: Any = None
        if self.kind == "grpc":
            import grpc.aio

            from livefuse.v1 import fusion_pb2_grpc

            opts = _channel_options()
            self._channel = (grpc.aio.secure_channel(self.target, _credentials(ca), opts) if self._tls
                             else grpc.aio.insecure_channel(self.target, opts))
            self._stub = fusion_pb2_grpc.FusionStub(self._channel)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        if self._session is not None:
            await self._session.close()

    async def _call(self, method: str, request: Any, timeout: float | None) -> Any:
        import grpc.aio

        call = getattr(self._stub, method)(request, timeout=timeout or self.timeout, metadata=_metadata(self.token))
        try:
            return await call
        except grpc.aio.AioRpcError as exc:
            raise _grpc_error(exc) from None

    def _http_session(self) -> Any:
        import aiohttp

        if self._session is None:
            ctx = ssl.create_default_context(cafile=self._ca) if self._tls else None
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            self._session = aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=ctx) if ctx else None)
        return self._session

    async def _http(self, method: str, path: str, body: bytes | None = None, content_type: str | None = None,
                    accept: str | None = None, timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        import aiohttp

        headers = {k: v for k, v in (("Content-Type", content_type), ("Accept", accept)) if v}
        async with self._http_session().request(method, self.target + path, data=body, headers=headers,
                                                timeout=aiohttp.ClientTimeout(total=timeout or self.timeout)) as resp:
            data = await resp.read()
            if resp.status >= 400:
                raise _rest_error(resp.status, data, dict(resp.headers))
            return data, dict(resp.headers)

    async def fuse(self, source: bytes, target: bytes, *, consent: bool = False, prompt: str = "",
                   strength: float | None = None, edits: Mapping[str, float] | None = None, face_map: str = "",
                   format: str = "png", background: str = "", background_image: bytes | None = None,
                   shape: float | None = None, timeout: float | None = None) -> FuseResult:
        if self.kind == "grpc":
            req = _fuse_pb(source, target, prompt, strength, consent, edits, face_map, format, background, background_image,
                           shape)
            return _fuse_result_pb(await self._call("Fuse", req, timeout))
        body, ctype = _fuse_form(source, target, prompt, strength, consent, edits, face_map, background, background_image,
                                 shape)
        data, headers = await self._http("POST", "/v1/fuse", body, ctype, f"image/{_fmt(format)}", timeout)
        return _fuse_result_rest(data, headers)

    async def create_job(self, source: bytes, clip: bytes | None = None, *, target_url: str | None = None,
                         clip_type: str = "", consent: bool = False, prompt: str = "", strength: float | None = None,
                         timeout: float | None = None) -> JobInfo:
        if self.kind == "grpc":
            req = _job_pb(source, clip, target_url, clip_type, prompt, strength, consent)
            return _job_from_pb(await self._call("CreateJob", req, timeout))
        body, ctype = _job_form(source, clip, target_url, clip_type, prompt, strength, consent)
        return _job_from_json(json.loads((await self._http("POST", "/v1/jobs", body, ctype, timeout=timeout))[0]))

    async def get_job(self, job_id: str) -> JobInfo:
        if self.kind == "grpc":
            from livefuse.v1 import fusion_pb2 as pb

            return _job_from_pb(await self._call("GetJob", pb.GetJobRequest(id=job_id), None))
        return _job_from_json(json.loads((await self._http("GET", f"/v1/jobs/{job_id}"))[0]))

    async def cancel_job(self, job_id: str) -> JobInfo:
        if self.kind == "grpc":
            from livefuse.v1 import fusion_pb2 as pb

            return _job_from_pb(await self._call("CancelJob", pb.CancelJobRequest(id=job_id), None))
        return _job_from_json(json.loads((await self._http("DELETE", f"/v1/jobs/{job_id}"))[0]))

    async def watch_job(self, job_id: str, timeout: float | None = None) -> AsyncIterator[JobInfo]:
        if self.kind == "grpc":
            import grpc.aio

            from livefuse.v1 import fusion_pb2 as pb

            call = self._stub.WatchJob(pb.WatchJobRequest(id=job_id), timeout=timeout, metadata=_metadata(self.token))
            try:
                async for job in call:
                    yield _job_from_pb(job)
            except grpc.aio.AioRpcError as exc:
                raise _grpc_error(exc) from None
            return
        import aiohttp

        async with self._http_session().get(f"{self.target}/v1/jobs/{job_id}/events",
                                            timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status >= 400:
                raise _rest_error(resp.status, await resp.read(), dict(resp.headers))
            data: list[str] = []
            async for raw in resp.content:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    yield _job_from_json(json.loads("\n".join(data)))
                    data = []

    async def fuse_stream(self, source: bytes, frames: Any, *, consent: bool = False, prompt: str = "",
                          strength: float | None = None, format: str = "jpeg",
                          timeout: float | None = None) -> AsyncIterator[StreamFrame]:
        """`frames`: an iterable or async iterable of JPEG/PNG bytes or RGB arrays. gRPC only."""
        if self.kind != "grpc":
            raise ValueError("fuse_stream needs a grpc:// or grpcs:// URL")
        import grpc.aio

        from livefuse.v1 import fusion_pb2 as pb

        async def requests() -> AsyncIterator[Any]:
            first = next(_stream_requests(source, (), consent, prompt, strength, format))
            yield first
            seq = 0
            if hasattr(frames, "__aiter__"):
                async for frame in frames:
                    yield pb.StreamRequest(frame=_frame_pb(pb, seq, frame))
                    seq += 1
            else:
                for frame in frames:
                    yield pb.StreamRequest(frame=_frame_pb(pb, seq, frame))
                    seq += 1

        call = self._stub.FuseStream(requests(), timeout=timeout, metadata=_metadata(self.token))
        try:
            async for f in call:
                yield _stream_frame(f)
        except grpc.aio.AioRpcError as exc:
            raise _grpc_error(exc) from None
