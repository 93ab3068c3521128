"""Write what examples/verl/run_replay.sh trains on: chain_sum prompts as verl parquet, and the
built-in model with a chat template verl's agent loop can apply (it has none: it reads raw text).

Runs in llm-replay's main environment (`make demo` builds it):
    .venv/bin/python examples/verl/prepare.py --out runs/verl_tiny [--config positive]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from llm_replay.config import load_config
from llm_replay.models.loading import resolve_model_path
from llm_replay.tasks import Problem, build_task

RAW_TEXT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
DATA_SOURCE = "llm_replay/chain_sum"


def rows(problems: list[Problem], split: str) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": p.prompt}],
                "ability": "arithmetic",
                "reward_model": {"style": "rule", "ground_truth": p.answer},
                "extra_info": {"split": split, "index": i},
            }
            for i, p in enumerate(problems)
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", default="positive", help="a preset name or a YAML file")
    args = parser.parse_args()
    config = load_config(args.config, [])
    task = build_task(config)
    args.out.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows(list(task.train), "train"), args.out / "train.parquet")
    pq.write_table(rows(list(task.eval), "test"), args.out / "val.parquet")
    model = args.out / "model"
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(resolve_model_path(config.model.path), model)
    tokenizer_config = model / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text())
    settings["chat_template"] = RAW_TEXT_TEMPLATE
    tokenizer_config.write_text(json.dumps(settings, indent=2))
    print(f"wrote {args.out}/train.parquet, val.parquet and model/ ({len(task.train)} prompts)")


if __name__ == "__main__":
    main()
