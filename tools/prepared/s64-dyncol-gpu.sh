#!/usr/bin/env bash
# The GPU check of tools/prepared/s64-dyncol.patch (branch s64-dyncol, thirty-eighth session; never
# run), one device call (~4 min). The thirty-seventh's dynamic items (one counter over (sequence,
# row tile) items, one CTA an SM) ran in the thirty-eighth: correct, 1.045x at verify 8 B128 1k at
# boost clocks but 1.005x under the cap, and 0.89-0.98x on four other shapes (perf.md's
# thirty-eighth section). The likely cause: items taken in finishing order pull a sequence's row
# tiles apart, so they stop sharing its KV in L2. This form keeps the walk's grid (row-tile
# columns x floor(num_sms / row_tiles)) and gives each column its own counter over the batch's
# sequences, so a sequence's row tiles still run side by side while a slow SM takes fewer
# sequences. Predicted: verify 8 B128 1k ~1.03-1.05x against the walk (the eight slow SMs' 7%),
# and the other shapes at the walk's time (0.99-1.01x). The patch sits on the o-box kernel (the
# dynamic kernels are further instantiations: kDyn).
# Built here first, from the repository root (R), main checked out:
#   R=$PWD; git worktree add --detach /tmp/dcol HEAD && cd /tmp/dcol && git apply $R/tools/prepared/s64-dyncol.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON && ninja -C build kestrel-tests kestrel-bench &&
#     mkdir -p $R/.gpu-var/dcol $R/.gpu-var/dcolmut && cp build/kestrel-tests build/kestrel-bench $R/.gpu-var/dcol/ &&
#     git apply tests/mutations/cuda_mla_seesaw64_dyn_column.patch && ninja -C build kestrel-tests &&
#     cp build/kestrel-tests $R/.gpu-var/dcolmut/ && git apply -R tests/mutations/cuda_mla_seesaw64_dyn_column.patch &&
#     strip $R/.gpu-var/dcol*/kestrel-* && cd $R
#   mkdir -p .gpu-var/main && cp build/kestrel-bench .gpu-var/main/   (main's, built as usual)
# then run `bash tools/prepared/s64-dyncol-gpu.sh` with carry
# [".gpu-var/main", ".gpu-var/dcol", ".gpu-var/dcolmut", ".peers/flashmla-bench"].
source "$(dirname "$0")/job-lib.sh"
T=.gpu-var/dcol/kestrel-tests
# 1. One test a process, each with its own limit, so that a hang names its test.
each_test $T 'MlaAttentionCuda.Seesaw64*' 60
step layout 60 $T --gtest_filter='MlaAttentionSeesaw64Layout.*:MlaAttentionRule.*:MlaAttentionCpu.*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $T \
  --gtest_filter='MlaAttentionCuda.Seesaw64DynamicItems*:cuda/*mla_attention*_s64_dyn*' --gtest_brief=1
KESTREL_SEED=3821 step s64-ci 150 $T --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
KESTREL_SEED=3821 step mutant-dyn-column 120 .gpu-var/dcolmut/kestrel-tests \
  --gtest_filter='cuda/*mla_attention*_s64_dyn*:MlaAttentionCuda.Seesaw64DynamicItems*' --gtest_brief=1
echo "tests $(( $(date +%s) - t0 ))s"
# 2. Dynamic items beside the automatic choice (the walk) from the same binary, and main's binary
# on the automatic names (the other kernels' code must not have moved): 3 rounds.
S="decode-B128-ctx1024-H128 verify4-B128-ctx1024-H96 verify8-B128-ctx1024-H128 verify8-B128-ctx8192-H128 decode-B128-ctx8192-H128"
f=(); for s in $S; do f+=(--filter "mla_attention/$s-bf16-fastP" --filter "mla_attention_s64dyn/$s-bf16-fastP"); done
AB_TIMEOUT=150 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/main .gpu-var/dcol -- --reps 10 --no-ceilings "${f[@]}" > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main
g=(); for s in $S; do g+=(--filter "$s-bf16-fastP"); done
[ -x .peers/flashmla-bench ] && timeout 60 .peers/flashmla-bench --grid --reps 10 "${g[@]}" | grep fastP | awk '{print $1, $2}'
# 3. Under the power cap: verify 8 B128 1k H 128, the walk against dynamic items, twice.
for r in 1 2; do
  for n in mla_attention mla_attention_s64dyn; do
    sustained "$n-$r" .gpu-var/dcol/kestrel-bench "$n/verify8-B128-ctx1024-H128-bf16-fastP" 6000
  done
done
step memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 3 $T \
  --gtest_filter='MlaAttentionCuda.Seesaw64*:cuda/*mla_attention*_s64_dyn*' --gtest_brief=1
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
