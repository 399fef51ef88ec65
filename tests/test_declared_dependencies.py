"""Every third-party module the packages import is installed by the extras a user is told to install:
`sgl_lang` by the base dependencies (plus `openai` for its OpenAI backend), `sgl_runtime` by
`.[runtime]` (plus `gpu` for triton), directly or as a dependency of one of them. A module
imported only by the test extras would pass CI and fail on a machine set up from the README.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = {"sgl_lang": ("openai",), "sgl_runtime": ("runtime", "gpu", "openai")}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def _declared(extras: tuple[str, ...]) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return {_name(r) for r in requirements}


def _with_dependencies(names: set[str]) -> set[str]:
    """`names` and what they require (not counting their own extras), as installed here."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def _third_party_imports(package: str) -> dict[str, str]:
    """Top-level module -> a file importing it, for every import outside the standard library."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("sgl_lang", "sgl_runtime"):
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("package", sorted(EXTRAS))
def test_every_import_is_installed_by_the_declared_extras(package):
    providers = metadata.packages_distributions()
    allowed = _with_dependencies(_declared(EXTRAS[package]))
    missing = []
    for module, path in sorted(_third_party_imports(package).items()):
        dists = {_name(d) for d in providers.get(module, [module])}
        if not dists & allowed:
            missing.append(f"{module} (imported by {path}; installed by {sorted(dists)})")
    assert not missing, f"not installed by {package}'s declared dependencies: {missing}"
