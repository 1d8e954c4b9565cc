# Two entry points, each doing all of its own setup on a fresh machine:
#   make demo   profile a built-in model and print the report
#   make test   run the whole test suite (PYTEST_ARGS="-k attention -x" passes pytest arguments)
# and make lint: ruff over the code, make typecheck: mypy over src/ (make test runs both beside the suite);
#     make test-fast: everything but the tests that start ranks or a browser;
#     make test-matrix: the fast suite on every other tested torch (CI runs it)
#     make package: the sdist and the wheel in dist/, the wheel installed into a fresh venv and run (CI runs it)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# --no-compile: pip would byte-compile every module of every package (torch's thousands): Python
# compiles the ones imported, once, as they are (16 s less of a fresh setup here)
PIP    := $(PY) -m pip install -q --no-compile -c constraints.txt

.PHONY: demo lint typecheck test suite test-fast test-matrix package gpu-check clean

# the venv with torch installed first and pinned, so `torch>=2.9` in pyproject is already
# satisfied and pip never resolves it to the registry's CUDA build
define venv_with_torch
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
endef

$(VENV)/.core: pyproject.toml constraints.txt
	$(venv_with_torch)
	$(PIP) -e .
	touch $@

# flopsight and its test extras in one install (one editable build, not two), .core's included
$(VENV)/.test: pyproject.toml constraints.txt
	$(venv_with_torch)
	$(PIP) -e '.[test]'
	touch $(VENV)/.core $@

demo: $(VENV)/.core
	$(PY) -m flopsight

# Python may cache compiled modules (src/, tests/ and pytest's rewritten asserts) even where the
# environment says not to: every interpreter the tests start imports flopsight again
test suite test-fast: export PYTHONDONTWRITEBYTECODE :=

# pyflakes, import order, bugbear and pyupgrade, lines over 120 columns (pyproject's [tool.ruff]; each rule left out says why)
lint: $(VENV)/.test
	$(PY) -m ruff check -q src tests benchmarks examples .ci

# mypy over src/, the public API's modules fully annotated (pyproject's [tool.mypy])
typecheck: $(VENV)/.test
	$(PY) -m mypy

# the suite beside mypy: on two cores the suite keeps about 1.4 busy, and mypy takes one for 30 s
test: $(VENV)/.test
	@$(MAKE) --no-print-directory -j3 lint typecheck suite

suite: $(VENV)/.test
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: $(VENV)/.test
	$(PY) -m pytest -q -m "not multiprocess and not browser" $(PYTEST_ARGS)

# The fast suite on the floor (2.9.1, Python 3.10), the GPU image's torch (2.11.0, Python 3.12) and
# the newest release (2.15.0, Python 3.13), each in .venv-matrix/: CUDA builds of 2.6 to 3.8 GB
# from PyPI (only 2.13.0 has a CPU wheel here), so for CI, not make test. MATRIX="2.11.0:3.12" picks.
test-matrix:
	bash .ci/matrix $(MATRIX)

# python -m build (isolated), then the wheel in a fresh venv beside .venv's torch: a profile on the
# native backend compiled from the installed source, and the command line (.ci/package)
package: $(VENV)/.test
	bash .ci/package $(PY)

# GPU acceptance checks (issue 17): one PASS/FAIL/SKIP line per check, OUT/summary.json;
# on a machine without CUDA every check is skipped
gpu-check: $(VENV)/.core
	$(PY) benchmarks/gpu_check.py $(or $(OUT),gpu-check-out)

clean:
	rm -rf $(VENV) .venv-matrix build dist src/*.egg-info
