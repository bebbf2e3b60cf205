"""The server as a container's PID 1: a SIGTERM that arrives while it is still starting (models importing,
no port yet) ends it at once with status 0. PID 1 gets no default signal action, so without a handler of its
own such a SIGTERM is dropped and a pod deleted during startup waits out its whole grace period (930 s with
the chart's defaults); `make image` and tests/deploy/test_image.py run the real container."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def catches_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & SIGTERM_BIT)
    return False


def test_sigterm_during_startup_stops_the_server_at_once_with_status_0(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "LIVEFUSE_AUDIT_LOG": str(tmp_path / "audit.jsonl"), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "streamer.app.cli", "serve", "--port", str(port)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not catches_sigterm(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "the server never took SIGTERM"
            time.sleep(0.01)
        with socket.socket() as s:   # still starting: nothing listens yet
            assert s.connect_ex(("127.0.0.1", port)) != 0
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        assert code == 0, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() - t0 < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
