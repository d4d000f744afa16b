#!/usr/bin/env bash
# The forty-ninth session's third job (binaries built here, carried packed as .gpu-var/s49c.tar.xz):
#   ws49  branch km-ws-tma: v3's 32-row split partials staged in shared memory as 16 swizzled boxes
#         and sent by tensor copy (a partial row tile's rows copied out of the staging), where each
#         writer thread issued 32 scattered 16-byte stores. The no-partial-stores probe of job 1
#         bounds it: 1.19x at decode B8 8k H 32, 1.07x at B8 32k, 1.05x at verify 2 B8 32k,
#         1.014x at B32 8k. Its tests, its mutant, the spills of both 32-row fast instantiations
#         against their tile loops in SASS, then the A/B against m48 (main's kernels).
# Knobs: SEED (matrix, default 4905), MATRIX=0 (no matrix), AB_ROUNDS (default 3).
source tools/prepared/job-lib.sh
[ -f .gpu-var/s49c.tar.xz ] && [ ! -d .gpu-var/ws49 ] && tar xJf .gpu-var/s49c.tar.xz -C .gpu-var
P=.gpu-var/ws49/kestrel-tests
step unit 200 $P --gtest_filter='MlaAttentionCuda.*KeysM*:MlaAttentionCuda.Combine*:MlaAttentionCuda.PageOutside*:MlaAttentionRule.*' --gtest_brief=1
[ "${MATRIX:-1}" = 1 ] && step "matrix-${SEED:-4905}" 150 env KESTREL_SEED=${SEED:-4905} $P --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopy*' --gtest_brief=1
step mut-ws 100 .gpu-var/mut-ws/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits:cuda/*mla_attention*km*fastP*' --gtest_brief=1
# The 32-row fast instantiations (rows, partials by tensor copy): the span of their HGMMAs and where
# their local loads and stores lie.
for k in 'ILb0ELb1ELi32ELb0ELb0EE' 'ILb0ELb1ELi32ELb0ELb1EE'; do
  cuobjdump -sass .gpu-var/ws49/kestrel-bench 2>/dev/null | awk -v K="$k" '
    /Function :/ { if (f) exit; f = index($0, K) > 0; n = 0; next }
    f { n++; if ($0 ~ /HGMMA/) { if (!h0) h0 = n; h1 = n } if ($0 ~ /STL|LDL/) { sub(/^ +/, ""); print n ": " $0 } }
    END { print "HGMMA lines " h0 " .. " h1 ", lines " n }' > "$OUT/z/sass-$k.txt"
  echo "sass $k: $(tail -1 "$OUT/z/sass-$k.txt"), $(grep -c -E 'STL|LDL' "$OUT/z/sass-$k.txt") local accesses"
done
ab_h32_splits m48 ${AB_ROUNDS:-3} .gpu-var/m48 .gpu-var/ws49
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit.log "$OUT"/z/matrix-*.log "$OUT"/z/memcheck.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
