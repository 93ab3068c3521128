"""`llm-replay compare` / `report` end to end at a tiny budget, and the experiment file checks."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from llm_replay.cli import main
from llm_replay.config import ConfigError
from llm_replay.experiments.compare import load_experiment

ROOT = Path(__file__).resolve().parents[2]
TINY_SET = """
  - generation.prompts_per_step=4
  - generation.group_size=4
  - train.batch_size=16
  - eval.size=16
  - eval.pass_size=4
  - eval.pass_k=[1,2,4]
  - task.train_size=300
  - task.eval_size=16
"""


def write_experiment(tmp_path: Path, seeds: str = "[0, 1]") -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"""
name: tiny
out: {tmp_path / "out"}
seeds: {seeds}
budget: 1.5
eval_every: 0.5
baseline: on_policy
set: {TINY_SET}
methods:
  on_policy: {{config: on_policy}}
  uniform:   {{config: uniform, set: [replay.capacity=64]}}
  auto5:     {{config: compute_optimal, set: [replay.mu=5]}}
quick:
  seeds: [0]
  methods: [on_policy, auto5]
"""
    )
    return path


def test_compare_then_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    experiment = write_experiment(tmp_path)
    assert main(["compare", str(experiment), "--quiet"]) == 0
    out = tmp_path / "out" / "full"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["methods"]) == {"on_policy", "uniform", "auto5"}
    base = summary["methods"]["on_policy"]
    assert base["seeds"] == 2
    for name, stats in summary["methods"].items():  # ratio = median of the paired seed ratios
        for basis, per_seed in stats["compute_to_target_ratio_per_seed"].items():
            ratio = stats["compute_to_target_ratio"][basis]
            finite = [math.inf if r is None else r for r in per_seed]
            median = float(np.median(finite))
            assert (ratio is None) == math.isinf(median), (name, basis)
            if ratio is not None:
                assert ratio == pytest.approx(median)
    for stats in summary["methods"].values():
        assert set(stats["compute_to_target_ratio"]) >= {
            "measured",
            "mu_5",
            "rollouts",
            "mu_0.5",
            "mu_10",
        }
        assert {"pass@1", "pass@2", "pass@4", "entropy", "mu_measured"} <= set(stats)
    for png in (
        "accuracy_vs_compute",
        "accuracy_vs_steps",
        "entropy_vs_compute",
        "pass_at_k",
        "ratio_vs_mu",
        "delta_vs_compute",
    ):
        assert (out / f"{png}.png").stat().st_size > 10_000
    # auto planned for μ = 5 starts at the prior y = 5 / (ρ + 1/x) = 5 / (1 + 1/8); once it has
    # measured ρ it follows the run
    log = [
        json.loads(line)
        for line in (out / "auto5" / "seed-0" / "metrics.jsonl").read_text().splitlines()
    ]
    ratios = [r["replay/auto_ratio"] for r in log if r["kind"] == "train"]
    assert ratios and ratios[0] == pytest.approx(5 / 1.125)
    assert all(1.0 <= r <= 8.0 for r in ratios)
    assert (out / "replay_dynamics.png").stat().st_size > 10_000
    (out / "summary.json").unlink()
    assert main(["report", str(experiment)]) == 0
    assert (
        json.loads((out / "summary.json").read_text())["methods"].keys()
        == summary["methods"].keys()
    )
    # finished runs are not re-run
    before = (out / "uniform" / "seed-1" / "summary.json").stat().st_mtime
    assert main(["compare", str(experiment), "--quiet"]) == 0
    assert (out / "uniform" / "seed-1" / "summary.json").stat().st_mtime == before


def write_archived_experiment(tmp_path: Path, archive: Path) -> Path:
    """Three runs with an archive: on-policy seeds 0 and 1, uniform seed 0."""
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"""
name: tiny
out: {tmp_path / "out"}
archive: {archive}
seeds: [0]
budget: 1.0
eval_every: 0.5
baseline: on_policy
set: {TINY_SET}
methods:
  on_policy: {{config: on_policy, seeds: [0, 1]}}
  uniform:   {{config: uniform, set: [replay.capacity=64]}}
