#!/usr/bin/env bash
# The GPU machine's checks, in one call of the device tool, in under 7 minutes (the lend is
# 15 in all, the machine's start included).
#
#   bash bench/device/check.sh --wheels               # here, before the call: .wheels/
#   bash bench/device/check.sh --out "$OUT"           # there (carry .wheels)
#   bash bench/device/check.sh --out "$OUT" --steps gateway   # there again, one step
#   bash bench/device/check.sh --dry-run [--out DIR]  # here: the CPU, tiny models, few streams
#
# Steps, in the order they run, numbered as the table and bench/device/check.py number them;
# each one's limit is bench/device/plan.py's (python -m bench.device.plan show device):
#   wheels      1  install the carried wheels (there; pip's 3.12 dry run here), then import
#                  every module the steps use, each failure named
#   env         0  versions, the GPU, onnxruntime's providers; picks the engine: ONNX where
#                  onnxruntime's CUDA provider runs a graph, else PyTorch's (a failed row)
#   cuda-tests  2  pytest tests/live/workers/test_cuda.py (a GPU test that skips fails)
#   model       3  the synthetic streaming Paraformer, built there (large: 0.9 GB), ONNX fp32
#   fidelity    3  the engine's text on the GPU against the CPU's, chunk for chunk
#   gateway     4  python -m gateway, 2 workers on cuda:0: /readyz's providers, GPU memory;
#               5  then bench.load.ws_load, real-time streams at rising levels to p99 463 ms
#   gateway-1   4  the same with 1 worker, for the comparison;
#               5  its sweep
#   ceiling     5  bench.models.raw_ceiling on the GPU
#   int8        3  the int8 export's text on the GPU (only when --steps names it)
#   table       6  one Markdown table and one JSON into --out (always, whatever failed), with
#                  "N streams per GPU at p99 ≤ 463 ms" and 1 worker against 2
# Each step runs under `timeout` within its own limit and what is left of --budget, and is
# told its deadline (DEVICE_CHECK_DEADLINE); a step that fails or runs out of time leaves a
# row saying so, and the next steps still run. The exit code is 1 where a row failed.
#
# Options: --steps a,b,c (rerun some on a warm machine; env and table always run, and
# wheels and model where the machine has none yet), --engine auto|paraformer-onnx|paraformer,
# --budget SECONDS, --python PATH, --keep (dry run: keep its work directory).
set -u -o pipefail
cd "$(dirname "$0")/../.."

MODE=device OUT_DIR=${OUT:-} STEPS=default ENGINE_CHOICE=auto BUDGET= PY= KEEP=0
while (($#)); do
    case $1 in
    --dry-run) MODE=dry ;;
    --wheels) MODE=wheels ;;
    --out) OUT_DIR=$2 && shift ;;
    --steps) STEPS=$2 && shift ;;
    --engine) ENGINE_CHOICE=$2 && shift ;;
    --budget) BUDGET=$2 && shift ;;
    --python) PY=$2 && shift ;;
    --keep) KEEP=1 ;;
    -h | --help) sed -n '2,35p' "$0" && exit 0 ;;
    *) echo "unknown option $1" >&2 && exit 2 ;;
    esac
    shift
done

