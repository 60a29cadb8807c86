# One-command set-up: `make run` and `make test` install whatever is missing first.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

PYTHON_BOOT ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(VENV)/bin/pip
TESTBED     := $(VENV)/bin/testbed
# System packages the testbed uses (apt names).
APT_PACKAGES := iproute2 iputils-ping tcpdump iperf3 iptables ethtool procps \
                openjdk-17-jre-headless tshark debootstrap docker.io chromium chromium-driver
PROTOS      := $(wildcard proto/*.proto)
STUBS_STAMP := node/rpc/__init__.py
# The dashboard page's browser libraries: installed from the lock, their prebuilt files copied to static/.
WEB         := testbed/dashboard/web
WEB_STAMP   := $(WEB)/node_modules/.installed
STATIC      := testbed/dashboard/static
STATIC_FILES := $(STATIC)/cytoscape.min.js $(STATIC)/uPlot.iife.min.js $(STATIC)/uPlot.min.css

.PHONY: setup system-packages node-tools dashboard-assets python-env stubs test test-unit run reproduce bench clean help

help:
	@echo "make setup   install system packages, .venv, generated stubs and the dashboard's libraries (idempotent)"
	@echo "make test    setup, then the whole test suite (unit, integration as root, e2e)"
	@echo "make run     setup, then the quickstart scenario end to end and its report"
	@echo "make reproduce FIG=NAME  setup, then one paper figure end to end (reproductions/NAME.yaml, resumable)"
	@echo "make bench   setup, then the benchmarks in bench/ (prints measured / bound = ratio)"
	@echo "make clean   remove build output and anything a crashed testbed left behind"

setup: system-packages python-env stubs dashboard-assets

# Only calls apt when a package is really missing, so a second run costs a dpkg query.
system-packages:
	@missing=""
	for p in $(APT_PACKAGES); do
	  dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"
	done
	if [ -n "$$missing" ]; then
	  if [ "$$(id -u)" != 0 ]; then echo "make setup: missing system packages:$$missing (run as root to install them)"; exit 1; fi
	  echo "make setup: installing$$missing"
	  export DEBIAN_FRONTEND=noninteractive
	  apt-get update -qq
	  apt-get install -y -qq --no-install-recommends $$missing >/dev/null
	fi

# node and npm by command, not by dpkg name: a nodesource nodejs brings its own npm, and apt's npm would clash.
node-tools: system-packages
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	  if [ "$$(id -u)" != 0 ]; then echo "make setup: nodejs and npm are missing (run as root to install them)"; exit 1; fi
	  echo "make setup: installing nodejs npm"
	  export DEBIAN_FRONTEND=noninteractive
	  apt-get update -qq
	  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
	fi

dashboard-assets: $(STATIC_FILES)

# npm ci only when the lock changed (the stamp is older); --ignore-scripts: nothing of the packages runs here
$(WEB_STAMP): $(WEB)/package-lock.json $(WEB)/package.json | node-tools
	(cd $(WEB) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
	touch $@

$(STATIC)/cytoscape.min.js: $(WEB_STAMP)
	@mkdir -p $(STATIC)
	cp $(WEB)/node_modules/cytoscape/dist/cytoscape.min.js $@

$(STATIC)/uPlot.iife.min.js $(STATIC)/uPlot.min.css: $(WEB_STAMP)
	@mkdir -p $(STATIC)
	cp $(WEB)/node_modules/uplot/dist/$(notdir $@) $@

python-env: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	@[ -x $(PY) ] || $(PYTHON_BOOT) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -r requirements.lock
	$(PIP) install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

stubs: $(STUBS_STAMP)

$(STUBS_STAMP): $(PROTOS) $(VENV)/.installed node/stubs.py
	$(PY) -m node.stubs generate

# pytest-xdist workers for `make test` (CI runs it so). Three workers on 2 cores: about 13 min of pytest from a fresh
# clone for about 1,950 tests (one process: 23 min for 1,750 tests when last measured). Tests sharing a fixture wider than one test stay on one
# worker, tests marked `alone` run first while the other workers wait, tests marked `testbed_up` one at a time
# (tests/conftest.py); the summary's last lines say
# where each worker's time went. `make test TEST_WORKERS=0` runs everything in one process.
TEST_WORKERS ?= 3

test: setup
	@# pytest exits 5 when nothing was collected; that is not a failure of the project.
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadgroup tests || { rc=$$?; [ $$rc -eq 5 ] && echo "no tests collected" || exit $$rc; }

test-unit: setup
	$(PY) -m pytest -q tests/unit

run: setup
	$(TESTBED) run scenarios/quickstart.yaml --out runs/quickstart
	$(PY) -m spark_analysis report runs/quickstart --out reports/quickstart

# FIG=NAME of reproductions/NAME.yaml; QUICK=1 for the smoke run (`make reproduce FIG=brachman-6.4 QUICK=1`)
reproduce: setup
	@[ -n "$(FIG)" ] || { echo "make reproduce: give FIG=NAME (one of: $$($(TESTBED) reproduce --list | cut -d' ' -f1 | tr '\n' ' '))"; exit 2; }
	$(TESTBED) reproduce "$(FIG)" $(if $(QUICK),--quick)

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) "$$b"; done

clean:
	@if [ -x $(TESTBED) ]; then $(TESTBED) clean || true; fi
	rm -rf build node/rpc .pytest_cache spark-warehouse metastore_db derby.log
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
