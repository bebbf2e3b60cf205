"""The real product behind a real gRPC port (and the REST app it runs beside), for the gRPC tests: the API
tests' world (tokens alice and bob, the Grace Hopper photo as a protected identity, an audit log)."""

from __future__ import annotations

import contextlib
import dataclasses
import socket

import grpc
import pytest
from aiohttp.test_utils import TestServer

from streamer.config import ServerConfig
from tests.streamer.web.api.conftest import api_world  # noqa: F401 - the package's fixture, shared
from streamer.services import with_hooks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Served:
    http_url: str
    grpc_target: str
    app: object

    @property
    def server(self):
        from streamer.web.server import SERVER_KEY

        return self.app[SERVER_KEY]

    @property
    def rpc(self):
        from streamer.rpc.server import RPC_KEY

        return self.app[RPC_KEY]


@contextlib.asynccontextmanager
async def serve_rpc(product, config: ServerConfig | None = None, **service_changes):
    """The product's services on loopback HTTP and gRPC ports (`livefuse serve --grpc-port`)."""
    from streamer.rpc.server import attach
    from streamer.web.server import create_app

    config = dataclasses.replace(config or ServerConfig(), grpc_port=free_port())
    services = with_hooks(product, shutdown=lambda: None, **service_changes)
    app = create_app(config, services)
    attach(app, config)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield Served(str(server.make_url("")).rstrip("/"), f"127.0.0.1:{config.grpc_port}", app)
    finally:
        await server.close()


@pytest.fixture
async def served(api_world):  # noqa: F811
    async with serve_rpc(api_world.product) as s:
        yield s


@pytest.fixture
async def channel(served):
    from livefuse.client import MAX_MESSAGE

    async with grpc.aio.insecure_channel(served.grpc_target, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]) as ch:
        yield ch


def bearer(api_world, who: str = "alice") -> tuple[tuple[str, str], ...]:  # noqa: F811
    return (("authorization", f"Bearer {api_world.tokens[who]}"),)
