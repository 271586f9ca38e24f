# The two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
PYTEST_ARGS ?=

.PHONY: run test lint typecheck unit system-deps venv bench screenshots clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed

venv: $(VENV)/.installed

## Open gpuroom (shows the local machine when no hosts are configured).
run: $(VENV)/.installed
	$(VENV)/bin/gpuroom

## Everything CI runs: system packages when missing, the dev venv, lint, types, tests.
test: system-deps $(STAMP) lint typecheck unit

# sshd, tmux, rsync and Slurm (slurm-wlm: slurmctld, slurmd, slurm-client) are what the tests
# drive for real; install them only when missing.
system-deps:
	@missing=""; \
	command -v /usr/sbin/sshd >/dev/null || missing="$$missing openssh-server"; \
	command -v ssh >/dev/null || missing="$$missing openssh-client"; \
	command -v tmux >/dev/null || missing="$$missing tmux"; \
	command -v rsync >/dev/null || missing="$$missing rsync"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	for t in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch; do \
	  command -v $$t >/dev/null || { missing="$$missing slurm-wlm"; break; }; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    policy=""; \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
	        && policy=1; \
	    fi; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	    rc=$$?; [ -n "$$policy" ] && rm -f /usr/sbin/policy-rc.d; [ $$rc = 0 ] || exit $$rc; \
	  else \
	    echo "missing system packages:$$missing (run: sudo apt-get install$$missing); SSH tests will skip"; \
	  fi; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# mypy cannot follow setuptools' editable finder (gpuroom.tui -> tui/), so it would type every
# gpuroom.* import as Any; a link tree under build/ gives it the installed layout. The benches
# are jump-host code too: a second run, since mypy takes packages or files, not both.
TYPECHECK_TREE := build/typecheck/gpuroom
typecheck: $(STAMP)
	@mkdir -p $(TYPECHECK_TREE)
	@for d in tui widgets profiles remote; do ln -sfn ../../../$$d $(TYPECHECK_TREE)/$$d; done
	MYPYPATH=build/typecheck $(VENV)/bin/mypy -p gpuroom.tui -p gpuroom.widgets -p gpuroom.profiles
	MYPYPATH=build/typecheck $(VENV)/bin/mypy bench/*.py

unit: $(STAMP)
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/poll.py

screenshots: $(STAMP)
	$(PY) -m gpuroom.tui.room.screenshots screenshots

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
