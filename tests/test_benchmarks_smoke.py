"""CPU smoke test: each benchmark script runs end to end with --tiny and prints its JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), "--tiny", "--device", "cpu"],
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
    on, off = result["constrained_jump_forward"], result["constrained_no_jump_forward"]
    assert on["valid_json"] == on["requests"] and off["valid_json"] == off["requests"]
    assert on["forward_passes_per_req"] < off["forward_passes_per_req"]  # jump-forward skips forced text
    assert result["unconstrained"]["tokens_per_req"] == 8
    assert all(result[mode]["cold"]["output_tok_s"] > 0 for mode in ("unconstrained", "constrained_jump_forward"))
    assert result["unconstrained_same_lengths"]["tokens_per_req"] == off["tokens_per_req"]
    mixed = result["constrained_jump_forward_mixed"]
    assert mixed["valid_json"] == mixed["requests"] and mixed["forwards"] <= on["forwards"]
    assert result["constrained_vs_same_lengths_tok_s"] > 0
    assert result["unconstrained_jump_forward_lengths"]["tokens_per_req"] == on["tokens_per_req"]
    assert result["jump_forward_time_vs_same_tokens"] > 0
    assert on["batch1"]["requests"] == 1 and on["batch1"]["chars_s"] > 0  # the one-at-a-time section
    assert result["batch1_jump_forward_chars_vs_free"] > 0
    overlapped = result["constrained_jump_forward_overlapped"]  # same outputs as step by step, so same passes
    assert overlapped["valid_json"] == overlapped["requests"]
    assert overlapped["forward_passes_per_req"] == on["forward_passes_per_req"]


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
