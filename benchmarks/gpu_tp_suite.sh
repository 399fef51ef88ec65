#!/usr/bin/env bash
# Tensor parallelism on a 2-GPU machine (repo root, `.whl` carried), one or more steps per device call:
#   bash benchmarks/gpu_tp_suite.sh OUTPUT_DIR [STEP ...]      (no STEP: every step, in this order)
# Steps: tests (tp=2 equals tp=1 on CUDA: dense Llama, Qwen3-MoE, Mixtral; the fused-MoE kernel on expert
# shards), llama8b_tp1, llama8b_tp2 (the Llama-3-8B shape at tp=1 vs tp=2), llama70b_tp2 (the Llama-3-70B
# shape, which does not fit one H200 in bf16), qwen3moe_tp1, qwen3moe_tp2 (Qwen3-30B-A3B). Dummy weights.
# Each step writes its whole output to <dir>/<step>.txt as it runs and its exit status to <dir>/env.txt.
set -u
out="${1:?usage: gpu_tp_suite.sh OUTPUT_DIR [STEP ...]}"
shift
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests llama8b_tp1 llama8b_tp2 llama70b_tp2 qwen3moe_tp1 qwen3moe_tp2)
mkdir -p "$out"
source benchmarks/gpu_setup.sh > "$out/setup.txt" 2>&1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__, sys.version.split()[0])"
  git rev-parse --short HEAD 2>/dev/null || echo "commit: unknown (no .git here)"; date -u; } >> "$out/env.txt" 2>&1
run() {  # run NAME COMMAND...: run it, log it, note its exit status and end time
  local name="$1"; shift
  "$@" > "$out/$name.txt" 2>&1
  echo "$name: exit $? at $(date -u +%H:%M:%S)" >> "$out/env.txt"
}
bench() { (cd benchmarks && python3 offline_throughput.py --skip-hf "$@"); }
for step in "${steps[@]}"; do
  case "$step" in
    tests) run tests python3 -m pytest -q -p no:cacheprovider tests/test_tensor_parallel_gpu.py \
             "tests/test_fused_moe_gpu.py::test_fused_moe_on_tensor_parallel_shards" ;;
    llama8b_tp1) run "$step" bench --model-config llama-3-8b --tp-size 1 ;;
    llama8b_tp2) run "$step" bench --model-config llama-3-8b --tp-size 2 ;;
    llama70b_tp2) run "$step" bench --model-config llama-3-70b --tp-size 2 ;;
    qwen3moe_tp1) run "$step" bench --model-config qwen3-30b-a3b --tp-size 1 ;;
    qwen3moe_tp2) run "$step" bench --model-config qwen3-30b-a3b --tp-size 2 ;;
    *) echo "unknown step $step" >> "$out/env.txt" ;;
  esac
done
