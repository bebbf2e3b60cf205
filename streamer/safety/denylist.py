"""Protected identities and the source-registration gate.

A denylist is a folder of reference photos: `NAME.jpg`, or `NAME/any.jpg` for several photos of one
person. Each photo becomes a 128-d identity embedding (cached next to the photos, keyed by each file's
sha256, so restarts cost nothing and edited photos are re-embedded). A source whose face comes within
`threshold` of any reference is refused at registration. Every source also needs an explicit consent
flag; the audit log records the decision, the image's sha256 and its embedding hash (never the image).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from engines.sources import SOURCE_ID_RULE, SourceRefused, parse_index, valid_source_id
from streamer.safety.audit import embedding_hash

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
CACHE_NAME = ".denylist-cache.npz"
EMBEDDER_ID = "dlib_face_recognition_resnet_model_v1"
CONSENT_VALUES = ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class DenyMatch:
    refused: bool
    identity: str | None = None
    distance: float = float("inf")


class _Stills:
    """Feeds unrelated photos to a VIDEO-mode landmarker: far-apart timestamps, one at a time."""

    def __init__(self, landmarker: Any) -> None:
        self.landmarker = landmarker
        self._ts = 0
        self._lock = threading.Lock()

    def faces(self, image: np.ndarray) -> list:
        with self._lock:
            self._ts += 10_000
            return list(self.landmarker.detect(np.ascontiguousarray(image), self._ts))


def _read_rgb(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as img:
        return np.ascontiguousarray(np.asarray(img.convert("RGB"), np.uint8))


def _largest(faces: list) -> Any:
    return max(faces, key=lambda f: (f.bbox[2] - f.bbox[0]) * (f.bbox[3] - f.bbox[1]))


class IdentityDenylist:
    """`embedder`: an `engines.identity.IdentityEmbedder`; `landmarker`: an `engines.faces.MediaPipeLandmarker`."""

    def __init__(self, folder: str | os.PathLike, embedder: Any, landmarker: Any, *, threshold: float = 0.6,
                 cache_path: str | os.PathLike | None = None) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise FileNotFoundError(f"denylist folder {self.folder} does not exist")
        self.embedder = embedder
        self.stills = landmarker if isinstance(landmarker, _Stills) else _Stills(landmarker)
        self.threshold = threshold
        self.cache_path = Path(cache_path) if cache_path else self.folder / CACHE_NAME
        self.names: list[str] = []
        self.vectors = np.zeros((0, 128), np.float32)
        self.skipped: list[str] = []   # reference photos with no face in them
        self.reload()

    def _photos(self) -> list[tuple[str, Path]]:
        out = []
        for p in sorted(self.folder.rglob("*")):
            if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file() and not p.name.startswith("."):
                rel = p.relative_to(self.folder)
                name = rel.parts[0] if len(rel.parts) > 1 else p.stem
                out.append((name, p))
        return out

    def reload(self) -> None:
        cache = self._load_cache()
        names, vecs, entries, self.skipped = [], [], {}, []
        for name, path in self._photos():
            rel = str(path.relative_to(self.folder))
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            vec = cache.get((rel, digest))
            if vec is None:
                image = _read_rgb(path)
                faces = self.stills.faces(image)
                if not faces:
                    log.warning("denylist photo %s has no face; skipped", path)
                    self.skipped.append(rel)
                    continue
                vec = np.asarray(self.embedder.embed(image, _largest(faces)), np.float32)
            names.append(name)
            vecs.append(vec)
            entries[(rel, digest)] = vec
        self.names = names
        self.vectors = np.stack(vecs).astype(np.float32) if vecs else np.zeros((0, 128), np.float32)
        self._save_cache(entries)

    def _load_cache(self) -> dict[tuple[str, str], np.ndarray]:
        try:
            with np.load(self.cache_path, allow_pickle=False) as z:
                if str(z["embedder"]) != EMBEDDER_ID:
                    return {}
                return {(str(r), str(d)): v for r, d, v in zip(z["paths"], z["digests"], z["vectors"])}
        except (FileNotFoundError, KeyError, ValueError, OSError):
            return {}

    def _save_cache(self, entries: Mapping[tuple[str, str], np.ndarray]) -> None:
        keys = list(entries)
        try:
            tmp = self.cache_path.with_name(self.cache_path.name + ".tmp.npz")
            np.savez(tmp, embedder=np.array(EMBEDDER_ID), paths=np.array([k[0] for k in keys], dtype=str),
                     digests=np.array([k[1] for k in keys], dtype=str),
                     vectors=np.stack([entries[k] for k in keys]) if keys else np.zeros((0, 128), np.float32))
            os.replace(tmp, self.cache_path)
        except OSError as exc:  # a read-only folder still works, just without a cache
            log.warning("cannot write denylist cache %s: %s", self.cache_path, exc)

    def check_embedding(self, vec: np.ndarray) -> DenyMatch:
        if len(self.vectors) == 0:
            return DenyMatch(False)
        d = np.linalg.norm(self.vectors - np.asarray(vec, np.float32)[None, :], axis=1)
        i = int(np.argmin(d))
        return DenyMatch(bool(d[i] < self.threshold), self.names[i], float(d[i]))


class SourceGate:
    """Source registration's front door: consent first (cheap), then the registry finds the face and its
    identity embedding once, then the denylist. Nothing is stored in the session until all three pass.
    Fits a `register_source(session, image_rgb, form) -> dict` hook; call it off the event loop (the
    registry runs the landmarker and the identity embedder)."""

    def __init__(self, registry: Any, denylist: IdentityDenylist | None = None, *,
                 audit: Callable[..., None] | None = None) -> None:
        if denylist is not None and getattr(registry, "embedder", None) is None:
            raise ValueError("a denylist needs a registry with an identity embedder")
        self.registry = registry
        self.denylist = denylist
        self.audit = audit

    def _record(self, event: str, **fields: Any) -> None:
        if self.audit is not None:
            self.audit(event, **fields)

    def register(self, session: Any, image: np.ndarray, form: Mapping[str, str]) -> dict[str, Any]:
        image_sha = hashlib.sha256(np.ascontiguousarray(image).tobytes() + repr(image.shape).encode()).hexdigest()
        consent = str(form.get("consent", "")).strip().lower() in CONSENT_VALUES
        base: dict[str, Any] = {"session": session.id, "image_sha256": image_sha, "consent": consent}
        if not consent:
            self._record("source_refused", reason="no_consent", **base)
            raise SourceRefused("no_consent", "the source needs an explicit consent flag (consent=true): "
                                              "confirm you may use this face")
        try:
            source = self.registry.register(image, index=parse_index(form.get("index")))
        except SourceRefused as exc:
            self._record("source_refused", reason=exc.reason, **base)
            raise
        if source.embedding is not None:
            base["embedding_sha256"] = embedding_hash(source.embedding)
        if self.denylist is not None:
            match = self.denylist.check_embedding(source.embedding)
            if match.refused:
                self._record("source_refused", reason="protected_identity", identity=match.identity,
                             distance=round(match.distance, 3), **base)
                raise SourceRefused("protected_identity",
                                    "this face matches a protected identity and cannot be used as a source")
        source_id = str(form.get("source_id") or source.id)
        if not valid_source_id(source_id):
            raise SourceRefused("bad_request", f"source_id must be {SOURCE_ID_RULE}")
        session.add_source(source_id, source)
        self._record("source_registered", **base, source_id=source_id, face_index=source.face_index)
        out = {"source_id": source_id, **{k: v for k, v in source.summary().items() if k != "id"}}
        if "embedding_sha256" in base:
            out["embedding_sha256"] = base["embedding_sha256"]
        return out

