#!/usr/bin/env bash
# The forty-ninth session's job (binaries built here, carried packed as .gpu-var/s49.tar.xz):
#   p49  branch km-pairs: v3's split pairs (splits 2 i, 2 i + 1 of the 32-row form as a cluster of
#        two, the odd one's merged half into the even one's shared memory; one partial a pair, o
#        itself for 2 splits) with the candidate rule (even splits in one wave of clusters), and
#        the CTA merge's factor 0 for a half without keys. Its tests first (unit, the matrix with
#        its -pairs cases, memcheck and synccheck), the two mutants, the pairs kernel's spills in
#        SASS (where they lie against the tile loop), then the A/B against m48 (main's kernels).
#   m48  main's kernels (km-obox-all3's build; bench only).
# Knobs: SEEDS (matrix seeds, default "4901 4801"), AB_ROUNDS (default 4), AB=0 (tests only).
source tools/prepared/job-lib.sh
[ -f .gpu-var/s49.tar.xz ] && [ ! -d .gpu-var/p49 ] && tar xJf .gpu-var/s49.tar.xz -C .gpu-var
P=.gpu-var/p49/kestrel-tests
step unit 200 $P --gtest_filter='MlaAttentionCuda.*KeysM*:MlaAttentionCuda.Combine*:MlaAttentionCuda.PageOutside*:MlaAttentionCuda.FastPrecision*:MlaAttentionRule.*' --gtest_brief=1
for seed in ${SEEDS:-4901 4801}; do
  step "matrix-$seed" 150 env KESTREL_SEED=$seed $P --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
done
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMSplitPairs*:MlaAttentionCuda.KeysMHalfWithout*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMSplitPairs*' --gtest_brief=1
# The mutants must fail their filters' tests (rc != 0).
step mut-half 100 .gpu-var/mut-half_factor/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMHalfWithoutKeysBesideVeryLowScores' --gtest_brief=1
step mut-pair 100 .gpu-var/mut-pair_half/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMSplitPairsMatchUnpairedSplits:cuda/*mla_attention*pairs*' --gtest_brief=1
# The pairs kernel's SASS: its length, the span of its HGMMAs, and where its local loads / stores lie.
cuobjdump -sass .gpu-var/p49/kestrel-bench 2>/dev/null | awk '
  /Function :/ { f = ($0 ~ /keys_m_kernelILb0ELb1ELi32ELb0ELb1E/); n = 0; next }
  f { n++; if ($0 ~ /HGMMA/) { if (!h0) h0 = n; h1 = n } if ($0 ~ /STL|LDL/) { sub(/^ +/, ""); print n ": " $0 } }
  END { print "HGMMA lines " h0 " .. " h1 ", lines " n }' > "$OUT/z/sass-spills.txt"
echo "sass: $(tail -1 "$OUT/z/sass-spills.txt"), $(grep -c -E 'STL|LDL' "$OUT/z/sass-spills.txt") local accesses"
if [ "${AB:-1}" = 1 ]; then
ab_h32_splits m48 ${AB_ROUNDS:-4} .gpu-var/m48 .gpu-var/p49
fi
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit.log "$OUT"/z/matrix-*.log "$OUT"/z/memcheck.log "$OUT"/z/synccheck.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
