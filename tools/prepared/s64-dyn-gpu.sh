#!/usr/bin/env bash
# The GPU check of tools/prepared/s64-dyn.patch in one device call (~6 min), prepared in the
# thirty-seventh session (perf.md's thirty-seventh section, mla_attention.md's open list). The
# patch adds MlaAttentionSchedule::dynamic: for a call v4 runs with one split, one CTA an SM, each
# taking its next row tile of a sequence from a counter (zeroed in stream order before the
# launch) as it finishes the last. The index goes to the 4 producer warps and the 8 consumer warps
# through a 4-slot shared-memory ring with full / empty mbarriers, filled one item ahead by lane 0
# of the first producer warp. The other schedules' kernels are unchanged (a separate
# instantiation). Never run: the steps go most telling first (a hang, synccheck, the matrix, the
# mutant), each log written as it ends. Then the speed: at verify 8 B128 1k H 128 the uniform walk
# ends at 545.6 us where its median CTA ends at 520.9 (eight SMs 7% slower, 128 of 132 SMs used);
# predicted ~500-515 us with dynamic items, ~1.04x at 8k, and no change at decode (two items a CTA
# either way).
# Built here first, from the repository root (R); the patch conflicts with s64-oboxes.patch
# (apply one at a time):
#   R=$PWD; git worktree add --detach /tmp/dyn HEAD && cd /tmp/dyn && git apply $R/tools/prepared/s64-dyn.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON && ninja -C build kestrel-tests kestrel-bench &&
#     mkdir -p $R/.gpu-var/dyn $R/.gpu-var/dynmut && cp build/kestrel-tests build/kestrel-bench $R/.gpu-var/dyn/ &&
#     git apply tests/mutations/cuda_mla_seesaw64_dyn_rows.patch && ninja -C build kestrel-tests &&
#     cp build/kestrel-tests $R/.gpu-var/dynmut/ && git apply -R tests/mutations/cuda_mla_seesaw64_dyn_rows.patch &&
#     strip $R/.gpu-var/dyn*/kestrel-* && cd $R
#   mkdir -p .gpu-var/main && cp build/kestrel-bench .gpu-var/main/   (main's, built as usual)
# then run `bash tools/prepared/s64-dyn-gpu.sh` (tracked files travel) with carry [".gpu-var/main", ".gpu-var/dyn", ".gpu-var/dynmut", ".peers/flashmla-bench"].
source "$(dirname "$0")/job-lib.sh"
T=.gpu-var/dyn/kestrel-tests
# 1. One test a process, each with its own limit, so that a hang names its test.
for t in $($T --gtest_list_tests --gtest_filter='MlaAttentionCuda.*' | awk '/^ /{print "MlaAttentionCuda." $1}'); do
  step "unit-$t" 60 $T --gtest_filter="$t" --gtest_brief=1
done
step layout 60 $T --gtest_filter='MlaAttentionSeesaw64Layout.*:MlaAttentionRule.*:MlaAttentionCpu.*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $T \
  --gtest_filter='MlaAttentionCuda.Seesaw64DynamicItems*:cuda/*mla_attention*_s64_dyn*' --gtest_brief=1
KESTREL_SEED=3801 step s64-ci 150 $T --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
KESTREL_SEED=3801 step mutant-dyn-rows 120 .gpu-var/dynmut/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64_dyn*' --gtest_brief=1
echo "tests $(( $(date +%s) - t0 ))s"
# 2. Dynamic items beside the automatic choice (the uniform walk) from the same binary, and main's
# binary on the automatic names (the other kernels' code must not have moved): 3 rounds.
S="decode-B128-ctx1024-H128 verify4-B128-ctx1024-H96 verify8-B128-ctx1024-H128 verify8-B128-ctx8192-H96 verify8-B128-ctx8192-H128 decode-B128-ctx8192-H128"
f=(); for s in $S; do f+=(--filter "mla_attention/$s-bf16-fastP" --filter "mla_attention_s64dyn/$s-bf16-fastP"); done
AB_TIMEOUT=150 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/main .gpu-var/dyn -- --reps 10 --no-ceilings "${f[@]}" > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main
g=(); for s in $S; do g+=(--filter "$s-bf16-fastP"); done
[ -x .peers/flashmla-bench ] && timeout 60 .peers/flashmla-bench --grid --reps 10 "${g[@]}" | grep fastP | awk '{print $1, $2}'
# 3. Under the power cap: verify 8 B128 1k H 128, the uniform walk against dynamic items, twice.
for r in 1 2; do
  for n in mla_attention mla_attention_s64dyn; do
    scripts/gpu-sustained "$OUT/z/s" "$n-$r" -- .gpu-var/dyn/kestrel-bench --reps 6000 --no-ceilings \
      --filter "$n/verify8-B128-ctx1024-H128-bf16-fastP" | tail -1
    grep -E "^mla_attention" "$OUT/z/s/$n-$r.log" | awk '{print "   ", $1, "median", $5, "min", $6}'
  done
done
rm -f "$OUT"/z/s/*.smi
step memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 3 $T \
  --gtest_filter='MlaAttentionCuda.Seesaw64*:cuda/*mla_attention*_s64_dyn*' --gtest_brief=1
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
