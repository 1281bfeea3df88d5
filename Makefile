# Two commands matter: `make run` starts the bot, `make test` runs every test.
# Both create .venv and install everything on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench docs install clean

install: $(STAMP)

# Two distributions, both editable: the core (pyproject.toml) and the NoneBot plugin
# (plugins/pyproject.toml), which depends on the core and brings NoneBot.
$(STAMP): pyproject.toml plugins/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]" -e ./plugins
	touch $(STAMP)

run: $(STAMP)
	$(PY) bot.py

# Two workers a core, at most four: the tests also wait (on PostgreSQL, on the bots and CLIs
# they start), and more workers than cores fill those waits (on two cores, 2026-12-05: three
# workers 273 s, four 247 s, six 274 s; bench/RESULTS.md). Each worker starts its own embedded
# PostgreSQL and test databases. `make test TEST_WORKERS=0` runs all the tests in one process.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(4, 2 * len(getattr(os, 'sched_getaffinity', lambda _: range(os.cpu_count() or 1))(0))))")
# The tests start many Python processes (bots, CLIs, OCR workers) and each pytest worker
# reads every test module: where PYTHONDONTWRITEBYTECODE is set (as on these machines), each
# would compile the project anew. The cached bytecode goes to the checkout's __pycache__.
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# docs/settings.md is made from .env.prod's comments (a test fails when it is out of date).
docs: $(STAMP)
	$(PY) docs/settings_doc.py

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
