#!/usr/bin/env bash
# The fifty-fourth session's job (~4 minutes; ~9 on an H200 with the goal rows; steps in the order
# of their worth, for a call that may be cut short): v3's splits merged in the kernel for one-wave
# grids. merge2 = tools/prepared/km-merge.patch (both forms, at most 16 splits: the 32-row form's
# partial boxes or rows, the wide form's rows), merge1 = km-merge-v1.patch (the fifty-third
# session's: the 32-row form only, any count), new = main. merge2's tests first (the merge against
# the combine kernel, both forms, a CUDA graph replay), then the A/B of new, merge1 and merge2 on
# the split shapes both forms run (and B 1 at 44-132 splits, where merge2 keeps the combine kernel
# and merge1 merges), the mutant, the -km / -kmw matrix and the other v3 / combine tests; on an
# H200 also issue 3's bf16 goal rows beside FlashMLA and the fp8 grid with the ceilings (on new).
# Binaries: tools/prepared/build-s54.sh. Carry .gpu-var/s54.tar.xz (and .peers/flashmla-bench).
source tools/prepared/job-lib.sh
tar xJf .gpu-var/s54.tar.xz -C .gpu-var
P=.gpu-var/merge2/kestrel-tests
step unit 150 $P --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel:MlaAttentionRule.*' --gtest_brief=1
grep -E "Failure|Expected|actual|FAILED" "$OUT/z/unit.log" | head -8
# 32-row form: decode B32 1k / 8k / 32k (4 splits), B8 8k / 32k (16), verify 2 B8 1k (8), B1 32k
# (132); wide: verify 2 B32 32k H 32 (4), decode B32 8k H 128 (2), B8 32k H 128 (8), verify 4 B8
# 32k H 32 (8), verify 2 B8 8k H 96 (5); B1 8k H 96 (44, 32-row); one-split control B128 8k.
ab_fp8_fast new 2 "decode-B32-ctx8192-H32 decode-B8-ctx32768-H32 decode-B8-ctx8192-H32 decode-B32-ctx32768-H32
    decode-B32-ctx1024-H32 verify2-B8-ctx1024-H32 decode-B1-ctx32768-H32 verify2-B32-ctx32768-H32 decode-B32-ctx8192-H128
    decode-B8-ctx32768-H128 verify4-B8-ctx32768-H32 verify2-B8-ctx8192-H96 decode-B1-ctx8192-H96 decode-B128-ctx8192-H32" \
  .gpu-var/new .gpu-var/merge1 .gpu-var/merge2
step mut 90 .gpu-var/merge2-mut/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel' --gtest_brief=1
step matrix 200 env KESTREL_SEED=5401 $P --gtest_filter='cuda/*mla_attention*_km*' --gtest_brief=1
step unit2 150 $P --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.WideKeysM*:MlaAttentionCuda.Combine*:MlaAttentionBackendCuda.*' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/matrix.log "$OUT"/z/unit2.log 2>/dev/null | cut -c1-160 | head -10
step memcheck 200 compute-sanitizer --tool memcheck $P --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel' --gtest_brief=1
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ -x .peers/flashmla-bench ]; then
  goal_rows_and_fp8_grid .gpu-var/new
fi
(cd "$OUT" && tar cJf z.tar.xz z $( [ -d goal ] && echo goal ) && rm -rf z goal)
echo "all $(( $(date +%s) - t0 ))s"
