# Two commands set up everything on a fresh machine: `make demo` and `make test`.
# torch is pinned here (the CPU build available offline); the package itself asks for torch>=2.11,
# the oldest release the test suite has passed on (2.6.0 failed it: docs/log.md, 2026-12-02 and
# 2026-12-04).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TORCH_PIN := torch==2.13.0

.PHONY: setup demo test test-all lint typecheck format fortunes pystdlib docs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PIN)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job: the bioS recall experiment (Figure 1) on its default preset. How long it takes on
# an idle 2-core CPU is measured in the README's worked example (benchmarks/demo_speed.py); beside
# other work it takes longer. Finished runs in demo-output/ are reused: a second run is quick.
demo: setup
	$(VENV)/bin/fixedfirst bios --out demo-output

# One thread per process: the tests are many small operations and several spawn 2-process runs,
# where more threads only contend for the cores (on a 2-core machine, badly). TEST_WORKERS
# processes share the modules (pytest-xdist), a whole module to one worker so that its fixtures
# are made once; tests/conftest.py starts the longest modules first. TEST_WORKERS=0: one process.
# Byte-compiled first: the Python processes the tests start then read the package's
# bytecode instead of each compiling it again (0.35 s of CPU apiece where PYTHONDONTWRITEBYTECODE
# is set, as on our CI machine).
# The tests' directories (pytest's tmp_path, PYTEST_DEBUG_TEMPROOT) go to a RAM disk where the
# machine has one with 4 GiB free: the tests save thousands of checkpoints and metrics lines,
# each fsync'd, and an fsync that waits for the disk (about 5 ms here) is wall-clock both
# workers spend idle; on a tmpfs it returns at once, and no test depends on the disk. The system
# temporary directory stays (torch keeps its compiled kernels there, between runs).
# TEST_TMPDIR=DIR picks another directory, TEST_TMPDIR= pytest's default.
TEST_WORKERS ?= 2
TEST_TMPDIR ?= $(shell df -P -k -t tmpfs /dev/shm 2>/dev/null | awk 'NR == 2 && $$4 > 4194304 { print $$6 }')
test: setup
	$(PY) -m compileall -q src tests
	$(if $(TEST_TMPDIR),PYTEST_DEBUG_TEMPROOT=$(TEST_TMPDIR) )OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20

test-all: setup
	$(PY) -m pytest -q

# Lint and types run in .ci/run before the tests, and in .pre-commit-config.yaml's hooks
# (docs/development/checks.md). The tools run as modules of the venv's Python, so a venv that
# borrows another's packages (a .pth file) works as well as one that installed them.
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# mypy's settings (which modules, how strict) are in pyproject.toml's [tool.mypy].
typecheck: setup
	$(PY) -m mypy

format: setup
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# The documentation site (mkdocs-material, sources under docs/) into site/, warnings as errors: a
# broken link or anchor, a missing page or image fails. The docs extra is installed once.
DOCS_STAMP := $(VENV)/.docs-stamp
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --clean --site-dir site

# Debian's fortune-cookie text (2.5 MB of English) as a byte-level dataset in data/fortunes-byte/.
fortunes: setup
	bash scripts/fetch_fortunes.sh

# The Python standard library's source (12 MB of code, this interpreter's) as a byte-level dataset
# in data/pystdlib-byte/: the corpus of the language-model schedule table.
pystdlib: setup
	bash scripts/fetch_pystdlib.sh
