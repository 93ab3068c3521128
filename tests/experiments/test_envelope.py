"""Against on-policy tuned as a user would tune it (issue #53): the envelope of a baseline sweep,
read on synthetic curves by hand, the experiment file's `baseline_sweep`, and `report` end to end
on runs written as a real one writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_replay.cli import main
from llm_replay.config import ConfigError
from llm_replay.experiments.across_tasks import suite_markdown, suite_summary
from llm_replay.experiments.analysis import RunCurves, compare_methods
from llm_replay.experiments.compare import load_experiment
from llm_replay.experiments.envelope import envelope_reading, leaders_cell
from llm_replay.metrics import MetricsLogger

RISE = [0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5]  # smoothed: ... 0.4, 0.467, 0.5: the final at index 6


def records(accuracies: list[float], cost: float, **final: float) -> list[dict[str, float | str]]:
    """Eval records whose μ = 5 compute grows by `cost` per evaluation (generation only), the
    keys in `final` (`eval/entropy`, ...) on every one."""
    return [
        {
            "kind": "eval",
            "iteration": i,
            "steps": i,
            "eval/accuracy": a,
            "eval/pass@1": a,
            "compute/seconds": float(i),
            "compute/rollouts_generated": 10 * i,
            "compute/tokens_generated": i * cost / 5,
            "compute/completion_tokens_trained": 0.0,
            **final,
        }
        for i, a in enumerate(accuracies)
    ]


def run(name: str, seed: int, accuracies: list[float], cost: float, **final: float) -> RunCurves:
    path = Path("/nowhere") / name / f"seed-{seed}"
    return RunCurves(path, tuple(records(accuracies, cost, **final)), ())


def seeds(
    name: str, accuracies: list[float], cost: float, ids: tuple[int, ...] = (0, 1, 2)
) -> list[RunCurves]:
    return [run(name, s, accuracies, cost) for s in ids]


def test_a_member_twice_as_fast_halves_the_envelope_and_doubles_a_ratio() -> None:
    runs = {
        "on_policy": seeds("on_policy", RISE, 100),
        "fast": seeds("fast", RISE, 50),  # the same curve at half the compute
        "replay": seeds("replay", RISE, 60),
    }
    plain = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
    assert plain["methods"]["replay"]["compute_to_target_ratio"]["mu_5"] == pytest.approx(0.6)
    alone = envelope_reading(runs, baseline="on_policy", sweep=[])  # the baseline alone: plain
    assert alone["members"] == ["on_policy"]
    assert alone["methods"]["replay"]["baseline_final"]["ratio"]["mu_5"] == pytest.approx(0.6)
    tuned = envelope_reading(runs, baseline="on_policy", sweep=["fast"])
    target = tuned["targets"]["baseline_final"]
    assert target["level_per_seed"] == pytest.approx([0.5] * 3)
    assert target["envelope_compute"]["mu_5"] == pytest.approx(300.0)  # fast's, not 600
    assert target["leader_per_seed"]["mu_5"] == ["fast"] * 3
    replay = tuned["methods"]["replay"]["baseline_final"]
    assert replay["ratio"]["mu_5"] == pytest.approx(1.2)  # 0.6x on-policy, 1.2x tuned on-policy
    assert replay["ratio_per_seed"]["mu_5"] == pytest.approx([1.2] * 3)
    assert replay["ratio_ci95"]["mu_5"] == pytest.approx([1.2, 1.2])
    assert tuned["methods"]["on_policy"]["baseline_final"]["ratio"]["mu_5"] == pytest.approx(2.0)
    assert tuned["methods"]["fast"]["baseline_final"]["ratio"]["mu_5"] == pytest.approx(1.0)
    # equal finals: the best member is the first of equals, the baseline
    assert tuned["targets"]["best_member_final"]["best_member_per_seed"] == ["on_policy"] * 3


def test_the_harder_target_and_who_leads_where_along_the_axis() -> None:
    plateau = [0.1, 0.2, 0.3, 0.4, 0.5]
    slow_rise = [0.1 + 0.05 * i for i in range(13)]  # to 0.7; smoothed final 0.65
    runs = {
        "on_policy": [run("on_policy", 0, plateau + [0.5] * 8, 100)],  # all end at 1200
        "fast": [run("fast", 0, plateau + [0.5] * 20, 50)],
        "high": [run("high", 0, slow_rise, 100)],
        "replay": [run("replay", 0, [0.1, 0.2, 0.3, 0.45, 0.55, 0.6] + [0.7] * 10, 80)],
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=["fast", "high"])
    harder = reading["targets"]["best_member_final"]
    assert harder["level_per_seed"] == pytest.approx([0.65])
    assert harder["best_member_per_seed"] == ["high"]
    assert harder["leader_per_seed"]["mu_5"] == ["high"]  # the only member that gets there
    assert harder["envelope_compute_per_seed"]["mu_5"] == pytest.approx([1200.0])
    replay = reading["methods"]["replay"]
    # replay's smoothed accuracy: 0.533 at its 6th eval (400), 0.667 at its 8th (560)
    assert replay["baseline_final"]["ratio"]["mu_5"] == pytest.approx(400 / 300)
    assert replay["best_member_final"]["ratio"]["mu_5"] == pytest.approx(560 / 1200)
    axis = reading["axis"]
    segments = [(s["member"], s["from"], s["to"]) for s in axis["segments"]]
    # grid 15, 30, ..., 1200; ties go to the first listed (on_policy): all three start at 10%,
    # then fast leads, on_policy ties it on the plateau from 600, and high passes 50% at 1000
    assert [s[0] for s in segments] == ["on_policy", "fast", "on_policy", "high"]
    assert segments[1][1:] == pytest.approx((60.0, 585.0))
    assert segments[3][1:] == pytest.approx((1005.0, 1200.0))
    assert axis["leader"][-1] == "high" and axis["envelope_accuracy"][-1] == pytest.approx(0.65)
    assert len(axis["grid"]) == len(axis["leader"]) == 80
    # points led: on_policy 3 + 27, fast 36, high 14 of 80; the most of each quarter's 20
    assert axis["share"] == pytest.approx({"fast": 0.45, "on_policy": 0.375, "high": 0.175})
    assert axis["quarters"] == ["fast", "fast", "on_policy", "high"]


def test_seeds_are_paired_with_their_own_envelope() -> None:
    fast = [run("fast", s, RISE, 150 if s == 1 else 50) for s in range(3)]  # slow on seed 1
    runs = {
        "on_policy": seeds("on_policy", RISE, 100),
        "fast": fast,
        "replay": seeds("replay", RISE, 60),
        "one_seed": [run("one_seed", 1, RISE, 60)],
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=["fast"])
    target = reading["targets"]["baseline_final"]
    assert target["envelope_compute_per_seed"]["mu_5"] == pytest.approx([300.0, 600.0, 300.0])
    assert target["leader_per_seed"]["mu_5"] == ["fast", "on_policy", "fast"]
    replay = reading["methods"]["replay"]["baseline_final"]
    assert replay["ratio_per_seed"]["mu_5"] == pytest.approx([1.2, 0.6, 1.2])
    assert replay["ratio"]["mu_5"] == pytest.approx(1.2)
    one = reading["methods"]["one_seed"]
    assert one["seed_ids"] == [1]
    assert one["baseline_final"]["ratio_per_seed"]["mu_5"] == pytest.approx([0.6])
    assert leaders_cell(reading, "one_seed") == "on_policy 1/1"
    assert leaders_cell(reading, "replay") == "fast 2/3, on_policy 1/3"


def test_never_reached_counts_as_infinite() -> None:
    runs = {
        "on_policy": seeds("on_policy", RISE, 100),
        "fast": seeds("fast", RISE, 50),
        "flat": seeds("flat", [0.1] * 7, 100),
        "late": [run("late", s, [0.1] * 7 if s == 2 else RISE, 60) for s in range(3)],
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=["fast"])
    flat = reading["methods"]["flat"]["baseline_final"]
    assert flat["ratio"]["mu_5"] is None
    assert flat["ratio_per_seed"]["mu_5"] == [None] * 3
    assert flat["never_reached_seeds"]["mu_5"] == 3
    late = reading["methods"]["late"]["baseline_final"]
    assert late["ratio_per_seed"]["mu_5"][:2] == pytest.approx([1.2, 1.2])
    assert late["ratio_per_seed"]["mu_5"][2] is None
    assert late["ratio"]["mu_5"] == pytest.approx(1.2)  # the median seed got there
    assert late["ratio_ci95"]["mu_5"][1] is None  # some resamples' medians never do


def test_a_member_without_every_seed_is_left_out_and_named() -> None:
    runs = {
        "on_policy": seeds("on_policy", RISE, 100),
        "fast": seeds("fast", RISE, 50, ids=(0, 1)),  # seed 2 still running
        "lr": seeds("lr", RISE, 80),
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=["fast", "lr", "gone"])
    assert reading["members"] == ["on_policy", "lr"]
    assert reading["members_left_out"] == {
        "fast": "no finished run of seed(s) [2]",
        "gone": "no finished run of seed(s) [0, 1, 2]",
    }
    assert reading["targets"]["baseline_final"]["envelope_compute"]["mu_5"] == pytest.approx(480)


def test_a_suite_reads_every_task_against_its_envelope() -> None:
    summaries = {}
    for task, fast_cost in (("gcd", 50), ("products", 100)):
        runs = {
            "on_policy": seeds("on_policy", RISE, 100),
            "fast": seeds("fast", RISE, fast_cost),
            "replay": seeds("replay", RISE, 60),
        }
        summary = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
        summary["envelope"] = envelope_reading(runs, baseline="on_policy", sweep=["fast"])
        summaries[task] = summary
    reading = suite_summary(summaries, "on_policy", {"gcd": 0.1, "products": 0.1})
    gcd = reading["tasks"]["gcd"]["envelope"]
    assert gcd["first_to_target_per_seed"] == ["fast"] * 3
    assert gcd["baseline_vs_tuned_per_seed"] == pytest.approx([2.0] * 3)
    # equal times on products: the first listed, the baseline
    assert reading["tasks"]["products"]["envelope"]["first_to_target_per_seed"] == ["on_policy"] * 3
    rows = reading["methods"]["replay"]["tasks"]
    assert rows["gcd"]["ratio"] == pytest.approx(0.6)
    assert rows["gcd"]["vs_tuned"]["ratio_per_seed"] == pytest.approx([1.2] * 3)
    assert rows["products"]["vs_tuned"]["ratio"] == pytest.approx(0.6)
    across = reading["methods"]["replay"]["across"]["vs_tuned"]
    assert across["median_ratio"] == pytest.approx(0.9) and across["worst_ratio"] == 1.2
    text = suite_markdown(reading)
    assert "| replay | 0.60× | 0.90× [0.90–0.90×] | 0% | 1.20× | 0.90× |" in text
    row = "| replay | gcd | 0.60× | 1.20× [1.20–1.20×] | 0: 1.20×, 1: 1.20×, 2: 1.20× | fast 3/3 |"
    assert row in text


def test_the_tuned_member_is_the_one_setting_a_user_would_pick() -> None:
    runs = {
        "on_policy": seeds("on_policy", RISE, 100),  # reaches at 600 on every seed
        "a": [run("a", s, RISE, 150 if s == 2 else 50) for s in range(3)],  # lucky on 0 and 1
        "b": [run("b", s, RISE, 50 if s == 2 else 150) for s in range(3)],  # lucky on 2
        "replay": seeds("replay", RISE, 60),  # reaches at 360
    }
    reading = envelope_reading(runs, baseline="on_policy", sweep=["a", "b"])
    envelope = reading["methods"]["replay"]["baseline_final"]["ratio_per_seed"]["mu_5"]
    assert envelope == pytest.approx([1.2, 1.2, 1.2])  # the best member on each seed: 300
    tuned = reading["tuned_member"]
    assert tuned["member"] == {"mu_5": "a"}  # median 300, where b's is 900 and on-policy's 600
    replay = tuned["methods"]["replay"]
    assert replay["ratio_per_seed"]["mu_5"] == pytest.approx([1.2, 1.2, 0.4])
    assert replay["ratio"]["mu_5"] == pytest.approx(1.2)
    assert tuned["methods"]["on_policy"]["ratio_per_seed"]["mu_5"] == pytest.approx([2, 2, 2 / 3])


def test_a_tuned_member_that_never_reaches_stands_in_with_its_whole_run() -> None:
    runs = {
        "on_policy": seeds("on_policy", RISE, 100),
        "fast": [run("fast", s, [0.1] * 7 if s == 1 else RISE, 50) for s in range(3)],
        "replay": seeds("replay", RISE, 60),
        "flat": seeds("flat", [0.1] * 7, 100),
    }
    tuned = envelope_reading(runs, baseline="on_policy", sweep=["fast"])["tuned_member"]
    assert tuned["member"] == {"mu_5": "fast"}  # never on seed 1, but the median seed reaches
    # seed 1: fast's whole run (300) stands in, so 360 / 300 bounds the ratio from above
    assert tuned["methods"]["replay"]["ratio_per_seed"]["mu_5"] == pytest.approx([1.2, 1.2, 1.2])
    assert tuned["methods"]["flat"]["ratio_per_seed"]["mu_5"] == [None] * 3


def test_a_suite_reads_every_task_against_its_tuned_member() -> None:
    summaries = {}
    for task, lucky in (("gcd", 2), ("products", 0)):
        runs = {
            "on_policy": seeds("on_policy", RISE, 100),
            "a": [run("a", s, RISE, 150 if s == lucky else 50) for s in range(3)],
            "b": [run("b", s, RISE, 50 if s == lucky else 150) for s in range(3)],
            "replay": seeds("replay", RISE, 60),
        }
        summary = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
        summary["envelope"] = envelope_reading(runs, baseline="on_policy", sweep=["a", "b"])
        summaries[task] = summary
    reading = suite_summary(summaries, "on_policy", {"gcd": 0.1, "products": 0.1})
    assert reading["tasks"]["gcd"]["envelope"]["tuned_member"] == "a"
    gcd = reading["methods"]["replay"]["tasks"]["gcd"]["vs_tuned"]
    assert gcd["member_ratio_per_seed"] == pytest.approx([1.2, 1.2, 0.4])
    across = reading["methods"]["replay"]["across"]["vs_tuned"]
    assert across["median_ratio"] == pytest.approx(1.2)  # the envelope: 300 on every seed
    assert across["median_member_ratio"] == pytest.approx(1.2)
    assert across["worst_member_ratio"] == pytest.approx(1.2)
    text = suite_markdown(reading)
    assert "| gcd | 3 | 0: a, 1: a, 2: b |" in text and "| a |" in text
    assert "| 1.20× (1.20×, 1.20×, 0.40×) |" in text


def test_diversity_is_read_against_the_tuned_member_as_well() -> None:
    """A tuned member that buys its speed with entropy: replay below plain on-policy's entropy
    is read as kept against the member a user would run, and the suite counts both."""
    summaries = {}
    for task in ("gcd", "products"):
        entropy = {"on_policy": 0.70, "steps2": 0.60, "replay": 0.65}
        pass8 = {"on_policy": 0.60, "steps2": 0.58, "replay": 0.62 if task == "gcd" else 0.55}
        cost = {"on_policy": 100, "steps2": 50, "replay": 30}

        runs = {
            name: [
                run(name, s, RISE, cost[name], **{"eval/entropy": h + 0.01 * s, "eval/pass@8": p})
                for s in range(3)
            ]
            for name, h, p in ((n, entropy[n], pass8[n]) for n in cost)
        }
        summary = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
        summary["envelope"] = envelope_reading(runs, baseline="on_policy", sweep=["steps2"])
        summaries[task] = summary
    reading = suite_summary(summaries, "on_policy", {"gcd": 0.1, "products": 0.1})
    gcd = reading["methods"]["replay"]["tasks"]["gcd"]
    assert gcd["entropy_kept"] is False  # 0.66 under plain on-policy's 0.70-0.72
    assert gcd["vs_tuned"]["entropy_kept_vs_member"] is True  # over the member's 0.60-0.62
    assert gcd["vs_tuned"]["pass_raised_vs_member"] is True
    products = reading["methods"]["replay"]["tasks"]["products"]["vs_tuned"]
    assert products["pass_kept_vs_member"] is False
    across = reading["methods"]["replay"]["across"]["vs_tuned"]
    assert across["diversity_tasks"] == 2
    assert across["entropy_kept_vs_member"] == 2 and across["pass_kept_vs_member"] == 1
    assert across["pass_raised_vs_member"] == 1
    text = suite_markdown(reading)
    assert "| 2/2 · 1/2 (1) |" in text
    assert "| raised · raised |" in text and "| raised · below |" in text


def test_diversity_not_measured_is_not_counted() -> None:
    runs = {"on_policy": seeds("on_policy", RISE, 100), "replay": seeds("replay", RISE, 60)}
    runs["fast"] = seeds("fast", RISE, 50)
    summary = compare_methods(runs, baseline="on_policy", bases=["mu_5"])
    summary["envelope"] = envelope_reading(runs, baseline="on_policy", sweep=["fast"])
    reading = suite_summary({"gcd": summary}, "on_policy", {"gcd": 0.1})
    assert "diversity_tasks" not in reading["methods"]["replay"]["across"]["vs_tuned"]
    assert (
        reading["methods"]["replay"]["tasks"]["gcd"]["vs_tuned"]["entropy_kept_vs_member"] is None
    )


# --- the experiment file ------------------------------------------------------------------


def write(tmp_path: Path, sweep: str, lr_seeds: str = "") -> Path:
    path = tmp_path / "exp.yaml"
    own = f", seeds: {lr_seeds}" if lr_seeds else ""
    path.write_text(
        f"""
