"""`livefuse models` against a real HTTP server on loopback serving tiny ONNX files with each family's
signature: list, get with progress, a cut transfer resumed with Range, retries on 5xx, a mirror, a wrong
hash refused with nothing left in the models folder, the licence gate, a model without a published hash,
a disk too small, verify and remove."""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from engines.catalogue import cli
from engines.catalogue import entries as ce
from engines.catalogue.download import (DiskFull, DownloadFailed, HashMismatch, HashUnknown, LicenceNotAccepted,
                                        Retry, get)
from tests.engines.catalogue.conftest import site_catalogue

FAST = Retry(attempts=3, backoff_s=0.01, timeout_s=5.0)


def run_cli(*argv: str) -> tuple[int, str, str]:
    import argparse

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(p.parse_args(list(argv)), out, err)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def site(tmp_path, server, tiny_files, monkeypatch):
    cat_file = site_catalogue(tmp_path / "site.json", server, tiny_files)
    models = tmp_path / "models"
    monkeypatch.setenv("LIVEFUSE_CATALOGUE", str(cat_file))
    monkeypatch.setenv("LIVEFUSE_MODELS", str(models))
    return ce.load(cat_file), models


def leftovers(models) -> list[str]:
    return sorted(str(p.relative_to(models)) for p in models.rglob("*")) if models.exists() else []


def test_list_json_names_kind_licence_commercial_installed(site):
    cat, models = site
    rc, out, _ = run_cli("list", "--json")
    assert rc == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == set(cat.names())
    for name in ("inswapper_128", "simswap_256", "ghost_1_256", "arcface_w600k_r50", "gfpgan_1.4",
                 "restoreformer_plus_plus", "codeformer", "gpen_bfr_512", "bisenet_resnet_34", "xseg_1"):
        r = rows[name]
        assert {"name", "kind", "licence", "commercial", "installed"} <= set(r)
        assert isinstance(r["commercial"], bool) and r["installed"] is False
    assert rows["inswapper_128"]["commercial"] is False and rows["gfpgan_1.4"]["commercial"] is True
    assert rows["codeformer"]["licence"] == "S-Lab-1.0" and rows["bisenet_resnet_34"]["licence"] == "MIT"
    # the table says NO in capitals for non-commercial models and prints the caveats
    rc, out, _ = run_cli("list")
    assert rc == 0 and "inswapper_128" in out and " NO " in out and "CelebAMask-HQ" in out


def test_get_with_progress_installs_and_verifies(site, server):
    cat, models = site
    rc, out, err = run_cli("get", "gfpgan_1.4")
    assert rc == 0, err
    path = models / "gfpgan_1.4.onnx"
    assert path.read_bytes() == server.script.files["/a/gfpgan_1.4.onnx"]
    assert "installed: gfpgan_1.4" in out and "Apache-2.0" in out
    size = len(path.read_bytes())
    assert "gfpgan_1.4" in err and "100%" in err          # tqdm's bar on stderr reached the whole file
    assert leftovers(models) == ["gfpgan_1.4.onnx"]       # no .partial folder, no pins for a catalogue hash
    rows = {r["name"]: r for r in json.loads(run_cli("list", "--json")[1])}
    assert rows["gfpgan_1.4"]["installed"] is True and rows["gfpgan_1.4"]["size"] == size
    assert run_cli("verify")[0] == 0
    # a second get finds it installed and fetches nothing
    n = len(server.script.log)
    rc, out, _ = run_cli("get", "gfpgan_1.4")
    assert rc == 0 and "already installed" in out and len(server.script.log) == n
    # an altered file fails verify, and the server refuses to load it by name
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    rc, out, _ = run_cli("verify", "gfpgan_1.4")
    assert rc == 1 and "FAILED" in out
    with pytest.raises(ce.CatalogueError, match="expected"):
        ce.resolve("gfpgan_1.4", "enhancer")
    rc, out, _ = run_cli("remove", "gfpgan_1.4")
    assert rc == 0 and not path.exists()


