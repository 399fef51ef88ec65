#!/usr/bin/env bash
# Every GPU test and benchmark in one go, for one call of the device tool (repo root, `.whl` carried):
#   bash benchmarks/gpu_suite.sh "$OUT"
# Each step writes its whole output to <dir>/<step>.txt as it runs, so a run cut short keeps what it had.
# Order: tests first, then the benchmarks from the cheapest; set SKIP_HF=1 to skip transformers' baseline.
# On the H200 (2026-11-30, 9136775) the steps took about 85 s (tests), 80 s (offline_throughput with the baseline),
# 170 s (json_decode, 5 passes per mode) and 150 s (shared_prefix): it fits one 10-minute device call.
set -u
out="${1:?usage: gpu_suite.sh OUTPUT_DIR}"
mkdir -p "$out"
source benchmarks/gpu_setup.sh > "$out/setup.txt" 2>&1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__, sys.version.split()[0])"
  git rev-parse --short HEAD 2>/dev/null || echo "commit: unknown (no .git here)"; date -u; } > "$out/env.txt" 2>&1
step() {  # step NAME COMMAND...: run it, log it, note its exit status and end time
  local name="$1"; shift
  "$@" > "$out/$name.txt" 2>&1
  echo "$name: exit $? at $(date -u +%H:%M:%S)" >> "$out/env.txt"
}
step tests python3 -m pytest tests/test_kernels_gpu.py tests/test_cascade_attention_gpu.py tests/test_engine_gpu.py tests/test_decode_host_path.py tests/test_constrained_device_table.py tests/test_engine_device_masks.py tests/test_fused_moe_gpu.py tests/test_rope_scaling.py::test_scaled_rope_through_the_triton_path_matches_transformers -q -p no:cacheprovider
cd benchmarks
step offline_throughput python3 offline_throughput.py ${SKIP_HF:+--skip-hf}
step json_decode python3 json_decode.py
step shared_prefix python3 shared_prefix.py
