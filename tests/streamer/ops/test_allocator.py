"""The command line keeps the memory a frame frees: frame-sized arrays made and dropped on the main thread,
as `livefuse process` and the benchmarks do, stop faulting their pages in again every frame."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                                reason="mallopt's thresholds are glibc's")

# A frame's worth of arrays (six of 1.5 MB, written, then dropped) on the main thread; how the allocator was
# set up is the first argument: "cli" runs the command line's own start (`livefuse models --help`), "none" nothing.
FRAMES = """
import resource, sys
import numpy as np
if sys.argv[1] == "cli":
    from streamer.app import cli
    sys.argv = ["livefuse", "models", "--help"]
    try:
        cli.main()
    except SystemExit:
        pass
def frame():
    arrays = [np.ones((432, 360, 3), np.float32) for _ in range(6)]
    return sum(float(a[0, 0, 0]) for a in arrays)
for _ in range(5):
    frame()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    frame()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


def _faults_per_frame(setup: str, **env: str) -> float:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
    r = subprocess.run([sys.executable, "-c", FRAMES, setup], cwd=ROOT, env=environ, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return float(r.stdout.strip().splitlines()[-1])


def test_the_command_line_keeps_a_frames_memory_for_the_next():
    # without it, each of these frames faults its 11 MB in again (2,700 faults here); with it, none
    untouched = _faults_per_frame("none")
    kept = _faults_per_frame("cli")
    assert untouched > 500, f"the loop no longer shows the faults it is here to show ({untouched:.0f} a frame)"
    assert kept < 5, f"{kept:.1f} page faults a frame with the command line's allocator settings"


def test_a_users_own_malloc_settings_are_left_alone():
    # glibc's own variable, set to its default: the command line does not override what a user chose
    assert _faults_per_frame("cli", MALLOC_TRIM_THRESHOLD_="131072") > 500
