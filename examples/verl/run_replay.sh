#!/usr/bin/env bash
# A small verl run with an llm-replay method (needs a CUDA GPU and vLLM; see README "Use with verl").
#   .venv/bin/python examples/verl/prepare.py --out runs/verl_tiny     # main environment
#   OUT=runs/verl_tiny STEPS=20 examples/verl/run_replay.sh [more overrides]   # verl environment
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
OUT="$(realpath "${OUT:?set OUT to the folder prepare.py wrote}")"
STEPS="${STEPS:-20}"
PYTHON="${PYTHON:-python}"
overrides=()
for file in "$here/tiny_run_overrides.txt" "$here/llm_replay_overrides.txt"; do
  while IFS= read -r line; do
    [[ -z "$line" || "$line" == \#* ]] && continue
    line="${line//\$OUT/$OUT}"
    overrides+=("${line//\$STEPS/$STEPS}")
  done < "$file"
done
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
exec "$PYTHON" -m verl.trainer.main_ppo "${overrides[@]}" "$@"
