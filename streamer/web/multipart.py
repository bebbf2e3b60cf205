"""The one multipart/form-data reader every upload route uses (`POST /v1/fuse`, `POST /v1/jobs`,
`POST /sessions/{id}/source`): a streaming parser over the request body that holds each bound itself and
maps every failure to the status a client can act on, always with a `code`:

- 400 `bad_multipart`: no boundary or one RFC 2046 does not allow (over 70 characters, odd characters),
  no opening delimiter, a part header line over `MAX_HEADER_LINE` bytes, more than `MAX_PART_HEADERS`
  header lines, a control byte or NUL in a header or filename, a part with no form-data name, a body
  that ends (or is cut by its Content-Length) before its closing delimiter; `incomplete_body` when the
  client goes away; `repeated_part` when a name comes twice (every field is single-valued);
  `bad_request` when a required part is missing; `bad_field` for a text field that is not UTF-8.
- 408 `read_timeout` (a stall) or `too_slow` (below the minimum rate): `streamer.web.httpkit.BodyClock`.
- 413 `<name>_too_large` (a file part over its limit), `field_too_large`, `too_many_parts`, `too_large`
  (a Content-Length over the whole form's limit, refused before a byte is read).
- 415 `unsupported_media_type`: not multipart/form-data, or a file part of a type its route does not take.

Nothing is read whole before its limit is checked: file parts go to memory or to a spool file chunk by
chunk, each chunk counted. aiohttp's own multipart reader is not used: it reads header lines and header
counts without bounds and reports malformed bodies as exceptions a route would turn into 500s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from aiohttp import web
from aiohttp.helpers import parse_mimetype
from aiohttp.multipart import BadContentDispositionHeader, content_disposition_filename, parse_content_disposition

from streamer.config import BodyLimits
from streamer.web.httpkit import CLOSE, BodyClock, Refused

MAX_FORM_PARTS = 16       # an upload holds an image or two and a few fields (consent, prompt, strength, ...)
MAX_FIELD_BYTES = 1024    # a text field, unless its route names a larger limit (the prompt's)
MAX_HEADER_LINE = 8192    # one part header line, bytes
MAX_PART_HEADERS = 16     # header lines per part
MAX_PREAMBLE = 1024       # bytes before the first delimiter (RFC 2046 allows a preamble; clients send none)
FORM_OVERHEAD = 64 * 1024   # a form's fields and part headers, besides its files
READ_SIZE = 64 * 1024

_BCHARS = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")   # RFC 2046 5.1.1
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def malformed(reason: str, code: str = "bad_multipart") -> Refused:
    return Refused(400, f"malformed multipart body: {reason}", CLOSE, code=code)


@dataclass(frozen=True, slots=True)
class FilePart:
    """A file part a route takes: its byte limit, its media types (application/octet-stream and none are
    taken too: the image or clip decoder decides) and, for large files, `spool(media_type, filename)`:
    the file it is written to as it arrives (None: kept in memory)."""

    limit: int
    types: tuple[str, ...]
    spool: Callable[[str, str], Path] | None = None


@dataclass(frozen=True, slots=True)
class FieldLimit:
    """A text field's byte limit, and the refusal past it (a field with a limit of its own in characters,
    such as the prompt's 500, refuses with that limit's status and code)."""

    limit: int
    status: int = 413
    code: str = "field_too_large"
    reason: str = ""


@dataclass(frozen=True, slots=True)
class FormSpec:
    files: Mapping[str, FilePart]
    required: tuple[str, ...] = ()                           # file parts the form must have
    fields: Mapping[str, FieldLimit] = field(default_factory=dict)   # per field name (others: MAX_FIELD_BYTES, 413)
    max_parts: int = MAX_FORM_PARTS

    @property
    def max_body(self) -> int:
        return sum(f.limit for f in self.files.values()) + sum(f.limit for f in self.fields.values()) + FORM_OVERHEAD


@dataclass(slots=True)
class Upload:
    """A file part as received: its bytes (memory) or its spool file, its declared type and filename."""

    name: str
    media_type: str
    filename: str
    size: int
    data: bytes | None = None
    path: Path | None = None


@dataclass(slots=True)
class Form:
    files: dict[str, Upload]
    fields: dict[str, str]


def boundary_of(request: web.Request) -> bytes:
    """The request's multipart boundary, or 415 (not multipart/form-data) / 400 (a bad boundary)."""
    if request.content_type != "multipart/form-data":
        raise Refused(415, f"content type {request.content_type[:100] or 'none'!r} not accepted; send multipart/form-data",
                      code="unsupported_media_type")
    boundary = parse_mimetype(request.headers.get("Content-Type", "")).parameters.get("boundary", "")
    if not boundary:
        raise malformed("the Content-Type names no boundary")
    if len(boundary) > 70 or not _BCHARS.fullmatch(boundary):
        raise malformed("the boundary is not 1 to 70 characters of those RFC 2046 allows")
    return boundary.encode("ascii")


