"""The real product behind the /v1 routes, built once for the API tests: an audit log, a tokens file
(alice and bob, generous rates so a burst of requests is not rate-limited) and a denylist holding the
Grace Hopper photo as a protected identity."""

from __future__ import annotations

import contextlib
import dataclasses
import fractions
import io
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from PIL import Image

from streamer.app.assembly import Product, ProductConfig
from streamer.config import ServerConfig
from streamer.safety.audit import iter_records
from streamer.safety.auth import TokenStore
from streamer.web.kit import SafetyConfig
from streamer.web.server import SERVER_KEY, create_app
from streamer.services import with_hooks


def encode(img: np.ndarray, fmt: str = "JPEG", quality: int = 92) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return buf.getvalue()


@dataclasses.dataclass
class ApiWorld:
    product: Product
    audit_path: Path
    tokens: dict[str, str]          # name -> raw token
    protected: np.ndarray           # a photo of the protected identity

    def headers(self, who: str = "alice", **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}", **extra}

    def records(self, event: str | None = None, timeout: float = 5.0) -> list[dict]:
        """The audit log's records so far (after the writer has caught up)."""
        import json

        self.product.safety.audit.flush(timeout)
        out = [json.loads(line) for _, _, line in iter_records(self.audit_path) if line.strip()]
        return [r for r in out if event is None or r["event"] == event]


@pytest.fixture(scope="package")
def api_world(tmp_path_factory, grace_hopper):
    root = tmp_path_factory.mktemp("api")
    store = TokenStore()
    tokens = {name: store.issue(name, rate_per_minute=60000, burst=200, max_sessions=4) for name in ("alice", "bob")}
    store.save(root / "tokens.json")
    deny = root / "protected"
    deny.mkdir()
    Image.fromarray(grace_hopper).save(deny / "grace.jpg", quality=95)
    audit_path = root / "audit.jsonl"
    product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(audit_path), tokens_file=str(root / "tokens.json"),
                                                        denylist_dir=str(deny)),
                                    results=str(root / "results")))
    product.warm_up()
    yield ApiWorld(product, audit_path, tokens, grace_hopper)
    product.close()


@pytest.fixture
async def api(api_world):
    """(base url, client session, LiveFuseServer) on loopback; the product outlives each app."""
    async with serve_product(api_world.product) as served:
        yield served


@contextlib.asynccontextmanager
async def serve_product(product, config: ServerConfig | None = None, **service_changes):
    """The product's services on a loopback server (its shutdown left to the product's owner)."""
    services = with_hooks(product, shutdown=lambda: None, **service_changes)
    app = create_app(config or ServerConfig(), services)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    http = aiohttp.ClientSession()
    try:
        yield str(server.make_url("")).rstrip("/"), http, app[SERVER_KEY]
    finally:
        await http.close()
        await server.close()


def _form(source: bytes | None, target: tuple[bytes, str, str] | None, fields: dict[str, str]) -> aiohttp.FormData:
    """The source photo, the target (data, filename, type) and plain fields, each part only where given."""
    form = aiohttp.FormData()
    if source is not None:
        form.add_field("source", source, filename="source.jpg", content_type="image/jpeg")
    if target is not None:
        form.add_field("target", target[0], filename=target[1], content_type=target[2])
    for k, v in fields.items():
        form.add_field(k, v)
    return form


def fuse_form(source: bytes | None, target: bytes | None, **fields: str) -> aiohttp.FormData:
    return _form(source, None if target is None else (target, "target.jpg", "image/jpeg"), fields)


def wait_until(pred, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def make_clip(path: Path, photo: np.ndarray, frames: int = 24, size: tuple[int, int] = (320, 240)) -> Path:
    """An H.264 + AAC mp4: the photo moving as a person before a webcam does, and a 440 Hz tone (1 s)."""
    import av

    from bench._product import moving_face

    w, h = size
    with av.open(str(path), "w") as out:
        v = out.add_stream("libx264", rate=24)
        v.width, v.height, v.pix_fmt = w, h, "yuv420p"
        v.options = {"crf": "18", "preset": "ultrafast"}
        a = out.add_stream("aac", rate=48000)
        for i in range(frames):
            f = av.VideoFrame.from_ndarray(moving_face(photo, w, h, i), format="rgb24")
            f.pts, f.time_base = i, fractions.Fraction(1, 24)
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode(None):
            out.mux(p)
        t = np.arange(48000) / 48000.0
        tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
        for k in range(0, len(tone), 1024):
            af = av.AudioFrame.from_ndarray(tone[None, k:k + 1024], format="fltp", layout="mono")
            af.sample_rate, af.pts, af.time_base = 48000, k, fractions.Fraction(1, 48000)
            for p in a.encode(af):
                out.mux(p)
        for p in a.encode(None):
            out.mux(p)
    return path


def job_form(source: bytes | None, clip: bytes | None, **fields: str) -> aiohttp.FormData:
    return _form(source, None if clip is None else (clip, "clip.mp4", "video/mp4"), fields)
