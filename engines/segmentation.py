"""Person segmentation: MediaPipe's selfie segmentation networks (Apache-2.0, unpacked from the mediapipe
0.10.21 wheel and checked by sha256, engines.cards) in LiteRT's interpreter, one thread.

The network sees the whole frame at its own small size and answers a person probability per pixel at
that size; the background stage refines it to the frame's resolution along the person's edges and over
time (kernels/*/background.py). Wide frames (16:9 streams) go to the landscape network (256 x 144, the
cheaper; docs/background.md has its cost); square and portrait images (photos) to the general one (256 x 256), which the
stretch of a portrait into 16:9 would otherwise squash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

from engines.cards import SELFIE_SEGMENTATION, SELFIE_SEGMENTATION_LANDSCAPE, WheelFileCard

Choice = Literal["auto", "landscape", "square"]


@dataclass(frozen=True, slots=True)
class SegmentationConfig:
    """model: "auto" picks the landscape network for frames at least `wide_aspect` times as wide as tall,
    the square one otherwise; "landscape" / "square" always use that one.
    threads: LiteRT threads per network (one keeps a stream's cost on one core)."""

    model: Choice = "auto"
    wide_aspect: float = 1.5
    threads: int = 1


def card_for(width: int, height: int, config: SegmentationConfig = SegmentationConfig()) -> WheelFileCard:
    """The network a `width` x `height` frame goes to."""
    if config.model == "landscape":
        return SELFIE_SEGMENTATION_LANDSCAPE
    if config.model == "square":
        return SELFIE_SEGMENTATION
    return SELFIE_SEGMENTATION_LANDSCAPE if width >= config.wide_aspect * height else SELFIE_SEGMENTATION


Runner = Callable[[Any], list[Any]]


class PersonSegmenter:
    """The person probability of an RGB thumbnail at the network's input size (card.input_size, from
    `input_size(width, height)`). Networks are made on first use and kept; `close` gives them back."""

    def __init__(self, config: SegmentationConfig = SegmentationConfig(),
                 runner_factory: Callable[[bytes], Runner] | None = None) -> None:
        self.config = config
        self._factory = runner_factory
        self._runners: dict[str, Runner] = {}

    def input_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of the thumbnail a `width` x `height` frame is read at."""
        return card_for(width, height, self.config).input_size

    def _runner(self, card: WheelFileCard) -> Runner:
        runner = self._runners.get(card.name)
        if runner is None:
            data = card.read()                     # verified against the card's sha256
            if self._factory is not None:
                runner = self._factory(data)
            else:
                from engines.backends.interpreter import InterpreterRunner

                runner = InterpreterRunner(data, threads=self.config.threads)
            self._runners[card.name] = runner
        return runner

    def __call__(self, thumbnail: np.ndarray, frame_size: tuple[int, int] | None = None) -> np.ndarray:
        """float32 (h, w) person probability in [0, 1] for a uint8 RGB thumbnail of (h, w) = the network's
        input size. `frame_size` (width, height) of the frame it comes from picks the network (default: the
        thumbnail's own size)."""
        w, h = frame_size if frame_size is not None else (thumbnail.shape[1], thumbnail.shape[0])
        card = card_for(w, h, self.config)
        if thumbnail.shape[:2] != (card.input_size[1], card.input_size[0]) or thumbnail.ndim != 3:
            raise ValueError(f"{card.name} reads a {card.input_size[0]}x{card.input_size[1]} RGB thumbnail, "
                             f"got shape {thumbnail.shape}")
        x = thumbnail.astype(np.float32) * np.float32(1.0 / 255.0)
        (out,) = self._runner(card)(x[None])[:1]
        return np.clip(np.asarray(out, np.float32).reshape(card.input_size[1], card.input_size[0]), 0.0, 1.0)

    def segment(self, image: np.ndarray) -> np.ndarray:
        """The person probability of a whole uint8 RGB image, at the network's size."""
        import cv2

        h, w = image.shape[:2]
        size = self.input_size(w, h)
        thumb = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        return self(thumb, (w, h))

    def close(self) -> None:
        for runner in self._runners.values():
            close = getattr(runner, "close", None)
            if close is not None:
                close()
        self._runners.clear()
