# Two entry points, each doing all of its own setup on a fresh machine:
#   make demo   profile a built-in model and print the report
#   make test   run the whole test suite (PYTEST_ARGS="-k attention -x" passes pytest arguments)
# and make test-fast: everything but the tests that start ranks or a browser
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install -q -c constraints.txt

.PHONY: demo test test-fast gpu-check clean

# torch is installed first and pinned, so `torch>=2.13` in pyproject is already satisfied
# and pip never resolves it to the registry's CUDA build.
$(VENV)/.core: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e .
	touch $@

$(VENV)/.test: $(VENV)/.core
	$(PIP) -e '.[test]'
	touch $@

demo: $(VENV)/.core
	$(PY) -m flopsight

# Python may cache compiled modules (src/, tests/ and pytest's rewritten asserts) even where the
# environment says not to: every interpreter the tests start imports flopsight again
test test-fast: export PYTHONDONTWRITEBYTECODE :=

test: $(VENV)/.test
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: $(VENV)/.test
	$(PY) -m pytest -q -m "not multiprocess and not browser" $(PYTEST_ARGS)

# GPU acceptance checks (issue 17): one PASS/FAIL/SKIP line per check, OUT/summary.json;
# on a machine without CUDA every check is skipped
gpu-check: $(VENV)/.core
	$(PY) benchmarks/gpu_check.py $(or $(OUT),gpu-check-out)

clean:
	rm -rf $(VENV) build src/*.egg-info
