"""The neural swapper with tiny ONNX models of each family's signature (bench/_swap_models.py) on real
photos: each file is recognised by its signature and a wrong one refused with what was expected; the
model sees the face where its template says; the source vector is made once per source and matches a
NumPy reference (normalise, inswapper's embedding map, normalise); faces from many threads meet in one
batched call and each gets its own result back."""

from __future__ import annotations

import hashlib
import threading

import cv2
import numpy as np
import onnx
import pytest

from bench import _swap_models as sm
from engines.sources import SourceRegistry
from engines.swappers.cards import SwapperRefused
from engines.swappers.swapper import NeuralSwapper, SwapperConfig, load_swapper
from tests.faceclips import landmarks_of

# InsightFace's ArcFace template (112 px) and its 128 px inswapper crop (shifted 8 px right), typed out
# here from the public numbers so the test does not read them from the code under test
ARCFACE_V2 = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655],
                       [70.7299, 92.2041]], np.float32)
ARCFACE_V1 = np.array([[39.7300, 51.1380], [72.2700, 51.1380], [56.0000, 68.4930], [42.4630, 87.0100],
                       [69.5370, 87.0100]], np.float32)
FIVE = [468, 473, 1, 61, 291]   # MediaPipe: iris centres, nose tip, mouth corners


def make(files, family="inswapper_128", **kw) -> NeuralSwapper:
    return NeuralSwapper(SwapperConfig(swapper=str(files[family]), embedder=str(files["embedder"]), **kw))


@pytest.fixture(scope="module")
def hopper_lm(grace_hopper):
    return landmarks_of(grace_hopper)


@pytest.fixture(scope="module")
def astronaut_source(astronaut):
    return SourceRegistry().register(astronaut)


@pytest.mark.parametrize("family", ["inswapper_128", "hyperswap_256", "simswap_256", "ghost_256", "simswap_512"])
def test_each_family_is_recognised_by_its_signature(swap_files, family):
    s = make(swap_files, family)
    try:
        assert s.card.name == family
        assert s.embedder_card.name == "arcface_112"
        assert s.warm_up_ms is not None            # warmed at load, so the first live frame is not the slow one
        assert (s.emap is not None) == (family == "inswapper_128")
    finally:
        s.close()


def test_a_mismatched_file_is_refused_naming_what_was_expected(swap_files, tmp_path):
    wrong = sm.swapper(tmp_path / "inswapper_128.onnx", "inswapper_128", target_size=96)
    with pytest.raises(SwapperRefused) as err:
        load_swapper(SwapperConfig(swapper=str(wrong), embedder=str(swap_files["embedder"])))
    msg = str(err.value)
    assert "is no known swapper" in msg and "target 1x3x96x96" in msg
    assert "inswapper_128: target Nx3x128x128, source Nx512 -> output Nx3x128x128" in msg
    # an embedder where a swapper belongs, and a 256-d embedder
    with pytest.raises(SwapperRefused, match="no known swapper"):
        load_swapper(SwapperConfig(swapper=str(swap_files["embedder"]), embedder=str(swap_files["embedder"])))
    small = sm.embedder(tmp_path / "e256.onnx", out_dim=256)
    with pytest.raises(SwapperRefused, match=r"no known embedder.*arcface_112: \* Nx3x112x112 -> \* Nx512"):
        load_swapper(SwapperConfig(swapper=str(swap_files["inswapper_128"]), embedder=str(small)))
    # not an ONNX file at all
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(SwapperRefused, match="junk.onnx: ONNX Runtime cannot load it"):
        load_swapper(SwapperConfig(swapper=str(junk), embedder=str(swap_files["embedder"])))
    with pytest.raises(SwapperRefused, match="no such model file"):
        load_swapper(SwapperConfig(swapper=str(tmp_path / "missing.onnx"), embedder=str(swap_files["embedder"])))
    with pytest.raises(ValueError, match="needs --swapper-embedder"):
        SwapperConfig(swapper=str(swap_files["inswapper_128"]))


def test_a_shared_signature_needs_a_telling_name_or_a_card(swap_files, tmp_path):
    plain = sm.swapper(tmp_path / "model_256.onnx", "simswap_256")
    with pytest.raises(SwapperRefused, match="fits several cards.*--swapper-card"):
        load_swapper(SwapperConfig(swapper=str(plain), embedder=str(swap_files["embedder"])))
    s = load_swapper(SwapperConfig(swapper=str(plain), embedder=str(swap_files["embedder"]), card="ghost_256"))
    assert s.card.name == "ghost_256"
    s.close()


def test_sha256_pin(swap_files):
    good = hashlib.sha256(swap_files["inswapper_128"].read_bytes()).hexdigest()
    s = make(swap_files, swapper_sha256=good.upper())
    s.close()
    with pytest.raises(SwapperRefused, match="inswapper_128.onnx: sha256 .* but it was pinned to 0{64}"):
        make(swap_files, swapper_sha256="0" * 64)
    with pytest.raises(SwapperRefused, match="pinned"):
        make(swap_files, embedder_sha256="f" * 64)


def test_an_inswapper_file_without_its_embedding_map_last_is_refused(swap_files, tmp_path):
    model = onnx.load(str(swap_files["inswapper_128"]))
    inits = list(model.graph.initializer)
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits[-1:] + inits[:-1])   # emap first, a 1-d tensor last
    path = tmp_path / "inswapper_128_moved.onnx"
    onnx.save(model, str(path))
    with pytest.raises(SwapperRefused, match="512x512 embedding map .* last initializer; this one ends with 'scale'"):
        load_swapper(SwapperConfig(swapper=str(path), embedder=str(swap_files["embedder"])))


