"""Recording a live session to the results store: the session's processed video (and the sender's audio,
held in step with it) written as fragmented MP4 by aiortc's MediaRecorder while the session runs, sent to
the store in parts as the file grows (S3: `GrowingUpload`), and finalised when the session ends. A
store that fails leaves no object (the upload is aborted) and the recording says why."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FRAGMENTED_MP4 = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}   # appended to, never rewritten


class _LocalGrowing:
    """A local results folder: the finished file is put in place at the end (a rename, whole or not at all)."""

    def __init__(self, store: Any, key: str, path: Path) -> None:
        self.store, self.key, self.path = store, key, path

    def poll(self) -> int:
        return 0

    def finish(self) -> Any:
        return self.store.put_file(self.key, self.path, "video/mp4")

    def abort(self) -> None:
        return None


def growing_upload(store: Any, key: str, path: Path) -> Any:
    from streamer.storage.s3 import GrowingUpload, S3Store

    if isinstance(store, S3Store):
        return GrowingUpload(store, key, path, "video/mp4")
    return _LocalGrowing(store, key, path)


class SessionRecording:
    def __init__(self, session_id: str, video: Any, audio: Any, store: Any, *, key: str | None = None,
                 poll_s: float = 1.0, url_expires_s: int = 3600) -> None:
        self.session_id = session_id
        self.video, self.audio, self.store = video, audio, store
        self.key = key or f"recordings/{session_id}.mp4"
        self.poll_s, self.url_expires_s = poll_s, url_expires_s
        self.state = "starting"
        self.error: str | None = None
        self.parts = 0
        self._folder = Path(tempfile.mkdtemp(prefix="livefuse-rec-"))
        self.path = self._folder / "recording.mp4"
        self._recorder: Any = None
        self._upload: Any = None
        self._poller: asyncio.Task | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        from aiortc.contrib.media import MediaRecorder

        self._recorder = MediaRecorder(str(self.path), format="mp4", options=dict(FRAGMENTED_MP4))
        self._recorder.addTrack(self.video)
        if self.audio is not None:
            self._recorder.addTrack(self.audio)
        await self._recorder.start()
        self._upload = growing_upload(self.store, self.key, self.path)
        self.state = "recording"
        self._poller = asyncio.ensure_future(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                self.parts += await asyncio.to_thread(self._upload.poll)
            except Exception as exc:   # the store is down past its retries: stop sending, say why
                self.state, self.error = "failed", f"uploading the recording failed: {exc}"
                log.warning("session %s: %s", self.session_id, self.error)
                return

    async def stop(self) -> None:
        """Finalise: the recorder closes the file, the rest goes up, the upload completes."""
        if self._stopped.is_set():
            return
        if self._poller is not None:
            self._poller.cancel()
        try:
            if self._recorder is not None:
                await self._recorder.stop()
            if self.state == "recording":
                self.state = "uploading"
                stored = await asyncio.to_thread(self._upload.finish)
                self.parts = stored.parts
                self.state = "done"
            elif self._upload is not None:
                await asyncio.to_thread(self._upload.abort)
        except Exception as exc:
            self.state, self.error = "failed", f"finishing the recording failed: {exc}"
            log.warning("session %s: %s", self.session_id, self.error)
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._stopped.set()

    async def wait(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._stopped.wait(), timeout)

    def info(self) -> dict[str, Any]:
        url = None
        if self.state == "done":
            url = self.store.presigned_url(self.key, self.url_expires_s)
        return {"state": self.state, "key": self.key, "url": url, "parts": self.parts, "error": self.error}
