# The README's commands. Everything installs into .venv (Python) and tests/node_modules (Node).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: demo test test-fast bench bench-smoke lint clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,embedded,prometheus,gunicorn]'
	touch $@

tests/node_modules/.installed: tests/package.json tests/package-lock.json
	cd tests && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## demo: set up and run the worker on its embedded Redis with the demo plugin (Ctrl-C stops it)
demo: $(VENV)/.installed
	$(VENV)/bin/echomq-gevent -c conf/worker.yaml --demo

## test: set up and run the whole test suite (starts its own throwaway Redis)
test: $(VENV)/.installed tests/node_modules/.installed
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

## test-fast: the suite without the Node interop tests
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider -m "not interop" $(PYTEST_ARGS)

## bench: the side-by-side benchmarks (results under bench/results/)
bench: $(VENV)/.installed tests/node_modules/.installed
	$(PIP) install --quiet -e '.[bench]'
	$(PY) -m bench.run $(BENCH_ARGS)

lint:
	$(VENV)/bin/ruff check . || true

clean:
	rm -rf $(VENV) tests/node_modules build dist *.egg-info var
