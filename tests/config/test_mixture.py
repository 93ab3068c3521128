"""`task.kind: mixture`: the preset's members are read, and every bad mixture is refused at load
time with its dotted field."""

from __future__ import annotations

import pytest

from llm_replay.config import ConfigError, load_config


def test_the_preset_reads_four_equal_members_with_their_templates_and_answer_lengths() -> None:
    config = load_config("mixture")
    members = config.task.mixture_members
    assert [m.name for m in members] == ["gcd", "products", "binary_alternation", "lcm"]
    assert {m.weight for m in members} == {1.0}
    gcd = members[0]
    assert (gcd.dataset, gcd.prompt_template, gcd.answer_tokens) == ("gcd", "gcd{numbers}=", 4)
    assert config.generation.max_new_tokens >= max(m.answer_tokens or 0 for m in members)
    assert config.replay.method == "on_policy" and config.model.path == "builtin:tiny-mixture"


def test_the_shipped_mixture_model_was_built_on_the_presets_members_each_near_the_rule() -> None:
    """`scripts/build_tiny_model.py --mixture` with the suite's stopping rule per member: every
    member passed its check, and starts with room to learn on the eval split."""
    import json

    from llm_replay.models.loading import resolve_model_path

    config = load_config("mixture")
    build = json.loads((resolve_model_path(config.model.path) / "build.json").read_text())
    assert build["task"] == {"mixture": [m.name for m in config.task.mixture_members]}
    assert build["max_new_tokens"] == config.generation.max_new_tokens
    for name, member in build["members"].items():
        assert member["passed"], name
        assert 0.1 <= member["greedy_accuracy_eval"] <= 0.6, name


def test_a_member_may_rename_a_builtin_or_be_a_reasoning_gym_spec() -> None:
    config = load_config(
        "mixture",
        [
            "task.members={sums: {weight: 2, task: chain_sum}, "
            "spell: {weight: 0.5, dataset: spell_backward, params: {min_word_len: 3}, "
            "prompt_template: '{word}<', strip_spaces: true, answer_tokens: 8}}",
            "generation.max_new_tokens=8",
        ],
    )
    sums, spell = config.task.mixture_members
    assert (sums.name, sums.dataset, sums.weight) == ("sums", "chain_sum", 2.0)
    assert (spell.dataset, spell.params, spell.answer_tokens) == (
        "spell_backward",
        {"min_word_len": 3},
        8,
    )


BAD = [
    ("task.members={gcdd: {weight: 1}}", r"task\.members\.gcdd = 'gcdd': not a built-in task; did you mean 'gcd'\?"),
    ("task.members.x={task: prodcts}", r"task\.members\.x\.task = 'prodcts'.*did you mean 'products'\?"),
    ("task.members.gcd.weight=0", r"task\.members\.gcd\.weight = 0: must be finite and > 0"),
    ("task.members.gcd.weight=-2", r"task\.members\.gcd\.weight = -2"),
    ("task.members.gcd.weight=.nan", r"task\.members\.gcd\.weight = nan"),
    ("task.members.gcd.weight=heavy", r"task\.members\.gcd\.weight = 'heavy': expected a number"),
    ("task.members.gcd.weight=true", r"task\.members\.gcd\.weight = True: expected a number"),
    ("task.members={}", r"task\.members = \{\}: kind 'mixture' needs at least one member"),
    ("task.members.gcd.wieght=2", r"task\.members\.gcd\.wieght: unknown member key; did you mean 'weight'\?"),
    ("task.members.gcd=3", r"task\.members\.gcd = 3: expected a mapping"),
    ("task.members.gcd={task: gcd, dataset: gcd}", r"task\.members\.gcd: task = 'gcd' and dataset = 'gcd': give one"),
    ("task.members.gcd.prompt_template='gcd{numbers='", r"members\.gcd\.prompt_template = 'gcd\{numbers=': not a"),
    ("task.members.gcd.answer_tokens=0", r"task\.members\.gcd\.answer_tokens = 0"),
    ("task.dataset=gcd", r"task\.dataset = 'gcd': a single-task field, ignored by kind 'mixture'"),
    ("task.prompt_template='{n}#'", r"task\.prompt_template = '\{n\}#': a single-task field"),
    ("task.path=rows.jsonl", r"task\.path = 'rows\.jsonl': a single-task field"),
    ("generation.max_new_tokens=5", r"generation\.max_new_tokens = 5: task\.members\.products needs 6"),
]  # fmt: skip


@pytest.mark.parametrize(("override", "message"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_mixture_is_refused_at_load_naming_its_field(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("mixture", [override])


def test_members_off_a_mixture_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"task\.members: read only with kind = 'mixture'"):
        load_config("on_policy", ["task.members={gcd: {weight: 1}}"])


def test_a_child_config_replaces_the_members_whole(tmp_path) -> None:  # type: ignore[no-untyped-def]
    child = tmp_path / "two.yaml"
    child.write_text("extends: mixture\ntask:\n  members: {gcd: {weight: 1}, lcm: {weight: 3}}\n")
    members = load_config(child).task.mixture_members
    assert [(m.name, m.weight) for m in members] == [("gcd", 1.0), ("lcm", 3.0)]
