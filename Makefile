# inferplane: `make demo` runs the local platform, `make test` runs everything CI runs.
# Both install what they need themselves (apt packages, .venv) on a fresh Debian 12 machine.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export CONTAINERS_CONF := $(CURDIR)/.config/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help deps venv conformance-deps preflight-wheels lint test pytest unit integration molecule node-image render bench demo demo-down clean

help:
	@echo "make demo       start the local platform, run load through the gateway, print a summary"
	@echo "make demo-down  stop everything make demo started"
	@echo "make test       install everything, then lint + unit + pulumi mocks + schema + promtool + molecule + integration"
	@echo "make bench      benchmarks (ratios against a baseline run side by side)"
	@echo "make render     render and validate every stack into build/<stack>"

deps:
	@scripts/install-deps.sh

$(VENV)/.installed: requirements/base.txt pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements/base.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

venv: $(VENV)/.installed

# SGLang's own CLI parser for the launch-worker conformance test (~1 GB with CPU torch).
$(VENV)/.conformance: requirements/conformance.txt $(VENV)/.installed
	$(BIN)/pip install -q -r requirements/conformance.txt
	$(BIN)/pip install -q --no-deps sglang==0.5.23
	touch $@

conformance-deps: $(VENV)/.conformance

# ansible-core wheels for scripts/preflight-standalone.sh (a GPU node with Python but no Ansible);
# the standalone-run test uses them.
PYVER := $(shell python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
preflight-wheels: venv
	@scripts/fetch-preflight-wheels.sh $(PYVER)

lint: venv
	$(BIN)/ruff check inferplane tests benchmarks plugins __main__.py
	$(BIN)/ruff format --check inferplane tests benchmarks plugins __main__.py
	$(BIN)/mypy inferplane
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --profile production --offline -q

unit: venv
	$(BIN)/pytest -m "not integration and not molecule" -q

integration: deps venv
	$(BIN)/pytest -m integration -q

node-image: deps
	@scripts/build-node-image.sh

molecule: deps venv node-image
	@scripts/run-molecule.sh

pytest: deps venv conformance-deps preflight-wheels
	$(BIN)/pytest -q

test: deps venv conformance-deps lint pytest molecule

render: venv
	@for s in $$(ls stacks | sed -n 's/^Pulumi\.\(.*\)\.yaml$$/\1/p'); do \
	  $(BIN)/inferplane render --stack $$s --out build/$$s && $(BIN)/inferplane validate build/$$s || exit $$?; done

bench: deps venv
	$(PY) -m benchmarks

demo: deps venv
	@scripts/demo.sh

demo-down: venv
	$(BIN)/inferplane local down

clean:
	rm -rf build .state .pytest_cache .mypy_cache .ruff_cache
