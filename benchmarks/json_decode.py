"""Usage: python benchmarks/json_decode.py [--model-config qwen2.5-7b] [--tiny]

JSON decoding through sgl_runtime.Engine on dummy weights: the same prompts generated
unconstrained (128 tokens, ignore_eos) and constrained by a JSON Schema with fixed keys, with
jump-forward on (forced text in extends of its own, mixed into one extend with the decoding
requests, or brought into overlapped steps one step late) and off, and unconstrained again with each request given exactly the number of
tokens its constrained (jump-forward off) run produced, which separates the constraint's cost
from the shape of the workload (each run in its own process). Reports output tok/s, characters/s and
forward passes per request for the median of several passes of fresh prompts (a first pass, which
pays each schema state's first mask and new kernel shapes, is reported apart as "cold"); then a few
requests one at a time (batch 1, the latency-bound case jump-forward is for). Prints a JSON line and a table.

Default shape: qwen2.5-7b, whose 152,064 logits cover every Qwen2.5 tokenizer id, so forced
(jump-forward) tokens always exist in the model; see bench_utils for the llama-3-8b caveat.
"""

from __future__ import annotations

import argparse
import json
import random

from bench_utils import (
    ForwardTimer,
    add_common_args,
    engine_kwargs,
    environment,
    make_model_dir,
    random_ids,
    report,
    run_isolated,
    timed_generate,
    vocab_size_of,
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


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, default_config="qwen2.5-7b")
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument(
        "--latency-requests",
        type=int,
        default=None,
        help="requests run one at a time (batch 1) per mode after the batched passes (default 8)",
    )
    parser.add_argument(
        "--passes",
        type=int,
        default=None,
        help="timed passes of fresh prompts per mode after the cold one; the median is reported (default 5)",
    )
    args = parser.parse_args(argv)
    args.num_requests = args.num_requests or (2 if args.tiny else 128)
    args.latency_requests = args.latency_requests if args.latency_requests is not None else (1 if args.tiny else 8)
    args.passes = args.passes or (1 if args.tiny else 5)
    args.prompt_len, args.free_tokens, args.max_tokens = (8, 8, 96) if args.tiny else (64, 128, 256)
    return args