def _reference_transform(landmarks, template_pts):
    """The similarity InsightFace fits (skimage's Umeyama estimate), 2 x 3."""
    from skimage.transform import SimilarityTransform

    return SimilarityTransform.from_estimate(landmarks[FIVE, :2].astype(np.float64), template_pts).params[:2]


def _reference_warp(image, landmarks, template_pts, size):
    """The crop as InsightFace makes it: skimage's similarity, cv2 warp."""
    return cv2.warpAffine(image, _reference_transform(landmarks, template_pts), (size, size), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REPLICATE)


@pytest.mark.parametrize("family,template", [("inswapper_128", (ARCFACE_V2 + [8.0, 0.0]) / 128.0),
                                             ("simswap_512", ARCFACE_V1 / 112.0)])
def test_the_model_sees_the_face_where_its_template_says(swap_files, grace_hopper, hopper_lm, family, template):
    s = make(swap_files, family)
    seen = []
    inner = s.model.run
    s.model.run = lambda feeds: (seen.append(feeds[s._target].copy()), inner(feeds))[1]
    try:
        crop, _ = s.crop(grace_hopper, hopper_lm)
        s.swap(crop[None], np.zeros((1, 512), np.float32))
    finally:
        s.close()
    size = s.card.size
    got = seen[0][0].transpose(1, 2, 0)          # what the network received, in its own units
    got = np.clip((got * np.float32(s.card.std) + np.float32(s.card.mean)) * 255.0, 0, 255)
    ref = _reference_warp(grace_hopper, hopper_lm, template * size, size).astype(np.float32)
    assert np.abs(got - ref).mean() < 1.0
    # and a landmarker reading the crop the model saw finds the eyes, nose and mouth on the template
    big = cv2.resize(got.astype(np.uint8), (512, 512), interpolation=cv2.INTER_CUBIC)
    five = landmarks_of(big)[FIVE, :2] * (size / 512.0)
    err = np.linalg.norm(five - template * size, axis=1)
    assert err[:2].max() < 0.02 * size, err     # the eyes sit on the template's eye points
    # the nose and mouth sit where a best fit of this face's five points onto the template puts them (a
    # face is not the template's shape, so only the least-squares placement is exact)
    fitted = _reference_transform(hopper_lm, template * size)
    placed = hopper_lm[FIVE, :2] @ fitted[:, :2].T + fitted[:, 2]
    assert np.linalg.norm(five - placed, axis=1).max() < 0.02 * size


def test_the_source_vector_is_made_once_and_matches_numpy(swap_files, astronaut_source):
    s = make(swap_files)
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(s.source_vector(astronaut_source))) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert s.embed_calls == 1                  # four sessions meeting a new source: one embedder run
        assert all(r is results[0] for r in results)
        assert s.source_vector(astronaut_source) is results[0] and s.embed_calls == 1
        # the reference, in NumPy: ArcFace crop of the source texture, (x - 127.5) / 127.5, the tiny
        # embedder's maths, L2, the file's emap (read back with onnx), L2 again
        crop = _reference_warp(astronaut_source.texture, astronaut_source.landmarks, ARCFACE_V2, 112)
        x = ((crop.astype(np.float32) - 127.5) / 127.5).transpose(2, 0, 1)[None]
        e = sm.reference_embedding(x)
        e = e / np.linalg.norm(e)
        emap = onnx.numpy_helper.to_array(onnx.load(str(swap_files["inswapper_128"])).graph.initializer[-1])
        ref = e @ emap
        ref = (ref / np.linalg.norm(ref)).reshape(-1)
        np.testing.assert_allclose(results[0], ref, atol=2e-3)
        assert abs(float(np.linalg.norm(results[0])) - 1.0) < 1e-5
    finally:
        s.close()


def test_plain_normalised_families_take_the_normalised_embedding(swap_files, astronaut_source):
    s = make(swap_files, "hyperswap_256")
    try:
        v = s.source_vector(astronaut_source)
        raw = s.embed_image(astronaut_source.texture, astronaut_source.landmarks)
        np.testing.assert_allclose(v, raw / np.linalg.norm(raw), atol=1e-6)
    finally:
        s.close()


@pytest.mark.parametrize("family", ["inswapper_128_batch", "inswapper_128"])
def test_faces_from_many_threads_meet_in_one_call_and_each_gets_its_own(swap_files, grace_hopper, hopper_lm, family):
    s = make(swap_files, family, window_ms=200.0)
    crop, _ = s.crop(grace_hopper, hopper_lm)
    rng = np.random.default_rng(0)
    vectors = [v / np.linalg.norm(v) for v in rng.normal(size=(8, 512)).astype(np.float32)]
    out: dict[int, np.ndarray] = {}
    go = threading.Barrier(8)

    def one(i):
        go.wait()
        out[i] = s.swap(crop[None], vectors[i][None])[0][0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    try:
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert s.stats.largest > 1 and s.stats.batches < 8   # several sessions' faces in one model call
    finally:
        s.close()
    inner = (slice(20, 108), slice(20, 108))
    for i in range(8):
        shift = (out[i] - crop.astype(np.float32))[inner].reshape(-1, 3)
        keep = (crop[inner].reshape(-1, 3) > 45).all(axis=1) & (crop[inner].reshape(-1, 3) < 210).all(axis=1)
        np.testing.assert_allclose(np.median(shift[keep], axis=0), sm.expected_tint(vectors[i]), atol=0.6)
