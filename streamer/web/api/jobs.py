"""Clip jobs: a clip and a source face in, the fused clip (audio kept) out to the results store, in the
background. A job's state lives behind a small interface (`JobStates`; here in memory) so that a shared
store can stand in for it; the queue is bounded and refuses work it cannot take (`QueueFull`: 503).

A job belongs to the principal that created it (another one is told 404, as for sessions). Its states:
queued -> running -> done | failed | cancelled. A runner that raises fails the job with the reason; a
running job whose heartbeat stops (its runner is gone) is marked failed by `reap`; a failed upload (the
store down past its retries) fails the job with the store's reason and leaves no object. Jobs do not
depend on a client staying connected.
"""

from __future__ import annotations

import logging
import queue
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from engines.prompt.language import MAX_PROMPT_CHARS

from streamer.storage.base import ResultStore, StoreError, media_type
from streamer.storage.edge import result_key

log = logging.getLogger(__name__)

TERMINAL = ("done", "failed", "cancelled")
# what a running job holds of the memory budget, in decoded frames: the decoded frame, the pipeline's
# working copies and watermark pattern, the encoder's frame
CLIP_FRAME_HOLD = 6.0


def frame_pixels(clip: Path) -> int:
    """Pixels in a frame of the clip's first video stream (0 when it has none or is unreadable)."""
    import av

    try:
        with av.open(str(clip)) as container:
            v = container.streams.video[0]
            return int(v.codec_context.width or 0) * int(v.codec_context.height or 0)
    except (av.error.FFmpegError, IndexError, OSError):
        return 0
STATES = ("queued", "running") + TERMINAL


@dataclass(frozen=True, slots=True)
class JobConfig:
    workers: int = 1                 # clips run one at a time per worker (0: this replica accepts jobs, others run them)
    max_queued: int = 16             # beyond this, 503 + Retry-After
    spool: str = ""                  # where uploaded clips wait ("" = a temporary folder)
    stale_after_s: float = 60.0      # a running job with no heartbeat for this long has lost its runner
    url_expires_s: int = 3600        # presigned result URLs
    progress_every_s: float = 0.2    # how often progress is written to the state store
    input_allow: tuple[str, ...] = ()   # URL prefixes a job's `target_url` may name (s3://bucket/, https://host/); none by default


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    owner: str
    state: str = "queued"
    frames_done: int = 0
    frames_total: int | None = None
    error: str | None = None
    result_key: str | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    heartbeat: float = field(default_factory=time.time)
    cancel_requested: bool = False   # DELETE on a running job: its runner (on any replica) stops at its next frame
    version: int = 0

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    def public(self, result_url: str | None = None) -> dict[str, Any]:
        """What a client sees (the owner and heartbeat stay inside)."""
        return {"id": self.id, "state": self.state, "frames_done": self.frames_done, "frames_total": self.frames_total,
                "error": self.error, "result_url": result_url, "created": round(self.created, 3),
                "updated": round(self.updated, 3)}


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a job runs on: the spooled clip, the decoded source face and the request's fields."""

    id: str
    owner: str
    clip: Path
    source: np.ndarray
    consent: str
    prompt: str = ""
    strength: float = 1.0
    suffix: str = ".mp4"
    frames_total: int | None = None


class JobStates(Protocol):
    """Where job state lives: every replica that shares it can answer for any job."""

    def put(self, job: Job) -> None: ...
    def get(self, job_id: str) -> Job | None: ...
    def update(self, job_id: str, **changes: Any) -> Job: ...
    def all(self) -> list[Job]: ...


def changed(job: Job, changes: dict[str, Any]) -> Job:
    """`job` with `changes` applied, its version bumped; a finished job keeps its state (a late cancel or
    reap changes nothing)."""
    if job.finished and changes.get("state") not in (None, job.state):
        return job
    return replace(job, **changes, updated=time.time(), version=job.version + 1)


