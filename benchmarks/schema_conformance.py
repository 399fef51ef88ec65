"""Usage: python benchmarks/schema_conformance.py [--suite DIR] [--verbose]

Runs the JSON-Schema-Test-Suite (draft2020-12, required tests) through compile_schema (the flat
automaton or the grammar form, as json_schema constraints compile): each instance is serialised
compactly (schema key order) and checked for acceptance. Prints a
JSON line and a per-file table: correct, false accepts (must be 0), false rejects, unsupported.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.language import compile_schema
from sgl_runtime.constrained.json_schema.serialize import compact_json

DEFAULT_SUITE = Path(__file__).resolve().parents[1].parent / "shared/data/json-schema-test-suite/draft2020-12"
OUTCOMES = ("correct", "false_accept", "false_reject", "unsupported")


def run_case(case: dict) -> list[tuple[str, dict, str]]:
    """[(outcome, test, detail)] for every instance of one test case."""
    try:
        dfa = compile_schema(case["schema"], integral_floats=True)  # instances such as 1.0 dump as "1.0"
    except ConstraintError as exc:
        return [("unsupported", t, str(exc)) for t in case["tests"]]
    out = []
    for test in case["tests"]:
        text = compact_json(test["data"], case["schema"])
        accepted = dfa.accepts(text)
        if accepted == test["valid"]:
            outcome = "correct"
        else:
            outcome = "false_accept" if accepted else "false_reject"
        out.append((outcome, test, text))
    return out


def run_suite(suite: Path) -> dict[str, Counter]:
    """Per-file outcome counts (plus the failing instances under the key '_details')."""
    per_file: dict[str, Counter] = {}
    for path in sorted(suite.glob("*.json")):
        counts = Counter()
        for case in json.loads(path.read_text()):
            for outcome, test, detail in run_case(case):
                counts[outcome] += 1
                if outcome in ("false_accept", "false_reject"):
                    counts.setdefault("_details", [])
                    counts["_details"].append((case["description"], test["description"], detail))
        per_file[path.name] = counts
    return per_file


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if not args.suite.is_dir():
        sys.exit(f"test suite not found at {args.suite}")
    start = time.perf_counter()
    per_file = run_suite(args.suite)
    elapsed = time.perf_counter() - start
    total = Counter()
    for counts in per_file.values():
        total.update({k: counts.get(k, 0) for k in OUTCOMES})
    summary = {k: total[k] for k in OUTCOMES}
    summary.update(instances=sum(summary.values()), seconds=round(elapsed, 2))
    print(json.dumps(summary))
    print(f"{'file':32} " + " ".join(f"{k:>13}" for k in OUTCOMES))
    for name, counts in per_file.items():
        print(f"{name:32} " + " ".join(f"{counts.get(k, 0):>13}" for k in OUTCOMES))
        if args.verbose:
            for detail in counts.get("_details", []):
                print("    ", detail)
    print(f"{'TOTAL':32} " + " ".join(f"{total[k]:>13}" for k in OUTCOMES))


if __name__ == "__main__":
    main()
