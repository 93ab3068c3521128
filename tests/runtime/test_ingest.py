"""Work items, exactly-once delivery and the async table's limiter band."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.buffer.rate_limit import TableClosed
from llm_replay.config import ConfigError, load_config
from llm_replay.runtime.feeds import build_async_table, error_buffer, steps_per_iteration
from llm_replay.runtime.ingest import (
    IngestGate,
    WorkPlan,
)
from tests.conftest import make_batch, wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_work_plan_hands_out_consecutive_prompt_slices_and_redoes_given_back_items() -> None:
    plan = WorkPlan(prompts_per_item=4)
    first, second = plan.take(), plan.take()
    assert (first.prompt_start, second.prompt_start) == (0, 4)
    assert (first.first_group, second.first_group) == (0, 4)
    plan.give_back(first)
    assert plan.take() == first  # handed out again before any new item
    assert plan.take().prompt_start == 8
    plan.complete([first.item_id])
    state = plan.state()
    assert [item["item_id"] for item in state["outstanding"]] == [1, 2]
    restored = WorkPlan(4)
    restored.load_state(state)
    assert [restored.take().item_id for _ in range(3)] == [1, 2, 3]


def test_work_item_indices_follow_the_runs_prompt_order() -> None:
    plan = WorkPlan(prompts_per_item=3)
    items = [plan.take() for _ in range(4)]
    joined = np.concatenate([item.indices(7, 10, 3) for item in items])
    from llm_replay.runtime.rollouts import prompt_indices

    np.testing.assert_array_equal(joined, prompt_indices(7, 10, 0, 12))


def test_gate_delivers_each_item_exactly_once_under_concurrent_workers(
    rng: np.random.Generator,
) -> None:
    table = ReplayTable.queue(64, max_insert_batch=8, max_sample_batch=8)
    plan = WorkPlan(prompts_per_item=2)
    gate = IngestGate(table, plan)
    batches = {i: make_batch(rng, 8, first_group=2 * i) for i in range(40)}
    taken: list[int] = []
    given_back: set[int] = set()
    lock = threading.Lock()

    def worker() -> None:
        while True:
            item = plan.take()
            if item.item_id >= 40:
                with lock:
                    given_back.add(item.item_id)
                plan.give_back(item)
                return
            try:
                gate.deliver(batches[item.item_id], item.item_id)
            except TableClosed:
                return
            with lock:
                taken.append(item.item_id)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    drawn = 0
    while drawn < 40 * 8:
        drawn += len(table.sample(8, timeout=10))
    for thread in threads:
        thread.join(10)
    assert sorted(taken) == list(range(40))
    assert table.stats().inserts == gate.delivered_rollouts == 320
    # each worker took one item past the end and gave it back (a given-back item is handed out
    # again first, so the four workers may have seen one to four distinct items)
    assert 1 <= len(given_back) <= 4
    assert plan.state()["outstanding"] == [
        {"item_id": i, "prompt_start": 2 * i, "first_group": 2 * i} for i in sorted(given_back)
    ]
    assert sorted(given_back) == list(range(40, 40 + len(given_back)))


def test_gate_save_reports_deliveries_and_outstanding_items_at_the_same_instant(
    rng: np.random.Generator, tmp_path: Path
) -> None:
    table = ReplayTable.uniform(64)
    plan = WorkPlan(prompts_per_item=1)
    gate = IngestGate(table, plan)
    items = [plan.take() for _ in range(3)]
    gate.deliver(make_batch(rng, 4, first_group=0), items[0].item_id)
    gate.deliver(make_batch(rng, 4, first_group=2), items[2].item_id)
    saved = gate.save(tmp_path / "table", lambda: {"extra": 1})
    assert saved["delivered_ids"] == [0, 2] and saved["extra"] == 1
    assert [item["item_id"] for item in saved["work_plan"]["outstanding"]] == [1]
    assert ReplayTable.load(tmp_path / "table").size == 8
    assert gate.save(tmp_path / "again")["delivered_ids"] == [0, 2]  # what the table holds
    gate.deliver(make_batch(rng, 4, first_group=0), items[0].item_id)  # a retried delivery
    assert table.size == 8 and gate.delivered_rollouts == 8


def test_closing_the_table_wakes_a_blocked_delivery(rng: np.random.Generator) -> None:
    table = ReplayTable.queue(16, max_insert_batch=8, max_sample_batch=8)
    gate = IngestGate(table)
    gate.deliver(make_batch(rng, 8), 0)
    gate.deliver(make_batch(rng, 8), 2)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            gate.deliver(make_batch(rng, 8), 3)
        except TableClosed as error:
            errors.append(error)

    thread = threading.Thread(target=blocked)
    thread.start()
    wait_until(lambda: len(table._cond._waiters) == 1)  # type: ignore[attr-defined]
    assert thread.is_alive() and errors == [] and table.stats().inserts == 16
    table.close()
    thread.join(5)
    assert not thread.is_alive() and len(errors) == 1
    assert table.stats().inserts == 16


def test_async_table_band_admits_every_declared_batch() -> None:
    config = load_config("uniform", ["runtime=threaded"])
    table = build_async_table(config)
    limiter = table.rate_limiter
    assert limiter.samples_per_insert == 2.0
    assert limiter.max_insert_batch == 256 and limiter.max_sample_batch == 256
    assert limiter.max_diff - limiter.min_diff == 2 * error_buffer(config)
    assert steps_per_iteration(config) == 2
    on_policy_config = load_config("on_policy", ["runtime=threaded"])
    on_policy = build_async_table(on_policy_config)
    assert on_policy.sampler.name == "fifo" and on_policy.eviction.max_times_sampled == 1


def test_the_intake_queue_is_bounded_in_items_under_adaptive_rollouts() -> None:
    """An adaptive item holds fewer rows than a round: the queue admits as many items as it
    would full rounds (`max(2, workers.count)`), not as many as fit in its rows."""
    adaptive = build_async_table(load_config("auto", ["runtime=threaded", "workers.count=3"]))
    assert adaptive.name == "intake" and adaptive.max_items == 3
    assert adaptive.groups_per_item == 32 and adaptive.storage.capacity == 3 * 256
    fixed = build_async_table(
        load_config("auto", ["runtime=threaded", "generation.adaptive.enabled=false"])
    )
    assert fixed.name == "intake" and fixed.max_items is None


def test_a_band_too_narrow_to_be_deadlock_free_is_refused_at_load_time() -> None:
    with pytest.raises(ConfigError, match=r"workers\.error_buffer = 10.*deadlock"):
        load_config("uniform", ["runtime=threaded", "workers.error_buffer=10"])


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["runtime=threaded", "replay.method=rlep"], "replay.method = 'rlep'"),
        (["runtime=threaded", "generation.dynamic_sampling=true"], "generation.dynamic_sampling"),
        (["runtime=threaded", "workers.count=0"], "workers.count"),
        (["runtime=threaded", "workers.device=tpu"], "workers.device"),
        (["runtime=fast"], "runtime"),
    ],
)
def test_async_config_errors_name_the_field(overrides: list[str], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config("on_policy", overrides)
