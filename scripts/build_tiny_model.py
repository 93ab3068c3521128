"""Build a shipped tiny model: a ~1M-parameter Qwen2, SFT'd on a built-in task's train split.

    python scripts/build_tiny_model.py --task chain_sum --out src/llm_replay/assets/tiny-chain-sum
    python scripts/build_tiny_model.py --task spell_backward --steps 400 \
        --out src/llm_replay/assets/tiny-spell-backward
    python scripts/build_tiny_model.py --task '{"dataset": "leg_counting", ...}' --out DIR
    python scripts/build_tiny_model.py --task count_bits --stop-at 0.2 \
        --out src/llm_replay/assets/tiny-count-bits
    python scripts/build_tiny_model.py --mixture gcd,products,binary_alternation,lcm \
        --stop-at 0.2 --min-informative 0.25 --out src/llm_replay/assets/tiny-mixture

`--task` is a built-in task's name (`llm_replay.tasks.builtin`) or a JSON object of
`ReasoningGymTask` arguments (dataset, params, prompt_template, strip_spaces, seed, eval_seed).

Reproducible for a seed on CPU. Supervised training on `prompt + answer + <eos>` (loss on the
answer and EOS only) for a fixed number of steps leaves the model with a moderate pass rate, so
RL has room to improve it. The eval split is never trained on. Writes the model and tokenizer with
`save_pretrained` plus `build.json` (settings, base accuracy, seconds).

`--stop-at ACC` stops instead at the first check (every `--check-every` steps, at most `--steps`)
where greedy accuracy on `CHECK_SIZE` problems, and the accuracy of samples at the runs'
temperature, reach ACC and, with `--min-informative SHARE`,
at least SHARE of `INFORMATIVE_SIZE` of them sampled `GROUP` times at the runs' temperature come
back neither all right nor all wrong, so every task of the suite starts from about the same
accuracy however hard it is to learn, and with groups RL can learn from: stopping on accuracy
alone stops as soon as the model answers every prompt greedily with the most frequent answer,
which scores 20-50% on a counting task while its samples are close to uniform (entropy 3.7 nats
a token on count_bits): RL from there raises the train reward by collapsing entropy and leaves
held-out accuracy where it was. The check problems come from the eval
side of the split (the eval split's distribution: train-side problems repeat, and a model that
has memorised the frequent ones reads high there and low on held-out problems) but from another
seed's stream (`eval_seed + CHECK_SEED_OFFSET`), so the eval split itself is not looked at until
the end.

`--mixture A,B,...` SFTs one model on a mixture of built-in tasks (the mixture task of
`task.kind: mixture`) and applies the stopping rule per member: at every check, a member whose
check passes is kept in the SFT batches at `PASSED_WEIGHT` of a failing member's share, so the
members learnt in a tenth of the steps of others stop gaining without being forgotten (dropping
them outright left two of four members at 6% on the eval split by the end); the build stops at
the first check where every member passes, or at `--steps`. `build.json` records each member's
last check and its greedy accuracy on the eval split.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from llm_replay.generation import HFGenerator, SamplingParams
from llm_replay.models import build_char_tokenizer, encode_prompts, tiny_qwen2_config
from llm_replay.tasks import ReasoningGymTask
from llm_replay.tasks.builtin import ANSWER_TOKENS, BUILTIN_TASKS, PENDING_TASKS

CHECK_SIZE = 200
INFORMATIVE_SIZE = 64
GROUP = 8
TEMPERATURE = 0.7  # the presets' generation.temperature
CHECK_SEED_OFFSET = 1000
PASSED_WEIGHT = 0.2  # --mixture: a passing member's share of the SFT batches, relative


def task_spec(text: str) -> dict:
    known = {**BUILTIN_TASKS, **PENDING_TASKS}
    if text in known:
        return dict(known[text])
    try:
        spec = json.loads(text)
    except json.JSONDecodeError:
        raise SystemExit(
            f"--task {text!r}: neither a built-in task ({', '.join(BUILTIN_TASKS)}) nor JSON"
        ) from None
    if not isinstance(spec, dict) or "dataset" not in spec:
        raise SystemExit(f"--task {text!r}: a JSON object with at least 'dataset'")
    return spec


def greedy_accuracy(model, tokenizer, task, problems, max_new_tokens: int) -> float:
    generator = HFGenerator(model, eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
    prompts = encode_prompts(tokenizer, [p.prompt for p in problems], "off")
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
    out = generator.generate(prompts, 1, sampling)
    texts = tokenizer.batch_decode(out.completions(), skip_special_tokens=True)
    return float(np.mean([task.score(t, p) >= 1.0 for t, p in zip(texts, problems, strict=True)]))


def sampled_groups(model, tokenizer, task, problems, max_new_tokens: int) -> tuple[float, float]:
    """(the share of problems whose `GROUP` samples at the runs' temperature are neither all
    right nor all wrong, the samples' accuracy): the groups GRPO learns from, and whether the
    sampling distribution is as good as the greedy answer (an early model answers greedily with
    the most frequent answer while its samples are close to uniform)."""
    generator = HFGenerator(model, eos_token_id=tokenizer.eos_token_id, pad_token_id=0, seed=0)
    prompts = encode_prompts(tokenizer, [p.prompt for p in problems], "off")
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=TEMPERATURE)
    out = generator.generate(prompts, GROUP, sampling)
    texts = tokenizer.batch_decode(out.completions(), skip_special_tokens=True)
    correct = np.array(
        [task.score(t, problems[i // GROUP]) >= 1.0 for i, t in enumerate(texts)]
    ).reshape(len(problems), GROUP)
    mixed = correct.any(axis=1) & ~correct.all(axis=1)
    return float(mixed.mean()), float(correct.mean())


def sft_step(model, optimizer, rows) -> float:
    """One supervised step on `(prompt ids, answer ids + EOS)` rows, loss on the answer only."""
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, a) in enumerate(rows):
        ids[i, : len(p) + len(a)] = torch.tensor(p + a)
        labels[i, len(p) : len(p) + len(a)] = torch.tensor(a)
        mask[i, : len(p) + len(a)] = 1
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.item())


def check_passes(model, tokenizer, task, check, args, label: str = "") -> tuple[bool, dict]:
    """The stopping rule on `check` problems: greedy and sampled accuracy at `--stop-at`, and
    `--min-informative` of the sampled groups mixed."""
    reached = greedy_accuracy(model, tokenizer, task, check, args.max_new_tokens)
    mixed, sampled = sampled_groups(
        model, tokenizer, task, check[:INFORMATIVE_SIZE], args.max_new_tokens
    )
    model.train()
    print(f"{label}check accuracy {reached:.3f}, sampled {sampled:.3f}, informative {mixed:.3f}")
    passed = min(reached, sampled) >= args.stop_at and mixed >= args.min_informative
    return passed, {"check_accuracy": reached, "sampled": sampled, "informative": mixed}


def mixture_task(names: str, train_size: int, eval_size: int, eval_seed: int = 2):
    from llm_replay.config.mixture import parse_members
    from llm_replay.tasks.mixture import MixtureTask

    members = parse_members({name: {"weight": 1} for name in names.split(",")}, "--mixture")
    return MixtureTask(members, train_size=train_size, eval_size=eval_size, eval_seed=eval_seed)


def by_member(problems) -> dict[str, list]:
    from llm_replay.tasks.base import TASK_TAG

    out: dict[str, list] = {}
    for problem in problems:
        out.setdefault(problem.metadata[TASK_TAG], []).append(problem)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="chain_sum", help="built-in task name or JSON spec")
    parser.add_argument("--mixture", default=None, help="built-in task names, comma-separated")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the task's")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop-at", type=float, default=None, help="greedy accuracy to stop at")
    parser.add_argument("--check-every", type=int, default=10)
    parser.add_argument(
        "--min-informative",
        type=float,
        default=0.0,
        help="with --stop-at: also wait until this share of sampled groups is mixed",
    )
    args = parser.parse_args()
    if args.mixture is not None and args.stop_at is None:
        raise SystemExit("--mixture: give --stop-at (the stopping rule is applied per member)")

    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    tokenizer = build_char_tokenizer()
    model = AutoModelForCausalLM.from_config(tiny_qwen2_config())
    members: dict[str, dict] = {}
    if args.mixture is not None:
        names = args.mixture.split(",")
        if args.max_new_tokens is None:
            args.max_new_tokens = max(ANSWER_TOKENS.get(name, 12) for name in names)
        task = mixture_task(args.mixture, 20_000, 500)
        check_task = mixture_task(args.mixture, 1, CHECK_SIZE * len(names), 2 + CHECK_SEED_OFFSET)
        checks = by_member(check_task.eval)
        spec: dict = {"mixture": names}
    else:
        if args.max_new_tokens is None:
            args.max_new_tokens = ANSWER_TOKENS.get(args.task, 12)
        spec = task_spec(args.task)
        arguments = {k: v for k, v in spec.items() if k != "dataset"}
        task = ReasoningGymTask(spec["dataset"], train_size=20_000, eval_size=500, **arguments)
        check_arguments = {
            **arguments,
            "eval_seed": arguments.get("eval_seed", 2) + CHECK_SEED_OFFSET,
        }
        checks = {
            "": ReasoningGymTask(
                spec["dataset"], train_size=1, eval_size=CHECK_SIZE, **check_arguments
            ).eval
        }
    rng = np.random.default_rng(args.seed)
    eos = tokenizer.eos_token_id
    encoded = by_member(task.train) if args.mixture is not None else {"": list(task.train)}
    encoded = {
        name: [
            (
                encode_prompts(tokenizer, [p.prompt], "off")[0],
                tokenizer(p.answer)["input_ids"] + [eos],
            )
            for p in problems
        ]
        for name, problems in encoded.items()
    }
    names = list(encoded)
    share = np.full(len(names), 1.0 / len(names))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    start = time.perf_counter()
    model.train()
    for step in range(args.steps):
        picks = rng.choice(len(names), size=args.batch_size, p=share)
        rows = [
            encoded[names[m]][int(rng.integers(0, len(encoded[names[m]])))] for m in picks.tolist()
        ]
        loss = sft_step(model, optimizer, rows)
        if (step + 1) % 50 == 0:
            print(f"step {step + 1}: loss {loss:.3f}")
        if args.stop_at is not None and (step + 1) % args.check_every == 0:
            passing = []
            for name in names:
                label = f"step {step + 1}: " + (f"{name} " if name else "")
                passed, reading = check_passes(model, tokenizer, task, checks[name], args, label)
                passing.append(passed)
                if name:
                    members[name] = {"last_check": step + 1, "passed": passed, **reading}
            if all(passing):
                break
            weight = np.where(passing, PASSED_WEIGHT, 1.0)
            share = weight / weight.sum()
    steps = step + 1
    seconds = time.perf_counter() - start
    accuracy = greedy_accuracy(model, tokenizer, task, task.eval[:500], args.max_new_tokens)
    if args.mixture is not None:
        for name, problems in by_member(task.eval[:500]).items():
            members[name]["greedy_accuracy_eval"] = greedy_accuracy(
                model, tokenizer, task, problems, args.max_new_tokens
            )
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    info = {
        "task": spec,
        "steps": steps,
        **(
            {
                "stop_at": args.stop_at,
                "min_informative": args.min_informative,
                "check_every": args.check_every,
            }
            if args.stop_at
            else {}
        ),
        **({"members": members} if members else {}),
        "max_new_tokens": args.max_new_tokens,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "seed": args.seed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "greedy_accuracy_eval500": accuracy,
        "sft_seconds": round(seconds, 1),
        "torch": torch.__version__,
    }
    (args.out / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
