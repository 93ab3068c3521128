"""The kit's other pieces: the μ meter's counts, the metric map, the checkpoint and its refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import Sample
from llm_replay.config import load_config
from llm_replay.frontend.checkpoint import load_front_end, save_front_end
from llm_replay.frontend.meter import count_generated, count_metrics, count_trained, draw_metrics
from llm_replay.frontend.metric_map import MetricMap, unreported_readings
from llm_replay.frontend.padded import pad_rows, sample_rows, unpad
from llm_replay.methods.host import ReplayHost, RunShape
from llm_replay.metrics import ComputeMeter
from tests.conftest import make_batch

SHAPE = RunShape(batch_size=8, rollouts_per_step=16, group_size=4)


def host_for(preset: str) -> ReplayHost:
    replay = load_config(preset).replay
    return ReplayHost.build(replay.method, replay.settings, replay.options, SHAPE)


def test_a_round_and_a_trained_batch_are_counted_from_their_rows(rng: np.random.Generator) -> None:
    meter = ComputeMeter()
    batch = make_batch(rng, 16)
    count_generated(meter, batch, prompts=4)
    sample = Sample.from_batch(batch.select(np.arange(8)), current_version=0)
    count_trained(meter, sample)
    c = meter.counts
    assert (c["prompts_generated"], c["rollouts_generated"], c["reward_calls"]) == (4, 16, 16)
    assert c["tokens_generated"] == batch.completion_lengths.sum()
    assert c["prompt_tokens"] == batch.prompt_lengths.sum()
    completion = int(batch.completion_lengths[:8].sum())
    assert c["completion_tokens_trained"] == completion
    assert c["tokens_trained"] == completion + batch.prompt_lengths[:8].sum()
    shown = count_metrics(meter, "replay/")
    assert shown["replay/rollouts_trained"] == 8 and "replay/mu" not in shown  # nothing timed
    assert draw_metrics(sample)["replay/fresh_fraction"] == 1.0


def test_a_metric_map_reads_numbers_and_the_last_of_a_list_and_the_first_present() -> None:
    names = MetricMap({"clip": "loss/clip_fraction", "gone": "loss/policy"})
    entropy = MetricMap({}, {"loss/entropy": ("train_entropy", "old_entropy")})
    metrics = {"clip": [0.1, 0.3], "old_entropy": 0.7, "gone": [], "train_entropy": None}
    assert (names | entropy).read(metrics) == {"loss/clip_fraction": 0.3, "loss/entropy": 0.7}
    assert names.read({"clip": "n/a", "gone": True}) == {}


def test_a_checkpoint_holds_the_host_the_meter_and_the_front_ends_counters(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    host, meter = host_for("uniform"), ComputeMeter()
    list(host.round(make_batch(rng, 16)))
    meter.add(rollouts_generated=16)
    save_front_end(host, tmp_path / "ck", {"rounds": 3}, meter=meter, behaviour_stored=True)
    assert json.loads((tmp_path / "ck" / "host.json").read_text())["behaviour_stored"] is True
    other, other_meter = host_for("uniform"), ComputeMeter()
    state = load_front_end(other, tmp_path / "ck", meter=other_meter, reader="the ratio")
    assert state["rounds"] == 3 and other_meter.counts["rollouts_generated"] == 16
    assert other.metrics()["buffer/size"] == host.metrics()["buffer/size"] > 0


def test_a_resume_that_reads_behaviour_log_probs_the_checkpoint_lacks_is_refused(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    host = host_for("uniform")
    list(host.round(make_batch(rng, 16)))
    save_front_end(host, tmp_path / "ck", {}, meter=ComputeMeter(), behaviour_stored=False)
    load_front_end(host_for("uniform"), tmp_path / "ck", meter=ComputeMeter(), reader=None)
    with pytest.raises(ValueError, match=r"stored no behaviour log-probs .* this run's KL-Cov"):
        load_front_end(host_for("uniform"), tmp_path / "ck", meter=ComputeMeter(), reader="KL-Cov")


def test_rows_go_into_the_padded_layout_and_come_back_whole(rng: np.random.Generator) -> None:
    batch = make_batch(rng, 8)
    sample = Sample.from_batch(batch, current_version=0)
    prompts, completions, behaviour = sample_rows(sample)
    padded = pad_rows(prompts, completions, pad_id=-1, behaviour=behaviour)
    assert np.all(padded["prompt_mask"][:, -1] == 1)  # prompts end at the right edge
    assert np.all(padded["completion_mask"][:, 0] == 1)  # completions start at the left edge
    assert [len(c) for c in completions] == list(batch.completion_lengths)
    back = unpad(padded["completion_ids"], padded["completion_mask"])
    for got, want in zip(back, completions, strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(unpad(padded["prompt_ids"], padded["prompt_mask"]), prompts, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        np.concatenate(unpad(padded["behaviour"], padded["completion_mask"])),
        batch.behaviour_logprobs,
    )
    assert sample_rows(sample, slice(2, 4))[0][0].tolist() == prompts[2].tolist()


def test_a_reading_the_trainer_cannot_feed_is_refused_or_said_to_stay_silent() -> None:
    signals = load_config(
        "positive",
        ["replay.anneal.enabled=true", "replay.anneal.mode=signals", "replay.anneal.clip_max=0.2"],
    ).replay.options
    assert unreported_readings(signals, frozenset({"clip_fraction", "log_ratio_m2"})) == ({}, [])
    refused, silent = unreported_readings(signals, frozenset())
    assert refused == {"anneal.clip_max": 0.2} and silent == ["anneal.log_ratio_m2"]
    schedule = load_config("positive_schedule").replay.options  # reads no learner statistic
    assert unreported_readings(schedule, frozenset()) == ({}, [])
