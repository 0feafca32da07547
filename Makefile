# Two commands on a fresh machine (see README):
#   make lab    set up .venv (once) and open the workbench in JupyterLab
#   make test   set up .venv (once) and run every test (unit + notebooks + browser)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup install-torch lab test test-unit test-notebooks test-browser \
	test-newest lock notebooks nbconvert-execute report clean libraries

# Where torch comes from. On Linux, `torch==X` from PyPI is the CUDA build (~3 GB with its
# nvidia-* wheels); PyTorch's CPU wheel index has the CPU build (~200 MB), which is all the
# workbench needs. TORCH_INDEX=auto (the default) installs torch from that index when it answers
# within 5 s and from pip's default index otherwise (offline mirrors, local wheels);
# TORCH_INDEX=cpu or TORCH_INDEX=default forces one. `make install-torch DRY=echo` prints the
# command instead of running it. The pin is read from pyproject.toml: the workbench's exact pin
# (its extras), not the light install's range (its dependencies).
TORCH_INDEX ?= auto
CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_PROBE ?= $(PYTHON) -c "import urllib.request; urllib.request.urlopen('$(CPU_INDEX)/torch/', timeout=5)"
TORCH_REQ := $(shell sed -n 's/^ *"\(torch==[^"]*\)".*/\1/p' pyproject.toml | head -n 1)
TORCH_RANGE := $(shell sed -n 's/^ *"\(torch>[^"]*\)".*/\1/p' pyproject.toml | head -n 1)
DRY ?=
TORCH_INSTALL = case "$(TORCH_INDEX)" in \
	  cpu|default) source=$(TORCH_INDEX) ;; \
	  auto) if $(TORCH_PROBE) >/dev/null 2>&1; then source=cpu; else source=default; \
	        echo "torch: $(CPU_INDEX) did not answer; using pip's default index (TORCH_INDEX=cpu insists)" >&2; fi ;; \
	  *) echo "TORCH_INDEX must be auto, cpu or default, not '$(TORCH_INDEX)'" >&2; exit 2 ;; \
	esac; \
	if [ $$source = cpu ]; then \
	  echo "torch: $(TORCH_REQ), CPU build, from $(CPU_INDEX)" >&2; \
	  $(DRY) $(PY) -m pip install --quiet "$(TORCH_REQ)" --index-url $(CPU_INDEX); \
	else \
	  $(DRY) $(PY) -m pip install --quiet "$(TORCH_REQ)"; \
	fi

# The workbench installs from its lock (locks/workbench.txt, written by `make lock`): every
# package at the exact version it was tested with, so a release of any dependency changes nothing
# here until the lock is refreshed. Then funcbwd itself, editable, with no dependencies of its own
# to resolve and the lock's setuptools as its build backend; `pip check` confirms the set is whole.
LOCK := locks/workbench.txt
PIP_PIN := $(shell sed -n 's/^\(pip==[^ ]*\)$$/\1/p' $(LOCK))
$(STAMP): pyproject.toml $(LOCK)
	@echo "setup: building $(VENV) from $(LOCK) (about a minute from local wheels; more to download)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(PIP_PIN)"
	@$(TORCH_INSTALL)
	$(PY) -m pip install --quiet -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m pip check
	touch $(STAMP)

# Refresh the lock: what installing the workbench's extras takes today (pip's resolver), exact.
# Review the diff, run `make test`, commit both.
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "packaging>=24"
	$(PY) tools/lock.py write

install-torch:
	@$(TORCH_INSTALL)

setup: $(STAMP)

# JupyterLab refuses to start as root (containers, CI) without --allow-root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_ARGS ?=

# jupyter_config/ holds the project's JupyterLab defaults (no news prompt, no update check; see
# jupyter_config/jupyter_server_config.py); a person's own settings still win.
lab: setup
	JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter_config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) --ServerApp.root_dir=$(CURDIR) $(LAB_ARGS) notebooks/00_overview.ipynb

# One self-contained report.html: the saved matrix run (data/) and every section, about a minute;
# the command says its duration before it starts (naming --ops runs the matrix here, minutes).
report: setup
	$(PY) -m funcbwd_lab report --out report.html

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

test: setup
	bash tests/browser_setup.sh || echo "WARNING: could not install chromium; the browser tests will skip and say why"
	$(PY) -m pytest -q --durations=25 tests notebooks $(NBVAL)

test-unit: setup
	$(PY) -m pytest -q tests -m "not browser"

test-notebooks: setup
	$(PY) -m pytest -q notebooks $(NBVAL)

test-browser: setup
	bash tests/browser_setup.sh || echo "WARNING: could not install chromium; the browser tests will skip and say why"
	$(PY) -m pytest -q tests -m browser

# The whole suite on the newest versions pyproject.toml's ranges allow, in a venv of its own
# (NEWEST_VENV; the workbench's .venv and its lock untouched): torch by the light install's range
# (`tools/lock.py newest`), so the newest torch this machine's index has, which on Linux without
# the CPU index is a CUDA build of several GB. PIP_CONSTRAINT=/dev/null sets aside a machine-wide
# pip constraints file (one caps torch here). NEWEST_TESTS picks the tests (default: all of them,
# notebooks included); e.g. `make test-newest NEWEST_TESTS="$(TOOL_TESTS)"` runs the tool's only.
# FUNCBWD_NEWEST=1 skips the one test that checks the venv is the lock. DRY=echo prints the
# commands. The date and result of the last run are in docs/setup.md#the-newest-versions.
NEWEST_VENV ?= .venv-newest
NEWEST_PIP_ARGS ?=
TOOL_TESTS := $(wildcard tests/test_tool_*.py) tests/test_doctor.py tests/test_inplace_mode.py \
	tests/test_light_install.py
NEWEST_TESTS ?= tests notebooks $(NBVAL)
test-newest:
	@echo "test-newest: a venv with the newest versions the ranges allow (a few minutes, more if"
	@echo "  torch is a CUDA build to download), then the tests (about 15 min for all of them)"
	$(DRY) $(PYTHON) -m venv $(NEWEST_VENV)
	$(DRY) $(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DRY) $(PYTHON) tools/lock.py newest $(NEWEST_VENV)/newest.txt
	$(DRY) env PIP_CONSTRAINT=/dev/null $(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade \
	  $(NEWEST_PIP_ARGS) -r $(NEWEST_VENV)/newest.txt
	$(DRY) $(NEWEST_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(DRY) $(NEWEST_VENV)/bin/python -c "import torch; print('test-newest: torch', torch.__version__)"
	$(DRY) env FUNCBWD_NEWEST=1 $(NEWEST_VENV)/bin/python -m pytest -q $(NEWEST_TESTS)

notebooks: setup
	$(PY) tools/build_notebooks.py

# What CI pipelines run (`jupyter nbconvert --execute --inplace`), with jupyter_config/ on
# JUPYTER_CONFIG_PATH: jupyter_config/jupyter_nbconvert_config.py writes each notebook as
# JupyterLab's run-all + save does, so git stays clean (tests/test_nbconvert.py). NB picks the
# notebooks (default: all of them; the whole set takes about 15 min on 2 cores).
NB ?= notebooks/*.ipynb
nbconvert-execute: setup
	JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter_config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	$(VENV)/bin/jupyter nbconvert --execute --inplace $(NB)

# The installed-library study's own environment (docs/libraries.md): locks/libraries.txt into
# build/libraries with pip --target --no-deps (about 30 s), beside the venv, never into it.
libraries: setup
	$(PY) -m funcbwd_lab.studies.libraries install

clean:
	rm -rf $(VENV) $(NEWEST_VENV) test-output
