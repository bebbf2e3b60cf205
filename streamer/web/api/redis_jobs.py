"""Clip jobs shared by every replica through Redis: job state (`RedisJobStates`) and the queue
(`RedisTransport`), so any replica can accept a job, run one another replica accepted, and answer for
it; a job outlives the replica that accepted it.

State: one JSON value per job (`<prefix>job:<id>`, expiring `ttl_s` after its last change) and a set of
ids; changes are optimistic transactions (WATCH / MULTI), so two replicas never lose each other's update.
Queue: a Redis list of small JSON tickets; the clip and the source photo go to the results store first
(`jobs/<id>/input.*`, `jobs/<id>/source.png`), since the replica that runs the job may be on another
machine, and are deleted when the job ends. A replica that dies while running a job stops its heartbeat,
and the job is marked failed with that reason by whoever looks next (`JobQueue.get` / `reap`).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from streamer.web.api.jobs import Job, JobSpec, changed
from streamer.storage.base import ResultStore

DEFAULT_PREFIX = "livefuse:"


def connect(url: str) -> Any:
    """A Redis client for `redis://host:port/db` (the `redis` package, imported only here)."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=3, health_check_interval=30)


class RedisJobStates:
    def __init__(self, client: Any, prefix: str = DEFAULT_PREFIX, ttl_s: int = 7 * 24 * 3600) -> None:
        self.r, self.prefix, self.ttl_s = client, prefix, ttl_s

    def _key(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    @staticmethod
    def _load(raw: bytes | None) -> Job | None:
        if raw is None:
            return None
        data = json.loads(raw)
        return Job(**{f.name: data[f.name] for f in dataclasses.fields(Job) if f.name in data})

    def put(self, job: Job) -> None:
        with self.r.pipeline() as p:
            p.set(self._key(job.id), json.dumps(dataclasses.asdict(job)), ex=self.ttl_s)
            p.sadd(f"{self.prefix}jobs", job.id)
            p.execute()

    def get(self, job_id: str) -> Job | None:
        return self._load(self.r.get(self._key(job_id)))

    def update(self, job_id: str, **changes: Any) -> Job:
        import redis

        key = self._key(job_id)
        with self.r.pipeline() as p:
            while True:
                try:
                    p.watch(key)
                    job = self._load(p.get(key))
                    if job is None:
                        raise KeyError(job_id)
                    new = changed(job, changes)
                    p.multi()
                    p.set(key, json.dumps(dataclasses.asdict(new)), ex=self.ttl_s)
                    p.execute()
                    return new
                except redis.WatchError:   # another replica changed it first: read again
                    continue

    def all(self) -> list[Job]:
        ids = [i.decode() for i in self.r.smembers(f"{self.prefix}jobs")]
        if not ids:
            return []
        jobs = [self._load(raw) for raw in self.r.mget([self._key(i) for i in ids])]
        gone = [i for i, j in zip(ids, jobs) if j is None]
        if gone:   # expired
            self.r.srem(f"{self.prefix}jobs", *gone)
        return [j for j in jobs if j is not None]


class RedisTransport:
    def __init__(self, client: Any, store: ResultStore, prefix: str = DEFAULT_PREFIX) -> None:
        self.r, self.store, self.queue = client, store, f"{prefix}queue"

    @staticmethod
    def _inputs(spec_id: str, suffix: str) -> tuple[str, str]:
        return f"jobs/{spec_id}/input{suffix}", f"jobs/{spec_id}/source.png"

    def push(self, spec: JobSpec) -> None:
        import cv2

        clip_key, source_key = self._inputs(spec.id, spec.suffix)
        self.store.put_file(clip_key, spec.clip, "application/octet-stream")
        ok, png = cv2.imencode(".png", cv2.cvtColor(spec.source, cv2.COLOR_RGB2BGR))
        if not ok:
            raise RuntimeError("the source photo could not be encoded for the queue")
        with tempfile.TemporaryDirectory(prefix="livefuse-source-") as d:
            (Path(d) / "source.png").write_bytes(png.tobytes())
            self.store.put_file(source_key, Path(d) / "source.png", "image/png")
        ticket = {"id": spec.id, "owner": spec.owner, "consent": spec.consent, "prompt": spec.prompt,
                  "strength": spec.strength, "suffix": spec.suffix, "frames_total": spec.frames_total}
        self.r.lpush(self.queue, json.dumps(ticket))

    def pop(self, timeout: float, spool: Path) -> JobSpec | None:
        import cv2

        got = self.r.brpop([self.queue], timeout=max(1, int(round(timeout))))
        if got is None:
            return None
        t = json.loads(got[1])
        clip_key, source_key = self._inputs(t["id"], t["suffix"])
        folder = spool / t["id"]
        clip = self.store.get_file(clip_key, folder / f"input{t['suffix']}")
        png = self.store.get_file(source_key, folder / "source.png")
        bgr = cv2.imread(str(png), cv2.IMREAD_COLOR)
        source = np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        return JobSpec(id=t["id"], owner=t["owner"], clip=clip, source=source, consent=t["consent"], prompt=t["prompt"],
                       strength=float(t["strength"]), suffix=t["suffix"], frames_total=t["frames_total"])

    def done(self, spec: JobSpec) -> None:
        for key in self._inputs(spec.id, spec.suffix):
            self.store.delete(key)
