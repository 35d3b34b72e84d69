# Two commands: `make serve` installs and starts the server; `make test` installs and tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SKALD_DATA_DIR ?= ./.skald
export SKALD_DATA_DIR
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION = 20

.PHONY: serve install install-dev test lint typecheck check bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(PIP) install -q -e '.[dev,infra]'
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

serve: install
	$(VENV)/bin/skald serve --host 127.0.0.1 --port 1933 --data-dir $(SKALD_DATA_DIR)

test: install-dev
	$(PY) -m pytest

lint: install-dev
	$(VENV)/bin/ruff check layers/common/python/skald functions tests
	MYPYPATH=layers/common/python $(VENV)/bin/mypy

check: lint test

clean:
	rm -rf $(VENV) build .pytest_cache
