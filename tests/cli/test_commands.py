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
from llm_replay.metrics.logging import CORRECT_ROWS

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
    metrics = json.loads(out.read_text())
    assert metrics["eval/accuracy"] == pytest.approx(summary["final_accuracy"])
    rows = metrics[CORRECT_ROWS]  # each row's verdict: in the JSON, not in the table on screen
    assert rows.count("1") / len(rows) == pytest.approx(metrics["eval/accuracy"])
    assert CORRECT_ROWS not in ev.stdout and "eval/accuracy" in ev.stdout


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
    from llm_replay.algorithms.losses.pairs import PAIR_LOSSES

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


def one_error_line(out: str) -> str:
    """The CLI's answer to a user error: exactly one line, `error: …`, no traceback."""
    assert out.count("\n") == 1 and out.startswith("error: "), out
    assert "Traceback" not in out
    return out


PAIRS = '{"prompt": "1+1=", "chosen": "2", "rejected": "3"}\n'


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("pairs.jsonl", PAIRS + '{"prompt": "2+2=", "chosen": "4"}\n', "line 2: field 'rejected'"),
        ("pairs.jsonl", PAIRS.encode() + b'{"prompt": "\xff"}\n', "line 2 is not UTF-8"),
        ("pairs.parquet", b"not parquet", "not readable Parquet"),
    ],
    ids=["missing-field", "not-utf8", "not-parquet"],
)
def test_a_bad_preference_file_is_one_line_naming_the_record_and_nothing_is_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: str | bytes,
    message: str,
) -> None:
    """Issue #54: the record's error arrived as an uncaught PreferenceFileError traceback."""
    pairs = tmp_path / name
    pairs.write_bytes(content.encode() if isinstance(content, str) else content)
    run = tmp_path / "run"
    sets = ["preference.annotator=none", "preference.replay=uniform", f"preference.file={pairs}"]
    sets += [f"log.run_dir={run}"]
    assert main(["train", "dpo", *TINY, *(x for s in sets for x in ("--set", s))]) == 2
    out = one_error_line(capsys.readouterr().out)
    assert f"preference.file = '{pairs}'" in out and message in out
    assert not run.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "positve"], "did you mean the preset 'positive'?"),
        (["train", "positve.yaml"], "did you mean the preset 'positive'?"),
        (["train", "base/chain_summ"], "did you mean the preset 'base/chain_sum'?"),
        (["presets", "--show", "positve"], "no such preset; choose one of"),
        (["fields", "generaton"], "did you mean 'generation'?"),
        (["train", "on_policy", "--set", "replay.method=positve"], "did you mean 'positive'?"),
        (["train", "on_policy", "--set", "replay.methd=uniform"], "did you mean 'replay.method'?"),
        (["train", "on_policy", "--set", "algorithm.loss=tiss"], "did you mean 'tis'?"),
        (["train", "on_policy", "--set", "algorithm.los=tis"], "did you mean 'algorithm.loss'?"),
        (["train", "on_policy", "--set", "task.kind=datset"], "did you mean 'dataset'?"),
        (["train", "dpo", "--set", "preference.loss=ipoo"], "did you mean 'ipo'?"),
    ],
)
def test_a_mistyped_name_gets_the_nearest_one_as_a_config_key_does(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #54: a mistyped preset, method, loss or choice named no near miss, where a mistyped
    config key did; now every one goes through the same rule (`config.parse.closest`)."""
    run = tmp_path / "run"
    extra = ["--set", f"log.run_dir={run}"] if args[0] == "train" else []
    assert main([*args, *extra]) == 2
    out = one_error_line(capsys.readouterr().out)
    assert message in out
    if args[:2] == ["presets", "--show"]:
        assert out.rstrip().endswith("did you mean 'positive'?")
    assert not run.exists()


def test_names_the_model_does_not_have_get_the_nearest_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    for sets, message in (
        (["model.path=builtin:tiny-chain-summ"], "did you mean 'builtin:tiny-chain-sum'?"),
        (["task.dataset=chain_summ"], "task.dataset = 'chain_summ': no reasoning-gym dataset"),
    ):
        args = [
            "train",
            "on_policy",
            *(x for s in [*sets, f"log.run_dir={run}"] for x in ("--set", s)),
        ]
        assert main(args) == 2
        out = one_error_line(capsys.readouterr().out)
        assert message in out and "did you mean" in out
        assert not run.exists()


def test_resume_without_a_checkpoint_is_one_line_and_creates_no_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run directory used to be created before the checkpoint was looked for."""
    run = tmp_path / "never-trained"
    args = ["train", "on_policy", *TINY, "--resume", "--quiet", "--set", f"log.run_dir={run}"]
    assert main(args) == 2
    out = one_error_line(capsys.readouterr().out)
    assert f"{run / 'checkpoint'}: no complete checkpoint" in out
    assert not run.exists()


def test_inspect_and_eval_name_their_own_flags_for_a_bad_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "table"
    table.mkdir()
    not_a_model = tmp_path / "model"
    not_a_model.mkdir()
    (not_a_model / "config.json").write_text("{}")
    for tokenizer, message in (
        (tmp_path / "nowhere", "--tokenizer = '{}': no such directory"),
        (not_a_model, "--tokenizer = '{}': cannot load"),  # was a ValueError traceback
    ):
        assert main(["inspect", str(table), "--tokenizer", str(tokenizer)]) == 2
        assert message.format(tokenizer) in one_error_line(capsys.readouterr().out)
    missing = tmp_path / "no-run"
    assert main(["eval", "on_policy", "--checkpoint", str(missing)]) == 2  # before the model loads
    assert f"--checkpoint {missing}: no such run" in one_error_line(capsys.readouterr().out)
    nowhere = missing / "eval.json"  # was a FileNotFoundError traceback after the evaluation
    assert main(["eval", "on_policy", "--json", str(nowhere)]) == 2
    assert f"--json {nowhere}: no directory {missing}" in one_error_line(capsys.readouterr().out)
    assert not missing.exists()
