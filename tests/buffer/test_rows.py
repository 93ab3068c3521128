"""Rows out of a table: `get_batch`, `sample_batch` and the per-prompt index."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.prompt_index import prompt_key
from tests.conftest import make_batch


def test_sample_batch_draws_what_sample_draws_and_counts_it(rng: np.random.Generator) -> None:
    """Same seed, same contents: `sample_batch` returns the rows `sample` pads, and leaves the
    table (counters, evictions, RNG) exactly as `sample` does."""
    batch = make_batch(rng, 40)
    padded, rows = (ReplayTable.queue(64, max_insert_batch=40) for _ in range(2))
    padded.insert(batch)
    rows.insert(batch)
    for n in (8, 16, 8):
        assert rows.sample_batch(n).rollouts() == padded.sample(n).rollouts()
        assert rows.stats().to_dict() == padded.stats().to_dict()
    assert rows.size == 8  # the queue removed what it handed out
    uniform = [ReplayTable.uniform(64, seed=3) for _ in range(2)]
    for table in uniform:
        table.insert(batch)
    assert uniform[0].sample_batch(12).rollouts() == uniform[1].sample(12).rollouts()


def test_sample_batch_is_replayed_from_the_durable_log(
    rng: np.random.Generator, tmp_path: Path
) -> None:
    table = ReplayTable.open(tmp_path / "t", max_rollouts=64, max_times_sampled=1)
    table.insert(make_batch(rng, 24))
    drawn = table.sample_batch(10)
    left = table.get_batch(table.storage.keys_of(table.storage.live_in_order()))[0]
    assert 14 <= table.size < 24  # drawn with replacement, each drawn rollout evicted
    size = table.size
    table.close()
    reopened = ReplayTable.open(tmp_path / "t", max_rollouts=64, max_times_sampled=1)
    assert reopened.size == size and reopened.stats().samples == 10
    keys = reopened.storage.keys_of(reopened.storage.live_in_order())
    assert reopened.get_batch(keys)[0].rollouts() == left.rollouts()
    assert len(drawn) == 10


def test_keys_for_prompt_follows_inserts_and_evictions(rng: np.random.Generator) -> None:
    table = ReplayTable.uniform(12)
    first = make_batch(rng, 8, group_size=4)  # two prompts, four rollouts each
    keys = table.insert(first)
    prompt_a = first.select(np.arange(1)).prompt_ids
    assert table.num_prompts == 2
    assert table.keys_for_prompt(prompt_a).tolist() == keys[:4].tolist()
    assert table.keys_for_prompt(prompt_key(prompt_a)).tolist() == keys[:4].tolist()
    table.insert(make_batch(rng, 8, first_group=2))  # capacity 12: the first prompt's four go
    assert len(table.keys_for_prompt(prompt_a)) == 0
    assert table.num_prompts == 3
    table.remove(table.keys_for_prompt(table.prompts()[0]))
    assert table.num_prompts == 2
    assert table.keys_for_prompt(np.array([99999], dtype=np.int32)).tolist() == []


def test_a_loaded_table_lists_prompts_as_the_saved_one_did(
    rng: np.random.Generator, tmp_path: Path
) -> None:
    table = ReplayTable.uniform(20)
    for round_ in range(5):  # evictions leave prompts whose oldest rollouts are gone
        table.insert(make_batch(rng, 8, first_group=2 * round_))
        table.remove(table.keys_for_prompt(table.prompts()[-1])[:1])
    loaded = ReplayTable.load(table.save(tmp_path / "t"))
    assert loaded.prompts() == table.prompts()
    for question in table.prompts():
        assert loaded.keys_for_prompt(question).tolist() == table.keys_for_prompt(question).tolist()
