"""The GPU check (issue #54): what a first, short session on a one-GPU machine runs.

From a clean checkout, with the machine's own python3 and nothing to install (`make gpu-check`,
or `PYTHONPATH=src python3 scripts/gpu_check.py`), three parts, each timed and bounded, print a
report and write it as JSON (`--out`, default build/gpu_check.json):

a. environment: python, torch, CUDA, the device, its capability and free memory, and which of
   transformers, ray, verl and vllm import (asked in a child process, so the parent never holds
   the GPU and a broken package cannot take the check down);
b. llm-replay's own loop on the device, in a child process: `SyncTrainer` on the `auto` preset for
   a few iterations (steps, accuracy, μ, seconds), then the behaviour log-probs the generator
   recorded against the learner's recomputation of the same tokens on the same weights;
c. verl's sync trainer with replay (examples/verl/run_replay.sh: vLLM rollout, FSDP actor) where
   CUDA is there and verl, vLLM and Ray import: 4 steps with a refill and padding forced
   (`FORCING`), the actor metric keys that arrived, `llm_replay/mu` against verl's own timers,
   then one resume to step 6. Elsewhere it prepares the data, records the commands it would run
   and says what it skipped.

The exit status is 1 only when a part that could run failed. Simplification: the built-in
chain_sum task is drawn from reasoning-gym; where that is not installed, `ChainSumStandIn`
(reasoning-gym's chain_sum generator and scorer, checked equal to it by
tests/scripts/test_gpu_check.py) is registered under its name in this check's processes only,
and the report says so. `--device cpu` runs part b on CPU and part c's preparation only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import types
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
if str(SRC) not in sys.path:  # the checkout's code is what is checked
    sys.path.insert(0, str(SRC))

PROBED = ("transformers", "ray", "verl", "vllm")
VERL_NEEDS = ("verl", "vllm", "ray")
NOT_RUN = "the sync trainer, padding, refill, metric keys, resume"
VERL_STEPS, VERL_RESUME_STEPS = 4, 6
FORCING = (
    # two actor updates a step: the sampler composes a batch for each from the step's prompts
    "++trainer.v1.sync.parameter_sync_step=2",
    # the method's batch (24 prompts × n 8 = 192 rows) does not tile verl's mini-batch (16 × 8 =
    # 128 rows), so verl pads each update to a multiple of lcm(dp, 128) even at dp = 1, where
    # padding is otherwise never needed; and once positive_schedule is on-policy (from 60% of the
    # run), a step's 32 prompts (256 rows) make one 192-row batch of the two it needs, so the
    # sampler asks verl for more prompts (a refill)
    "++trainer.v1.sampler.sampler_kwargs.mini_batch_prompts=24",
    # no CUDA-graph capture in vLLM: the check's minutes go to the steps, not to start-up
    "actor_rollout_ref.rollout.enforce_eager=true",
)
PAD_ROW_TOKENS = 128  # verl.trainer.ppo.padding_utils.SYNTHETIC_PADDING_SEQ_LEN (verl 0.9.1)
# The learner's recomputation of a fresh token's log-prob against the generator's record. In
# float32 only the order of operations differs (KV-cache decoding against one full pass): ~1e-6
# where kernels differ by shape, 0 on CPU. In bfloat16 every logit is rounded to 8 significant
# bits on each path (±0.03 at a logit of 8), so the bound is the one training feels: a fresh
# token whose ratio leaves PPO's clip range (ε = 0.2) is clipped for nothing. Few may, and the
# mean |Δ| stays far inside ε. Every figure is reported, not only the verdict.
TOLERANCE = {
    "float32": {"max_abs": 1e-3},
    "bfloat16": {"mean_abs": 0.05, "share_outside_clip": 0.05},
    "float16": {"mean_abs": 0.02, "share_outside_clip": 0.02},
}
CLIP = 0.2
MU_COLUMNS = ("step", "mu", "mu_verl_timers", "gen_s", "update_actor_s", "refilled_prompts")
MU_COLUMNS += ("padding_rows",)


# ---------------------------------------------------------------- chain_sum without reasoning-gym
class ChainSumStandIn:
    """reasoning-gym's `chain_sum` dataset (`__getitem__`, `score_answer`) for machines without
    reasoning-gym: the same entries from the same seeds, the same scores."""

    def __init__(self, size: int, seed: int, **params: Any) -> None:
        p = {"min_terms": 2, "max_terms": 6, "min_digits": 1, "max_digits": 4, **params}
        self.size, self.seed, self.negation = size, seed, bool(p.get("allow_negation", False))
        self.terms = (p["min_terms"], p["max_terms"])
        self.digits = (p["min_digits"], p["max_digits"])

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> dict[str, Any]:
        rng = random.Random(self.seed + idx)
        num_terms, num_digits = rng.randint(*self.terms), rng.randint(*self.digits)
        low, high = (0 if num_digits == 1 else 10 ** (num_digits - 1)), 10**num_digits - 1
        low = -high if self.negation else low
        constants = [rng.randint(low, high) for _ in range(num_terms)]
        operators = [rng.choice(["+", "-"]) for _ in range(num_terms - 1)]
        parts, result = [str(constants[0])], constants[0]
        for op, c in zip(operators, constants[1:], strict=True):
            parts += [op, str(c)]
            result = result + c if op == "+" else result - c
        expression = " ".join(parts)
        return {
            "question": "State the final answer to the following arithmetic problem: "
            f"{expression} =",
            "answer": str(result),
            "metadata": {
                "source_dataset": "chain_sum",
                "source_index": idx,
                "num_terms": num_terms,
                "num_digits": num_digits,
                "expression": expression,
                "difficulty": {"num_terms": self.terms, "num_digits": self.digits},
            },
        }

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        if not answer:
            return 0.0
        answer, oracle = answer.replace(",", ""), entry["answer"].replace(",", "")
        try:
            if Decimal(answer) == Decimal(oracle):
                return 1.0
        except (InvalidOperation, ValueError):
            pass
        return len(oracle) / len(answer) if oracle in answer else 0.0


def installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def install_stand_in(force: bool = False) -> str:
    """Register `ChainSumStandIn` as `reasoning_gym` in this process unless reasoning-gym is
    installed (or `force`); returns where the chain_sum problems come from."""
    if not force and installed("reasoning_gym"):
        return "reasoning_gym"

    def create_dataset(name: str, size: int = 500, seed: int = 0, **params: Any) -> Any:
        if name != "chain_sum":
            raise ValueError(f"the gpu check's stand-in for reasoning-gym has no {name!r}")
        return ChainSumStandIn(size, seed, **params)

    module = types.ModuleType("reasoning_gym", "scripts/gpu_check.py's chain_sum stand-in")
    module.create_dataset = create_dataset  # type: ignore[attr-defined]
    sys.modules["reasoning_gym"] = module
    return "stand-in (--stand-in)" if force else "stand-in (reasoning-gym not installed)"


# ---------------------------------------------------------------- a. environment
PROBE = """
import importlib, json, platform, sys, time
out = {"python": platform.python_version(), "executable": sys.executable, "imports": {}}
try:
    import torch
    out.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda=torch.cuda.is_available())
    if out["cuda"]:
        free, total = torch.cuda.mem_get_info()
        out.update(device_name=torch.cuda.get_device_name(0), device_count=torch.cuda.device_count(),
                   capability=".".join(map(str, torch.cuda.get_device_capability(0))),
                   free_gib=free / 2**30, total_gib=total / 2**30, bf16=torch.cuda.is_bf16_supported())
