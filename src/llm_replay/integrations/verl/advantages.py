"""The advantages a method decided, handed to verl's advantage step by row uid.

verl recomputes advantages at every step from `rm_scores`, grouped by each row's `uid`, so the
sampler gives every row it returns a uid of its own and books the method's advantage for it
(`frontend.advantage_book`); verl's advantage step, set to `algorithm.adv_estimator=llm_replay`,
reads them back (`plugin.py` registers the estimator). Both run in verl's driver process, the
one that builds the sampler and calls `_compute_advantage`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from llm_replay.frontend import advantage_book

ESTIMATOR = "llm_replay"
UID_PREFIX = "llmreplay-"


class AdvantageBook(advantage_book.AdvantageBook):
    noun = "uid"
    missing = (
        f"algorithm.adv_estimator={ESTIMATOR} needs trainer.v1.sampler.custom_sampler to be "
        "llm-replay's ReplaySampler, and reads in the process that runs it (verl's driver)"
    )


BOOK = AdvantageBook()


def book_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[str],
    book: AdvantageBook = BOOK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's (advantages, returns), both [B, T]: each row's booked advantage on its response
    tokens, 0 elsewhere.

    verl pads every step's batch to a multiple of lcm(data-parallel size, mini-batch × n) before
    the advantage step (`_balance_batch`, `padding_utils.upsample_batch_to_divisible_size`), with
    rows whose uid is `pad<hex>` and whose response mask is all zero. The sampler never returned
    them, so they are not booked: such a row (not booked, no response token) gets advantage 0 and
    never reaches the method. A row that is not booked but has response tokens is an error."""
    uids = [str(uid) for uid in index]
    mask = response_mask.to(torch.float32)
    found = book.get(uids)
    unbooked = [
        uid
        for uid, value, row in zip(uids, found, mask, strict=True)
        if value is None and row.any()
    ]
    if unbooked:
        book.read(unbooked)  # raises, naming the first
    values = torch.tensor([0.0 if v is None else v for v in found], dtype=torch.float32)
    values = values.to(device=token_level_rewards.device)
    scores = values[:, None] * mask
    return scores, scores
