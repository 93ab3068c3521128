"""Write what examples/verl/run_replay.sh trains on: chain_sum prompts as verl parquet, and the
built-in model with a chat template verl's agent loop can apply (it has none: it reads raw text).

Runs in llm-replay's main environment (`make demo` builds it):
    .venv/bin/python examples/verl/prepare.py --out runs/verl_tiny [--config positive]
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from llm_replay.config import load_config
from llm_replay.models.loading import resolve_model_path
from llm_replay.runtime.task_builder import build_task
from llm_replay.tasks import Problem

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


def prepare(out: Path, config: str = "positive", sets: Sequence[str] = ()) -> int:
    """Write `out`/train.parquet, val.parquet and model/ for `config` (with `--set` overrides
    `sets`, e.g. a smaller `task.train_size`); returns the number of train prompts."""
    settings = load_config(config, list(sets))
    task = build_task(settings)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows(list(task.train), "train"), out / "train.parquet")
    pq.write_table(rows(list(task.eval), "test"), out / "val.parquet")
    model = out / "model"
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(resolve_model_path(settings.model.path), model)
    tokenizer_config = model / "tokenizer_config.json"
    tokenizer = json.loads(tokenizer_config.read_text())
    tokenizer["chat_template"] = RAW_TEXT_TEMPLATE
    tokenizer_config.write_text(json.dumps(tokenizer, indent=2))
    return len(task.train)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", default="positive", help="a preset name or a YAML file")
    args = parser.parse_args()
    count = prepare(args.out, args.config)
    print(f"wrote {args.out}/train.parquet, val.parquet and model/ ({count} prompts)")


if __name__ == "__main__":
    main()