"""
    )
    return path


def test_method_seeds_archive_and_partial_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    archive = tmp_path / "archive"
    path = write_archived_experiment(tmp_path, archive)
    experiment = load_experiment(path)
    assert [(m.name, s) for m, s in experiment.planned()] == [
        ("on_policy", 0),
        ("uniform", 0),
        ("on_policy", 1),
    ]
    assert main(["compare", str(path), "--quiet"]) == 0
    out = tmp_path / "out" / "full"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["on_policy"]["seeds"] == 2
    assert summary["methods"]["uniform"]["seed_ids"] == [0]
    assert summary["experiment"]["unfinished_runs"] == []
    for run in ("on_policy/seed-0", "on_policy/seed-1", "uniform/seed-0"):
        archived = archive / run
        assert (archived / "summary.json").is_file()
        assert (archived / "metrics.jsonl.gz").stat().st_size < (
            out / run / "metrics.jsonl"
        ).stat().st_size
    # a new machine: only the archive is left; report restores the runs and draws the same
    import shutil

    shutil.rmtree(tmp_path / "out")
    assert main(["report", str(path)]) == 0
    again = json.loads((out / "summary.json").read_text())
    assert (
        again["methods"]["uniform"]["final_accuracy"]
        == summary["methods"]["uniform"]["final_accuracy"]
    )
    assert again["target_accuracy"] == summary["target_accuracy"]
    # a run not finished anywhere is listed, and the report draws the rest
    shutil.rmtree(archive / "uniform")
    shutil.rmtree(out / "uniform")
    assert main(["report", str(path)]) == 0
    partial = json.loads((out / "summary.json").read_text())
    assert set(partial["methods"]) == {"on_policy"}
    assert partial["experiment"]["unfinished_runs"] == ["uniform/seed-0"]
    capsys.readouterr()
    assert main(["report", str(path), "--markdown"]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("| method | seeds | final acc")
    assert "| on_policy | 2 |" in markdown and "Not finished yet (1): uniform/seed-0" in markdown
    head, _, row = (line.split(" | ") for line in markdown.splitlines()[:3])
    assert row[head.index("y")] == "1.00"  # on-policy trains each generated token once
    assert row[head.index("Δ acc at equal μ5")] == "+0.0 [+0.0, +0.0]"  # itself, paired by seed


def test_parts_split_the_runs_without_overlap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    path = write_archived_experiment(tmp_path, tmp_path / "archive")
    out = tmp_path / "out" / "full"
    finished = lambda: sorted(  # noqa: E731
        str(p.parent.relative_to(out)) for p in out.glob("*/seed-*/summary.json")
    )
    assert main(["compare", str(path), "--quiet", "--part", "2/2"]) == 0  # no baseline yet
    assert finished() == ["uniform/seed-0"] and not (out / "summary.json").exists()
    assert main(["compare", str(path), "--quiet", "--part", "1/2"]) == 0
    assert finished() == ["on_policy/seed-0", "on_policy/seed-1", "uniform/seed-0"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["experiment"]["unfinished_runs"] == []
    assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == ["on_policy", "uniform"]
    # a run whose baseline run of the same seed is not finished waits, listed, out of the table
    import shutil

    for root in (out, tmp_path / "archive"):
        shutil.rmtree(root / "on_policy" / "seed-0")
    assert main(["report", str(path)]) == 0
    partial = json.loads((out / "summary.json").read_text())
    assert set(partial["methods"]) == {"on_policy"}
    assert partial["methods"]["on_policy"]["seed_ids"] == [1]
    assert partial["experiment"]["unfinished_runs"] == [
        "on_policy/seed-0",
        "uniform/seed-0 (its on_policy run is not finished)",
    ]


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "2"])
def test_bad_part_is_refused(text: str) -> None:
    from llm_replay.experiments.compare import parse_part

    with pytest.raises(ConfigError, match="--part"):
        parse_part(text)


def test_method_seeds_must_pair_with_the_baseline(tmp_path: Path) -> None:
    path = write_experiment(tmp_path)
    text = path.read_text().replace(
        "set: [replay.capacity=64]}", "set: [replay.capacity=64], seeds: [0, 7]}"
    )
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"methods.uniform.seeds: \[7\] not among the baseline"):
        load_experiment(path)


def test_quick_selects_methods_and_seeds(tmp_path: Path) -> None:
    experiment = load_experiment(write_experiment(tmp_path), quick=True)
    assert [m.name for m in experiment.methods] == ["on_policy", "auto5"]
    assert experiment.seeds == (0,) and experiment.out.name == "quick"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("methods: {}\nbudget: 1\neval_every: 1", "at least one method"),
        ("methods: {a: {config: on_policy}}\nbudget: 0\neval_every: 1", "budget = 0"),
        (
            "methods: {a: {config: on_policy}}\nbudget: 1\neval_every: 1\nbaseline: b",
            "baseline = 'b'",
        ),
        ("methods: {a: 3}\nbudget: 1\neval_every: 1", "methods.a: expected a mapping"),
        ("method: {}", "unknown key"),
        (
            "methods: {a: {config: on_policy}}\nbudget: 1\neval_every: 1\nseeds: []",
            "seeds = \\[\\]",
        ),
        ("methods: {a: {config: x, backend: verl}}\nbudget: 1\neval_every: 1", "backend = 'verl'"),
        (
            "methods: {a: {config: x, sett: []}}\nbudget: 1\neval_every: 1",
            r"unknown key.*sett.*; did you mean 'methods\.a\.set'\?",
        ),
        (
            "methods: {a: {config: on_policy}}\nbudget: 1\neval_every: 1\nbaselin: a",
            r"unknown key\(s\) \['baselin'\]; expected .*; did you mean 'baseline'\?",
        ),
        (
            "methods: {on_policy: {config: on_policy}}\nbudget: 1\neval_every: 1\nbaseline: on_polcy",
            r"baseline = 'on_polcy': not among the methods; did you mean 'on_policy'\?",
        ),
        (
            "methods: {a: {config: x, backend: trll}}\nbudget: 1\neval_every: 1",
            r"backend = 'trll': choose one of .*; did you mean 'trl'\?",
        ),
        (
            "methods: {a: {config: nowhere}}\nbudget: 1\neval_every: 1",
            r"methods\.a\.config 'nowhere': no preset of that name .* and no file .*nowhere",
        ),
    ],
)
def test_bad_experiment_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_experiment(path)


def test_auto_ratio_rule() -> None:
    from llm_replay.methods import MethodContext
    from llm_replay.methods.compute_optimal import ComputeOptimalConfig, ComputeOptimalReplay

    context = MethodContext(batch_size=16, rollouts_per_step=16)
    auto = ComputeOptimalReplay(ComputeOptimalConfig(rho=0.5, horizon=4, max_ratio=8), context)
    assert auto.choose_ratio(None) == 1.0  # nothing measured yet: on-policy rate
    assert auto.choose_ratio(0.4) == 1.0  # cheap generation: no reuse
    assert auto.choose_ratio(3.0) == pytest.approx(4.0)
    assert auto.choose_ratio(100.0) == 8.0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_experiment_from_scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make experiment-quick` (≤ 15 min on 2 cores): summary and plots from scratch."""
    monkeypatch.chdir(ROOT)
    assert (
        main(["compare", "configs/experiment.yaml", "--quick", "--quiet", "--out", str(tmp_path)])
        == 0
    )
    summary = json.loads((tmp_path / "quick" / "summary.json").read_text())
    assert len(summary["methods"]) == 4
    base = summary["methods"]["on_policy"]["compute_to_target"]
    for stats in summary["methods"].values():  # one seed: the ratio is the quotient of costs
        for basis, ratio in stats["compute_to_target_ratio"].items():
            cost = stats["compute_to_target"][basis]
            assert (ratio is None) == (cost is None)
            if ratio is not None:
                assert ratio == pytest.approx(cost / base[basis])


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize(
    "name", ["experiment", "experiment_spell", "experiment_async", "experiment_mixture"]
)
def test_shipped_experiment_file_validates(
    name: str, quick: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llm_replay.experiments.compare import run_config

    monkeypatch.chdir(ROOT)
    experiment = load_experiment(f"configs/{name}.yaml", quick=quick)
    assert experiment.budget_basis == "mu_5" and experiment.baseline == "on_policy"
    for method in experiment.methods:
        config = run_config(experiment, method, experiment.seeds[0])
        assert config.train.compute_budget == experiment.budget_of(method)
        if method.extends is None and method.budget is not None:
            # a method run from scratch to a longer budget: one of the continued baselines
            # (`--baseline on_policy_2x`, say) was run to the same budget
            longer = {m.budget for m in experiment.methods if m.extends is not None}
            assert method.budget in longer, method.name
        elif method.extends is None:
            assert method.budget is None  # every compared method runs the experiment's budget
        else:  # a continuation of one of them, to a whole multiple of the budget
            multiple = config.train.compute_budget / experiment.budget
            assert multiple == int(multiple) >= 2
            assert method.name.endswith(f"_{int(multiple)}x")
        if name == "experiment_spell":  # the task and its model are set for every method
            assert config.task.dataset == "spell_backward"
            assert config.model.path == "builtin:tiny-spell-backward"


@pytest.mark.parametrize("quick", [False, True])
def test_shipped_trl_experiment_file_validates(
    quick: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llm_replay.experiments.compare import run_config

    monkeypatch.chdir(ROOT)
    experiment = load_experiment("configs/experiment_trl.yaml", quick=quick)
    assert experiment.baseline == "trl_on_policy" and experiment.budget_basis == "mu_5"
    backends = {m.name: m.backend for m in experiment.methods}
    assert backends["trl_on_policy"] == "trl" and backends["native_on_policy"] == "native"
    for method in experiment.methods:
        assert run_config(experiment, method, 0).train.compute_budget == experiment.budget


def test_trl_backend_refuses_what_it_cannot_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from llm_replay.experiments.compare import run_config

    monkeypatch.chdir(ROOT)
    path = tmp_path / "exp.yaml"
    path.write_text(
        "methods: {tis: {config: uniform, backend: trl, "
        "set: [algorithm.loss=tis]}}\nbudget: 1\neval_every: 1"
    )
    experiment = load_experiment(path)
    with pytest.raises(ConfigError, match=r"methods.tis: algorithm.loss = 'tis'"):
        run_config(experiment, experiment.methods[0], 0)


def test_an_archive_made_under_another_protocol_is_refused(tmp_path: Path) -> None:
    from llm_replay.experiments.archive import ArchiveMismatch, archive_run, restore_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"kind": "eval", "iteration": 0}\n')
    made = {"train": {"compute_budget": 4.5e6, "seed": 0}, "task": {"dataset": "spell_backward"}}
    archive = tmp_path / "archive"
    assert archive_run(run, archive, "on_policy", 0, made) is not None
    later = {
        "train": {"compute_budget": 9e6, "seed": 0},
        "task": {"dataset": "spell_backward", "reward": "binary"},  # a key added since: ignored
    }
    with pytest.raises(ArchiveMismatch, match=r"train.compute_budget: 4500000.0 -> 9000000.0"):
        restore_run(archive, tmp_path / "elsewhere", "on_policy", 0, later)
    assert not (tmp_path / "elsewhere").exists()
    later["train"]["compute_budget"] = 4.5e6
    assert restore_run(archive, tmp_path / "elsewhere", "on_policy", 0, later)
    assert (tmp_path / "elsewhere" / "summary.json").is_file()


def write_extended_experiment(tmp_path: Path) -> Path:
    """On-policy at a rollouts budget, the same run to twice the budget by continuing it, and
    twice the budget from scratch: the continued run must log what the one from scratch does."""
    path = tmp_path / "exp.yaml"
    on_policy = "on_policy"
    path.write_text(
        f"""
name: tiny
out: {tmp_path / "out"}
seeds: [0]
budget: 32
budget_basis: rollouts
eval_every: 16
baseline: on_policy
set: {TINY_SET}
methods:
  on_policy:      {{config: {on_policy}}}
  on_policy_long: {{config: {on_policy}, budget: 64, extends: on_policy}}
  from_scratch:   {{config: {on_policy}, budget: 64}}
quick:
  budget: 16
"""
    )
    return path


def test_an_extended_method_continues_the_finished_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import llm_replay.terminal as training

    monkeypatch.chdir(ROOT)
    path = write_extended_experiment(tmp_path)
    resumed: list[tuple[str, bool]] = []
    real = training.run_training

    def spy(config: object, **kwargs: object) -> object:
        resumed.append((config.name, bool(kwargs.get("resume"))))  # type: ignore[attr-defined]
        return real(config, **kwargs)

    monkeypatch.setattr(training, "run_training", spy)
    assert main(["compare", str(path), "--quiet", "--methods", "on_policy_long"]) == 0
    assert resumed == [("on_policy_long", False)]  # nothing to continue yet: from scratch
    out = tmp_path / "out" / "full"
    (out / "on_policy_long").rename(tmp_path / "first_long")
    assert not (out / "summary.json").exists()  # no baseline run yet: nothing compared

    resumed.clear()
    assert main(["compare", str(path), "--quiet"]) == 0
    assert resumed == [("on_policy", False), ("on_policy_long", True), ("from_scratch", False)]

    def trace(run: Path) -> list[tuple[object, ...]]:
        keys = ("kind", "iteration", "steps", "eval/accuracy", "loss/policy", "reward/mean")
        keys += ("compute/rollouts_generated", "compute/tokens_generated")
        lines = (run / "metrics.jsonl").read_text().splitlines()
        return [tuple(json.loads(line).get(k) for k in keys) for line in lines]

    continued = trace(out / "on_policy_long" / "seed-0")
    assert continued == trace(out / "from_scratch" / "seed-0")
    assert continued == trace(tmp_path / "first_long" / "seed-0")
    assert len(continued) > len(trace(out / "on_policy" / "seed-0"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["on_policy_long"]["compute_to_target_ratio"]["rollouts"] == 1.0

    # read against the longer baseline: its final accuracy is the target
    capsys.readouterr()
    assert main(["report", str(path), "--baseline", "on_policy_long"]) == 0
    other = json.loads((out / "against_on_policy_long" / "summary.json").read_text())
    assert (out / "against_on_policy_long" / "accuracy_vs_compute.png").is_file()
    assert other["baseline"] == "on_policy_long"
    assert (
        other["target_accuracy"] == summary["methods"]["on_policy_long"]["final_accuracy"]["median"]
    )
    assert json.loads((out / "summary.json").read_text())["baseline"] == "on_policy"
    from llm_replay.experiments.compare import with_baseline

    with pytest.raises(ConfigError, match="baseline = 'nope'"):
        with_baseline(load_experiment(path), "nope")
    capsys.readouterr()
    assert main(["compare", str(path), "--quiet", "--methods", "nope"]) == 2
    assert "methods = ['nope']: name one or more of" in capsys.readouterr().out
    quick = load_experiment(path, quick=True)
    assert {m.name: quick.budget_of(m) for m in quick.methods} == {
        "on_policy": 16.0,
        "on_policy_long": 32.0,
        "from_scratch": 32.0,
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{config: on_policy, extends: nope}", "must name another method"),
        ("{config: on_policy, extends: long}", "must name another method"),
        ("{config: on_policy, extends: base, set: [train.lr=0.1]}", "only the budget"),
        ("{config: uniform, extends: base}", "only the budget"),
        ("{config: on_policy, extends: base, budget: 1}", "is below base's"),
        ("{config: on_policy, extends: base, seeds: [0, 1]}", r"seeds \[1\]"),
        ("{config: on_policy, budget: 0}", r"methods.long.budget = 0"),
    ],
)
def test_bad_extensions_are_refused(tmp_path: Path, spec: str, message: str) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "budget: 2\neval_every: 1\nseeds: [0, 1]\nmethods:\n"
        "  reference: {config: on_policy}\n"
        "  base: {config: on_policy, seeds: [0]}\n"
        f"  long: {spec}\n"
    )
    with pytest.raises(ConfigError, match=message):
        load_experiment(path)


def test_a_methods_own_setting_wins_over_the_experiments(tmp_path: Path) -> None:
    from llm_replay.experiments.compare import load_experiment, run_config

    experiment = load_experiment(write_experiment(tmp_path))
    # TINY_SET sets train.batch_size=16 for every method; uniform sets replay.capacity=64
    widened = dataclasses.replace(
        experiment.method("uniform"), overrides=("replay.capacity=64", "train.batch_size=32")
    )
    assert run_config(experiment, widened, 0).train.batch_size == 32
    assert run_config(experiment, experiment.method("on_policy"), 0).train.batch_size == 16


@pytest.mark.parametrize("name", ["experiment_preference", "experiment_rlhf_spell"])
def test_the_shipped_preference_and_stale_reward_experiments_validate(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llm_replay.experiments.compare import run_config

    monkeypatch.chdir(ROOT)
    for quick in (False, True):
        experiment = load_experiment(f"configs/{name}.yaml", quick=quick)
        for method in experiment.methods:
            config = run_config(experiment, method, experiment.seeds[0])
            assert config.train.compute_budget == experiment.budget_of(method)


def test_a_preference_comparison_reads_on_the_annotations_basis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"""
name: tiny_preference
out: {tmp_path / "out"}
seeds: [0]
budget_basis: mu_5
budget: 3000
eval_every: 1000
baseline: dpo
bases: [annotations, mu_5]
set: {TINY_SET}
methods:
  dpo: {{config: dpo, set: [preference.batch_pairs=6]}}
  dpo_replay: {{config: dpo_replay, set: [preference.batch_pairs=6, generation.prompts_per_step=2]}}
  grpo: {{config: on_policy}}
"""
    )
    assert main(["compare", str(path), "--quiet"]) == 0
    out = tmp_path / "out" / "full"
    summary = json.loads((out / "summary.json").read_text())
    assert "annotations" in summary["methods"]["dpo_replay"]["compute_to_target_ratio"]
    assert (out / "accuracy_vs_annotations.png").stat().st_size > 10_000


def test_a_mistyped_method_or_baseline_gets_the_nearest_name(tmp_path: Path) -> None:
    from llm_replay.experiments.compare import planned_runs, with_baseline

    experiment = load_experiment(write_experiment(tmp_path))
    with pytest.raises(ConfigError, match=r"methods = \['unifrom'\]: .*did you mean 'uniform'\?"):
        planned_runs(experiment, ["unifrom"])
    with pytest.raises(ConfigError, match=r"baseline = 'on_polcy': .*did you mean 'on_policy'\?"):
        with_baseline(experiment, "on_polcy")


@pytest.mark.parametrize("part", ["1/1", "1/2"])
def test_a_row_trl_cannot_run_is_refused_before_any_run_whichever_part(
    part: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #54: `{config: dpo, backend: trl}` trained the rows before it, then TRLRun raised a
    ValueError traceback. TRL's mapping now refuses a preference config, and every row is checked
    before the first run, even one another part (here part 2 of 2) would run."""
    monkeypatch.chdir(ROOT)
    path = write_experiment(tmp_path, seeds="[0]")
    path.write_text(
        path.read_text().replace("quick:", "  trl_dpo: {config: dpo, backend: trl}\nquick:")
    )
    assert main(["compare", str(path), "--quiet", "--part", part]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "Traceback" not in out
    assert out.startswith("error: methods.trl_dpo: preference.enabled = true: backend 'trl' runs")
    assert not (tmp_path / "out").exists()
