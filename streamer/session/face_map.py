"""Which source each face gets: the session's per-face mapping, followed through a lost and found track.

A session maps track ids to source ids (`Controls.face_sources`, set by the client); the value KEEP
leaves that face unchanged, and a face not in the map gets the session's default (`Controls.source_id`,
None = unchanged). A track id lives while the tracker follows the face; when a person is lost (out of
frame, covered) and found again the tracker gives a new id. `FaceFollower` carries the mapping over:
it remembers the identity embedding of every mapped track it sees, and a new, unmapped track whose
embedding lies within `REATTACH_DISTANCE` of a mapped track that is no longer in view continues that
track's mapping (an alias; the client's map keeps the first id, and an explicit choice for the new id
wins over the alias).

Cost: one identity embedding (docs/faces.md) per mapped track once, and one per new track only
while a mapped track is missing; nothing per frame after that.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
from cachetools import FIFOCache

from kernels.twins import twin_for

if TYPE_CHECKING:  # pragma: no cover
    from engines.faces import Face

log = logging.getLogger(__name__)

KEEP = "keep"                # the mapping value that leaves a face as it is
MAX_MAPPED_FACES = 16        # mappings one session (or one file run, or one photo) may hold
MAX_TRACK_ID = 999_999       # track ids the protocol and the --map option accept
# dlib embeddings: the same person 0.07-0.19 under motion, light and noise, the astronaut vs Grace Hopper 0.70
# (docs/faces.md); 0.5 keeps a clear margin from both, stricter than dlib's same-person 0.6 since a wrong
# re-attachment puts one person's choice on another
REATTACH_DISTANCE = 0.5


class FaceMapError(ValueError):
    """A mapping that cannot be used; `code` is stable (protocol error code / API code)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_face_map(text: str, *, max_entries: int = MAX_MAPPED_FACES) -> dict[int, str]:
    """"1=alice.jpg,2=keep" -> {1: "alice.jpg", 2: "keep"}: what `livefuse process --map` and the photo
    API's `map` field take. FaceMapError("bad_map") for anything else."""
    out: dict[int, str] = {}
    items = [p.strip() for p in (text or "").split(",") if p.strip()]
    if not items:
        raise FaceMapError("bad_map", "the face map is empty; write it as ID=CHOICE,ID=CHOICE (e.g. 1=alice.jpg,2=keep)")
    if len(items) > max_entries:
        raise FaceMapError("too_many_faces", f"the face map names {len(items)} faces; at most {max_entries} may be mapped")
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key.isdigit() or not key.isascii() or len(key) > 6 or not value:
            raise FaceMapError("bad_map", f"face map entry {item[:60]!r} is not ID=CHOICE with a whole number ID (e.g. 2=keep)")
        index = int(key)
        if index in out:
            raise FaceMapError("bad_map", f"face {index} is mapped twice")
        out[index] = value
    return out


def source_choice(face: Face, face_sources: Mapping[int, str], default: str | None) -> str | None:
    """The source id a face gets (None: left unchanged): its mapping, else the default."""
    sid = face_sources.get(face.track_id) if face.track_id >= 0 else None
    if sid is None:
        sid = default
    return None if sid == KEEP else sid


class FaceFollower:
    """One per stream (it remembers tracks): `mapping(faces, face_sources, image)` is the frame's
    track id -> choice, with re-attached tracks filled in. `embedder.embed(image, face)` is the shared
    identity embedder (thread-safe)."""

    def __init__(self, embedder: Any, threshold: float = REATTACH_DISTANCE, max_tracks: int = 256) -> None:
        self.embedder = embedder
        self.threshold = threshold
        self.max_tracks = max_tracks
        self.embeddings: dict[int, np.ndarray] = {}   # track id -> identity embedding (mapped tracks, re-attached ones)
        self.aliases: dict[int, int] = {}             # new track id -> the mapped track id it continues
        self._checked: FIFOCache[int, None] = FIFOCache(maxsize=max_tracks)   # unmapped tracks already compared

    def root(self, track_id: int) -> int:
        return self.aliases.get(track_id, track_id)

    def mapping(self, faces: list[Any], face_sources: Mapping[int, str], image: Any) -> dict[int, str]:
        present = [f for f in faces if f.track_id >= 0]
        for face in present:                       # remember who each mapped track is, once
            tid = face.track_id
            if tid in face_sources and tid not in self.embeddings:
                emb = self._embed(image, face)
                if emb is not None:
                    self.embeddings[tid] = emb
        shown = {self.root(f.track_id) for f in present}
        orphans = {t: e for t, e in self.embeddings.items() if t in face_sources and t not in shown}
        for face in present:
            tid = face.track_id
            if not orphans or tid in face_sources or tid in self.aliases or tid in self._checked:
                continue
            self._checked[tid] = None
            emb = self._embed(image, face)
            if emb is None:
                continue
            best, dist = min(((t, float(np.linalg.norm(emb - e))) for t, e in orphans.items()), key=lambda p: p[1])
            if dist < self.threshold:
                self.aliases[tid] = best
                del orphans[best]
                log.info("face map: track %d is track %d again (identity distance %.2f)", tid, best, dist)
        self._bound(face_sources)
        out = {}
        for face in present:
            tid = face.track_id
            choice = face_sources.get(tid)
            if choice is None and tid in self.aliases:
                choice = face_sources.get(self.aliases[tid])
            if choice is not None:
                out[tid] = choice
        return out

    def _embed(self, image: Any, face: Face) -> np.ndarray | None:
        from engines.identity import IdentityError

        if callable(image):                         # a planes frame: converted whole only when a face is embedded
            image = image()
        frame = twin_for(image).host(image)
        try:
            return np.asarray(self.embedder.embed(frame, face), np.float32)
        except IdentityError as exc:                # too small or outside the frame: try again on a later track
            log.debug("face map: track %d not embedded: %s", face.track_id, exc)
            return None

    def _bound(self, face_sources: Mapping[int, str]) -> None:
        for t in [t for t in self.embeddings if t not in face_sources]:
            del self.embeddings[t]                  # an unmapped track needs no memory
        for t in [t for t, r in self.aliases.items() if r not in face_sources]:
            del self.aliases[t]
