"""The upload decoder keeps decoded memory within its budget, refuses the rest at once, and always gives
the budget back."""

from __future__ import annotations

import asyncio
import io
import threading

import numpy as np
import pytest
from PIL import Image

from engines.sources import SourceConfig, SourceRefused
from streamer.web import uploads
from streamer.web.uploads import DecoderBusy, UploadDecoder

BIG = 4096
BIG_COST = BIG * BIG * 3


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


@pytest.fixture(scope="module")
def astronaut_png(astronaut) -> bytes:
    return _png(astronaut)


@pytest.fixture(scope="module")
def big_png(astronaut) -> bytes:
    """The astronaut enlarged to 4096 x 4096: a real photo that decodes to 50 MB."""
    return _png(np.ascontiguousarray(np.repeat(np.repeat(astronaut, 8, axis=0), 8, axis=1)))


def test_decodes_a_real_photo(astronaut, astronaut_png):
    async def go():
        decoder = UploadDecoder()
        try:
            return await decoder.decode(astronaut_png, SourceConfig(max_pixels=1 << 20)), decoder.pending_bytes
        finally:
            decoder.close()

    image, pending = asyncio.run(go())
    assert (image == astronaut).all() and pending == 0


def test_six_big_uploads_with_a_budget_for_two(big_png, monkeypatch):
    threads: set[str] = set()
    real = uploads.decode_image

    def recording(*a, **k):
        threads.add(threading.current_thread().name)
        return real(*a, **k)

    monkeypatch.setattr(uploads, "decode_image", recording)

    async def go():
        decoder = UploadDecoder(max_workers=2, max_pending_bytes=2 * BIG_COST)
        try:
            results = await asyncio.gather(*(decoder.decode(big_png, SourceConfig(max_pixels=BIG * BIG)) for _ in range(6)),
                                           return_exceptions=True)
            return results, decoder.pending_bytes
        finally:
            decoder.close()

    results, pending = asyncio.run(go())
    busy = [r for r in results if isinstance(r, DecoderBusy)]
    done = [r for r in results if isinstance(r, np.ndarray)]
    assert len(busy) == 4 and len(done) == 2
    assert all(r.shape == (BIG, BIG, 3) for r in done)
    assert all(b.reason == "busy" and "try again" in str(b) for b in busy)
    assert pending == 0
    assert threads and all(name.startswith("upload-decode") for name in threads)  # its own pool


def test_an_image_larger_than_the_whole_budget_is_too_large_not_busy(big_png):
    async def go():
        decoder = UploadDecoder(max_pending_bytes=BIG_COST - 1)
        try:
            await decoder.decode(big_png, SourceConfig(max_pixels=BIG * BIG))
        finally:
            decoder.close()

    with pytest.raises(SourceRefused, match="budget") as err:
        asyncio.run(go())
    assert err.value.reason == "too_large"


def test_header_refusals_cost_no_budget(astronaut_png):
    async def go():
        decoder = UploadDecoder()
        errors = []
        for data, limit in ((b"not an image", 1 << 20), (astronaut_png, 1000)):
            try:
                await decoder.decode(data, SourceConfig(max_pixels=limit))
            except SourceRefused as exc:
                errors.append(exc.reason)
        decoder.close()
        return errors, decoder.pending_bytes

    assert asyncio.run(go()) == (["bad_image", "too_large"], 0)


def test_a_corrupt_body_releases_its_budget(astronaut_png):
    truncated = astronaut_png[: len(astronaut_png) // 2]  # a valid header, then nothing

    async def go():
        decoder = UploadDecoder(max_pending_bytes=512 * 512 * 3)
        try:
            with pytest.raises(SourceRefused, match="truncated|corrupt"):
                await decoder.decode(truncated, SourceConfig(max_pixels=1 << 20))
            assert decoder.pending_bytes == 0
            return (await decoder.decode(astronaut_png, SourceConfig(max_pixels=1 << 20))).shape  # the budget is back
        finally:
            decoder.close()

    assert asyncio.run(go()) == (512, 512, 3)


def test_cancelled_decodes_release_their_budget(big_png):
    async def go():
        decoder = UploadDecoder(max_workers=1, max_pending_bytes=2 * BIG_COST)
        running = asyncio.ensure_future(decoder.decode(big_png, SourceConfig(max_pixels=BIG * BIG)))
        queued = asyncio.ensure_future(decoder.decode(big_png, SourceConfig(max_pixels=BIG * BIG)))
        await asyncio.sleep(0.01)
        assert decoder.pending_bytes == 2 * BIG_COST
        queued.cancel()
        running.cancel()
        await asyncio.gather(running, queued, return_exceptions=True)
        await asyncio.to_thread(decoder.close)  # the running decode finishes, then lets go
        return decoder.pending_bytes

    assert asyncio.run(go()) == 0


def test_text_is_not_taken_for_a_path():
    async def go():
        decoder = UploadDecoder()
        try:
            await decoder.decode("/etc/passwd", SourceConfig(max_pixels=1 << 20))  # type: ignore[arg-type]
        finally:
            decoder.close()

    with pytest.raises(SourceRefused, match="bytes"):
        asyncio.run(go())
