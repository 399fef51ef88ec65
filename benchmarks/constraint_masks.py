"""Usage: python benchmarks/constraint_masks.py [--steps 40] [--engines ours xgrammar llguidance outlines]
                                            [--max-schemas N] [--outlines-limit 10]

JSON-Schema constraint mask latency with the Qwen2.5 tokenizer (logit width 151,936), on the
JSON-Schema-Test-Suite schemas (../shared/data/json-schema-test-suite/draft2020-12, read in
place) and the realistic schemas in benchmarks/schemas/*.json. Per engine: time to first mask
(compile + first bitmask) and time per mask along seeded random walks (each engine walks with
its own masks). For this project's engine, masks are split into `cold` (a DFA state's first
visit) and `visited` (the same walks replayed: every state seen before). xgrammar, llguidance
and outlines-core (the optional `bench` extra) are measured in the same run when installed;
outlines-core builds a whole index per schema, so it runs on the first --outlines-limit schemas.
Times are the calling thread's CPU time by default (`--clock cpu`: the build machine is shared,
so wall time mostly measures waiting for a core; all engines run single-threaded here), or wall
time with `--clock wall`. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import glob
import json
import platform
import random
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from sgl_runtime.constrained import ConstraintError, compile_constraint
from sgl_runtime.constrained.vocabulary import Vocabulary
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

WIDTH = 151936
EOS = (151645, 151643)
HERE = Path(__file__).resolve().parent
clock = time.thread_time
SUITE = HERE.parent.parent / "shared" / "data" / "json-schema-test-suite" / "draft2020-12"


def load_schemas(max_schemas: int | None) -> dict[str, list]:
    suite, seen = [], set()
    for path in sorted(glob.glob(str(SUITE / "*.json"))):
        for group in json.loads(Path(path).read_text()):
            key = json.dumps(group["schema"], sort_keys=True)
            if key not in seen:
                seen.add(key)
                suite.append(group["schema"])
    realistic = [json.loads(Path(p).read_text()) for p in sorted(glob.glob(str(HERE / "schemas" / "*.json")))]
    return {"test-suite": suite[:max_schemas], "realistic": realistic[:max_schemas]}


def unpack(mask: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(np.ascontiguousarray(mask).view(np.uint8), bitorder="little")[:WIDTH])


def choose(rng: random.Random, ids: np.ndarray, lengths: np.ndarray) -> int:
    """EOS sometimes when allowed; mostly short tokens so walks cross many states."""
    eos = [i for i in EOS if i < len(lengths) and i in set(ids[-30:].tolist())]
    if eos and rng.random() < 0.25:
        return eos[0]
    short = ids[(lengths[ids] > 0) & (lengths[ids] <= 3)]
    pool = short if short.size and rng.random() < 0.8 else ids[lengths[ids] > 0]
    return int(rng.choice(pool if pool.size else ids))


class Ours:
    name = "sgl_runtime"

    def __init__(self, tok):
        self.tok = tok

    def compile(self, schema):
        c = compile_constraint("json_schema", schema, self.tok, vocab_size=WIDTH, eos_token_ids=EOS)
        m = c.matcher()
        m.bitmask()
        return c

    def walk(self, c, rng, steps, lengths, times):
        """Masks of a DFA constraint split into cold (a state's first visit) and visited; a grammar
        constraint (the JSON-Schema grammar form) has no such split, its masks count in "grammar"."""
        m, seq = c.matcher(), []
        index = getattr(c, "index", None)
        for _ in range(steps):
            before = index.num_cached_states() if index is not None else 0
            t0 = clock()
            mask = m.bitmask()
            dt = clock() - t0
            if index is None:
                times["grammar"].append(dt)
            else:
                times["cold" if index.num_cached_states() > before else "visited"].append(dt)
            t = choose(rng, unpack(mask), lengths)
            m.advance(t)
            seq.append(t)
            if m.is_terminated():
                break
        m = c.matcher()  # replay: every state visited before
        for t in seq:
            t0 = clock()
            m.bitmask()
            times["visited" if index is not None else "grammar"].append(clock() - t0)
            m.advance(t)


class XGrammar:
    name = "xgrammar"

    def __init__(self, tok):
        import xgrammar as xgr

        self.xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=WIDTH, stop_token_ids=list(EOS))
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile(self, schema):
        cg = self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
        m = self.xgr.GrammarMatcher(cg)
        bm = self.xgr.allocate_token_bitmask(1, WIDTH)
        m.fill_next_token_bitmask(bm)
        return cg

    def walk(self, cg, rng, steps, lengths, times):
        m, bm = self.xgr.GrammarMatcher(cg), self.xgr.allocate_token_bitmask(1, WIDTH)
        for _ in range(steps):
            t0 = clock()
            m.fill_next_token_bitmask(bm)
            times["all"].append(clock() - t0)
            t = choose(rng, unpack(bm[0].numpy()), lengths)
            if not m.accept_token(t) or m.is_terminated():
                break


class LLGuidance:
    name = "llguidance"

    def __init__(self, tok):
        import llguidance
        import llguidance.hf
        import llguidance.numpy

        self.ll = llguidance
        self.lltok = llguidance.hf.from_tokenizer(tok, n_vocab=WIDTH, eos_token=list(EOS))

    def compile(self, schema):
        grammar = self.ll.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        m = self.ll.LLMatcher(self.lltok, grammar, log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        bm = self.ll.numpy.allocate_token_bitmask(1, WIDTH)
        self.ll.numpy.fill_next_token_bitmask(m, bm, 0)
        return grammar

    def walk(self, grammar, rng, steps, lengths, times):
        m = self.ll.LLMatcher(self.lltok, grammar, log_level=0)
        bm = self.ll.numpy.allocate_token_bitmask(1, WIDTH)
        for _ in range(steps):
            t0 = clock()
            self.ll.numpy.fill_next_token_bitmask(m, bm, 0)
            times["all"].append(clock() - t0)
            t = choose(rng, unpack(bm[0]), lengths)
            if not m.consume_token(t) or m.is_stopped():
                break


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tok):
        import outlines_core

        self.oc = outlines_core
        vocab = Vocabulary.from_tokenizer(tok, WIDTH, EOS)
        table: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b:
                table.setdefault(b, []).append(i)
        self.vocab = outlines_core.Vocabulary(EOS[0], table)

    def compile(self, schema):
        regex = self.oc.json_schema.build_regex_from_schema(json.dumps(schema))
        index = self.oc.Index(regex, self.vocab)
        self.oc.Guide(index).get_tokens()
        return index

    def walk(self, index, rng, steps, lengths, times):
        g = self.oc.Guide(index)
        for _ in range(steps):
            t0 = clock()
            ids = np.array(g.get_tokens())
            times["all"].append(clock() - t0)
            t = choose(rng, np.sort(ids), lengths)
            if t in EOS or g.is_finished():
                break
            g.advance(t)


def pct(values: list[float], q: float, scale: float) -> float | None:
    return round(float(np.percentile(values, q)) * scale, 3) if values else None


def run_engine(engine, schemas, steps, lengths, seed) -> dict:
    firsts, times, unsupported, errors = [], {"all": [], "cold": [], "visited": [], "grammar": []}, 0, 0
    for k, schema in enumerate(schemas):
        t0 = clock()
        try:
            handle = engine.compile(schema)
        except ConstraintError:
            unsupported += 1
            continue
        except Exception:  # noqa: BLE001 - another engine's rejection or failure
            errors += 1
            continue
        firsts.append(clock() - t0)
        try:
            engine.walk(handle, random.Random(seed + k), steps, lengths, times)
        except Exception:  # noqa: BLE001 - a walk that hits an engine error stops there
            errors += 1
    times["all"] = times["all"] or times["cold"] + times["visited"] + times["grammar"]
    out = {
        "schemas": len(schemas),
        "compiled": len(firsts),
        "unsupported": unsupported,
        "errors": errors,
        "first_mask_ms": {q: pct(firsts, p, 1e3) for q, p in (("p50", 50), ("p99", 99), ("max", 100))},
    }
    for kind in ("all", "cold", "visited", "grammar"):
        if times[kind] and (kind in ("all", "grammar") or times["cold"]):
            out[f"mask_us_{kind}"] = {q: pct(times[kind], p, 1e6) for q, p in (("p50", 50), ("p99", 99), ("max", 100))}
            out[f"masks_{kind}"] = len(times[kind])
    return out


def versions() -> dict:
    out = {"python": platform.python_version(), "machine": f"{platform.machine()} {platform.processor() or ''}".strip()}
    for pkg in ("numpy", "interegular", "xgrammar", "llguidance", "outlines-core"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", nargs="+", default=["ours", "xgrammar", "llguidance", "outlines"])
    parser.add_argument("--steps", type=int, default=40, help="tokens per random walk")
    parser.add_argument("--max-schemas", type=int, default=None, help="first N schemas of each set")
    parser.add_argument("--outlines-limit", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args()
    global clock
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    tok = load_qwen2_tokenizer()
    vocab = Vocabulary.from_tokenizer(tok, WIDTH, EOS)
    lengths = np.array([len(b) if b else 0 for b in vocab.token_bytes])
    sets = load_schemas(args.max_schemas)
    classes = {"ours": Ours, "xgrammar": XGrammar, "llguidance": LLGuidance, "outlines": OutlinesCore}
    results: dict = {"date": time.strftime("%Y-%m-%d"), "clock": args.clock, "versions": versions(), "results": {}}
    for key in args.engines:
        try:
            engine = classes[key](tok)
        except ImportError:
            print(f"# {key} not installed: skipped")
            continue
        for set_name, schemas in sets.items():
            subset = schemas[: args.outlines_limit] if key == "outlines" else schemas
            res = run_engine(engine, subset, args.steps, lengths, args.seed)
            results["results"][f"{engine.name}/{set_name}"] = res
            print_row(f"{engine.name}/{set_name}", res)
    print(json.dumps(results))


def print_row(label: str, res: dict) -> None:
    first = res["first_mask_ms"]
    cells = [
        f"{label:28s}",
        f"{res['compiled']:>4}/{res['schemas']:<4}",
        f"unsup {res['unsupported']:>3}",
        f"err {res['errors']:>3}",
        f"first ms p50 {first['p50']} p99 {first['p99']} max {first['max']}",
    ]
    for kind in ("visited", "cold", "grammar", "all"):
        if f"mask_us_{kind}" in res:
            m = res[f"mask_us_{kind}"]
            cells.append(f"{kind} us p50 {m['p50']} p99 {m['p99']} max {m['max']}")
    print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
