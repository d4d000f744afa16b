#!/usr/bin/env bash
# The GPU check of tools/prepared/s64-stsm.patch and s64-sleep.patch in one device call (~4 min),
# prepared in the thirty-third session: v4's energy a tile (perf.md, thirty-third section: under the
# 700 W cap the card runs v4 at 1,515-1,545 MHz against FlashMLA's 1,590-1,620). Short A/B jobs do
# not reach the cap, so each variant also runs under sustained load (scripts/gpu-sustained).
# Built here first, each on a scratch tree:
#   for v in stsm sleep; do git clone -q . /tmp/$v && (cd /tmp/$v && git apply tools/prepared/s64-$v.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON &&
#     cmake --build build --target kestrel-tests kestrel-bench); done
#   mkdir -p .gpu-var/{main,stsm,sleep} && cp build/kestrel-bench .gpu-var/main/ &&
#     cp /tmp/stsm/build/kestrel-{tests,bench} .gpu-var/stsm/ && cp /tmp/sleep/build/kestrel-bench .gpu-var/sleep/
# then run it with carry [".gpu-var", ".peers/flashmla-bench"]: bash tools/prepared/s64-energy-gpu.sh
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$? $(( $(date +%s) - t0 ))s"; tail -3 "$OUT/$name.log"; }
T=.gpu-var/stsm/kestrel-tests
step unit 150 $T --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionSeesaw64Layout.*' --gtest_brief=1
KESTREL_SEED=3401 step s64-ci 120 $T --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 3 $T --gtest_filter='MlaAttentionCuda.Seesaw64*' --gtest_brief=1
step synccheck 120 compute-sanitizer --tool synccheck --error-exitcode 3 $T --gtest_filter='cuda/*mla_attention_verify_B3_H32_P128_bf16_plain_s64*:MlaAttentionCuda.Seesaw64FlatScheduleMatchesV2' --gtest_brief=1
f=(); for s in verify8-B128-ctx8192-H128 verify8-B128-ctx8192-H96 verify4-B128-ctx8192-H128 decode-B128-ctx8192-H128 verify8-B128-ctx8192-H32; do f+=(--filter "mla_attention/$s-bf16-fastP"); done
AB_TIMEOUT=90 scripts/gpu-ab "$OUT/ab" 2 .gpu-var/main .gpu-var/stsm .gpu-var/sleep -- --reps 10 --no-ceilings "${f[@]}" > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/ab" --base main
for s in decode-B128-ctx8192-H128:6000 verify8-B128-ctx8192-H128:1500; do
  for v in main stsm sleep; do
    scripts/gpu-sustained "$OUT/sustained" "$v-${s%%:*}" -- .gpu-var/$v/kestrel-bench --filter "mla_attention/${s%%:*}-bf16-fastP" --reps "${s##*:}" --no-ceilings | tail -1
    grep -h "fastP " "$OUT/sustained/$v-${s%%:*}.log" | tail -1
  done
  [ -x .peers/flashmla-bench ] && scripts/gpu-sustained "$OUT/sustained" "flashmla-${s%%:*}" -- .peers/flashmla-bench --grid --filter "${s%%:*}-bf16-fastP" --reps "${s##*:}" | tail -1
done
(cd "$OUT" && tar czf energy.tgz ab sustained && rm -rf ab sustained)
