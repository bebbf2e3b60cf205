"""The chart's coturn (turn.enabled), run for real: Debian's turnserver started with exactly the args the chart
renders and the password from the rendered Secret grants a TURN allocation to the user the LiveFuse pods are
given (LIVEFUSE_ICE_SERVERS / _ICE_USERNAME / the Secret's turn-password), inside the chart's relay port range;
a wrong password gets none. Needs helm (make helm) and coturn (make debian-tools); skips without them unless
LIVEFUSE_REQUIRE_CLUSTER=1."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import subprocess
import time

import pytest

from tests.deploy.test_helm_chart import CHART, container, find_helm, of_kind, plain_env, run_helm

yaml = pytest.importorskip("yaml")


def _need(tool: str | None, what: str, how: str) -> None:
    if tool is None:
        if os.environ.get("LIVEFUSE_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"LIVEFUSE_REQUIRE_CLUSTER=1 but {what} is not installed ({how})")
        pytest.skip(f"the coturn test needs {what}: {how}")


def free_udp_tcp_port() -> int:
    for _ in range(50):
        with socket.socket() as t, socket.socket(type=socket.SOCK_DGRAM) as u:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


async def allocate(port: int, username: str, password: str) -> tuple[str, int]:
    from aioice.turn import create_turn_endpoint

    transport, _ = await asyncio.wait_for(
        create_turn_endpoint(asyncio.DatagramProtocol, ("127.0.0.1", port), username, password), 10)
    try:
        return transport.get_extra_info("sockname")
    finally:
        transport.close()


async def test_the_charts_coturn_grants_the_pods_user_an_allocation(tmp_path):
    helm = find_helm()
    _need(helm, "helm", "make helm")
    turnserver = shutil.which("turnserver")
    _need(turnserver, "coturn", "apt-get install coturn, or make debian-tools")
    port = free_udp_tcp_port()
    r = run_helm(helm, "template", "lf", str(CHART), "--set", "turn.enabled=true",
                 "--set", "turn.externalHost=127.0.0.1", "--set", f"turn.port={port}")
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    (turn,) = of_kind(docs, "Deployment", "turn")
    (c,) = turn["spec"]["template"]["spec"]["containers"]
    (secret,) = of_kind(docs, "Secret")
    password = base64.b64decode(secret["data"]["turn-password"]).decode()
    args = [a.replace("$(TURN_PASSWORD)", password) for a in c["args"]]
    # the pods are handed this server and this user
    env = plain_env(container(docs))
    assert env["LIVEFUSE_ICE_SERVERS"].split(",")[0] == f"turn:127.0.0.1:{port}?transport=udp"
    username = env["LIVEFUSE_ICE_USERNAME"]
    # as in the pod: the chart's args, only the pid file and the listening address pointed here
    cmd = [turnserver, *args, f"--pidfile={tmp_path / 'turn.pid'}", "--listening-ip=127.0.0.1",
           "--relay-ip=127.0.0.1"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "coturn never listened"
            await asyncio.sleep(0.1)
        relayed = await allocate(port, username, password)
        values = yaml.safe_load((CHART / "values.yaml").read_text())["turn"]
        assert values["minPort"] <= relayed[1] <= values["maxPort"]
        from aioice.stun import TransactionFailed

        with pytest.raises(TransactionFailed) as refused:
            await allocate(port, username, password + "x")
        assert refused.value.response.attributes["ERROR-CODE"][0] == 401
        assert refused.value.response.attributes["REALM"] == values["realm"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
