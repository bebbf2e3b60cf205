"""Fixtures the streamer tests share."""

from tests.moto_s3 import moto_s3  # noqa: F401 - a real S3-compatible server on loopback
