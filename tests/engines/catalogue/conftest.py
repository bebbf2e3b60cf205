"""A local HTTP server holding tiny ONNX files with each catalogue family's exact signature, and a site
catalogue (same format as the packaged one) whose URLs and hashes point at them."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from engines.catalogue import entries as ce
from tests.engines.catalogue._server import FileServer


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> dict[str, bytes]:
    """catalogue name -> the bytes of a tiny model with that entry's signature (one per family card)."""
    pytest.importorskip("onnxruntime")
    from bench import _catalogue_models as cm

    folder = tmp_path_factory.mktemp("tiny_catalogue")
    cat = ce.load(ce.CATALOGUE_FILE)
    return {e.name: cm.for_entry(e, folder / e.name).read_bytes() for e in cat.entries}


@pytest.fixture
def server():
    s = FileServer()
    yield s
    s.close()


def site_catalogue(path: Path, server: FileServer, files: dict[str, bytes], *, known_hash: bool = True,
                   mirror_first: str | None = None) -> Path:
    """The packaged catalogue with each entry's URLs on `server` (/a/ then /b/) and its size and sha256 those
    of the tiny file (null sha256 where `known_hash` is False, for the --sha256 path)."""
    raw = json.loads(ce.CATALOGUE_FILE.read_text())
    out = copy.deepcopy(raw)
    for m in out["models"]:
        data = files[m["name"]]
        server.script.files[f"/a/{m['file']}"] = data
        m["urls"] = [f"{server.base}/a/{m['file']}", f"{server.base}/b/{m['file']}"]
        m["size"] = len(data)
        m["sha256"] = hashlib.sha256(data).hexdigest() if known_hash else None
    path.write_text(json.dumps(out))
    return path
