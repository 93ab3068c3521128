"""Layering: the packages in layers declared once (`LAYERS`), every import (inside functions
included) from a package to one strictly below it, so no package imports upward and packages
have no cycles; no import cycle between modules either; the light modules load without torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "llm_replay"
LAYERS: list[set[str]] = [  # bottom first; a top-level module is a package of its own
    {"checks"},
    {"data", "near_miss", "metrics", "generation", "algorithms"},
    {"llm_replay", "buffer", "models"},
    {"tasks", "learner", "methods"},
    {"evaluation"},
    {"config"},
    {"preference"},
    {"runtime"},
    {"frontend"},
    {"rescore", "terminal"},
    {"integrations"},
    {"experiments"},
    {"cli"},
]
LAYER_OF = {package: i for i, layer in enumerate(LAYERS) for package in layer}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles_between_modules() -> None:
    graph = import_graph()
    # a package's __init__ re-exporting its own submodules is not a cycle between modules
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not t.startswith(name + ".")}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def package_of(module: str) -> str:
    """`llm_replay.buffer.table` -> `buffer`; the package's own `__init__` -> `llm_replay`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_package_is_in_exactly_one_layer() -> None:
    packages = {package_of(m) for m in import_graph()}
    assert packages == set(LAYER_OF), (
        f"not in a layer: {sorted(packages - set(LAYER_OF))}; "
        f"no such package: {sorted(set(LAYER_OF) - packages)}"
    )
    assert sum(len(layer) for layer in LAYERS) == len(LAYER_OF)


def test_every_import_goes_to_a_lower_layer() -> None:
    """So no package imports upward, and the packages have no cycle: a package imports only its
    own modules and packages of strictly lower layers (lazy imports included)."""
    upward = []
    for name, targets in import_graph().items():
        here = package_of(name)
        for target in targets:
            there = package_of(target)
            if there != here and LAYER_OF[there] >= LAYER_OF[here]:
                upward.append(f"{name} -> {target} (layer {LAYER_OF[here]} -> {LAYER_OF[there]})")
    assert not upward, "\n".join(upward)


def test_nothing_outside_the_cli_imports_it() -> None:
    for name, targets in import_graph().items():
        if not name.startswith("llm_replay.cli"):
            upward = sorted(t for t in targets if t.startswith("llm_replay.cli"))
            assert not upward, f"{name} imports {upward}"


@pytest.mark.parametrize(
    "module",
    ["llm_replay.buffer", "llm_replay.config", "llm_replay.methods", "llm_replay.data",
     "llm_replay.experiments.analysis", "llm_replay.experiments.report",
     "llm_replay.experiments.compare", "llm_replay.experiments.archive", "llm_replay.cli",
     "llm_replay.cli.commands", "llm_replay.algorithms.losses", "llm_replay.runtime.layout",
     "llm_replay.runtime.schedule", "llm_replay.terminal"],
)  # fmt: skip
def test_light_modules_load_without_torch(module: str) -> None:
    code = (
        f"import sys, {module}; heavy = {{'torch', 'transformers'}} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
