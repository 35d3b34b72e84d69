# Two commands: `make serve` installs and starts the server; `make test` installs and tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SKALD_DATA_DIR ?= ./.skald
export SKALD_DATA_DIR
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION = 20

.PHONY: serve install install-dev browsers console-assets test unit conformance contract smoke e2e fuzz lint typecheck check bench clean cdk-cli lambda-assets synth deploy

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

# Debian's chromium for the console's browser tests (Playwright drives it; no browser
# download). Without apt as root the browser tests skip and say why.
browsers:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium (apt) for the console's browser tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q chromium >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } || \
	      echo "chromium could not be installed: the console's browser tests will skip"; \
	  else \
	    echo "no /usr/bin/chromium and no apt as root: the console's browser tests will skip"; \
	  fi; \
	fi

# The console's vendored libraries (committed; rebuild only to change their versions).
console-assets:
	npm ci --prefix scripts/console --no-audit --no-fund
	node scripts/console/build.mjs

# Two workers per core (at most 16), each test file whole on one worker (its module fixtures,
# its order): much of the suite waits on emulators, subprocesses and timers, which overlap
# (2 cores: 482 s with 4 workers against 526-573 s with 2, the same tests passing).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); w=$$((2 * n)); \
	[ $$w -gt 16 ] && w=16; echo $$w)

PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile
# The fast tiers: no Skald server, no browser.
FAST_TIERS := tests/unit tests/conformance

# Lint, then the fast tiers, then the rest: the first failure stops the run, and a tier that
# ran is not run again.
test: install-dev browsers
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory conformance
	$(PYTEST) tests $(addprefix --ignore=,$(FAST_TIERS))

# Domain rules, services over fakes, adapters' request building (tests/unit).
unit: install-dev
	$(PYTEST) tests/unit

# Every port's suite against every adapter of it, AWS ones on moto and osmem (tests/conformance).
conformance: install-dev
	$(PYTEST) tests/conformance

# The AWS boundary checked offline: IAM (calls vs. roles), OpenSearch bodies vs. the API spec,
# routes vs. API Gateway, and the RecallLedger / dedup conformance. Also part of `make test`.
contract: install-dev
	$(PY) -m pytest tests/contract tests/conformance/test_recall_ledger.py \
		tests/conformance/test_dedup_registry.py

# A fresh deploy in under a minute: make smoke URL=<ApiUrl> KEY=<user key>
smoke: install-dev
	@test -n "$(URL)" -a -n "$(KEY)" || { echo "usage: make smoke URL=<ApiUrl> KEY=<user key>"; exit 2; }
	$(PY) scripts/smoke.py --url "$(URL)" --api-key "$(KEY)"

# Against a deployed stack: SKALD_E2E_URL, SKALD_E2E_API_KEY (see docs/deploy.md)
e2e: install-dev
	$(PY) -m pytest tests/e2e -m e2e -v

# The schemathesis run alone (also part of `make test`): SKALD_FUZZ_SEED, SKALD_FUZZ_EXAMPLES.
fuzz: install-dev
	$(PY) -m pytest tests/fuzz

LINT_PATHS := layers/common/python/skald functions tests infra scripts bench

# ruff's rules (complexity included) and its formatter, then mypy, which reads its files from
# pyproject.toml: the package, infra/, bench/ and tests/.
lint: install-dev
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	MYPYPATH=layers/common/python $(VENV)/bin/mypy

check: test

# Quick benchmark (10k records, LoCoMo dev split, side by side with OpenViking): bench/RESULTS.md
bench: install
	$(PIP) install -q -e '.[bench]'
	$(PY) bench/run.py --quick

# --- AWS (serverless): CDK app in infra/, CLI pinned in infra/package.json -------------------
CDK := npx --prefix infra cdk
CDK_OUT ?= build/cdk.out
CDK_ARGS ?=

infra/node_modules/.package-lock.json: infra/package.json infra/package-lock.json
	npm ci --prefix infra --no-audit --no-fund

cdk-cli: infra/node_modules/.package-lock.json

# Common layer (skald + cp312 manylinux wheels, no Docker) and the function folders -> build/
lambda-assets: install
	$(PY) scripts/build_lambda_assets.py

# Offline, no AWS credentials needed. Modes: make synth CDK_ARGS="-c mode=saas"
synth: install-dev cdk-cli lambda-assets
	$(CDK) synth -q -o $(CDK_OUT) $(CDK_ARGS)

deploy: install-dev cdk-cli lambda-assets
	$(CDK) deploy -o $(CDK_OUT) --require-approval broadening $(CDK_ARGS)

clean:
	rm -rf $(VENV) build .pytest_cache infra/node_modules