class _Body:
    """The body as a buffer refilled from the request through its clock."""

    def __init__(self, request: web.Request, clock: BodyClock) -> None:
        self.request, self.clock = request, clock
        self.buf = bytearray()
        self.eof = False

    async def fill(self) -> bool:
        if self.eof:
            return False
        chunk = await self.clock.read(self.request.content.read(READ_SIZE))
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    async def until(self, token: bytes, most: int, what: str) -> bytes:
        """The bytes before `token` (consumed with it), at most `most` of them; 400 past that or at EOF."""
        start = 0
        while True:
            i = self.buf.find(token, start)
            if i >= 0:
                if i > most:
                    raise malformed(f"{what} is over {most} bytes")
                out = bytes(self.buf[:i])
                del self.buf[:i + len(token)]
                return out
            if len(self.buf) > most + len(token):
                raise malformed(f"{what} is over {most} bytes")
            start = max(0, len(self.buf) - len(token) + 1)
            if not await self.fill():
                raise malformed(f"the body ended inside {what}")

    async def need(self, n: int, what: str) -> None:
        while len(self.buf) < n:
            if not await self.fill():
                raise malformed(f"the body ended inside {what}")


def _header(line: bytes) -> tuple[str, str]:
    if line[:1] in (b" ", b"\t"):
        raise malformed("a part header is folded over lines")
    name, sep, value = line.partition(b":")
    if not sep or not _TOKEN.fullmatch(name):
        raise malformed("a part header line is not 'Name: value'")
    text = value.strip(b" \t").decode("latin-1")
    if _CONTROL.search(text):
        raise malformed(f"the {name.decode()[:40]} header of a part holds a control character")
    return name.decode("ascii").lower(), text


