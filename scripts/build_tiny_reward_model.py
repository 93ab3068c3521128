"""Build a shipped tiny reward model: a classifier of the tiny policy's own samples, right or wrong.

    python scripts/build_tiny_reward_model.py --task chain_sum \
        --out src/llm_replay/assets/tiny-chain-sum-reward

A reward model in RLHF is trained on judgements of the policy's own outputs; here the judge is the
task's verifier. The script samples `--samples` completions per train prompt from the shipped
tiny policy (`--temperature`, the presets' 0.7), labels each with the verifier, and trains a
one-output `Qwen2ForSequenceClassification` initialised from the policy's backbone (as reward
models are initialised from the model they judge) for `--steps` minibatches of binary
cross-entropy. Held-out accuracy is measured on completions of the task's eval prompts. It is
deliberately small and briefly trained, so it is imperfect: a policy optimised against it can
find what it gets wrong, and the gap between its reward and the verifier's accuracy over a run
measures that (docs/RESULTS.md, "Learned reward models and stale rewards"). Reproducible for a
seed on CPU; writes the model, tokenizer and `build.json` (settings, label rates, accuracies).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from llm_replay.generation import HFGenerator, SamplingParams
from llm_replay.models import encode_prompts, load_policy, tiny_reward_model
from llm_replay.tasks.builtin import BUILTIN_TASKS, builtin_task
from llm_replay.tasks.reward_model import RewardModel


def sample_labelled(
    policy,
    tokenizer,
    task,
    problems,
    samples: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
):
    """(prompts, completions, labels) of `samples` completions per problem, verifier-labelled."""
    generator = HFGenerator(
        policy, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, seed=seed
    )
    encoded = encode_prompts(tokenizer, [p.prompt for p in problems], "off")
    prompts, completions, labels = [], [], []
    for start in range(0, len(problems), 256):
        out = generator.generate(
            encoded[start : start + 256], samples, SamplingParams(max_new_tokens, temperature)
        )
        texts = tokenizer.batch_decode(out.completions(), skip_special_tokens=True)
        for text, index in zip(texts, out.prompt_index, strict=True):
            problem = problems[start + int(index)]
            prompts.append(problem.prompt)
            completions.append(text)
            labels.append(int(task.score(text, problem) >= task.correct_threshold))
    return prompts, completions, np.asarray(labels)


def auc(scores: np.ndarray, truth: np.ndarray) -> float:
    """The chance a right completion scores above a wrong one (ties count half)."""
    right, wrong = scores[truth], scores[~truth]
    if not len(right) or not len(wrong):
        return float("nan")
    above = (right[:, None] > wrong[None, :]).mean()
    ties = (right[:, None] == wrong[None, :]).mean()
    return float(above + ties / 2)


def calibration(scores: np.ndarray, truth: np.ndarray, bins: int = 10) -> dict[str, object]:
    """How far the model's probabilities are from the rates they claim: expected calibration
    error over `bins` equal-width bins, the Brier score, and each bin's mean score against its
    share of right completions (the reliability curve)."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(scores, edges[1:-1]), 0, bins - 1)
    curve, error = [], 0.0
    for b in range(bins):
        inside = which == b
        if not inside.any():
            continue
        claimed, actual = float(scores[inside].mean()), float(truth[inside].mean())
        error += inside.mean() * abs(claimed - actual)
        curve.append(
            {
                "bin": [float(edges[b]), float(edges[b + 1])],
                "count": int(inside.sum()),
                "mean_score": claimed,
                "right_rate": actual,
            }
        )
    return {
        "ece": float(error),
        "brier": float(np.mean((scores - truth) ** 2)),
        "reliability": curve,
    }


def evaluate(directory: Path, args: argparse.Namespace) -> None:
    """Re-measure a built model on the held-out completions its build sampled (same task,
    policy, sampling and seed) and add its calibration to its build.json."""
    info = json.loads((directory / "build.json").read_text())
    policy, tokenizer = load_policy(info["policy"])
    task = builtin_task(info["task"], train_size=info["prompts"], eval_size=500)
    sampling = (info["samples_per_prompt"], args.max_new_tokens, info["temperature"])
    test = sample_labelled(policy, tokenizer, task, task.eval, *sampling, info["seed"] + 1)
    reward = RewardModel(str(directory), batch_size=256)
    scores, truth = reward.score(test[0], test[1]), test[2].astype(bool)
    if abs(auc(scores, truth) - info["heldout_auc"]) > 1e-6:
        raise SystemExit(f"{directory}: held-out AUC {auc(scores, truth)} differs from the build's")
    info["heldout_calibration"] = calibration(scores, truth.astype(float))
    (directory / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info["heldout_calibration"], indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="chain_sum", choices=sorted(BUILTIN_TASKS))
    parser.add_argument("--policy", default=None, help="default: builtin:tiny-<task>")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=3000)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.7, help="the presets' sampling")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="measure the model already in --out on its build's held-out set; add its calibration",
    )
    args = parser.parse_args()
    if args.evaluate:
        evaluate(args.out, args)
        return

    torch.manual_seed(args.seed)
    policy_path = args.policy or f"builtin:tiny-{args.task.replace('_', '-')}"
    policy, tokenizer = load_policy(policy_path)
    task = builtin_task(args.task, train_size=args.prompts, eval_size=500)
    start = time.perf_counter()
    sampling = (args.samples, args.max_new_tokens, args.temperature)
    train = sample_labelled(policy, tokenizer, task, task.train, *sampling, args.seed)
    test = sample_labelled(policy, tokenizer, task, task.eval, *sampling, args.seed + 1)
    model, rm_tokenizer = tiny_reward_model(policy, seed=args.seed)
    with tempfile.TemporaryDirectory() as scratch:
        model.save_pretrained(scratch)
        rm_tokenizer.save_pretrained(scratch)
        reward = RewardModel(scratch, batch_size=256)
    fit = reward.retrain(
        train[0],
        train[1],
        train[2].tolist(),
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
    )
    seconds = time.perf_counter() - start
    scores = reward.score(test[0], test[1])
    judged = scores >= 0.5
    truth = test[2].astype(bool)
    args.out.mkdir(parents=True, exist_ok=True)
    reward.save(args.out)
    info = {
        "task": args.task,
        "policy": policy_path,
        "prompts": args.prompts,
        "samples_per_prompt": args.samples,
        "temperature": args.temperature,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "seed": args.seed,
        "parameters": reward.parameters,
        "train_rollouts": len(train[2]),
        "train_correct_rate": float(train[2].mean()),
        "train_accuracy": fit["accuracy_after"],
        "heldout_rollouts": len(truth),
        "heldout_correct_rate": float(truth.mean()),
        "heldout_accuracy": float((judged == truth).mean()),
        "heldout_true_positive_rate": float(judged[truth].mean()),
        "heldout_false_positive_rate": float(judged[~truth].mean()),
        "heldout_auc": auc(scores, truth),
        "heldout_calibration": calibration(scores, truth.astype(float)),
        "seconds": round(seconds, 1),
        "torch": torch.__version__,
    }
    (args.out / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