def test_a_cut_transfer_resumes_from_where_it_stopped(site, server):
    cat, models = site
    entry = cat.get("gpen_bfr_256")
    data = server.script.files["/a/gpen_bfr_256.onnx"]
    cut = len(data) // 3
    server.script.cuts["/a/gpen_bfr_256.onnx"] = [cut, cut]          # two cuts, then the rest
    res = get("gpen_bfr_256", folder=models, accept=["GPEN-NonCommercial"], retry=FAST, catalogue=cat)
    assert res.downloaded and res.path.read_bytes() == data
    ranges = [r for p, r in server.script.log if p == "/a/gpen_bfr_256.onnx"]
    assert ranges == [None, f"bytes={cut}-", f"bytes={2 * cut}-"]  # resumed, not restarted
    assert leftovers(models) == ["gpen_bfr_256.onnx"]
    assert entry.sha256 == hashlib.sha256(data).hexdigest()


def test_a_server_that_ignores_range_restarts_cleanly(site, server):
    cat, models = site
    p = "/a/gpen_bfr_256.onnx"
    server.script.cuts[p] = [1000]
    server.script.ignore_range.add(p)
    res = get("gpen_bfr_256", folder=models, accept=["gpen_bfr_256"], retry=FAST, catalogue=cat)
    assert res.path.read_bytes() == server.script.files[p]


def test_retries_back_off_then_the_next_mirror(site, server):
    cat, models = site
    pauses: list[float] = []
    server.script.statuses["/a/xseg_1.onnx"] = [503, 503, 503]      # every try on the first URL fails
    server.script.files["/b/xseg_1.onnx"] = server.script.files["/a/xseg_1.onnx"]
    res = get("xseg_1", folder=models, retry=FAST, catalogue=cat, sleep=pauses.append)
    assert res.path.is_file()
    assert pauses == [0.01, 0.02]                                    # exponential backoff between tries
    assert [p for p, _ in server.script.log] == ["/a/xseg_1.onnx"] * 3 + ["/b/xseg_1.onnx"]


def test_mirror_base_is_tried_first(site, server, tmp_path):
    cat, models = site
    server.script.files["/site-mirror/xseg_1.onnx"] = server.script.files["/a/xseg_1.onnx"]
    rc, out, err = run_cli("get", "xseg_1", "--mirror", f"{server.base}/site-mirror/", "--quiet")
    assert rc == 0, err and err == ""
    assert [p for p, _ in server.script.log] == ["/site-mirror/xseg_1.onnx"]


def test_wrong_hash_is_refused_and_nothing_is_left(site, server):
    cat, models = site
    server.script.files["/a/gfpgan_1.4.onnx"] = b"not the model" * 1000
    with pytest.raises(HashMismatch, match="sha256 .* expected"):
        get("gfpgan_1.4", folder=models, retry=FAST, catalogue=cat)
    assert leftovers(models) == []
    rc, _, err = run_cli("get", "gfpgan_1.4", "--quiet")
    assert rc == 2 and "nothing was kept" in err
    assert leftovers(models) == []


def test_every_url_down_fails_clearly_and_leaves_nothing(site, server):
    cat, models = site
    server.script.cuts["/a/xseg_1.onnx"] = [50, 0, 0]
    with pytest.raises(DownloadFailed) as err:
        get("xseg_1", folder=models, retry=FAST, catalogue=cat, sleep=lambda s: None)
    msg = str(err.value)
    assert "/a/xseg_1.onnx: cut at 50 of" in msg and "/b/xseg_1.onnx: HTTP 404" in msg
    assert leftovers(models) == []


def test_licence_gate(site, server):
    cat, models = site
    with pytest.raises(LicenceNotAccepted, match="--accept-licence InsightFace-NonCommercial"):
        get("inswapper_128", folder=models, retry=FAST, catalogue=cat)
    assert server.script.log == [] and leftovers(models) == []      # refused before any byte moved
    rc, _, err = run_cli("get", "codeformer")
    assert rc == 2 and "non-commercial" in err and "--accept-licence S-Lab-1.0" in err
    rc, out, err = run_cli("get", "codeformer", "--accept-licence", "S-Lab-1.0", "--quiet")
    assert rc == 0, err
    assert "NON-COMMERCIAL" in out                                    # the licence is printed on install
    # accepting another model's licence does not unlock this one
    with pytest.raises(LicenceNotAccepted):
        get("gpen_bfr_512", folder=models, accept=["S-Lab-1.0"], catalogue=cat)
    # commercial-use licences need nothing
    assert get("bisenet_resnet_34", folder=models, retry=FAST, catalogue=cat).downloaded


