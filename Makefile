# Fresh machine: `make demo` (main job) and `make test` (the suite; `make test-fast` skips the
# slow tests). Each creates .venv on first use.
PYTHON ?= python3
# Installed first and alone, so no other torch build (several GB of CUDA wheels) is ever pulled.
TORCH ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test test-fast lint demo clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	printf "%s\n" "$(TORCH)" > $(VENV)/torch-constraint.txt
	$(PY) -m pip install -q -c $(VENV)/torch-constraint.txt -e ".[dev,ray]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

# The development lane: everything but the tests marked slow (real data, long training).
# `make test` (and CI) still run everything.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

demo: $(STAMP)
	$(PY) -m bbb demo

# Side-by-side speed bench against the peer libraries (bench/README.md); MNIST from $$BBB_DATA
# (e.g. `BBB_DATA=../shared/data make bench`), extra options in BENCH_ARGS (e.g. --quick).
# The peers never touch torch: everything is installed against a constraint pinning it.
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=
.PHONY: bench
bench: $(BENCH_STAMP)
	OMP_WAIT_POLICY=PASSIVE $(PY) bench/run.py $(BENCH_ARGS)

$(BENCH_STAMP): $(STAMP) pyproject.toml
	test -f $(VENV)/torch-constraint.txt || $(PY) -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/torch-constraint.txt
	$(PY) -m pip install -q -c $(VENV)/torch-constraint.txt -e ".[bench]"
	$(PY) -m pip install -q --no-deps -c $(VENV)/torch-constraint.txt "bayesian-torch==0.5.0" "blitz-bayesian-pytorch==0.2.8"
	touch $(BENCH_STAMP)

clean:
	rm -rf $(VENV) build dist src/*.egg-info