except Exception as error:
    out["torch_error"] = f"{type(error).__name__}: {error}"
for name in NAMES:
    start = time.perf_counter()
    try:
        entry = {"ok": True, "version": str(getattr(importlib.import_module(name), "__version__", "?"))}
    except BaseException as error:
        entry = {"ok": False, "error": f"{type(error).__name__}: {error}"[:300]}
    out["imports"][name] = {**entry, "seconds": round(time.perf_counter() - start, 2)}
print("PROBE" + json.dumps(out))
"""


def environment(timeout: float) -> dict[str, Any]:
    done = run_child(
        [sys.executable, "-c", PROBE.replace("NAMES", repr(PROBED))], timeout, capture=True
    )
    if done["rc"] != 0 or "PROBE" not in done["output"]:
        return {"status": "failed", "reason": done["reason"] or done["output"][-2000:]}
    found = json.loads(done["output"].rsplit("PROBE", 1)[1].strip().splitlines()[0])
    return {"status": "passed", **found}


# ---------------------------------------------------------------- b. llm-replay's loop
def loop_part(args: argparse.Namespace) -> dict[str, Any]:
    """In its own process (`--part loop`): SyncTrainer a few iterations, then the agreement."""
    task_source = install_stand_in(force=args.stand_in)
    import torch

    from llm_replay.config import load_config
    from llm_replay.runtime import SyncTrainer

    run_dir = args.workdir / "loop"
    shutil.rmtree(run_dir, ignore_errors=True)
    sets = [
        f"model.device={args.device}",
        f"train.iterations={args.iterations}",
        f"eval.every={args.iterations}",
        f"eval.size={args.eval_size}",
        "task.train_size=2000",
        f"log.run_dir={run_dir}",
        "log.tensorboard=false",
        "log.progress=false",
        *args.set,
    ]
    cuda = args.device.startswith("cuda")
    started = time.perf_counter()
    trainer = SyncTrainer(load_config("auto", sets))
    built = time.perf_counter()
    summary = trainer.run()
    if cuda:
        torch.cuda.synchronize()
    ran = time.perf_counter()
    agreement = logprob_agreement(trainer, prompts=args.agreement_prompts)
    return {
        "status": "passed" if agreement["within_tolerance"] else "failed",
        "reason": "" if agreement["within_tolerance"] else "log-probs outside the tolerance",
        "task_source": task_source,
        "overrides": sets,
        "device": str(trainer.learner.device),
        "dtype": agreement["dtype"],
        **{k: summary[k] for k in ("iterations", "steps", "base_accuracy", "final_accuracy", "mu")},
        "compute_seconds": summary["compute_seconds"],
        "seconds": {
            "build": built - started,
            "run": ran - built,
            "agreement": time.perf_counter() - ran,
        },
        "logprob_agreement": agreement,
        "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
    }


def logprob_agreement(
    trainer: Any, prompts: int = 32, n: int = 4, seed: int = 54
) -> dict[str, Any]:
    """Sample `n` completions of `prompts` train prompts with the run's generator, recompute each
    completion token's log-prob as the learner does (`learner.token_logprobs`, the model in
    training mode, the run's temperature and truncation, rows left-aligned as in its batches) and
    compare with what the generator recorded. A sync run's generator and learner share one model."""
    import numpy as np
    import torch

    from llm_replay.learner import token_logprobs
    from llm_replay.runtime.components import sampling_params

    generator, learner = trainer.generator, trainer.learner
    rows = trainer.policy.train_prompts[:prompts]
    rng = torch.Generator(device=generator.device).manual_seed(seed)
    out = generator.generate(rows, n, sampling_params(trainer.config), rng=rng)
    lengths = out.completion_lengths
    sequences, spans = [], []
    for i, end in enumerate(np.cumsum(lengths)):
        prompt = list(rows[int(out.prompt_index[i])])
        sequences.append(prompt + out.completion_ids[end - lengths[i] : end].tolist())
        spans.append((len(prompt), int(lengths[i])))
    ids = torch.zeros((len(sequences), max(map(len, sequences))), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, sequence in enumerate(sequences):
        ids[i, : len(sequence)], mask[i, : len(sequence)] = torch.tensor(sequence), 1
    s = learner.settings
    learner.model.train()
    with torch.no_grad():
        found = token_logprobs(
            learner.model, ids.to(learner.device), mask.to(learner.device), s.temperature,
            top_k=s.top_k, top_p=s.top_p,
        ).sampled.float().cpu()  # fmt: skip
    recomputed = np.concatenate([found[i, p : p + c].numpy() for i, (p, c) in enumerate(spans)])
    delta = recomputed - out.behaviour_logprobs
    dtype = str(next(learner.model.parameters()).dtype).removeprefix("torch.")
    figures = {
        "tokens": int(delta.size),
        "max_abs": float(np.abs(delta).max()),
        "mean_abs": float(np.abs(delta).mean()),
        "p99_abs": float(np.quantile(np.abs(delta), 0.99)),
        "share_outside_clip": float(np.mean(np.abs(np.expm1(delta)) > CLIP)),
    }
    tolerance = TOLERANCE.get(dtype, TOLERANCE["bfloat16"])
    within = all(figures[key] <= bound for key, bound in tolerance.items())
    return {"dtype": dtype, **figures, "tolerance": tolerance, "within_tolerance": within}


# ---------------------------------------------------------------- c. verl: reading its console
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STEP_LINE = re.compile(r"(?:^|[\s)])step:(\d+) - (.*)$")
REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
WRAPPED = re.compile(r"np\.[A-Za-z0-9_]+\((.*)\)")


def number(text: str) -> float | None:
    """A value as verl's console logger prints it (`pprint.pformat` of a number: `0.5`, `3`,
    `True`, `nan`, numpy's `np.float64(0.5)`), else None."""
    text = text.strip()
    wrapped = WRAPPED.fullmatch(text)
    text = wrapped.group(1) if wrapped else text
    if text in ("True", "False"):
        return float(text == "True")
    try:
        return float(text)
    except ValueError:
        return None


def parse_console(text: str) -> dict[int, dict[str, float]]:
    """Every `step:N - key:value - ...` line verl's console logger printed (`LocalLogger`; also
    behind Ray's `(TaskRunner pid=...)` prefix and colour codes), merged by step."""
    steps: dict[int, dict[str, float]] = {}
    for raw in text.splitlines():
        match = STEP_LINE.search(REPEATED.sub("", ANSI.sub("", raw)))
        if not match:
            continue
        metrics = steps.setdefault(int(match.group(1)), {})
        for item in match.group(2).split(" - "):
            key, _, value = item.rpartition(":")
            parsed = number(value)
            if key.strip() and parsed is not None:
                metrics[key.strip()] = parsed
    return steps


def parse_jsonl(text: str) -> dict[int, dict[str, float]]:
    """verl's file logger's lines (`{"step": N, "data": {...}}`), as `parse_console` reads."""
    steps: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
            data = steps.setdefault(int(record["step"]), {})
        except (ValueError, KeyError, TypeError):
            continue
        data.update({k: float(v) for k, v in record.get("data", {}).items() if _numeric(v)})
    return steps


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_metrics(console: str, jsonl: str = "") -> dict[int, dict[str, float]]:
    """A run's metrics by step: the console's lines, and where a step or key is missing there
    (Ray may not forward the trainer's output), verl's file logger's."""
    steps = parse_jsonl(jsonl)
    for step, metrics in parse_console(console).items():
        steps[step] = {**steps.get(step, {}), **metrics}
    return steps


def padding_rows(metrics: dict[str, float]) -> float | None:
    """The rows verl padded a step with: `perf/total_num_tokens` counts every row of the step, a
    padding row as `PAD_ROW_TOKENS`; the length means count only the real rows, of which the
    sampler put `llm_replay/trained_rows`."""
    keys = (
        "perf/total_num_tokens",
        "llm_replay/trained_rows",
        "prompt_length/mean",
        "response_length/mean",
    )
    if any(key not in metrics for key in keys):
        return None
    total, rows, prompt, response = (metrics[key] for key in keys)
    return (total - rows * (prompt + response)) / PAD_ROW_TOKENS


def mu_rows(steps: dict[int, dict[str, float]]) -> list[dict[str, Any]]:
    """Per step, the sampler's μ beside the μ of verl's own timers (`timing_s/gen`: the step's
    wait for its rollouts and the sampler's work; `timing_s/update_actor`), both summed from
    step 1. The sampler's μ of step N is read before step N's last actor update, so the two agree
    only roughly; its seconds are a share of verl's timers (at most 1)."""
    gen = update = fresh = trained = 0.0
    out = []
    for step in sorted(steps):
        m = steps[step]
        gen += m.get("timing_s/gen", 0.0)
        update += m.get("timing_s/update_actor", 0.0)
        fresh += m.get("llm_replay/fresh_rows", 0.0)
        trained += m.get("llm_replay/trained_rows", 0.0)
        waited = m.get("llm_replay/generation_seconds")
        training = m.get("llm_replay/training_seconds")
        out.append(
            {
                "step": step,
                "mu": m.get("llm_replay/mu"),
                "mu_verl_timers": (gen / fresh) / (update / trained)
                if fresh and update and trained
                else None,
                "gen_s": m.get("timing_s/gen"),
                "update_actor_s": m.get("timing_s/update_actor"),
                "sampler_wait_share": waited / gen if waited is not None and gen else None,
                "sampler_training_share": training / update
                if training is not None and update
                else None,
                "fresh_rows": m.get("llm_replay/fresh_rows"),
                "trained_rows": m.get("llm_replay/trained_rows"),
                "refilled_prompts": m.get("llm_replay/refilled_prompts"),
                "padding_rows": padding_rows(m),
            }
        )
    return out


def read_runs(
    one: dict[int, dict[str, float]], two: dict[int, dict[str, float]] | None, checkpoints: Path
) -> dict[str, Any]:
    """What the two runs' metrics (`read_metrics`; `two` None: the resume did not run) and the
    checkpoints show; each failed check is named."""
    resumed, two = two is not None, two or {}
    problems = []
    if sorted(one) != list(range(1, VERL_STEPS + 1)):
        problems.append(f"the first run logged steps {sorted(one)}, not 1..{VERL_STEPS}")
    actor = sorted(
        {key for m in (*one.values(), *two.values()) for key in m if key.startswith("actor/")}
    )
    if not actor:
        problems.append("no actor/ metric arrived")
    if not any("llm_replay/mu" in m for m in one.values()):
        problems.append("llm_replay/mu never logged (sync mode measures it)")
    if not any(m.get("llm_replay/refilled_prompts", 0) > 0 for m in one.values()):
        problems.append("no refill: llm_replay/refilled_prompts stayed 0 (see FORCING)")
    padded = [padding_rows(m) for m in one.values()]
    if not any(p is not None and p > 0.5 for p in padded):
        problems.append(f"no padded step: padding rows per step {padded} (see FORCING)")
    for step in (VERL_STEPS, VERL_RESUME_STEPS) if resumed else (VERL_STEPS,):
        state = checkpoints / f"global_step_{step}" / "llm_replay" / "sampler.json"
        if not state.is_file():
            problems.append(f"{state} not written")
    if resumed and sorted(two) != list(range(VERL_STEPS + 1, VERL_RESUME_STEPS + 1)):
        problems.append(
            f"the resumed run logged steps {sorted(two)}, not {VERL_STEPS + 1}..{VERL_RESUME_STEPS}"
        )
    return {"actor_keys": actor, "mu": mu_rows({**one, **two}), "problems": problems}


# ---------------------------------------------------------------- c. verl: running it
def verl_command(out: Path, steps: int) -> dict[str, Any]:
    """The run `examples/verl/run_replay.sh` makes, with `FORCING`, writing into `out`; verl's
    file logger writes the metrics beside the console (`read_metrics`)."""
    script = ROOT / "examples" / "verl" / "run_replay.sh"
    extra = ["trainer.logger=[console,file]", f"hydra.run.dir={out / 'hydra'}"]
    return {
        "argv": ["bash", str(script), *FORCING, *extra],
        "env": {
            "OUT": str(out),
            "STEPS": str(steps),
            "PYTHON": sys.executable,
            "VERL_FILE_LOGGER_PATH": str(out / f"metrics_{steps}_steps.jsonl"),
        },
    }


def verl_environment(extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra, "RAY_DEDUP_LOGS": "0", "RAY_AUTH_MODE": "disabled"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    from importlib.metadata import entry_points

    if not any(ep.name == "llm_replay" for ep in entry_points(group="verl.plugins")):
        # a checkout on PYTHONPATH has no entry point; verl imports these modules instead
        modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
        env["VERL_USE_EXTERNAL_MODULES"] = ",".join(
            [*modules, "llm_replay.integrations.verl.plugin"]
        )
    return env


def prepare_data(out: Path, stand_in: bool) -> dict[str, Any]:
    """What run_replay.sh trains on (examples/verl/prepare.py), a 2000-prompt train split."""
    shutil.rmtree(out, ignore_errors=True)
    task_source = install_stand_in(force=stand_in)
    spec = importlib.util.spec_from_file_location("verl_prepare", ROOT / "examples/verl/prepare.py")
    assert spec is not None and spec.loader is not None
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    prompts = prepare.prepare(out, "positive", ["task.train_size=2000"])
    return {"task_source": task_source, "train_prompts": prompts}


def verl_part(args: argparse.Namespace, env: dict[str, Any], deadline: float) -> dict[str, Any]:
    reasons = []
    if not args.device.startswith("cuda"):
        reasons.append(f"--device {args.device}: verl's run needs a CUDA GPU")
    elif not env.get("cuda"):
        reasons.append("torch not importable" if env.get("torch_error") else "no CUDA device")
    missing = [m for m in VERL_NEEDS if not env.get("imports", {}).get(m, {}).get("ok")]
    if missing:
        reasons.append(f"{', '.join(missing)} not importable")
    out = args.workdir / "verl"
    runs = [verl_command(out, steps) for steps in (VERL_STEPS, VERL_RESUME_STEPS)]
    found: dict[str, Any] = {"commands": runs}
    try:
        found.update(prepare_data(out, args.stand_in))
    except Exception as error:
        if not reasons:
            raise
        found["prepare_error"] = f"{type(error).__name__}: {error}"  # the run would not start
    if reasons:
        line = f"verl: skipped ({'; '.join(reasons)}): not run: {NOT_RUN}"
        return {"status": "skipped", "reason": line, **found}
    logs, failure = [], ""
    limits = (args.verl_timeout, args.resume_timeout)
    for i, (run, limit) in enumerate(zip(runs, limits, strict=True), 1):
        left = deadline - time.monotonic()
        if left < 90:
            failure = f"run {i}: only {left:.0f} s of the budget left"
            break
        log = out / f"run{i}.log"
        print(f"verl: run {i} (STEPS={run['env']['STEPS']}), console in {log}", flush=True)
        done = run_child(
            run["argv"], min(limit, left - 30), log=log, env=verl_environment(run["env"])
        )
        found[f"run{i}"] = {"rc": done["rc"], "seconds": done["seconds"], "log": str(log)}
        console = log.read_text(errors="replace")
        jsonl = Path(run["env"]["VERL_FILE_LOGGER_PATH"])
        logs.append(read_metrics(console, jsonl.read_text() if jsonl.is_file() else ""))
        if done["rc"] != 0:
            failure = f"run {i}: {done['reason']}; its last lines:\n" + "\n".join(
                console.splitlines()[-40:]
            )
            break
    if logs:  # what the runs that ran show, also when one failed
        found.update(read_runs(logs[0], logs[1] if len(logs) > 1 else None, out / "checkpoints"))
    problems = [*([failure] if failure else []), *found.get("problems", [])]
    return {"status": "failed" if problems else "passed", "reason": "; ".join(problems), **found}


# ---------------------------------------------------------------- running and reporting
def run_child(
    argv: list[str],
    timeout: float,
    *,
    capture: bool = False,
    log: Path | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`argv` in a session of its own, killed with everything it started after `timeout` s."""
    started = time.monotonic()
    sink: Any = subprocess.PIPE if capture else (log.open("w") if log else None)
    process = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT if sink else None,
        text=True, start_new_session=True,
    )  # fmt: skip
    reason, output = "", ""
    try:
        output = process.communicate(timeout=max(1.0, timeout))[0] or ""
    except subprocess.TimeoutExpired:
        reason = f"timed out after {timeout:.0f} s"
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
                output = process.communicate(timeout=15)[0] or ""
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
    finally:
        if log is not None:
            sink.close()
    rc = 124 if reason else process.returncode
    reason = reason or (f"exit status {rc}" if rc else "")
    return {"rc": rc, "reason": reason, "output": output, "seconds": time.monotonic() - started}


def loop_in_child(args: argparse.Namespace, timeout: float) -> dict[str, Any]:
    part_out = args.workdir / "loop.json"
    part_out.unlink(missing_ok=True)
    argv = [
        *(sys.executable, __file__, "--part", "loop", "--part-out", str(part_out)),
        *("--device", args.device, "--workdir", str(args.workdir)),
        *("--iterations", str(args.iterations), "--eval-size", str(args.eval_size)),
        *("--agreement-prompts", str(args.agreement_prompts)),
        *(["--stand-in"] if args.stand_in else []),
        *(item for s in args.set for item in ("--set", s)),
    ]
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)
    log = args.workdir / "loop.log"
    done = run_child(argv, timeout, log=log, env={**os.environ, "PYTHONPATH": path})
    if done["rc"] != 0 or not part_out.is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        return {"status": "failed", "reason": f"{done['reason'] or 'no result'} ({log}):\n{tail}"}
    return {**json.loads(part_out.read_text()), "log": str(log)}


def fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"


def show(report: dict[str, Any]) -> None:
    env, loop, verl = (report["parts"].get(k, {}) for k in ("environment", "loop", "verl"))
    print(f"\n== GPU check: {'ok' if report['ok'] else 'FAILED'} in {report['seconds']:.0f} s ==")
    print(
        f"environment [{env.get('status')}]: python {env.get('python')}, torch {env.get('torch')} "
        f"(CUDA {env.get('torch_cuda')}), CUDA available {env.get('cuda')}, "
        f"{env.get('device_name', 'no device')} (capability {env.get('capability', '-')}, "
        f"{fmt(env.get('free_gib'))} GiB free of {fmt(env.get('total_gib'))})"
    )
    if env.get("torch_error"):
        print(f"  torch: {env['torch_error']}")
    for name, entry in env.get("imports", {}).items():
        state = f"{entry['version']}" if entry["ok"] else f"no ({entry['error']})"
        print(f"  import {name}: {state}, {entry['seconds']} s")
    print(f"loop [{loop.get('status')}]: {loop.get('reason', '')}")
    if "steps" in loop:
        a = loop["logprob_agreement"]
        print(
            f"  task from {loop['task_source']}; {loop['device']} {loop['dtype']}: "
            f"{loop['iterations']} iterations, {loop['steps']} steps, accuracy "
            f"{loop['base_accuracy']:.1%} -> {loop['final_accuracy']:.1%}, mu {fmt(loop['mu'])}, "
            f"{loop['seconds']['run']:.1f} s"
        )
        print(
            f"  behaviour vs learner log-probs, {a['tokens']} tokens: max |d| {a['max_abs']:.2e}, "
            f"mean {a['mean_abs']:.2e}, p99 {a['p99_abs']:.2e}, ratio outside 1 ± {CLIP} "
            f"{a['share_outside_clip']:.2%}; tolerance {a['tolerance']}"
        )
    skipped = verl.get("status") == "skipped"
    print(verl["reason"] if skipped else f"verl [{verl.get('status')}]: {verl.get('reason', '')}")
    if verl.get("prepare_error"):
        print(f"  its data could not be prepared either: {verl['prepare_error']}")
    if verl.get("actor_keys"):
        print(f"  actor metric keys: {', '.join(verl['actor_keys'])}")
        print(
            "  step  mu  mu(verl timers)  timing_s/gen  timing_s/update_actor  refilled  padding rows"
        )
        for r in verl["mu"]:
            print("  " + "  ".join(fmt(r[c]) if c != "step" else str(r[c]) for c in MU_COLUMNS))
    print(f"report: {report['out']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu_check.json")
    parser.add_argument("--workdir", type=Path, default=ROOT / "build" / "gpu_check")
    parser.add_argument("--iterations", type=int, default=4, help="part b's iterations")
    parser.add_argument("--eval-size", type=int, default=64, help="part b's held-out problems")
    parser.add_argument("--agreement-prompts", type=int, default=32)
    parser.add_argument("--set", action="append", default=[], help="another override for part b")
    parser.add_argument("--budget", type=float, default=510, help="seconds for the whole check")
    parser.add_argument("--loop-timeout", type=float, default=150)
    parser.add_argument("--verl-timeout", type=float, default=270, help="verl's first run")
    parser.add_argument("--resume-timeout", type=float, default=180, help="verl's resumed run")
    parser.add_argument("--stand-in", action="store_true", help="chain_sum from the stand-in")
    parser.add_argument("--part", choices=["loop"], help=argparse.SUPPRESS)
    parser.add_argument("--part-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.workdir = args.workdir.resolve()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.part == "loop":
        args.part_out.write_text(json.dumps(loop_part(args), indent=2, default=str))
        return 0
    started = time.monotonic()
    deadline = started + args.budget
    parts: dict[str, Any] = {}

    def timed(name: str, work: Any) -> None:
        begin = time.monotonic()
        print(f"-- {name}", flush=True)
        try:
            parts[name] = work()
        except Exception as error:  # reported; the next part still runs
            parts[name] = {"status": "failed", "reason": f"{type(error).__name__}: {error}"}
        parts[name]["part_seconds"] = time.monotonic() - begin

    timed("environment", lambda: environment(min(180.0, args.budget / 3)))
    env = parts["environment"]
    if args.device.startswith("cuda") and not env.get("cuda"):
        why = "torch not importable" if env.get("torch_error") else "no CUDA device"
        parts["loop"] = {"status": "skipped", "reason": f"{why} (--device cpu runs it on CPU)"}
    else:
        timed(
            "loop", lambda: loop_in_child(args, min(args.loop_timeout, deadline - time.monotonic()))
        )
    timed("verl", lambda: verl_part(args, env, deadline))
    report = {
        "ok": not any(p.get("status") == "failed" for p in parts.values()),
        "seconds": time.monotonic() - started,
        "out": str(args.out),
        "argv": sys.argv,
        "parts": parts,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    show(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
