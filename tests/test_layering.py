"""Layering: no import cycle anywhere in src (imports inside functions included), the buffer
imports nothing of llm_replay above it, and the light modules load without torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "llm_replay"
BELOW_BUFFER = {
    "llm_replay.data",
    "llm_replay.data.batch",
    "llm_replay.data.rollout",
    "llm_replay.data.validation",
    "llm_replay",
}


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


def test_the_buffer_imports_nothing_above_it() -> None:
    for name, targets in import_graph().items():
        if name.startswith("llm_replay.buffer"):
            above = {t for t in targets if not t.startswith("llm_replay.buffer")} - BELOW_BUFFER
            assert not above, f"{name} imports {sorted(above)}"


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
