#!/usr/bin/env bash
# The forty-ninth session's second job (binaries built here, carried packed as .gpu-var/s49b.tar.xz).
# Job 1 (session49-gpu.sh) passed km-pairs' tests but measured the pairs 0.94-0.96x at B8 8k / 32k,
# B32 8k and verify 2 B8 8k H 32 (the follower's 64 KB by per-thread st.shared::cluster). Here:
#   p49b  km-pairs with the follower's half staged locally and sent by one bulk copy (its tests,
#         the pair mutant);
#   p49n  the same with KESTREL_PROBE_PAIRS_NO_EXCHANGE (timing only, wrong output): the cluster
#         launch, its barriers and half the partials, no exchange: the bound on any exchange;
#   p49   job 1's build (per-thread remote stores), m48 main's kernels: bench only.
#   hf49  branch km-half-factor (main with the CTA merge's factor 0 for a half without keys, and
#         its test, no pairs): its tests.
# Knobs: SEED (matrix, default 4902), AB_ROUNDS (default 3).
source tools/prepared/job-lib.sh
[ -f .gpu-var/s49b.tar.xz ] && [ ! -d .gpu-var/p49b ] && tar xJf .gpu-var/s49b.tar.xz -C .gpu-var
P=.gpu-var/p49b/kestrel-tests
step unit 200 $P --gtest_filter='MlaAttentionCuda.*KeysM*:MlaAttentionCuda.Combine*:MlaAttentionCuda.PageOutside*:MlaAttentionCuda.FastPrecision*:MlaAttentionRule.*' --gtest_brief=1
step "matrix-${SEED:-4902}" 150 env KESTREL_SEED=${SEED:-4902} $P --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMSplitPairs*:MlaAttentionCuda.KeysMHalfWithout*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMSplitPairs*' --gtest_brief=1
step mut-pair 100 .gpu-var/mut-pair_bulk/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMSplitPairsMatchUnpairedSplits:cuda/*mla_attention*pairs*' --gtest_brief=1
step hf-unit 150 .gpu-var/hf49/kestrel-tests --gtest_filter='MlaAttentionCuda.*KeysM*:MlaAttentionRule.*' --gtest_brief=1
step hf-matrix 100 env KESTREL_SEED=4903 .gpu-var/hf49/kestrel-tests --gtest_filter='cuda/*mla_attention*km*' --gtest_brief=1
ab_h32_splits m48 ${AB_ROUNDS:-3} .gpu-var/m48 .gpu-var/p49 .gpu-var/p49b .gpu-var/p49n
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit.log "$OUT"/z/matrix-*.log "$OUT"/z/memcheck.log "$OUT"/z/synccheck.log "$OUT"/z/hf-*.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