if [[ -z $PY ]]; then
    if [[ $MODE != device && -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONUNBUFFERED=1

if [[ $MODE == wheels ]]; then
    # Here, before the device call: the wheels the GPU machine lacks, into .wheels/.
    exec $PY -m bench.device.wheels download
fi

eval "$($PY -m bench.device.plan shell "$MODE")" || exit 2 # LIMIT, BUDGET_DEFAULT, RESERVE
BUDGET=${BUDGET:-$BUDGET_DEFAULT}
if [[ $MODE == dry ]]; then
    NICE="nice -n 19" DEVICE=cpu SIZE=tiny THREADS=1 FIDELITY_STREAMS=3 DRY=--dry-run
    WORK=$(mktemp -d /tmp/device-check-dry.XXXXXX) MODELS=$WORK/models
    CEILING_SECONDS=1.5 AUDIO_SECONDS=2 WARMUP=2
    ONNX_POINTS=2x2 ONNX_LEVELS=2,4,8 TORCH_POINTS=2x1 TORCH_LEVELS=2,4
    OUT_DIR=${OUT_DIR:-bench/results/device-check-dry}
else
    NICE="" DEVICE=cuda:0 SIZE=large THREADS=8 FIDELITY_STREAMS=8 DRY=
    WORK=/tmp/device-check MODELS=/tmp/asr-models
    CEILING_SECONDS=5 AUDIO_SECONDS=5 WARMUP=64
    # Doubling levels, the first miss ending the sweep and one level halfway narrowing it.
    # The PyTorch engine decodes a worker's streams one after another: lower levels.
    ONNX_POINTS=2x64 ONNX_LEVELS=100,200,400,800
    TORCH_POINTS=2x16 TORCH_LEVELS=20,40,80,160
    if [[ -z $OUT_DIR ]]; then echo "--out DIR (or \$OUT) is needed" >&2 && exit 2; fi
fi
mkdir -p "$OUT_DIR" "$WORK"
START=$(date +%s)
END=$((START + BUDGET))
CHECK="$PY -m bench.device.check"

# wanted NAME: whether --steps asks for NAME (by default, every step but int8).
wanted() {
    if [[ $STEPS == default ]]; then [[ $1 != int8 ]]; else [[ ,$STEPS, == *,$1,* ]]; fi
}

# run_always ARGS...: run_step whatever --steps asked (what the later steps need).
run_always() {
    local asked=$STEPS
    STEPS=$1
    run_step "$@"
    STEPS=$asked
}

# run_step NAME KEY... -- COMMAND...: COMMAND under `timeout`, within NAME's limit and the
# budget left, told its deadline; each KEY is a record a stopped or crashed step is marked
# failed in (or skipped, where no time is left for it).
run_step() {
    local name=$1 keys=() key limit left rc began
    shift
    while [[ $1 != -- ]]; do keys+=("$1") && shift; done
    shift
    wanted "$name" || return 0
    limit=${LIMIT[$name]}
    left=$((END - RESERVE - $(date +%s)))
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
        echo "== $name: skipped, ${left}s of the budget left"
        for key in "${keys[@]}"; do
            $CHECK fail --work "$WORK" --for "$key" --status skipped --note "out of time" >/dev/null
        done
        return 0
    fi
    echo "== $name (at most ${limit}s; $((END - $(date +%s)))s of the budget left)"
    began=$(date +%s)
    DEVICE_CHECK_DEADLINE=$((began + limit - 5)) timeout -k 10 "$limit" $NICE "$@"
    rc=$?
    echo "== $name: exit code $rc after $(($(date +%s) - began))s"
    for key in "${keys[@]}"; do
        if ((rc == 124 || rc == 137)); then
            $CHECK fail --work "$WORK" --for "$key" --note "stopped at its ${limit}s limit" >/dev/null
        elif ((rc != 0)); then
            $CHECK fail --work "$WORK" --for "$key" --note "exit code $rc (see the log)" >/dev/null
        fi
    done
    # The table so far: a call stopped at its limit still brings back what was measured.
    $CHECK table --work "$WORK" --out "$OUT_DIR" >/dev/null 2>&1
    return 0
}

# The engine the env step chose (or the model step fell back to), and its sizes.
choose_engine() {
    ENGINE=$(cat "$WORK/engine" 2>/dev/null || echo paraformer-onnx)
    if [[ $ENGINE == paraformer-onnx ]]; then
        POINTS=$ONNX_POINTS LEVELS=$ONNX_LEVELS EXPORT=--export
    else
        POINTS=$TORCH_POINTS LEVELS=$TORCH_LEVELS EXPORT=--no-export
    fi
    echo "engine: $ENGINE"
}

main() {
    echo "device check, $MODE mode, $(date -u +%FT%TZ), budget ${BUDGET}s, work $WORK"
    command -v nvidia-smi >/dev/null && nvidia-smi -L

    if [[ $MODE == dry ]]; then
        # The wheels step as it will run there, less the install: pip's dry run for 3.12.
        [[ -n $($PY -m bench.device.wheels list 2>&1 >/dev/null) ]] && $PY -m bench.device.wheels download
        run_step wheels wheels -- $CHECK wheels --work "$WORK" --check $DRY
    elif wanted wheels || [[ ! -d /tmp/site ]]; then # a fresh machine: nothing installed
        run_always wheels wheels -- $CHECK wheels --work "$WORK" --target /tmp/site
    fi
    [[ -d /tmp/site && $MODE == device ]] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

    run_always env env -- $CHECK env --work "$WORK" --device "$DEVICE" --engine "$ENGINE_CHOICE" $DRY
    choose_engine

    run_step cuda-tests cuda-tests -- $CHECK cuda-tests --work "$WORK" $DRY
    local model=run_step
    [[ -f $WORK/model_dir ]] || model=run_always # the later steps need it
    $model model model -- $CHECK model --work "$WORK" --size "$SIZE" --models "$MODELS" \
        --threads "$THREADS" "$EXPORT" $DRY
    choose_engine # the model step falls back to PyTorch's where the ONNX export failed
    MODEL_DIR=$(cat "$WORK/model_dir" 2>/dev/null || echo "$MODELS/synthetic-streaming-$SIZE-seed0")
    local common=(--work "$WORK" --device "$DEVICE" --engine "$ENGINE" --model "$MODEL_DIR" $DRY)
    run_step fidelity fidelity-fp32 -- $CHECK fidelity "${common[@]}" --precision fp32 \
        --streams "$FIDELITY_STREAMS" --threads "$THREADS"
    local sweep=(--models "$MODELS" --levels "$LEVELS" --seconds "$AUDIO_SECONDS" --warmup "$WARMUP")
    run_step gateway placement sweep -- $CHECK gateway "${common[@]}" --run gateway "${sweep[@]}"
    run_step gateway-1 placement-1 sweep-1 -- $CHECK gateway "${common[@]}" --run gateway-1 \
        "${sweep[@]}"
    run_step ceiling ceiling -- $CHECK ceiling "${common[@]}" --points "$POINTS" \
        --seconds "$CEILING_SECONDS"
    if [[ $ENGINE == paraformer-onnx ]]; then
        run_step int8 fidelity-int8 -- $CHECK fidelity "${common[@]}" --precision int8 \
            --streams "$FIDELITY_STREAMS" --threads "$THREADS"
    elif wanted int8; then
        $CHECK fail --work "$WORK" --for fidelity-int8 --status skipped \
            --note "int8 is the ONNX engine's; this run used $ENGINE" >/dev/null
    fi

    echo "== table ($(($(date +%s) - START))s since the start)"
    timeout 60 $CHECK table --work "$WORK" --out "$OUT_DIR"
    local rc=$?
    for log in "$WORK"/gateway*.log; do [[ -f $log ]] && cp "$log" "$OUT_DIR/"; done
    echo "done in $(($(date +%s) - START))s: $OUT_DIR/device_check.md, device_check.json"
    return $rc
}

main 2>&1 | tee "$OUT_DIR/device_check.log"
rc=${PIPESTATUS[0]}
if [[ $MODE == dry && $KEEP == 0 ]]; then rm -rf "$WORK"; fi
exit "$rc"
