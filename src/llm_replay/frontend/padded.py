"""Rows in the padded layout Hugging Face trainers use, to and from llm-replay's rollouts.

A trainer built on `transformers` holds a batch as padded tensors: prompts padded on the left
(so generation continues from the right edge), completions on the right, each with its mask. A
front end reads a round out of that layout (`unpad`) and writes a drawn `Sample` back into it
(`sample_rows`, then `pad_rows`), with the behaviour log-probs beside the completion tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from llm_replay.buffer import Sample


def unpad(ids: npt.ArrayLike, mask: npt.ArrayLike) -> list[np.ndarray]:
    """Each row of a padded array, its masked entries only."""
    ids, mask = np.asarray(ids), np.asarray(mask).astype(bool)
    return [row[m] for row, m in zip(ids, mask, strict=True)]


def sample_rows(
    sample: Sample, rows: slice | None = None
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """A drawn sample's rows (all, or `rows`) as prompts, completions and the completions'
    behaviour log-probs."""
    picked = range(len(sample))[rows or slice(None)]
    prompt = sample.attention_mask & ~sample.loss_mask
    return (
        [sample.input_ids[r][prompt[r]] for r in picked],
        [sample.input_ids[r][sample.loss_mask[r]] for r in picked],
        [sample.behaviour_logprobs[r][sample.loss_mask[r]] for r in picked],
    )


def pad_rows(
    prompts: Sequence[Sequence[int] | np.ndarray],
    completions: Sequence[Sequence[int] | np.ndarray],
    pad_id: int,
    behaviour: Sequence[Sequence[float] | np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """`prompt_ids` / `prompt_mask` padded on the left, `completion_ids` / `completion_mask` and
    `behaviour` (zeros where not given) on the right; every width at least 1."""
    n = len(prompts)
    pw = max([len(p) for p in prompts] + [1])
    cw = max([len(c) for c in completions] + [1])
    out: dict[str, np.ndarray] = {
        "prompt_ids": np.full((n, pw), pad_id, dtype=np.int64),
        "prompt_mask": np.zeros((n, pw), dtype=np.int64),
        "completion_ids": np.full((n, cw), pad_id, dtype=np.int64),
        "completion_mask": np.zeros((n, cw), dtype=np.int64),
        "behaviour": np.zeros((n, cw), dtype=np.float32),
    }
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        p, c = len(prompt), len(completion)
        out["prompt_ids"][i, pw - p :], out["prompt_mask"][i, pw - p :] = prompt, 1
        out["completion_ids"][i, :c], out["completion_mask"][i, :c] = completion, 1
        if behaviour is not None:
            out["behaviour"][i, :c] = behaviour[i]
    return out
