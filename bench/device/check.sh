#!/usr/bin/env bash
# The GPU machine's checks, in one call of the device tool, under 8 minutes.
#
#   bash bench/device/check.sh --wheels               # here, before the call: .wheels/
#   bash bench/device/check.sh --out "$OUT"           # there (carry .wheels)
#   bash bench/device/check.sh --dry-run [--out DIR]  # here: the CPU, tiny models, few streams
#
# Steps, in the order they run, numbered as the table and bench/device/check.py number them:
#   wheels      1  install the carried wheels (there); pip's 3.12 dry run (--dry-run)
#   env         0  versions, the GPU, onnxruntime's providers; picks the engine: ONNX where
#                  onnxruntime has CUDAExecutionProvider, else PyTorch's (the fallback)
#   cuda-tests  2  pytest tests/live/workers/test_cuda.py
#   model       3  the synthetic streaming Paraformer, built there (large: 0.9 GB), ONNX fp32
#   fidelity    3  the engine's text on the GPU against the CPU's, chunk for chunk
#   gateway     4  python -m gateway, 2 workers on cuda:0: /readyz, GPU memory, RSS; then
#               5  bench.load.ws_load, real-time streams at each level (p50/p95/p99 per chunk)
#   ceiling     5  bench.models.raw_ceiling on the GPU
#   int8        3  the int8 export, and its text on the GPU against the CPU's
#   table       6  one Markdown table and one JSON into --out (always, whatever failed)
# Each step runs under `timeout` within its own limit and what is left of --budget; a step
# that fails or runs out of time leaves a row saying so, and the next steps still run.
#
# Options: --steps a,b,c (rerun some; env and table always run, and wheels and model where the
# machine has none yet), --engine auto|paraformer-onnx|paraformer, --budget SECONDS,
# --python PATH, --keep (dry run: keep its work directory).
set -u -o pipefail
cd "$(dirname "$0")/../.."

MODE=device OUT_DIR=${OUT:-} STEPS=all ENGINE_CHOICE=auto BUDGET= PY= KEEP=0
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
    -h | --help) sed -n '2,25p' "$0" && exit 0 ;;
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

if [[ $MODE == dry ]]; then
    NICE="nice -n 19" DEVICE=cpu SIZE=tiny THREADS=1 FIDELITY_STREAMS=3
    WORK=$(mktemp -d /tmp/device-check-dry.XXXXXX) MODELS=$WORK/models
    CEILING_SECONDS=1.5 AUDIO_SECONDS=2 WARMUP=2 BUDGET=${BUDGET:-175}
    ONNX_POINTS=1x2,2x2 ONNX_LEVELS=2,4 TORCH_POINTS=1x1,2x1 TORCH_LEVELS=2,4
    OUT_DIR=${OUT_DIR:-bench/results/device-check-dry}
else
    NICE="" DEVICE=cuda:0 SIZE=large THREADS=8 FIDELITY_STREAMS=16
    WORK=/tmp/device-check MODELS=/tmp/asr-models
    CEILING_SECONDS=10 AUDIO_SECONDS=10 WARMUP=64 BUDGET=${BUDGET:-450}
    # The PyTorch engine decodes a worker's streams one after another: lower levels.
    ONNX_POINTS=1x16,1x32,1x64,2x64 ONNX_LEVELS=50,100,200,300,400
    TORCH_POINTS=1x4,1x16,2x16 TORCH_LEVELS=20,50,100,200
    if [[ -z $OUT_DIR ]]; then echo "--out DIR (or \$OUT) is needed" >&2 && exit 2; fi
fi
mkdir -p "$OUT_DIR" "$WORK"
START=$(date +%s)
END=$((START + BUDGET))
RESERVE=20 # for the table, whatever happened before
CHECK="$PY -m bench.device.check"

wanted() { [[ $STEPS == all || ,$STEPS, == *,$1,* ]]; }

# run_always ARGS...: run_step whatever --steps asked (what the later steps need).
run_always() {
    local asked=$STEPS
    STEPS=all
    run_step "$@"
    STEPS=$asked
}

