#!/usr/bin/env bash
# Every GPU measurement issues #12, #13, #14 and #15 ask for, in the order to run them on one GPU box
# (an H100 for the committed figures), from the repository root. Each step writes its JSON under
# bench/results/ (named for the device) and goes on if a step fails; the log is printed as it
# goes. About 35 minutes in all. Usage: tools/gpu_acceptance.sh [h100]
set -u
DEV=${1:-h100}
R=bench/results
run() { echo "== $*"; "$@" || echo "!! failed: $*"; }

# Correctness on the GPU: every test marked gpu (CUDA graphs, chunks, native RT launch, scheduler
# bit-identity under every policy, occupancy vs the CUDA API, torch runners).
run python3 -m pytest -q -m gpu tests/gpu_runtime tests/scheduler tests/atoll

# #14 item 2/7: our program graphs vs PyTorch CUDA-graph replay, fp32 and fp16, every zoo model,
# with a per-kernel breakdown (tools/gpu_check.py) and through `atoll bench models`.
run env OUT=$R python3 tools/gpu_check.py --batches 1 32
run python3 -m atoll bench models --executor cupy --batches 1,2,4,8,16,32 --lengths 300 \
    --compare torch-graph --out $R/models_${DEV}_graph_vs_torch.json

# #14 item 5: knee profiles of the five zoo models on this GPU, shipped as batching/profiles/<kind>.json
# (the kind is the whole-GPU vGPU's profile kind, e.g. h100; `atoll info` prints it).
run python3 -m atoll zoo build --out /tmp/atoll-zoo
for m in mobilenet_v3_small squeezenet1_1 swin_t conformer citrinet; do
    run python3 -m atoll profile $m --repository /tmp/atoll-zoo --vgpu-mode gpu --executor cupy \
        --batches 1,2,4,8,16,32 --lengths 2.5:30:2.5 --out batching/profiles/$DEV.json
done

# #14 items 3/4: preemption latency (acceptance: reset p99 <= 30 us), DISB A-E >= 20 s per policy,
# RT latency through a worker.
run python3 -m atoll bench preempt --device cuda --out $R/preempt_$DEV.json --plot $R/preempt_$DEV.png
for w in A B C D E; do
    run python3 -m atoll bench disb --workload $w --device cuda --duration 20 \
        --policy rt-only,streams,reset,reef --out $R/disb_${w}_$DEV.json --plot $R/disb_${w}_$DEV.png
done
run python3 -m atoll bench worker --device cuda --out $R/worker_$DEV.json --plot $R/worker_$DEV.png

# #12 on the GPU box: ideal_ratio with ready tensors, web JPEGs vs CPU preprocessing alone, the
# mixed workload (20 % audio, 10 % real-time); audio preprocessing scaling over the box's cores.
run python3 -m atoll bench serve --executor cupy --input both --rt-isolation \
    --out $R/serve_$DEV.json --plot $R/serve_$DEV.png
run python3 -m atoll bench serve --executor cupy --mix mobilenet_v3_small=0.8,citrinet=0.2 \
    --rt-share 0.1 --out $R/serve_${DEV}_mixed.json
run python3 -m atoll bench preprocess --modality image --out $R/preprocess_image_$DEV.json
run python3 -m atoll bench preprocess --modality audio --out $R/preprocess_audio_$DEV.json

# #15 on the GPU box, where the executor no longer takes the cores the front ends need: gRPC vs
# HTTP and system shared memory vs HTTP binary with ready tensors (the load on cores of its own),
# and p99 while a second model loads and unloads (the CUDA shared-memory tests ran in pytest above).
run python3 -m atoll bench serve --executor cupy --input tensor --protocol http,grpc,grpc-stream --shm both \
    --concurrency 16,64 --no-ideal --out $R/serve_transports_$DEV.json
run python3 -m atoll bench serve --executor cupy --input tensor --load-during citrinet --concurrency 16 \
    --no-ideal --out $R/serve_load_during_$DEV.json

# #13 on the GPU box: the bomb, slow clients, 3x overload for 60 s (goodput over capacity) and a
# SIGKILL of each kind of child, with the executor on the GPU.
run python3 -m atoll bench robust --out $R/robust_$DEV.json
