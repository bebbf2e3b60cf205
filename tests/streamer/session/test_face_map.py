"""Per-face mapping on real portraits with the real face stage, fusion and identity embeddings: two
faces side by side get their own choices (a source, "keep"), the choice stays with each person while
they cross, and a person lost and found again (a new track id) gets the mapping back by identity, while
someone else who appears does not."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from engines.identity import IdentityEmbedder, distance
from engines.sources import SourceRegistry
from streamer.session.face_map import KEEP, REATTACH_DISTANCE, FaceFollower, FaceMapError, parse_face_map
from streamer.pipeline.pipeline import FrameState
from streamer.session.session import Session
from streamer.pipeline.stages.faces import FaceStage
from streamer.pipeline.stages.fusion import FusionStage
from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE, group_frame

SIZE = (640, 480)
WIDTH = 110


@pytest.fixture(scope="module")
def embedder():
    return IdentityEmbedder()


@pytest.fixture(scope="module")
def sources(astronaut, grace_hopper, embedder):
    reg = SourceRegistry(embedder=embedder)
    return {"astronaut": reg.register(astronaut), "hopper": reg.register(grace_hopper)}


def scene(astronaut, grace_hopper, a_at=None, h_at=None) -> np.ndarray:
    faces = []
    if a_at is not None:
        faces.append((astronaut, ASTRONAUT_FACE, WIDTH, a_at))
    if h_at is not None:
        faces.append((grace_hopper, GRACE_HOPPER_FACE, WIDTH, h_at))
    return group_frame(faces, size=SIZE)[0]


class Stream:
    """The stream's face stage and fusion stage (with its follower) over frames at 30 fps."""

    def __init__(self, session: Session, embedder) -> None:
        self.session = session
        self.faces = FaceStage()
        self.follower = FaceFollower(embedder)
        self.fusion = FusionStage(follower=self.follower)
        self.n = 0

    def __call__(self, image: np.ndarray) -> FrameState:
        state = FrameState(image=image.copy(), pts=self.n * 3000, time_base=Fraction(1, 90000))
        self.n += 1
        context = self.session.frame_context()
        state = self.faces(state, context)
        return self.fusion(state, context)

    def close(self) -> None:
        self.faces.close()
        self.fusion.close()


def session_with(sources, default=None) -> Session:
    s = Session()
    for src in sources.values():
        s.add_source(src.id, src, activate=False)
    s.update(source_id=default)
    return s


def by_x(state: FrameState):
    return sorted(state.faces, key=lambda f: f.bbox[0])


def embed_box(embedder, image, face):
    return embedder.embed(image, face)


def test_two_faces_get_their_own_choice_and_keep_stays_as_input(astronaut, grace_hopper, sources, embedder):
    a, h = sources["astronaut"], sources["hopper"]
    session = session_with(sources, default=a.id)     # unmapped faces would get the astronaut
    stream = Stream(session, embedder)
    frame = scene(astronaut, grace_hopper, a_at=(170, 240), h_at=(470, 240))
    try:
        state = None
        for _ in range(3):
            state = stream(frame)
        left, right = by_x(state)
        session.map_face(left.track_id, h.id)          # the astronaut wears Hopper
        session.map_face(right.track_id, KEEP)         # Hopper stays herself, though the default is the astronaut
        for _ in range(2):
            state = stream(frame)
        fused = {d["track_id"]: d["source_id"] for d in state.fused}
        assert fused == {left.track_id: h.id}
        out = state.image
        lf, rf = by_x(state)
        d_in, d_out = distance(embed_box(embedder, frame, lf), h.embedding), distance(embed_box(embedder, out, lf), h.embedding)
        assert d_out < d_in - 0.05, (d_in, d_out)       # the left face moved toward its source
        x0, y0, x1, y1 = (int(v) for v in rf.bbox)
        pad = int(0.3 * (x1 - x0))
        box = (slice(max(0, y0 - pad), y1 + pad), slice(max(0, x0 - pad), x1 + pad))
        assert np.array_equal(out[box], frame[box])     # the kept face is the input, pixel for pixel
        session.map_face(right.track_id, None)          # back to the default: now it is fused too
        state = stream(frame)
        assert {d["track_id"]: d["source_id"] for d in state.fused} == {left.track_id: h.id, right.track_id: a.id}
    finally:
        stream.close()


