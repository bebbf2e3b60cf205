#!/usr/bin/env bash
# `make image-test`: build the image and run it (tests/deploy/test_image.py) on a machine that reaches no image
# registry. Debian's Docker (docker.io, containerd, runc) and debootstrap are installed when missing (as root);
# a daemon without a bridge or iptables rules is started for the run and stopped after it (one already
# answering is used as it is); the base image is Debian bookworm by debootstrap (`make image-base`).
# Where no daemon can start (no root, no overlay support), the test is skipped with a note, or fails under
# LIVEFUSE_REQUIRE_IMAGE=1.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
DOCKER=${DOCKER:-/usr/bin/docker}
BASE_IMAGE=${BASE_IMAGE:-livefuse-base:bookworm}
DATA_ROOT=${DOCKER_DATA_ROOT:-/var/lib/docker}

skip() {
  echo "note: image test skipped: $*"
  if [ "${LIVEFUSE_REQUIRE_IMAGE:-0}" = 1 ]; then exit 1; fi
  exit 0
}

missing=""
[ -x /usr/sbin/dockerd ] || missing="$missing docker.io containerd runc"
command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing \
      || { DEBIAN_FRONTEND=noninteractive apt-get update -q &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing; }
  else
    skip "missing$missing (not root)"
  fi
fi

started=""
stop_daemon() {
  if [ -n "$started" ]; then
    kill -TERM "$started" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$started" 2>/dev/null || break; sleep 0.2; done
  fi
}
trap stop_daemon EXIT
if ! "$DOCKER" info >/dev/null 2>&1; then
  log=${TMPDIR:-/tmp}/livefuse-dockerd.log
  /usr/sbin/dockerd --bridge=none --iptables=false --ip6tables=false --data-root "$DATA_ROOT" >"$log" 2>&1 &
  started=$!
  for _ in $(seq 1 60); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 0.5; done
  "$DOCKER" info >/dev/null 2>&1 || { tail -n 20 "$log"; skip "dockerd did not start (log above)"; }
fi

t0=$(date +%s)
if ! "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  make image-base DOCKER="$DOCKER"
fi
echo "image test: base image ready in $(( $(date +%s) - t0 )) s"

# pip inside the build prefers the wheels on this machine's disk (a CPU torch) and trusts its CA bundle
wheels=""
for d in ${PIP_FIND_LINKS:-}; do [ -d "$d" ] && ls "$d"/*.whl >/dev/null 2>&1 && wheels=$d && break; done
cert=${PIP_CERT:-}
[ -n "$cert" ] || { [ -f /etc/ssl/certs/ca-certificates.crt ] && cert=/etc/ssl/certs/ca-certificates.crt; }
LIVEFUSE_IMAGE_TEST=1 BASE_IMAGE="$BASE_IMAGE" WHEELS="$wheels" PIP_CERT="$cert" DOCKER="$DOCKER" \
  "$PY" -m pytest -q -rs -p no:cacheprovider tests/deploy/test_image.py
echo "image test: $(( $(date +%s) - t0 )) s in all"
