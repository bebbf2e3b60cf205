"""The chart with gRPC and the results edge on: the pods serve gRPC on their own port with grpc.health.v1
probes, the Service carries it, the Varnish tier renders valid objects whose VCL Debian's varnishd compiles,
and the pods are told where results are fetched and whom to purge. Offline (helm template); without helm
(or varnishd, for the compile) these skip unless LIVEFUSE_REQUIRE_CLUSTER=1."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.test_helm_chart import (NAMESPACE, container, helm, of_kind, plain_env, render,  # noqa: F401
                                          server_deployment)

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ON = ["--set", "server.grpcPort=50051", "--set", "cache.enabled=true", "--set", "ingress.enabled=true",
      "--set", "server.resultsPublicUrl=https://livefuse.example.com/results"]


def test_grpc_port_probes_and_service(helm):  # noqa: F811
    from streamer.config import ServerConfig

    docs = render(helm, "default", ON)
    c = container(docs)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    env = plain_env(c)
    assert ports["grpc"] == 50051 == int(env["LIVEFUSE_GRPC_PORT"])
    assert c["livenessProbe"]["grpc"] == {"port": 50051, "service": "liveness"}
    assert c["readinessProbe"]["grpc"] == {"port": 50051, "service": ""}
    (service,) = [d for d in of_kind(docs, "Service") if d["metadata"]["labels"].get("app.kubernetes.io/component") == "server"]
    grpc_port = [p for p in service["spec"]["ports"] if p["name"] == "grpc"]
    assert grpc_port and grpc_port[0]["targetPort"] == "grpc" and grpc_port[0]["appProtocol"] == "grpc"
    config = ServerConfig.from_env(env)
    assert config.grpc_port == 50051 and config.results_public_url == "https://livefuse.example.com/results"
    assert config.results_purge == (f"http://lf-livefuse-cache-pods.{NAMESPACE}.svc:6081",)
    # TLS on the pods: the kubelet's gRPC probe speaks none, so the probes stay on HTTPS
    tls = container(render(helm, "default", ON + ["--set", "server.tls.secretName=lf-tls"]))
    assert tls["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_cache_tier_renders_valid_non_root_objects(helm):  # noqa: F811
    docs = render(helm, "default", ON)
    cache = [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "cache"]
    assert sorted(d["kind"] for d in cache) == ["ConfigMap", "Deployment", "Service", "Service"]
    for doc in cache:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    (dep,) = [d for d in cache if d["kind"] == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["command"] == ["varnishd"]
    headless = [d for d in cache if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"]
    assert headless and headless[0]["metadata"]["name"] == "lf-livefuse-cache-pods"
    (ingress,) = of_kind(docs, "Ingress")
    paths = {p["path"]: p["backend"]["service"]["name"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]}
    assert paths["/results/"] == "lf-livefuse-cache"


def test_the_rendered_vcl_compiles(helm, tmp_path):  # noqa: F811
    import os

    binary = shutil.which("varnishd") or ("/usr/sbin/varnishd" if os.access("/usr/sbin/varnishd", os.X_OK) else None)
    if binary is None:
        if os.environ.get("LIVEFUSE_REQUIRE_CLUSTER") == "1":
            pytest.fail("LIVEFUSE_REQUIRE_CLUSTER=1 but varnishd is not installed (make debian-tools)")
        pytest.skip("compiling the VCL needs Debian's varnish: make debian-tools")
    (cm,) = [d for d in render(helm, "default", ON) if d["kind"] == "ConfigMap"
             and d["metadata"]["labels"].get("app.kubernetes.io/component") == "cache"]
    for name, text in cm["data"].items():
        (tmp_path / name).write_text(text)
    # varnishd resolves a backend's name as it compiles (in the cluster the Service's name resolves): here
    # the Service's name stands for loopback
    backend = (tmp_path / "backend.vcl").read_text()
    assert '.host = "lf-livefuse.media.svc";' in backend and '"10.0.0.0"/8;' in backend   # the pods' networks may purge
    (tmp_path / "backend.vcl").write_text(backend.replace('.host = "lf-livefuse.media.svc";', '.host = "127.0.0.1";'))
    assert (tmp_path / "livefuse.vcl").read_text() == (Path(__file__).resolve().parents[2] / "deploy" / "varnish" / "livefuse.vcl").read_text()
    r = subprocess.run([binary, "-C", "-j", "none", "-n", str(tmp_path / "n"), "-p", f"vcl_path={tmp_path}", "-f",
                        str(tmp_path / "livefuse.vcl")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_grpc_ingress_on_its_own_host(helm):  # noqa: F811
    docs = render(helm, "default", ON + ["--set", "ingress.grpc.enabled=true",
                                         "--set", "ingress.grpc.tls[0].secretName=grpc-tls",
                                         "--set", "ingress.grpc.tls[0].hosts[0]=grpc.livefuse.example.com"])
    (grpc_ingress,) = [d for d in of_kind(docs, "Ingress") if d["metadata"]["name"].endswith("-grpc")]
    kubernetes_validate.validate(grpc_ingress, kubernetes_validate.latest_version(), strict=True)
    assert grpc_ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    (rule,) = grpc_ingress["spec"]["rules"]
    assert rule["host"] == "grpc.livefuse.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"]["port"]["name"] == "grpc"
    assert not [d for d in of_kind(render(helm, "default", ON), "Ingress") if d["metadata"]["name"].endswith("-grpc")]
