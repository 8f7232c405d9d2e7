#!/usr/bin/env bash
# Every GPU measurement issues #12, #13, #14 and #15 ask for, as named steps, on one GPU box (an
# H100 for the committed figures), from the repository root. Each step writes its JSON under
# bench/results/ (named for the device); a failing command is reported and the rest go on.
#
#   tools/gpu_acceptance.sh [DEV] [STEP ...]     DEV names the device in the files (default h100);
#                                                no STEP runs them all, in the order below
#   tools/gpu_acceptance.sh --list               the steps, with what each is for
#
# All of them take about 35 minutes, so where one command may run 10 minutes and a session has 30
# (the lent GPU machine), run a few steps a call, open issues' first. With $OUT set (the lent
# machine's folder that comes back), what the steps wrote is packed into
# $OUT/gpu_acceptance_DEV.tgz at the end: unpack it in the repository root.
set -u
STEPS="tests serve mixed preprocess transports load_during robust kernels models profiles preempt disb worker"
if [ "${1:-}" = "--list" ]; then
    sed -n 's/^step_\([a-z_]*\)() { *# *\(.*\)$/\1: \2/p' "$0"
    exit 0
fi
DEV=h100
case " $STEPS " in *" ${1:-} "*) ;; *) [ $# -gt 0 ] && { DEV=$1; shift; } ;; esac
R=bench/results
run() { echo "== $*"; "$@" || echo "!! failed: $*"; }

step_tests() {  # every test marked gpu: CUDA graphs, native RT launch, scheduler bit-identity, CUDA shm (#15)
    run python3 -m pytest -q -m gpu tests/gpu_runtime tests/scheduler tests/atoll
}

step_serve() {  # #12: ideal_ratio with ready tensors, web JPEGs vs CPU preprocessing alone, RT isolation
    run python3 -m atoll bench serve --executor cupy --input both --rt-isolation \
        --out $R/serve_$DEV.json --plot $R/serve_$DEV.png
}

step_mixed() {  # #12: 20 % audio, 10 % real-time
    run python3 -m atoll bench serve --executor cupy --mix mobilenet_v3_small=0.8,citrinet=0.2 \
        --rt-share 0.1 --out $R/serve_${DEV}_mixed.json
}

step_preprocess() {  # #12: preprocessing throughput over the box's cores, images and audio
    run python3 -m atoll bench preprocess --modality image --out $R/preprocess_image_$DEV.json
    run python3 -m atoll bench preprocess --modality audio --out $R/preprocess_audio_$DEV.json
}

step_transports() {  # #15: gRPC vs HTTP, system shm vs HTTP binary, ready tensors (executor off the CPU)
    run python3 -m atoll bench serve --executor cupy --input tensor --protocol http,grpc,grpc-stream --shm both \
        --concurrency 16,64 --no-ideal --out $R/serve_transports_$DEV.json
}

step_load_during() {  # #15: MobileNetV3's p99 while CitriNet loads and unloads
    run python3 -m atoll bench serve --executor cupy --input tensor --load-during citrinet --concurrency 16 \
        --no-ideal --out $R/serve_load_during_$DEV.json
}

step_robust() {  # #13: bomb, slow clients, 3x overload for 60 s, a SIGKILL of each child kind
    run python3 -m atoll bench robust --out $R/robust_$DEV.json
}

step_kernels() {  # #14: our program graphs vs PyTorch CUDA-graph replay, per-kernel breakdown
    run env OUT=$R python3 tools/gpu_check.py --batches 1 32
}

step_models() {  # #14: every zoo model through `atoll bench models` against torch CUDA graphs
    run python3 -m atoll bench models --executor cupy --batches 1,2,4,8,16,32 --lengths 300 \
        --compare torch-graph --out $R/models_${DEV}_graph_vs_torch.json
}

step_profiles() {  # #14: knee profiles of the five zoo models, shipped as batching/profiles/DEV.json
    run python3 -m atoll zoo build --out /tmp/atoll-zoo
    for m in mobilenet_v3_small squeezenet1_1 swin_t conformer citrinet; do
        run python3 -m atoll profile $m --repository /tmp/atoll-zoo --vgpu-mode gpu --executor cupy \
            --batches 1,2,4,8,16,32 --lengths 2.5:30:2.5 --out batching/profiles/$DEV.json
    done
}

step_preempt() {  # #14: preemption latency (reset p99 <= 30 us)
    run python3 -m atoll bench preempt --device cuda --out $R/preempt_$DEV.json --plot $R/preempt_$DEV.png
}

step_disb() {  # #14: DISB A-E, 20 s per policy
    for w in A B C D E; do
        run python3 -m atoll bench disb --workload $w --device cuda --duration 20 \
            --policy rt-only,streams,reset,reef --out $R/disb_${w}_$DEV.json --plot $R/disb_${w}_$DEV.png
    done
}

step_worker() {  # #14: real-time latency through a vGPU worker
    run python3 -m atoll bench worker --device cuda --out $R/worker_$DEV.json --plot $R/worker_$DEV.png
}

for step in "$@"; do
    case " $STEPS " in *" $step "*) ;; *) echo "unknown step '$step'; the steps: $STEPS" >&2; exit 2 ;; esac
done
mark=$(mktemp)
for step in ${*:-$STEPS}; do
    echo "=== step $step"
    "step_$step"
done
if [ -n "${OUT:-}" ]; then
    find $R batching/profiles -type f -newer "$mark" -print0 | tar czf "$OUT/gpu_acceptance_$DEV.tgz" --null -T -
    echo "packed $(tar tzf "$OUT/gpu_acceptance_$DEV.tgz" | wc -l) files into $OUT/gpu_acceptance_$DEV.tgz"
fi
rm -f "$mark"
