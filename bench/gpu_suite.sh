#!/usr/bin/env bash
# The GPU suite, in one call on a fresh NVIDIA machine (about 6 minutes at most; every step has its own timeout).
# Before: `bash bench/gpu_wheels.sh` here fills .whl/ (never committed: echo '/.whl/' >> .git/info/exclude,
# in a worktree >> "$(git rev-parse --git-common-dir)/info/exclude"); then the run tool, carry [".whl"]:
#     bash bench/gpu_suite.sh "$OUT"
# Dry run on a CPU machine (no wheel install, no nvidia-smi, tiny bench sizes; the CUDA tests skip):
#     bash bench/gpu_suite.sh --dry-run /tmp/gpu-dry        (or LIVEFUSE_GPU_DRY=1)
# Writes into the output folder: env.json, nvidia-smi.txt, tests.txt, bench_gpu_kernels.json,
# bench_faces.json (or .skipped), steps.txt (each step's exit status and seconds). Exit status: 0 when all passed.
set -uo pipefail
DRY=${LIVEFUSE_GPU_DRY:-0}
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
DEST=${1:-${OUT:-}}
[ -n "$DEST" ] || { echo "usage: bash bench/gpu_suite.sh [--dry-run] OUTPUT_DIR  (default \$OUT)" >&2; exit 2; }
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
PY=${PYTHON:-python3}
FAIL=0
: > "$DEST/steps.txt"

step() {   # step NAME SECONDS CMD...: run with a timeout, log to DEST/NAME.log, record status and time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc
  echo "== $name (limit ${limit}s)"
  timeout -k 10 "$limit" "$@" > "$DEST/$name.log" 2>&1; rc=$?
  tail -n 25 "$DEST/$name.log"
  echo "$name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$DEST/steps.txt"
  [ "$rc" -eq 0 ] || FAIL=1
}

if [ "$DRY" = 1 ]; then
  echo "dry run: no wheel install, no device-only steps; the CUDA twin tests run on the CPU"
  export LIVEFUSE_TWIN_DEVICE=cpu
  SIZES=64x48,96x72; REPEATS=3; WARMUP=1; LNET=()
else
  $PY --version
  if [ -d .whl ]; then
    rm -rf /tmp/site
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || FAIL=1
    export PYTHONPATH=/tmp/site:$PWD LIVEFUSE_PHOTOS=$PWD/.whl/photos
  else
    echo "WARNING: no .whl/ here (carry [\".whl\"]); the face and edits parts will skip"
    export PYTHONPATH=$PWD
  fi
  export LIVEFUSE_REQUIRE_CUDA=1
  SIZES=640x480,1280x720; REPEATS=100; WARMUP=10; LNET=(--landmark-net)
  nvidia-smi > "$DEST/nvidia-smi.txt" 2>&1 || FAIL=1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >> "$DEST/nvidia-smi.txt" 2>&1
fi

# 1. versions
step env 60 $PY - "$DEST/env.json" <<'PY'
import importlib, json, platform, sys
out = {"python": sys.version.split()[0], "machine": platform.machine()}
for name in ("numpy", "torch", "cv2", "tflite", "cupy", "triton", "onnxruntime", "pytest", "mediapipe"):
    try:
        out[name] = getattr(importlib.import_module(name), "__version__", "present")
    except Exception as exc:
        out[name] = f"absent ({type(exc).__name__})"
try:
    import torch
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    out["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
except Exception as exc:
    out["torch_error"] = repr(exc)
text = json.dumps(out, indent=2)
print(text)
open(sys.argv[1], "w").write(text + "\n")
PY

# 2. every torch twin on CUDA against its NumPy twin (skips show with -rs; here LIVEFUSE_REQUIRE_CUDA=1 turns a
#    missing device into a failure). --noconftest: tests/conftest.py needs Pillow and scikit-image, absent there.
step tests 240 $PY -m pytest -q -rs -p no:cacheprovider --noconftest -o timeout=200 \
  tests/kernels/test_torch_twins_cuda.py tests/bench/test_gpu_kernels.py
cp "$DEST/tests.log" "$DEST/tests.txt"

# 3. kernels: numpy vs torch on the device (CUDA events), medians and p95; on the device also the landmark
#    network at batch 1, 8, 32 (torch_cuda_landmark_net_batch{1,8,32}, as bench faces names them)
step bench_gpu_kernels 240 $PY -m streamer.app.cli bench gpu_kernels --json --repeats $REPEATS --warmup $WARMUP \
  --sizes $SIZES "${LNET[@]}" -o "$DEST/bench_gpu_kernels.json"

# 4. bench faces (its torch CUDA batch timings) needs MediaPipe for its first part: run where it is installed
if [ "$DRY" = 1 ]; then
  echo "dry run: bench faces skipped (CPU benchmark)" > "$DEST/bench_faces.skipped"
elif $PY -c "import mediapipe" 2>/dev/null; then
  step bench_faces 150 $PY -m streamer.app.cli bench faces --json --frames 20 --no-interpreter --cores 0 -o "$DEST/bench_faces.json"
else
  echo "mediapipe is not installed here: bench faces cannot run; bench_gpu_kernels.json holds torch_cuda_landmark_net_batch{1,8,32}" \
    | tee "$DEST/bench_faces.skipped"
fi

echo "== done: $( [ $FAIL = 0 ] && echo all steps passed || echo SOME STEP FAILED ) (outputs in $DEST)"
cat "$DEST/steps.txt"
exit $FAIL
