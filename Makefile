# Fresh machine: `make demo` (main job; installs torch and bbb[plots] only) and `make test` (the
# suite, with the dev, ray and lightning extras; `make test-fast`: the core's and the runs' tests
# except the slow ones). Each creates .venv on first use.
PYTHON ?= python3
# Installed first and alone, so no other torch build (several GB of CUDA wheels) is ever pulled.
TORCH ?= torch==2.13.0
# Where that torch comes from: empty = pip's configured indexes (a CPU wheel only where one is
# provided locally); e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu for the CPU build.
TORCH_INDEX ?=
VENV := .venv
PY := $(VENV)/bin/python
# uv (PyPI's), in an environment of its own, installs what the suite, the docs and the torch lanes
# need beside the torch already installed: on a machine with nothing cached the dev extras took pip
# 50 s and uv 16 s, a CUDA build of torch 2.8 pip 102 s (81 s of CPU) and uv 46 s (43 s of CPU).
# The torch of .venv: uv takes it from TORCH_FIND_LINKS (default: pip's PIP_FIND_LINKS, where a
# machine keeps a local CPU wheel, which uv does not look for by itself), faster than pip there.
# Without such a folder `make test` installs torch with pip, as `make demo` always does.
# UV_BYTECODE: uv compiles every module at install (--compile-bytecode, as pip does) only where
# Python is told not to write the bytecode of what it imports (PYTHONDONTWRITEBYTECODE set, as on
# this project's machines): there every process compiled torch's and transformers' modules again on
# import. Elsewhere the first import writes the bytecode of the modules used, a fraction of those
# installed (docs/results.md, "Where CI's time goes"). .ci/run unsets the variable.
UV_BYTECODE = $(if $(PYTHONDONTWRITEBYTECODE),--compile-bytecode)
UV := .venv-uv/bin/uv
# .venv in two stages: DEMO_STAMP, what `make demo` needs (torch, then bbb with its plots extra);
# STAMP, what the suite, lint, typecheck and the docs need (torch, then the plots, dev, ray,
# lightning and laplace extras: matplotlib, pytest, ruff, mypy, transformers, ray, lightning,
# laplace-torch), made on top of DEMO_STAMP's environment where there is one, and counting as
# DEMO_STAMP too. laplace-torch pulls a torchvision, whose PyPI wheel does not load beside a CPU
# torch's local wheel ("operator torchvision::nms does not exist"): where `import laplace` then
# fails, it is uninstalled (nothing of bbb's uses it; docs/laplace.md).
DEMO_STAMP := $(VENV)/.demo-installed
STAMP := $(VENV)/.installed
TORCH_FIND_LINKS ?= $(PIP_FIND_LINKS)

.PHONY: venv test test-fast lint typecheck demo clean docs wheel-check

venv: $(STAMP)

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	printf "%s\n" "$(TORCH)" > $(VENV)/torch-constraint.txt
	$(PY) -m pip install -q -c $(VENV)/torch-constraint.txt -e ".[plots]"
	touch $(DEMO_STAMP)

# (a .venv made by `make demo` keeps its torch: uv finds it satisfies the constraint)
$(STAMP): pyproject.toml | $(UV)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH_FIND_LINKS),$(UV) pip install -q $(UV_BYTECODE) --python $(PY) --find-links $(TORCH_FIND_LINKS),$(PY) -m pip install -q) "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	printf "%s\n" "$(TORCH)" > $(VENV)/torch-constraint.txt
	$(UV) pip install -q $(UV_BYTECODE) --python $(PY) -c $(VENV)/torch-constraint.txt -e ".[plots,dev,ray,lightning,laplace]"
	$(PY) -c "import laplace" 2> /dev/null || $(UV) pip uninstall -q --python $(PY) torchvision
	touch $(DEMO_STAMP) $(STAMP)

$(UV):
	$(PYTHON) -m venv .venv-uv
	.venv-uv/bin/python -m pip install -q uv

# The suite on TEST_WORKERS processes (pytest-xdist, from the dev extra), a test module to each
# (--dist loadscope: a module's shared fixtures are built once; the modules with tests marked
# slow first, tests/conftest.py, hence --no-loadscope-reorder); TEST_WORKERS=0 runs it in this
# process alone. Two workers on 2 cores: the slow tests wait mostly on one-threaded subprocesses
# (torch.compile, kill-and-resume, the command line), so the second core is otherwise idle.
TEST_WORKERS ?= 2
PYTEST_WORKERS = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder)

# Everything (pyproject's testpaths): tests/ (core/, runs/, applications/, cuda/: skipped without
# a GPU) and bench/tests/. CI runs this (.ci/run); the slowest 25 tests' times close its log.
test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_WORKERS) --durations=25

# The development lane: the tests of the library's two lower layers, tests/core and tests/runs,
# except those marked slow (real data, long training, torch.compile, kill-and-resume), on the same
# workers. The command line, the sweep, the experiments, the examples, the docs and the bench
# (tests/applications, bench/tests) are left to `make test`, which (with CI) runs everything.
test-fast: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_WORKERS) -m "not slow" tests/core tests/runs

