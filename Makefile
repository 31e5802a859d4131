# The README's commands. Everything installs into .venv (Python) and tests/node_modules (Node).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: demo test test-fast test-wheel matrix test-sentry chaos soak bench bench-smoke lint dist clean example-django example-flask example-pyramid screenshots

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,dev]'
	touch $@

tests/node_modules/.installed: tests/package.json tests/package-lock.json
	cd tests && npm ci --no-audit --no-fund --loglevel=error
	touch $@

## demo: set up and run the worker on its embedded Redis with the demo plugin (Ctrl-C stops it)
demo: $(VENV)/.installed
	$(VENV)/bin/echomq-gevent -c conf/worker.yaml --demo

## example-django: the Django shop and its job workers in one gunicorn (embedded Redis; Ctrl-C stops)
example-django: $(VENV)/.installed
	cd examples/django_project && ../../$(PY) manage.py migrate --verbosity 0 && \
	  ../../$(PY) -m gunicorn -c gunicorn.conf.py

## example-flask: the Flask shop (flask run) and `flask echomq worker` beside it (embedded Redis)
example-flask: $(VENV)/.installed
	cd examples/flask_app && ../../$(PY) -m flask --app flaskshop init-db && \
	  { ../../$(PY) -m flask --app flaskshop echomq worker & pid=$$!; trap 'kill $$pid' EXIT INT TERM; \
	    ../../$(PY) -m flask --app flaskshop run; }

## example-pyramid: the Pyramid shop (pserve) and its job workers beside it (embedded Redis)
example-pyramid: $(VENV)/.installed
	cd examples/pyramid_app && ../../$(PY) pyramidshop.py development.ini init-db && \
	  { ../../$(PY) -m echomq_gevent.contrib.pyramid development.ini & pid=$$!; trap 'kill $$pid' EXIT INT TERM; \
	    PYTHONPATH=. ../../$(VENV)/bin/pserve development.ini; }

## test: set up and run the whole test suite (starts its own throwaway Redis)
test: $(VENV)/.installed tests/node_modules/.installed
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

## test-fast: the suite without the Node interop tests
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider -m "not interop" $(PYTEST_ARGS)

## dist: the sdist and the wheel, in dist/
dist: $(VENV)/.installed
	rm -rf dist
	$(PY) -m build --outdir dist .

## test-wheel: build, install the wheel into fresh virtual environments outside the
## checkout and run the end-to-end tests against it (what CI does); DEPS=lowest
## APP_PYTHON=python3.9 runs them on the lowest releases setup.py allows
test-wheel: $(VENV)/.installed tests/node_modules/.installed
	PYTEST_ARGS="$(PYTEST_ARGS)" DEPS="$(DEPS)" APP_PYTHON="$(APP_PYTHON)" bash .ci/wheel

## matrix: unit and integration tests on the lowest and newest dependencies the metadata
## allows, on Python 3.9, 3.11 and 3.13 (noxfile.py; NOX_ARGS="-s tests-3.9(lowest)" picks one),
## then test-sentry
matrix: $(VENV)/.installed
	$(VENV)/bin/nox --no-color $(NOX_ARGS)
	$(MAKE) test-sentry

## test-sentry: the Sentry plugin's tests on the newest release of each sentry-sdk major it
## supports (SENTRY_RELEASES), each in a folder in front of the venv's own, whichever that is
SENTRY_RELEASES ?= 2.76.0 3.0.0
test-sentry: $(VENV)/.installed
	@for v in $(SENTRY_RELEASES); do \
	  echo "=== the Sentry tests on sentry-sdk $$v"; \
	  $(PIP) install --quiet --upgrade --no-deps --target $(VENV)/sentry-sdk-$$v "sentry-sdk==$$v" || exit 1; \
	  PYTHONPATH=$(VENV)/sentry-sdk-$$v $(PY) -m pytest -q -p no:cacheprovider \
	    tests/integration/contrib/test_sentry.py tests/unit/contrib/test_sentry_sdk_version.py $(PYTEST_ARGS) || exit 1; \
	done

## screenshots: the dashboard pictures of docs/dashboard.md, made again (a throwaway Redis, a small
## shop's queues filled by real workers, Debian's headless chromium)
screenshots: $(VENV)/.installed
	$(PY) tests/browser/screenshots.py docs/images

## lint: ruff; fails on any finding
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

## chaos: the chaos suite with its long cases (faults, garbage, restarts; see docs/reliability.md)
chaos: $(VENV)/.installed
	ECHOMQ_CHAOS_LONG=1 ECHOMQ_CHAOS_REPORT=bench/results/chaos.json \
	  $(PY) -m pytest -q -p no:cacheprovider tests/chaos $(PYTEST_ARGS)

## soak: SOAK_JOBS no-op jobs through one worker process, RSS and jobs/s sampled (bench/results/soak.*)
SOAK_JOBS ?= 1000000
soak: $(VENV)/.installed
	ECHOMQ_SOAK_JOBS=$(SOAK_JOBS) $(PY) -m pytest -q -p no:cacheprovider tests/chaos/test_soak.py $(PYTEST_ARGS)

## bench: the side-by-side benchmarks (results under bench/results/); echomq-gevent runs as a
## user installs it: from a wheel, with its core dependencies only, in bench/.venv-ours
BENCH_OURS_VENV := bench/.venv-ours
bench: $(VENV)/.installed tests/node_modules/.installed
	$(PIP) install --quiet -e '.[bench]'
	$(PIP) install --quiet 'psycopg[binary]>=3.1.14,<4'  # the outbox case's second driver
	$(PIP) install --quiet --no-deps 'bullmq==3.4.4'
	rm -rf $(BENCH_OURS_VENV) && $(PYTHON) -m venv $(BENCH_OURS_VENV)
	$(BENCH_OURS_VENV)/bin/pip install --quiet .
	ECHOMQ_BENCH_OURS_PYTHON=$(BENCH_OURS_VENV)/bin/python $(PY) -m bench.run $(BENCH_ARGS)

## bench-smoke: the benchmarks with tiny N and one round, to see that they run
bench-smoke:
	$(MAKE) bench BENCH_ARGS="--quick $(BENCH_ARGS)"

clean:
	rm -rf $(VENV) $(BENCH_OURS_VENV) tests/node_modules build dist *.egg-info var .nox
