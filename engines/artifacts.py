"""The committed prompt artifacts (engines/assets/): where they live, and their sha256 pins.

A committed artifact must match its line in `engines/assets/SHA256SUMS`, like a model file whose hash is
checked before use; `livefuse calibrate` rewrites the line when it rewrites the file. Artifacts elsewhere
(a user's own calibration under $LIVEFUSE_HOME) are not pinned.
"""

from __future__ import annotations

import os
from pathlib import Path

from engines.cards import file_sha256

ASSETS = Path(__file__).resolve().parent / "assets"


class CalibrationError(RuntimeError):
    """No usable projector/head artifact for this encoder; the message names the command that makes one."""


PINNED = ASSETS / "SHA256SUMS"   # the committed artifacts' sha256, rewritten by `livefuse calibrate`


def _pinned_sums() -> dict[str, str]:
    """file name -> sha256, from SHA256SUMS (`sha256sum` format)."""
    if not PINNED.is_file():
        return {}
    return {name: digest for digest, name in (line.split(maxsplit=1) for line in PINNED.read_text().splitlines() if line.strip())}


def check_pinned(path: Path) -> None:
    """A committed artifact (in engines/assets/) must match its line in SHA256SUMS: a changed file is
    refused, like a model file whose hash is wrong. Artifacts elsewhere (a user's calibration) are not pinned."""
    path = Path(path).resolve()
    if path.parent != ASSETS.resolve():
        return
    sums = _pinned_sums()
    want = sums.get(path.name)
    if want is None:
        raise CalibrationError(f"{path.name} has no line in {PINNED}; rewrite it: livefuse calibrate")
    if file_sha256(path) != want:
        raise CalibrationError(f"{path} does not match its sha256 in {PINNED}; rewrite it: livefuse calibrate")


def pin(path: Path) -> None:
    """Record a committed artifact's sha256 in SHA256SUMS (`livefuse calibrate` after writing it)."""
    path = Path(path).resolve()
    if path.parent != ASSETS.resolve():
        return
    sums = _pinned_sums()
    sums[path.name] = file_sha256(path)
    PINNED.write_text("".join(f"{h}  {n}\n" for n, h in sorted(sums.items())))


def read_artifact(path: str | os.PathLike, fmt: str, what: str) -> tuple[dict[str, str], dict]:
    """(metadata, tensors) of a safetensors artifact of format `fmt`, its pin checked first. `what` names
    it in errors ("calibration artifact", "intent head"), which say how to make a new one."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"no {what} at {path}; make one: livefuse calibrate --encoder NAME")
    check_pinned(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:   # safetensors raises several types for a bad file; the user needs one message
        raise CalibrationError(f"{path} is not a usable LiveFuse {what} ({exc}); "
                               f"make a new one: livefuse calibrate --encoder NAME") from exc
    if raw.get("format") != fmt:
        raise CalibrationError(f"{path} is not a usable LiveFuse {what} (format {raw.get('format')!r}, expected "
                               f"{fmt!r}); make a new one: livefuse calibrate --encoder NAME")
    return raw, tensors


def write_artifact(path: str | os.PathLike, tensors: dict, metadata: dict[str, str]) -> Path:
    """Written beside and moved into place, so a running server never loads half a file."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    os.replace(tmp, path)
    return path