# The fast lane under another torch release, e.g. `make test-torch TORCH=torch==2.5.1`: its own
# environment .venv-torch-2.5.1 (git-ignored; from the package index: CUDA wheels, which run on
# the CPU), torch installed first and alone, then bbb's dev extra against a constraint pinning it;
# setuptools upgraded (Python 3.11's venv seeds setuptools 65, which torch <= 2.5's Triton imports
# and which then installs a warnings filter of its own).
# CI (.ci/run) runs it for pyproject's floor with TORCH_TESTS_FLOOR (below).
# TORCH_TESTS: what it runs (default the fast lane); TORCH_TESTS_MODELS, the models lane for a
# release between the floor and the pin (e.g. 2.11, the GPU machines' torch; no longer a lane of
# CI's): the tests of the claim "every torch.nn block and Hugging Face / peft model converts and
# trains right", without the run directory's, the faults' and the command line's tests, which call the
# same few torch functions on every release. Both deselect the
# tests marked release_independent (pyproject.toml: locks, kills, unwritable, full or damaged
# files, matplotlib's backend: the operating system's side, the same under every torch), which the
# main suite runs (docs/results.md, "Where CI's time goes").
TORCH_VENV = .venv-torch-$(patsubst torch==%,%,$(TORCH))
TORCH_LANE = -m "not slow and not release_independent"
TORCH_TESTS ?= $(TORCH_LANE) tests/core tests/runs
TORCH_TESTS_MODELS = $(TORCH_LANE) tests/core/nn tests/core/test_torch_versions.py tests/core/test_model_zoo.py \
	tests/core/test_convert.py tests/core/test_convert_messages.py tests/core/test_layer_summary.py \
	tests/core/test_hf_conversion.py tests/core/test_hf_models.py tests/core/test_lora.py \
	tests/core/test_lora_models.py tests/core/test_engine.py tests/core/test_elbo.py tests/core/test_distributions.py \
	tests/core/test_random.py tests/core/test_finetune_init.py tests/core/test_compile_switch.py
# CI's floor lane: the models lane and IVON's tests (the optimiser's torch.optim and foreach calls),
# on one process. Not in it: the population's and member settings' tests (the engine's torch calls
# again, and most of tests/core's time on the floor), the data, io, plots, uncertainty and prune
# tests (plain tensor arithmetic), which the suite runs on the pin (docs/results.md, "Where CI's
# time goes", has the times).
TORCH_TESTS_FLOOR = $(TORCH_TESTS_MODELS) tests/core/test_ivon.py tests/core/test_ivon_flat.py
.PHONY: test-torch
test-torch: $(TORCH_VENV)/.installed
	$(TORCH_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_WORKERS) $(TORCH_TESTS)

.venv-torch-%/.installed: pyproject.toml | $(UV)
	rm -rf .venv-torch-$*
	$(PYTHON) -m venv .venv-torch-$*
	$(UV) pip install -q $(UV_BYTECODE) --python .venv-torch-$*/bin/python --upgrade setuptools
	$(UV) pip install -q $(UV_BYTECODE) --python .venv-torch-$*/bin/python "torch==$*" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	printf "%s\n" "torch==$*" > .venv-torch-$*/torch-constraint.txt
	$(UV) pip install -q $(UV_BYTECODE) --python .venv-torch-$*/bin/python -c .venv-torch-$*/torch-constraint.txt -e ".[dev]"
	touch $@

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The package ships py.typed: its annotations are checked (CI).
typecheck: $(STAMP)
	$(VENV)/bin/mypy src/bbb

# the main job, in an environment of torch and bbb[plots] only (DEMO_STAMP)
demo: $(DEMO_STAMP)
	$(PY) -m bbb demo

# The API reference site (mkdocs-material + mkdocstrings), built strictly: any warning fails.
DOCS_STAMP := $(VENV)/.docs-installed
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(UV) pip install -q $(UV_BYTECODE) --python $(PY) -c $(VENV)/torch-constraint.txt -e ".[docs]"
	touch $(DOCS_STAMP)

# Build the wheel, install it into a fresh venv outside the repo, run `bbb --help` and a
# one-epoch train from it (.ci/wheel-check).
wheel-check: $(STAMP)
	PY=$(PY) bash .ci/wheel-check

# Side-by-side speed bench against the peer libraries (bench/README.md); MNIST from $$BBB_DATA
# (e.g. `BBB_DATA=$$HOME/bbb-data make bench`), extra options in BENCH_ARGS (e.g. --quick).
# The peers never touch torch: everything is installed against a constraint pinning it.
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=
.PHONY: bench
bench: $(BENCH_STAMP)
	OMP_WAIT_POLICY=PASSIVE $(PY) bench/run.py $(BENCH_ARGS)
	OMP_WAIT_POLICY=PASSIVE $(PY) bench/bench_kernel.py --threads 2 --out bench/results

$(BENCH_STAMP): $(STAMP) pyproject.toml
	test -f $(VENV)/torch-constraint.txt || $(PY) -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/torch-constraint.txt
	$(PY) -m pip install -q -c $(VENV)/torch-constraint.txt -e ".[bench]"
	$(PY) -m pip install -q --no-deps -c $(VENV)/torch-constraint.txt "bayesian-torch==0.5.0" "blitz-bayesian-pytorch==0.2.8"
	touch $(BENCH_STAMP)

# The GPU check (bench/README.md "The GPU check"), the first command on a GPU machine: tests/cuda,
# the bench on CUDA at 2x1200, seconds per 2x1200 paper epoch -> bench/results/gpu.{json,md} in
# <= 9 minutes, from the checkout with PYTHONPATH=src (no venv, nothing installed; $(PYTHON) is the
# machine's python3 with torch). GPU_CHECK_ARGS: e.g. --out DIR, --dry-run (the CPU, tiny sizes).
GPU_CHECK_ARGS ?=
.PHONY: gpu-check
gpu-check:
	PYTHON=$(PYTHON) bash bench/gpu_check.sh $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .venv-torch-* .venv-uv build dist site src/*.egg-info
