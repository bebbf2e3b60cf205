"""The C allocator told to keep the memory a frame frees for the next frame.

Each frame makes and drops arrays of the same few sizes (a face's region as float32 is 1-2 MB). glibc
gives the free top of the main thread's heap back to the system once it passes its trim threshold, which
starts at 128 KiB and rises only with freed mmap'd blocks, so on the main thread the next frame's arrays
fault their pages in again. Worker threads' arenas keep theirs. Every edit at once on a face 242 px wide
(`livefuse bench edits`' near face) took 1,529 page faults a frame on the main thread and 8.40 ms median;
with the settings below, 0.1 faults and 6.75 ms; on a worker thread, 0 faults either way (2026-12-07, the
shared 2-core x86-64 VM, /work/tmp/pf.py-style loop of 100 frames). The server runs frames on worker
threads; `livefuse process` and the benchmarks run them on the main thread, and with this they run as the
server does.

Only glibc has these knobs (`mallopt`); elsewhere nothing is changed. A user who sets glibc's own
`MALLOC_*_` variables has chosen, and is left alone.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

# glibc's malloc.h
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


@dataclass(frozen=True, slots=True)
class AllocatorConfig:
    mmap_threshold: int = 32 << 20   # blocks below this come from the heap, so a freed one is reused
    trim_threshold: int = 128 << 20  # free memory at the heap's top kept up to this, not given back


def keep_freed_memory(config: AllocatorConfig = AllocatorConfig()) -> bool:
    """Sets glibc's mmap and trim thresholds for this process; True when they were set."""
    if not sys.platform.startswith("linux") or any(k.startswith("MALLOC_") and k.endswith("_") for k in os.environ):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version   # glibc's own symbol: musl has no mallopt knobs
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt returns 1 on success
    return bool(mallopt(M_MMAP_THRESHOLD, config.mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, config.trim_threshold))
