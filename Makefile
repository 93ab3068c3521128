# llm-replay — every target sets up .venv on first use (torch is pinned to the CPU build served here).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
# verl pins transformers and tensordict versions the main environment cannot share: its own venv
VERL_VENV  := .venv-verl
VERL_PY    := $(VERL_VENV)/bin/python
VERL_STAMP := $(VERL_VENV)/.installed

.PHONY: checks docs verl-env verl-test gpu-check install-test main-test heavy-test side-tests demo test lint bench bench-async bench-durable bench-quick experiment experiment-quick experiment-spell experiment-spell-quick format clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH) -e '.[train,dev,bench,ray,trl,fast,docs]'
	touch $(STAMP)

$(VERL_STAMP): pyproject.toml
	test -x $(VERL_PY) || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(VERL_PY) -m pip install --quiet --disable-pip-version-check $(TORCH) -e '.[verl]'
	touch $(VERL_STAMP)

verl-env: $(VERL_STAMP)

# the verl sampler, losses and plugin against a real TransferQueue on a local Ray (CPU)
verl-test: $(VERL_STAMP)
	RAY_AUTH_MODE=disabled $(VERL_PY) -m pytest -q -p no:cacheprovider tests/integrations/verl_v1

# the GPU check (issue #54; docs/verl.md "GPU check"): the loop on CUDA, verl with replay where
# verl and vLLM import, a report in build/gpu_check.json. It runs with whatever python3 the machine
# has, not .venv: a GPU machine brings its own CUDA build of torch and may have no network, and
# .venv pins the CPU build. It needs torch, transformers, tokenizers, safetensors, numpy, pyyaml,
# pyarrow; the rest of our dependencies (reasoning-gym, Ray, verl, vLLM) are optional to it.
gpu-check:
	PYTHONPATH=src $(PYTHON) scripts/gpu_check.py $(GPU_CHECK_ARGS)

# the README's install block: build the wheel, install it into a clean venv, train from a temp dir
install-test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m slow tests/test_install.py

# the documentation site into build/site; strict: a broken link or reference fails the build
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

demo: $(STAMP)
	$(VENV)/bin/llm-replay demo --out runs/demo

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples scripts
	$(PY) -m ruff format --check src tests benchmarks examples scripts
	$(PY) -m mypy

# both environments install side by side (pip mostly waits on disk), lint and the site build
# running once the main one is in; then the main suite runs beside the install and verl suites
# (each test runs in one process, so two cores run two). The main suite's progress streams; the
# side suites' output is shown whole when they end. The side lane also runs the main suite's
# tests that are processes of their own (Ray actors, two TRL processes: about four minutes on a
# two-core machine), so the two lanes end at about the same time. The side lane
# runs niced: its Ray and TRL tests start several processes at once, and at equal priority they
# took most of both cores from the main suite (main lane 727 s beside them, 530 s alone).
HEAVY_TESTS := tests/runtime/test_ray.py tests/integrations/test_trl_multiprocess.py

test:
	$(MAKE) --no-print-directory -j2 $(VERL_STAMP) checks
	$(MAKE) --no-print-directory -j2 main-test side-tests

checks: $(STAMP)
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory docs

main-test: $(STAMP)
	$(PY) -m pytest -q $(addprefix --deselect=,$(HEAVY_TESTS))

heavy-test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(HEAVY_TESTS)

side-tests: $(STAMP) $(VERL_STAMP)
	@mkdir -p build
	@echo "install, verl and multi-process suites running beside the main suite (build/side-tests.log)"
	@{ nice -n 10 $(MAKE) --no-print-directory install-test \
		&& nice -n 10 $(MAKE) --no-print-directory verl-test \
		&& nice -n 10 $(MAKE) --no-print-directory heavy-test; } \
		> build/side-tests.log 2>&1; status=$$?; \
		printf '\n--- install, verl and multi-process suites ---\n'; cat build/side-tests.log; exit $$status

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
	rm -rf $(VENV) $(VERL_VENV) build dist .mypy_cache .ruff_cache .pytest_cache .hypothesis
