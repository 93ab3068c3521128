"""The named table configurations of the papers, as class methods of `ReplayTable`.

Kept apart from `table.py` so the table's concurrency reads on its own; `ReplayTable` inherits
them, so `ReplayTable.uniform(...)` etc. are how callers build the usual tables.
"""

from __future__ import annotations

from typing import Any, Self, cast

from llm_replay.buffer.rate_limit import RateLimiter
from llm_replay.buffer.removers import PositiveRetention
from llm_replay.buffer.samplers import Fifo, Prioritized, Uniform
from llm_replay.buffer.task_parts import TaskParts


def _build(cls: type, *args: Any, tasks: TaskParts | None = None, **kwargs: Any) -> Any:
    """Every preset's table, its sampler and remover wrapped by `tasks` (`buffer.task_parts`)."""
    if tasks is not None:
        kwargs = tasks.wrap(kwargs)
    return cls(*args, **kwargs)


class TablePresets:
    """Class methods building the tables the papers use (mixed into `ReplayTable`)."""

    @classmethod
    def queue(
        cls,
        max_rollouts: int,
        *,
        max_insert_batch: int | None = None,
        max_sample_batch: int | None = None,
        **kwargs: Any,
    ) -> Self:
        """The on-policy queue: oldest first, each rollout used once; a full queue blocks inserts.

        Inserts of up to `max_insert_batch` and samples of up to `max_sample_batch` rollouts
        (default: half the queue each) are admitted; their sum must fit in the queue.
        """
        insert_batch = max_insert_batch or max(1, max_rollouts // 2)
        sample_batch = max_sample_batch or max(1, max_rollouts - insert_batch)
        limiter = RateLimiter(
            samples_per_insert=1.0,
            min_size_to_sample=1,
            min_diff=0.0,
            max_diff=float(max_rollouts),
            max_insert_batch=insert_batch,
            max_sample_batch=sample_batch,
        )
        kwargs.setdefault("rate_limiter", limiter)
        return cast(Self, _build(cls, max_rollouts, sampler=Fifo(), max_times_sampled=1, **kwargs))

    @classmethod
    def uniform(cls, max_rollouts: int, *, replacement: bool = True, **kwargs: Any) -> Self:
        """FIFO buffer of size N, uniform sampling without removal (arXiv 2604.08706)."""
        return cast(
            Self, _build(cls, max_rollouts, sampler=Uniform(replacement=replacement), **kwargs)
        )

    @classmethod
    def positive_biased(cls, max_rollouts: int, *, delta: float = 0.5, **kwargs: Any) -> Self:
        """Freshest (1-δ)N plus freshest δN correct rollouts, uniform draws (arXiv 2604.08706):
        the uniform sampler over what `PositiveRetention` keeps."""
        remover = PositiveRetention(delta=delta)
        return cast(Self, _build(cls, max_rollouts, sampler=Uniform(), remover=remover, **kwargs))

    @classmethod
    def prioritized(
        cls,
        max_rollouts: int,
        *,
        alpha: float = 0.5,
        beta: float = 0.4,
        max_age: int | None = 10,
        decay_steps: float | None = None,
        **kwargs: Any,
    ) -> Self:
        """|A|-prioritized rollouts with age eviction (arXiv 2606.04560: α=0.5, τ_max=10);
        `decay_steps` = τ multiplies each mass by exp(−age/τ) (FreshPER, arXiv 2604.16918)."""
        sampler = Prioritized(alpha=alpha, beta=beta, decay_steps=decay_steps)
        return cast(Self, _build(cls, max_rollouts, sampler=sampler, max_age=max_age, **kwargs))
