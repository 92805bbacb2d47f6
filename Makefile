# The two commands: `make demo` runs the platform, `make test` passes the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install demo test test-fast fuzz bench-smoke deploy-smoke drill upgrade-check test-failover lint format images images-cuda docker-engine lock migrate clean-var client-dist messages

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit("Python 3.11 or newer is needed, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)

# Installs are reproducible: exact versions come from requirements.lock.
$(VENV)/.installed: $(BIN)/python requirements.lock pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

install: $(VENV)/.installed

demo: install
	@mkdir -p var && printf '# Written by make demo: manage.py reads it (README, useful commands).\nDEBUG=1\n' > var/local.env
	@DEBUG=$${DEBUG:-1} GATEWAY_PORT=$${GATEWAY_PORT:-$$(( $${PORT:-8000} + 1 ))} \
	  $(BIN)/python -m gpurental.embedded run --registry -- sh -c '\
	  python manage.py migrate --noinput && \
	  python manage.py seed_demo --agent-env var/local-agent.env && \
	  echo "" && \
	  echo "  gpurental is starting on http://127.0.0.1:$${PORT:-8000}/" && \
	  echo "  back-office  http://127.0.0.1:$${PORT:-8000}/admin/   admin@example.com / admin" && \
	  echo "  customer     demo@example.com / demo" && \
	  echo "  instances    http://<instance id>.gw.localhost:$$GATEWAY_PORT/ (the gateway; Open JupyterLab logs you in)" && \
	  echo "  Ctrl-C stops everything; data stays in var/." && \
	  echo "" && \
	  exec honcho start -f Procfile -p $${PORT:-8000}'

# The whole suite on two workers (pytest-xdist): the tests with the platform's processes
# or Chromium run one after another on one worker, the other Docker tests one after
# another on the other, and the rest fill in (tests/conftest.py). A test marked exclusive
# (it restarts the Docker Engine or Redis) runs while the other worker waits.
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
# The failover tests (a host pulled on the netns fleet; minutes each) are left out: CI runs
# them in their own step, `make test-failover`.
TEST_MARKS ?= not failover
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=30 -m "$(TEST_MARKS)" $(PYTEST_ARGS)

test-failover: install
	CI=$${CI:-true} $(BIN)/python -m pytest -m failover -v $(PYTEST_ARGS)

# The fast tier: unit and database tests, spread over the cores. Leaves out the tests
# marked docker, browser or slow (processes, live servers); `make test` runs everything.
test-fast: install
	$(BIN)/python -m pytest -n auto -q -m "not docker and not browser and not slow" $(PYTEST_ARGS)

# The API fuzz with schemathesis's coverage phase too (every boundary and wrong type of every
# field) and 25 generated requests per operation rather than 15: ~150 s more than the fuzz
# in `make test`, so CI runs it once here (.ci/run).
fuzz: install
	FUZZ_COVERAGE=1 FUZZ_EXAMPLES=25 $(BIN)/python -m pytest -n $(TEST_WORKERS) -q tests/api/test_schema_fuzz.py $(PYTEST_ARGS)

# Every bench at a small size: it must still run and print sane figures (never a timing goal).
# One set of embedded servers, migrated once, for all of them (bench/smoke.py).
bench-smoke: install
	$(BIN)/python bench/smoke.py

# The production layout (deploy/compose.yml) up on this machine: a customer launches over
# https:// and opens JupyterLab through the gateway's TLS origin; TLS 1.3 only; then down,
# leaving nothing behind (deploy/smoke.py). Needs docker-compose; CI runs it (.ci/run).
deploy-smoke: install
	$(BIN)/python deploy/smoke.py

# The same stack under a steady load of API and JupyterLab requests: kill one web process,
# then one gateway, then the PostgreSQL primary (promoting its replica); prints the failed
# requests and the times to recover, and checks the charges (deploy/drill.py).
drill: install
	$(BIN)/python deploy/drill.py

# A database made by the previous release (deploy/RELEASES) migrates to this code, its rows
# intact (scripts/upgrade_check.py; embedded PostgreSQL; about a minute). CI runs it.
upgrade-check: install
	$(BIN)/python scripts/upgrade_check.py

# The SDK and CLI alone as a wheel in dist/ (gpurental-client: requests only); see sdk/README.md.
client-dist: $(BIN)/python
	$(BIN)/python sdk/build.py

# The layering contracts ([tool.importlinter] in pyproject.toml) and one writer per status:
# docs/ARCHITECTURE.md says what each checks.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check gpurental tests bench
	$(BIN)/python scripts/check_i18n.py
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/check_status_writers.py

# The templates' catalogue, locale/zh_Hans (the apps' Python strings have their own, in
# gpurental/<app>/locale/). Translate what it adds, then run it again to compile; commit the
# .po and the .mo. Needs gettext; `make lint` fails on an untranslated entry or a stale .mo.
messages: install
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py makemessages -l zh_Hans --no-obsolete \
	  --ignore 'gpurental/*' --ignore 'tests/*' --ignore 'bench/*' --ignore 'sdk/*' \
	  --ignore 'scripts/*' --ignore 'var/*' --ignore 'images/*' --ignore 'deploy/*' \
	  --ignore 'static/*' --ignore 'staticfiles/*'
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py makemessages -l zh_Hans --no-obsolete -d djangojs \
	  --ignore 'gpurental/*' --ignore 'static/vendor/*' --ignore 'staticfiles/*' --ignore 'var/*' \
	  --ignore 'sdk/*' --ignore 'images/*' --ignore 'deploy/*' --ignore 'bench/*' --ignore 'tests/*'
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py compilemessages -l zh_Hans --ignore '.venv'

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format gpurental tests bench

migrate: install
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py migrate --noinput

# Regenerate the lock file from pyproject.toml's ranges (needs the package index).
lock:
	rm -rf /tmp/gpurental-lock && $(PYTHON) -m venv /tmp/gpurental-lock
	/tmp/gpurental-lock/bin/pip install --quiet ".[dev]"
	{ echo '# Exact versions for reproducible installs; regenerate with `make lock`.'; \
	  /tmp/gpurental-lock/bin/pip freeze --exclude gpurental | sort -f; } > requirements.lock

# Instance images, built from local parts (no registry): see images/README.md. Needs root once
# (debootstrap); cached afterwards.
images:
	images/build.sh

# The CUDA images (CUDA 11.8 and 12.4 runtimes, PyTorch 2.1.2 and 2.13.0, TensorFlow 2.18),
# built from NVIDIA's and the frameworks' wheels: ~10 GB of downloads, so not in `make images`.
# `manage.py catalog_starter --cuda` puts them in the catalog.
images-cuda:
	images/build.sh cuda

# A Docker Engine on this machine (Debian's docker.io), for development and CI.
docker-engine:
	scripts/docker-engine.sh

clean-var:
	$(BIN)/python -m gpurental.embedded down || true
	rm -rf var
