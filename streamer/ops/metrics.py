"""Prometheus figures for one app, in the app's own registry (two apps in one process never mix)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.033, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
API_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0)
STAGE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.033, 0.05, 0.1, 0.25)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.sessions = Gauge("livefuse_sessions", "sessions open now", registry=r)
        self.sessions_total = Counter("livefuse_sessions_opened", "sessions opened", ["kind"], registry=r)
        self.refused = Counter("livefuse_requests_refused", "requests refused", ["reason"], registry=r)
        self.frames_in = Counter("livefuse_frames_in", "frames received from peers", registry=r)
        self.frames_out = Counter("livefuse_frames_out", "processed frames handed to the encoder", registry=r)
        self.dropped = Counter("livefuse_frames_dropped", "frames replaced by a newer one before processing", registry=r)
        self.latency = Histogram(
            "livefuse_server_latency_seconds", "frame arrival to processed frame ready", buckets=LATENCY_BUCKETS, registry=r
        )
        self.stage = Histogram("livefuse_stage_seconds", "time per pipeline stage", ["stage"], buckets=STAGE_BUCKETS, registry=r)
        self.stage_errors = Counter("livefuse_stage_errors", "pipeline stage failures", ["stage"], registry=r)
        self.messages = Counter("livefuse_control_messages", "data-channel messages", ["result"], registry=r)
        self.viewers = Gauge("livefuse_whep_viewers", "WHEP viewers watching now", registry=r)
        # for the autoscaler and capacity planning (streamer/ops/load.py sets them before every scrape)
        self.capacity = Gauge("livefuse_sessions_capacity", "sessions this replica takes before 503", registry=r)
        self.load_ratio = Gauge("livefuse_load_ratio", "open sessions / capacity", registry=r)
        self.budget_used = Gauge("livefuse_frame_budget_used_ratio",
                                 "pipeline time per frame / frame interval, recent average over the open sessions",
                                 registry=r)
        self.draining = Gauge("livefuse_draining", "1 while the replica drains (takes no new sessions)", registry=r)
        self.ready = Gauge("livefuse_ready", "1 while the replica takes new sessions (/readyz 200)", registry=r)
        self.heap_release = Histogram("livefuse_heap_release_seconds",
                                      "one collection + malloc_trim after sessions or viewers ended (off the event loop)",
                                      buckets=STAGE_BUCKETS, registry=r)
        # the REST API (streamer/web/api): photo requests and the model batches they share
        self.batch_size = Histogram("livefuse_batch_size", "items per model call (dynamic batching)", ["model"],
                                    buckets=BATCH_BUCKETS, registry=r)
        self.api_requests = Counter("livefuse_api_requests", "REST API requests answered", ["route", "status"], registry=r)
        self.api_latency = Histogram("livefuse_api_latency_seconds", "REST API request received to reply ready",
                                     ["route"], buckets=API_BUCKETS, registry=r)
        self._gpu: tuple[Gauge, Gauge, Gauge] | None = None

    def gpu_gauges(self) -> tuple[Gauge, Gauge, Gauge]:
        """Made on first use, so a replica without a GPU exports none."""
        if self._gpu is None:
            r = self.registry
            self._gpu = (Gauge("livefuse_gpu_utilization_ratio", "GPU busy fraction (NVML)", ["gpu"], registry=r),
                         Gauge("livefuse_gpu_memory_used_bytes", "GPU memory in use", ["gpu"], registry=r),
                         Gauge("livefuse_gpu_memory_total_bytes", "GPU memory in all", ["gpu"], registry=r))
        return self._gpu

    def render(self) -> bytes:
        return generate_latest(self.registry)
