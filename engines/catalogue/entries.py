"""The model catalogue (models.json beside this file): what each model is, where it is published, how to
check it and under which licence, and where an installed copy lives.

A model is installed when its file is in the models folder: $LIVEFUSE_MODELS, else the user's cache
folder (`livefuse/models` under $XDG_CACHE_HOME or ~/.cache; ~/Library/Caches on macOS; %LOCALAPPDATA% on
Windows). An installed file is trusted only after its sha256 matches: the catalogue's, or for a model the
catalogue has no hash for, the one the user gave at `livefuse models get NAME --sha256 HEX` (kept in
`pins.json` in the models folder).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping

from engines.cards import file_sha256

CATALOGUE_FILE = Path(__file__).resolve().parent / "models.json"
MODELS_ENV = "LIVEFUSE_MODELS"
CATALOGUE_ENV = "LIVEFUSE_CATALOGUE"     # a site's own catalogue file (same format) in place of the packaged one
PINS_FILE = "pins.json"
PARTIAL_DIR = ".partial"

Kind = Literal["swapper", "embedder", "enhancer", "parser", "detector"]
KINDS: tuple[str, ...] = ("swapper", "embedder", "enhancer", "parser", "detector")


class CatalogueError(ValueError):
    """An unknown model name, a malformed catalogue, or an installed file that fails its check."""


@dataclass(frozen=True, slots=True)
class Licence:
    key: str
    name: str
    url: str
    commercial: bool
    spdx: str = ""

    @property
    def label(self) -> str:
        return self.spdx or self.key


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str | None
    shape: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """One model file as the catalogue lists it."""

    name: str
    kind: Kind
    card: str                      # the family card its runner uses (engines/swappers/cards.py, engines/enhancers.py, ...)
    family: str
    file: str
    urls: tuple[str, ...]
    size: int | None
    sha256: str | None
    sha256_source: str
    licence: Licence
    caveat: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    preprocessing: Mapping[str, Any] = field(default_factory=dict)
    pairs_with: str = ""
    reference: str = ""

    @property
    def commercial(self) -> bool:
        return self.licence.commercial

    def licence_line(self) -> str:
        use = "commercial use allowed" if self.commercial else "NON-COMMERCIAL"
        line = f"{self.name}: {self.licence.name} [{use}] {self.licence.url}"
        return line + (f" -- {self.caveat}" if self.caveat else "")


def _entry(raw: Mapping[str, Any], licences: Mapping[str, Licence]) -> Entry:
    name = raw.get("name")
    try:
        kind = raw["kind"]
        if kind not in KINDS:
            raise CatalogueError(f"{name}: kind {kind!r} is not one of {', '.join(KINDS)}")
        lic = licences[raw["licence"]]
        sha = raw.get("sha256")
        if sha is not None and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
            raise CatalogueError(f"{name}: sha256 must be 64 lower-case hex digits or null")
        if "/" in raw["file"] or raw["file"].startswith("."):
            raise CatalogueError(f"{name}: file must be a plain file name")
        sig = raw["signature"]
        return Entry(
            name=raw["name"], kind=kind, card=raw["card"], family=raw.get("family", ""), file=raw["file"],
            urls=tuple(raw["urls"]), size=raw.get("size"), sha256=sha, sha256_source=raw.get("sha256_source", ""),
            licence=lic, caveat=raw.get("caveat", ""),
            inputs=tuple(TensorSpec(t["name"], tuple(t["shape"])) for t in sig["inputs"]),
            outputs=tuple(TensorSpec(t["name"], tuple(t["shape"])) for t in sig["outputs"]),
            preprocessing=dict(raw.get("preprocessing", {})), pairs_with=raw.get("pairs_with", ""),
            reference=raw.get("reference", ""))
    except KeyError as exc:
        raise CatalogueError(f"catalogue entry {name!r} lacks {exc.args[0]!r}") from None


@dataclass(frozen=True, slots=True)
class Catalogue:
    entries: tuple[Entry, ...]

    def get(self, name: str) -> Entry:
        for e in self.entries:
            if e.name == name:
                return e
        known = ", ".join(e.name for e in self.entries)
        raise CatalogueError(f"no model {name!r} in the catalogue; known: {known}")

    def names(self, kind: str | None = None) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries if kind is None or e.kind == kind)

    def __contains__(self, name: object) -> bool:
        return any(e.name == name for e in self.entries)


def parse(data: Mapping[str, Any]) -> Catalogue:
    """A catalogue from its JSON form; names unique, every licence key defined."""
    if data.get("format") != "livefuse-catalogue/1":
        raise CatalogueError(f"unknown catalogue format {data.get('format')!r}")
    licences = {k: Licence(k, v["name"], v["url"], bool(v["commercial"]), v.get("spdx", ""))
                for k, v in data.get("licences", {}).items()}
    entries = []
    for raw in data.get("models", []):
        if raw.get("licence") not in licences:
            raise CatalogueError(f"{raw.get('name')}: licence {raw.get('licence')!r} is not defined under 'licences'")
        entries.append(_entry(raw, licences))
    names = [e.name for e in entries]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CatalogueError(f"duplicate model names: {', '.join(dupes)}")
    return Catalogue(tuple(entries))


@lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int) -> Catalogue:
    with open(path, encoding="utf-8") as f:
        return parse(json.load(f))


def load(path: str | os.PathLike | None = None) -> Catalogue:
    """The catalogue: `path`, else $LIVEFUSE_CATALOGUE (a site's own list, for example one pointing at an
    internal mirror), else the packaged models.json."""
    env = os.environ.get(CATALOGUE_ENV, "").strip()
    p = Path(path) if path is not None else Path(env).expanduser() if env else CATALOGUE_FILE
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        raise CatalogueError(f"catalogue file {p} cannot be read") from None
    try:
        return _load(str(p), mtime)
    except ValueError as exc:
        if isinstance(exc, CatalogueError):
            raise
        raise CatalogueError(f"catalogue file {p} is not valid JSON: {exc}") from None


def models_dir() -> Path:
    """$LIVEFUSE_MODELS, else the user's cache folder for LiveFuse models (not created here)."""
    env = os.environ.get(MODELS_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "livefuse" / "models"


# -- pins: hashes the user supplied for models the catalogue has none for ---------------------------------
_pins_lock = threading.Lock()


def read_pins(folder: Path) -> dict[str, str]:
    p = folder / PINS_FILE
    if not p.is_file():
        return {}
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise CatalogueError(f"{p} is not readable JSON; remove it and get the models again") from None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def write_pin(folder: Path, name: str, sha256: str | None) -> None:
    """Record (or with None forget) the user's hash for `name`; written beside and moved into place."""
    with _pins_lock:
        pins = read_pins(folder)
        if sha256 is None:
            pins.pop(name, None)
        else:
            pins[name] = sha256
        tmp = folder / (PINS_FILE + ".tmp")
        tmp.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, folder / PINS_FILE)


