# The two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
PYTEST_ARGS ?=

.PHONY: run test lint typecheck unit system-deps venv bench screenshots reliability clean

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
# drive for real, and Debian's chromium and chromedriver the browser test of `gpuroom web`;
# install them only when missing.
system-deps:
	@missing=""; \
	command -v /usr/sbin/sshd >/dev/null || missing="$$missing openssh-server"; \
	command -v ssh >/dev/null || missing="$$missing openssh-client"; \
	command -v tmux >/dev/null || missing="$$missing tmux"; \
	command -v rsync >/dev/null || missing="$$missing rsync"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
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

# mypy cannot follow setuptools' editable finder (gpuroom.tui -> tui/): it types every gpuroom.*
# import as Any, which hides real errors. So the layout of an install is given to it as a tree of
# folder links under build/, one per entry of [tool.setuptools.package-dir] (a new module or
# package needs no edit here), and [tool.mypy] points mypy_path at it and checks the whole gpuroom
# namespace. Measured and rejected: mypy's files/packages/mypy_path/explicit_package_bases alone
# have no way to map gpuroom.tui to tui/ (files name the modules tui.*, every gpuroom.* import is
# Any; -p gpuroom.tui is "Can't find package"); setuptools' editable_mode=compat puts the repo
# root on sys.path, so gpuroom does not import at all; editable_mode=strict links files, not
# folders, so a new module needs a reinstall, and mypy treats the result as an installed package
# without py.typed. The sed turns the tree's paths in mypy's messages back into the repo's.
# The benches are jump-host code too: a second run, since mypy takes packages or files, not both.
TYPECHECK_ROOT := build/typecheck
PACKAGE_DIRS = $(PY) -c 'import sys; toml = __import__("tomllib" if sys.version_info >= (3, 11) \
  else "tomli"); dirs = toml.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"]; \
  print("\n".join(k.split(".")[1] + " " + v for k, v in dirs.items() if k.count(".") == 1))'
# remote/ runs on the box's Python 3.8. mypy 1.17 dropped --python-version 3.8 and the mypy of
# the dev venv takes 3.10 and up, so the last mypy that targets 3.8 runs from its own venv: with
# 3.8's stubs it reports what 3.8 lacks (str.removeprefix, functools.cache, math.lcm,
# os.waitstatus_to_exitcode, dict | dict, list[int] at run time, zoneinfo), where the AST check in
# tests/unit/test_layering.py knows only the names listed there. That run sees no site-packages:
# torch's own sources need 3.9+ syntax to parse, so torch is Any there and the ignores that real
# torch types need look unused; the 3.10 run, which sees torch, keeps those ignores honest.
MYPY38_PIN := mypy==1.16.1
MYPY38_VENV := build/mypy-py38
MYPY38 := $(MYPY38_VENV)/.installed-$(MYPY38_PIN)
$(MYPY38):
	rm -rf $(MYPY38_VENV)
	$(PYTHON) -m venv $(MYPY38_VENV)
	$(MYPY38_VENV)/bin/python -m pip install -q '$(MYPY38_PIN)'
	touch $@

typecheck: $(STAMP) $(MYPY38)
	@rm -rf $(TYPECHECK_ROOT)/gpuroom && mkdir -p $(TYPECHECK_ROOT)/gpuroom
	@: > $(TYPECHECK_ROOT)/paths.sed
	@set -o pipefail; $(PACKAGE_DIRS) | while read -r name dir; do \
	  ln -s ../../../$$dir $(TYPECHECK_ROOT)/gpuroom/$$name \
	  && echo "s#^$(TYPECHECK_ROOT)/gpuroom/$$name/#$$dir/#" >> $(TYPECHECK_ROOT)/paths.sed; \
	done
	set -o pipefail; $(VENV)/bin/mypy | sed -f $(TYPECHECK_ROOT)/paths.sed
	$(VENV)/bin/mypy bench/*.py
	set -o pipefail; $(MYPY38_VENV)/bin/mypy --python-version 3.8 --no-site-packages \
	  --no-warn-unused-ignores -p gpuroom.remote | sed -f $(TYPECHECK_ROOT)/paths.sed

unit: $(STAMP)
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

## The hostile-input and fault suite (issue 18): every @pytest.mark.attack test, tallied per
## category into docs/RELIABILITY.md (written even when an attempt fails; the exit status says so).
reliability: system-deps $(STAMP)
	@# One token with '=': a separate value would be taken for a test path before the
	@# option is known, and the conftest that registers it would not load.
	$(VENV)/bin/pytest -q -m attack --reliability-doc=docs/RELIABILITY.md $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/poll.py

screenshots: $(STAMP)
	$(PY) -m gpuroom.tui.room.screenshots screenshots
	GPUROOM_SCREENSHOTS=1 $(VENV)/bin/pytest -q tests/system/test_web_browser.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
