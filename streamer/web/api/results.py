"""Clip results through a cache edge (`streamer.storage.edge`): the origin route an edge fetches them from,
and the deletion that takes one off the store and the edge.

GET /results/<key> (mounted with --results-public-url): the key is the capability (unguessable, and only a
job's result matches `RESULT_KEY`: never an input or a recording), so no token is asked. A result never
changes under its key: `Cache-Control: public, max-age=31536000, immutable` (or `private, no-store` with
--results-private), an ETag and Last-Modified, byte ranges and 304s: from the file of a local results
folder, or streamed from an S3 store (its GET answers the Range and If-None-Match; the bucket stays
private behind the edge).

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
        if not RESULT_KEY.fullmatch(key):
            raise Refused(404, "no such result", {"Cache-Control": "no-store"}, code="not_found")
        store = self.jobs.store
        if not hasattr(store, "path"):
            return await self._from_s3(request, store, key)
        path = store.path(key)
        if not path.is_file():
            raise Refused(404, "no such result", {"Cache-Control": "no-store"}, code="not_found")
        return web.FileResponse(path, headers={"Content-Type": media_type(path), "Cache-Control": self.edge.cache_control,
                                               "X-Content-Type-Options": "nosniff"})

    async def _from_s3(self, request: web.Request, store: Any, key: str) -> web.StreamResponse:
        """The object streamed from S3 a megabyte at a time (each read in an executor), its validators and
        range answered by the store's own GET."""
        from botocore.exceptions import BotoCoreError, ClientError

        loop = asyncio.get_running_loop()
        ask = {"Bucket": store.bucket, "Key": store.full_key(key)}
        for header, param in (("Range", "Range"), ("If-None-Match", "IfNoneMatch")):
            if request.headers.get(header):
                ask[param] = request.headers[header]
        head = request.method == "HEAD"
        if head:
            ask.pop("Range", None)
        try:
            obj = await loop.run_in_executor(None, lambda: (store.client.head_object if head else store.client.get_object)(**ask))
        except ClientError as exc:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if status == 304:
                return web.Response(status=304, headers={"Cache-Control": self.edge.cache_control,
                                                         **({"ETag": request.headers["If-None-Match"]})})
            if status == 416:
                raise Refused(416, "the range is outside the result", code="range_not_satisfiable") from None
            if status == 404 or exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise Refused(404, "no such result", {"Cache-Control": "no-store"}, code="not_found") from None
            raise Refused(503, "the results store did not answer; try again", {"Retry-After": "5"},
                          code="store_unavailable") from None
        except BotoCoreError:
            raise Refused(503, "the results store did not answer; try again", {"Retry-After": "5"},
                          code="store_unavailable") from None
        headers = {"Content-Type": obj.get("ContentType") or media_type(key), "Cache-Control": self.edge.cache_control,
                   "Accept-Ranges": "bytes", "ETag": obj["ETag"], "X-Content-Type-Options": "nosniff",
                   "Last-Modified": obj["LastModified"].strftime("%a, %d %b %Y %H:%M:%S GMT"),
                   "Content-Length": str(obj["ContentLength"])}
        if obj.get("ContentRange"):
            headers["Content-Range"] = obj["ContentRange"]
        response = web.StreamResponse(status=206 if obj.get("ContentRange") else 200, headers=headers)
        await response.prepare(request)
        if head:
            return response
        body = obj["Body"]
        try:
            while chunk := await loop.run_in_executor(None, body.read, 1 << 20):
                await response.write(chunk)
        finally:
            body.close()
        await response.write_eof()
        return response

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
