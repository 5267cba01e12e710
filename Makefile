# Two entry points (see README): `make reproduce` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= jaxicl-report
# processes run at once by `make reproduce`, longest first (`jaxicl reproduce --jobs`): one per core. A process more
# than cores time-shares them, and the same models then took more CPU time (benchmarks/README.md)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: reproduce test test-slow bench docs notebooks clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# --no-compile: pip's byte-compilation of every installed module took half the install (27 -> 13 s on a 2-core VM);
# Python compiles the modules a run imports when it first imports them. `make reproduce` installs the package alone
# (7 s), the tests add their extras (pytest, notebook kernels: 11 s for both at once)
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet --no-compile -e ".[test]"
	touch $@

reproduce: $(VENV)/.installed  ## install, then run every reproduction at quick size -> $(OUT)/report.md
	$(BIN)/jaxicl reproduce --quick --jobs $(JOBS) --out $(OUT)

# --durations: the slowest tests of each run, where the suite's time goes (CI's log shows them)
test: $(VENV)/.installed-test  ## install, then run the default test suite (slow reproductions deselected)
	$(BIN)/python -m pytest -n 2 --dist worksteal -q --durations=25

docs: $(VENV)/.installed-test  ## the documentation site (mkdocs, API reference from the docstrings) -> site/
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

notebooks: $(VENV)/.installed-test  ## execute the notebooks in place, keeping their outputs (the site shows them)
	$(BIN)/python notebooks/execute.py

test-slow: $(VENV)/.installed-test  ## the slow tests: the long quick reproductions (see README, Tests)
	$(BIN)/python -m pytest -m slow -q

bench: $(VENV)/.installed  ## timing benchmarks: each records its results in benchmarks/results/, then benchmarks/README.md's tables are rendered
	$(BIN)/python benchmarks/bench_flow.py
	$(BIN)/python benchmarks/bench_sweep.py
	$(BIN)/python benchmarks/bench_ahn.py
	$(BIN)/python benchmarks/bench_gatmiry.py
	$(BIN)/python benchmarks/bench_yang.py
	$(BIN)/python benchmarks/bench_transformer.py
	$(BIN)/python benchmarks/bench_sensitivity.py
	$(BIN)/python benchmarks/bench_ols.py
	$(BIN)/python benchmarks/render.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache site
