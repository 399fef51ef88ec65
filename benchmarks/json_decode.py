"""Usage: python benchmarks/json_decode.py [--model-config qwen2.5-7b] [--tiny] [--batch-sizes 1,8,32,128,256]

JSON-Schema decoding through sgl_runtime.Engine on dummy weights, per batch size (requests sent
at once): each pass generates JSON for fresh prompts, then the same number of unconstrained
requests (ignore_eos) with exactly the token counts of that JSON pass, so the constraint's cost is
separated from the workload's shape. Three engines (each in its own process): jump-forward on
(the default decode policy), jump-forward off (masks only), and jump-forward off with the device
mask table turned off (every mask built on the host, --constraint-mask-table-mb 0). Per batch size
it reports

  - jump_forward_time_vs_free: wall time of the JSON pass with jump-forward / that of free decoding
    of the same number of output tokens (the issue's target: <= 0.6 at 128 and 256, <= 0.55 at 1);
  - masks_tok_s_vs_free: output tok/s of the JSON pass without jump-forward / free tok/s at the same
    token counts (target >= 0.97);
  - mask_ms_per_step: host time the sampler spends on constraint masks per sampled step (device
    table on, and off);

each the median over --passes passes after a cold one (which pays each schema state's first mask).
Prints a JSON line and a table. Default shape: qwen2.5-7b, whose 152,064 logits cover every
Qwen2.5 tokenizer id, so forced (jump-forward) tokens always exist in the model.
"""

from __future__ import annotations

import argparse
import json
import random

