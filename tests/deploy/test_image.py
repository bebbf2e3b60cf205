"""The container image (deploy/Dockerfile), built and run for real: only with LIVEFUSE_IMAGE_TEST=1 (a build
takes minutes and needs Docker; CI runs it through `make image-test`, deploy/image_test.sh). `make image` is run with the caller's BASE_IMAGE / WHEELS /
DOCKER / PIP_CERT unless LIVEFUSE_IMAGE_BUILD=0 (then LIVEFUSE_IMAGE, default livefuse:0.1.0, must exist).

    LIVEFUSE_IMAGE_TEST=1 BASE_IMAGE=livefuse-base:bookworm WHEELS=/opt/wheels DOCKER=/usr/bin/docker \\
        python -m pytest -q tests/deploy/test_image.py

The container runs as the chart runs it: read-only root, tmpfs /tmp and audit folder, a tokens file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("LIVEFUSE_IMAGE", "livefuse:0.1.0")
DOCKER = os.environ.get("DOCKER", "docker")
PRESTOP = ["/bin/sh", "-c", "kill -TERM 1"]   # the chart's preStop hook (tests/deploy/test_helm_chart.py)

pytestmark = pytest.mark.skipif(os.environ.get("LIVEFUSE_IMAGE_TEST") != "1",
                                reason="the image test builds and runs the container: LIVEFUSE_IMAGE_TEST=1 "
                                       "(needs Docker; minutes)")


def docker(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def get(url: str, timeout: float = 2.0) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers={"Host": "localhost"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.fixture(scope="module")
def image() -> dict:
    if shutil.which(DOCKER) is None:
        pytest.fail(f"LIVEFUSE_IMAGE_TEST=1 but {DOCKER} is not installed")
    built_s = None
    if os.environ.get("LIVEFUSE_IMAGE_BUILD", "1") != "0":
        t0 = time.monotonic()
        r = subprocess.run(["make", "image", f"IMAGE={IMAGE}", f"DOCKER={DOCKER}"], cwd=REPO, capture_output=True,
                           text=True, timeout=3600)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        built_s = time.monotonic() - t0
    (info,) = json.loads(docker("image", "inspect", IMAGE).stdout)
    print(f"image {IMAGE}: {info['Size'] / 1e9:.2f} GB" + (f", built in {built_s:.0f} s" if built_s else ""))
    return info


def test_image_runs_as_a_non_root_user_with_a_healthcheck(image):
    cfg = image["Config"]
    assert cfg["User"].split(":")[0] not in ("", "0", "root")
    assert cfg["Entrypoint"][:4] == ["livefuse", "serve", "--host", "0.0.0.0"]
    assert "8080/tcp" in cfg["ExposedPorts"]
    assert "/healthz" in " ".join(cfg["Healthcheck"]["Test"])


async def test_the_container_serves_streams_and_drains_on_sigterm(image, tmp_path, astronaut):
    import aiohttp

    from bench._cluster import free_port
    from bench._probe import ClipTrack, ProbeClient, clip_background
    from streamer.safety.auth import TokenStore

    store = TokenStore()
    token = store.issue("image-test")
    tokens = tmp_path / "tokens.json"
    store.save(tokens)
    tokens.chmod(0o644)          # the container's user (10001) reads it, as from a Secret volume
    port = free_port()
    name = f"livefuse-image-test-{os.getpid()}"
    docker("run", "-d", "--name", name, "--network", "host", "--read-only",
           "--tmpfs", "/tmp:rw,uid=10001,gid=10001,mode=1777",
           "--tmpfs", "/var/lib/livefuse/audit:rw,uid=10001,gid=10001,mode=700",
           "-e", f"LIVEFUSE_PORT={port}", "-e", "LIVEFUSE_MAX_SESSIONS=2", "-e", "LIVEFUSE_AUDIT_STDOUT=1",
           "-v", f"{tokens}:/run/livefuse/tokens.json:ro",
           IMAGE, "--tokens", "/run/livefuse/tokens.json", "--public-url", f"http://127.0.0.1:{port}",
           "--drain-timeout", "5")
    base = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        status = None
        while time.monotonic() - t0 < 180:
            try:
                status, body = get(f"{base}/readyz")
            except (urllib.error.URLError, ConnectionError, OSError):
                status = None
            if status == 200:
                break
            if not json.loads(docker("inspect", name).stdout)[0]["State"]["Running"]:
                break   # it exited: its log says why
            time.sleep(0.5)
        assert status == 200, docker("logs", name, check=False).stderr[-3000:]
        ready_s = time.monotonic() - t0
        assert get(f"{base}/healthz")[0] == 200
        # one real WebRTC session through the container
        client = ProbeClient(ClipTrack(clip_background(astronaut, 320, 240)))
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            body = await client.connect_http(base, http)
            assert body["urls"]["session"].startswith(base)   # absolute on the replica (--public-url)
            await client.wait_frames(30, timeout=60)
            await client.close()
        health = ""
        for _ in range(60):   # the image's HEALTHCHECK runs every 10 s
            health = json.loads(docker("inspect", name).stdout)[0]["State"].get("Health", {}).get("Status", "")
            if health == "healthy":
                break
            time.sleep(1)
        assert health == "healthy"
        # what the kubelet does: the chart's preStop command in the container, then SIGTERM (docker stop);
        # one drain, exit status 0, the audit records on stdout
        t1 = time.monotonic()
        docker("exec", name, *PRESTOP)
        docker("stop", "-t", "60", name, timeout=90)
        stop_s = time.monotonic() - t1
        state = json.loads(docker("inspect", name).stdout)[0]["State"]
        assert state["ExitCode"] == 0, docker("logs", name, check=False).stderr[-3000:]
        out = docker("logs", name).stdout
        events = [json.loads(l).get("event") for l in out.splitlines() if l.startswith("{")]
        assert "drain_started" in events and "drain_finished" in events
        assert events.count("drain_started") == 1   # the SIGTERM after the preStop is the same drain
        print(f"ready after {ready_s:.1f} s, SIGTERM to exit {stop_s:.1f} s")
    finally:
        docker("rm", "-f", name, check=False)


def test_the_container_runs_the_charts_pod_spec(image, tmp_path):
    """The chart's Deployment, run by hand as a kubelet would: its env (POD_IP = 127.0.0.1, the downward API
    here), its args after the image's entrypoint, its uid/gid and read-only root, the rendered Secret's files
    at the mount path (mode 0440 group fsGroup, as the kubelet writes them with fsGroup), the probes' paths and
    Host; then its preStop command and SIGTERM: exit 0 within the grace period, and the audit chain verifies
    with the Secret's key."""
    import base64

    import yaml

    from bench._cluster import free_port
    from streamer.safety.audit import verify
    from tests.deploy.test_helm_chart import CHART, find_helm

    helm = find_helm()
    if helm is None:
        pytest.fail("helm is needed to render the chart: make helm")
    port = free_port()
    # the tokens file as an operator gives it to the chart: /metrics asks the scraper for its token
    from streamer.safety.auth import TokenStore

    store = TokenStore()
    scraper = store.issue("prometheus")
    store.save(tmp_path / "tokens.json")
    r = subprocess.run([helm, "template", "lf", str(CHART), "--set", f"server.port={port}",
                        "--set", "server.drainTimeout=20", "--set-file", f"secrets.tokensJson={tmp_path / 'tokens.json'}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for key, value in secret["data"].items():
        f = secrets / key
        f.write_bytes(base64.b64decode(value))
        os.chown(f, 0, pod["securityContext"]["fsGroup"])
        f.chmod(0o440)
    audit = tmp_path / "audit"
    audit.mkdir()
    os.chown(audit, pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])
    env = {"POD_IP": "127.0.0.1", "POD_NAME": "lf-livefuse-0", "POD_NAMESPACE": "default"}
    flags: list[str] = []
    for e in c["env"]:
        if "value" in e:
            value = str(e["value"]).replace("$(POD_IP)", env["POD_IP"]).replace("$(POD_NAME)", env["POD_NAME"])
            flags += ["-e", f"{e['name']}={value}"]
    args = [a.replace("$(POD_IP)", env["POD_IP"]) for a in c["args"]]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    sc = pod["securityContext"]
    name = f"livefuse-chart-test-{os.getpid()}"
    docker("run", "-d", "--name", name, "--network", "host", "--read-only",
           "--user", f"{sc['runAsUser']}:{sc['runAsGroup']}", "--group-add", str(sc["fsGroup"]),
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
           "--tmpfs", f"{mounts['tmp']}:rw,mode=1777", "-v", f"{audit}:{mounts['audit']}",
           "-v", f"{secrets}:{mounts['secrets']}:ro", *flags, IMAGE, *args)
    try:
        host = {"Host": f"127.0.0.1:{port}"}   # what the kubelet's probes send: the pod IP and port
        t0 = time.monotonic()
        status = None
        while time.monotonic() - t0 < 180:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}{c['readinessProbe']['httpGet']['path']}", headers=host)
                with urllib.request.urlopen(req, timeout=2) as resp:
                    status = resp.status
            except urllib.error.HTTPError as e:
                status = e.code
            except (urllib.error.URLError, ConnectionError, OSError):
                status = None
            if status == 200 or not json.loads(docker("inspect", name).stdout)[0]["State"]["Running"]:
                break
            time.sleep(0.5)
        assert status == 200, docker("logs", name, check=False).stderr[-3000:]
        req = urllib.request.Request(f"http://127.0.0.1:{port}{c['livenessProbe']['httpGet']['path']}", headers=host)
        assert urllib.request.urlopen(req, timeout=2).status == 200
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=host)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=2)
        assert refused.value.code == 401
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={**host, "Authorization": f"Bearer {scraper}"})
        assert "livefuse_load_ratio" in urllib.request.urlopen(req, timeout=2).read().decode()
        # a Host the pod does not answer to is refused (the chart's names only)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(req, timeout=2)
        t1 = time.monotonic()
        docker("exec", name, *c["lifecycle"]["preStop"]["exec"]["command"])
        docker("stop", "-t", str(pod["terminationGracePeriodSeconds"]), name, timeout=120)
        assert time.monotonic() - t1 < pod["terminationGracePeriodSeconds"]
        assert json.loads(docker("inspect", name).stdout)[0]["State"]["ExitCode"] == 0
        report = verify(audit / "audit.jsonl", key_file=secrets / "audit.key")
        assert report.ok and report.records >= 2, report
    finally:
        docker("rm", "-f", name, check=False)
