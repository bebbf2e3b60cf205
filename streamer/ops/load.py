"""A replica's load as the autoscaler reads it: sessions against capacity, the frame budget the open
sessions use, draining, and GPU utilisation and memory where a GPU exists. Figures are set on the
metrics just before each scrape, from the live state, so they are never stale."""

from __future__ import annotations

import logging
import os
import statistics
import sys
from typing import Any, Iterable

from streamer.ops.metrics import Metrics
from streamer.ops.readiness import Readiness

log = logging.getLogger(__name__)


def frame_budget_used(peers: Iterable[Any], horizon_s: float = 5.0) -> float:
    """The mean over open sessions of each one's pipeline time per frame / frame interval (0 when none
    has sent frames lately). Above 1 the replica cannot keep up: frames drop."""
    values = [v for v in (p.stats.budget_used(horizon_s) for p in peers) if v is not None]
    return statistics.fmean(values) if values else 0.0


def observe(metrics: Metrics, ready: Readiness, draining: bool, peers: Iterable[Any], gpu: "GpuProbe | None") -> None:
    """Set the load gauges from the state now (called by GET /metrics)."""
    metrics.capacity.set(ready.capacity)
    metrics.load_ratio.set(ready.load_ratio)
    metrics.budget_used.set(frame_budget_used(peers))
    metrics.draining.set(1 if draining else 0)
    metrics.ready.set(1 if ready.ready else 0)
    if gpu is not None:
        gpu.observe(metrics)


def nvidia_present() -> bool:
    """A cheap look for an NVIDIA device, so a CPU replica never imports torch for its metrics."""
    return os.path.exists("/proc/driver/nvidia/gpus") or os.path.exists("/dev/nvidia0") or "torch" in sys.modules


class GpuProbe:
    """GPU figures through torch.cuda (utilisation needs NVML, which torch reads through pynvml when
    installed). Built only where `nvidia_present()`; `make()` gives None when no CUDA device answers."""

    def __init__(self, torch: Any, count: int) -> None:
        self.torch, self.count = torch, count

    @classmethod
    def make(cls) -> "GpuProbe | None":
        if not nvidia_present():
            return None
        try:
            import torch

            if not torch.cuda.is_available():
                return None
            return cls(torch, torch.cuda.device_count())
        except Exception:  # a broken CUDA install must not take the metrics down
            log.info("no GPU metrics: torch.cuda unavailable", exc_info=True)
            return None

    def observe(self, metrics: Metrics) -> None:
        util, used, total = metrics.gpu_gauges()
        cuda = self.torch.cuda
        for i in range(self.count):
            try:
                free, all_bytes = cuda.mem_get_info(i)
                used.labels(str(i)).set(all_bytes - free)
                total.labels(str(i)).set(all_bytes)
            except Exception:
                log.debug("gpu %d: memory figures unavailable", i, exc_info=True)
            try:
                util.labels(str(i)).set(cuda.utilization(i) / 100.0)
            except Exception:  # no pynvml: memory only
                pass
