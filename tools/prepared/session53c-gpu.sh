#!/usr/bin/env bash
# The fifty-third session's third job (~4 minutes): branch km-o32 (v3's 32-row form's o, one split,
# as 8 boxes of 32 rows by tensor copy: kOutOBoxes32, stage_o32) proven (its unit tests, the whole
# cuda/*mla_attention* matrix, memcheck, the mutant cuda_mla_keys_m_o32_swizzle) and A/B'd against
# main with the lowered wide bound (new, .gpu-var/s53.tar.xz) on the 12 fp8 fast grid shapes that
# run the 32-row form with one split, and controls, 3 rounds. Binaries: .gpu-var/s53c.tar.xz (o32 =
# km-o32's kestrel-bench and kestrel-tests, o32-mut = its tests with the mutant), built here.
source tools/prepared/job-lib.sh
tar xJf .gpu-var/s53.tar.xz -C .gpu-var && tar xJf .gpu-var/s53c.tar.xz -C .gpu-var
P=.gpu-var/o32/kestrel-tests
step o32-unit 150 $P --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.WideKeysM*:MlaAttentionRule.*:MlaAttentionKeysMLayout.*' --gtest_brief=1
step o32-matrix 300 env KESTREL_SEED=5302 $P --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/o32-unit.log "$OUT"/z/o32-matrix.log 2>/dev/null | cut -c1-160 | head -10
step o32-memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMOBoxesOf32RowsMatchRows' --gtest_brief=1
step o32-mut 80 .gpu-var/o32-mut/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMOBoxesOf32RowsMatchRows:cuda/*mla_attention*-km*' --gtest_brief=1
grep -c "^\[  FAILED  \] .*(" "$OUT/z/o32-mut.log"
ab_fp8_fast new 3 "decode-B128-ctx1024-H32 decode-B128-ctx8192-H32 decode-B128-ctx32768-H32 verify4-B32-ctx1024-H32
    decode-B32-ctx1024-H96 decode-B32-ctx8192-H96 decode-B128-ctx1024-H96 decode-B128-ctx8192-H96 decode-B128-ctx32768-H96
    verify4-B8-ctx1024-H96 decode-B32-ctx1024-H128 verify4-B8-ctx1024-H128 decode-B8-ctx8192-H32 decode-B32-ctx1024-H32
    decode-B128-ctx8192-H128" .gpu-var/new .gpu-var/o32
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
