# Two commands on a fresh machine (see README):
#   make lab    set up .venv (once) and open the workbench in JupyterLab
#   make test   set up .venv (once) and run every test (unit + notebooks + browser)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup lab test test-unit test-notebooks test-browser notebooks report clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	$(PY) -m pip install --quiet -e ".[lab,test]"
	touch $(STAMP)

setup: $(STAMP)

# JupyterLab refuses to start as root (containers, CI) without --allow-root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_ARGS ?=

lab: setup
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) --ServerApp.root_dir=$(CURDIR) $(LAB_ARGS) notebooks/00_overview.ipynb

report: setup
	$(PY) -m funcbwd report --out report.html

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

test: setup
	bash tests/browser_setup.sh || echo "WARNING: could not install chromium; the browser tests will skip and say why"
	$(PY) -m pytest -q tests notebooks $(NBVAL)

test-unit: setup
	$(PY) -m pytest -q tests -m "not browser"

test-notebooks: setup
	$(PY) -m pytest -q notebooks $(NBVAL)

test-browser: setup
	bash tests/browser_setup.sh || echo "WARNING: could not install chromium; the browser tests will skip and say why"
	$(PY) -m pytest -q tests -m browser

notebooks: setup
	$(PY) tools/build_notebooks.py

clean:
	rm -rf $(VENV) test-output
