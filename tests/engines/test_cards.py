"""Model cards for the networks inside the .task bundle: verified bytes, clear errors for altered files."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import replace

import pytest

from engines.cards import FACE_DETECTOR_NET, MEMBER_CARDS, ModelCard, ModelError


def test_bundle_members_read_and_verify():
    for card in MEMBER_CARDS.values():
        data = card.read()
        assert hashlib.sha256(data).hexdigest() == card.sha256
        if card.member.endswith(".tflite"):
            assert data[4:8] == b"TFL3"  # a TFLite flatbuffer


def _fake_bundle(tmp_path, monkeypatch, members: dict[str, bytes]) -> ModelCard:
    pkg = tmp_path / "fake_face_bundle"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    with zipfile.ZipFile(pkg / "face.task", "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    monkeypatch.syspath_prepend(str(tmp_path))
    digest = hashlib.sha256((pkg / "face.task").read_bytes()).hexdigest()
    return ModelCard(name="fake", package="fake-face-bundle==1.0", module="fake_face_bundle", file="face.task",
                     sha256=digest, licence="test")


def test_altered_member_is_refused_naming_the_package(tmp_path, monkeypatch):
    bundle = _fake_bundle(tmp_path, monkeypatch, {"face_detector.tflite": b"TFL3 but not the real weights"})
    card = replace(FACE_DETECTOR_NET, bundle=bundle)
    with pytest.raises(ModelError, match="fake-face-bundle==1.0") as err:
        card.read()
    assert "sha256" in str(err.value)


def test_missing_member_is_refused(tmp_path, monkeypatch):
    bundle = _fake_bundle(tmp_path, monkeypatch, {"other.tflite": b"x"})
    with pytest.raises(ModelError, match="missing"):
        replace(FACE_DETECTOR_NET, bundle=bundle).read()


def test_missing_package_says_what_to_install():
    card = ModelCard(name="nothing", package="no-such-package==0.0", module="no_such_package_here", file="x.task",
                     sha256="0" * 64, licence="")
    with pytest.raises(ModelError, match="pip install no-such-package==0.0"):
        replace(FACE_DETECTOR_NET, bundle=card).read()
