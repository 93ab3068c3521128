"""Where each rollout's payload sits in the arena, with each group's prompt stored once.

A GRPO group is G completions of one prompt, and an insert delivers a group's rollouts next to
each other. Storing the prompt with every rollout would store it G times, which for long prompts
(retrieved documents, few-shot examples, a long system prompt) is most of the payload. So the
arena holds a run of rows that share a prompt as

    [prompt | completion_1 | log-probs_1] [completion_2 | log-probs_2] ... [completion_G | ...]

and each rollout has two offsets: `prompt_offset` (where its prompt starts) and
`completion_offset` (where its completion starts, its log-probs following). The first row of a
run, its *leader*, is laid out exactly as an unshared row, so a leader's window
``arena[prompt_offset : completion_offset + C]`` is its whole sequence.

Rows share a prompt when they are adjacent in the insert, have the same `group_id` and the same
prompt tokens (compared, not assumed: a group id is not a promise). Rows of a group that arrive
apart, or in different inserts, keep their own copies; correct, only less compact.

Two invariants the ring and the gather rely on, which this layout keeps by construction:
- a prompt is stored before every completion that uses it, in the same contiguous block, so the
  oldest live row's `prompt_offset` is where the live payload begins (the ring's tail);
- ``completion_offset - prompt_len >= 0`` for every row (a follower's prompt-length worth of
  units before its completion belong to its run), so a row window that starts there and reads
  the completion at column P never leaves the buffer.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.kernels import compiled

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


def exclusive_cumsum(values: I64) -> I64:
    """[0, v0, v0 + v1, ...] of the same length as `values`."""
    out = np.zeros(len(values), dtype=np.int64)
    if len(values) > 1:
        np.cumsum(values[:-1], out=out[1:])
    return out


def shares_previous_prompt(group_ids: I64, prompt_len: I64, prompt_ids: npt.ArrayLike) -> B:
    """For each row of a batch: does it store its prompt with the previous row's (same group
    id, same prompt tokens)? `prompt_ids` is the batch's flat prompt array (row after row)."""
    prompts = np.asarray(prompt_ids)
    n = len(prompt_len)
    shares = np.zeros(n, dtype=bool)
    if n < 2:
        return shares
    p = prompt_len.astype(np.int64)
    kernels = compiled()
    if kernels is not None:
        kernels.shares(np.asarray(group_ids, dtype=np.int64), p, prompts, shares)
        return shares
    candidates = np.flatnonzero((group_ids[1:] == group_ids[:-1]) & (p[1:] == p[:-1])) + 1
    if not len(candidates):
        return shares
    from llm_replay.data.batch import concat_ranges

    lengths = p[candidates]
    here = concat_ranges(exclusive_cumsum(p)[candidates], lengths)
    differs = prompts[here] != prompts[here - np.repeat(lengths, lengths)]
    owner = np.repeat(np.arange(len(candidates)), lengths)
    mismatched = np.bincount(owner[differs], minlength=len(candidates)) > 0
    shares[candidates[~mismatched]] = True
    return shares


def stored_units(shares: B, prompt_len: I64, completion_len: I64) -> I64:
    """Arena units each row adds: its completion and log-probs, plus its prompt if it leads."""
    c = completion_len.astype(np.int64)
    return 2 * c + np.where(shares, 0, prompt_len.astype(np.int64))


def row_offsets(shares: B, prompt_len: I64, starts: I64) -> tuple[I64, I64]:
    """(prompt_offset, completion_offset) of consecutive rows whose blocks begin at `starts`."""
    n = len(shares)
    leader = np.maximum.accumulate(np.where(shares, 0, np.arange(n, dtype=np.int64)))
    prompt_offset = starts[leader]
    completion_offset = starts + np.where(shares, 0, prompt_len.astype(np.int64))
    return prompt_offset, completion_offset


def compacted(
    prompt_offset: I64, completion_offset: I64, prompt_len: I64, completion_len: I64
) -> tuple[I64, I64, I64, I64, I64]:
    """A gap-free layout for live rows given oldest first: every distinct prompt once, before
    the first row that uses it, then that row's completion and log-probs.

    Returns (segment sources, segment lengths, segment destinations, new prompt offsets, new
    completion offsets). Segments alternate prompt, row, prompt, row...; a prompt segment is
    empty where the row reuses the previous row's prompt."""
    n = len(prompt_offset)
    new_prompt = np.ones(n, dtype=bool)
    new_prompt[1:] = prompt_offset[1:] != prompt_offset[:-1]
    p = np.where(new_prompt, prompt_len.astype(np.int64), 0)
    sources = np.stack((prompt_offset, completion_offset), axis=1).ravel()
    lengths = np.stack((p, 2 * completion_len.astype(np.int64)), axis=1).ravel()
    destinations = exclusive_cumsum(lengths)
    new_completion = destinations[1::2]
    leader = np.maximum.accumulate(np.where(new_prompt, np.arange(n, dtype=np.int64), 0))
    new_prompt_offset = destinations[0::2][leader]
    return sources, lengths, destinations, new_prompt_offset, new_completion


def contiguous_runs(sources: I64, lengths: I64, destinations: I64) -> list[tuple[int, int, int]]:
    """(source, destination, units) of the maximal copies that move the given segments: adjacent
    segments that are adjacent in the source too are copied as one."""
    keep = lengths > 0
    src, size, dst = sources[keep], lengths[keep], destinations[keep]
    if not len(src):
        return []
    breaks = np.flatnonzero(src[1:] != src[:-1] + size[:-1]) + 1
    first = np.concatenate(([0], breaks))
    last = np.concatenate((breaks, [len(src)])) - 1
    ends = dst[last] + size[last]
    return [
        (int(s), int(d), int(e - d))
        for s, d, e in zip(src[first].tolist(), dst[first].tolist(), ends.tolist(), strict=True)
    ]
