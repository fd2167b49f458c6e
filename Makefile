# mtad — run `make help` for the list of targets.
SHELL := /bin/bash
PY ?= .venv/bin/python
# torch first, pinned: here it resolves to the CPU wheel on disk; on a GPU machine
# the same pin resolves to PyPI's CUDA wheel. Override with TORCH_SPEC=... if needed.
TORCH_SPEC ?= torch==2.13.0

.PHONY: help install test
help: ## list targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

.venv/.installed: pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: .venv/.installed ## create .venv and install mtad with its dev tools

.PHONY: data
data: install ## fetch every dataset into the data root
	$(PY) scripts/get_data.py $(ARGS)

test: install ## run the whole test suite (slow real-model tests included)
	$(PY) -m pytest -q
