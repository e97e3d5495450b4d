# Two commands do all the set-up on a fresh machine:
#   make demo   install everything, then run a scripted MCP session against the server
#   make test   install everything, then run the test suite
PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test test-fast lint demo serve doctor clean

$(STAMP): pyproject.toml tools/setup.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash tools/setup.sh
	touch $(STAMP)

install: $(STAMP)

# Two pytest workers where there are two CPUs or more, each keeping to CPUs of its own (tests/conftest.py); the
# tests that need two CPUs in one process run after them.
TEST_WORKERS ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 0)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VPY) -m compileall -q evokernel_mcp >/dev/null  # after edits (setup compiled the install)
	$(VPY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --durations=15 -m "not two_cpus"
	$(VPY) -m pytest -q -p no:cacheprovider -m two_cpus

lint: $(STAMP)
	$(VENV)/bin/ruff check .

demo: $(STAMP)
	$(VPY) tools/demo.py

serve: $(STAMP)
	$(VENV)/bin/evokernel-mcp serve

doctor: $(STAMP)
	$(VENV)/bin/evokernel-mcp doctor

clean:
	rm -rf $(VENV) .evokernel .pytest_cache