from bench_utils import (
    ForwardTimer,
    bench_parser,
    environment,
    make_model_dir,
    random_ids,
    report,
    run_isolated,
    start_engine,
    timed_generate,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "level": {"enum": ["junior", "mid", "senior", "staff"]},
        "city": {"type": "string", "enum": ["Paris", "London", "Tokyo", "New York", "San Francisco"]},
        "employed": {"type": "boolean"},
        "department": {"type": "string", "enum": ["engineering", "research", "operations"]},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "level", "city", "employed", "department", "skills"],
    "additionalProperties": False,
}
MODES = {  # name -> Engine overrides
    "jump_forward": {},
    "masks_only": {"disable_jump_forward": True},
    "masks_only_host": {"disable_jump_forward": True, "constraint_mask_table_mb": 0},
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__, default_config="qwen2.5-7b")
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default 1,8,32,128,256; tiny: 1,4)")
    parser.add_argument("--passes", type=int, default=None, help="timed passes per batch size (default 3; tiny 1)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"which engines to run, of {','.join(MODES)}")
    parser.add_argument(
        "--open-schema",
        action="store_true",
        help="the schema without additionalProperties: false (extra keys with free-form values, as pydantic "
        "writes schemas): compiled to the grammar form, whose masks are built on the host",
    )
    args = parser.parse_args(argv)
    args.schema = {k: v for k, v in SCHEMA.items() if k != "additionalProperties"} if args.open_schema else SCHEMA
    default_sizes = "1,4" if args.tiny else "1,8,32,128,256"
    args.batch_sizes = [int(b) for b in (args.batch_sizes or default_sizes).split(",")]
    args.passes = args.passes or (1 if args.tiny else 3)
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; choose from {list(MODES)}")
    args.prompt_len, args.max_tokens = (8, 96) if args.tiny else (64, 256)
    return args


def run_mode(args, model_dir: str, mode: str) -> dict:
    """One engine: per batch size, a cold pass (not when tiny), then args.passes timed pairs (JSON, then free with the
    JSON's token counts)."""
    engine, vocab = start_engine(args, model_dir, **MODES[mode])
    timer = ForwardTimer(engine)
    json_params = {"max_new_tokens": args.max_tokens, "json_schema": json.dumps(args.schema), "temperature": 0}
    rng = random.Random(args.seed)
    timed_generate(engine, [random_ids(random.Random(7), 20, vocab)], [json_params])  # compiles the constraint
    by_batch = {}
    for batch in args.batch_sizes:
        cold = 0 if args.tiny else 1  # a first pair pays each schema state's first mask and new kernel shapes
        fresh = [[random_ids(rng, args.prompt_len, vocab) for _ in range(batch)] for _ in range(2 * args.passes + 2)]
        pairs = [_pair(engine, timer, fresh[2 * i], fresh[2 * i + 1], json_params) for i in range(args.passes + cold)]
        pairs = pairs[cold:]
        by_batch[batch] = _summary(pairs)
    engine.shutdown()
    return {"mode": mode, "by_batch": by_batch}


def _pair(engine, timer, json_prompts, free_prompts, json_params) -> dict:
    """A JSON pass, then an unconstrained pass giving request i exactly the JSON pass's i-th token count."""
    stats = engine.scheduler.sampler.mask_stats
    steps, seconds = stats.steps, stats.seconds
    out, json_s = timed_generate(engine, json_prompts, [json_params] * len(json_prompts), timer)
    mask_steps, mask_s = stats.steps - steps, stats.seconds - seconds
    json_info = {"forwards": timer.forwards, "by_kind": timer.by_kind()}
    lengths = [o["meta_info"]["completion_tokens"] for o in out]
    free_params = [{"max_new_tokens": n, "ignore_eos": True, "temperature": 0} for n in lengths]
    _, free_s = timed_generate(engine, free_prompts, free_params, timer)
    tokens = sum(lengths)
    return {
        "json_seconds": json_s,
        "free_seconds": free_s,
        "json_tok_s": tokens / json_s,
        "free_tok_s": tokens / free_s,
        "tokens_per_req": tokens / len(out),
        "forward_passes_per_req": sum(o["meta_info"]["forward_passes"] for o in out) / len(out),
        "valid_json": sum(1 for o in out if _is_valid(o["text"], json.loads(json_params["json_schema"]))),
        "requests": len(out),
        "mask_ms_per_step": 1000 * mask_s / mask_steps if mask_steps else 0.0,
        "mask_steps": mask_steps,
        "json_forwards": json_info["forwards"],
        "json_by_kind": json_info["by_kind"],
        "free_forwards": timer.forwards,
        "sample": out[0]["text"][:160],
    }


def _summary(pairs: list[dict]) -> dict:
    """The median pair by time ratio, with the ratio's spread."""
    ratios = [p["json_seconds"] / p["free_seconds"] for p in pairs]
    median = sorted(zip(ratios, range(len(pairs))))[len(pairs) // 2][1]
    return pairs[median] | {"time_vs_free": ratios[median], "time_vs_free_passes": ratios}


def _is_valid(text: str, schema: dict) -> bool:
    try:
        import jsonschema

        jsonschema.validate(json.loads(text), schema)
        return True
    except Exception:  # any parse or validation failure counts as invalid
        return False


def main(argv=None) -> dict:
    args = parse_args(argv)
    model_dir = make_model_dir(args.model_config, args.tiny)
    modes = {m: run_isolated(run_mode, not args.tiny, args, model_dir, m)["by_batch"] for m in args.modes}
    per_batch = []
    for batch in args.batch_sizes:
        row = {"batch": batch}
        if "jump_forward" in modes:
            jf = modes["jump_forward"][batch]
            row |= {
                "jump_forward_time_vs_free": jf["time_vs_free"],
                "jump_forward_passes_per_token": jf["forward_passes_per_req"] / jf["tokens_per_req"],
                "jump_forward_mask_ms_per_step": jf["mask_ms_per_step"],
            }
        if "masks_only" in modes:
            off = modes["masks_only"][batch]
            row |= {"masks_tok_s_vs_free": 1 / off["time_vs_free"], "mask_ms_per_step": off["mask_ms_per_step"]}
        if "masks_only_host" in modes:
            host = modes["masks_only_host"][batch]
            row |= {
                "host_masks_tok_s_vs_free": 1 / host["time_vs_free"],
                "host_mask_ms_per_step": host["mask_ms_per_step"],
            }
        per_batch.append(row)
    result = {
        "model_config": args.model_config,
        "tiny": args.tiny,
        **environment(),
        "passes": args.passes,
        "per_batch": per_batch,
        "modes": modes,
    }
    rows = []
    for row in per_batch:
        b = row["batch"]
        for key, value in row.items():
            if key != "batch":
                rows.append((f"batch {b}: {key}", value))
        for mode, by_batch in modes.items():
            r = by_batch[b]
            rows.append(
                (
                    f"batch {b}: {mode}: json s / free s, tokens/req, passes/req, valid",
                    f"{r['json_seconds']:.3f} / {r['free_seconds']:.3f}, {r['tokens_per_req']:.1f}, "
                    f"{r['forward_passes_per_req']:.1f}, {r['valid_json']}/{r['requests']}",
                )
            )
    report("json_decode", result, rows)
    return result


if __name__ == "__main__":
    main()
