# gpusched: `make bench` and `make test` each create .venv if missing and install everything.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_CPU := torch==2.13.0

.PHONY: bench test test-all lint perf fuzz install services agents clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# CPU torch first where there is no NVIDIA GPU, so that the project's range does not pull a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "NVIDIA GPU found: installing torch from the project's range"; \
	else \
		$(BIN)/python -m pip install -q $(TORCH_CPU); \
	fi
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# Slurm and munge from the distribution's packages, for the tests that start a one-machine Slurm
# cluster (gpusched/real/service/slurm_local.py). Where they cannot be installed (no apt, not root) those
# tests skip and say why.
services:
	@if ! command -v slurmctld >/dev/null 2>&1 && ! test -x /usr/sbin/slurmctld; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "installing slurm-wlm and munge (Debian packages)"; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null) \
				|| echo "Slurm could not be installed: its tests will skip"; \
		else \
			echo "Slurm not installed and no root apt-get: its tests will skip"; \
		fi; \
	fi

bench: $(STAMP)
	$(BIN)/gpusched-bench scenario=synthetic_philly

lint: $(STAMP)
	$(BIN)/ruff check gpusched_env gpusched tests
	$(BIN)/mypy

test: lint services
	$(BIN)/python -m pytest -m "not slow"

test-all: lint services
	$(BIN)/python -m pytest

# 10,000 generated scenarios through the simulator with the invariant checker on (tests/test_fuzz.py),
# and a longer run of the real backend's kill fuzz. `make fuzz BIN=/path/to/venv/bin` uses that venv.
# GPUSCHED_FUZZ=ci: the CI-sized run.
GPUSCHED_FUZZ ?= long
FUZZ_DEPS := $(if $(filter command line,$(origin BIN)),,$(STAMP))
fuzz: $(FUZZ_DEPS)
	GPUSCHED_FUZZ=$(GPUSCHED_FUZZ) $(BIN)/python -m pytest -p no:cacheprovider tests/test_fuzz.py tests/real/test_fuzz_real.py \
		--hypothesis-show-statistics

# Retrain every shipped checkpoint (gpusched/agents/pretrained/manifest.json: each one's gpusched-train command, a
# step budget and a seed) into runs/pretrained/NAME and print the largest weight difference to the shipped
# file. About 65 minutes on a 2-core machine at load average 5-8 (docs/AGENTS.md, *Shipped checkpoints*).
agents: $(STAMP)
	$(BIN)/python -m gpusched.agents.pretrained train --out runs/pretrained

perf: $(STAMP)
	$(BIN)/gpusched-bench scenario=philly_full perf=true policies=[fifo] out_dir=results/perf

clean:
	rm -rf $(VENV) results outputs .pytest_cache .mypy_cache .ruff_cache
