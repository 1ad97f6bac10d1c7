# Fresh machine: `make demo` (main job) and `make test` (the suite). Both create .venv on first use.
PYTHON ?= python3
# Installed first and alone, so no other torch build (several GB of CUDA wheels) is ever pulled.
TORCH ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

demo: $(STAMP)
	$(PY) -m bbb demo

clean:
	rm -rf $(VENV) build dist src/*.egg-info
