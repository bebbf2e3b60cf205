"""A cluster in a box on loopback: N `livefuse serve` replicas, Debian's HAProxy in front health-checking
`/readyz`, Debian's Prometheus scraping `/metrics`. Used by tests/cluster and `livefuse bench cluster`.

Every process is a real one started here and stopped by its own pid; nothing listens beyond 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCALING = REPO / "deploy" / "scaling.json"
CHECK_INTERVAL_S = 0.5     # HAProxy's health-check interval (inter), one failure marks a server down
NAMESPACE = "livefuse-box"  # the namespace label the replicas' series carry (as in a cluster)


def missing_tools() -> list[str]:
    return [t for t in ("haproxy", "prometheus") if shutil.which(t) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
         timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_for(pred: Any, timeout: float, what: str, step: float = 0.05) -> float:
    """Poll until pred() is true; the seconds it took. TimeoutError naming `what` otherwise."""
    t0 = time.monotonic()
    while True:
        try:
            if pred():
                return time.monotonic() - t0
        except (OSError, ValueError):
            pass
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(step)


@dataclass
class Replica:
    name: str
    port: int
    folder: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def audit_log(self) -> Path:
        return self.folder / "audit.jsonl"

    def readyz(self) -> tuple[int, dict[str, Any]]:
        status, _, body = http("GET", f"{self.url}/readyz", timeout=2)
        return status, json.loads(body)

    def metric(self, name: str) -> float | None:
        _, _, body = http("GET", f"{self.url}/metrics", timeout=5)
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


@dataclass
class Cluster:
    folder: Path
    replicas: int = 3
    max_sessions: int = 2
    drain_timeout: float = 30.0
    extra_args: tuple[str, ...] = ("--stages", "watermark")
    front_port: int = field(default_factory=free_port)
    stats_port: int = field(default_factory=free_port)
    prom_port: int = field(default_factory=free_port)
    nodes: list[Replica] = field(default_factory=list)
    _front: subprocess.Popen | None = None
    _prom: subprocess.Popen | None = None

    @property
    def front(self) -> str:
        return f"http://127.0.0.1:{self.front_port}"

    # ---- start -------------------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> "Cluster":
        self.folder.mkdir(parents=True, exist_ok=True)
        for i in range(self.replicas):
            node = Replica(f"r{i}", free_port(), self.folder / f"r{i}")
            node.folder.mkdir(exist_ok=True)
            self.nodes.append(node)
            self.start_replica(node)
        for node in self.nodes:
            wait_for(lambda n=node: n.readyz()[0] == 200, timeout, f"replica {node.name} ready")
        self._front = self._spawn(["haproxy", "-db", "-f", str(self._haproxy_config())], "haproxy")
        self._prom = self._spawn(["prometheus", f"--config.file={self._prometheus_config()}",
                                  f"--storage.tsdb.path={self.folder / 'tsdb'}",
                                  f"--web.listen-address=127.0.0.1:{self.prom_port}", "--log.level=warn"], "prometheus")
        wait_for(lambda: self.backend_status() == {n.name: "UP" for n in self.nodes}, 20, "haproxy sees every replica up")
        wait_for(lambda: http("GET", f"http://127.0.0.1:{self.prom_port}/-/ready", timeout=1)[0] == 200, 30,
                 "prometheus ready")
        return self

    def start_replica(self, node: Replica) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO), LIVEFUSE_AUDIT_LOG=str(node.audit_log))
        cmd = [sys.executable, "-m", "streamer.app.cli", "serve", "--host", "127.0.0.1", "--port", str(node.port),
               "--max-sessions", str(self.max_sessions), "--public-url", node.url,
               "--drain-timeout", str(self.drain_timeout), "--audit-stdout", *self.extra_args]
        out = open(node.folder / "stdout.jsonl", "wb")
        err = open(node.folder / "stderr.log", "wb")
        node.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, cwd=str(REPO))

    def _spawn(self, cmd: list[str], name: str) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def _haproxy_config(self) -> Path:
        servers = "\n".join(
            f"    server {n.name} 127.0.0.1:{n.port} check inter {int(CHECK_INTERVAL_S * 1000)}ms fall 1 rise 1"
            for n in self.nodes)
        text = f"""
global
    tune.bufsize 131072
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    option redispatch
    retries 2
    retry-on conn-failure empty-response 503
listen stats
    bind 127.0.0.1:{self.stats_port}
    stats enable
    stats uri /stats
frontend signaling
    bind 127.0.0.1:{self.front_port}
    option http-buffer-request
    default_backend livefuse
backend livefuse
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1
    http-check expect status 200
{servers}
"""
        path = self.folder / "haproxy.cfg"
        path.write_text(text)
        return path

    def _prometheus_config(self) -> Path:
        # each replica's series carry namespace and pod, as Kubernetes service discovery (the chart's
        # ServiceMonitor) labels them: the Prometheus Adapter rule selects and groups by those
        targets = "".join(f"""
      - targets: ["127.0.0.1:{n.port}"]
        labels: {{namespace: "{NAMESPACE}", pod: "{n.name}"}}""" for n in self.nodes)
        path = self.folder / "prometheus.yml"
        path.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: livefuse
    scrape_interval: 1s
    scrape_timeout: 900ms
    static_configs:{targets}
""")
        return path

    # ---- look ----------------------------------------------------------------------------------------
    def backend_status(self) -> dict[str, str]:
        """HAProxy's view: server name -> UP / DOWN (its stats CSV)."""
        _, _, body = http("GET", f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=2)
        rows = [r.split(",") for r in body.decode().splitlines() if r and not r.startswith("#")]
        return {r[1]: r[17].split()[0] for r in rows if r[0] == "livefuse" and r[1] not in ("BACKEND", "FRONTEND")}

    def node_of(self, url: str) -> Replica:
        port = urllib.parse.urlsplit(url).port
        return next(n for n in self.nodes if n.port == port)

    def promql(self, query: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": query})
        _, _, body = http("GET", f"http://127.0.0.1:{self.prom_port}/api/v1/query?{q}", timeout=5)
        data = json.loads(body)
        if data.get("status") != "success":
            raise RuntimeError(f"prometheus: {data}")
        return data["data"]["result"]

    # ---- stop ----------------------------------------------------------------------------------------
    def stop(self) -> None:
        for p in [self._front, self._prom, *(n.proc for n in self.nodes)]:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in [self._front, self._prom, *(n.proc for n in self.nodes)]:
            if p is None:
                continue
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def scaling() -> dict[str, Any]:
    return json.loads(SCALING.read_text())


def adapter_query(metrics_query: str, metric: str, pods: list[str], namespace: str = NAMESPACE) -> str:
    """A Prometheus Adapter rule's metricsQuery as the adapter expands it when the HPA asks for a Pods
    metric of these pods: the series, the namespace/pod label matchers, grouped by pod."""
    matchers = f'namespace="{namespace}",pod=~"{"|".join(pods)}"'
    return (metrics_query.replace("<<.Series>>", metric).replace("<<.LabelMatchers>>", matchers)
            .replace("<<.GroupBy>>", "pod"))


def hpa_desired(current: int, value: float, target: float) -> int:
    """The HPA's rule (autoscaling/v2, before its 10 % tolerance): ceil(current * value / target)."""
    import math

    return math.ceil(current * value / target - 1e-9)
