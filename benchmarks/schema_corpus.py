"""Usage: python benchmarks/schema_corpus.py [--libs ours,llguidance,xgrammar,outlines-core] [--timeout S]
                                      [--every K] [--limit N] [--names SUBSTR ...] [--json OUT]

The real-world schema corpus (benchmarks/schema_corpus/, built by schema_corpus_build.py) through
each library with the Qwen2.5 tokenizer on one CPU thread. Per schema, in a worker process that
is killed at --timeout: compile to the first mask (time to first mask), then walk every valid and
invalid instance's tokens (compact JSON in the schema's key order, as the JSON-Schema-Test-Suite
runner serialises it) through the cursor, timing each mask of the valid walks (first visits
included; times are the worker process's CPU time). An instance is accepted when each token is in the mask, the cursor advances over it,
and the cursor accepts at the end. Prints a JSON line per library and a table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
CORPUS = Path(__file__).resolve().parent / "schema_corpus/corpus.json.gz"
# The worker's CPU time, all its threads: on a shared machine wall time is mostly waiting for a core.
CLOCK = time.process_time


# one schema of each form (grammar rules, one automaton), so that per-process tables are built before timing
_W = {"type": "object", "properties": {"w": {"type": "string"}}}
WARMUP = [
    {"schema": _W, "valid": [{"w": "x"}], "invalid": []},
    {"schema": {**_W, "required": ["w"], "additionalProperties": False}, "valid": [{"w": "x"}], "invalid": []},
]


def load_corpus(path: Path = CORPUS) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def run_schema(lib, tokenizer, entry: dict) -> dict:
    """Compile `entry`'s schema with `lib`, time its masks, decide its instances."""
    from schema_corpus_libs import Refused

    from sgl_runtime.constrained.json_schema.serialize import compact_json

    start = CLOCK()
    try:
        compiled = lib.compile(entry["schema"])
        cursor = lib.cursor(compiled)
        cursor.mask()
    except Refused as exc:
        return {"status": "refused", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a library crash on one schema is that schema's verdict
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:300]}
    first = CLOCK() - start
    masks: list[float] = []
    out = {"status": "compiled", "first_mask_s": first, "valid_rejected": [], "invalid_accepted": []}
    for label in ("valid", "invalid"):
        for instance in entry[label]:
            text = compact_json(instance, entry["schema"])
            ids = tokenizer.encode(text, add_special_tokens=False)
            accepted = walk(lib.cursor(compiled), ids, masks if label == "valid" else None)
            if accepted != (label == "valid"):
                out["valid_rejected" if label == "valid" else "invalid_accepted"].append(text[:300])
    out["mask_s"] = masks
    return out


def walk(cursor, ids: list[int], times: list | None) -> bool:
    for token in ids:
        t0 = CLOCK()
        mask = cursor.mask()
        if times is not None:
            times.append(CLOCK() - t0)
        if not cursor.allowed(mask, token) or not cursor.advance(token):
            return False
    return cursor.accepting()


def _worker(lib_name: str, conn, cold_memo: bool = False) -> None:
    from schema_corpus_libs import LIBRARIES

    from sgl_runtime.constrained.vocabulary import Vocabulary
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer
    from sgl_runtime.process.ipc import tune_gc

    tune_gc()  # the collector settings of the server's scheduler and compile workers
    tokenizer = load_qwen2_tokenizer()
    lib = LIBRARIES[lib_name](tokenizer, Vocabulary.from_tokenizer(tokenizer))
    for entry in WARMUP:
        run_schema(lib, tokenizer, entry)  # one-off per-process tables (token tries, caches) are not a schema's cost
    conn.send(("ready", lib.version()))
    corpus = load_corpus()
    while True:
        index = conn.recv()
        if index is None:
            return
        if cold_memo:  # each schema compiled as if first: no automaton operation kept from earlier ones
            from sgl_runtime.constrained import automata_memo

            automata_memo.clear()
        conn.send(("done", run_schema(lib, tokenizer, corpus[index])))


class Worker:
    """One library in a child process; restarted after a timeout kills it."""

    def __init__(self, lib_name: str, cold_memo: bool = False) -> None:
        self.lib_name, self.cold_memo = lib_name, cold_memo
        self.version = None
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(self.lib_name, child, self.cold_memo), daemon=True)
        self.process.start()
        if not self.conn.poll(600):
            raise RuntimeError(f"{self.lib_name}: worker did not start")
        _, self.version = self.conn.recv()

    def run(self, index: int, timeout: float) -> dict:
        self.conn.send(index)
        if self.conn.poll(timeout):
            try:
                return self.conn.recv()[1]
            except EOFError:
                pass
        crashed = self.process.exitcode is not None
        self.process.kill()
        self.process.join()
        self._start()
        return {"status": "error", "reason": "worker crashed"} if crashed else {"status": "timeout"}

    def close(self) -> None:
        self.conn.send(None)
        self.process.join(5)


