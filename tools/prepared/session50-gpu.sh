#!/usr/bin/env bash
# The fiftieth session's first job (binaries built here, carried packed: .gpu-var/s49c.tar.xz with
# ws49 = branch km-ws-tma, m48 = main's kernels; .gpu-var/s50.tar.xz with wsb = branch ws-banks):
#   ws49  v3's 32-row split partials staged as swizzled boxes and sent by tensor copy. Its unit
#         tests, memcheck and mutant passed on an H200 (forty-ninth, job 4); its matrix did not run.
#   wsb   the same with the staging's two-way bank conflicts gone (odd g store unit u ^ 1 at step u,
#         km::partial_unit_at_step; host-tested). Predicted 1.00-1.01x over ws49: the 64 KB staged a
#         row tile take ~0.3 us less of a CTA's 25-200 us.
# Then the A/B of m48, ws49 and wsb on the twelve H 32 shapes. Knobs: SEED (default 5001), AB_ROUNDS (3).
source tools/prepared/job-lib.sh
for f in s49c s50; do [ -f .gpu-var/$f.tar.xz ] && tar xJf .gpu-var/$f.tar.xz -C .gpu-var; done
S=${SEED:-5001}
step "matrix-ws49-$S" 150 env KESTREL_SEED=$S .gpu-var/ws49/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
P=.gpu-var/wsb/kestrel-tests
step unit-wsb 200 $P --gtest_filter='MlaAttentionCuda.*KeysM*:MlaAttentionCuda.Combine*:MlaAttentionCuda.PageOutside*:MlaAttentionRule.*:MlaAttentionKeysMLayout.*' --gtest_brief=1
step "matrix-wsb-$((S + 1))" 150 env KESTREL_SEED=$((S + 1)) $P --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
step memcheck-wsb 150 compute-sanitizer --tool memcheck --error-exitcode 3 $P --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopy*' --gtest_brief=1
# wsb's 32-row fast instantiation with the staged partials: the span of its HGMMAs and its local accesses.
k='ILb0ELb1ELi32ELb0ELb1EE'
cuobjdump -sass .gpu-var/wsb/kestrel-bench 2>/dev/null | awk -v K="$k" '
  /Function :/ { if (f) exit; f = index($0, K) > 0; n = 0; next }
  f { n++; if ($0 ~ /HGMMA/) { if (!h0) h0 = n; h1 = n } if ($0 ~ /STL|LDL/) { sub(/^ +/, ""); print n ": " $0 } }
  END { print "HGMMA lines " h0 " .. " h1 ", lines " n }' > "$OUT/z/sass-wsb.txt"
echo "sass wsb: $(tail -1 "$OUT/z/sass-wsb.txt"), $(grep -c -E 'STL|LDL' "$OUT/z/sass-wsb.txt") local accesses"
ab_h32_splits m48 ${AB_ROUNDS:-3} .gpu-var/m48 .gpu-var/ws49 .gpu-var/wsb
python3 scripts/bench-compare "$OUT/z/ab" --base ws49 > "$OUT/z/ab-ws49.txt" && grep -E "decode|verify" "$OUT/z/ab-ws49.txt" | awk '{print "  vs ws49:", $0}' | cut -c1-150
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit*.log "$OUT"/z/matrix-*.log "$OUT"/z/memcheck*.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