def run_mode(
    args,
    model_dir: str,
    constrained: bool,
    jump_forward: bool,
    lengths: list[int] | None = None,
    mixed: bool = False,
    overlapped: bool = False,
) -> dict:
    """Passes over different prompts of the same size: `cold` pays each schema state's first mask
    and the kernel compiles of new extend shapes inside the timing; then args.passes more (the median
    one gives the headline figures) run with them paid, as a server does once a schema has been in use. `lengths` (unconstrained only)
    gives request i exactly lengths[i] new tokens instead of free_tokens. `mixed` runs requests holding
    forced tokens in one extend with the decoding ones (DecodePolicy.defer_jump_forward off) instead of
    in extends of their own between graph-replayed decode steps. `overlapped` lets constrained
    requests with jump-forward run in overlapped steps (DecodePolicy.overlap_jump_forward_min_batch)."""
    from sgl_runtime.engine import Engine

    vocab = vocab_size_of(model_dir)
    engine = Engine(model_path=model_dir, **engine_kwargs(args, disable_jump_forward=not jump_forward))
    engine.scheduler.decode = engine.scheduler.decode.replace(
        defer_jump_forward=not mixed, overlap_jump_forward_min_batch=16 if overlapped else 0
    )
    timer = ForwardTimer(engine)
    if constrained:
        params = {"max_new_tokens": args.max_tokens, "json_schema": json.dumps(SCHEMA), "temperature": 0}
    else:
        params = {"max_new_tokens": args.free_tokens, "ignore_eos": True, "temperature": 0}
    rng = random.Random(args.seed)
    timed_generate(engine, [random_ids(random.Random(7), 20, vocab)], [params])  # compiles the constraint
    if lengths is None:
        params = [params] * args.num_requests
    else:
        params = [{**params, "max_new_tokens": n} for n in lengths]
    cold = _timed_pass(
        engine, [random_ids(rng, args.prompt_len, vocab) for _ in range(args.num_requests)], params, constrained, timer
    )
    warm = [
        _timed_pass(
            engine,
            [random_ids(rng, args.prompt_len, vocab) for _ in range(args.num_requests)],
            params,
            constrained,
            timer,
        )
        for _ in range(args.passes)
    ]
    result = sorted(warm, key=lambda r: r["seconds"])[len(warm) // 2]  # the median pass, by time
    result["pass_seconds"] = [r["seconds"] for r in warm]
    result["cold"] = {key: cold[key] for key in ("seconds", "output_tok_s", "chars_s")}
    if lengths is None and not mixed and args.latency_requests:
        result["batch1"] = _one_at_a_time(
            engine, [random_ids(rng, args.prompt_len, vocab) for _ in range(args.latency_requests)], params[0]
        )
    return result


def _one_at_a_time(engine, prompts: list[list[int]], params: dict) -> dict:
    """Latency-bound figures: each request alone (batch 1), where a forward costs about the same
    whatever its handful of tokens, so jump-forward's fewer forwards show directly."""
    seconds = tokens = chars = passes = 0
    for prompt in prompts:
        out, latency = timed_generate(engine, [prompt], [params])
        seconds += latency
        tokens += out[0]["meta_info"]["completion_tokens"]
        chars += len(out[0]["text"])
        passes += out[0]["meta_info"]["forward_passes"]
    return {
        "seconds": seconds,
        "output_tok_s": tokens / seconds,
        "chars_s": chars / seconds,
        "forward_passes_per_req": passes / len(prompts),
        "tokens_per_req": tokens / len(prompts),
        "requests": len(prompts),
    }


def _timed_pass(engine, prompts: list[list[int]], params: list[dict], constrained: bool, timer: ForwardTimer) -> dict:
    """One timed generate; `forwards` counts the batches run (prefills included), `gpu_busy_fraction`
    the device time inside them over the wall time."""
    out, latency = timed_generate(engine, prompts, params, timer)
    tokens = sum(o["meta_info"]["completion_tokens"] for o in out)
    chars = sum(len(o["text"]) for o in out)
    valid = sum(1 for o in out if _is_valid(o["text"])) if constrained else None
    return {
        "seconds": latency,
        "output_tok_s": tokens / latency,
        "chars_s": chars / latency,
        "forward_passes_per_req": sum(o["meta_info"]["forward_passes"] for o in out) / len(out),
        "tokens_per_req": tokens / len(out),
        "chars_per_req": chars / len(out),
        "valid_json": valid,
        "requests": len(out),
        "lengths": [o["meta_info"]["completion_tokens"] for o in out],
        "forwards": timer.forwards,
        "gpu_busy_fraction": timer.busy_seconds() / latency,
        "by_kind": timer.by_kind(),
        "sample": out[0]["text"][:200],
    }


def _is_valid(text: str) -> bool:
    try:
        import jsonschema

        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except Exception:  # any parse or validation failure counts as invalid
        return False


def main(argv=None) -> dict:
    args = parse_args(argv)
    model_dir = make_model_dir(args.model_config, args.tiny)
    isolate = not args.tiny
    free = run_isolated(run_mode, isolate, args, model_dir, constrained=False, jump_forward=True)
    jf_on = run_isolated(run_mode, isolate, args, model_dir, constrained=True, jump_forward=True)
    jf_mixed = run_isolated(run_mode, isolate, args, model_dir, constrained=True, jump_forward=True, mixed=True)
    jf_overlapped = run_isolated(
        run_mode, isolate, args, model_dir, constrained=True, jump_forward=True, overlapped=True
    )
    jf_off = run_isolated(run_mode, isolate, args, model_dir, constrained=True, jump_forward=False)
    matched = run_isolated(
        run_mode, isolate, args, model_dir, constrained=False, jump_forward=True, lengths=jf_off["lengths"]
    )
    matched_jf = run_isolated(
        run_mode, isolate, args, model_dir, constrained=False, jump_forward=True, lengths=jf_on["lengths"]
    )
    for mode in (free, jf_on, jf_mixed, jf_overlapped, jf_off, matched, matched_jf):
        mode.pop("lengths")
    result = {
        "model_config": args.model_config,
        "tiny": args.tiny,
        **environment(),
        "unconstrained": free,
        "constrained_jump_forward": jf_on,
        "constrained_no_jump_forward": jf_off,
        "constrained_jump_forward_mixed": jf_mixed,
        "constrained_jump_forward_overlapped": jf_overlapped,
        "unconstrained_same_lengths": matched,
        "unconstrained_jump_forward_lengths": matched_jf,
        "constrained_vs_free_tok_s": jf_off["output_tok_s"] / free["output_tok_s"],
        "constrained_vs_same_lengths_tok_s": jf_off["output_tok_s"] / matched["output_tok_s"],
        "jump_forward_chars_vs_free": jf_on["chars_s"] / free["chars_s"],
        "jump_forward_time_vs_same_tokens": matched_jf["seconds"] / jf_on["seconds"],
        # the whole constrained pass must take no longer than this to match free decoding's chars/s
        "jump_forward_seconds_to_match_free": jf_on["chars_per_req"] * jf_on["requests"] / free["chars_s"],
    }
    if "batch1" in free:
        result["batch1_jump_forward_chars_vs_free"] = jf_on["batch1"]["chars_s"] / free["batch1"]["chars_s"]
        result["batch1_constrained_vs_free_tok_s"] = jf_off["batch1"]["output_tok_s"] / free["batch1"]["output_tok_s"]
        result["batch1_overlapped_jump_forward_chars_vs_free"] = (
            jf_overlapped["batch1"]["chars_s"] / free["batch1"]["chars_s"]
        )
    rows = []
    for label, r in (
        ("unconstrained", free),
        ("json, jump-forward", jf_on),
        ("json, jump-forward mixed", jf_mixed),
        ("json, jump-forward overlapped", jf_overlapped),
        ("json, no jump-forward", jf_off),
        ("unconstrained, json lengths", matched),
        ("unconstrained, jump-forward lengths", matched_jf),
    ):
        rows += [
            (f"{label}: output tok/s", r["output_tok_s"]),
            (f"{label}: chars/s", r["chars_s"]),
            (f"{label}: forwards/req", r["forward_passes_per_req"]),
            (f"{label}: batches", r["forwards"]),
            (f"{label}: cold pass tok/s", r["cold"]["output_tok_s"]),
        ]
        rows += [
            (
                f"{label}: {kind} batches (reqs, tokens, device ms each)",
                f"{k['batches']} ({k['requests']}, {k['tokens'] / k['batches']:.0f}, {k['device_ms']:.2f})",
            )
            for kind, k in sorted(r["by_kind"].items())
        ]
    rows += [
        (
            "valid JSON (jf on / mixed / overlapped / off)",
            f"{jf_on['valid_json']}/{jf_mixed['valid_json']}/{jf_overlapped['valid_json']}/{jf_off['valid_json']}"
            f" of {jf_on['requests']}",
        ),
        ("constrained/free tok/s", result["constrained_vs_free_tok_s"]),
        ("constrained/free tok/s, same lengths", result["constrained_vs_same_lengths_tok_s"]),
        ("jump-forward chars/s vs free", result["jump_forward_chars_vs_free"]),
        ("jump-forward mixed chars/s vs free", jf_mixed["chars_s"] / free["chars_s"]),
        ("chars/req (free / json with jump-forward)", f"{free['chars_per_req']:.0f} / {jf_on['chars_per_req']:.0f}"),
        ("json pass time that would match free chars/s (s)", result["jump_forward_seconds_to_match_free"]),
        ("json pass time, jump-forward / overlapped (s)", f"{jf_on['seconds']:.3f} / {jf_overlapped['seconds']:.3f}"),
        ("free time for jump-forward's token counts / jump-forward time", result["jump_forward_time_vs_same_tokens"]),
        ("same, jump-forward overlapped", matched_jf["seconds"] / jf_overlapped["seconds"]),
    ]
    if "batch1" in free:
        for label, r in (
            ("unconstrained", free),
            ("json, jump-forward", jf_on),
            ("json, jump-forward overlapped", jf_overlapped),
            ("json, no jump-forward", jf_off),
        ):
            b1 = r["batch1"]
            rows += [
                (f"batch 1, {label}: tok/s", b1["output_tok_s"]),
                (f"batch 1, {label}: chars/s", b1["chars_s"]),
                (f"batch 1, {label}: forwards/req", b1["forward_passes_per_req"]),
            ]
        rows += [
            ("batch 1: jump-forward chars/s vs free", result["batch1_jump_forward_chars_vs_free"]),
            (
                "batch 1: jump-forward overlapped chars/s vs free",
                result["batch1_overlapped_jump_forward_chars_vs_free"],
            ),
            ("batch 1: constrained (no jump-forward) tok/s vs free", result["batch1_constrained_vs_free_tok_s"]),
        ]
    report("json_decode", result, rows)
    return result


if __name__ == "__main__":
    main()
