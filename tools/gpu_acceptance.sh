#!/usr/bin/env bash
# The GPU path in one short run (issue #32), on a bare GPU machine, from any directory: every step
# uses only the machine image's Python packages (tools/gpu_image_packages.txt) plus, for `serve`
# alone, the wheels of tools/gpu_wheels.txt when .whl/ holds them. Each step has a time budget in
# seconds and is killed past it; the budgets add up to 8 minutes. At most 8 files land in $OUT
# (default ./gpu_acceptance): acceptance.json (each step's status and seconds, and the headline
# figures of the others) and one file per step, named below.
#
#   tools/gpu_acceptance.sh             every step on the GPU
#   tools/gpu_acceptance.sh --dry-run   every step on the CPU at its shortest (tests/tools runs it)
#   tools/gpu_acceptance.sh --list      the steps, their budgets and what each is for
set -u
cd "$(dirname "$0")/.."
STEPS="cubins tests models preempt disb serve summary"
declare -A BUDGET=([cubins]=60 [tests]=120 [models]=75 [preempt]=60 [disb]=90 [serve]=70 [summary]=5)
GPU_TESTS="tests/gpu_runtime/test_cupy_executor.py tests/gpu_runtime/test_vgpu_gpu.py tests/scheduler/test_cuda.py
  tests/scheduler/test_vgpu_engine.py tests/atoll/bench/test_torch_eager.py tests/atoll/kserve/test_cuda_shm_gpu.py"
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu_acceptance}
MODE=gpu

py() { "$PY" "$@"; }  # every Python entry point goes through here (tests/tools checks its imports)
on_gpu() { [ "$MODE" = gpu ]; }

step_cubins() {  # -> cubins.json: every variant the steps run (batch sizes 1..32, 300 frames), nvcc-compiled for this GPU; 0 spills
    if on_gpu; then
        local arch
        arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
        py -m gpu_runtime.nvcc_check --arch "$arch" --frames 300 --quiet --json "$OUT/cubins.json"
    elif command -v nvcc >/dev/null; then
        py -m gpu_runtime.nvcc_check --arch 90 --models squeezenet1_1 --batches 1 --precisions fp32 --quiet \
            --json "$OUT/cubins.json"
    else
        echo '{"not_run": "no nvcc on this machine"}' >"$OUT/cubins.json"
    fi
}

step_tests() {  # -> tests.xml: every test marked gpu (the CPU only collects them: they skip there)
    # shellcheck disable=SC2086
    py -m pytest -q -m gpu -p no:cacheprovider --junitxml "$OUT/tests.xml" $GPU_TESTS
}

step_models() {  # -> gpu_check.json: MobileNetV3-small, SqueezeNet at batch 1 and 32, fp32, fp16 vs PyTorch CUDA graphs
    if on_gpu; then
        OUT=$OUT py tools/gpu_check.py --models mobilenet_v3_small squeezenet1_1 --batches 1 32 \
            --precisions fp32 fp16 --repeats 50
    else
        OUT=$OUT py tools/gpu_check.py --device cpu --models squeezenet1_1 --batches 1 --precisions fp32 --repeats 1
    fi
}

step_preempt() {  # -> preempt.json: arrival -> first RT kernel p50/p99/p99.9, RT overhead, idle and saturated GPU
    if on_gpu; then
        py tools/gpu_bench.py preempt --device cuda --be-load idle,saturate --policy rt-only,reset,reef --n 300 \
            --out "$OUT/preempt.json"
    else
        py tools/gpu_bench.py preempt --be-load idle,saturate --policy rt-only,reset --short --out "$OUT/preempt.json"
    fi
}

step_disb() {  # -> disb_A.json, disb_C.json: DISB A and C, short: RT latency over rt-only, BE throughput
    local w rc=0
    for w in A C; do
        if on_gpu; then
            py tools/gpu_bench.py disb --workload $w --device cuda --duration 6 --policy rt-only,reset,reef \
                --out "$OUT/disb_$w.json" || rc=1
        else
            py tools/gpu_bench.py disb --workload $w --duration 1 --rounds 1 --policy rt-only,reset \
                --out "$OUT/disb_$w.json" || rc=1
        fi
    done
    return $rc
}

step_serve() {  # -> serve.json: bench serve --input tensor, end-to-end throughput over ideal (ideal_ratio)
    if on_gpu && compgen -G ".whl/*.whl" >/dev/null; then
        py -m pip install -q --no-index --no-deps --no-compile --target /tmp/atoll-wheels .whl/*.whl &&
            export PYTHONPATH=/tmp/atoll-wheels${PYTHONPATH:+:$PYTHONPATH}
    fi
    local missing
    missing=$(py -c 'import importlib.util as u, sys; print(" ".join(l.split()[1] for l in open(sys.argv[1])
                     if l.strip() and l[0] != "#" and u.find_spec(l.split()[1]) is None))' tools/gpu_wheels.txt)
    if [ -n "$missing" ]; then  # the image lacks them: recorded, not a failure of the GPU path
        echo "{\"not_run\": \"atoll serve needs $missing, which the image lacks: carry tools/gpu_wheels.txt in .whl/\"}" \
            >"$OUT/serve.json"
        return 0
    fi
    if on_gpu; then
        py -m atoll bench serve --executor cupy --input tensor --duration 10 --warmup 3 --concurrency 16 \
            --device gpu --out "$OUT/serve.json"
    else
        py -m atoll bench serve --input tensor --duration 2 --warmup 1 --concurrency 2 --out "$OUT/serve.json"
    fi
}

step_summary() {  # -> acceptance.json: each step's status and seconds, and the headline figures
    # shellcheck disable=SC2086
    py tools/acceptance_summary.py "$OUT" "$MODE" $STEP_RESULTS
}

case "${1:-}" in
    "") ;;
    --dry-run) MODE=cpu ;;
    --list)
        for s in $STEPS; do
            printf '%-8s %4s s  %s\n' "$s" "${BUDGET[$s]}" "$(sed -n "s/^step_$s() { *# *//p" "$0")"
        done
        exit 0 ;;
    --step) MODE=$3; mkdir -p "$OUT"; "step_$2"; exit $? ;;  # one step, as the loop below runs it
    *) echo "usage: $0 [--dry-run | --list]" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
export STEP_RESULTS=""  # step:rc:ms:budget_s of each step run, for the summary
for step in $STEPS; do
    echo "=== $step (budget ${BUDGET[$step]} s)"
    start=$(date +%s%N)
    timeout -k 2 "$((BUDGET[$step] - 2))" bash "$0" --step "$step" "$MODE"  # the kill's grace inside the budget
    rc=$?
    STEP_RESULTS="$STEP_RESULTS $step:$rc:$((($(date +%s%N) - start) / 1000000)):${BUDGET[$step]}"
done
exit $rc  # the summary's: 1 when a step failed or ran past its budget
