"""Property-based tests: any sequence of operations keeps the table consistent with a model.

The model remembers every rollout ever inserted, by key. After each step the table must agree with
it: live keys were inserted and hold exactly what was inserted; size, tokens and counters add up;
every eviction bound holds; malformed input changes nothing; and rows pinned for a copy outside
the lock read what was stored, whatever was evicted and inserted since.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from llm_replay.buffer import (
    Fifo,
    Groups,
    PositiveRetention,
    Prioritized,
    Recency,
    ReplayTable,
    Uniform,
)
from llm_replay.buffer.prompt_index import PromptIndex, prompt_key
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import InvalidRolloutError
from tests.conftest import make_batch

SAMPLERS = {
    "uniform": lambda: Uniform(replacement=True),
    "uniform_norep": lambda: Uniform(replacement=False),
    "fifo": Fifo,
    "prioritized": lambda: Prioritized(alpha=0.7, beta=0.5),
    "recency": lambda: Recency(half_life=2.0),
    "positive_biased": Uniform,  # with PositiveRetention (`remover`, below)
    "groups": Groups,
}


def live_keys(table: ReplayTable) -> np.ndarray:
    return np.sort(table.storage.keys_of(table.storage.live_slots()))


def corrupt(batch: RolloutBatch, which: int, row: int) -> dict[str, Any]:
    """Keyword arguments for from_ragged that are valid except for one field of one row."""
    items = batch.rollouts()
    prompts = [r.prompt_ids.copy() for r in items]
    completions = [r.completion_ids.copy() for r in items]
    logprobs = [r.behaviour_logprobs.copy() for r in items]
    rewards = batch.rewards.copy()
    groups = batch.group_ids.copy()
    versions = batch.policy_versions.copy()
    if which == 0:
        logprobs[row][0] = 0.5
    elif which == 1:
        logprobs[row][0] = np.nan
    elif which == 2:
        completions[row][0] = -1
    elif which == 3:
        logprobs[row] = logprobs[row][:-1]
    elif which == 4:
        rewards[row] = np.inf
    elif which == 5:
        groups[row] = -3
    elif which == 6:
        versions[row] = -1
    else:
        prompts[row] = prompts[row][:0]
    return {
        "prompt_ids": prompts,
        "completion_ids": completions,
        "behaviour_logprobs": logprobs,
        "rewards": rewards,
        "group_ids": groups,
        "policy_versions": versions,
    }


class TableMachine(RuleBasedStateMachine):
    sampler_name = "uniform"

    @initialize(
        max_rollouts=st.integers(4, 40),
        max_tokens=st.one_of(st.none(), st.integers(200, 1500)),
        max_age=st.one_of(st.none(), st.integers(0, 3)),
        max_times=st.one_of(st.none(), st.integers(1, 3)),
        seed=st.integers(0, 2**16),
        arena_units=st.sampled_from([None, 64, 400]),
    )
    def setup(
        self,
        max_rollouts: int,
        max_tokens: int | None,
        max_age: int | None,
        max_times: int | None,
        seed: int,
        arena_units: int | None,
    ) -> None:
        self.table = ReplayTable(
            max_rollouts,
            sampler=SAMPLERS[self.sampler_name](),
            remover=PositiveRetention(delta=0.5)
            if self.sampler_name == "positive_biased"
            else None,
            max_tokens=max_tokens,
            max_age=max_age,
            max_times_sampled=max_times,
            seed=seed,
        )
        if arena_units is not None:  # a small ring wraps, grows and compacts within a few steps
            self.table.storage._set_arena(np.zeros(arena_units + 1024, dtype=np.int32))
        self.rng = np.random.default_rng(seed)
        self.inserted: dict[int, Any] = {}
        self.next_group = 0
        self.version = 0
        self.sampled = 0
        self.dropped = 0  # rows the retention rule dropped on arrival (key -1)
        self.pins: dict[int, tuple[Any, list[Any]]] = {}  # rows a sample is still copying

    @rule(n=st.integers(1, 12))
    def insert(self, n: int) -> None:
        n = min(n, self.table.max_rollouts)
        batch = make_batch(
            self.rng,
            n,
            version=max(0, self.version - int(self.rng.integers(0, 3))),
            first_group=self.next_group,
            group_size=int(self.rng.integers(1, 6)),
            shared_prompts=bool(self.rng.random() < 0.8),  # else a group id with other prompts
        )
        self.next_group += n
        try:
            keys = self.table.insert(batch)
        except ValueError as error:  # an insert too big for max_tokens is refused whole
            assert "max_tokens" in str(error)
            return
        stored = keys[keys >= 0]
        assert len(set(stored.tolist())) == len(stored)
        if len(stored) < n:
            assert self.sampler_name == "positive_biased"
        for key, item in zip(keys.tolist(), batch.rollouts(), strict=True):
            if key < 0:
                self.dropped += 1
                continue
            assert key not in self.inserted, "keys are never reused"
            self.inserted[key] = item

    @rule(n=st.integers(1, 12), which=st.integers(0, 7), row=st.integers(0, 11))
    def insert_malformed(self, n: int, which: int, row: int) -> None:
        batch = make_batch(self.rng, n, first_group=self.next_group)
        before = (self.table.stats().to_dict(), live_keys(self.table))
        with pytest.raises(InvalidRolloutError):
            self.table.insert(RolloutBatch.from_ragged(**corrupt(batch, which, row % n)))
        after = (self.table.stats().to_dict(), live_keys(self.table))
        assert before[0] == after[0]
        assert np.array_equal(before[1], after[1])

    @rule(n=st.integers(1, 16))
    def sample(self, n: int) -> None:
        table = self.table
        if table.size == 0 or (
            not table.sampler.with_replacement and table.sampler.available() < n
        ):
            with pytest.raises(Exception):  # noqa: B017, PT011 - timeout or too-large batch
                table.sample(n, timeout=0)
            return
        if table.sampler.name == "groups" and n < min(map(len, table.sampler._members.values())):
            before = table.stats().to_dict()
            with pytest.raises(ValueError, match="smaller than every stored group"):
                table.sample(n, timeout=0)
            assert table.stats().to_dict() == before
            return
        s = table.sample(n, timeout=0)
        self.sampled += len(s)
        assert 0 < len(s) <= n
        if table.sampler.name != "groups":
            assert len(s) == n
        for key, item in zip(s.keys.tolist(), s.rollouts(), strict=True):
            assert item == self.inserted[key]
        assert (s.ages == self.version - s.policy_versions).all()
        assert np.all(s.probabilities > 0) and np.all(s.probabilities <= 1)
        assert np.all(s.importance_weights > 0) and np.all(s.importance_weights <= 1 + 1e-12)
        assert (s.attention_mask.sum(1) == s.prompt_lengths + s.completion_lengths).all()
        assert (s.loss_mask.sum(1) == s.completion_lengths).all()

    @rule(step=st.integers(0, 2))
    def advance(self, step: int) -> None:
        self.version += step
        self.table.set_policy_version(self.version)

    @rule(count=st.integers(1, 4))
    def remove(self, count: int) -> None:
        keys = live_keys(self.table)
        if len(keys):
            chosen = self.rng.choice(keys, min(count, len(keys)), replace=False)
            assert self.table.remove(np.append(chosen, 10**12)) == len(chosen)

    @rule()
    def update_priorities(self) -> None:
        keys = live_keys(self.table)
        if self.table.sampler.name == "prioritized":
            assert self.table.update_priorities(keys, self.rng.random(len(keys))) == len(keys)

    @rule(count=st.integers(1, 8))
    def pin(self, count: int) -> None:
        storage = self.table.storage
        live = storage.live_slots()
        if len(live):
            slots = self.rng.choice(live, min(count, len(live)), replace=False)
            token, rows = storage.pin(slots)
            self.pins[token] = (rows, [self.inserted[k] for k in storage.keys_of(slots).tolist()])

    @rule()
    def unpin(self) -> None:
        if self.pins:
            token = min(self.pins)
            self.table.storage.unpin(token)
            del self.pins[token]

    @invariant()
    def pinned_rows_read_what_was_stored(self) -> None:
        for rows, expected in getattr(self, "pins", {}).values():
            ids, logprobs, attention, loss = rows.gather()
            for r, item in enumerate(expected):
                assert np.array_equal(
                    ids[r][attention[r]], np.concatenate([item.prompt_ids, item.completion_ids])
                )
                assert np.array_equal(logprobs[r][loss[r]], item.behaviour_logprobs)

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "table"):
            return
        table, stats = self.table, self.table.stats()
        keys = live_keys(table)
        assert set(keys.tolist()) <= set(self.inserted)
        assert stats.size == len(keys) == table.size
        assert stats.num_tokens == sum(self.inserted[k].num_tokens for k in keys.tolist())
        assert stats.inserts == len(self.inserted) + self.dropped
        assert sum(stats.evictions.values()) == stats.inserts - stats.size
        assert stats.samples == self.sampled
        assert stats.size <= table.max_rollouts
        if table.eviction.max_tokens is not None:
            assert stats.num_tokens <= table.eviction.max_tokens
        storage = table.storage
        live = storage.live_slots()
        if table.eviction.max_age is not None:
            assert (storage.policy_version[live] >= self.version - table.eviction.max_age).all()
        if table.eviction.max_times_sampled is not None:
            assert (storage.times_sampled[live] < table.eviction.max_times_sampled).all()
        assert storage.live_units == sum(
            self.inserted[k].num_tokens + self.inserted[k].completion_ids.size
            for k in keys.tolist()
        )
        # shared prompts are stored once: never more than the payload, never less than the
        # completions plus each distinct live prompt once
        distinct = {tuple(self.inserted[k].prompt_ids.tolist()) for k in keys.tolist()}
        floor = sum(2 * self.inserted[k].completion_ids.size for k in keys.tolist())
        floor += sum(len(p) for p in distinct)
        assert 4 * floor <= stats.stored_nbytes <= stats.payload_nbytes
        if isinstance(table.remover, PositiveRetention):
            remover = table.remover
            assert remover._fresh_live + remover._kept_live == stats.size
            assert remover._fresh_live <= remover.fresh_capacity
        if len(keys):
            got, found = table.get(keys)
            assert found.all()
            assert got.rollouts() == [self.inserted[k] for k in keys.tolist()]
            rows, found = table.get_batch(np.append(keys, 10**12))
            assert found[:-1].all() and not found[-1]
            assert rows.rollouts() == [self.inserted[k] for k in keys.tolist()]

    @invariant()
    def prompt_index_is_what_a_rebuild_finds(self) -> None:
        """The table's per-prompt index, kept in step since its first use, lists exactly what
        one built from the contents does (and what the inserted rollouts say)."""
        if not hasattr(self, "table"):
            return
        table = self.table
        listed = {q: table.keys_for_prompt(q).tolist() for q in table.prompts()}
        rebuilt = PromptIndex(table.storage)
        assert table.prompts() == rebuilt.prompts()
        assert listed == {q: rebuilt.keys(q).tolist() for q in rebuilt.prompts()}
        expected: dict[bytes, list[int]] = {}
        for key in sorted(
            live_keys(table).tolist(), key=lambda k: table.storage.seq[k % table.max_rollouts]
        ):
            expected.setdefault(prompt_key(self.inserted[key].prompt_ids), []).append(key)
        assert listed == expected


@pytest.mark.parametrize("sampler_name", sorted(SAMPLERS))
def test_table_state_machine(sampler_name: str) -> None:
    machine = type(f"TableMachine_{sampler_name}", (TableMachine,), {"sampler_name": sampler_name})
    machine.TestCase.settings = settings(
        max_examples=30,
        stateful_step_count=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    machine.TestCase().runTest()


def test_fifo_capacity_eviction_keeps_the_newest(rng: np.random.Generator) -> None:
    table = ReplayTable(10, max_tokens=None)
    keys = np.concatenate([table.insert(make_batch(rng, 4, first_group=4 * i)) for i in range(6)])
    assert np.array_equal(live_keys(table), np.sort(keys[-10:]))
    assert table.stats().evictions["capacity_rollouts"] == 14


def test_token_capacity_evicts_oldest_until_fit(rng: np.random.Generator) -> None:
    table = ReplayTable(1000, max_tokens=300)
    batches = [make_batch(rng, 3, first_group=3 * i) for i in range(30)]
    keys = [table.insert(b) for b in batches]
    assert table.num_tokens <= 300
    survivors = set(live_keys(table).tolist())
    all_keys = np.concatenate(keys).tolist()
    first_alive = min(all_keys.index(k) for k in survivors)
    assert set(all_keys[first_alive:]) == survivors, "token eviction is oldest first"
    with pytest.raises(ValueError, match="max_tokens"):
        table.insert(make_batch(rng, 30, completion=(20, 30)))


def test_arena_growth_wrap_and_relayout_preserve_payload(rng: np.random.Generator) -> None:
    table = ReplayTable(64, sampler=Uniform())
    stored: dict[int, Any] = {}
    units_in = rollouts_in = 0
    for i in range(200):
        batch = make_batch(rng, int(rng.integers(1, 9)), first_group=10 * i, completion=(1, 3000))
        units_in += int(batch.prompt_lengths.sum() + 2 * batch.completion_lengths.sum())
        rollouts_in += len(batch)
        for key, item in zip(table.insert(batch).tolist(), batch.rollouts(), strict=True):
            stored[key] = item
        if i % 7 == 0 and table.size > 4:
            table.remove(live_keys(table)[::3])  # holes in the ring
    keys = live_keys(table)
    got, _ = table.get(keys)
    assert got.rollouts() == [stored[k] for k in keys.tolist()]
    assert table.storage.data_units > 1 << 16, "the arena had to grow"
    assert table.storage.data_units < 1.5 * 64 * units_in / rollouts_in, (
        "and stays near the payload"
    )
