#!/usr/bin/env bash
# The fifty-third session's fifth job (~2 minutes; steps in the order of their worth, for a call
# that may be cut short): branch km-merge (v3's 32-row form merges its splits in the kernel for
# one-wave grids: mla_attention_keys_m_merges, a cooperative launch, a grid-wide barrier, each
# split's CTA merging its share of the rows from L2; no combine kernel) against main with the
# lowered wide bound (new). Binaries: .gpu-var/s53e.tar.xz (merge = km-merge's kestrel-bench and
# kestrel-tests, merge-mut = its tests with cuda_mla_keys_m_merge_rows) and .gpu-var/s53.tar.xz.
source tools/prepared/job-lib.sh
tar xJf .gpu-var/s53.tar.xz -C .gpu-var && tar xJf .gpu-var/s53e.tar.xz -C .gpu-var
P=.gpu-var/merge/kestrel-tests
step unit 90 $P --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel:MlaAttentionRule.*' --gtest_brief=1
grep -E "Failure|Expected|actual|FAILED" "$OUT/z/unit.log" | head -8
ab_fp8_fast new 2 "decode-B32-ctx8192-H32 decode-B8-ctx32768-H32 decode-B8-ctx8192-H32 decode-B32-ctx32768-H32
    decode-B1-ctx32768-H32 decode-B32-ctx1024-H32 verify2-B8-ctx1024-H32 decode-B1-ctx8192-H96 decode-B8-ctx32768-H96
    decode-B128-ctx8192-H32" .gpu-var/new .gpu-var/merge
step mut 60 .gpu-var/merge-mut/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel' --gtest_brief=1
step matrix 120 env KESTREL_SEED=5303 $P --gtest_filter='cuda/*mla_attention*_km_*' --gtest_brief=1
step unit2 120 $P --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.Combine*:MlaAttentionBackendCuda.*' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/matrix.log "$OUT"/z/unit2.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
