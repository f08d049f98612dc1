# gpulab: the two commands a newcomer needs are `make demo` and `make test`.
# Both create .venv and install what they need by themselves.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo test lint format venv clean

venv: $(STAMP)

# Re-install when a requirements file changes. If this Python lacks venv/ensurepip
# (Debian splits it into python3-venv), install that package first.
$(STAMP): requirements.txt requirements-dev.txt
	@$(PYTHON) -c "import venv, ensurepip" 2>/dev/null || { \
	  echo "Installing python3-venv (needs apt-get)…"; \
	  $(if $(shell command -v sudo),sudo,) apt-get update -qq && \
	  $(if $(shell command -v sudo),sudo,) apt-get install -y -qq python3-venv; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	@touch $(STAMP)

demo: $(STAMP)
	DJANGO_SETTINGS_MODULE=config.settings.local $(PY) manage.py migrate --noinput
	DJANGO_SETTINGS_MODULE=config.settings.local $(PY) manage.py demo_seed --url http://$(HOST):$(PORT)
	DJANGO_SETTINGS_MODULE=config.settings.local $(PY) manage.py demo_serve $(HOST):$(PORT)

# The tests need PostgreSQL and Redis on loopback (scripts/test-services starts private
# ones where nothing answers). The agent tests start a real OpenSSH server on 127.0.0.1,
# and the browser tests drive Debian's Chromium (Playwright never downloads a browser);
# install them when missing.
test: $(STAMP)
	@bash scripts/test-services
	@test -x /usr/sbin/sshd || { echo "Installing openssh-server (needs apt-get)…"; \
	  $(if $(shell command -v sudo),sudo,) apt-get update -qq && \
	  $(if $(shell command -v sudo),sudo,) apt-get install -y -qq openssh-server; }
	@test -x "$${GPULAB_CHROMIUM:-/usr/bin/chromium}" || { echo "Installing chromium for the browser tests (needs apt-get)…"; \
	  $(if $(shell command -v sudo),sudo,) apt-get update -qq && \
	  $(if $(shell command -v sudo),sudo,) apt-get install -y -qq chromium; }
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf $(VENV) db.sqlite3 db.sqlite3-wal db.sqlite3-shm test.sqlite3 .pytest_cache .ruff_cache
