"""Watermark: embed cost at 1280x720 on one core, PSNR, detect cost, and code-bit accuracy per attack."""

from __future__ import annotations

import time


def add_arguments(parser) -> None:
    parser.add_argument("--repeats", type=int, default=200, help="embed calls timed per size")
    parser.add_argument("--frames", type=int, default=30, help="clip length for the codec attacks")


def _ms(fn, repeats: int) -> dict[str, float]:
    import numpy as np

    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1000.0)
    return {"median_ms": round(float(np.median(ts)), 3), "p95_ms": round(float(np.percentile(ts, 95)), 3)}


def run(args) -> dict:
    import cv2
    import numpy as np
    import torch

    from kernels import watermark_code as code
    from kernels.numpy import watermark as wm
    from kernels.torch import watermark as twm
    from tests.conftest import _rgb
    from tests.watermark_clips import PAYLOAD, crop, downscale, moving_clip, reencode

    import skimage.data
    import matplotlib.cbook
    from PIL import Image

    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        grace = _rgb(np.asarray(Image.open(f).convert("RGB")))
    photos = {"astronaut": _rgb(skimage.data.astronaut()), "grace_hopper": grace}
    unmarked = {**photos, "coffee": _rgb(skimage.data.coffee()), "chelsea": _rgb(skimage.data.chelsea()),
                "rocket": _rgb(skimage.data.rocket()), "camera": _rgb(skimage.data.camera())}
    key = wm.make_key()
    expected = 1.0 - 2.0 * code.encode_payload(PAYLOAD).astype(np.float32)

    out: dict = {"config": {"tile": key.config.tile, "band": key.config.band, "amplitude": key.config.amplitude,
                            "code_bits": code.CODE_BITS, "info_bits": code.INFO_BITS}, "embed": {}, "psnr_db": {}, "attacks": {}}
    for w, h in ((1280, 720), (640, 480)):
        frame = moving_clip(photos["astronaut"], n=1, size=(w, h))[0]
        t0 = time.perf_counter()
        pat = wm.pattern_for(key, (h, w), PAYLOAD)
        build_ms = (time.perf_counter() - t0) * 1000.0
        dst = np.empty_like(frame)
        tp = twm.pattern_for(key, (h, w), PAYLOAD)
        tf = torch.from_numpy(frame)
        out["embed"][f"{w}x{h}"] = {
            "numpy_one_core": _ms(lambda: wm.embed(frame, pat, out=dst), args.repeats),
            "torch_cpu_one_thread": _ms(lambda: twm.embed(tf, tp), max(20, args.repeats // 4)),
            "pattern_build_ms (once per payload, off the frame path)": round(build_ms, 1),
        }
        out["embed"][f"{w}x{h}"]["detect_one_frame"] = _ms(lambda: wm.extract(wm.embed(frame, pat), key), 5)
    for name, photo in photos.items():
        for w, h in ((1280, 720), (640, 480)):
            frame = moving_clip(photo, n=1, size=(w, h))[0]
            out["psnr_db"][f"{name} {w}x{h}"] = round(wm.psnr(wm.embed(frame, wm.pattern_for(key, (h, w), PAYLOAD)), frame), 2)

    def score(frames):
        single = wm.extract(frames[-1], key)
        many, n = wm.extract_many(frames[-6:], key)
        return {"single_frame_code_bits": round(float(np.mean(np.sign(single.soft) == expected)), 3),
                "single_frame_payload_ok": single.payload == PAYLOAD,
                "six_frames_code_bits": round(float(np.mean(np.sign(many.soft) == expected)), 3),
                "six_frames_payload_ok": many.payload == PAYLOAD}

    for name, photo in photos.items():
        clip = moving_clip(photo, n=args.frames)
        pat = wm.pattern_for(key, clip[0].shape[:2], PAYLOAD)
        marked = [wm.embed(f, pat) for f in clip]
        cases = {"clean": marked, "downscale50": [downscale(f) for f in marked], "crop10": [crop(f) for f in marked]}
        ok, jpg = cv2.imencode(".jpg", marked[-1][..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 50])
        cases["jpeg_q50"] = [cv2.imdecode(jpg, cv2.IMREAD_COLOR)[..., ::-1].copy()]
        for codec, rate in (("libvpx", 500_000), ("libx264", 1_000_000), ("libvpx", 250_000), ("libx264", 500_000)):
            dec = reencode(marked, codec, rate)
            tag = f"{codec}_{rate // 1000}k"
            cases[tag] = dec
            cases[tag + "+downscale50+crop10"] = [crop(downscale(f)) for f in dec]
        out["attacks"][name] = {k: score(v) for k, v in cases.items()}

    false = 0
    checked = 0
    for name, photo in unmarked.items():
        for img in (photo, downscale(photo), crop(photo)):
            checked += 1
            false += int(wm.extract(img, key).watermarked)
    out["false_positives"] = {"unmarked_images_checked": checked, "false_detections": false,
                              "bound_per_image": f"<= {key.config.candidates} decodes x 2^-32 (CRC-32)"}
    return out