def test_mapping_follows_each_person_through_a_crossing(astronaut, grace_hopper, sources, embedder):
    a, h = sources["astronaut"], sources["hopper"]
    session = session_with(sources)
    stream = Stream(session, embedder)
    steps = 24
    try:
        ids = []
        for i in range(steps + 3):
            t = min(i, steps) / steps
            ax, hx = 130 + (380 * t), 510 - (380 * t)      # they pass each other, one above the other
            frame = scene(astronaut, grace_hopper, a_at=(ax, 150), h_at=(hx, 340))
            state = stream(frame)
            top, bottom = sorted(state.faces, key=lambda f: f.bbox[1])
            ids.append((top.track_id, bottom.track_id))
            if i == 2:
                session.map_face(top.track_id, h.id)
                session.map_face(bottom.track_id, a.id)
        assert len(set(ids)) == 1, ids                      # track ids stable through the crossing
        top_id, bottom_id = ids[0]
        assert {d["track_id"]: d["source_id"] for d in state.fused} == {top_id: h.id, bottom_id: a.id}
        top, bottom = sorted(state.faces, key=lambda f: f.bbox[1])
        assert top.bbox[0] > bottom.bbox[0]                 # they did cross
        assert distance(embedder.embed(state.image, top), h.embedding) < distance(embedder.embed(frame, top), h.embedding)
    finally:
        stream.close()


def test_a_lost_person_found_again_gets_the_mapping_back_by_identity(astronaut, grace_hopper, sources, embedder):
    h = sources["hopper"]
    session = session_with(sources)                      # no default: unmapped faces stay unchanged
    stream = Stream(session, embedder)
    both = scene(astronaut, grace_hopper, a_at=(170, 240), h_at=(470, 240))
    nobody = scene(astronaut, grace_hopper)
    try:
        for _ in range(3):
            state = stream(both)
        left, right = by_x(state)
        session.map_face(left.track_id, h.id)            # only the astronaut is mapped
        state = stream(both)
        assert left.track_id in stream.follower.embeddings
        for _ in range(20):                              # both leave for longer than the tracker waits
            state = stream(nobody)
        assert state.faces == []
        for _ in range(12):                              # both come back, swapped sides: new track ids
            state = stream(scene(astronaut, grace_hopper, a_at=(470, 240), h_at=(170, 240)))
        new_h, new_a = by_x(state)
        assert {new_a.track_id, new_h.track_id}.isdisjoint({left.track_id, right.track_id})
        assert stream.follower.aliases == {new_a.track_id: left.track_id}
        assert {d["track_id"]: d["source_id"] for d in state.fused} == {new_a.track_id: h.id}   # Hopper: nobody's mapping
        session.map_face(new_a.track_id, KEEP)           # an explicit choice for the new id wins over the alias
        state = stream(scene(astronaut, grace_hopper, a_at=(470, 240), h_at=(170, 240)))
        assert state.fused == []
    finally:
        stream.close()


def test_reattach_threshold_separates_the_two_people(astronaut, grace_hopper, embedder):
    """The stated threshold sits between one person's distances and two people's, on these photos."""
    from tests.streamer.pipeline.stages.test_fusion import detect

    a = scene(astronaut, grace_hopper, a_at=(200, 240))
    a2 = scene(astronaut, grace_hopper, a_at=(420, 260))
    h = scene(astronaut, grace_hopper, h_at=(300, 240))
    ea, ea2, eh = (embedder.embed(img, detect(img)[0]) for img in (a, a2, h))
    assert distance(ea, ea2) < REATTACH_DISTANCE < distance(ea, eh)


def test_parse_face_map_refuses_bad_input():
    assert parse_face_map("1=alice.jpg, 2=keep") == {1: "alice.jpg", 2: "keep"}
    for bad, code in (("", "bad_map"), ("x=keep", "bad_map"), ("1", "bad_map"), ("1=", "bad_map"),
                      ("-1=keep", "bad_map"), ("1=a,1=b", "bad_map"), ("1234567=keep", "bad_map"),
                      (",".join(f"{i}=keep" for i in range(17)), "too_many_faces")):
        with pytest.raises(FaceMapError) as err:
            parse_face_map(bad)
        assert err.value.code == code, bad