class MemoryJobStates:
    """Job state in this process (lost with it; one replica)."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def put(self, job: Job) -> None:
        with self._lock:
            self._jobs[job.id] = job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def update(self, job_id: str, **changes: Any) -> Job:
        with self._lock:
            job = changed(self._jobs[job_id], changes)
            self._jobs[job_id] = job
            return job

    def all(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())


class JobTransport(Protocol):
    """How a job gets from the replica that accepted it to the one that runs it."""

    def push(self, spec: JobSpec) -> None: ...
    def pop(self, timeout: float, spool: Path) -> JobSpec | None:
        """The next job (its inputs on this machine, under `spool`), or None after `timeout` s."""
    def done(self, spec: JobSpec) -> None:
        """The job has ended: drop what the transport kept for it."""


class MemoryTransport:
    """Jobs handed between threads of this process (the spooled clip stays where it was written)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[JobSpec] = queue.Queue()

    def push(self, spec: JobSpec) -> None:
        self._queue.put(spec)

    def pop(self, timeout: float, spool: Path) -> JobSpec | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def done(self, spec: JobSpec) -> None:
        return None


class QueueFull(RuntimeError):
    pass


class JobCancelled(Exception):
    """Raised inside a running job's progress hook once it is cancelled; the run stops there."""


ClipRunner = Callable[[JobSpec, Path, Callable[[int, "int | None"], None]], dict]
"""(spec, output path, on_frame(done, total)) -> summary: writes the fused clip to the output path."""


