"""scripts/gpu_check.py (issue #54) on CPU: everything but the device calls.

The whole script runs with `--device cpu` where the packages a GPU machine may lack are made
unimportable; the reasoning-gym stand-in is checked against reasoning-gym; the verl part's
orchestration runs with verl replaced by a script that prints verl's console lines; the
agreement check is shown to see a learner whose weights are not the generator's.

The console logs in `data/` are verl 0.9.1's own lines: `PPOTrainerSync.fit` with the stub
workers of tests/integrations/verl_v1 (only the workers are stubs) and the check's `FORCING`
scaled down (4 prompts a step × n 4, ppo_mini_batch_size 4, sampler_kwargs.mini_batch_prompts 3,
so each update of 12 rows is padded to 16), printed by verl's `concat_dict_to_str` as its
`LocalLogger` prints them; run 2 resumes run 1's checkpoint to step 6. Ray's prefix, colour codes
and other output were added around them as a real run prints them.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
MISSING_ON_THE_GPU_MACHINE = (
    "reasoning_gym",
    "math_verify",
    "ray",
    "verl",
    "vllm",
    "tensordict",
    "omegaconf",
    "hydra",
    "numba",
    "trl",
    "torchrl",
    "accelerate",  # optional to transformers and torch, as the rest below
    "pandas",
    "psutil",
    "datasets",
    "dill",
    "cloudpickle",
)
BLOCKER = """
import sys
BLOCKED = {blocked!r}
class NotInstalled:  # wraps each import finder: a blocked package looks as if it were not installed
    def __init__(self, finder):
        self.finder = finder
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED or not hasattr(self.finder, "find_spec"):
            return None
        return self.finder.find_spec(name, path, target)
    def __getattr__(self, attribute):
        return getattr(self.finder, attribute)