def expected_sha256(entry: Entry, folder: Path | None = None) -> str | None:
    """The hash an installed file must have: the catalogue's, else the user's pin, else None."""
    if entry.sha256:
        return entry.sha256
    return read_pins(folder or models_dir()).get(entry.name)


def installed_path(entry: Entry, folder: Path | None = None) -> Path | None:
    """Where the model's file is when installed (not checked here), else None."""
    p = (folder or models_dir()) / entry.file
    return p if p.is_file() else None


_checked: dict[tuple[str, int, int], str] = {}
_checked_lock = threading.Lock()


def _sha_cached(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _checked_lock:
        hit = _checked.get(key)
    if hit is None:
        hit = file_sha256(path)
        with _checked_lock:
            _checked[key] = hit
    return hit


def verified_path(name: str, kind: str | None = None, folder: Path | None = None,
                  catalogue: Catalogue | None = None) -> tuple[Path, Entry]:
    """The installed, hash-checked file of catalogue model `name`; CatalogueError saying what to run when it
    is missing, of another kind, or altered."""
    cat = catalogue or load()
    entry = cat.get(name)
    if kind is not None and entry.kind != kind:
        raise CatalogueError(f"{name} is a {entry.kind}, not a {kind}; {kind}s: {', '.join(cat.names(kind))}")
    folder = folder or models_dir()
    path = installed_path(entry, folder)
    if path is None:
        raise CatalogueError(f"model {name} is not installed in {folder}; get it: livefuse models get {name}")
    want = expected_sha256(entry, folder)
    if want is None:
        raise CatalogueError(f"{path} has no sha256 to check it against (the catalogue has none and no pin was "
                             f"given); get it again: livefuse models get {name} --sha256 HEX")
    got = _sha_cached(path)
    if got != want:
        raise CatalogueError(f"{path} has sha256 {got}, expected {want}: the file was altered or is another "
                             f"version; get it again: livefuse models remove {name} && livefuse models get {name}")
    return path, entry


@dataclass(frozen=True, slots=True)
class Resolved:
    """A model the server runs: its file, and the catalogue entry when it was named by catalogue name."""

    path: Path
    entry: Entry | None
    sha256: str = ""

    def licence_line(self) -> str:
        if self.entry is None:
            return f"{self.path.name}: the user's own file, not from the catalogue: its licence is not known here"
        return self.entry.licence_line()


def resolve(value: str, kind: str, folder: Path | None = None, catalogue: Catalogue | None = None) -> Resolved:
    """`--swapper inswapper_128` or `--swapper /path/file.onnx`: an existing path is taken as the user's own
    file; otherwise the value must be a catalogue name of `kind`, installed and verified."""
    p = Path(value).expanduser()
    if p.is_file():
        return Resolved(p, None)
    cat = catalogue or load()
    if value not in cat:
        if any(sep in value for sep in ("/", "\\")) or value.endswith(".onnx"):
            raise CatalogueError(f"{value}: no such model file")
        names = ", ".join(cat.names(kind)) or "none"
        raise CatalogueError(f"{value!r} is neither a file nor a catalogue {kind}; catalogue {kind}s: {names}")
    path, entry = verified_path(value, kind, folder, cat)
    return Resolved(path, entry, expected_sha256(entry, folder) or "")


def paired_with(value: str) -> str:
    """The embedder a catalogue swapper pairs with ("" for a file or a model without one)."""
    if Path(value).expanduser().is_file():
        return ""
    try:
        cat = load()
    except CatalogueError:
        return ""
    return cat.get(value).pairs_with if value in cat else ""
