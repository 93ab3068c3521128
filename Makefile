# llm-replay — every target sets up .venv on first use (torch is pinned to the CPU build served here).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0

.PHONY: demo test lint bench bench-async bench-durable bench-quick experiment experiment-quick experiment-spell experiment-spell-quick format clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH) -e '.[train,dev,bench,ray,trl,fast]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/llm-replay demo --out runs/demo

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples scripts
	$(PY) -m ruff format --check src tests benchmarks examples scripts
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -q

experiment: $(STAMP)
	$(VENV)/bin/llm-replay compare configs/experiment.yaml

experiment-quick: $(STAMP)
	$(VENV)/bin/llm-replay compare configs/experiment.yaml --quick

experiment-spell: $(STAMP)
	$(VENV)/bin/llm-replay compare configs/experiment_spell.yaml

experiment-spell-quick: $(STAMP)
	$(VENV)/bin/llm-replay compare configs/experiment_spell.yaml --quick

bench: $(STAMP)
	$(PY) benchmarks/buffer.py --json docs/bench_buffer.json
	$(PY) benchmarks/async_runtime.py --json docs/bench_async.json
	$(PY) benchmarks/durable.py --json docs/bench_durable.json
	$(PY) benchmarks/disk_arena.py --memory --json docs/bench_disk_arena.json
	$(PY) benchmarks/shards.py --json docs/bench_shards.json

bench-durable: $(STAMP)
	$(PY) benchmarks/durable.py --json docs/bench_durable.json
	$(PY) benchmarks/disk_arena.py --memory --json docs/bench_disk_arena.json

bench-async: $(STAMP)
	$(PY) benchmarks/async_runtime.py --json docs/bench_async.json

bench-quick: $(STAMP)
	$(PY) benchmarks/buffer.py --quick
	$(PY) benchmarks/async_runtime.py --quick
	$(PY) benchmarks/durable.py --inserts 8 --repeats 1 --recover-gib 0.02
	$(PY) benchmarks/disk_arena.py --tokens 2e6 --calls 20
	$(PY) benchmarks/shards.py --draws 10 --repeats 1 --shards 1 2

format: $(STAMP)
	$(PY) -m ruff format src tests benchmarks examples scripts
	$(PY) -m ruff check --fix src tests benchmarks examples scripts

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache .hypothesis
