# rdma-bridge: the two commands of the quick start are `make demo` and `make test`.
# Both work on a fresh Debian machine as root: they create .venv, install the project
# and install MariaDB from Debian when mariadbd is missing.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
MARIADBD := $(shell command -v mariadbd 2>/dev/null || ls /usr/sbin/mariadbd 2>/dev/null)
OPENSSL := $(shell command -v openssl 2>/dev/null)
COMPOSE := $(shell command -v docker-compose 2>/dev/null)
CHROMIUM := $(shell command -v chromium 2>/dev/null)
PROMTOOL := $(shell command -v promtool 2>/dev/null)
PTHEARTBEAT := $(shell command -v pt-heartbeat 2>/dev/null)
EXPORTER := $(shell command -v prometheus-mysqld-exporter 2>/dev/null)
CATATONIT := $(shell command -v catatonit 2>/dev/null)

MINUTES ?= 5
FUZZ_INPUTS ?= 1000000
HOURS ?= 1
RATE ?= 2000
SEMI_SYNC ?= received
TRANSPORT ?= shm

.PHONY: demo-relay kube-demo kube-down catatonit wheel test-wheel demo lint test unit integration faults soak bench stress fuzz deps compiler mariadb openssl compose chromium rdma-deps rdma-guest test-rdma bench-rdma clean sandbox-down containers test-matrix compose-demo compose-down test-compose promtool percona

