"""Clip results through a cache edge (`streamer.storage.edge`): the origin route an edge fetches them from,
and the deletion that takes one off the store and the edge.

GET /results/<key> (mounted with --results-public-url): the key is the capability (unguessable, and only a
job's result matches `RESULT_KEY`: never an input or a recording), so no token is asked. A result never
changes under its key: `Cache-Control: public, max-age=31536000, immutable` (or `private, no-store` with
--results-private), an ETag and Last-Modified from the file, byte ranges and 304s. The origin serves a
local results folder; with S3 the bucket is the edge's origin (docs/api.md).

DELETE /v1/jobs/{job}/result (the job's owner or an admin): the object is deleted, the job keeps its state
with no result, and each configured cache is sent PURGE for the result's path; the audit record says how
many caches took it."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from aiohttp import web

from streamer.storage.base import media_type
from streamer.storage.edge import RESULT_KEY, EdgeConfig, purge
from streamer.web.httpkit import Refused


class ResultRoutes:
    def __init__(self, edge: EdgeConfig, jobs: Any, authorize: Callable[[web.Request], str],
                 is_admin: Callable[[web.Request], bool]) -> None:
        self.edge, self.jobs, self.authorize, self.is_admin = edge, jobs, authorize, is_admin

    async def origin(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        store = self.jobs.store
        path = store.path(key) if RESULT_KEY.fullmatch(key) and hasattr(store, "path") else None
        if path is None or not path.is_file():
            raise Refused(404, "no such result", {"Cache-Control": "no-store"}, code="not_found")
        return web.FileResponse(path, headers={"Content-Type": media_type(path), "Cache-Control": self.edge.cache_control,
                                               "X-Content-Type-Options": "nosniff"})

    async def delete(self, request: web.Request) -> web.Response:
        principal = self.authorize(request)
        job_id = request.match_info["job"]
        job = self.jobs.get(job_id, principal, self.is_admin(request))
        if job is None:
            raise Refused(404, f"no job {job_id[:64]!r}", code="not_found")
        if job.result_key is None:
            raise Refused(404, f"job {job.id} has no result", code="not_found")
        job, purged, failed = await delete_result(self.jobs, self.edge, job, principal)
        return web.json_response(job.public(None), headers={"Cache-Control": "no-store"})


async def delete_result(jobs: Any, edge: EdgeConfig, job: Any, principal: str) -> tuple[Any, int, list[str]]:
    """Delete `job`'s result from the store, PURGE it from the edge, audit it: (job, purged, failures).
    The REST route and the gRPC DeleteResult both end here."""
    loop = asyncio.get_running_loop()
    key = job.result_key
    job = await loop.run_in_executor(None, jobs.delete_result, job)
    purged, failed = 0, []
    if edge.purge:
        purged, failed = await loop.run_in_executor(None, purge, edge.purge, edge.edge_path(key))
    jobs.audit("job_result_deleted", job=job.id, token=principal, result=key, purged=purged,
               **({"purge_failed": failed[:8]} if failed else {}))
    return job, purged, failed


def mount(app: web.Application, edge: EdgeConfig, jobs: Any, authorize: Callable[[web.Request], str],
          is_admin: Callable[[web.Request], bool]) -> ResultRoutes | None:
    """The results routes on `app` (none without a job queue); the queue hands out URLs on the edge."""
    if jobs is None:
        return None
    routes = ResultRoutes(edge, jobs, authorize, is_admin)
    app.router.add_delete("/v1/jobs/{job}/result", routes.delete)
    if edge.public_url:
        jobs.public_results = edge.public_url
        app.router.add_get("/results/{key:.+}", routes.origin)
    return routes
