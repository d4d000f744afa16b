#!/usr/bin/env bash
# The forty-seventh session's third job: branch km-boxfix (.gpu-var/fix: its tests and bench;
# fix-mut: its tests with cuda_mla_keys_m_wide_boxes_walk.patch; carried packed as
# .gpu-var/s47c.tar.xz with main47b's bench, km-next's tests, oall2's bench and late's build).
# Job 3 (km-rows2) failed six -kmw matrix cases at KESTREL_SEED=4703 (verify B3 H32 P128, extend
# B2 H32 P32: the rows of a CTA's second row tile NaN): v3 wide's o boxes staged in the stages
# while the producers, which never waited at a row tile boundary in the wide form, filled them
# with the next row tile's KV (a CTA walks row tiles where a sequence has more rows than the grid
# plans). The fix (landed on main without a device run; docs/verification.md): the
# producers wait at the row tile barrier (the 32-row form's protocol) in the boxes' instantiation.
# The boxes keep their 2048-key bound on main; .gpu-var/fix is main's build (rebuilt at the
# forty-seventh session's end), so the A/B below should read ~1.00x (uniform batches do not walk).
# The third arm, oall2 (branch km-obox-all2: the bound dropped again on top of the fix), measures
# the boxes for every one-split call (predicted 1.005-1.05x over fix on the 8k / 32k one-split
# wide shapes, ~1.00x at 1k): land it if it holds (its tests are main's with the rule test
# changed; the CUDA paths are the boxes' at longer keys).
# (1) is main's km-next (its tests, .gpu-var/next) failing the same cases at that seed (the race on
# main)? (2) the fix: unit, the matrix at both seeds, sanitizers on the new test, the mutant (a
# race: runs, not certainty), (3) A/B against main47b.
source tools/prepared/job-lib.sh
[ -f .gpu-var/s47c.tar.xz ] && [ ! -d .gpu-var/fix ] && tar xJf .gpu-var/s47c.tar.xz -C .gpu-var
step next-4703 120 env KESTREL_SEED=4703 .gpu-var/next/kestrel-tests --gtest_filter='cuda/*mla_attention*kmw*' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT/z/next-4703.log" | cut -c1-110 | head -8
step unit 150 .gpu-var/fix/kestrel-tests --gtest_filter='MlaAttentionCuda.*KeysM*:MlaAttentionRule.*:MlaAttentionKeysM*' --gtest_brief=1
for seed in ${SEEDS:-4703 4701}; do
  step "matrix-$seed" 150 env KESTREL_SEED=$seed .gpu-var/fix/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
done
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit.log "$OUT"/z/matrix-*.log | cut -c1-140 | head -10
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 .gpu-var/fix/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysMOBoxes*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 .gpu-var/fix/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysMOBoxes*' --gtest_brief=1
filt=$(sed -n 's/^# filter: //p' tests/mutations/cuda_mla_keys_m_wide_boxes_walk.patch)
for r in $(seq 1 ${MUT_RUNS:-2}); do
  step "mutant-$r" 120 env KESTREL_SEED=470$r .gpu-var/fix-mut/kestrel-tests --gtest_filter="$filt" --gtest_brief=1
  echo "  mutant run $r: $(grep -c '^\[  FAILED  \] .*(' "$OUT/z/mutant-$r.log") failed tests (must be > 0)"
done
f=()
for s in verify2-B128-ctx8192-H32 verify4-B128-ctx8192-H32 decode-B128-ctx8192-H128 verify2-B128-ctx8192-H128 \
         verify8-B32-ctx8192-H128 verify4-B128-ctx8192-H128 decode-B128-ctx32768-H128 verify8-B128-ctx1024-H128 decode-B128-ctx1024-H128; do
  f+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP")
done
if [ "${AB_ROUNDS:-3}" -gt 0 ]; then
  # oall2 = branch km-obox-all2 (main + the boxes for every one-split call): its bench only.
  AB_TIMEOUT=200 scripts/gpu-ab "$OUT/z/ab" ${AB_ROUNDS:-3} .gpu-var/main47b .gpu-var/fix .gpu-var/oall2 -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
  python3 scripts/bench-compare "$OUT/z/ab" --base main47b | tee "$OUT/z/ab.txt"
fi
# (4) Branch km-late-combine (.gpu-var/late: tests and bench): v3's split combine launched as a
# programmatic dependent past half the SMs too, let go after each CTA's tile loops (combine_late;
# the twenty-second session put the combine's launch at ~1.2-2.2% of B32 8k / 32k). Predicted
# 1.01-1.02x on the split shapes, 1.00x on one-split ones. LATE=0 skips it.
if [ "${LATE:-1}" = 1 ]; then
  step late-unit 120 .gpu-var/late/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.Combine*' --gtest_brief=1
  step late-matrix 150 env KESTREL_SEED=4704 .gpu-var/late/kestrel-tests --gtest_filter='cuda/*mla_attention*km*' --gtest_brief=1
  grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/late-*.log | cut -c1-140 | head -6
  g=()
  for s in decode-B32-ctx8192-H32 decode-B8-ctx32768-H32 decode-B32-ctx32768-H32 verify2-B32-ctx32768-H32 verify2-B8-ctx32768-H32 \
           decode-B8-ctx32768-H128 decode-B32-ctx8192-H128 verify4-B8-ctx8192-H128 verify4-B32-ctx8192-H96 decode-B128-ctx8192-H32; do
    g+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP")
  done
  AB_TIMEOUT=200 scripts/gpu-ab "$OUT/z/ablate" ${AB_ROUNDS:-3} .gpu-var/main47b .gpu-var/late -- --reps 20 --no-ceilings "${g[@]}" >/dev/null 2>&1
  python3 scripts/bench-compare "$OUT/z/ablate" --base main47b | tee "$OUT/z/ablate.txt"
fi
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
