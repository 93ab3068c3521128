"""Content fingerprints in the archive's protocol: a model or task that keeps its name while its
content changes is refused, and nothing else is."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from llm_replay.cli import main
from llm_replay.config import load_config
from llm_replay.experiments.fingerprint import (
    _TASK_HASHES,
    fingerprints,
    model_fingerprint,
    task_fingerprint,
)
from llm_replay.models.loading import resolve_model_path

ROOT = Path(__file__).resolve().parents[2]


def copy_builtin(target: Path, name: str = "tiny-chain-sum") -> Path:
    shutil.copytree(resolve_model_path(f"builtin:{name}"), target)
    return target


def nudge_weights(model: Path) -> None:
    """The same file names, shapes and size; one weight differs."""
    weights = load_file(model / "model.safetensors")
    first = sorted(weights)[0]
    weights[first] = weights[first].clone()
    weights[first].view(-1)[0] += 1.0
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})


def test_a_model_is_fingerprinted_by_content_not_by_place_or_time(tmp_path: Path) -> None:
    one = copy_builtin(tmp_path / "one")
    two = copy_builtin(tmp_path / "two")
    assert model_fingerprint(one) == model_fingerprint(two)
    assert model_fingerprint(one).startswith("sha256:") and len(model_fingerprint(one)) == 71
    (two / "model.safetensors").touch()  # a new mtime alone changes nothing
    assert model_fingerprint(two) == model_fingerprint(one)
    nudge_weights(two)
    assert model_fingerprint(two) != model_fingerprint(one)
    (two / "training_args.bin").write_bytes(b"not part of the model")
    before = model_fingerprint(two)
    (two / "training_args.bin").write_bytes(b"still not")
    assert model_fingerprint(two) == before
    (one / "tokenizer.json").write_text((one / "tokenizer.json").read_text() + " ")
    assert model_fingerprint(one) != model_fingerprint(copy_builtin(tmp_path / "three"))


def test_a_task_is_fingerprinted_by_its_problems() -> None:
    small = ["task.train_size=50", "task.eval_size=10"]
    base = load_config("on_policy", small)
    first = task_fingerprint(base)
    _TASK_HASHES.clear()  # built again, not read from the cache
    assert task_fingerprint(load_config("uniform", small)) == first  # another method, same task
    assert task_fingerprint(base) != task_fingerprint(
        load_config("on_policy", [*small, "task.seed=7"])
    )
    assert task_fingerprint(base) != task_fingerprint(
        load_config("on_policy", ["task.train_size=50", "task.eval_size=11"])
    )
    assert set(fingerprints(base)) == {"model", "task"}


def test_a_dataset_task_is_fingerprinted_by_its_file(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(200)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = load_config("on_policy", ["task.kind=dataset", f"task.path={data}"])
    before = task_fingerprint(config)
    rows[3]["answer"] = "5"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _TASK_HASHES.clear()  # a new process: the same settings, another file
    assert task_fingerprint(config) != before


def test_an_archive_of_another_model_with_the_same_path_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.chdir(ROOT)
    model = copy_builtin(tmp_path / "model")
    archive = tmp_path / "archive"
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"""
name: tiny
out: {tmp_path / "out"}
archive: {archive}
seeds: [0]
budget: 32
budget_basis: rollouts
eval_every: 16
baseline: on_policy
set:
  - model.path={model}
  - generation.prompts_per_step=4
  - generation.group_size=4
  - train.batch_size=16
  - eval.size=8
  - eval.pass_size=4
  - eval.pass_k=[1,2]
  - task.train_size=200
  - task.eval_size=8
methods:
  on_policy: {{config: on_policy}}
"""
    )
    assert main(["compare", str(path), "--quiet"]) == 0
    protocol = json.loads((archive / "on_policy" / "seed-0" / "protocol.json").read_text())
    assert protocol["fingerprint"]["model"] == model_fingerprint(model)
    shutil.rmtree(tmp_path / "out")
    assert main(["report", str(path)]) == 0  # the same content restores
    shutil.rmtree(tmp_path / "out")
    nudge_weights(model)  # rebuilt in place: the path reads the same
    capsys.readouterr()
    assert main(["report", str(path)]) == 2
    error = capsys.readouterr().out.replace("\n", "")
    assert "another protocol (fingerprint.model: 'sha256:" in error
    assert not (tmp_path / "out" / "full" / "on_policy" / "seed-0" / "summary.json").exists()
    shutil.rmtree(model)  # absent on this machine: not comparable, so restored as before
    with caplog.at_level(logging.WARNING, logger="llm_replay.experiments.compare"):
        assert main(["report", str(path)]) == 0
    assert any("content not checked against the archive" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "out" / "full" / "on_policy" / "seed-0" / "summary.json").is_file()


def test_archives_from_before_fingerprints_still_restore(tmp_path: Path) -> None:
    from llm_replay.experiments.archive import archive_run, restore_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"kind": "eval", "iteration": 0}\n')
    archive_run(run, tmp_path / "archive", "on_policy", 0, {"train": {"seed": 0}})

    def not_asked() -> dict[str, str]:
        raise AssertionError("an archive without a fingerprint needs none computed")

    now = {"train": {"seed": 0}}
    assert restore_run(tmp_path / "archive", tmp_path / "again", "on_policy", 0, now, not_asked)
    assert archive_run(run, tmp_path / "archive", "on_policy", 0, now, not_asked) is None


def test_a_fingerprint_is_computed_only_where_it_is_written_or_checked(tmp_path: Path) -> None:
    from llm_replay.experiments.archive import ArchiveMismatch, archive_run, restore_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"kind": "eval", "iteration": 0}\n')
    calls: list[str] = []

    def content(value: str) -> Callable[[], dict[str, str]]:
        return lambda: calls.append(value) or {"model": value}

    archive = tmp_path / "archive"
    assert archive_run(run, archive, "m", 0, {"seed": 0}, content("a")) is not None
    assert archive_run(run, archive, "m", 0, {"seed": 0}, content("b")) is None  # there already
    assert not restore_run(archive, run, "m", 0, {"seed": 0}, content("c"))  # finished locally
    assert calls == ["a"]
    with pytest.raises(ArchiveMismatch, match=r"fingerprint.model: 'a' -> 'd'"):
        restore_run(archive, tmp_path / "elsewhere", "m", 0, {"seed": 0}, content("d"))
    assert restore_run(archive, tmp_path / "elsewhere", "m", 0, {"seed": 0}, content("a"))


def test_a_reward_model_is_fingerprinted_when_set(tmp_path: Path) -> None:
    judge = tmp_path / "judge"
    judge.mkdir()
    classifier = {"architectures": ["LlamaForSequenceClassification"], "num_labels": 1}
    (judge / "config.json").write_text(json.dumps(classifier))
    (judge / "model.safetensors").write_bytes(b"weights")
    small = ["task.train_size=50", "task.eval_size=10"]
    config = load_config("on_policy", [*small, "task.reward=model", f"reward_model.path={judge}"])
    assert fingerprints(config)["reward_model"] == model_fingerprint(judge)