# run_step NAME KEY LIMIT COMMAND...: COMMAND under `timeout`, within LIMIT and the budget
# left; KEY is the record a stopped or crashed step is marked failed in.
run_step() {
    local name=$1 key=$2 limit=$3 left rc began
    shift 3
    wanted "$name" || return 0
    left=$((END - RESERVE - $(date +%s)))
    ((limit > left)) && limit=$left
    if ((limit < 15)); then
        echo "== $name: skipped, ${left}s of the budget left"
        $CHECK fail --work "$WORK" --for "$key" --status skipped --note "out of time" >/dev/null
        [[ $name == gateway ]] && $CHECK fail --work "$WORK" --for placement --status skipped \
            --note "out of time" >/dev/null
        return 0
    fi
    echo "== $name (at most ${limit}s; $((END - $(date +%s)))s of the budget left)"
    began=$(date +%s)
    timeout -k 10 "$limit" $NICE "$@"
    rc=$?
    echo "== $name: exit code $rc after $(($(date +%s) - began))s"
    if ((rc == 124 || rc == 137)); then
        $CHECK fail --work "$WORK" --for "$key" --note "stopped at its ${limit}s limit" >/dev/null
    elif ((rc != 0)); then
        $CHECK fail --work "$WORK" --for "$key" --note "exit code $rc (see the log)" >/dev/null
    fi
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
        run_step wheels wheels 120 $CHECK wheels --work "$WORK" --check
    elif wanted wheels || [[ ! -d /tmp/site ]]; then # a fresh machine: nothing installed
        run_always wheels wheels 90 $CHECK wheels --work "$WORK" --target /tmp/site
    fi
    [[ -d /tmp/site && $MODE == device ]] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

    run_always env env 60 $CHECK env --work "$WORK" --device "$DEVICE" --engine "$ENGINE_CHOICE"
    choose_engine

    run_step cuda-tests cuda-tests 120 $CHECK cuda-tests --work "$WORK" --timeout 110
    local model=run_step
    [[ -f $WORK/model_dir ]] || model=run_always # the later steps need it
    $model model model 200 $CHECK model --work "$WORK" --size "$SIZE" --models "$MODELS" \
        --threads "$THREADS" "$EXPORT"
    choose_engine # the model step falls back to PyTorch's where the ONNX export failed
    MODEL_DIR=$(cat "$WORK/model_dir" 2>/dev/null || echo "$MODELS/synthetic-streaming-$SIZE-seed0")
    local common=(--work "$WORK" --device "$DEVICE" --engine "$ENGINE" --model "$MODEL_DIR")
    run_step fidelity fidelity-fp32 120 $CHECK fidelity "${common[@]}" --precision fp32 \
        --streams "$FIDELITY_STREAMS" --threads "$THREADS"
    run_step gateway sweep 200 $CHECK gateway "${common[@]}" --models "$MODELS" \
        --levels "$LEVELS" --seconds "$AUDIO_SECONDS" --warmup "$WARMUP" \
        --deadline $((END - RESERVE - 5))
    run_step ceiling ceiling 130 $CHECK ceiling "${common[@]}" --points "$POINTS" \
        --seconds "$CEILING_SECONDS" --deadline $((END - RESERVE - 5))
    if [[ $ENGINE == paraformer-onnx ]]; then
        run_step int8 fidelity-int8 150 $CHECK fidelity "${common[@]}" --precision int8 \
            --streams "$FIDELITY_STREAMS" --threads "$THREADS"
    elif wanted int8; then
        $CHECK fail --work "$WORK" --for fidelity-int8 --status skipped \
            --note "int8 is the ONNX engine's; this run used $ENGINE" >/dev/null
    fi

    echo "== table ($(($(date +%s) - START))s since the start)"
    timeout 60 $CHECK table --work "$WORK" --out "$OUT_DIR"
    [[ -f $WORK/gateway.log ]] && cp "$WORK/gateway.log" "$OUT_DIR/gateway.log"
    echo "done in $(($(date +%s) - START))s: $OUT_DIR/device_check.md, device_check.json"
}

main 2>&1 | tee "$OUT_DIR/device_check.log"
rc=${PIPESTATUS[0]}
if [[ $MODE == dry && $KEEP == 0 ]]; then rm -rf "$WORK"; fi
exit "$rc"
