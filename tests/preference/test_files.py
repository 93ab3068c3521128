"""A file of given pairs: JSONL and Parquet read the same; a bad file is refused whole with the
record and field named, before anything is stored."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_replay.data.rollout import ANNOTATORS
from llm_replay.models import load_policy
from llm_replay.preference.files import FILE_PAIR_IDS, PreferenceFileError, file_pairs
from llm_replay.preference.pairs import ReferenceScorer

PAIRS = [
    {"prompt": "1+2=", "chosen": "3", "rejected": "4"},
    {"prompt": "10+5=", "chosen": "15", "rejected": "51"},
]


def write_jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


@pytest.fixture(scope="module")
def policy():  # type: ignore[no-untyped-def]
    model, tokenizer = load_policy("builtin:tiny-chain-sum")
    return model, tokenizer, ReferenceScorer(model, temperature=0.7)


def test_a_jsonl_and_a_parquet_file_give_the_same_pairs(tmp_path: Path, policy) -> None:  # type: ignore[no-untyped-def]
    _, tokenizer, reference = policy
    jsonl = file_pairs(
        write_jsonl(tmp_path / "p.jsonl", PAIRS), tokenizer, reference, chat_template="off"
    )
    pq.write_table(pa.Table.from_pylist(PAIRS), tmp_path / "p.parquet")
    parquet = file_pairs(tmp_path / "p.parquet", tokenizer, reference, chat_template="off")
    assert jsonl.completion_ids.tolist() == parquet.completion_ids.tolist()
    assert len(jsonl) == 4 and jsonl.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert jsonl.group_ids.tolist() == [FILE_PAIR_IDS] * 2 + [FILE_PAIR_IDS + 1] * 2
    assert set(jsonl.annotators.tolist()) == {ANNOTATORS.index("file")}
    assert not jsonl.annotation_costs.any()
    texts = [
        tokenizer.decode(jsonl.select([i]).completion_ids, skip_special_tokens=True)
        for i in range(4)
    ]
    assert texts == ["3", "4", "15", "51"]
    # the reference's own log-probs stand in for the unknown behaviour policy
    sums = np.add.reduceat(
        jsonl.behaviour_logprobs, np.r_[0, np.cumsum(jsonl.completion_lengths)[:-1]]
    )
    np.testing.assert_allclose(sums, jsonl.reference_logprobs, rtol=1e-5)
    assert (jsonl.reference_logprobs < 0).all()


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([PAIRS[0], {"prompt": "2+2=", "chosen": "4"}], r"line 2: field 'rejected' is missing"),
        ([{"prompt": "2+2=", "chosen": "4", "rejected": "4"}], r"line 1: field 'rejected' equals"),
        ([{"prompt": "", "chosen": "4", "rejected": "5"}], r"line 1: field 'prompt' must be"),
        ([{"prompt": "2+2=", "chosen": 4, "rejected": "5"}], r"field 'chosen' must be"),
        ([["2+2=", "4", "5"]], r"line 1: expected an object"),
        ([], "holds no pairs"),
    ],
)
def test_a_bad_record_is_named(tmp_path: Path, policy, records, message) -> None:  # type: ignore[no-untyped-def]
    _, tokenizer, reference = policy
    with pytest.raises(PreferenceFileError, match=message):
        file_pairs(
            write_jsonl(tmp_path / "bad.jsonl", records), tokenizer, reference, chat_template="off"
        )


def test_unreadable_files_are_named(tmp_path: Path, policy) -> None:  # type: ignore[no-untyped-def]
    _, tokenizer, reference = policy
    (tmp_path / "torn.jsonl").write_text('{"prompt": "1+1=", "chosen": "2", \n')
    with pytest.raises(PreferenceFileError, match="line 1 is not JSON"):
        file_pairs(tmp_path / "torn.jsonl", tokenizer, reference, chat_template="off")
    (tmp_path / "x.csv").write_text("prompt,chosen,rejected\n")
    with pytest.raises(PreferenceFileError, match=r"expected a \.jsonl or \.parquet"):
        file_pairs(tmp_path / "x.csv", tokenizer, reference, chat_template="off")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(PreferenceFileError, match="not readable Parquet"):
        file_pairs(tmp_path / "bad.parquet", tokenizer, reference, chat_template="off")


def test_a_file_that_is_not_utf8_or_not_a_file_is_named_as_a_config_error(tmp_path: Path) -> None:
    """Issue #54: the CLI prints its `ConfigError`s as one line; a preference file's errors are
    one of them, and bytes that are not UTF-8 no longer escape as a UnicodeDecodeError."""
    from llm_replay.config import ConfigError
    from llm_replay.preference.files import read_records

    assert issubclass(PreferenceFileError, ConfigError)
    (tmp_path / "latin.jsonl").write_bytes(
        b'{"prompt": "1+1=", "chosen": "2", "rejected": "3"}\n\xe9\n'
    )
    with pytest.raises(PreferenceFileError, match=r"latin\.jsonl'?: line 2 is not UTF-8"):
        read_records(tmp_path / "latin.jsonl")
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(PreferenceFileError, match=r"folder\.jsonl'?: cannot read it"):
        read_records(tmp_path / "folder.jsonl")
