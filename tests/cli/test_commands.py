"""The CLI: user errors are one clean line with exit status 2; train and eval run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llm_replay.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--set", "generation.prompts_per_step=4", "--set", "generation.group_size=2",
    "--set", "eval.size=8", "--set", "eval.pass_size=2", "--set", "eval.pass_k=[1,2]",
    "--set", "task.train_size=200", "--set", "task.eval_size=8", "--set", "train.batch_size=8",
    "--set", "log.tensorboard=false",
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "on_policy", "--set", "optim.lr=-1"], "optim.lr = -1.0: must be"),
        (["train", "configs/nope.yaml"], "no preset of that name"),
        (
            ["train", "on_policy", "--set", "model.path=/no/such/model"],
            "model.path = '/no/such/model'",
        ),
        (
            [
                "train",
                "on_policy",
                "--set",
                "task.kind=dataset",
                "--set",
                "task.path=/no/d.jsonl",
            ],
            "no such dataset file",
        ),
    ],
)
def test_user_errors_are_one_line(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(args) == 2
    out = capsys.readouterr().out
    assert message in out.replace("\n", " ") and "Traceback" not in out


def test_bad_dataset_row_reports_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2="}\n')
    monkeypatch.chdir(ROOT)
    code = main(
        [
            "train",
            "on_policy",
            "--set",
            "task.kind=dataset",
            "--set",
            f"task.path={data}",
        ]
    )
    assert code == 2
    assert "d.jsonl:2: field 'answer'" in capsys.readouterr().out.replace("\n", "")


def test_train_then_eval_from_the_command_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    base = [sys.executable, "-m", "llm_replay.cli"]
    common = [*TINY, "--set", f"log.run_dir={run_dir}"]
    train = subprocess.run(
        [*base, "train", "uniform", *common, "--set", "train.iterations=2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert train.returncode == 0, train.stdout + train.stderr
    assert "final acc" in train.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 2
    out = tmp_path / "eval.json"
    ev = subprocess.run(
        [
            *base,
            "eval",
            "uniform",
            *common,
            "--checkpoint",
            str(run_dir),
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ev.returncode == 0, ev.stdout + ev.stderr
    assert json.loads(out.read_text())["eval/accuracy"] == pytest.approx(summary["final_accuracy"])


def test_demo_quick_writes_table_plot_and_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["demo", "--quick", "--out", str(tmp_path)]) == 0
    figures = json.loads((tmp_path / "demo.json").read_text())
    assert set(figures["runs"]) == {"replay", "on-policy"}
    trained = yaml.safe_load((tmp_path / "replay" / "config.yaml").read_text())
    assert trained["generation"]["adaptive"]["enabled"]  # the default, `auto`, resolved
    assert trained["algorithm"]["token_control"] == "kl_cov"
    base = figures["runs"]["on-policy"]["compute_to_on_policy_final"]
    replay = figures["runs"]["replay"]
    assert base["mu_5"] > 0
    for basis, ratio in replay["ratio_to_on_policy"].items():  # one seed: a quotient of costs
        cost = replay["compute_to_on_policy_final"][basis]
        assert (ratio is None) == (cost is None)
        if ratio is not None:
            assert ratio == pytest.approx(cost / base[basis])
    assert (tmp_path / "accuracy_vs_compute.png").stat().st_size > 10_000


def test_demo_replays_the_config_it_is_given_and_names_a_missing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["demo", "--quick", "--out", str(tmp_path), "--replay", "nope.yaml"]) == 2
    assert "config 'nope.yaml': no preset of that name" in capsys.readouterr().out
    assert not (tmp_path / "replay").exists()  # refused before anything trained
    assert main(["demo", "--quick", "--out", str(tmp_path), "--replay", "uniform"]) == 0
    trained = yaml.safe_load((tmp_path / "replay" / "config.yaml").read_text())
    assert trained["replay"]["method"] == "uniform"


def test_invalid_yaml_is_one_line_with_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel:\n  path: [unclosed\n")
    assert main(["train", str(bad)]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and f"{bad}:4:1: not valid YAML" in out


@pytest.mark.parametrize("kind", ["config", "dataset"])
def test_files_that_are_not_utf8_are_one_line_errors(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    if kind == "config":
        path = tmp_path / "c.yaml"
        path.write_bytes(b"name: \xff\xfe\n")
        args = ["train", str(path)]
        expected = f"{path}: not UTF-8"
    else:
        path = tmp_path / "d.jsonl"
        path.write_bytes(b'{"prompt": "1+1=", "answer": "2"}\n{"prompt": "\xff", "answer": "1"}\n')
        args = ["train", "on_policy", "--set", "task.kind=dataset"]
        args += ["--set", f"task.path={path}"]
        expected = f"{path}:2: not UTF-8"
    assert main(args) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and expected in out and "Traceback" not in out


def test_long_errors_are_not_wrapped_when_piped(tmp_path: Path) -> None:
    long_path = tmp_path / ("x" * 150) / "model"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_replay.cli",
            "train",
            "on_policy",
            "--set",
            f"model.path={long_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stdout.count("\n") == 1 and str(long_path) in result.stdout, result.stdout


def test_losses_lists_the_registry_as_a_table_and_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from llm_replay.algorithms.losses import LOSSES
    from llm_replay.preference.losses import PAIR_LOSSES

    assert main(["losses", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in entries] == sorted(LOSSES) + sorted(PAIR_LOSSES)
    assert [e["name"] for e in entries if e.get("kind") == "pair"] == sorted(PAIR_LOSSES)
    assert main(["losses"]) == 0
    table = capsys.readouterr().out
    assert "algorithm.loss" in table and "m2po" in table and "needs π_prox" in table
    assert "preference.loss" in table and "ipo" in table


@pytest.mark.parametrize("field", ["model.path", "reward_model.path"])
@pytest.mark.parametrize("keep", [5, 0.5], ids=["header", "half"])
def test_weights_cut_short_are_one_line_naming_the_field_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, keep: float
) -> None:
    source = "tiny-chain-sum" if field == "model.path" else "tiny-chain-sum-reward"
    cut = tmp_path / "cut"
    shutil.copytree(ROOT / "src/llm_replay/assets" / source, cut)
    weights = cut / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(keep if keep >= 1 else keep * len(data))])
    run = tmp_path / "run"
    sets = [f"{field}={cut}", f"log.run_dir={run}", "train.iterations=1"]
    if field == "reward_model.path":
        sets.append("task.reward=model")
    args = ["train", "on_policy", *TINY, *(x for s in sets for x in ("--set", s))]
    assert main(args) == 2
    out = capsys.readouterr().out
    assert f"{field} = '{cut}': cannot load" in out.replace("\n", "")
    assert "Traceback" not in out and out.strip().startswith("error:")
    assert not run.exists()


def test_a_copied_edited_preset_trains_from_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's way: print a preset whole, edit the copy, train it anywhere."""
    monkeypatch.chdir(tmp_path)
    assert main(["presets", "--show", "positive_anneal"]) == 0
    shown = capsys.readouterr().out
    (tmp_path / "mine.yaml").write_text(shown.replace("name: positive_anneal", "name: mine"))
    assert main(["train", "mine.yaml", *TINY, "--set", "train.iterations=2", "--quiet"]) == 0
    saved = yaml.safe_load((tmp_path / "runs" / "mine" / "config.yaml").read_text())
    assert saved["name"] == "mine" and saved["replay"]["anneal"]["enabled"] is True
    assert main(["presets"]) == 0
    listing = capsys.readouterr().out
    assert "positive_anneal" in listing and "base/chain_sum" in listing
