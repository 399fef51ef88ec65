"""Usage: python benchmarks/http_throughput.py [--model-config llama-3-8b] [--passes 2] [--client-procs 4] [--skip-engine] [--tiny]

The HTTP server against the in-process Engine on the same offline workload (offline_throughput.py's 256
requests, input and output lengths uniform in [100, 1024], seed 0, ignore_eos, greedy, dummy weights):
  - Engine: one `Engine.generate` call with all requests (in a process of its own);
  - HTTP: a server started with `python -m sgl_runtime.launch_server` and the same flags, and one client
    per request, all concurrent, each POSTing its `/generate` request (`input_ids`, `sampling_params`),
    once non-streaming and once streaming (SSE, one event per token as SGLang's frontend reads them).
    The clients run in --client-procs processes (asyncio + httpx) so that parsing the streamed events
    does not limit the figure.
Output tokens per second for each, the median over --passes, and the ratios HTTP / Engine.
Prints one JSON line and a table. --tiny: a tiny model and few requests on the CPU (smoke test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_utils import (
    bench_parser,
    engine_kwargs,
    environment,
    make_model_dir,
    random_ids,
    report,
    run_isolated,
    start_engine,
    timed_generate,
    vocab_size_of,
    warm_up,
)
from offline_throughput import throughput_requests

STARTUP_TIMEOUT_S = 900.0


def parse_args(argv=None) -> argparse.Namespace:
    parser = bench_parser(__doc__)
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--passes", type=int, default=2, help="runs of the workload per mode (median reported)")
    parser.add_argument("--client-procs", type=int, default=4, help="client processes sharing the requests")
    parser.add_argument("--skip-engine", action="store_true", help="only the HTTP server (no ratios)")
    args = parser.parse_args(argv)
    args.num_requests = args.num_requests or (6 if args.tiny else 256)
    args.len_range = (4, 16) if args.tiny else (100, 1024)
    return args


def run_engine(args, model_dir: str) -> dict:
    engine, vocab = start_engine(args, model_dir)
    warm_up(engine, random.Random(args.seed + 1), vocab)
    ids, params = throughput_requests(args, vocab)
    rates = []
    for _ in range(args.passes):
        engine.flush_cache()  # every pass prefills its prompts as the first did
        out, seconds = timed_generate(engine, ids, params)
        rates.append(sum(o["meta_info"]["completion_tokens"] for o in out) / seconds)
    engine.shutdown()
    return {"engine_output_tok_s": rates}


def server_command(args, model_dir: str, port: int) -> list[str]:
    """launch_server with the flags engine_kwargs gives the Engine."""
    cmd = [sys.executable, "-m", "sgl_runtime.launch_server", "--model-path", model_dir, "--port", str(port)]
    for key, value in engine_kwargs(args).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            cmd += [flag] if value else []
        else:
            cmd += [flag, str(value)]
    return cmd


def wait_healthy(url: str, proc: subprocess.Popen, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(f"server not healthy after {STARTUP_TIMEOUT_S} s")


async def _one(client, url: str, ids: list[int], params: dict, stream: bool) -> int:
    """Completion tokens of one /generate request (streamed: counted from the last event's meta_info)."""
    body = {"input_ids": ids, "sampling_params": params, "stream": stream}
    if not stream:
        response = await client.post(f"{url}/generate", json=body)
        response.raise_for_status()
        return response.json()["meta_info"]["completion_tokens"]
    completion = 0
    async with client.stream("POST", f"{url}/generate", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                completion = json.loads(line[5:])["meta_info"]["completion_tokens"]
    return completion


def client_proc(url: str, requests: list, stream: bool, start_at: float, queue) -> None:
    """One client process: its share of the requests, all concurrent, from `start_at` (a shared clock)."""
    import httpx

    async def main() -> int:
        limits = httpx.Limits(max_connections=len(requests) + 1, max_keepalive_connections=len(requests) + 1)
        async with httpx.AsyncClient(timeout=None, limits=limits) as client:
            await asyncio.sleep(max(0.0, start_at - time.time()))
            counts = await asyncio.gather(*(_one(client, url, ids, p, stream) for ids, p in requests))
        return sum(counts)

    queue.put((asyncio.run(main()), time.time()))


def http_pass(url: str, ids: list, params: list, stream: bool, procs: int) -> float:
    """Output tok/s of one pass: from the common start to the last client's last response."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    share = [list(zip(ids, params))[i::procs] for i in range(procs)]
    start_at = time.time() + 3.0  # every client process is up and connected by then
    workers = [ctx.Process(target=client_proc, args=(url, part, stream, start_at, queue)) for part in share if part]
    for w in workers:
        w.start()
    results = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    return sum(tokens for tokens, _ in results) / (max(end for _, end in results) - start_at)


def run_server(args, model_dir: str) -> dict:
    import httpx

    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = Path(tempfile.mkstemp(prefix="sgl_http_bench_", suffix=".log")[1])
    with open(log, "wb") as out:
        proc = subprocess.Popen(server_command(args, model_dir, port), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, proc, log)
        vocab = vocab_size_of(model_dir)
        rng = random.Random(args.seed + 1)
        for n in (37, 300):  # warm_up's two requests, over HTTP
            body = {
                "input_ids": random_ids(rng, n, vocab),
                "sampling_params": {"max_new_tokens": 8, "ignore_eos": True},
            }
            httpx.post(f"{url}/generate", json=body, timeout=600).raise_for_status()
        ids, params = throughput_requests(args, vocab)
        result: dict = {"http_output_tok_s": [], "http_stream_output_tok_s": []}
        for _ in range(args.passes):
            for stream in (False, True):
                httpx.post(f"{url}/flush_cache", timeout=60)
                key = "http_stream_output_tok_s" if stream else "http_output_tok_s"
                result[key].append(http_pass(url, ids, params, stream, args.client_procs))
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv=None) -> dict:
    args = parse_args(argv)
    model_dir = make_model_dir(args.model_config, args.tiny)
    result: dict = {"model_config": args.model_config, "tiny": args.tiny, "passes": args.passes, **environment()}
    if not args.skip_engine:
        result.update(run_isolated(run_engine, not args.tiny, args, model_dir))
    result.update(run_server(args, model_dir))
    for key in ("engine_output_tok_s", "http_output_tok_s", "http_stream_output_tok_s"):
        if key in result:
            result[f"{key}_median"] = statistics.median(result[key])
    rows = [
        ("HTTP output tok/s", result["http_output_tok_s_median"]),
        ("HTTP streaming output tok/s", result["http_stream_output_tok_s_median"]),
    ]
    if not args.skip_engine:
        engine = result["engine_output_tok_s_median"]
        result["http_vs_engine"] = result["http_output_tok_s_median"] / engine
        result["http_stream_vs_engine"] = result["http_stream_output_tok_s_median"] / engine
        rows = [("Engine output tok/s", engine), *rows]
        rows += [
            ("HTTP / Engine", result["http_vs_engine"]),
            ("HTTP streaming / Engine", result["http_stream_vs_engine"]),
        ]
    report("http_throughput", result, rows)
    return result


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
