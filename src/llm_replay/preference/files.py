"""A file of given preference pairs (JSONL or Parquet): checked whole, then turned into pairs.

Each record has `prompt`, `chosen` and `rejected`, non-empty strings, with `chosen` different from
`rejected`; anything else is refused with the record and field named, before anything is stored.
The prompt is encoded as the run encodes its own (`model.chat_template`), each completion as its
text followed by the end-of-sequence token, as a generated completion ends. The pairs were not
sampled by this policy: their behaviour log-probs are the reference policy's (so `truncated_is`
weighs them against the initial weights), their policy version 0, their annotator `file`, and
their cost 0 on this run's meter (they were paid for before it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.config.parse import ConfigError
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.rollout import ANNOTATORS
from llm_replay.models import encode_prompts
from llm_replay.preference.pairs import ReferenceScorer

FIELDS = ("prompt", "chosen", "rejected")
FILE_PAIR_IDS = 1 << 40
"""Group ids of a file's pairs start here, clear of the run's own pairs' ids."""


class PreferenceFileError(ConfigError):
    """A preference file that cannot be used; the message names the file, record and field. A
    `ConfigError` (the file is `preference.file`'s value), so the CLI prints it as one line."""


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The file's records, each checked (see the module docstring)."""
    path = Path(path)
    where = "preference.file"
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            records: list[Any] = list(pq.read_table(path).to_pylist())
        except Exception as error:  # pyarrow raises several types for a bad file
            raise PreferenceFileError(
                f"{where} = {str(path)!r}: not readable Parquet ({error})"
            ) from None
        label = "row"
    elif path.suffix in (".jsonl", ".json"):
        records = []
        raw = _read_bytes(path, where)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            number = raw[: error.start].count(b"\n") + 1
            raise PreferenceFileError(
                f"{where} = {str(path)!r}: line {number} is not UTF-8 text"
            ) from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise PreferenceFileError(
                    f"{where} = {str(path)!r}: line {number} is not JSON ({error.msg})"
                ) from None
        label = "line"
    else:
        raise PreferenceFileError(f"{where} = {str(path)!r}: expected a .jsonl or .parquet file")
    if not records:
        raise PreferenceFileError(f"{where} = {str(path)!r}: holds no pairs")
    for number, record in enumerate(records, 1):
        at = f"{where} = {str(path)!r}, {label} {number}"
        if not isinstance(record, dict):
            raise PreferenceFileError(f"{at}: expected an object with {FIELDS}")
        for field in FIELDS:
            value = record.get(field)
            if value is None:
                raise PreferenceFileError(f"{at}: field {field!r} is missing")
            if not isinstance(value, str) or not value:
                raise PreferenceFileError(f"{at}: field {field!r} must be a non-empty string")
        if record["chosen"] == record["rejected"]:
            raise PreferenceFileError(f"{at}: field 'rejected' equals 'chosen' (no preference)")
    return records


def _read_bytes(path: Path, where: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:  # gone since the config was checked, a directory, no permission
        raise PreferenceFileError(
            f"{where} = {str(path)!r}: cannot read it ({error.strerror or error})"
        ) from None


def file_pairs(
    path: str | Path, tokenizer: Any, reference: ReferenceScorer, *, chat_template: str
) -> RolloutBatch:
    """The file's pairs as table rows (chosen, rejected, ...), ready for `PairReplay.insert`."""
    records = read_records(path)
    prompts = encode_prompts(tokenizer, [r["prompt"] for r in records], chat_template)
    eos = [int(tokenizer.eos_token_id)]
    completions = []
    for record in records:
        for side in ("chosen", "rejected"):
            completions.append(tokenizer(record[side], add_special_tokens=False)["input_ids"] + eos)
    n = len(records)
    rows = RolloutBatch.from_ragged(
        prompt_ids=[prompts[i // 2] for i in range(2 * n)],
        completion_ids=completions,
        behaviour_logprobs=[np.zeros(len(c), np.float32) for c in completions],
        rewards=np.tile([1.0, 0.0], n),
        advantages=np.tile([1.0, -1.0], n),
        group_ids=np.repeat(FILE_PAIR_IDS + np.arange(n), 2),
        policy_versions=np.zeros(2 * n, dtype=np.int64),
        annotators=np.full(2 * n, ANNOTATORS.index("file"), dtype=np.uint8),
    )
    return dataclasses.replace(
        rows,
        behaviour_logprobs=reference.token_logprobs(rows),
        reference_logprobs=reference.sequence_logprobs(rows),
    )
