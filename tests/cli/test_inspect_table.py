"""`llm-replay inspect`: saved and durable tables, decoded rows, plots, and a read that changes
nothing on disk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.durable import LOG
from llm_replay.cli import main
from llm_replay.data.batch import RolloutBatch
from llm_replay.models import build_char_tokenizer


def text_batch(texts: list[tuple[str, str]], rewards: list[float], version: int) -> RolloutBatch:
    tok = build_char_tokenizer()
    prompts = [tok(p)["input_ids"] for p, _ in texts]
    completions = [tok(c)["input_ids"] for _, c in texts]
    return RolloutBatch.from_ragged(
        prompt_ids=prompts,
        completion_ids=completions,
        behaviour_logprobs=[[-0.5] * len(c) for c in completions],
        rewards=rewards,
        advantages=np.asarray(rewards) - np.mean(rewards),
        group_ids=[0] * len(texts),
        policy_versions=[version] * len(texts),
        correct=[r == 1.0 for r in rewards],
    )


def fill(table: ReplayTable) -> None:
    table.insert(text_batch([("1+2=", "3"), ("1+2=", "4")], [1.0, 0.0], 0))
    table.set_policy_version(2)
    later = text_batch([("9-5=", "4"), ("9-5=", "14")], [1.0, 0.0], 2)
    table.insert(dataclasses.replace(later, reward_versions=np.array([3, 3])))
    table.sample(3)


def test_inspect_a_saved_table_as_json_with_decoded_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = ReplayTable(16)
    fill(table)
    table.save(tmp_path / "saved")
    assert (
        main(
            [
                "inspect",
                str(tmp_path / "saved"),
                "--json",
                "--rows",
                "4",
                "--tokenizer",
                "builtin:tiny-chain-sum",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["size"] == 4 and report["policy_version"] == 2
    assert report["rewards"]["mean"] == pytest.approx(0.5)
    assert report["correct_share"] == pytest.approx(0.5)
    assert report["age_histogram"][:3] == [2, 0, 2]
    assert sum(report["reuse_histogram"]) == 4 and report["samples"] == 3
    assert report["reward_versions"] == {"0": 2, "3": 2}
    assert [r["reward_version"] for r in report["rows"]] == [0, 0, 3, 3]
    assert [(r["prompt"], r["completion"]) for r in report["rows"]] == [
        ("1+2=", "3"),
        ("1+2=", "4"),
        ("9-5=", "4"),
        ("9-5=", "14"),
    ]


def test_inspect_a_durable_table_changes_nothing_and_draws_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "durable"
    table = ReplayTable.open(directory, max_rollouts=16)
    fill(table)
    (segment,) = (directory / LOG).glob("*.seg")
    with segment.open("ab") as handle:
        handle.write(b"LRJ2\x00\x01")  # a torn tail: inspect must leave it for the owner
    before = {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    assert main(["inspect", str(directory), "--plots", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    assert "4 of 16" in out and "policy version" in out
    assert (tmp_path / "plots" / "table_histograms.png").stat().st_size > 10_000
    assert {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()} == before


def test_inspect_errors_name_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert "no such table directory" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert main(["inspect", str(tmp_path / "empty")]) == 2
    ReplayTable(4).save(tmp_path / "t")
    assert main(["inspect", str(tmp_path / "t"), "--rows", "-1"]) == 2
    assert "--rows = -1" in capsys.readouterr().out


def test_inspect_a_sharded_checkpoint_reports_each_shard_and_the_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for k, size in enumerate((16, 8)):
        table = ReplayTable(size)
        fill(table)
        table.save(tmp_path / "table" / f"shard-{k}")
    assert main(["inspect", str(tmp_path / "table"), "--json", "--rows", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["size"] for r in report["shards"]] == [4, 4]
    assert report["total"]["size"] == 8 and report["total"]["max_rollouts"] == 24
    assert report["total"]["samples"] == 6
    assert main(["inspect", str(tmp_path / "table")]) == 0
    assert "2 shards: 8 of 24 rollouts" in capsys.readouterr().out


def test_inspect_reads_a_zero_filled_tail_and_names_damage_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "durable"
    table = ReplayTable.open(directory, max_rollouts=16)
    fill(table)
    table.close()
    (segment,) = (directory / LOG).glob("*.seg")
    data = segment.read_bytes()
    segment.write_bytes(data + data[:9] + bytes(300))  # a power cut's tail: 9 bytes, then zeros
    assert main(["inspect", str(directory)]) == 0
    assert "4 of 16" in capsys.readouterr().out
    damaged = bytearray(data)
    damaged[20] ^= 0xFF  # the first record's data length
    segment.write_bytes(damaged)
    assert main(["inspect", str(directory)]) == 2
    out = capsys.readouterr().out
    assert f"{segment}" in out and "at byte 0" in out and "Traceback" not in out


def test_inspect_a_mixtures_table_shows_each_task_and_each_rows_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = ReplayTable(16)
    table.insert(text_batch([("1+2=", "3"), ("1+2=", "4")], [1.0, 0.0], 0).with_tasks("sums"))
    table.insert(text_batch([("gcd(4,6)=", "2")], [1.0], 0).with_tasks("gcd"))
    table.save(tmp_path / "saved")
    assert main(["inspect", str(tmp_path / "saved"), "--json", "--rows", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tasks"]["sums"]["size"] == 2 and report["tasks"]["gcd"]["correct_share"] == 1.0
    assert [r["task"] for r in report["rows"]] == ["sums", "sums", "gcd"]
    assert main(["inspect", str(tmp_path / "saved"), "--rows", "3"]) == 0
    text = capsys.readouterr().out
    assert "task gcd" in text and "1 rollouts (33%)" in text and "[gcd]" in text