def summarise(lib: str, version: str, results: list[dict], corpus: list[dict]) -> dict:
    statuses = Counter(r["status"] for r in results)
    compiled = [r for r in results if r["status"] == "compiled"]
    first = sorted(r["first_mask_s"] for r in compiled)
    masks = sorted(t for r in compiled for t in r["mask_s"])
    reasons = Counter(_reason_group(r["reason"]) for r in results if r["status"] in ("refused", "error"))
    return {
        "library": lib,
        "version": version,
        "schemas": len(results),
        "compiled": statuses["compiled"],
        "refused": statuses["refused"],
        "errors": statuses["error"],
        "timeouts": statuses["timeout"],
        "first_mask_ms": {p: _ms(first, q) for p, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
        "mask_us": {p: _ms(masks, q, 1e6) for p, q in (("p50", 0.5), ("p99", 0.99))},
        "masks_timed": len(masks),
        "valid_instances": sum(len(e["valid"]) for e, r in zip(corpus, results) if r["status"] == "compiled"),
        "invalid_instances": sum(len(e["invalid"]) for e, r in zip(corpus, results) if r["status"] == "compiled"),
        "valid_rejected": sum(len(r["valid_rejected"]) for r in compiled),
        "invalid_accepted": sum(len(r["invalid_accepted"]) for r in compiled),
        "refusal_reasons": dict(reasons.most_common()),
    }


def _reason_group(reason: str) -> str:
    return reason.split(":")[0][:80] if ":" in reason else reason[:80]


def _ms(values: list[float], q: float, scale: float = 1000.0):
    return round(values[min(len(values) - 1, int(q * len(values)))] * scale, 3) if values else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--libs", default="ours,llguidance,xgrammar,outlines-core")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per schema, compile and walks")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--every", type=int, default=1, help="every Nth schema (a deterministic sample)")
    parser.add_argument(
        "--slice", default=None, help="START:STOP of the corpus (run slices side by side, then --merge)"
    )
    parser.add_argument("--merge", nargs="*", type=Path, default=None, help="summarise these --json files together")
    parser.add_argument("--names", nargs="*", default=None, help="only schemas whose name contains one of these")
    parser.add_argument("--json", type=Path, default=None, help="write per-schema results here")
    parser.add_argument(
        "--cold-memo",
        action="store_true",
        help="ours: forget the automaton operations kept from earlier schemas before each one (automata_memo.py)",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    corpus = load_corpus()
    if args.merge:
        return _merge(args.merge, corpus)
    picked = [i for i, e in enumerate(corpus) if not args.names or any(n in e["name"] for n in args.names)]
    if args.slice:
        start, stop = (int(x) if x else None for x in args.slice.split(":"))
        picked = picked[start:stop]
    picked = picked[:: args.every][: args.limit] if args.limit else picked[:: args.every]
    report, details = [], {}
    for lib in args.libs.split(","):
        try:
            worker = Worker(lib, cold_memo=args.cold_memo and lib == "ours")
        except Exception as exc:  # noqa: BLE001 - a library that cannot start is reported as such
            report.append({"library": lib, "error": f"{type(exc).__name__}: {exc}"})
            print(json.dumps(report[-1]), flush=True)
            continue
        results = []
        for i in picked:
            results.append(worker.run(i, args.timeout))
            if args.json:  # as it goes, so a run stopped early still leaves its results
                rows = [{"name": corpus[j]["name"], "index": j, **r} for j, r in zip(picked, results)]
                args.json.write_text(
                    json.dumps({"summary": [{"library": lib, "version": worker.version}], "schemas": {lib: rows}})
                )
            if args.verbose:
                r = results[-1]
                print(f"  {lib:14} {corpus[i]['name']:60} {r['status']:9} {r.get('reason', '')[:100]}", flush=True)
                for key in ("valid_rejected", "invalid_accepted"):
                    for text in r.get(key, []):
                        print(f"      {key}: {text[:200]}", flush=True)
        worker.close()
        details[lib] = [{"name": corpus[i]["name"], "index": i, **r} for i, r in zip(picked, results)]
        report.append(summarise(lib, worker.version, results, [corpus[i] for i in picked]))
        print(json.dumps(report[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"summary": report, "schemas": details}, indent=1))
    _table(report)


def _merge(paths: list[Path], corpus: list[dict]) -> None:
    """One summary per library over the per-schema results of several --json files."""
    by_lib: dict = {}
    for path in paths:
        data = json.loads(path.read_text())
        versions = {r["library"]: r.get("version") for r in data["summary"]}
        for lib, rows in data["schemas"].items():
            entry = by_lib.setdefault(lib, {"version": versions.get(lib), "rows": {}})
            entry["rows"].update({row["index"]: row for row in rows})
    report = []
    for lib, entry in by_lib.items():
        indices = sorted(entry["rows"])
        report.append(
            summarise(lib, entry["version"], [entry["rows"][i] for i in indices], [corpus[i] for i in indices])
        )
        print(json.dumps(report[-1]), flush=True)
    _table(report)


def _table(report: list[dict]) -> None:
    cols = ("compiled", "refused", "errors", "timeouts", "invalid_accepted", "valid_rejected")
    print(
        f"{'library':14} {'ver':>8} " + " ".join(f"{c:>9.9}" for c in cols) + "  ttfm p50/p90/p99 ms   mask p50/p99 us"
    )
    for r in report:
        if "error" in r:
            print(f"{r['library']:14} failed: {r['error']}")
            continue
        f, m = r["first_mask_ms"], r["mask_us"]
        print(
            f"{r['library']:14} {r['version'][:8]:>8} "
            + " ".join(f"{r[c]:>9}" for c in cols)
            + f"  {f['p50']}/{f['p90']}/{f['p99']}   {m['p50'] and round(m['p50'], 1)}/{m['p99'] and round(m['p99'], 1)}"
        )


if __name__ == "__main__":
    main()
