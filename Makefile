# Two entry points for a newcomer: `make demo` and `make test`. Both set up what they need once;
# re-running them on a set-up machine skips every install step (stamps below).

PYTHON ?= python3
VENV ?= .venv
CLIENT_VENV ?= .venv-client
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PIP_FLAGS := --disable-pip-version-check -q

.PHONY: demo test setup sysdeps clean help

help:
	@echo "make demo   - set up .venv and run the end-to-end demo (server + load generator)"
	@echo "make test   - set up .venv (and Debian test tools) and run every test"

# The project venv, re-installed only when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	$(PY) -m pip install $(PIP_FLAGS) -e '.[dev,cluster]'
	@touch $@

setup: $(VENV)/.installed

# A separate environment for the real Triton client (HTTP and gRPC): the server is tested by a
# client we did not write. Re-installed when this file changes.
$(CLIENT_VENV)/.installed: Makefile
	@[ -x $(CLIENT_VENV)/bin/python ] || $(PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/python -m pip install $(PIP_FLAGS) 'tritonclient[http,grpc]' numpy pillow
	@touch $@

# Debian tools for the RTL testbenches and synthesis (Icarus Verilog, Yosys); installed only where missing.
SYSDEPS := iverilog yosys
sysdeps:
	@missing="$(foreach t,$(SYSDEPS),$$(command -v $(t) >/dev/null || echo $(t)))"; \
	[ -z "$$(echo $$missing)" ] || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $$missing; }

demo: $(VENV)/.installed
	$(VENV)/bin/atoll demo

test: $(VENV)/.installed $(CLIENT_VENV)/.installed sysdeps
	$(VENV)/bin/lint-imports
	ATOLL_CLIENT_PYTHON=$(abspath $(CLIENT_VENV))/bin/python $(PY) -m pytest -q -n auto --dist loadfile

clean:
	rm -rf build .pytest_cache
