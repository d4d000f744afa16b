#!/usr/bin/env bash
# The GPU check of tools/prepared/s64-flat.patch in one device call (~5 min), prepared in the
# thirty-second session. Built here first, on a scratch tree:
#   git clone -q . /tmp/flat && (cd /tmp/flat && git apply tools/prepared/s64-flat.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON &&
#     cmake --build build --target kestrel-tests kestrel-bench)
#   mkdir -p .gpu-var/flat .gpu-var/main && cp /tmp/flat/build/kestrel-{tests,bench} .gpu-var/flat/
#   cp build/kestrel-bench .gpu-var/main/     (main's, for the A/B)
#   the mutant: (cd /tmp/flat && scripts/mutation-check --bundle build /tmp/flat/mutants) and copy
#   mutants/cuda_mla_seesaw64_flat_run* into .gpu-var/flat/ (or leave it for a later call)
# then run it with carry [".gpu-var", ".peers/flashmla-bench"]: bash tools/prepared/s64-flat-gpu.sh
set -uo pipefail
OUT=${OUT:-$PWD/out}
F=.gpu-var/flat
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$? $(( $(date +%s) - t0 ))s"; tail -3 "$OUT/$name.log"; }
step unit 150 $F/kestrel-tests --gtest_filter='MlaAttentionCuda.*:MlaAttentionRule.*' --gtest_brief=1
KESTREL_SEED=3301 step matrix-ci 120 $F/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
KESTREL_SEED=3302 KESTREL_MATRIX=full step matrix-full-s64 150 $F/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 3 $F/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:cuda/*s64_flat*' --gtest_brief=1
# Each schedule forced over the grid (fits kMlaAttentionSeesaw64CtaCostKeys and ...FlatMergeKeys).
G=(--filter mla_attention_s64flat/ --filter mla_attention_s64uniform/)
step sched 200 $F/kestrel-bench --reps 10 --no-ceilings --json "$OUT/sched.json" "${G[@]}"
# The automatic grid, the patch against main, beside FlashMLA.
A=(); for n in $($F/kestrel-bench --list --filter mla_attention/ | awk '$1 ~ /^mla_attention\/.*-bf16-fastP$/ {print $1}'); do A+=(--filter "$n"); done
step grid-flat 120 $F/kestrel-bench --reps 10 --no-ceilings --json "$OUT/grid-flat.json" "${A[@]}"
step grid-main 120 .gpu-var/main/kestrel-bench --reps 10 --no-ceilings --json "$OUT/grid-main.json" "${A[@]}"
step peer 120 .peers/flashmla-bench --grid --reps 10
cp "$OUT/peer.log" "$OUT/grid-peer.log"
python3 scripts/flashmla-compare "$OUT/grid-flat.json" "$OUT/grid-peer.log" | tail -3
python3 scripts/flashmla-compare "$OUT/grid-main.json" "$OUT/grid-peer.log" | tail -3
