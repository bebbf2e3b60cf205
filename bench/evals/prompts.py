"""Prompt adherence: held-out prompts move the named edits the right way, and the image moves too.

Text: the committed calibration (or --encoder/--artifact) runs the held-out split through the live path
(PromptModel.encode: clauses, encoder, projector, head; the glossary first for MiniLM) and scores, per language
(English, Chinese and the zero-shot ja, ko, es, fr, de, pt),
the sign agreement of every non-zero target edit (goal >= 0.90) and how many zero targets stay within
0.2 (goal: all). Image: on real portraits, with landmarks from MediaPipe, `smile` must lift the mouth
corners as the landmarker sees them on the output, `brightness` raise skin L*, `skin_warmth` raise skin
b*, `eye_size` widen the eye opening; each is reported with its size, for +value and -value.
"""

from __future__ import annotations

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--encoder", help="e5 (the default), minilm, or a local transformers model folder")
    parser.add_argument("--artifact", help="calibration artifact (default: the one made for the encoder)")
    parser.add_argument("--value", type=float, default=0.8, help="edit strength for the image measures")
    parser.add_argument("--skip-images", action="store_true")
    parser.add_argument("--worst", type=int, default=5, help="how many held-out misses to list")


def text_scores(model, worst: int = 5) -> dict:
    from engines.calibration import ZERO_LIMIT, load_corpus, score, targets

    _, held, digest = load_corpus()
    conds = model.encode([e.text for e in held])
    pred = np.array([[c.edits[n] for n in model.edit_names] for c in conds], np.float32)
    y = targets(held, model.edit_names)
    out: dict = {"corpus_sha256": digest, "artifact_corpus_sha256": model.meta.corpus_sha256}
    for lang in ["all"] + sorted({e.lang for e in held}):
        idx = [i for i, e in enumerate(held) if lang == "all" or e.lang == lang]
        s = score(pred[idx], y[idx])
        s["pass"] = bool(s["sign_agreement"] >= 0.9 and s["zero_within_0.2"] == 1.0)
        out[lang] = s
    misses = []
    for i, e in enumerate(held):
        for k, n in enumerate(model.edit_names):
            bad = (y[i, k] == 0 and abs(pred[i, k]) > ZERO_LIMIT) or (y[i, k] != 0 and np.sign(pred[i, k]) != np.sign(y[i, k]))
            if bad:
                misses.append({"text": e.text, "edit": n, "target": float(y[i, k]), "got": round(float(pred[i, k]), 3)})
    out["misses"] = misses[:worst]
    out["n_misses"] = len(misses)
    return out


def _detect(image: np.ndarray):
    from engines.faces import MediaPipeLandmarker

    lmk = MediaPipeLandmarker()
    try:
        faces = lmk.detect(image, 0)
    finally:
        lmk.close()
    if not faces:
        raise RuntimeError("the landmarker found no face in the evaluation portrait")
    return faces[0].landmarks


def skin_mask(shape, landmarks) -> np.ndarray:
    from engines.face_masks import region_mask

    return region_mask(shape, landmarks, ["face_oval"], ["left_eye", "right_eye", "lips_outer"]) > 0.5


def lab_means(image: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    import cv2

    lab = cv2.cvtColor(image.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    return float(lab[..., 0][mask].mean()), float(lab[..., 2][mask].mean())


def mouth_corner_lift(lm: np.ndarray) -> float:
    """Height of the mouth corners above the lip centre, in face widths (up is positive)."""
    up = lm[10, :2] - lm[152, :2]
    up /= np.linalg.norm(up)
    centre = (lm[13, :2] + lm[14, :2]) / 2
    fw = np.linalg.norm(lm[454, :2] - lm[234, :2])
    return float(np.mean([np.dot(lm[i, :2] - centre, up) for i in (61, 291)]) / fw)


def eye_opening(lm: np.ndarray) -> float:
    """Lid-to-lid distance over eye width, both eyes averaged."""
    pairs = [((159, 145), (33, 133)), ((386, 374), (362, 263))]
    return float(np.mean([np.linalg.norm(lm[a, :2] - lm[b, :2]) / np.linalg.norm(lm[c, :2] - lm[d, :2]) for (a, b), (c, d) in pairs]))


def image_measures(image: np.ndarray, value: float = 0.8) -> dict:
    from engines.edit_render import render_edits

    lm = _detect(image)
    mask = skin_mask(image.shape[:2], lm)
    l0, b0 = lab_means(image, mask)
    out: dict = {}
    for v in (value, -value):
        sign = "+" if v > 0 else "-"
        bright = render_edits(image, [lm], {"brightness": v})
        warm = render_edits(image, [lm], {"skin_warmth": v})
        out[f"brightness{sign}: skin L* change"] = round(lab_means(bright, mask)[0] - l0, 2)
        out[f"skin_warmth{sign}: skin b* change"] = round(lab_means(warm, mask)[1] - b0, 2)
    base_lm = _detect(image)
    for v in (value, -value):
        sign = "+" if v > 0 else "-"
        smiled = _detect(render_edits(image, [lm], {"smile": v}))
        out[f"smile{sign}: mouth-corner lift (face widths)"] = round(mouth_corner_lift(smiled) - mouth_corner_lift(base_lm), 4)
        eyes = _detect(render_edits(image, [lm], {"eye_size": v}))
        out[f"eye_size{sign}: eye opening ratio"] = round(eye_opening(eyes) / eye_opening(base_lm), 4)
    out["pass"] = bool(out[f"brightness+: skin L* change"] > 0 and out[f"skin_warmth+: skin b* change"] > 0
                       and out[f"smile+: mouth-corner lift (face widths)"] > 0 and out[f"eye_size+: eye opening ratio"] > 1)
    return out


def portraits() -> dict[str, np.ndarray]:
    import matplotlib.cbook
    import skimage.data
    from PIL import Image

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = np.asarray(Image.open(f).convert("RGB"))
    return {"astronaut": np.ascontiguousarray(skimage.data.astronaut()[..., :3]), "grace_hopper": np.ascontiguousarray(hopper)}


def run(args) -> dict:
    from engines.text import load_prompt_model

    model = load_prompt_model(args.encoder, args.artifact)
    result = {"encoder": model.id, "heldout": text_scores(model, args.worst)}
    if not args.skip_images:
        result["images"] = {name: image_measures(img, args.value) for name, img in portraits().items()}
    return result
