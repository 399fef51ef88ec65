"""CPU smoke test: each benchmark script runs end to end with --tiny and prints its JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *extra: str) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), "--tiny", "--device", "cpu", *extra],
        cwd=BENCH_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def test_offline_throughput_tiny():
    result = _run("offline_throughput.py")
    assert result["benchmark"] == "offline_throughput" and result["requests"] == 6
    for key in (
        "output_tok_s",
        "total_tok_s",
        "batch1_decode_tok_s",
        "batch1_decode_tok_s_no_overlap",
        "prefill_tok_s",
        "prefill_tok_s_first_pass",
        "hf_output_tok_s",
        "ratio_vs_hf",
    ):
        assert result[key] > 0, key
    assert 0 < result["gpu_busy_fraction"] <= 1.0


def test_shared_prefix_tiny():
    result = _run("shared_prefix.py")
    assert result["radix_off"]["cache_hit_rate"] == 0.0
    assert result["radix_on"]["cache_hit_rate"] > 0.5  # the system prompts are shared within each group
    assert result["radix_on"]["requests"] == result["radix_off"]["requests"] == 6
    for mode in ("radix_on", "radix_off"):  # the batches behind the figures: prefill extends, then decode steps
        kinds = result[mode]["by_kind"]
        assert kinds["extend"]["batches"] >= 1 and kinds["decode"]["batches"] >= 1


@pytest.mark.slow
def test_json_decode_tiny():
    result = _run("json_decode.py")
    assert [row["batch"] for row in result["per_batch"]] == [1, 4]
    for row in result["per_batch"]:
        for key in ("jump_forward_time_vs_free", "masks_tok_s_vs_free", "host_masks_tok_s_vs_free"):
            assert row[key] > 0, key
        assert row["mask_ms_per_step"] > 0 and row["host_mask_ms_per_step"] > 0
        assert row["jump_forward_passes_per_token"] < 1  # jump-forward skips forced text
    for mode, by_batch in result["modes"].items():
        for r in by_batch.values():
            assert r["valid_json"] == r["requests"], (mode, r["sample"])
            assert r["mask_steps"] > 0
    on, off = result["modes"]["jump_forward"]["1"], result["modes"]["masks_only"]["1"]
    assert on["forward_passes_per_req"] < off["forward_passes_per_req"]
    assert off["forward_passes_per_req"] == off["tokens_per_req"]  # without jump-forward: one pass per token


@pytest.mark.slow
def test_mask_batch_tiny():
    result = _run("mask_batch.py")
    assert [row["batch"] for row in result["per_batch"]] == [1, 4]  # the script checks table == host masks
    assert all(row["table_apply_ms"] > 0 and row["host_build_ms"] > 0 for row in result["per_batch"])


def test_profile_json_tiny():
    """The JSON profiler splits a run into device time and host phases."""
    result = _run("profile_json.py")
    assert result["benchmark"] == "profile_json" and result["output_tokens"] > 0
    assert result["wall_s"] >= result["device_s"] > 0
    phases = result["host_ms_per_forward"]
    assert phases["scheduler step (total)"] > 0 and phases["prepare batch (slots, index tensors)"] > 0


def test_profile_decode_tiny():
    """The decode profiler runs end to end on the CPU and reports per-step figures."""
    result = _run("profile_decode.py")
    assert result["benchmark"] == "profile_decode" and result["steps"] == 64
    assert result["wall_ms_per_step"] > 0 and result["kernel_ms_per_step"] > 0 and result["top_kernels"]


def test_jump_forward_overlap_tiny():
    result = _run("jump_forward_overlap.py")
    assert [r["batch"] for r in result["sweep"]] == [1, 2]
    assert all(r["step_chars_s"] > 0 and r["overlapped_chars_s"] > 0 for r in result["sweep"])


def test_first_prefill_tiny():
    result = _run("first_prefill.py")
    assert len(result["passes"]) == 3
    assert all(p["tok_s"] > 0 and p["forwards"] and p["forwards"][0]["kind"] == "extend" for p in result["passes"])


@pytest.mark.slow
def test_http_throughput_tiny():
    """The server over HTTP (plain and streamed) against the Engine on the same workload."""
    result = _run("http_throughput.py", "--passes", "1", "--client-procs", "2")
    for key in ("engine_output_tok_s", "http_output_tok_s", "http_stream_output_tok_s"):
        assert len(result[key]) == 1 and result[key][0] > 0, key
    assert result["http_vs_engine"] > 0 and result["http_stream_vs_engine"] > 0
