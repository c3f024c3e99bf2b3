# The README's two commands: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format clean bench

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned to the CPU build that lies on disk (a plain `torch` pulls a multi-GB CUDA build).
	$(BIN)/pip install -q -e '.[dev,capture]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m tracekit demo

# mypy's settings are pyproject.toml's [tool.mypy]; its cache (.mypy_cache) makes a re-run take seconds.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_parse.py

clean:
	rm -rf $(VENV) build *.egg-info