sys.meta_path[:] = [NotInstalled(finder) for finder in sys.meta_path]
"""
TINY = [
    "generation.prompts_per_step=4",
    "generation.group_size=4",
    "train.batch_size=16",
    "train.micro_batch_size=8",
    "eval.pass_size=4",
    "eval.pass_k=[1,2]",
]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = load_script()


def test_the_stand_in_is_reasoning_gyms_chain_sum() -> None:
    import reasoning_gym

    from llm_replay.tasks.builtin import CHAIN_SUM

    answers = ["", "12", " 12", "1,2", "+012", "012.0", "-3", "abc", "1212", "12 is it", "x"]
    for seed, params in [(1, CHAIN_SUM["params"]), (2, CHAIN_SUM["params"]), (987, {})]:
        for negation in (False, True):
            settings = {**params, "allow_negation": negation}
            real = reasoning_gym.create_dataset("chain_sum", size=10**6, seed=seed, **settings)
            ours = gpu_check.ChainSumStandIn(10**6, seed, **settings)
            for idx in range(0, 3000, 7):
                entry = real[idx]
                assert ours[idx] == entry
                for answer in [*answers, entry["answer"], entry["answer"] + "0"]:
                    assert ours.score_answer(answer, entry) == real.score_answer(answer, entry)


def test_the_built_in_task_is_the_same_with_the_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """ReasoningGymTask imports `reasoning_gym` when built: with the stand-in registered under
    that name it draws the same train and eval problems and scores them the same."""
    from llm_replay.tasks.builtin import CHAIN_SUM
    from llm_replay.tasks.reasoning_gym import ReasoningGymTask

    def build() -> ReasoningGymTask:
        return ReasoningGymTask(**CHAIN_SUM, train_size=300, eval_size=50)

    real = build()
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # restored after the test
    assert gpu_check.install_stand_in(force=True) == "stand-in (--stand-in)"
    stand_in = build()
    for split in ("train", "eval"):
        ours, theirs = getattr(stand_in, split), getattr(real, split)
        assert [(p.prompt, p.answer, p.metadata) for p in ours] == [
            (p.prompt, p.answer, p.metadata) for p in theirs
        ]
    for problem in real.eval[:10]:
        for completion in (problem.answer, "7", f"{problem.answer}9"):
            assert stand_in.score(completion, problem) == real.score(completion, problem)


def test_a_values_text_as_verls_console_prints_it() -> None:
    assert gpu_check.number("0.5") == 0.5
    assert gpu_check.number("-1e-05") == -1e-05
    assert gpu_check.number("3") == 3.0
    assert gpu_check.number("np.float64(2.5)") == 2.5
    assert gpu_check.number("np.int32(-2)") == -2.0
    assert gpu_check.number("True") == 1.0
    assert math.isnan(gpu_check.number("nan"))
    assert gpu_check.number("tensor(0.5)") is None
    assert gpu_check.number("abc") is None


def test_the_console_parser_reads_every_step_behind_rays_prefix() -> None:
    steps = gpu_check.parse_console((DATA / "verl_run1.log").read_text())
    assert sorted(steps) == [1, 2, 3, 4]
    first = steps[1]
    assert first["training/global_step"] == 1.0
    assert first["actor/pg_loss"] == 0.027406226843595505 and first["actor/lr"] == 1e-06
    assert first["num_turns/mean"] == 2.0 and first["training/num_turns/max"] == 2.0  # np.*(...)
    assert {"llm_replay/mu", "timing_s/gen", "timing_s/update_actor"} <= set(first)
    assert not any(key.startswith(("\x1b", "(", " ")) for key in first)
    assert [m["llm_replay/refilled_prompts"] for m in steps.values()] == [0, 0, 0, 4]
    # a line merged into its step, and one that is not verl's
    extra = "(TaskRunnerV1 pid=1) step:2 - val-core/acc:np.float64(0.25)\nsome step:x - a:1\n"
    merged = gpu_check.parse_console((DATA / "verl_run1.log").read_text() + extra)
    assert merged[2]["val-core/acc"] == 0.25 and len(merged[2]) == len(steps[2]) + 1


def test_both_runs_read_refill_padding_mu_and_the_resume(tmp_path: Path) -> None:
    for step in (2, 4, 6):
        state = tmp_path / f"global_step_{step}" / "llm_replay"
        state.mkdir(parents=True)
        (state / "sampler.json").write_text("{}")
    first, resumed = (
        gpu_check.read_metrics((DATA / f"verl_run{i}.log").read_text()) for i in (1, 2)
    )
    found = gpu_check.read_runs(first, resumed, tmp_path)
    assert found["problems"] == []
    assert "actor/pg_loss" in found["actor_keys"] and "actor/grad_norm" in found["actor_keys"]
    rows = {r["step"]: r for r in found["mu"]}
    assert sorted(rows) == [1, 2, 3, 4, 5, 6]
    # each update's 12 rows padded to 16 (two a step; three batches at the refilled step 4)
    padded = [round(rows[s]["padding_rows"], 6) for s in (1, 2, 3, 4)]
    assert padded == [8, 8, 8, 12]
    assert rows[4]["refilled_prompts"] == 4 and rows[5]["refilled_prompts"] == 4
    for r in rows.values():
        assert r["mu"] > 0 and r["mu_verl_timers"] > 0
        assert 0 < r["sampler_wait_share"] <= 1 and 0 < r["sampler_training_share"] <= 1


def test_what_the_runs_did_not_show_is_named(tmp_path: Path) -> None:
    one = gpu_check.read_metrics("step:1 - actor/pg_loss:0.1 - llm_replay/refilled_prompts:0")
    problems = gpu_check.read_runs(one, {6: {"x": 1.0}}, tmp_path)["problems"]
    assert len(problems) == 7
    joined = "\n".join(problems)
    for expected in (
        "the first run logged steps [1], not 1..4",
        "llm_replay/mu never logged",
        "no refill",
        "no padded step",
        "global_step_4/llm_replay/sampler.json not written",
        "global_step_6/llm_replay/sampler.json not written",
        "the resumed run logged steps [6], not 5..6",
    ):
        assert expected in joined
    assert "no actor/ metric arrived" in gpu_check.read_runs({}, None, tmp_path)["problems"]


def test_verls_file_logger_fills_what_the_console_lacks() -> None:
    """Where Ray does not forward the trainer's output, the metrics come from verl's file logger
    (`{"step": N, "data": {...}}` a line); the console wins where both have a key."""
    jsonl = "\n".join(
        json.dumps({"step": s, "data": {"actor/pg_loss": 0.5, "timing_s/gen": 2, "flag": True}})
        for s in (1, 2)
    )
    steps = gpu_check.read_metrics(
        "(TaskRunnerV1 pid=1) step:2 - actor/pg_loss:0.25", jsonl + "\nx"
    )
    assert steps == {
        1: {"actor/pg_loss": 0.5, "timing_s/gen": 2.0},
        2: {"actor/pg_loss": 0.25, "timing_s/gen": 2.0},
    }


def test_the_verl_command_is_the_example_with_the_forcing_overrides(tmp_path: Path) -> None:
    command = gpu_check.verl_command(tmp_path, 4)
    assert command["argv"][:2] == ["bash", str(ROOT / "examples/verl/run_replay.sh")]
    assert command["argv"][2:-2] == list(gpu_check.FORCING)
    assert command["env"]["OUT"] == str(tmp_path) and command["env"]["STEPS"] == "4"
    assert command["env"]["PYTHON"] == sys.executable
    env = gpu_check.verl_environment(command["env"])
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT / "src")
    assert env["RAY_DEDUP_LOGS"] == "0"  # every step's line reaches the console as it is
    # without llm-replay's `verl.plugins` entry point (a bare checkout), verl imports the plugin
    from importlib.metadata import entry_points

    if not any(ep.name == "llm_replay" for ep in entry_points(group="verl.plugins")):
        assert "llm_replay.integrations.verl.plugin" in env["VERL_USE_EXTERNAL_MODULES"]


FAKE_VERL = """
import pathlib, sys, time
steps, out, data, behaviour = int(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4]
run = 1 if steps == 4 else 2
print(pathlib.Path(data, f"verl_run{run}.log").read_text(), flush=True)
for step in (2, 4) if run == 1 else (6,):
    state = out / "checkpoints" / f"global_step_{step}" / "llm_replay"
    state.mkdir(parents=True, exist_ok=True)
    (state / "sampler.json").write_text("{}")