out: {tmp_path / "out"}
seeds: [0, 1, 2]
budget: 600
budget_basis: mu_5
eval_every: 100
baseline: on_policy
methods:
  on_policy:    {{config: on_policy}}
  on_policy_lr: {{config: on_policy, set: [optim.lr=1e-4]{own}}}
  replay:       {{config: uniform}}
quick:
  seeds: [0]
  methods: [on_policy, replay]
{sweep}
"""
    )
    return path


@pytest.mark.parametrize(
    ("sweep", "lr_seeds", "message"),
    [
        ("baseline_sweep: on_policy_lr", "", r"baseline_sweep = 'on_policy_lr': must be a .*list"),
        ("baseline_sweep: []", "", r"baseline_sweep = \[\]: must be a non-empty list"),
        (
            "baseline_sweep: [on_polcy_lr]",
            "",
            r"baseline_sweep: 'on_polcy_lr' is not among the methods; did you mean 'on_policy_lr'",
        ),
        (
            "baseline_sweep: [on_policy_lr]",
            "[0, 1]",
            r"baseline_sweep: methods\.on_policy_lr does not run the baseline's seed\(s\) \[2\]",
        ),
        ("baseline_sweeps: [on_policy_lr]", "", r"did you mean 'baseline_sweep'"),
    ],
)
def test_a_bad_sweep_is_refused_by_name(
    tmp_path: Path, sweep: str, lr_seeds: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_experiment(write(tmp_path, sweep, lr_seeds))


def test_the_baseline_is_always_a_member(tmp_path: Path) -> None:
    assert load_experiment(write(tmp_path, "")).baseline_sweep == ()
    path = write(tmp_path, "baseline_sweep: [on_policy_lr, on_policy_lr]")
    assert load_experiment(path).baseline_sweep == ("on_policy", "on_policy_lr")
    assert load_experiment(path, quick=True).baseline_sweep == ("on_policy",)  # lr not in quick


# --- report end to end ----------------------------------------------------------------------


def write_runs(out: Path, plan: dict[str, tuple[list[float], float]]) -> None:
    """Run directories as a finished run leaves them: metrics.jsonl and summary.json."""
    for name, (accuracies, cost) in plan.items():
        for seed in (0, 1, 2):
            run_dir = out / name / f"seed-{seed}"
            logger = MetricsLogger(run_dir)
            for record in records(accuracies, cost):
                logger.log(record)
                train = {"kind": "train", "iteration": record["iteration"], "train/age_mean": 0.0}
                logger.log(train)
            logger.close()
            (run_dir / "summary.json").write_text("{}\n")


PLAN = {
    "on_policy": (RISE, 100.0),
    "on_policy_lr": ([0.1, 0.3, 0.5, 0.5, 0.5, 0.5, 0.5], 100.0),  # there at 400
    "replay": (RISE, 60.0),
}


def test_report_reads_an_experiment_against_its_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "baseline_sweep: [on_policy_lr]")
    write_runs(tmp_path / "out" / "full", PLAN)
    assert main(["report", str(path), "--markdown"]) == 0
    printed = capsys.readouterr().out
    head = (
        "vs tuned on-policy mu_5 | first member | vs on_policy_lr mu_5 | vs best tuned final mu_5 |"
    )
    assert head in printed
    assert (
        "| 0.90× [0.90–0.90] | on_policy_lr 3/3 | 0.90× [0.90–0.90] | 0.90× [0.90–0.90] |"
        in printed
    )
    assert "Tuned on-policy: the envelope of on_policy, on_policy_lr" in printed
    assert "Tuned member: on_policy_lr, the one setting a user would pick" in printed
    assert (
        "The sweep moves learning rate ×2 (on_policy_lr). Not swept: gradient steps a round, "
        "group size." in printed
    )
    out = tmp_path / "out" / "full"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["envelope"]["methods"]["replay"]["baseline_final"]["ratio_per_seed"][
        "mu_5"
    ] == pytest.approx([0.9] * 3)
    assert (out / "envelope_vs_compute.png").stat().st_size > 10_000
    assert main(["report", str(path)]) == 0  # the terminal table too
    assert "Tuned on-policy: the envelope of" in capsys.readouterr().out
    # read against a method outside the sweep: the sweep is read around that baseline
    assert main(["report", str(path), "--markdown", "--baseline", "replay"]) == 0
    assert "The sweep moves learning rate ×2 (on_policy_lr)" in capsys.readouterr().out


def test_report_reads_a_suite_against_each_tasks_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "baseline_sweep: [on_policy_lr]\ntasks:\n  gcd:\n  products:")
    for task in ("gcd", "products"):
        write_runs(tmp_path / "out" / task / "full", PLAN)
    assert main(["report", str(path), "--markdown"]) == 0
    printed = capsys.readouterr().out
    assert "| replay | gcd | 0.60× | 0.90× [0.90–0.90×] |" in printed
    assert "| gcd | 2; not swept: gradient steps a round, group size |" in printed
    reading = json.loads((tmp_path / "out" / "suite_summary.json").read_text())
    assert reading["tasks"]["gcd"]["envelope"]["members"] == ["on_policy", "on_policy_lr"]
    assert reading["tasks"]["gcd"]["envelope"]["unswept"] == [
        "train.batch_size",
        "generation.group_size",
    ]
    assert reading["methods"]["replay"]["tasks"]["products"]["vs_tuned"]["ratio"] == pytest.approx(
        0.9
    )
    assert (tmp_path / "out" / "suite_envelope.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "gcd" / "full" / "envelope_vs_compute.png").is_file()


def test_the_shipped_sweep_declares_its_members_on_every_task() -> None:
    from llm_replay.experiments.suite import load_suite

    root = Path(__file__).resolve().parents[2]
    suite = load_suite(root / "configs" / "experiment_suite_sweep.yaml")
    for experiment in suite.tasks.values():
        assert experiment.baseline_sweep == (
            "on_policy",
            "on_policy_steps2",
            "on_policy_lr2x",
            "on_policy_lr_half",
        )
