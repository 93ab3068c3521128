"""Train/eval splits by a hash partition of the problem space.

Filtering a train stream against an eval sample (what we did first) skews both splits when the
problem space is small: the frequent problems land in eval first, so the filter strips them from
train. On chain_sum with 1–2-digit operands, 49% of eval problems had two 1-digit operands against
0.1% of train problems, and 20,000 requested train problems shrank to 5,542.

Here every prompt belongs to exactly one side, decided by a hash of its text: eval holds the
prompts whose hash falls below `eval_share`. Each split is the first `size` draws of its own
generator stream that land on its side, repeats kept, so both splits follow the generator's
distribution (restricted to a random-looking half of the space, the same for both) and never share
a prompt. When the space is small, rows repeat; `SplitReport` says how many unique prompts each
split holds so the run can report it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from llm_replay.tasks.base import Problem, SplitReport, TaskError


def hash_fraction(prompt: str, salt: str = "") -> float:
    """A uniform-looking number in [0, 1) fixed by the prompt's text (and an optional salt)."""
    digest = hashlib.blake2b(f"{salt}\x00{prompt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def in_eval_side(prompt: str, eval_share: float, salt: str = "") -> bool:
    return hash_fraction(prompt, salt) < eval_share


def fill_split(
    draw: Callable[[int], Problem],
    *,
    size: int,
    eval_side: bool,
    eval_share: float,
    split: str,
    max_draws: int | None = None,
    salt: str = "",
) -> tuple[tuple[Problem, ...], SplitReport]:
    """The first `size` problems of the stream `draw(0), draw(1), ...` on the requested side.

    Stops early after `max_draws` (default: 50 × the draws `size` should need) and reports the
    shortfall instead of looping forever on a side the generator rarely reaches.
    """
    if not 0.0 < eval_share < 1.0:
        raise TaskError(f"eval_fraction = {eval_share!r}: must be in (0, 1)")
    share = eval_share if eval_side else 1.0 - eval_share
    limit = max_draws if max_draws is not None else max(1000, int(50 * size / share))
    kept: list[Problem] = []
    draws = 0
    while len(kept) < size and draws < limit:
        problem = draw(draws)
        draws += 1
        if in_eval_side(problem.prompt, eval_share, salt) == eval_side:
            kept.append(problem)
    report = SplitReport(split, size, len(kept), len({p.prompt for p in kept}), draws)
    return tuple(kept), report


def partition_rows(
    rows: list[Problem], eval_share: float, salt: str
) -> tuple[tuple[Problem, ...], tuple[Problem, ...]]:
    """(train, eval) of a fixed list of rows; every copy of a prompt goes to the same side."""
    if not 0.0 < eval_share < 1.0:
        raise TaskError(f"eval_fraction = {eval_share!r}: must be in (0, 1)")
    train: list[Problem] = []
    held_out: list[Problem] = []
    for row in rows:
        (held_out if in_eval_side(row.prompt, eval_share, salt) else train).append(row)
    return tuple(train), tuple(held_out)
