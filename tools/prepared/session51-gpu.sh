#!/usr/bin/env bash
# The fifty-first session's first job (not run there: no machine; session51b-gpu.sh covers it).
# Binaries from tools/prepared/build-s51.sh, carried packed in .gpu-var/s51.tar.xz: m = main's kestrel-bench, ws = the branch's kestrel-bench and
# kestrel-tests, mut-ws / mut-wsw = the branch's kestrel-tests with cuda_mla_keys_m_ws_swizzle /
# cuda_mla_keys_m_wide_ws_swizzle):
#   ws  v3 with splits stages a whole row tile's f32 partial as 16 swizzled boxes (stores without
#       bank conflicts) and sends them by tensor copy: the 32-row form (the forty-ninth session's
#       km-ws-tma, rewritten: its branch was lost with that checkout) and the wide form (new).
#       Predicted (km-ws-tma's H200 numbers): 1.07x at decode B8 8k H 32, 1.01-1.03x at B8 32k,
#       B32 8k, verify 2 B8 8k / B32 32k, verify 4 B8 32k; 1.00x on the one-split controls (B1,
#       B128); the wide split shapes (H 96 / 128 at 8-32k, verify 2 B8 32k H 32) 1.01-1.04x.
# Its unit tests and the whole mla matrix, the A/B against main on the forty-ninth's twelve H 32
# shapes and six wide split ones, then the mutants, memcheck and synccheck. Knobs: SEED (5101),
# AB_ROUNDS (2), SHORT=1 (little device time left: the v3 matrix cases only, one A/B round, no
# synccheck).
source tools/prepared/job-lib.sh
tar xJf .gpu-var/s51.tar.xz -C .gpu-var
S=${SEED:-5101}
P=.gpu-var/ws/kestrel-tests
step unit-ws 200 $P --gtest_filter='MlaAttentionCuda.*KeysM*:MlaAttentionCuda.Combine*:MlaAttentionCuda.PageOutside*:MlaAttentionRule.*:MlaAttentionKeysMLayout.*' --gtest_brief=1
MATRIX='cuda/*mla_attention*'
[ "${SHORT:-0}" = 1 ] && MATRIX='cuda/*mla_attention*km*' AB_ROUNDS=1
step "matrix-ws-$S" 200 env KESTREL_SEED=$S $P --gtest_filter="$MATRIX" --gtest_brief=1
ab_fp8_fast m "${AB_ROUNDS:-2}" "decode-B1-ctx8192-H32 decode-B1-ctx32768-H32 decode-B8-ctx1024-H32 decode-B8-ctx8192-H32
    decode-B8-ctx32768-H32 decode-B32-ctx8192-H32 decode-B32-ctx32768-H32 verify2-B8-ctx8192-H32 verify2-B8-ctx32768-H32
    verify2-B32-ctx32768-H32 verify4-B8-ctx32768-H32 decode-B128-ctx8192-H32 decode-B8-ctx8192-H128 decode-B8-ctx32768-H128
    decode-B32-ctx32768-H96 verify2-B8-ctx32768-H96 verify4-B8-ctx32768-H96 decode-B1-ctx32768-H128" .gpu-var/m .gpu-var/ws
step mut-ws 120 .gpu-var/mut-ws/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits:cuda/*mla_attention*-km*' --gtest_brief=1
step mut-wsw 120 .gpu-var/mut-wsw/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits:cuda/*mla_attention*-kmw*' --gtest_brief=1
step memcheck-ws 150 compute-sanitizer --tool memcheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits' --gtest_brief=1
[ "${SHORT:-0}" = 1 ] || step synccheck-ws 150 compute-sanitizer --tool synccheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit*.log "$OUT"/z/matrix-*.log "$OUT"/z/memcheck*.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
