"""Person segmentation: the networks are the carded files (sha256), they find the person in real photos,
and the right network is picked by the frame's shape."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

from engines import cards
from engines.cards import SELFIE_SEGMENTATION, SELFIE_SEGMENTATION_LANDSCAPE, ModelError
from engines.segmentation import PersonSegmenter, SegmentationConfig, card_for


def test_networks_are_the_carded_files():
    for card in (SELFIE_SEGMENTATION_LANDSCAPE, SELFIE_SEGMENTATION):
        data = card.read()
        assert hashlib.sha256(data).hexdigest() == card.sha256
        assert data[4:8] == b"TFL3"
        assert card.name in cards.WHEEL_FILE_CARDS


def test_an_altered_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / SELFIE_SEGMENTATION_LANDSCAPE.file).write_bytes(b"TFL3 but not the weights")
    monkeypatch.setenv(cards.MODEL_DIR_ENV, str(tmp_path))
    with pytest.raises(ModelError, match="sha256"):
        PersonSegmenter().segment(np.zeros((720, 1280, 3), np.uint8))


def test_wide_frames_take_the_landscape_network():
    assert card_for(1280, 720) is SELFIE_SEGMENTATION_LANDSCAPE
    assert card_for(640, 480) is SELFIE_SEGMENTATION
    assert card_for(512, 600) is SELFIE_SEGMENTATION
    assert card_for(512, 600, SegmentationConfig(model="landscape")) is SELFIE_SEGMENTATION_LANDSCAPE
    assert PersonSegmenter().input_size(1280, 720) == (256, 144)


def test_finds_the_person_in_real_photos(grace_hopper, astronaut, face_free_images):
    seg = PersonSegmenter()
    try:
        for photo, face in ((grace_hopper, (190, 150, 330, 330)), (astronaut, (180, 70, 270, 180))):
            mask = seg.segment(photo)
            h, w = mask.shape
            sy, sx = h / photo.shape[0], w / photo.shape[1]
            x0, y0, x1, y1 = face
            assert mask[int(y0 * sy):int(y1 * sy), int(x0 * sx):int(x1 * sx)].mean() > 0.95
            assert mask[: h // 8, : w // 8].mean() < 0.05        # the top-left corner is room
        assert seg.segment(face_free_images["rocket"]).mean() < 0.2
        with pytest.raises(ValueError, match="256x144"):
            seg(np.zeros((100, 100, 3), np.uint8), (1280, 720))
    finally:
        seg.close()
