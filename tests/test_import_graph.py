"""The module graph stays a layered DAG: no import cycles (module level or inside functions),
no import from a lower layer into a higher one, `sgl_lang` never importing `sgl_runtime`,
and no package file over the size habit.

The layers, lowest first, are the ones docs/architecture.md describes. A module may import
from its own layer or any layer below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sgl_lang", "sgl_runtime")
MAX_LINES = 400

# sgl_runtime's layers, lowest first. A module belongs to the first prefix that matches it
# (longest prefixes are tried first); unlisted top-level modules are "base".
LAYERS = [
    ["sgl_runtime.base"],
    ["sgl_runtime.process"],
    ["sgl_runtime.kernels", "sgl_runtime.mem_cache", "sgl_runtime.distributed"],
    ["sgl_runtime.layers"],
    ["sgl_runtime.models"],
    ["sgl_runtime.model_loader"],
    ["sgl_runtime.model_executor"],
    ["sgl_runtime.constrained"],
    ["sgl_runtime.sampler", "sgl_runtime.penalties"],
    ["sgl_runtime.scheduler", "sgl_runtime.detokenizer"],
    ["sgl_runtime.server"],
    ["sgl_runtime.engine", "sgl_runtime.in_process", "sgl_runtime.launch_server", "sgl_runtime"],
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every project module `path` imports, at module level or inside a function."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _layer(name: str) -> int:
    prefixes = sorted(
        ((prefix, rank) for rank, group in enumerate(LAYERS) for prefix in group), key=lambda p: -len(p[0])
    )
    for prefix, rank in prefixes:
        if prefix == "sgl_runtime":
            continue
        if name == prefix or name.startswith(prefix + "."):
            return rank
    return len(LAYERS) - 1 if name == "sgl_runtime" else 0


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    graph = _graph()
    # A package's __init__ importing its own children is not a cycle of responsibility;
    # children importing the package (for its re-exports) would be, and is counted.
    assert _cycles(graph) == []


def test_no_upward_imports():
    upward = [
        f"{src} (layer {_layer(src)}) imports {dst} (layer {_layer(dst)})"
        for src, targets in _graph().items()
        if src.startswith("sgl_runtime")
        for dst in targets
        if dst.startswith("sgl_runtime") and _layer(dst) > _layer(src)
    ]
    assert upward == []


def test_frontend_never_imports_the_runtime():
    offenders = sorted(
        f"{src} imports {dst}"
        for src, targets in _graph().items()
        if src.startswith("sgl_lang")
        for dst in targets
        if dst.startswith("sgl_runtime")
    )
    assert offenders == []


def test_no_package_file_over_the_size_habit():
    long_files = sorted(
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    )
    assert long_files == []


@pytest.mark.parametrize("src,dst,expected", [("sgl_runtime.kernels.rmsnorm", "sgl_runtime.server.sse", True)])
def test_layer_check_sees_an_upward_import(src, dst, expected):
    assert (_layer(dst) > _layer(src)) is expected
