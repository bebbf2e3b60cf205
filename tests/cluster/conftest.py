"""The cluster in a box (bench/_cluster.py): three replicas, HAProxy, Prometheus; one per module."""

from __future__ import annotations

import os

import pytest

from bench._cluster import Cluster, missing_tools


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = missing_tools()
    if missing:
        if os.environ.get("LIVEFUSE_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"LIVEFUSE_REQUIRE_CLUSTER=1 but {', '.join(missing)} not installed (make cluster-tools)")
        pytest.skip(f"cluster tests need Debian's {' and '.join(missing)}: apt-get install haproxy prometheus "
                    "(or make cluster-tools)")
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()