def test_model_without_a_published_hash_needs_one_from_the_user(tmp_path, server, tiny_files, monkeypatch):
    cat_file = site_catalogue(tmp_path / "site.json", server, tiny_files, known_hash=False)
    models = tmp_path / "models"
    monkeypatch.setenv("LIVEFUSE_CATALOGUE", str(cat_file))
    monkeypatch.setenv("LIVEFUSE_MODELS", str(models))
    cat = ce.load(cat_file)
    with pytest.raises(HashUnknown, match="--sha256 HEX"):
        get("bisenet_resnet_18", folder=models, catalogue=cat)
    assert server.script.log == []
    good = hashlib.sha256(tiny_files["bisenet_resnet_18"]).hexdigest()
    with pytest.raises(HashMismatch):
        get("bisenet_resnet_18", folder=models, sha256="0" * 64, retry=FAST, catalogue=cat)
    assert leftovers(models) == ["pins.json"] or leftovers(models) == []
    rc, out, err = run_cli("get", "bisenet_resnet_18", "--sha256", good.upper(), "--quiet")
    assert rc == 0, err
    assert json.loads((models / "pins.json").read_text()) == {"bisenet_resnet_18": good}
    assert run_cli("verify", "bisenet_resnet_18")[0] == 0
    path, entry = ce.verified_path("bisenet_resnet_18", "parser")
    assert path == models / "bisenet_resnet_18.onnx"
    run_cli("remove", "bisenet_resnet_18")
    assert json.loads((models / "pins.json").read_text()) == {}


def test_a_disk_too_small_is_refused_before_downloading(site, server, tmp_path):
    cat, models = site
    raw = json.loads(ce.CATALOGUE_FILE.read_text())
    for m in raw["models"]:
        m["urls"] = [f"{server.base}/a/{m['file']}"]
        m["size"] = 1 << 60                  # an exabyte: no disk here has that free
    big = tmp_path / "big.json"
    big.write_text(json.dumps(raw))
    with pytest.raises(DiskFull, match="not enough free disk"):
        get("xseg_1", folder=models, sha256="ab" * 32, catalogue=ce.load(big))
    assert server.script.log == [] and leftovers(models) == []


def test_unknown_names_and_bad_arguments_are_clear(site):
    rc, _, err = run_cli("get", "no_such_model")
    assert rc == 2 and "no model 'no_such_model'" in err and "inswapper_128" in err
    rc, _, err = run_cli("get", "xseg_1", "--sha256", "xyz")
    assert rc == 2 and "64 hex digits" in err
    rc, out, _ = run_cli("verify", "xseg_1")
    assert rc == 1 and "MISSING" in out
    rc, out, _ = run_cli("remove", "xseg_1")
    assert rc == 0 and "was not installed" in out


def test_a_redirect_is_followed_and_a_resume_keeps_its_range(site, server):
    """Publishers' URLs redirect to a CDN (GitHub releases, Hugging Face): the Range goes along."""
    cat, models = site
    data = server.script.files["/a/xseg_1.onnx"]
    server.script.files["/cdn/xseg_1.onnx"] = data
    server.script.redirects["/a/xseg_1.onnx"] = "/cdn/xseg_1.onnx"
    server.script.cuts["/cdn/xseg_1.onnx"] = [len(data) // 2]
    res = get("xseg_1", folder=models, retry=FAST, catalogue=cat)
    assert res.path.read_bytes() == data
    cdn = [r for p, r in server.script.log if p == "/cdn/xseg_1.onnx"]
    assert cdn == [None, f"bytes={len(data) // 2}-"]
