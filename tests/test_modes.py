"""Modes are objects that answer for themselves (issue #55): no code outside a mode's own object
compares a mode name. A runtime (`config.runtimes`), a token control
(`algorithms.token_control.TokenControl`), verl's trainer modes, the anneal's mode and the pair
table's each state what they do and refuse; everyone else asks them (`chooses_at_random`,
`refusal(config)`, `replays`, ...) instead of writing `runtime != "sync"` again."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "llm_replay"
MODE_NAMES = {"mode", "runtime", "token_control", "trainer_mode"}
OWN = {"self.mode", "self.settings.mode"}  # an object reading its own mode (or its settings')


def _holds_a_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_holds_a_name(e) for e in node.elts)
    return False


def _mode(node: ast.AST) -> str | None:
    """The mode `node` reads (`x.runtime`, `runtime`, `settings.get("mode")`), or None."""
    if isinstance(node, ast.Attribute) and node.attr in MODE_NAMES:
        return ast.unparse(node)
    if isinstance(node, ast.Name) and node.id in MODE_NAMES:
        return node.id
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in MODE_NAMES
    ):
        return ast.unparse(node)
    return None


def mode_branches(source: str) -> list[str]:
    """Every comparison of a mode with a mode's name in `source`, except an object's own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(_holds_a_name(side) for side in sides):
            continue
        modes = [m for m in map(_mode, sides) if m is not None and m not in OWN]
        if modes:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_what_it_should() -> None:
    assert mode_branches('if learned and runtime != "sync": pass') == ["1: runtime != 'sync'"]
    assert mode_branches('x = config.algorithm.token_control == "clip_cov"')
    assert mode_branches('x = self.pairs.mode in ("none", "uniform")')
    assert mode_branches('x = d.get("token_control", "off") == "off"')
    assert not mode_branches('x = self.mode == "kl_cov"')  # the object's own
    assert not mode_branches("x = self.pairs.replays")
    assert not mode_branches("x = mode not in MODES")  # a check against the registry


def test_no_mode_name_is_compared_outside_its_own_object() -> None:
    found = {
        str(path.relative_to(PACKAGE)): branches
        for path in sorted(PACKAGE.rglob("*.py"))
        if (branches := mode_branches(path.read_text()))
    }
    assert found == {}, found
