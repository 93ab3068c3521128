"""A TRL GRPO script on replay: the recommended `auto` recipe inside trl.GRPOTrainer (positive-
biased replay with AsymRE annealed to on-policy between 10% and 60% of max_steps, KL-Cov on the
reused rows' top 5% tokens by covariance, AR3PO's adaptive rollouts).

    python examples/trl_replay.py                  # 60 optimizer steps, ~1 minute on 2 CPU cores
    python examples/trl_replay.py --steps 4        # a shorter run (the test suite's)
    python examples/trl_replay.py --method positive_schedule   # the schedule alone (verl's)
    python examples/trl_replay.py --method uniform --knobs '{"replay_ratio": 4}'
    python examples/trl_replay.py --method on_policy --adaptive   # AR3PO's adaptive rollouts

Everything TRL-specific is TRL's own: the dataset with a "prompt" column, a reward function over
decoded completions, GRPOConfig fields. llm-replay adds the two `replay_*` fields (and, for AsymRE,
`replay_loss`), and the trainer logs `replay/...` metrics beside TRL's.
"""

from __future__ import annotations

import argparse
import json

from datasets import Dataset

from llm_replay.integrations.trl import ReplayGRPOConfig, ReplayGRPOTrainer
from llm_replay.models import load_policy
from llm_replay.tasks import ReasoningGymTask

parser = argparse.ArgumentParser(description="replay inside TRL's GRPOTrainer")
parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default 60)")
parser.add_argument("--method", default="auto", help="a recipe or method (`llm-replay methods`)")
parser.add_argument("--knobs", default="{}", help="the method's knobs, JSON")
parser.add_argument(
    "--adaptive",
    action="store_true",
    help="AR3PO: 2 completions a stage, more only if unsolved (`auto` turns it on itself)",
)
parser.add_argument(
    "--kl-cov",
    action="store_true",
    help="KL-Cov on the reused rows' top 5%% tokens by covariance (`auto` turns it on itself)",
)
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
asymre = options.method in ("auto", "positive_schedule", "positive")
args = ReplayGRPOConfig(
    output_dir="runs/trl_replay",
    max_steps=options.steps,
    per_device_train_batch_size=256,
    num_generations=8,
    max_completion_length=8,
    temperature=0.7,
    learning_rate=5e-5,
    lr_scheduler_type="constant",
    loss_type="dapo",
    scale_rewards="none" if asymre else "group",
    bf16=False,
    use_cpu=True,
    report_to=[],
    logging_steps=max(1, options.steps // 4),
    replay_method=options.method,
    replay_knobs=json.loads(options.knobs),
    replay_loss="asymre" if asymre else "trl",
    replay_adaptive={"enabled": True, "stage_size": 2, "reuse": True} if options.adaptive else None,
    replay_token_control={"mode": "kl_cov", "rows": "replayed", "fraction": 0.05, "coef": 1.0}
    if options.kl_cov
    else None,
)
trainer = ReplayGRPOTrainer(
    model=model, reward_funcs=verified, args=args, train_dataset=dataset, processing_class=tokenizer
)
trainer.train()

rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
counts = trainer.meter.counts
print(f"reward {rewards[0]:.3f} -> {rewards[-1]:.3f} over {trainer.state.global_step} steps")
print(
    f"{trainer.rounds} generation rounds, {counts['rollouts_generated']} rollouts generated, "
    f"{counts['rollouts_trained']} trained, buffer {trainer.pipeline.method.table.size}"
)
if trainer.adaptive is not None:
    per_prompt = counts["rollouts_generated"] / max(1, counts["prompts_generated"])
    print(f"{per_prompt:.1f} completions generated per prompt of 8 (adaptive rollouts)")
treated = [h["loss/cov_treated"] for h in trainer.state.log_history if "loss/cov_treated" in h]
if treated:
    print(f"KL-Cov held {100 * max(treated):.1f}% of a step's trained tokens at most")
