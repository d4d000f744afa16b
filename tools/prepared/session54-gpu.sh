#!/usr/bin/env bash
# The fifty-fourth session's job, three calls of ~6 minutes: PART=1 (default), PART=2, and on an
# H200 GOAL=1 (steps in the order of their worth, for a call that may be cut short). The prepared
# branches against main (new):
# - merge2 = tools/prepared/km-merge.patch: v3's splits merged in the kernel for one-wave grids
#   (both forms, at most 16 splits); merge1 = km-merge-v1.patch (the 32-row form only, any count).
# - flat = tools/prepared/km-flat.patch: v3's flattened schedule on the idle H 96 shapes.
# - fm = tools/prepared/km-flat-merge.patch (when built): both, and the flattened runs merged in
#   the kernel (one wave) instead of by the combine kernel.
# Each one's own tests first, then the A/Bs (merge: new / merge1 / merge2 on the split shapes both
# forms run, and B 1 at 44-132 splits, where merge2 keeps the combine kernel and merge1 merges;
# flat: new / flat on the H 96 shapes its rule takes, and a control), the mutants, the -km / -kmw
# matrices, the other v3 / combine tests, memcheck; with GOAL=1 on an H200 issue 3's bf16 goal
# rows beside FlashMLA and the fp8 grid with the ceilings (on new) instead.
# Binaries: tools/prepared/build-s54.sh. Carry .gpu-var/s54.tar.xz (and .peers/flashmla-bench).
source tools/prepared/job-lib.sh
tar xJf .gpu-var/s54.tar.xz -C .gpu-var
if [ "${GOAL:-0}" = 1 ]; then
  goal_rows_and_fp8_grid .gpu-var/new
  (cd "$OUT" && tar cJf z.tar.xz z goal && rm -rf z goal)
  echo "all $(( $(date +%s) - t0 ))s"
  exit 0
fi
M=.gpu-var/merge2/kestrel-tests F=.gpu-var/flat/kestrel-tests
FM=$( [ -d .gpu-var/fm ] && echo .gpu-var/fm )
if [ "${PART:-1}" = 1 ]; then  # ~6 minutes: the tests of each branch, the A/Bs, the mutants
step unit 150 $M --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel:MlaAttentionRule.*' --gtest_brief=1
step unitf 150 $F --gtest_filter='MlaAttentionCuda.KeysMFlatRunsMatchUniform:MlaAttentionRule.*' --gtest_brief=1
if [ -n "$FM" ]; then
  step unitfm 200 $FM/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMFlatRunsMatchUniform:MlaAttentionCuda.KeysMSplitsMergedInTheKernel:MlaAttentionRule.*' --gtest_brief=1
fi
grep -E "Failure|Expected|actual|FAILED" "$OUT"/z/unit*.log | head -12
# merge: 32-row form: decode B32 1k / 8k / 32k (4 splits), B8 8k / 32k (16), verify 2 B8 1k (8),
# B1 32k (132); wide: verify 2 B32 32k H 32 (4), decode B32 8k H 128 (2), B8 32k H 128 (8),
# verify 4 B8 32k H 32 (8), verify 2 B8 8k H 96 (5); B1 8k H 96 (44, 32-row); one split B128 8k.
ab_fp8_fast new 2 "decode-B32-ctx8192-H32 decode-B8-ctx32768-H32 decode-B8-ctx8192-H32 decode-B32-ctx32768-H32
    decode-B32-ctx1024-H32 verify2-B8-ctx1024-H32 decode-B1-ctx32768-H32 verify2-B32-ctx32768-H32 decode-B32-ctx8192-H128
    decode-B8-ctx32768-H128 verify4-B8-ctx32768-H32 verify2-B8-ctx8192-H96 decode-B1-ctx8192-H96 decode-B128-ctx8192-H32" \
  .gpu-var/new .gpu-var/merge1 .gpu-var/merge2
mv "$OUT/z/ab" "$OUT/z/ab-merge" && mv "$OUT/z/ab.txt" "$OUT/z/ab-merge.txt"
# flat: one wave of 96 CTAs (decode B32 8k on the 32-row form, verify 2 B32 8k, verify 4 / 8 B8 8k
# wide), 2.9 waves of splits (decode B32 32k, verify 2 B32 16k, verify 4 B32 8k, verify 8 B8 32k);
# controls the rule leaves alone (decode B32 1k H 96, decode B128 8k H 128).
ab_fp8_fast new 2 "decode-B32-ctx8192-H96 verify2-B32-ctx8192-H96 verify4-B8-ctx8192-H96 verify8-B8-ctx8192-H96
    decode-B32-ctx32768-H96 verify2-B32-ctx16384-H96 verify4-B32-ctx8192-H96 verify8-B8-ctx32768-H96
    decode-B32-ctx1024-H96 decode-B128-ctx8192-H128" .gpu-var/new .gpu-var/flat $FM
mv "$OUT/z/ab" "$OUT/z/ab-flat" && mv "$OUT/z/ab.txt" "$OUT/z/ab-flat.txt"
step mut 90 .gpu-var/merge2-mut/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel' --gtest_brief=1
step mutf 90 .gpu-var/flat-mut/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMFlatRunsMatchUniform:cuda/*mla_attention*_km*_flat_fastP' --gtest_brief=1
[ -n "$FM" ] && step mutfm 90 .gpu-var/fm-mut/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMFlatRunsMatchUniform' --gtest_brief=1
else  # PART=2, ~6 minutes: the matrices, the other v3 and combine tests, memcheck, synccheck
step matrix 200 env KESTREL_SEED=5401 $M --gtest_filter='cuda/*mla_attention*_km*' --gtest_brief=1
step matrixf 200 env KESTREL_SEED=5402 $F --gtest_filter='cuda/*mla_attention*_km*' --gtest_brief=1
step unit2 150 $M --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.WideKeysM*:MlaAttentionCuda.Combine*:MlaAttentionBackendCuda.*' --gtest_brief=1
step unit2f 150 $F --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.WideKeysM*:MlaAttentionCuda.Seesaw64*:MlaAttentionBackendCuda.*' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/matrix*.log "$OUT"/z/unit2*.log 2>/dev/null | cut -c1-160 | head -10
step memcheck 200 compute-sanitizer --tool memcheck $M --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel' --gtest_brief=1
step memcheckf 200 compute-sanitizer --tool memcheck $F --gtest_filter='MlaAttentionCuda.KeysMFlatRunsMatchUniform' --gtest_brief=1
# The grid barrier's CTA barrier reached by both roles at one instruction (the join): synccheck.
step synccheck 200 compute-sanitizer --tool synccheck $M --gtest_filter='MlaAttentionCuda.KeysMSplitsMergedInTheKernel' --gtest_brief=1
if [ -n "$FM" ]; then
  step synccheckfm 200 compute-sanitizer --tool synccheck $FM/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMFlatRunsMatchUniform' --gtest_brief=1
  step matrixfm 200 env KESTREL_SEED=5403 $FM/kestrel-tests --gtest_filter='cuda/*mla_attention*_km*' --gtest_brief=1
  grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/matrixfm.log 2>/dev/null | cut -c1-160 | head -10
fi
fi
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
