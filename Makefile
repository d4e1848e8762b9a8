# Two entry points (see README): `make demo` and `make test`. Both set everything up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench bench-scale engines

$(STAMP): pyproject.toml providers/*/pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,postgres]' -e providers/local -e providers/docker -e providers/ssh -e providers/ec2 -e providers/codespaces -e providers/kubernetes
	touch $@

setup: $(STAMP)

# An offline agent run on a local node: the real Claude Code CLI, the built-in scripted model.
demo: setup
	$(BIN)/nodeprov run "Say hello from the node"

# Install and start the engines the tests need (Docker, the test base image), the Codex,
# OpenCode and Gemini CLIs, and the examples' npm packages.
engines:
	scripts/engines.sh
	scripts/codex.sh >/dev/null
	scripts/opencode.sh >/dev/null
	scripts/gemini.sh >/dev/null
	scripts/copilot.sh >/dev/null
	scripts/qwen.sh >/dev/null
	scripts/examples.sh >/dev/null
	scripts/kubernetes.sh --background

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy nodeprov providers/local/nodeprov_local providers/docker/nodeprov_docker providers/ssh/nodeprov_ssh providers/ec2/nodeprov_ec2 providers/codespaces/nodeprov_codespaces providers/kubernetes/nodeprov_kubernetes tests integration bench

test: setup engines lint
	scripts/test.sh --durations=30

bench: setup
	$(BIN)/python -m bench.run

# Many concurrent fake-agent runs through the orchestrator against the SDK alone, on SQLite
# and on the PostgreSQL `make engines` starts (NODEPROV_TEST_POSTGRES_URL for another).
bench-scale: setup engines
	$(BIN)/python -m bench.scale
