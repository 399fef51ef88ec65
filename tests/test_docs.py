"""docs/architecture.md keeps one line per module: a new module without its line fails here."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_has_a_line_in_architecture_md():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for package in ("sgl_lang", "sgl_runtime"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            directory = path.parent.relative_to(ROOT).as_posix() + "/"
            section = doc.split(f"### `{directory}`", 1)
            if len(section) < 2 or f"- `{path.name}`:" not in section[1].split("\n### ", 1)[0]:
                missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, f"modules missing from docs/architecture.md: {missing}"


def test_readme_links_the_reference_docs():
    readme = (ROOT / "README.md").read_text()
    for doc in ("docs/architecture.md", "docs/server.md", "docs/frontend.md", "docs/benchmarks.md"):
        assert doc in readme, doc