if run == 2 and behaviour == "fail":
    sys.exit(3)
if run == 2 and behaviour == "hang":
    time.sleep(120)
"""


@pytest.mark.parametrize("behaviour", ["pass", "fail", "hang"])
def test_the_verl_part_runs_both_commands_and_reads_what_they_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str
) -> None:
    """The verl part's orchestration with verl replaced by a script that prints the console
    lines of `data/` and writes the sampler's checkpoints: both runs, bounded, then read."""
    fake = tmp_path / "fake_verl.py"
    fake.write_text(FAKE_VERL)

    real = gpu_check.verl_command

    def command(out: Path, steps: int) -> dict[str, Any]:
        found = real(out, steps)
        found["argv"] = [sys.executable, str(fake), str(steps), str(out), str(DATA), behaviour]
        return found

    monkeypatch.setattr(gpu_check, "verl_command", command)
    env = {"cuda": True, "imports": {m: {"ok": True} for m in gpu_check.VERL_NEEDS}}
    args = SimpleNamespace(
        device="cuda", workdir=tmp_path, stand_in=False, verl_timeout=60, resume_timeout=3
    )
    found = gpu_check.verl_part(args, env, deadline=time.monotonic() + 600)
    assert (tmp_path / "verl" / "train.parquet").is_file()
    assert found["run1"]["rc"] == 0 and "actor/pg_loss" in found["actor_keys"]
    assert [r["step"] for r in found["mu"]] == [1, 2, 3, 4, 5, 6]
    if behaviour == "pass":
        assert found["status"] == "passed" and found["reason"] == ""
        return
    assert found["status"] == "failed"
    expected = "run 2: exit status 3" if behaviour == "fail" else "run 2: timed out after 3 s"
    assert found["reason"].startswith(expected)
    assert "its last lines:" in found["reason"] and "step:6 - " in found["reason"]
    assert found["run2"]["seconds"] < 30  # the hanging run and all it started were killed


