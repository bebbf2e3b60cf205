"""The project's own photos (tests/photos.py): unpacked from the source package only when every byte is the
one its card names, checked again at load, cropped about the face."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from tests import photos


def test_each_portrait_loads_with_a_face_the_landmarker_finds():
    from engines.faces import LandmarkerConfig, MediaPipeLandmarker

    lm = MediaPipeLandmarker(LandmarkerConfig(mode="image"))
    try:
        for name in photos.PORTRAITS:
            img = photos.load(name)
            assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
            faces = lm.detect(img, 0)
            assert len(faces) == 1, name
            x0, y0, x1, y1 = faces[0].bbox
            assert 0.15 <= (x1 - x0) / img.shape[1] <= 0.6, (name, faces[0].bbox, img.shape)   # a portrait, not a crowd
    finally:
        lm.close()


def _sdist(tmp_path, altered: str | None = None):
    """A source package holding the cards' members, copied from the unpacked photos, one of them altered."""
    folder = next(d for d in photos.photo_dirs() if (d / "obama.jpg").is_file())
    path = tmp_path / photos.SDIST
    with tarfile.open(path, "w:gz") as tar:
        for name, card in photos.CARDS.items():
            data = (folder / card.file).read_bytes()
            if name == altered:
                data = data[:-1] + bytes([data[-1] ^ 1])
            info = tarfile.TarInfo(card.member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpack_keeps_the_photos_whose_bytes_match_their_cards(tmp_path):
    out = photos.unpack(_sdist(tmp_path), tmp_path / "photos")
    assert sorted(p.name for p in out) == sorted(c.file for c in photos.CARDS.values())


def test_an_altered_photo_is_refused_and_leaves_no_file(tmp_path):
    with pytest.raises(photos.PhotoError, match="sha256"):
        photos.unpack(_sdist(tmp_path, altered="biden"), tmp_path / "photos")
    assert not (tmp_path / "photos" / "biden.jpg").exists()


def test_an_altered_file_on_disk_is_refused_at_load(tmp_path, monkeypatch):
    photos.unpack(_sdist(tmp_path), tmp_path / "photos")
    p = tmp_path / "photos" / "obama.jpg"
    data = p.read_bytes()
    p.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    monkeypatch.setenv(photos.PHOTO_DIR_ENV, str(tmp_path / "photos"))
    with pytest.raises(photos.PhotoError, match="make photos"):
        photos.load("obama")
