"""Debian's Ceph RadosGW as a single-node cluster on loopback (one monitor, one memstore OSD, cluster auth
off; the gateway checks S3 signatures and presigned-URL expiry itself), for the storage tests that need a
strict store. Starts in about 10 s; every daemon is stopped by its pid file at the end."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.moto_s3 import free_port

BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
ACCESS_KEY, SECRET_KEY = "LIVEFUSETESTKEY", "livefuse-test-secret"


@dataclass
class RadosGW:
    endpoint: str
    folder: Path

    def pids(self) -> list[int]:
        out = []
        for f in (self.folder / "run").glob("*.pid"):
            try:
                out.append(int(f.read_text().strip()))
            except ValueError:
                pass
        return out


def _conf(d: Path, fsid: str, mon: int, rgw: int) -> str:
    """The monitor exits 28 (ENOSPC) at start when its folder's disk has under `mon data avail crit` (5 %)
    free, as shared test machines often do; this cluster keeps its objects in memory, so both disk
    thresholds are off."""
    return f"""[global]
fsid = {fsid}
mon host = v1:127.0.0.1:{mon}
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 0
mon data avail crit = 0
run dir = {d}/run
log file = {d}/log/$name.log
pid file = {d}/run/$name.pid
admin socket = {d}/run/$name.asok
ms bind msgr2 = false
public addr = 127.0.0.1
osd objectstore = memstore
memstore device bytes = 1073741824
mon data = {d}/mon/$cluster-$id
osd data = {d}/osd/$cluster-$id
osd max object name len = 460
osd max object namespace len = 64
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{rgw}
rgw data = {d}/rgw
"""


def start_radosgw(folder: Path, timeout: float = 60.0) -> RadosGW:
    """The cluster up and a user made; whatever started is stopped again if any step fails."""
    try:
        return _start(folder, timeout)
    except BaseException:
        stop_radosgw(RadosGW("", folder))
        raise


def _start(folder: Path, timeout: float) -> RadosGW:
    d = folder
    for sub in ("run", "log", "mon", "osd/ceph-0", "rgw"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    mon, rgw = free_port(), free_port()
    conf = d / "ceph.conf"
    fsid, osd_uuid = str(uuid.uuid4()), str(uuid.uuid4())
    conf.write_text(_conf(d, fsid, mon, rgw))
    c = ["-c", str(conf)]

    def run(*cmd: str) -> None:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
        if done.returncode:
            said = done.stderr.strip()[-500:] or f"nothing on stderr; logs in {d / 'log'}"
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {said}")

    def run_until_up(*cmd: str, tries: int = 10) -> None:
        """The monitor daemonizes before it answers, and Ceph 16's OSD sometimes sends its first command
        before it has the monitor's map ("wrong fsid") and exits: on a busy machine both need a moment."""
        for attempt in range(tries):
            try:
                return run(*cmd)
            except RuntimeError:
                if attempt == tries - 1:
                    raise
                time.sleep(1.0)

    run("monmaptool", "--create", "--add", "a", f"v1:127.0.0.1:{mon}", "--fsid", fsid, str(d / "monmap"))
    run("ceph-mon", *c, "--mkfs", "-i", "a", "--monmap", str(d / "monmap"))
    run("ceph-mon", *c, "-i", "a")
    run_until_up("ceph", *c, "osd", "new", osd_uuid)
    run("ceph-osd", *c, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)   # the OSD's uuid must be the one the map holds
    run_until_up("ceph-osd", *c, "-i", "0", tries=5)
    run("radosgw", *c, "-n", "client.rgw")
    gw = RadosGW(f"http://127.0.0.1:{rgw}", d)
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(gw.endpoint, timeout=2).close()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"radosgw did not answer on {gw.endpoint} within {timeout} s; logs in {d / 'log'}")
            time.sleep(0.3)
    run("radosgw-admin", *c, "user", "create", "--uid", "livefuse", "--display-name", "livefuse",
        "--access-key", ACCESS_KEY, "--secret", SECRET_KEY)
    return gw


def stop_radosgw(gw: RadosGW) -> None:
    for pid in gw.pids():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    for pid in gw.pids():
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)


@pytest.fixture(scope="module")
def radosgw(tmp_path_factory):
    if any(shutil.which(b) is None for b in BINARIES):
        pytest.skip("needs Debian's ceph-mon, ceph-osd and radosgw (make debian-tools)")
    gw = start_radosgw(tmp_path_factory.mktemp("ceph"))
    try:
        yield gw
    finally:
        stop_radosgw(gw)