async def read_form(request: web.Request, spec: FormSpec, limits: BodyLimits = BodyLimits(),
                    on_bytes: Callable[[int], None] | None = None) -> Form:
    """The whole form, every bound held; see the module for the refusals. `on_bytes(n)` hears each chunk
    kept in memory before it is kept (a memory budget's lease; what it raises ends the read). Spool files
    it wrote stay where `spool` put them (on a refusal too: the caller owns their folder and removes it)."""
    boundary = boundary_of(request)
    if request.content_length is not None and request.content_length > spec.max_body:
        raise Refused(413, f"body is {request.content_length} bytes, the limit is {spec.max_body}", CLOSE, code="too_large")
    body = _Body(request, BodyClock(limits, "multipart body"))
    delimiter = b"--" + boundary
    await body.until(delimiter, MAX_PREAMBLE, "the preamble before the first boundary")
    form = Form({}, {})
    seen: set[str] = set()
    separator = b"\r\n" + delimiter
    while True:
        await body.need(2, "a boundary line")
        if body.buf[:2] == b"--":
            break                          # the closing delimiter; an epilogue is not read
        padding = await body.until(b"\r\n", 256, "a boundary line")
        if padding.strip(b" \t"):
            raise malformed("a boundary line has text after the boundary")
        if len(seen) >= spec.max_parts:
            raise Refused(413, f"the form has more than {spec.max_parts} parts", CLOSE, code="too_many_parts")
        headers: dict[str, str] = {}
        for count in range(MAX_PART_HEADERS + 1):
            line = await body.until(b"\r\n", MAX_HEADER_LINE, "a part header line")
            if not line:
                break
            if count == MAX_PART_HEADERS:
                raise malformed(f"a part has more than {MAX_PART_HEADERS} header lines")
            name, value = _header(line)
            if name in headers:
                raise malformed(f"a part repeats its {name} header")
            headers[name] = value
        try:
            disposition, params = parse_content_disposition(headers.get("content-disposition"))
        except (BadContentDispositionHeader, ValueError):
            disposition, params = None, {}
        name = params.get("name", "")
        if disposition != "form-data" or not name:
            raise malformed("a part has no Content-Disposition: form-data with a name")
        filename = content_disposition_filename(params, "filename") or ""
        if _CONTROL.search(name) or _CONTROL.search(filename):
            raise malformed("a part's name or filename holds a control character")
        if name in seen:
            raise Refused(400, f"the form has more than one {name[:40]!r} part; each is sent once", CLOSE, code="repeated_part")
        seen.add(name)
        media_type = headers.get("content-type", "").split(";")[0].strip().lower()
        part = spec.files.get(name)
        if part is not None and media_type not in part.types + ("application/octet-stream", ""):
            raise Refused(415, f"the {name} part has type {media_type[:60]!r}; send {', '.join(part.types)}",
                          CLOSE, code="unsupported_media_type")
        if part is None:
            bound = spec.fields.get(name) or FieldLimit(MAX_FIELD_BYTES)
        else:
            bound = FieldLimit(part.limit, 413, f"{name}_too_large", f"the {name[:40]} part is over the limit of {part.limit} bytes")
        sink = _Sink(name, bound, part.spool(media_type, filename) if part is not None and part.spool else None, on_bytes)
        try:
            await _part_body(body, separator, sink)
        finally:
            sink.close()
        if part is None:
            try:
                form.fields[name] = sink.data().decode("utf-8")
            except UnicodeDecodeError:
                raise Refused(400, f"form field {name[:40]!r} is not UTF-8 text", CLOSE, code="bad_field") from None
        else:
            form.files[name] = Upload(name, media_type, filename, sink.size, sink.data() if sink.path is None else None,
                                      sink.path)
    missing = [n for n in spec.required if n not in form.files]
    if missing:
        raise Refused(400, f"multipart body has no {' / '.join(repr(m) for m in missing)} part", code="bad_request")
    return form


class _Sink:
    """Where a part's bytes go, counted against its limit."""

    def __init__(self, name: str, bound: FieldLimit, path: Path | None,
                 on_bytes: Callable[[int], None] | None = None) -> None:
        self.name, self.bound, self.path, self.on_bytes = name, bound, path, on_bytes
        self.size = 0
        self._chunks: list[bytes] = []
        self._file = path.open("wb") if path is not None else None

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.bound.limit:
            b = self.bound
            raise Refused(b.status, b.reason or f"form field {self.name[:40]!r} is over the limit of {b.limit} bytes",
                          CLOSE, code=b.code)
        if self._file is not None:
            self._file.write(chunk)   # to the page cache, 64 KiB at a time: a clip never sits in memory whole
        else:
            if self.on_bytes is not None:
                self.on_bytes(len(chunk))
            self._chunks.append(chunk)

    def data(self) -> bytes:
        return b"".join(self._chunks)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


async def _part_body(body: _Body, separator: bytes, sink: _Sink) -> None:
    """A part's bytes into `sink`, up to the next delimiter (consumed)."""
    keep = len(separator) - 1
    while True:
        i = body.buf.find(separator)
        if i >= 0:
            if i:
                sink.write(bytes(body.buf[:i]))
            del body.buf[:i + len(separator)]
            return
        if len(body.buf) > keep:
            n = len(body.buf) - keep
            sink.write(bytes(body.buf[:n]))
            del body.buf[:n]
        if not await body.fill():
            raise malformed(f"the body ended inside the {sink.name[:40]!r} part, before its closing boundary")
