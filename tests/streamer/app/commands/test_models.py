"""`livefuse models` as a user runs it (the installed console script, in its own process) against a local
HTTP server holding tiny models of each family's signature, listed by a site catalogue
($LIVEFUSE_CATALOGUE) into a models folder ($LIVEFUSE_MODELS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.engines.catalogue.conftest import server, site_catalogue, tiny_files  # noqa: F401 - fixtures


def livefuse(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("livefuse")
    return subprocess.run([str(exe), *argv], env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def test_models_list_get_verify_remove(tmp_path, server, tiny_files):  # noqa: F811 - fixtures
    env = {"LIVEFUSE_CATALOGUE": str(site_catalogue(tmp_path / "site.json", server, tiny_files)),
           "LIVEFUSE_MODELS": str(tmp_path / "models")}
    listed = livefuse(env, "models", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["gfpgan_1.4"] == {**rows["gfpgan_1.4"], "kind": "enhancer", "licence": "Apache-2.0",
                                  "commercial": True, "installed": False}
    assert rows["inswapper_128"]["commercial"] is False

    refused = livefuse(env, "models", "get", "inswapper_128")
    assert refused.returncode == 2 and "--accept-licence InsightFace-NonCommercial" in refused.stderr
    got = livefuse(env, "models", "get", "inswapper_128", "--accept-licence", "InsightFace-NonCommercial")
    assert got.returncode == 0, got.stderr
    assert "100%" in got.stderr and "installed: inswapper_128" in got.stdout    # progress bar, then the licence
    assert "NON-COMMERCIAL" in got.stdout
    assert (tmp_path / "models" / "inswapper_128.onnx").read_bytes() == server.script.files["/a/inswapper_128.onnx"]
    rows = {r["name"]: r for r in json.loads(livefuse(env, "models", "list", "--json").stdout)}
    assert rows["inswapper_128"]["installed"] is True
    assert livefuse(env, "models", "verify").returncode == 0
    assert livefuse(env, "models", "remove", "inswapper_128").returncode == 0
    assert not (tmp_path / "models" / "inswapper_128.onnx").exists()
