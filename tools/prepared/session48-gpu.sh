#!/usr/bin/env bash
# The forty-eighth session's job (binaries built here, carried packed as .gpu-var/s48.tar.xz):
#   m48  branch km-obox-all3 (4b72209; built from 82de9e2, the same code): the wide boxes for every one-split call (km-obox-all2, merged
#        after job 1's A/B: 1.005-1.02x over the bound on the 8k one-split wide shapes, then taken
#        back off main for want of a device run); its tests run here first, as the boxes then take
#        calls longer than 2048 keys (WideKeysMOBoxesForLongOneSplitCalls). Merge it if they pass.
#   evl  branch km-evl: v3's split partials stored evict-last (st.global.L2::cache_hint.v4), as v4's
#        (whose writes' policy alone measured 1.005x in the forty-fourth session). Predicted
#        1.00-1.01x on the split shapes.
#   nost the same with KESTREL_PROBE_NO_PARTIALS (timing only: no partial stores, wrong output):
#        what the 32-row form's o stores (4.5 us of a 54 us CTA in the forty-seventh's timeline)
#        cost the call, the bound on any cheaper store pattern.
source tools/prepared/job-lib.sh
[ -f .gpu-var/s48.tar.xz ] && [ ! -d .gpu-var/m48 ] && tar xJf .gpu-var/s48.tar.xz -C .gpu-var
step unit 150 .gpu-var/m48/kestrel-tests --gtest_filter='MlaAttentionCuda.*KeysM*:MlaAttentionRule.*:MlaAttentionKeysM*' --gtest_brief=1
for seed in ${SEEDS:-4801 4703}; do
  step "matrix-$seed" 150 env KESTREL_SEED=$seed .gpu-var/m48/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
done
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 .gpu-var/m48/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysMOBoxes*' --gtest_brief=1
# EVL=0 stops after main's checks.
if [ "${EVL:-1}" = 1 ]; then
step evl-unit 120 .gpu-var/evl/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.Combine*' --gtest_brief=1
step evl-matrix 150 env KESTREL_SEED=4802 .gpu-var/evl/kestrel-tests --gtest_filter='cuda/*mla_attention*km*' --gtest_brief=1
g=()
for s in decode-B32-ctx8192-H32 decode-B8-ctx32768-H32 decode-B32-ctx32768-H32 decode-B8-ctx8192-H32 verify2-B32-ctx32768-H32 \
         verify2-B8-ctx32768-H32 decode-B8-ctx32768-H128 decode-B32-ctx8192-H128 verify4-B8-ctx8192-H128 verify4-B32-ctx8192-H96 \
         decode-B128-ctx8192-H32 verify2-B128-ctx8192-H128; do
  g+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP")
done
AB_TIMEOUT=200 scripts/gpu-ab "$OUT/z/ab" ${AB_ROUNDS:-3} .gpu-var/m48 .gpu-var/evl .gpu-var/nost -- --reps 20 --no-ceilings "${g[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base m48 | tee "$OUT/z/ab.txt"
fi
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/*.log | cut -c1-140 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
