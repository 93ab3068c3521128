"""`backend: trl` in `llm-replay compare`: TRL rows logged and summarised like native ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_replay.algorithms.token_control import TokenControl
from llm_replay.cli import main
from llm_replay.config import ConfigError, load_config
from llm_replay.experiments.analysis import RunCurves
from llm_replay.integrations.trl.runner import trl_arguments

ROOT = Path(__file__).resolve().parents[2]


def test_compare_runs_trl_and_native_rows_side_by_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        f"""
name: tiny_trl
out: {tmp_path / "out"}
seeds: [0]
budget_basis: mu_5
budget: 6000
eval_every: 2000
baseline: trl_on_policy
set: [generation.prompts_per_step=4, generation.group_size=4, train.batch_size=16, eval.size=16,
      eval.pass_size=4, "eval.pass_k=[1,2]", task.train_size=300, task.eval_size=16]
methods:
  trl_on_policy: {{config: on_policy, backend: trl}}
  trl_positive: {{config: positive, backend: trl}}
  native_on_policy: {{config: on_policy}}
"""
    )
    assert main(["compare", str(experiment), "--quiet"]) == 0
    out = tmp_path / "out" / "full"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["methods"]) == {"trl_on_policy", "trl_positive", "native_on_policy"}
    assert summary["experiment"]["methods"]["trl_positive"]["backend"] == "trl"
    for name in ("trl_on_policy", "trl_positive"):
        run = out / name / "seed-0"
        assert json.loads((run / "summary.json").read_text())["backend"] == "trl"
        assert json.loads((run / "trl_args.json").read_text())["loss_type"] == "dapo"
        curves = RunCurves.load(run)
        spent = curves.compute("mu_5")
        assert spent[0] == 0 and spent[-1] >= 6000  # ran to the budget on the μ = 5 basis
        assert len(curves.records) >= 4  # base, every 2000 units, and the end
    positive = RunCurves.load(out / "trl_positive" / "seed-0")
    last = positive.records[-1]
    assert last["compute/rollouts_trained"] == pytest.approx(
        2 * last["compute/rollouts_generated"], rel=0.2
    )
    assert positive.mean_train("train/age_mean") > 0


def test_run_configs_map_onto_trl_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    args = trl_arguments(load_config("positive"), tmp_path)
    assert (args.replay_method, args.replay_loss, args.scale_rewards) == (
        "positive",
        "asymre",
        "none",
    )
    assert args.replay.settings.replay_ratio == 2.0
    assert (args.num_generations, args.generation_batch_size) == (8, 256)
    assert (args.per_device_train_batch_size, args.steps_per_generation) == (256, 1)
    zero = trl_arguments(load_config("zero_variance"), tmp_path)
    assert zero.replay.options["zero_variance"].enabled
    with pytest.raises(ConfigError, match=r"algorithm.aggregation = 'sequence_mean'"):
        trl_arguments(load_config("on_policy", ["algorithm.aggregation=sequence_mean"]), tmp_path)
    controlled = trl_arguments(
        load_config("auto_kl_cov", ["algorithm.positive_weight=0.1"]), tmp_path
    )
    assert controlled.token_control == TokenControl(
        mode="kl_cov", fraction=0.05, coef=1.0, rows="replayed", positive_weight=0.1
    )
    assert not trl_arguments(load_config("positive"), tmp_path).token_control.active
    with pytest.raises(ConfigError, match=r"generation\.skip\.enabled: not with backend 'trl'"):
        trl_arguments(load_config("positive_fixed_set"), tmp_path)
    with pytest.raises(ConfigError, match=r"algorithm\.head_gate: not with backend 'trl'"):
        trl_arguments(load_config("auto_kl_cov_dgg"), tmp_path)
    guarded = load_config("auto_guard", ["train.steps_per_round=1"])
    with pytest.raises(ValueError, match=r"replay_knobs\.anneal\.guard = True: it reads"):
        trl_arguments(guarded, tmp_path)  # TRL's loss cannot split its rows
    # `auto`'s two steps a round are our loop's; TRL's adaptive rollouts take one a generation
    with pytest.raises(ConfigError, match=r"train\.steps_per_round = 2: backend 'trl'"):
        trl_arguments(load_config("auto"), tmp_path)
    one = trl_arguments(load_config("auto_steps1"), tmp_path)
    assert (one.per_device_train_batch_size, one.steps_per_generation) == (256, 1)
    anneal = trl_arguments(load_config("positive_anneal"), tmp_path)
    assert anneal.replay.options["anneal"].enabled  # the replay options reach the TRL trainer


def test_a_preference_run_through_trl_is_refused_with_the_reason(tmp_path: Path) -> None:
    from llm_replay.integrations.trl.runner import TRLRun

    config = load_config("dpo", [f"log.run_dir={tmp_path}"])
    with pytest.raises(ValueError, match="compare does not drive yet"):
        TRLRun(config)


def test_a_mixture_trains_through_trl_with_its_rows_tagged_balanced_and_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TRL front end on a mixture: every dataset row carries its member, the rollouts carry
    it into the table, the table balances and caps them (the per-task buffer metrics in TRL's
    log), and each member is evaluated."""
    from llm_replay.integrations.trl.runner import TASK_COLUMN, TRLRun

    monkeypatch.chdir(ROOT)
    config = load_config(
        "auto",
        [
            f"log.run_dir={tmp_path}",
            "generation.prompts_per_step=4",
            "generation.group_size=4",
            "train.batch_size=16",
            "train.iterations=3",
            "eval.size=16",
            "eval.pass_size=4",
            "eval.pass_k=[1,2]",
            "eval.every=3",
            "task.train_size=300",
            "task.eval_size=16",
            "replay.capacity=64",
            "model.path=builtin:tiny-mixture",
            "task.kind=mixture",
            "task.members={gcd: {weight: 1}, lcm: {weight: 1}}",
            "generation.max_new_tokens=6",
            "replay.tasks.balance=true",
            "replay.tasks.capacity=true",
        ],
    )
    args = trl_arguments(config, tmp_path / "trl")
    assert args.replay_task_column == TASK_COLUMN and args.replay.tasks.balance
    run = TRLRun(config)
    assert run.trainer.tasks is not None and run.trainer.tasks.names == ("gcd", "lcm")
    run.run()
    table = run.trainer.pipeline.method.table
    assert type(table.sampler).__name__ == "TaskBalanced"
    assert type(table.remover).__name__ == "TaskCapacity"
    stats = table.stats()
    assert set(stats.tasks) == {"gcd", "lcm"}
    assert all(t.size <= 32 for t in stats.tasks.values())
    log = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any("replay/buffer/task/gcd/share" in r for r in log if r.get("kind") == "train")
    evals = [r for r in log if r.get("kind") == "eval"]
    assert evals and all("eval/lcm/accuracy" in r for r in evals)
