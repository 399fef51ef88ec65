"""Usage: python benchmarks/offline_throughput.py [--model-config llama-3-8b] [--tp-size N] [--tiny]

Offline throughput through sgl_runtime.Engine on dummy weights:
  1. 256 requests, input and output lengths uniform in [100, 1024] (seed 0), ignore_eos, greedy:
     output tok/s, total tok/s and the GPU-busy fraction (device time inside forwards / wall time);
  2. batch-1 decode tok/s (16-token prompt, 512 new tokens), also with overlap scheduling off;
  3. prefill tok/s (8 prompts of 2,048 tokens, 1 new token);
  4. Hugging Face transformers `generate` on the same shape with dummy weights (batch 64, input 512,
     output 128) and our ratio to it (our output tok/s on the same workload).
Prints one JSON line and a table. --tiny runs a tiny model with few requests (CPU smoke test).
--tp-size N shards the engine over N GPUs (the transformers baseline, one GPU, is then skipped:
`--model-config llama-3-70b --tp-size 2` does not fit one H200 in bf16).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench_utils import (
    ForwardTimer,
    bench_parser,
    environment,
    make_model_dir,
    prefill_pass,
    profiled_generate,
    random_ids,
    report,
    run_isolated,
    start_engine,
    timed_generate,
    warm_up,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__)
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--skip-hf", action="store_true", help="skip the transformers baseline")
    parser.add_argument(
        "--profile", action="store_true", help="run the 256-request workload again under torch.profiler (kernels)"
    )
    args = parser.parse_args(argv)
    tiny = args.tiny
    args.num_requests = args.num_requests or (6 if tiny else 256)
    args.len_range = (4, 16) if tiny else (100, 1024)
    args.decode_tokens, args.prefill_batch, args.prefill_len = (8, 2, 48) if tiny else (512, 8, 2048)
    args.hf_shape = (2, 16, 8) if tiny else (64, 512, 128)  # batch, input, output
    return args


def throughput_requests(args, vocab: int) -> tuple[list[list[int]], list[dict]]:
    rng = random.Random(args.seed)
    lo, hi = args.len_range
    ids, params = [], []
    for _ in range(args.num_requests):
        in_len, out_len = rng.randint(lo, hi), rng.randint(lo, hi)
        ids.append(random_ids(rng, in_len, vocab))
        params.append({"max_new_tokens": out_len, "ignore_eos": True, "temperature": 0})
    return ids, params


def run_engine(args, model_dir: str) -> dict:
    engine, vocab = start_engine(args, model_dir)
    rng = random.Random(args.seed + 1)
    timer = ForwardTimer(engine)
    warm_up(engine, rng, vocab)
    result = {}

    out, latency = timed_generate(
        engine,
        [random_ids(rng, 16, vocab)],
        [{"max_new_tokens": args.decode_tokens, "ignore_eos": True, "temperature": 0}],
    )
    result["batch1_decode_tok_s"] = out[0]["meta_info"]["completion_tokens"] / latency
    policy = engine.scheduler.decode
    if policy.overlap:  # the same request step by step, for the overlap scheduler's share
        engine.scheduler.decode = policy.replace(overlap=False)
        out, latency = timed_generate(
            engine,
            [random_ids(rng, 16, vocab)],
            [{"max_new_tokens": args.decode_tokens, "ignore_eos": True, "temperature": 0}],
        )
        result["batch1_decode_tok_s_no_overlap"] = out[0]["meta_info"]["completion_tokens"] / latency
        engine.scheduler.decode = policy

    # fresh prompts each pass (no cache hits); the first pays any new shape's first use
    prefill = [prefill_pass(engine, rng, vocab, args.prefill_batch, args.prefill_len) for _ in range(3)]
    result["prefill_tok_s"], result["prefill_tok_s_first_pass"] = statistics.median(prefill), prefill[0]

    ids, params = throughput_requests(args, vocab)
    out, latency = timed_generate(engine, ids, params, timer)
    completion = sum(o["meta_info"]["completion_tokens"] for o in out)
    prompt = sum(o["meta_info"]["prompt_tokens"] for o in out)
    result.update(
        requests=len(out),
        prompt_tokens=prompt,
        output_tokens=completion,
        seconds=latency,
        output_tok_s=completion / latency,
        total_tok_s=(prompt + completion) / latency,
        gpu_busy_fraction=timer.busy_seconds() / latency,
        forwards=timer.forwards,
        by_kind=timer.by_kind(),
    )
    if args.profile:
        engine.flush_cache()
        result["profile"] = profiled_generate(engine, ids, params)
    batch, in_len, out_len = args.hf_shape
    hf_ids = [random_ids(rng, in_len, vocab) for _ in range(batch)]
    out, latency = timed_generate(
        engine, hf_ids, [{"max_new_tokens": out_len, "ignore_eos": True, "temperature": 0}] * batch
    )
    result["hf_workload_output_tok_s"] = sum(o["meta_info"]["completion_tokens"] for o in out) / latency
    engine.shutdown()  # stops the tensor-parallel ranks too
    return result


def run_hf(args, model_dir: str) -> dict:
    """transformers generate, batch x input -> output tokens, greedy, dummy (random-init) weights."""
    import torch
    import transformers

    device = "cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = transformers.AutoConfig.from_pretrained(model_dir)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    batch, in_len, out_len = args.hf_shape
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(1000, config.vocab_size, (batch, in_len), generator=gen).to(device)
    kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        model.generate(
            ids[:, :32], max_new_tokens=4, min_new_tokens=4, **kwargs | {"attention_mask": torch.ones_like(ids[:, :32])}
        )
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=out_len, min_new_tokens=out_len, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        latency = time.perf_counter() - start
    return {"hf_output_tok_s": (out.shape[1] - in_len) * batch / latency}


def main(argv=None) -> dict:
    args = parse_args(argv)
    model_dir = make_model_dir(args.model_config, args.tiny)
    isolate = not args.tiny
    result = {"model_config": args.model_config, "tiny": args.tiny, "tp_size": args.tp_size, **environment()}
    if not args.skip_hf and args.tp_size == 1:
        result.update(run_isolated(run_hf, isolate, args, model_dir))
    result.update(run_isolated(run_engine, isolate, args, model_dir))
    if "hf_output_tok_s" in result:
        result["ratio_vs_hf"] = result["hf_workload_output_tok_s"] / result["hf_output_tok_s"]
    report(
        "offline_throughput",
        result,
        [
            ("output tok/s (256 req)", result["output_tok_s"]),
            ("total tok/s", result["total_tok_s"]),
            ("GPU-busy fraction", result["gpu_busy_fraction"]),
            ("batch-1 decode tok/s", result["batch1_decode_tok_s"]),
            ("batch-1 decode tok/s, no overlap", result.get("batch1_decode_tok_s_no_overlap", float("nan"))),
            ("prefill tok/s (median of 3 passes)", result["prefill_tok_s"]),
            ("prefill tok/s, first pass", result["prefill_tok_s_first_pass"]),
            ("ours on HF workload tok/s", result["hf_workload_output_tok_s"]),
            ("HF generate tok/s", result.get("hf_output_tok_s", float("nan"))),
            ("ratio vs HF", result.get("ratio_vs_hf", float("nan"))),
        ],
    )
    return result


if __name__ == "__main__":
    main()