# setup.py builds the compiled core, every bridge/*/*.pyx (Cython, fetched by pip for the build), with the C
# compiler, Python headers and verbs.h (libibverbs-dev: the rdma transport's compiled queue pair) `compiler`
# installs.
$(STAMP): setup.cfg setup.py pyproject.toml $(wildcard bridge/*/*.pyx bridge/*/*.pxd bridge/*/*.h bridge/*/*/*.pyx bridge/*/*/*.pxd) | compiler
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

deps: $(STAMP) mariadb openssl

compiler:
	command -v cc >/dev/null && test -f "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" \
	  && test -f /usr/include/infiniband/verbs.h \
	  || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential python3-dev \
	       libibverbs-dev >/dev/null; }

mariadb:
ifeq ($(MARIADBD),)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server mariadb-client >/dev/null
endif

# The openssl command makes certificates (`rdma-bridge tls-certs`, `sandbox up --tls`, the TLS tests).
openssl:
ifeq ($(OPENSSL),)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
endif

# docker-compose (Debian's) validates the compose demo offline in the tests.
compose:
ifeq ($(COMPOSE),)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
endif

# promtool (Debian's prometheus package) tests the alert rules (contrib/prometheus/) in the
# tests; the Prometheus server it comes with is not left running where systemd would start it.
promtool:
ifeq ($(PROMTOOL),)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	-systemctl disable --now prometheus >/dev/null 2>&1
endif

# pt-heartbeat and pt-online-schema-change (Debian's percona-toolkit) and Debian's
# prometheus-mysqld-exporter read the bridge-fed replica in tests (the exporter's service,
# which its package starts, is stopped: a test runs its own).
percona:
ifeq ($(and $(PTHEARTBEAT),$(EXPORTER)),)
	apt-get update -qq
endif
ifeq ($(PTHEARTBEAT),)
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq percona-toolkit >/dev/null
endif
ifeq ($(EXPORTER),)
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-mysqld-exporter >/dev/null
	-systemctl disable --now prometheus-mysqld-exporter >/dev/null 2>&1
endif

# Headless Chromium (Debian's) renders the HTML latency report in a test.
chromium:
ifeq ($(CHROMIUM),)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
endif

# podman and mmdebstrap: the server flavors that run in containers built here from Debian's
# packages (`sandbox up --flavor mariadb-11.8`; bridge/lab/images.py).
containers:
	command -v podman >/dev/null && command -v mmdebstrap >/dev/null && command -v runc >/dev/null \
	  || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman mmdebstrap runc iptables uidmap >/dev/null; }

# The compose demo for real (docker/docker-compose.yml with docker-compose.local.yml): the
# images built here from Debian's packages and run with podman, no registry; ends with the
# replica checked row by row (`verified`) and leaves it running (Prometheus on
# 127.0.0.1:9090) until `make compose-down`. test-compose also checks that Prometheus
# scrapes both bridges and that every dashboard query evaluates, then removes it all.
compose-demo: deps compose containers
	$(PY) docker/compose_demo.py up

compose-down: compose containers
	$(PY) docker/compose_demo.py down

# The Kubernetes manifests for real (deploy/kubernetes): the tcp overlay played by podman
# (`podman kube play`, its pause image needs Debian's catatonit; kubectl renders the overlay),
# on the compose demo's images; ends `verified`. kube-down removes it.
kube-demo: deps containers catatonit
	@command -v kubectl >/dev/null || { echo "kube-demo: kubectl (its kustomize) is needed to render the manifests"; exit 1; }
	$(PY) deploy/kubernetes/kube_demo.py up

kube-down: deps
	$(PY) deploy/kubernetes/kube_demo.py down

catatonit:
ifeq ($(CATATONIT),)
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq catatonit >/dev/null
endif

test-compose: deps compose containers
	$(PY) docker/compose_demo.py check; status=$$?; $(PY) docker/compose_demo.py down; exit $$status

# The server matrix: `make test` runs this host's MariaDB 10.11 on both ends; these run the
# end-to-end, semantics, types, clone, checksum, filter, semi-sync, apply-stop, channel,
# read_only and pt-heartbeat tests again from 10.11 into MariaDB 11.8 (the upgrade path), from
# 11.8 into 11.8, from MySQL 9.7 into MySQL 9.7, from MySQL 9.7 into this host's MariaDB 10.11
# and back; the 11.8 and 9.7 servers in containers built once from Debian's packages (cached
# by podman). The pairs of MATRIX_FULL (a MySQL primary: its own binlog, GTIDs and semi-sync
# under every fault) also run the fault tests and the million-row clone; the others leave
# those two out (CI's time: about 3 and 2 minutes a pair; the MariaDB primaries' faults run in
# `make test`), and every pair leaves out the fan-out's wakeup timing (a transport's, not a
# server's: `make test` and the guest run it).
MATRIX_TESTS ?= tests/integration/test_dml_ddl.py tests/integration/test_semantics.py \
  tests/integration/test_types.py tests/integration/test_clone.py tests/integration/test_checksum.py \
  tests/integration/test_filter.py tests/integration/test_semisync.py tests/integration/test_apply_stop.py \
  tests/integration/test_doctor.py tests/integration/test_channels.py tests/integration/test_mysql.py \
  tests/integration/test_realtime.py tests/integration/test_read_only.py tests/integration/test_pt_heartbeat.py \
  tests/integration/test_relay_protocol.py tests/integration/test_relay_mode.py tests/integration/test_relay_chained.py
MATRIX ?= local,mariadb-11.8 mariadb-11.8 mysql-9.7 mysql-9.7,local local,mysql-9.7
MATRIX_FULL ?= mysql-9.7 mysql-9.7,local
test-matrix: deps containers percona
	status=0; for servers in $(MATRIX); do echo "== servers $$servers"; \
	  case " $(MATRIX_FULL) " in *" $$servers "*) more="tests/faults"; only="not placement_itself";; \
	    *) more=""; only="not million_rows";; esac; \
	  RDMA_BRIDGE_TEST_SERVERS=$$servers $(PY) -m pytest -q $(MATRIX_TESTS) $$more -k "$$only" || status=1; \
	done; exit $$status

# Debian's pyverbs (PyPI's does not build against rdma-core 44), linked into the venv.
rdma-deps: $(STAMP)
	command -v ibv_devinfo >/dev/null && test -d /usr/lib/python3/dist-packages/pyverbs || { apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rdma-core ibverbs-providers ibverbs-utils python3-pyverbs >/dev/null; }
	ln -sfn /usr/lib/python3/dist-packages/pyverbs $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/pyverbs

# A wheel with the compiled extensions (dist/): installed where the servers run, it needs no
# compiler. test-wheel installs it into a fresh venv outside the checkout and, from there,
# answers --version, runs doctor and the demo (a sandbox, both bridges, a verified match).
wheel: $(STAMP)
	rm -rf dist build
	$(PY) -m pip wheel -q --no-deps -w dist .

WHEEL_DIR := /tmp/rdma-bridge-wheel-check
test-wheel: wheel deps
	rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR)
	$(PYTHON) -m venv $(WHEEL_DIR)/venv
	$(WHEEL_DIR)/venv/bin/python -m pip install -q dist/*.whl
	cd $(WHEEL_DIR) && venv/bin/rdma-bridge --version | tee version.txt && grep -q "^compiled: hot path" version.txt
	cd $(WHEEL_DIR) && venv/bin/rdma-bridge doctor --transport tcp
	cd $(WHEEL_DIR) && venv/bin/rdma-bridge demo --state-dir $(WHEEL_DIR)/state --transactions 300 | tee demo.txt
	cd $(WHEEL_DIR) && venv/bin/rdma-bridge sandbox down --state-dir $(WHEEL_DIR)/state
	grep -q "verified: both databases hold the same rows" $(WHEEL_DIR)/demo.txt

# The Soft-RoCE guest both rdma targets boot: QEMU and debootstrap from Debian where missing, the image
# built once and cached (tests/rdma/build_image.sh).
rdma-guest: $(STAMP)
	command -v qemu-system-x86_64 >/dev/null && command -v debootstrap >/dev/null || { apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 debootstrap e2fsprogs >/dev/null; }
	PIP="$(PY) -m pip" bash tests/rdma/build_image.sh

# The rdma transport for real: a cached Debian guest under QEMU with Soft-RoCE (rdma_rxe).
# Inside: the transport conformance suite (shm, tcp and rdma), end-to-end replication and
# its faults over rdma with MariaDB in the guest (tests/rdma/), fan-out with rdma members,
# then the conformance suite and the queue pairs' byte-for-byte test again on the
# pure-Python twins. The image is cached in /var/cache/rdma-bridge-vm (~2 min to build,
# ~10 min per run under software emulation; the guest is given 30).
test-rdma: rdma-guest
	GUEST_TIMEOUT_S=1800 bash tests/rdma/run_guest.sh 'python3 -m pytest -q -p no:cacheprovider tests/rdma tests/conformance && \
	  python3 -m pytest -q -p no:cacheprovider tests/faults/test_fanout.py tests/integration/test_idle_replica.py -k rdma && \
	  RDMA_BRIDGE_PURE_PYTHON=1 python3 -m pytest -q -p no:cacheprovider tests/conformance tests/rdma/test_verbs_twins.py'

# The rdma transport in the guest, in one run: placement latency next to perftest's ib_write_lat
# (bench.rdma_lat), then end to end over rdma, tcp and shm (bench.rdma_e2e: CPU per transaction,
# lag, an idle replica side's CPU); both reports kept in bench/results (one file per run).
RDMA_LOG = bench/results/$(shell date +%F-%H%M)-rdma.log
bench-rdma: rdma-guest
	GUEST_TIMEOUT_S=1500 bash tests/rdma/run_guest.sh 'python3 -m bench.rdma_lat >/tmp/lat.json && \
	  python3 -m bench.rdma_e2e --placement /tmp/lat.json' | tee $(RDMA_LOG)
	grep -q '"ratios"' $(RDMA_LOG)

# FLAVOR=mysql-9.7 (or mariadb-11.8): the same demo on servers in containers built here.
demo: deps $(if $(FLAVOR),containers)
	$(PY) -m bridge demo $(if $(FLAVOR),--flavor $(FLAVOR))

# The same with the replica server's own replication threads applying (--apply-mode relay)
demo-relay: deps $(if $(FLAVOR),containers)
	$(PY) -m bridge demo --apply-mode relay $(if $(FLAVOR),--flavor $(FLAVOR))

# The import contracts (setup.cfg), ruff (ruff.toml) and cython-lint on the compiled core;
# `make test` runs it first.
lint: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check
	PATH="$(VENV)/bin:$$PATH" $(VENV)/bin/cython-lint --max-line-length 120 bridge

test: lint deps compose chromium promtool percona
	$(PY) -m pytest -q tests
	# the same pure-layer tests once more on the hot path's pure-Python twin
	RDMA_BRIDGE_PURE_PYTHON=1 $(PY) -m pytest -q tests/unit tests/conformance

unit: $(STAMP) openssl
	$(PY) -m pytest -q tests/unit

integration: deps compose promtool percona
	$(PY) -m pytest -q tests/integration

faults: deps
	$(PY) -m pytest -q tests/faults

# A random mix of faults against a steady workload for $(MINUTES) minutes; prints the
# fault matrix (runs, lost, duplicated, time to recover) and writes soak-result.json.
soak: deps
	$(PY) -m tests.faults.soak --minutes $(MINUTES)

# Catch-up, lag, CPU per transaction, decode and more against baselines measured in
# the same run (a native MariaDB replica, the stock binlog library); writes
# bench/results/<date>.json/.html and the flame graphs.
bench: deps
	$(PY) -m bench.run_all

# The acceptance run: $(HOURS) hour(s) with the bridge as the primary's semi-sync
# replica ($(SEMI_SYNC)) at $(RATE) txn/s beside a native replica, then a native
# semi-sync window; writes bench/results/<date>-stress-<minutes>min-<transport>-<mode>-<timeout>ms.json/.html.
stress: deps
	$(PY) -m bench.stress --hours $(HOURS) --rate $(RATE) --semi-sync $(SEMI_SYNC) --transport $(TRANSPORT)

# Mutated and random inputs into every wire/ring decoder: each must yield a value or
# the protocol error type (a short property-based version runs in make test).
fuzz: $(STAMP)
	$(PY) -m tests.fuzz_decoders --inputs $(FUZZ_INPUTS)

sandbox-down: $(STAMP)
	$(PY) -m bridge sandbox down

# Stops the sandboxes (when the venv that runs them is there: clean never builds it), then
# removes the venv, their state and every build output, the compiled modules in the tree too.
clean:
	if [ -x $(PY) ]; then for dir in .sandbox .sandbox-soak .sandbox-fanout; do \
	  $(PY) -m bridge sandbox down --state-dir $$dir || true; done; fi
	rm -rf $(VENV) .sandbox .sandbox-soak .sandbox-fanout build *.egg-info
	find bridge -name '*.so' -delete
	find bridge -name '*.pyx' | sed 's/\.pyx$$/.c/' | xargs rm -f
