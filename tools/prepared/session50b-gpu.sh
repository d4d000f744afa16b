#!/usr/bin/env bash
# The fiftieth session's combined job (binaries built here, carried packed: s49c.tar.xz with m48 =
# main's kernels and ws49 = branch km-ws-tma; s50.tar.xz with wsb = branch ws-banks; s50b.tar.xz
# with lead = branch km-lead and its mutant):
#   lead  ws-banks (the staged partials without bank conflicts) + v3 wide's lead: with its o boxes
#         (one split) the wide form walks the batch past one wave and loads a row tile's Q and
#         first two tiles under the end of the one before. Predicted 1.05-1.10x at B 32 / 128 1k
#         (the CTA timeline: ~3.2 us of plan, Q and first tile in a ~34 us row tile), ~1.00-1.02x
#         at 8k; the H 32 split shapes as wsb.
# Its tests and matrix; wsb's tests and matrix only where lead's fail; the A/B of m48, wsb and lead;
# then lead's mutant and memcheck. Knobs: SEED (default 5001), AB_ROUNDS (2), SHORT=1.
source tools/prepared/job-lib.sh
for f in s49c s50 s50b; do [ -f .gpu-var/$f.tar.xz ] && tar xJf .gpu-var/$f.tar.xz -C .gpu-var; done
S=${SEED:-5001}
P=.gpu-var/lead/kestrel-tests
UNIT='MlaAttentionCuda.*KeysM*:MlaAttentionCuda.Combine*:MlaAttentionCuda.PageOutside*:MlaAttentionRule.*:MlaAttentionKeysMLayout.*'
MATRIX='cuda/*mla_attention*'
MEM='MlaAttentionCuda.WideKeysMWalksPastOneWaveWithItsLead:MlaAttentionCuda.KeysMPartialsByTensorCopy*'
# SHORT=1 (little device time left): the v3 tests only (the -km / -kmw matrix cases), no fallback,
# one A/B round on nine shapes, memcheck on the walk.
if [ "${SHORT:-0}" = 1 ]; then
  UNIT='MlaAttentionCuda.*KeysM*:MlaAttentionKeysMLayout.*'
  MATRIX='cuda/*mla_attention*km*'
  MEM='MlaAttentionCuda.WideKeysMWalksPastOneWaveWithItsLead'
  AB_ROUNDS=1
fi
step unit-lead 200 $P --gtest_filter="$UNIT" --gtest_brief=1
step "matrix-lead-$S" 150 env KESTREL_SEED=$S $P --gtest_filter="$MATRIX" --gtest_brief=1
if [ "${SHORT:-0}" != 1 ] && grep -q "FAILED" "$OUT"/z/unit-lead.log "$OUT"/z/matrix-lead-*.log 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt 250 ]; then
  step unit-wsb 200 .gpu-var/wsb/kestrel-tests --gtest_filter="$UNIT" --gtest_brief=1
  step "matrix-wsb-$S" 150 env KESTREL_SEED=$S .gpu-var/wsb/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
fi
SHAPES="decode-B8-ctx8192-H32 decode-B8-ctx32768-H32 decode-B32-ctx8192-H32 decode-B32-ctx32768-H32 verify2-B8-ctx32768-H32
        verify2-B32-ctx32768-H32 verify4-B128-ctx1024-H32 decode-B128-ctx1024-H128 verify2-B128-ctx1024-H128
        verify4-B128-ctx1024-H128 verify8-B128-ctx1024-H128 verify8-B32-ctx1024-H128 verify8-B128-ctx1024-H96
        verify4-B128-ctx8192-H32 decode-B128-ctx8192-H128"
[ "${SHORT:-0}" = 1 ] && SHAPES="decode-B8-ctx8192-H32 decode-B8-ctx32768-H32 decode-B32-ctx8192-H32 verify4-B128-ctx1024-H32
        decode-B128-ctx1024-H128 verify4-B128-ctx1024-H128 verify8-B32-ctx1024-H128 verify8-B128-ctx1024-H96 decode-B128-ctx8192-H128"
R=${AB_ROUNDS:-2}
[ $(( $(date +%s) - t0 )) -gt 240 ] && R=1  # (one round where the tests took long: the call's limit)
echo "A/B rounds: $R"
ab_fp8_fast m48 $R "$SHAPES" .gpu-var/m48 .gpu-var/wsb .gpu-var/lead
# (after the A/B, so that a call cut short by its limit still has the numbers)
step mut-lead 100 .gpu-var/mut-lead/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysMWalksPastOneWaveWithItsLead:MlaAttentionCuda.WideKeysMOBoxes*:cuda/*mla_attention*kmw*' --gtest_brief=1
step memcheck-lead 150 compute-sanitizer --tool memcheck --error-exitcode 3 $P --gtest_filter="$MEM" --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit*.log "$OUT"/z/matrix-*.log "$OUT"/z/memcheck*.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