def _trainer(model: Any, learner_model: Any, policy: Any, config: Any) -> Any:
    from llm_replay.runtime.components import learner_settings

    learner = SimpleNamespace(
        model=learner_model, settings=learner_settings(config), device=torch.device("cpu")
    )
    return SimpleNamespace(
        generator=policy.generator(0, model), learner=learner, policy=policy, config=config
    )


def test_the_agreement_check_sees_a_policy_that_is_not_the_generators() -> None:
    from llm_replay.config import load_config
    from llm_replay.runtime.components import Policy

    config = load_config("auto", ["task.train_size=200", "task.eval_size=20"])
    policy = Policy.load(config)
    same = gpu_check.logprob_agreement(_trainer(policy.model, policy.model, policy, config), 8)
    assert same["within_tolerance"] and same["dtype"] == "float32" and same["tokens"] > 8
    assert same["max_abs"] <= 1e-3
    other = copy.deepcopy(policy.model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    moved = gpu_check.logprob_agreement(_trainer(policy.model, other, policy, config), 8)
    assert not moved["within_tolerance"] and moved["max_abs"] > 1e-2


def test_the_check_runs_on_cpu_where_the_gpu_machines_packages_are_missing(
    tmp_path: Path,
) -> None:
    """The whole script, `--device cpu`, with every optional package the GPU machine lacks
    (reasoning-gym, math-verify, Ray, verl, vLLM, ...) made unimportable in all its processes."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        BLOCKER.format(blocked=set(MISSING_ON_THE_GPU_MACHINE))
    )
    out, workdir = tmp_path / "report.json", tmp_path / "work"
    argv = [
        *(sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--out", str(out)),
        *("--workdir", str(workdir), "--iterations", "1", "--eval-size", "8"),
        *("--agreement-prompts", "8", "--budget", "240"),
        *(item for s in TINY for item in ("--set", s)),
    ]
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["ok"]
    env_part, loop, verl = (report["parts"][k] for k in ("environment", "loop", "verl"))
    assert env_part["status"] == "passed" and env_part["cuda"] is False
    assert env_part["imports"]["transformers"]["ok"]
    assert not any(env_part["imports"][m]["ok"] for m in ("ray", "verl", "vllm"))
    assert loop["status"] == "passed" and loop["steps"] >= 1 and loop["device"] == "cpu"
    assert loop["task_source"] == "stand-in (reasoning-gym not installed)"
    assert loop["logprob_agreement"]["within_tolerance"] and loop["mu"] > 0
    assert verl["status"] == "skipped"
    assert verl["reason"] == (
        "verl: skipped (--device cpu: verl's run needs a CUDA GPU; verl, vllm, ray not "
        "importable): not run: the sync trainer, padding, refill, metric keys, resume"
    )
    assert verl["reason"] in done.stdout
    assert verl["train_prompts"] == 2000
    prepared = workdir / "verl"
    assert {"train.parquet", "val.parquet", "model"} <= {p.name for p in prepared.iterdir()}
    template = json.loads((prepared / "model" / "tokenizer_config.json").read_text())
    assert template["chat_template"]
    assert [c["env"]["STEPS"] for c in verl["commands"]] == ["4", "6"]


def _long_timeout(seconds: int) -> Any:
    if importlib.util.find_spec("pytest_timeout") is None:  # the GPU machine may lack it
        return lambda test: test
    return pytest.mark.timeout(seconds)


@pytest.mark.gpu
@_long_timeout(660)
def test_the_gpu_check_passes_on_cuda(tmp_path: Path) -> None:
    """The check itself, as `make gpu-check` runs it (needs a CUDA GPU; verl's part where verl,
    vLLM and Ray import, else skipped by name)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    out = tmp_path / "report.json"
    argv = [sys.executable, "scripts/gpu_check.py", "--out", str(out)]
    argv += ["--workdir", str(tmp_path / "work")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=640)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["parts"]["loop"]["status"] == "passed"
    assert report["parts"]["verl"]["status"] in ("passed", "skipped")
