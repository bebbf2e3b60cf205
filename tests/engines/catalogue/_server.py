"""A real HTTP server on loopback for the download tests: serves files by path with HTTP Range (206 +
Content-Range), and can be told to cut a response short (headers promise the whole file, the body stops
after N bytes and the connection closes), answer an error status, or ignore Range. Records every request."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Script:
    files: dict[str, bytes] = field(default_factory=dict)
    cuts: dict[str, list[int]] = field(default_factory=dict)       # path -> bytes to send on each next request
    statuses: dict[str, list[int]] = field(default_factory=dict)   # path -> statuses to answer next
    ignore_range: set[str] = field(default_factory=set)
    redirects: dict[str, str] = field(default_factory=dict)        # path -> the path a 302 points at
    log: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    script: Script
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:   # quiet
        pass

    def do_GET(self) -> None:
        s = self.script
        rng = self.headers.get("Range")
        with s.lock:
            s.log.append((self.path, rng))
            status_q = s.statuses.get(self.path)
            status = status_q.pop(0) if status_q else None
            cut_q = s.cuts.get(self.path)
            cut = cut_q.pop(0) if cut_q else None
        if self.path in s.redirects:
            self.send_response(302)
            self.send_header("Location", s.redirects[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if status is not None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = s.files.get(self.path)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start = 0
        if rng and self.path not in s.ignore_range:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if cut is not None:
            self.send_header("Connection", "close")
        self.end_headers()
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


class FileServer:
    def __init__(self) -> None:
        self.script = Script()
        handler = type("Handler", (_Handler,), {"script": self.script})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
