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

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VPY) -m pytest -q -p no:cacheprovider --durations=15

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
