"""A TRL online DPO script whose judged pairs are replayed: `ReplayOnlineDPOTrainer` keeps every
pair TRL's reward function decided and trains `replay_pairs` stored pairs beside each step's
fresh ones (drawn as the pair table's `replay` mode says: uniform, recency, margin).

    python examples/trl_online_dpo_replay.py                   # 40 steps, ~1 minute on 2 cores
    python examples/trl_online_dpo_replay.py --steps 4         # the test suite's
    python examples/trl_online_dpo_replay.py --pairs 0         # TRL's online DPO, pairs used once
    python examples/trl_online_dpo_replay.py --knobs '{"replay": "margin", "correction": "truncated_is"}'

Everything else is TRL's own: a dataset with a "prompt" column, a reward function over decoded
completions, OnlineDPOConfig fields; the trainer logs `replay/...` and `preference/...` metrics
beside TRL's.
"""

from __future__ import annotations

import argparse
import json

from datasets import Dataset

from llm_replay.integrations.trl.online_dpo import ReplayOnlineDPOConfig, ReplayOnlineDPOTrainer
from llm_replay.models import load_policy
from llm_replay.tasks import ReasoningGymTask

parser = argparse.ArgumentParser(description="replay of judged pairs inside TRL's online DPO")
parser.add_argument("--steps", type=int, default=40, help="optimizer steps (default 40)")
parser.add_argument("--pairs", type=int, default=16, help="stored pairs a step (default 16)")
parser.add_argument("--knobs", default="{}", help="the pair table's knobs, JSON")
options = parser.parse_args()

task = ReasoningGymTask(
    "chain_sum",
    params={"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
    prompt_template="{expression}=",
    strip_spaces=True,
)
problems = list(task.train)
dataset = Dataset.from_dict(
    {"prompt": [p.prompt for p in problems], "problem": range(len(problems))}
)


def verified(completions: list[str], problem: list[int], **_: object) -> list[float]:
    return [task.score(c, problems[i]) for c, i in zip(completions, problem, strict=True)]


model, tokenizer = load_policy("builtin:tiny-chain-sum")  # or AutoModelForCausalLM.from_pretrained
args = ReplayOnlineDPOConfig(
    output_dir="runs/trl_online_dpo_replay",
    max_steps=options.steps,
    per_device_train_batch_size=32,
    max_new_tokens=8,
    temperature=1.0,
    learning_rate=5e-5,
    lr_scheduler_type="constant",
    beta=0.1,
    bf16=False,
    use_cpu=True,
    report_to=[],
    logging_steps=max(1, options.steps // 4),
    replay_pairs=options.pairs,
    replay_knobs=json.loads(options.knobs),
)
trainer = ReplayOnlineDPOTrainer(
    model=model, reward_funcs=verified, args=args, train_dataset=dataset, processing_class=tokenizer
)
trainer.train()

logged = [h for h in trainer.state.log_history if "objective/scores" in h]
counts = trainer.meter.counts
print(
    f"score {logged[0]['objective/scores']:.3f} -> {logged[-1]['objective/scores']:.3f} over "
    f"{trainer.state.global_step} steps"
)
print(
    f"{counts['rollouts_generated'] // 2} pairs generated, {counts['rollouts_trained'] // 2} "
    f"trained, {len(trainer.pairs)} stored"
)
