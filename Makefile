# nestbed: `make demo` and `make test` set up everything on a fresh Debian/Ubuntu machine (as root).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export PATH := $(HOME)/.cargo/bin:$(PATH)

VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps
# Debian packages nestbed uses: Tcl for the ns-2 front end, ns-2 itself for simulation and
# compatibility tests, PostgreSQL for shared stores (and its tests), iproute2/ethtool/tcpdump/
# iperf3 for the back end and measurements, tcptrace and tshark as the trace analyzer's peers
# (tests/analysis/test_tcptrace.py, bench/analyze.py; time for its peak-memory figures),
# liblzo2-dev, which python-lzo builds against (the pub/sub study's LZO), and g++ for
# nestbed-sim (simulated nodes, below), and chromium, the browser the portal's tests drive
# (tests/portal, Playwright with executable_path=/usr/bin/chromium).
APT_PACKAGES := tcl ns2 postgresql iperf3 tcpdump ethtool iproute2 iputils-ping python3-venv \
	tcptrace tshark time liblzo2-dev g++ chromium
# Only the benchmarks' anchors: Mininet beside swap-in and swap-out (bench/swap.py), trafgen as
# the fast frame generator of bench/linkd.py. Installed by `make bench`, without recommends.
BENCH_PACKAGES := mininet netsniff-ng

.PHONY: setup apt bench-apt packages demo test test-python test-rust bench lint format schemas clean sim

setup: apt $(STAMPS)/venv rust sim

apt:
	@$(MAKE) --no-print-directory packages PACKAGES="$(APT_PACKAGES)"

bench-apt:
	@$(MAKE) --no-print-directory packages PACKAGES="$(BENCH_PACKAGES)" APT_FLAGS=--no-install-recommends

packages:
	@missing=$$(for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_FLAGS) $$missing >/dev/null; \
	fi

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q setuptools==80.9.0
	$(PY) -m pip install -q --no-build-isolation -e '.[dev,studies]'
	@touch $@

rust:
	cargo build --release --quiet

# The simulated parts of experiments (`make-simulated`) run in nestbed-sim, a small C++ program
# on ns-3's real-time simulator, compiled against the libraries and headers of the ns3 wheel
# (pyproject's `hybrid` extra; this pin must match it). The wheel goes in without its one
# dependency, cppyy: its Python bindings build from source for minutes, and nestbed-sim needs
# none of them. Adds about 30 s to a fresh setup (the 69 MB download, then 6 s of g++).
NS3 := ns3==3.44.post0
NS3_LIBS := core network internet point-to-point fd-net-device applications traffic-control
SIM := target/release/nestbed-sim

sim: $(SIM)

$(STAMPS)/ns3: pyproject.toml $(STAMPS)/venv
	$(PY) -m pip install -q --no-deps '$(NS3)'
	@touch $@

SIM_SOURCES := $(wildcard csrc/nestbed-sim/*.cc)

# RED comes from linkd's own pipe crate (crates/nestbed-pipe/src/ffi.rs), as a static library.
PIPE_LIB := target/release/libnestbed_pipe.a

$(PIPE_LIB): $(wildcard crates/nestbed-pipe/src/*.rs) crates/nestbed-pipe/Cargo.toml Cargo.toml Cargo.lock
	cargo build --release --quiet -p nestbed-pipe

$(SIM): $(SIM_SOURCES) $(wildcard csrc/nestbed-sim/*.h) $(STAMPS)/ns3 $(PIPE_LIB)
	@mkdir -p $(dir $@)
	root=$$($(PY) -c "import importlib.metadata as m; print(m.distribution('ns3').locate_file('ns3'))"); \
	g++ -std=c++20 -O2 -o $@ $(SIM_SOURCES) -I$$root/include -L$$root/lib64 -Wl,-rpath,$$root/lib64 \
	  $(addprefix -lns3.44-,$(NS3_LIBS)) $(PIPE_LIB) -lpthread -ldl -lm

NESTBED := $(VENV)/bin/nestbed
DEMO_DB := $(STAMPS)/demo.db

demo: setup
	$(NESTBED) parse examples/dumbbell.ns
	@echo; echo "Running the dumbbell: CBR and TCP across the 10 Mb/s, 20 ms bottleneck, which goes down at 8 s and up at 10 s:"
	$(NESTBED) --db $(DEMO_DB) run examples/dumbbell.ns --results results/demo

test: setup test-rust test-python

test-rust:
	cargo test --quiet

test-python:
	$(PY) -m pytest -q

bench: setup bench-apt
	@for script in bench/*.py; do $(PY) $$script; done

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	cargo fmt --all --check
	cargo clippy --all-targets --quiet -- -D warnings

format: setup
	$(VENV)/bin/ruff format src tests bench
	$(VENV)/bin/ruff check --fix src tests bench
	cargo fmt --all

schemas: setup
	$(PY) -m nestbed.spec.schema --write

clean:
	rm -rf $(VENV) $(STAMPS) target
