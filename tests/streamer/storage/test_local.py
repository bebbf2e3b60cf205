"""LocalStore: files land whole under their key, keys cannot leave the folder."""

from __future__ import annotations

import pytest

from streamer.storage import open_store


def test_put_get_and_keys_stay_inside(tmp_path):
    store = open_store(str(tmp_path / "results"))
    (tmp_path / "in.bin").write_bytes(b"x" * 1000)
    got = store.put_file("jobs/1/out.bin", tmp_path / "in.bin")
    assert got.size == 1000 and (tmp_path / "results/jobs/1/out.bin").read_bytes() == b"x" * 1000
    assert not list((tmp_path / "results/jobs/1").glob("*.partial"))
    assert store.presigned_url("jobs/1/out.bin").startswith("file://")
    assert store.get_file("jobs/1/out.bin", tmp_path / "back.bin").read_bytes() == b"x" * 1000
    with pytest.raises(ValueError, match="leaves"):
        store.put_file("../escape.bin", tmp_path / "in.bin")
    store.delete("jobs/1/out.bin")
    assert not store.exists("jobs/1/out.bin")
