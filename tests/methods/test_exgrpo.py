"""ExGRPO: question buckets, lowest-surprisal selection, retirement, batch mix, checkpoints."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from llm_replay.data.batch import RolloutBatch
from llm_replay.methods import METHODS, MethodConfigError, MethodContext
from llm_replay.methods.exgrpo import (
    ExGRPO,
    ExGRPOConfig,
    bucket_of,
    bucket_weights,
    mean_surprisal,
)


def groups(
    spec: list[tuple[int, list[bool]]], *, surprisals: list[float] | None = None, version: int = 0
) -> RolloutBatch:
    """One group per (question id, correct flags); every completion has two tokens whose
    log-probs are −s (so the rollout's mean surprisal is s: the given values, else 1.0)."""
    prompts, completions, logprobs, correct, group_ids = [], [], [], [], []
    s = iter(surprisals or [])
    for g, (question, flags) in enumerate(spec):
        for flag in flags:
            prompts.append([question, question + 1])
            completions.append([7, 8])
            value = next(s, 1.0)
            logprobs.append([-value, -value])
            correct.append(flag)
            group_ids.append(g)
    n = len(correct)
    return RolloutBatch.from_ragged(
        prompt_ids=prompts,
        completion_ids=completions,
        behaviour_logprobs=logprobs,
        rewards=np.asarray(correct, dtype=float),
        advantages=np.asarray(correct, dtype=float) - 0.5,
        group_ids=group_ids,
        policy_versions=[version] * n,
        correct=correct,
    )


def method(**knobs: object) -> ExGRPO:
    settings = ExGRPOConfig(**knobs)  # type: ignore[arg-type]
    settings.check()
    return ExGRPO(settings, MethodContext(batch_size=8, rollouts_per_step=8, group_size=4))


def test_buckets_and_their_gaussian_weights() -> None:
    assert [bucket_of(r) for r in (0.0, 0.25, 0.26, 0.5, 0.75, 0.8)] == [0, 0, 1, 1, 1, 2]
    weights = bucket_weights(0.5, 1.0)
    edge = math.exp(-(0.375**2) / 2)  # 0.9321
    np.testing.assert_allclose(weights, [edge, 1.0, edge])
    assert bucket_weights(0.5, 0.1)[0] == pytest.approx(math.exp(-(0.375**2) / 0.02))


def test_mean_surprisal_hand_values() -> None:
    batch = RolloutBatch.from_ragged(
        prompt_ids=[[1], [1], [1]],
        completion_ids=[[2, 3], [4], []],
        behaviour_logprobs=[[-1.0, -3.0], [-0.5], []],
        rewards=[0, 0, 0],
        group_ids=[0, 0, 0],
        policy_versions=[0, 0, 0],
        allow_empty=True,
    )
    np.testing.assert_allclose(mean_surprisal(batch), [2.0, 0.5, 0.0])


def test_partly_solved_questions_store_their_successes_and_solved_ones_retire() -> None:
    m = method()
    first = list(
        m.batches(groups([(10, [True, True, False, False]), (20, [True] * 4), (30, [False] * 4)]))
    )
    assert len(first) == 1 and len(first[0]) == 12 and (first[0].sources == 0).all()
    assert m.table.size == 2 and m.metrics()["exgrpo/retired"] == 1.0
    assert m.metrics()["exgrpo/questions_medium"] == 1.0
    # question 10 is solved now: it retires and its stored successes leave the table
    list(m.batches(groups([(10, [True] * 4)])))
    assert m.table.size == 0 and m.metrics()["exgrpo/retired"] == 2.0
    list(m.batches(groups([(10, [True, False, False, False])])))
    assert m.table.size == 0, "a retired question is not stored again"


def test_replays_the_lowest_surprisal_success_once_per_question() -> None:
    m = method()
    list(m.batches(groups([(10, [True, True, True, False])], surprisals=[0.9, 0.2, 0.5, 0.1])))
    fresh = groups([(40, [False] * 4)], version=1)
    m.set_policy_version(1)
    (batch,) = m.batches(fresh)
    replayed = batch.sources == 1
    assert replayed.sum() == 1, "one trajectory per question, though 4 were asked for"
    row = int(np.flatnonzero(replayed)[0])
    logprobs = batch.behaviour_logprobs[row][batch.loss_mask[row] > 0]
    np.testing.assert_allclose(logprobs, [-0.2, -0.2])  # the 0.2 success, not the 0.1 failure
    assert batch.ages[row] == 1 and batch.times_sampled[row] == 1


def test_batch_mixes_fresh_and_replayed_at_the_ratio() -> None:
    m = method(experience_ratio=0.5)
    list(m.batches(groups([(q, [True, False, False, False]) for q in range(0, 100, 10)])))
    (batch,) = m.batches(groups([(500, [False] * 4), (510, [False] * 4)]))
    assert (batch.sources == 0).sum() == 8 and (batch.sources == 1).sum() == 8
    m3 = method(experience_ratio=0.25)  # ρ/(1−ρ) · 8 = 2.67 → 3
    list(m3.batches(groups([(q, [True, False, False, False]) for q in range(0, 100, 10)])))
    (batch,) = m3.batches(groups([(500, [False] * 4), (510, [False] * 4)]))
    assert (batch.sources == 1).sum() == 3
    assert ExGRPOConfig(experience_ratio=0.5).samples_per_insert == 2.0


def test_a_narrow_gaussian_draws_medium_questions_and_the_paper_one_is_near_flat() -> None:
    """Seeded: 30 questions per bucket (rates 1/8, 4/8, 7/8)."""
    spec = [
        (q, [True] * k + [False] * (8 - k))
        for k in (1, 4, 7)
        for q in range(k * 1000, k * 1000 + 300, 10)
    ]

    def bucket_counts(sigma: float, rounds: int) -> np.ndarray:
        m = method(sigma=sigma, experience_ratio=0.5, capacity=10_000)
        list(m.batches(groups(spec)))
        counts = np.zeros(3)
        for _ in range(rounds):
            (batch,) = m.batches(groups([(9000, [False] * 4)]))
            rows = np.flatnonzero(batch.sources == 1)
            for r in rows.tolist():
                question = int(batch.input_ids[r][batch.attention_mask[r] > 0][0])
                counts[{1: 0, 4: 1, 7: 2}[question // 1000]] += 1
        return counts

    narrow = bucket_counts(0.1, 20)
    assert narrow[1] >= 0.95 * narrow.sum()
    flat = bucket_counts(1.0, 100)  # 400 draws
    expected = bucket_weights(0.5, 1.0) / bucket_weights(0.5, 1.0).sum() * flat.sum()
    sd = np.sqrt(expected * (1 - expected / flat.sum()))
    assert np.all(np.abs(flat - expected) < 4 * sd), (flat, expected)


def test_checkpoint_round_trip_replays_the_same(tmp_path: Path) -> None:
    spec = [(q, [True, True, False, False]) for q in range(0, 200, 10)]
    a = method()
    list(a.batches(groups(spec)))
    a.save(tmp_path)
    b = method()
    b.load(tmp_path)
    fresh = groups([(900, [False] * 4)])
    (x,) = a.batches(fresh)
    (y,) = b.batches(fresh)
    np.testing.assert_array_equal(x.input_ids, y.input_ids)
    assert a.metrics() == b.metrics()


def test_knobs_are_checked_and_the_method_is_registered() -> None:
    assert METHODS["exgrpo"] is ExGRPO
    with pytest.raises(MethodConfigError, match="experience_ratio = 1"):
        ExGRPOConfig(experience_ratio=1.0).check()
    with pytest.raises(MethodConfigError, match="centre"):
        ExGRPOConfig(centre=2.0).check()
    with pytest.raises(MethodConfigError, match="sigma"):
        ExGRPOConfig(sigma=0.0).check()


def test_evicted_trajectories_leave_the_index() -> None:
    m = method(capacity=8)
    for round_ in range(6):  # 4 successes per round into a table of 8: older ones are evicted
        spec = [(1000 * round_ + q, [True, True, False, False]) for q in range(0, 20, 10)]
        list(m.batches(groups(spec)))
    assert m.table.num_prompts == 4  # the last two rounds' questions; the rest were evicted
    keys = np.concatenate([m.table.keys_for_prompt(q) for q in m.table.prompts()])
    assert m.table.contains(keys).all() and len(keys) == m.table.size == 8
    assert len(m._surprisal) <= 2 * 8 + 4  # pruned past twice the table's size
    drawn = m.draw(4)
    assert drawn is not None and len(drawn) == 4  # only live trajectories are offered