class JobQueue:
    def __init__(self, config: JobConfig, run: ClipRunner, store: ResultStore | Callable[[], ResultStore], *,
                 states: JobStates | None = None, transport: JobTransport | Callable[[ResultStore], JobTransport] | None = None,
                 audit: Callable[..., None] | None = None) -> None:
        """`store` may be a callable that opens it: nothing is opened, spooled or started until the
        first job (a server that takes none pays nothing)."""
        self.config = config
        self.run = run
        self._store = store
        self.states = states or MemoryJobStates()
        self.audit = audit or (lambda event, **fields: None)
        self._spool: Path | None = None
        self._transport = transport or MemoryTransport()
        self._cancel: set[str] = set()          # runs to stop at their next frame (a client's cancel, or closing)
        self._client_cancel: set[str] = set()   # ... of those, the ones a client cancelled
        self._active: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._workers: list[threading.Thread] = []
        # the base URL results are fetched by through a cache edge (ServerConfig.results_public_url), set where
        # the results routes are mounted; "" = the store's own URL
        self.public_results = ""
        # the server's memory budget (a streamer.web.uploads.MemoryBudget), set where the /v1 routes are mounted:
        # a running job's frames count in it beside the photos; None: not counted (`livefuse process`, tests)
        self.memory: Any = None

    @property
    def shared(self) -> bool:
        """True when the jobs live in a queue every replica reads (so any replica answers for them)."""
        return not isinstance(self._transport, MemoryTransport)

    @property
    def transport(self) -> JobTransport:
        """(A callable transport is given the store when first needed: a shared queue keeps inputs there.)"""
        store = self.store
        with self._lock:
            if not hasattr(self._transport, "push"):
                self._transport = self._transport(store)  # type: ignore[operator]
            return self._transport  # type: ignore[return-value]

    @property
    def store(self) -> ResultStore:
        with self._lock:
            if callable(self._store) and not hasattr(self._store, "put_file"):
                self._store = self._store()
            return self._store  # type: ignore[return-value]

    def _spool_root(self) -> Path:
        with self._lock:
            if self._spool is None:
                self._spool = Path(self.config.spool) if self.config.spool else Path(tempfile.mkdtemp(prefix="livefuse-jobs-"))
                self._spool.mkdir(parents=True, exist_ok=True)
            return self._spool

    def start(self) -> None:
        """Start the workers now (they start with the first job otherwise); with a shared queue, a replica
        runs jobs other replicas accepted."""
        self._start_workers()

    def _start_workers(self) -> None:
        with self._lock:
            if self._workers or self._closed:
                return
            self._workers = [threading.Thread(target=self._work, name=f"clip-job-{i}", daemon=True)
                             for i in range(self.config.workers)]
            for t in self._workers:
                t.start()

    # -- the client's side ---------------------------------------------------------------------------
    def spool_path(self, job_id: str, suffix: str) -> Path:
        """Where a job's uploaded clip is written before `submit` (the job's own folder)."""
        folder = self._spool_root() / job_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"input{suffix}"

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    def submit(self, spec: JobSpec) -> Job:
        with self._lock:
            if self._closed:
                raise QueueFull("the job queue is closed")
            waiting = sum(1 for j in self.states.all() if j.state == "queued")
            if waiting >= self.config.max_queued:
                raise QueueFull(f"{waiting} jobs are waiting already; try again later")
            job = Job(spec.id, spec.owner, frames_total=spec.frames_total)
            self.states.put(job)
        self._start_workers()
        try:
            self.transport.push(spec)
        except Exception as exc:
            log.warning("job %s: queueing failed: %s", spec.id, exc)
            self.states.update(spec.id, state="failed", error="queueing the job failed (the job store is unreachable)")
            raise
        self.audit("job_submitted", job=spec.id, token=spec.owner, frames=spec.frames_total, prompt=spec.prompt[:MAX_PROMPT_CHARS])
        return job

    def get(self, job_id: str, principal: str | None, admin: bool = False) -> Job | None:
        """The job for its owner (or an admin); None for anyone else, as for an unknown id."""
        job = self.states.get(job_id)
        if job is None or not (admin or job.owner == principal):
            return None
        if job.state == "running" and time.time() - job.heartbeat > self.config.stale_after_s:
            with self._lock:
                mine = job_id in self._active
            if not mine:   # whoever asks about a job whose runner is gone learns so (and records it)
                job = self._reap_one(job, time.time())
        return job

    def cancel(self, job_id: str, principal: str | None, admin: bool = False) -> Job | None:
        job = self.get(job_id, principal, admin)
        if job is None or job.finished:
            return job
        with self._lock:
            self._cancel.add(job_id)
            self._client_cancel.add(job_id)
        if job.state == "queued":   # a queued job is cancelled at once; a running one at its next frame
            job = self.states.update(job_id, state="cancelled", error="cancelled by the client")
            self.audit("job_cancelled", job=job_id, token=principal)
        else:
            job = self.states.update(job_id, cancel_requested=True)
        return job

    def result_url(self, job: Job) -> str | None:
        if job.state != "done" or job.result_key is None:
            return None
        if self.public_results:
            return f"{self.public_results.rstrip('/')}/{job.result_key}"
        return self.store.presigned_url(job.result_key, self.config.url_expires_s)

    def delete_result(self, job: Job) -> Job:
        """Delete the job's result from the store; the job keeps its state, with no result."""
        if job.result_key is not None:
            self.store.delete(job.result_key)
        return self.states.update(job.id, result_key=None)

    def reap(self, now: float | None = None) -> list[Job]:
        """Fail the running jobs whose runner is gone (no heartbeat for `stale_after_s`), with the reason."""
        now = time.time() if now is None else now
        reaped = []
        with self._lock:
            mine = set(self._active)
        for job in self.states.all():
            if job.state == "running" and job.id not in mine and now - job.heartbeat > self.config.stale_after_s:
                reaped.append(self._reap_one(job, now))
        return reaped

    def _reap_one(self, job: Job, now: float) -> Job:
        job = self.states.update(job.id, state="failed",
                                 error=f"its runner stopped (no heartbeat for {now - job.heartbeat:.0f} s)")
        self.audit("job_failed", job=job.id, token=job.owner, error=job.error)
        return job

    def close(self) -> None:
        """Stop taking jobs; running ones stop at their next frame and fail with that reason; queued ones
        are marked failed (a shared queue keeps them for the other replicas)."""
        with self._lock:
            self._closed = True
            self._cancel.update(self._active)
            workers = list(self._workers)
        for t in workers:
            t.join(timeout=30)
        if not self.shared:   # a shared queue keeps its jobs for the other replicas
            for job in self.states.all():
                if job.state == "queued":
                    self.states.update(job.id, state="failed", error="the server stopped before the job ran")

    # -- the worker's side ---------------------------------------------------------------------------
    def _work(self) -> None:
        transport = self.transport
        while not self._closed:
            try:
                spec = transport.pop(0.5, self._spool_root())
            except Exception as exc:   # the queue is unreachable: say so, wait, try again
                log.warning("taking a clip job failed: %s", exc)
                time.sleep(1.0)
                continue
            if spec is None:
                continue
            try:
                self._run_one(spec)
            except Exception:   # never lose the worker; the job is already marked
                log.exception("clip job %s", spec.id)
            finally:
                shutil.rmtree(self._spool_root() / spec.id, ignore_errors=True)
                try:
                    transport.done(spec)
                except Exception:
                    log.exception("cleaning up after clip job %s", spec.id)

    def _run_one(self, spec: JobSpec) -> None:
        job = self.states.get(spec.id)
        if job is None or job.finished:
            return
        memory, share = self.memory, self._frame_share(spec)   # given back to the budget it came from
        while share and not memory.wait_take(share, 1.0):   # its frames wait their turn (still queued)
            job = self.states.get(spec.id)
            if self._closed or spec.id in self._cancel or job is None or job.finished or job.cancel_requested:
                return
        with self._lock:
            self._active.add(spec.id)
        try:
            if self.states.update(spec.id, state="running", heartbeat=time.time()).state != "running":
                return   # cancelled between the queue and here
            last = [0.0]

            def on_frame(done: int, total: int | None) -> None:
                if spec.id in self._cancel:
                    raise JobCancelled()
                now = time.time()
                if now - last[0] >= self.config.progress_every_s or (total is not None and done >= total):
                    last[0] = now
                    job = self.states.update(spec.id, frames_done=done, frames_total=total or spec.frames_total,
                                             heartbeat=now)
                    if job.cancel_requested or job.finished:   # cancelled through another replica
                        raise JobCancelled()

            out = self._spool_root() / spec.id / f"result{spec.suffix}"
            try:
                summary = self.run(spec, out, on_frame)
            except JobCancelled:
                with self._lock:
                    by_client = spec.id in self._client_cancel
                current = self.states.get(spec.id)
                if by_client or (current is not None and current.cancel_requested):
                    self._finish(spec, "cancelled", error="cancelled by the client")
                else:   # this replica is stopping: say so, so the client knows to submit it again
                    self._finish(spec, "failed", error="the server stopped while the job ran; submit it again")
                return
            except Exception as exc:   # the client learns what failed; the log and the audit record say why
                log.warning("job %s: processing failed", spec.id, exc_info=True)
                self._finish(spec, "failed", error=f"processing failed ({type(exc).__name__})", detail=str(exc)[:500])
                return
            self.states.update(spec.id, frames_done=int(summary.get("frames", 0)), heartbeat=time.time())
            key = result_key(spec.id, spec.suffix)   # unguessable and never reused: an edge may keep it for good
            try:
                self.store.put_file(key, out, media_type(out))
            except (StoreError, OSError) as exc:
                log.warning("job %s: uploading the result failed: %s", spec.id, exc)
                self._finish(spec, "failed", error="uploading the result failed: the result store did not take it "
                                                   "after its retries; submit the job again", detail=str(exc)[:500])
                return
            self._finish(spec, "done", result_key=key, frames_total=int(summary.get("frames", 0)))
        finally:
            if share:
                memory.give(share)
            with self._lock:
                self._active.discard(spec.id)
                self._cancel.discard(spec.id)
                self._client_cancel.discard(spec.id)

    def _frame_share(self, spec: JobSpec) -> int:
        """What a job holds of the server's memory budget while it runs (0 with none): one frame in flight
        at a time, decoded, worked on and encoded (CLIP_FRAME_HOLD frames' worth), at most the budget."""
        if self.memory is None:
            return 0
        return min(self.memory.total, int(frame_pixels(spec.clip) * 3 * CLIP_FRAME_HOLD))

    def _finish(self, spec: JobSpec, state: str, detail: str | None = None, **changes: Any) -> None:
        """`error` (in `changes`) is what the client reads: it names no path, bucket or endpoint; `detail`
        (the store's or decoder's own words) goes to the audit record only."""
        job = self.states.update(spec.id, state=state, heartbeat=time.time(), **changes)
        self.audit(f"job_{state}", job=spec.id, token=spec.owner, error=job.error, result=job.result_key,
                   frames=job.frames_done, **({"detail": detail} if detail else {}))
