#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py) with the machine's own python3, where make is missing.
cd "$(dirname "$0")/.." && PYTHONPATH=src exec python3 scripts/gpu_check.py "$@"
