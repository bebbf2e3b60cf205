"""livefuse.client against the real server (its REST and gRPC ports side by side): the same call gives the
same kind of answer over either, blocking and asyncio alike; refusals arrive as LiveFuseError with the
server's code; and the client package imports nothing of the server."""

from __future__ import annotations

import ast
import asyncio
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from livefuse.client import AsyncClient, Client, LiveFuseError
from tests.streamer.rpc.conftest import serve_rpc
from tests.streamer.web.api.conftest import api_world, encode, make_clip  # noqa: F401 - the API tests' world

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_package_imports_nothing_of_the_server():
    for path in (ROOT / "livefuse").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] not in ("streamer", "engines", "kernels", "bench"), f"{path} imports {name}"


@pytest.fixture
async def urls(api_world):  # noqa: F811
    async with serve_rpc(api_world.product) as served:
        yield {"grpc": f"grpc://{served.grpc_target}", "rest": served.http_url}


def _image(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("kind", ["grpc", "rest"])
async def test_blocking_client_fuses_and_refuses(urls, api_world, astronaut, grace_hopper, kind):  # noqa: F811
    token = api_world.tokens["alice"]

    def calls():
        with Client(urls[kind], token=token) as lf:
            out = lf.fuse(encode(astronaut), encode(grace_hopper), consent=True, prompt="a warm smile", format="jpeg")
            flat, shaped = (lf.fuse(encode(astronaut), encode(grace_hopper), consent=True, shape=x) for x in (0.0, 1.0))
            try:
                lf.fuse(encode(astronaut), encode(grace_hopper), consent=True, shape=1.5)
            except LiveFuseError as exc:
                bad_shape = exc
            try:
                lf.fuse(encode(astronaut), encode(grace_hopper))
            except LiveFuseError as exc:
                return out, exc, flat, shaped, bad_shape
        raise AssertionError("a source without consent was not refused")

    out, exc, flat, shaped, bad_shape = await asyncio.to_thread(calls)
    assert out.media_type == "image/jpeg" and _image(out.image).shape == grace_hopper.shape
    assert out.faces == 1 and out.fused == 1 and len(out.watermark) == 16 and len(out.request_id) == 32
    assert exc.code == "source_no_consent"
    assert exc.status == ("FAILED_PRECONDITION" if kind == "grpc" else 422)
    # the shape control reaches the server: the whole shape moves the face's features, a bad one is refused
    diff = np.abs(_image(flat.image).astype(int) - _image(shaped.image).astype(int)).max(axis=2)
    assert (diff > 8).sum() > 100
    assert bad_shape.code == "bad_request" and "shape" in str(bad_shape)


@pytest.mark.parametrize("kind", ["grpc", "rest"])
async def test_async_client_runs_a_clip_job_to_its_result(urls, api_world, astronaut, grace_hopper, tmp_path, kind):  # noqa: F811
    clip = make_clip(tmp_path / "clip.mp4", grace_hopper, 8).read_bytes()
    async with AsyncClient(urls[kind], token=api_world.tokens["alice"]) as lf:
        job = await lf.create_job(encode(astronaut), clip, consent=True)
        seen = [j async for j in lf.watch_job(job.id, timeout=120)]
        again = await lf.get_job(job.id)
        with pytest.raises(LiveFuseError) as info:
            await lf.get_job("0" * 32)
    assert seen[-1].state == "done" and seen[-1].frames_done == 8 and seen[-1].result_url
    assert again.state == "done" and again.result_url == seen[-1].result_url
    assert info.value.code == "not_found"


async def test_async_client_streams_frames_over_grpc(urls, api_world, astronaut, grace_hopper):  # noqa: F811
    async with AsyncClient(urls["grpc"], token=api_world.tokens["alice"]) as lf:
        frames = [grace_hopper, np.roll(grace_hopper, 8, axis=1)]                        # raw RGB arrays
        out = [f async for f in lf.fuse_stream(encode(astronaut), frames, consent=True, format="jpeg")]
        with pytest.raises(ValueError):
            async with AsyncClient(urls["rest"]) as rest:
                [f async for f in rest.fuse_stream(encode(astronaut), frames)]
    assert [f.seq for f in out] == [0, 1] and all(f.faces == 1 and f.media_type == "image/jpeg" for f in out)
    assert _image(out[0].image).shape == grace_hopper.shape


def test_a_url_names_its_transport():
    for bad in ("localhost:50051", "ftp://x", "grpc://"):
        with pytest.raises(ValueError):
            Client(bad)


async def test_the_readme_example_fuses_a_photo(urls, api_world, astronaut, grace_hopper, tmp_path, monkeypatch):  # noqa: F811
    """The README's five lines, run as written against a real server (its URL and a token filled in)."""
    import re

    text = (ROOT / "README.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "from livefuse.client import Client" in b]
    (tmp_path / "me.jpg").write_bytes(encode(astronaut))
    (tmp_path / "photo.jpg").write_bytes(encode(grace_hopper))
    monkeypatch.chdir(tmp_path)
    code = code.replace("grpc://127.0.0.1:50051", urls["grpc"])
    await asyncio.to_thread(exec, code, {"TOKEN": api_world.tokens["alice"]})
    assert _image((tmp_path / "fused.png").read_bytes()).shape == grace_hopper.shape
