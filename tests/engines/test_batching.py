"""engines/batching.py: one landmark network shared by several streams. Calls that arrive together must
run as one batch, each caller must get exactly its own rows (the same landmarks as running alone, on real
face crops), a failing batch must fail its callers rather than hang them, and the last user's close must
stop the worker. On the CPU here; the CUDA path (pinned buffer, own stream) runs where a GPU is."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engines.backends import BackendSettings, select_backend
from engines.batching import SharedBatchRunner, shared_runner
from engines.faces import LandmarkerConfig, MediaPipeLandmarker
from engines.landmarks.networks import LANDMARKS_MEMBER, LandmarkNet, crop, load_network, roi_from_landmarks
from tests.faceclips import place


@pytest.fixture(scope="module")
def crops(astronaut, grace_hopper):
    """Four real face crops: both photos, straight and turned 15 degrees."""
    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1, mode="image"))
    out = []
    try:
        for photo in (astronaut, grace_hopper):
            for angle in (0, 15):
                frame, _ = place(photo, angle=angle)
                face = lm.detect(frame, 0)[0]
                out.append(crop(frame, roi_from_landmarks(face.landmarks), 256)[0])
    finally:
        lm.close()
    return np.stack(out)


def _at_once(runner, inputs):
    """Each input from its own thread, released together; results in input order."""
    gate = threading.Barrier(len(inputs))
    results: list = [None] * len(inputs)

    def call(i):
        gate.wait()
        try:
            results[i] = runner(inputs[i])
        except Exception as exc:   # noqa: BLE001 - the test looks at it
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_calls_that_arrive_together_run_as_one_batch_and_each_gets_its_own_rows(crops):
    net = load_network(LANDMARKS_MEMBER, "cpu")
    alone = LandmarkNet("cpu", graph=net)
    runner = SharedBatchRunner(net, "cpu", max_batch=8, window_ms=200)
    try:
        shared = LandmarkNet("cpu", graph=runner)
        results = _at_once(shared.run, [crops[i:i + 1] for i in range(4)])
        for i, (pts, presence) in enumerate(results):
            ref_pts, ref_presence = alone.run(crops[i:i + 1])
            assert np.abs(pts - ref_pts).max() < 1e-3 and abs(presence[0] - ref_presence[0]) < 1e-5
        assert np.abs(results[0][0] - results[2][0]).max() > 5.0        # different faces really went through
        assert runner.stats.calls == 4 and runner.stats.batches < 4 and runner.stats.largest >= 2, runner.stats
    finally:
        runner.close()


def test_a_batch_never_exceeds_max_batch(crops):
    runner = SharedBatchRunner(load_network(LANDMARKS_MEMBER, "cpu"), "cpu", max_batch=2, window_ms=200)
    try:
        results = _at_once(runner, [crops[:2].astype(np.float32) / 255.0] * 3)
        assert all(len(r[0]) == 2 for r in results)
        assert runner.stats.largest == 2 and runner.stats.batches == 3
    finally:
        runner.close()


def test_a_failing_batch_fails_its_callers_and_the_runner_goes_on(crops):
    calls = {"n": 0}

    def flaky(x):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the GPU fell over")
        return [x.sum(dim=(1, 2, 3))]

    runner = SharedBatchRunner(flaky, "cpu", window_ms=200)
    try:
        first = _at_once(runner, [np.ones((1, 4, 4, 3), np.float32)] * 2)
        assert all(isinstance(r, RuntimeError) and "fell over" in str(r) for r in first)
        (total,) = runner(np.ones((1, 4, 4, 3), np.float32))
        assert total.tolist() == [48.0]
    finally:
        runner.close()


def test_shared_by_key_until_the_last_user_closes_it():
    made = []

    def make(forget):
        made.append(SharedBatchRunner(lambda x: [x], "cpu", window_ms=0, on_last_close=forget))
        return made[-1]

    a = shared_runner(("test", 1), make)
    b = shared_runner(("test", 1), make)
    assert a is b and len(made) == 1
    a.close()
    assert b(np.zeros((1, 2), np.float32))[0].shape == (1, 2)     # still serving its other user
    b.close()
    assert not made[0]._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        b(np.zeros((1, 2), np.float32))
    c = shared_runner(("test", 1), make)                          # a closed one is replaced, not reused
    assert c is not a and len(made) == 2
    c.close()


def test_torch_backend_streams_share_one_network_and_find_the_same_faces(astronaut, grace_hopper):
    settings = BackendSettings(preference=("torch",), device="cpu", share_across_streams=True)
    backend = select_backend(settings)
    cfg = LandmarkerConfig(max_faces=1, mode="image", blendshapes=False)
    one, two = backend.landmarker(cfg), backend.landmarker(cfg)
    solo = select_backend(BackendSettings(preference=("torch",), device="cpu")).landmarker(cfg)
    try:
        assert one.net.net is two.net.net and isinstance(one.net.net, SharedBatchRunner)
        got = _at_once(lambda photo: (one if photo is astronaut else two).detect(photo, 0), [astronaut, grace_hopper])
        for photo, faces in zip((astronaut, grace_hopper), got):
            (ref,) = solo.detect(photo, 0)
            assert len(faces) == 1 and np.abs(faces[0].landmarks - ref.landmarks).max() < 0.05
    finally:
        runner = one.net.net
        one.close()
        two.close()
        solo.close()
    assert not runner._thread.is_alive()


# --- DynamicBatcher: any model over a list of items -----------------------------------------------------

def test_dynamic_batcher_runs_calls_that_arrive_together_as_one_batch():
    from engines.batching import DynamicBatcher

    seen: list[list[int]] = []
    sizes: list[tuple[str, int]] = []

    def square(items):
        seen.append(list(items))
        return [x * x for x in items]

    batcher = DynamicBatcher(square, name="square", max_batch=8, window_ms=300)
    batcher.add_listener(lambda name, n: sizes.append((name, n)))
    try:
        assert _at_once(batcher, list(range(6))) == [x * x for x in range(6)]
        assert len(seen) == 1 and sorted(seen[0]) == list(range(6))
        assert sizes == [("square", 6)] and batcher.stats.largest == 6
        assert _at_once(batcher, list(range(11))) == [x * x for x in range(11)]   # past max_batch: split
        assert max(len(b) for b in seen[1:]) == 8 and sum(len(b) for b in seen[1:]) == 11
    finally:
        batcher.close()


def test_dynamic_batcher_fails_one_item_or_the_whole_batch_and_goes_on():
    from engines.batching import DynamicBatcher

    def picky(items):
        if "boom" in items:
            raise RuntimeError("the model fell over")
        return [ValueError(f"bad {x}") if x == "bad" else x.upper() for x in items]

    batcher = DynamicBatcher(picky, name="picky", max_batch=4, window_ms=300)
    try:
        out = _at_once(batcher, ["a", "bad", "c"])
        assert out[0] == "A" and out[2] == "C" and isinstance(out[1], ValueError)
        out = _at_once(batcher, ["a", "boom"])
        assert all(isinstance(o, RuntimeError) and "fell over" in str(o) for o in out)
        assert batcher("z") == "Z"          # the next batch runs as usual
    finally:
        batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher("late")


def test_dynamic_batcher_off_runs_each_call_alone_on_its_thread():
    from engines.batching import DynamicBatcher

    threads: list[str] = []

    def who(items):
        threads.append(threading.current_thread().name)
        return [len(items)] * len(items)

    batcher = DynamicBatcher(who, name="who", window_ms=300, enabled=False)
    assert _at_once(batcher, [1, 2, 3]) == [1, 1, 1]
    assert not any(name.startswith("batcher-") for name in threads)
    batcher.close()


def test_embed_many_matches_embed_and_keeps_errors_per_face(astronaut, grace_hopper):
    from dataclasses import replace

    from engines.identity import IdentityEmbedder, IdentityError

    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1, mode="image"))
    try:
        faces = [(img, lm.detect(img, 0)[0]) for img in (astronaut, grace_hopper)]
    finally:
        lm.close()
    emb = IdentityEmbedder()
    tiny = (astronaut, replace(faces[0][1], bbox=(10.0, 10.0, 14.0, 14.0)))
    many = emb.embed_many([faces[0], tiny, faces[1]])
    assert isinstance(many[1], IdentityError)
    for (img, face), vec in zip(faces, (many[0], many[2])):
        assert np.allclose(vec, emb.embed(img, face), atol=1e-5)
