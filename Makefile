# rdma-bridge: the two commands of the quick start are `make demo` and `make test`.
# Both work on a fresh Debian machine as root: they create .venv, install the project
# and install MariaDB from Debian when mariadbd is missing.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
MARIADBD := $(shell command -v mariadbd 2>/dev/null || ls /usr/sbin/mariadbd 2>/dev/null)
COMPOSE := $(shell command -v docker-compose 2>/dev/null)

MINUTES ?= 5
FUZZ_INPUTS ?= 1000000

.PHONY: demo test unit integration faults soak bench fuzz deps mariadb compose clean sandbox-down

$(STAMP): setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

deps: $(STAMP) mariadb

mariadb:
ifeq ($(MARIADBD),)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server mariadb-client >/dev/null
endif

# docker-compose (Debian's) validates the compose demo offline in the tests.
compose:
ifeq ($(COMPOSE),)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
endif

demo: deps
	$(PY) -m bridge demo

test: deps compose
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q tests

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: deps compose
	$(PY) -m pytest -q tests/integration

faults: deps
	$(PY) -m pytest -q tests/faults

# A random mix of faults against a steady workload for $(MINUTES) minutes; prints the
# fault matrix (runs, lost, duplicated, time to recover) and writes soak-result.json.
soak: deps
	$(PY) -m tests.faults.soak --minutes $(MINUTES)

# Catch-up, lag and decode against baselines measured in the same run (a native
# MariaDB replica, the stock binlog library); writes bench/results/<date>.json/.html.
bench: deps
	$(PY) -m bench.run_all

# Mutated and random inputs into every wire/ring decoder: each must yield a value or
# the protocol error type (a short property-based version runs in make test).
fuzz: $(STAMP)
	$(PY) -m tests.fuzz_decoders --inputs $(FUZZ_INPUTS)

sandbox-down: $(STAMP)
	$(PY) -m bridge sandbox down

clean: sandbox-down
	$(PY) -m bridge sandbox down --state-dir .sandbox-soak
	rm -rf $(VENV) .sandbox .sandbox-soak
