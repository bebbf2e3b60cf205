"""The gRPC server beside the HTTP one, in the same process and on the same event loop (grpc.aio):
`livefuse serve --grpc-port PORT`. It serves livefuse.v1.Fusion, grpc.health.v1.Health (SERVING while
/readyz would say 200; NOT_SERVING while models load, when full and from the moment a drain starts; the
service "liveness" answers SERVING while the process runs, as /healthz) and server reflection. TLS with
the HTTP side's certificate and key.

`attach(app, config)` adds it to the aiohttp app's start and stop; `app[RPC_KEY]` is the running RpcServer."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from livefuse.v1 import fusion_pb2, fusion_pb2_grpc
from streamer.config import ServerConfig
from streamer.rpc.access import RpcAccess, loopback_access
from streamer.rpc.servicer import FusionServicer

log = logging.getLogger(__name__)

FUSION = fusion_pb2.DESCRIPTOR.services_by_name["Fusion"].full_name      # livefuse.v1.Fusion
LIVENESS = "liveness"
HEALTH_POLL_S = 0.25
SLACK = 64 * 1024   # a message's fields beside its images


@dataclass
class RpcServer:
    server: grpc.aio.Server
    port: int
    servicer: FusionServicer
    health: Any
    _watch: asyncio.Task | None = field(default=None, repr=False)


def message_limit(config: ServerConfig) -> int:
    """The largest message a caller may send: a clip job's clip and source, or a photo's two images."""
    return max(2 * config.max_source_bytes, config.max_clip_bytes + config.max_source_bytes) + SLACK


def credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    if not config.tls_cert:
        return None
    key = Path(config.tls_key or config.tls_cert).read_bytes()
    return grpc.ssl_server_credentials([(key, Path(config.tls_cert).read_bytes())])


async def start(http: Any, api: Any, config: ServerConfig, access: RpcAccess) -> RpcServer:
    """Serve on `config.host`:`config.grpc_port`; `http` is the LiveFuseServer, `api` its /v1 routes."""
    limit = message_limit(config)
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 0),
        # a dead peer is noticed within a minute; callers may ping every 20 s (Envoy's and grpc-go's default)
        ("grpc.keepalive_time_ms", 60_000), ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 20_000),
    ], maximum_concurrent_rpcs=config.max_uploads + config.max_photos + config.max_sessions)
    servicer = FusionServicer(http, api, access)
    fusion_pb2_grpc.add_FusionServicer_to_server(servicer, server)
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    reflection.enable_server_reflection((FUSION, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    host = "[::]" if config.host in ("::", "0.0.0.0") else config.host
    address = f"{host}:{config.grpc_port}"
    creds = credentials(config)
    port = server.add_secure_port(address, creds) if creds is not None else server.add_insecure_port(address)
    if not port:
        raise OSError(f"gRPC could not bind {address}")
    await checker.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
    await server.start()
    rpc = RpcServer(server, port, servicer, checker)
    rpc._watch = asyncio.create_task(_follow_readiness(http, checker))
    log.info("gRPC on %s (%s)", address, "TLS" if creds is not None else "plaintext")
    return rpc


async def _follow_readiness(http: Any, checker: Any) -> None:
    """Health follows the server's one readiness (`LiveFuseServer.readiness`): "" and the Fusion service."""
    last = None
    while True:
        ready = http.readiness().ready
        if ready != last:
            status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
            for service in ("", FUSION):
                await checker.set(service, status)
            last = ready
        await asyncio.sleep(HEALTH_POLL_S)


async def stop(rpc: RpcServer, grace: float = 5.0) -> None:
    if rpc._watch is not None:
        rpc._watch.cancel()
    await rpc.health.enter_graceful_shutdown()
    await rpc.server.stop(grace)


RPC_KEY = web.AppKey("livefuse_rpc", RpcServer)


def attach(app: web.Application, config: ServerConfig) -> None:
    """Start gRPC with the app (when `config.grpc_port`), stop it with the app. The doors are the app's
    services' (`Services.rpc_access`: the same tokens as REST)."""
    if not config.grpc_port:
        return
    from streamer.web.server import SERVER_KEY

    async def _start(app_: web.Application) -> None:
        http = app_[SERVER_KEY]
        access = http.services.rpc_access or loopback_access()
        app_[RPC_KEY] = await start(http, http.api, config, access)

    async def _stop(app_: web.Application) -> None:
        rpc = app_.get(RPC_KEY)
        if rpc is not None:
            await stop(rpc)

    app.on_startup.append(_start)
    app.on_shutdown.append(_stop)
