"""Fixtures the streamer tests share."""

import pytest

from tests.moto_s3 import moto_s3  # noqa: F401 - a real S3-compatible server on loopback


@pytest.fixture(scope="module")
def product(tmp_path_factory):
    """The real product (every model, the safety kit) with its audit log in a throwaway folder."""
    from streamer.app.assembly import Product, ProductConfig
    from streamer.web.kit import SafetyConfig

    audit = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    p = Product(ProductConfig(safety=SafetyConfig(audit_path=str(audit))))
    yield p
    p.close()
