"""Usage: python benchmarks/schema_corpus_build.py [--cfn-resources N] [--seed S] [--relabel]

Gathers the real-world JSON Schema corpus into benchmarks/schema_corpus/: schemas whose licences
allow redistribution, each with valid and invalid instances that jsonschema labels (see
schema_instances.py). Sources, read from installed or downloaded PyPI packages:
- check-jsonschema's vendored SchemaStore and vendor schemas (`pip download --no-deps`), with
  its licence files;
- cfn-lint's AWS CloudFormation resource and template schemas (MIT-0), a deterministic sample;
- the OpenAPI 2.0-3.2 schemas of openapi-spec-validator (Apache-2.0) and openapi-schema-validator
  (BSD-3-Clause), and the draft metaschemas of jsonschema-specifications (MIT);
- this project's benchmarks/schemas/ and the tool (function-calling) schemas of its tests/examples.
Writes corpus.json.gz (schemas and instances), manifest.json (source and licence per schema,
instance counts) and LICENSES/. --relabel keeps the corpus and labels its instances again with
schema_instances.Labeller (an instance whose label changes moves to the other list; one whose label
depends on whether `format` asserts is left out).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from schema_instances import Labeller, instances  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks/schema_corpus"
VENDOR_LICENCES = {  # check-jsonschema's vendor/README.md: everything else is SchemaStore's (Apache-2.0)
    "azure-pipelines": ("MIT", "LICENSE.azure-pipelines"),
    "readthedocs": ("MIT", "LICENSE.readthedocs"),
    "gitlab-ci": ("MIT (GitLab CE)", "LICENSE.gitlab"),
    "buildkite": ("MIT", "LICENSE.buildkite"),
    "taskfile": ("MIT", "LICENSE.task"),
    "bitbucket-pipelines": ("MIT", "LICENSE.bitbucket-pipelines"),
    "changie": ("MIT", "LICENSE.changie"),
    "citation-file-format": ("CC-BY-4.0", "LICENSE.citation-file-format"),
    "compose-spec": ("Apache-2.0", "LICENSE.compose-spec"),
    "meltano": ("MIT", "LICENSE.meltano"),
}
COPYLEFT = ("renovate", "snapcraft")  # AGPL-3.0 / GPL-3.0: left out of a permissively licensed repository


def check_jsonschema_schemas(workdir: Path) -> list[dict]:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "check-jsonschema==0.39.0", "-d", str(workdir)],
        check=True,
    )
    wheel = next(workdir.glob("check_jsonschema-*.whl"))
    zipfile.ZipFile(wheel).extractall(workdir / "x")
    root = workdir / "x/check_jsonschema/builtin_schemas"
    for licence in (root / "vendor/licenses").iterdir():
        if licence.suffix.lstrip(".") not in COPYLEFT:
            _copy_licence(licence, "check-jsonschema/" + licence.name)
    _copy_licence(
        next((workdir / "x").glob("check_jsonschema-*.dist-info/licenses/LICENSE")), "check-jsonschema/LICENSE"
    )
    out = []
    for path in sorted((root / "vendor").glob("*.json")) + sorted((root / "custom").glob("*.json")):
        if path.stem in COPYLEFT:
            continue
        licence, file = VENDOR_LICENCES.get(path.stem, ("Apache-2.0 (SchemaStore)", "LICENSE.schemastore"))
        if path.parent.name == "custom":
            licence, file = "Apache-2.0 (check-jsonschema)", "LICENSE"
        out.append(
            _entry(f"schemastore/{path.stem}", path, f"check-jsonschema 0.39.0 {path.parent.name}/{path.name}", licence)
        )
        out[-1]["licence_file"] = f"check-jsonschema/{file}" if file else None
    return out


def cfn_lint_schemas(count: int) -> list[dict]:
    import cfnlint

    root = Path(cfnlint.__file__).parent / "data/schemas"
    dist = next(Path(cfnlint.__file__).parent.parent.glob("cfn_lint-*.dist-info"))
    version = dist.name.split("-")[1].removesuffix(".dist")
    _copy_licence(dist / "licenses/LICENSE", "cfn-lint/LICENSE")
    resources = sorted(root.glob("resources/*.json"), key=lambda p: json.loads(p.read_text()).get("typeName", ""))
    step = max(1, len(resources) // count)
    picked = resources[::step][:count]
    others = sorted(p for p in root.glob("other/**/*.json"))
    out = []
    for path in picked:
        name = json.loads(path.read_text()).get("typeName", path.stem).replace("::", "_")
        out.append(_entry(f"cfn/{name}", path, f"cfn-lint {version} data/schemas/resources/{path.name}", "MIT-0"))
    for path in others:
        rel = path.relative_to(root / "other")
        out.append(
            _entry(f"cfn-other/{rel.with_suffix('')}", path, f"cfn-lint {version} data/schemas/other/{rel}", "MIT-0")
        )
    for e in out:
        e["licence_file"] = "cfn-lint/LICENSE"
    return out


def package_schemas() -> list[dict]:
    out = []
    for module, licence, pattern, licence_file in (
        ("openapi_spec_validator", "Apache-2.0", "resources/schemas/*/schema.json", None),
        ("openapi_schema_validator", "BSD-3-Clause", "schemas/**/*.json", None),
        ("jsonschema_specifications", "MIT", "schemas/draft*/metaschema.json", None),
    ):
        spec = importlib.util.find_spec(module)
        root = Path(spec.origin).parent
        licence_files = sorted(root.parent.glob(f"{module}-*.dist-info/licenses/*"))
        for file in licence_files:
            _copy_licence(file, f"{module}/{file.name}")
        licence_file = f"{module}/{licence_files[0].name}" if licence_files else None
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root)
            name = (
                module.split("_")[0] + "/" + str(rel.parent).replace("resources/schemas/", "").replace("schemas/", "")
            )
            if path.stem != "schema" and path.stem != "metaschema":
                name += "/" + path.stem
            e = _entry(name, path, f"{module} {rel}", licence)
            e["licence_file"] = licence_file
            out.append(e)
    return out


def project_schemas() -> list[dict]:
    out = []
    for path in sorted((REPO / "benchmarks/schemas").glob("*.json")):
        e = _entry(f"project/{path.stem}", path, f"this project benchmarks/schemas/{path.name}", "project")
        out.append(e)
    for file in ("tests/test_tool_calls.py", "examples/tool_call.py"):
        tree = ast.parse((REPO / file).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TOOLS":
                for tool in ast.literal_eval(node.value):
                    fn = tool["function"]
                    schema = fn["parameters"]
                    out.append(
                        _record(f"tools/{Path(file).stem}/{fn['name']}", schema, f"this project {file}", "project")
                    )
    for e in out:
        e["licence_file"] = None
    return out


def _entry(name: str, path: Path, source: str, licence: str) -> dict:
    return _record(name, json.loads(path.read_text()), source, licence)


def _record(name: str, schema, source: str, licence: str) -> dict:
    digest = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:16]
    return {"name": name, "source": source, "licence": licence, "sha256_16": digest, "schema": schema}


def _copy_licence(path: Path, rel: str) -> None:
    target = OUT / "LICENSES" / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cfn-resources", type=int, default=220)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--per-schema", type=int, default=4, help="valid and invalid instances per schema")
    parser.add_argument("--relabel", action="store_true", help="label the corpus's instances again")
    args = parser.parse_args()
    if args.relabel:
        with gzip.open(OUT / "corpus.json.gz", "rt", encoding="utf-8") as f:
            corpus = json.load(f)
        for e in corpus:
            _relabel(e)
        _write(corpus)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        entries = check_jsonschema_schemas(Path(tmp))
    entries += cfn_lint_schemas(args.cfn_resources) + package_schemas() + project_schemas()
    seen, corpus = set(), []
    for i, e in enumerate(entries):
        if e["sha256_16"] in seen:
            continue
        seen.add(e["sha256_16"])
        e["valid"], e["invalid"] = instances(e["schema"], args.seed + i, args.per_schema)
        corpus.append(e)
        print(f"{e['name']:60} valid {len(e['valid'])} invalid {len(e['invalid'])}", flush=True)
    _write(corpus)


def _relabel(entry: dict) -> None:
    """Move each instance of `entry` to the list its Labeller label puts it in (an instance whose
    label depends on whether `format` asserts, or whose pattern backtracks too long, is left out)."""
    label = Labeller(entry["schema"])
    labelled: dict = {"valid": [], "invalid": []}
    for value in entry["valid"] + entry["invalid"]:
        verdict = label(value)
        if verdict is not None:
            labelled["valid" if verdict else "invalid"].append(value)
    valid, invalid = len(labelled["valid"]) - len(entry["valid"]), len(labelled["invalid"]) - len(entry["invalid"])
    if valid or invalid:
        print(f"{entry['name']:60} {valid:+d} valid {invalid:+d} invalid", flush=True)
    entry.update(labelled)


def _write(corpus: list) -> None:
    with gzip.open(OUT / "corpus.json.gz", "wt", encoding="utf-8") as f:
        json.dump(corpus, f, separators=(",", ":"), ensure_ascii=False)
    manifest = [
        {k: e[k] for k in ("name", "source", "licence", "licence_file", "sha256_16")}
        | {"draft": e["schema"].get("$schema") if isinstance(e["schema"], dict) else None}
        | {"valid": len(e["valid"]), "invalid": len(e["invalid"])}
        for e in corpus
    ]
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(
        json.dumps(
            {
                "schemas": len(corpus),
                "valid": sum(m["valid"] for m in manifest),
                "invalid": sum(m["invalid"] for m in manifest),
            }
        )
    )


if __name__ == "__main__":
    main()
