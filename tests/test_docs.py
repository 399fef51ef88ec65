"""docs/architecture.md stays true: every path it names exists and every package has its line."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _named_paths(doc: str) -> set[str]:
    """Every `x/y.py` or `x/` path the doc names in backticks (relative to sgl_runtime/ unless it
    starts with a top-level folder of the repository)."""
    names = set(re.findall(r"`([A-Za-z0-9_./]+(?:\.py|/))`", doc))
    return {name for name in names if "/" in name or name.endswith(".py")}


def _resolve(name: str, files: list[str]) -> bool:
    """Named from the repository root, from sgl_runtime/, or by its tail within a package the doc
    is describing (`byte_dfa.py` beside `constrained/`)."""
    name = name.rstrip("/")
    return any(f == name or f.endswith("/" + name) for f in files)


def test_every_path_architecture_md_names_exists():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    named = _named_paths(doc)
    files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if not {".git", ".venv", ".whl"} & set(p.parts)]
    assert len(named) > 40
    assert sorted(name for name in named if not _resolve(name, files)) == []


def test_every_package_has_a_line_in_architecture_md():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(
        {
            path.parent.relative_to(ROOT).as_posix() + "/"
            for package in ("sgl_lang", "sgl_runtime")
            for path in (ROOT / package).rglob("__init__.py")
        }
    )
    missing = [pkg for pkg in packages if f"`{pkg}`" not in doc and f"`{pkg.split('/', 1)[1]}`" not in doc]
    assert missing == []


def test_readme_links_the_reference_docs():
    readme = (ROOT / "README.md").read_text()
    for doc in ("docs/architecture.md", "docs/server.md", "docs/frontend.md", "docs/benchmarks.md"):
        assert doc in readme, doc
