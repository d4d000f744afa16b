#!/usr/bin/env bash
# Forty-sixth session: v3 wide's o as boxes by tensor copy (one split, o's tokens H rows apart; an
# instantiation of its own) and its Q by tensor copy from the producer (q's tokens H rows apart),
# branch km-qtma, against main (292b818's kernels): the tests (with WideKeysMOBoxes* and
# WideKeysMQByTensorCopy*), the matrix, memcheck, synccheck, three mutants, the A/B on the wide
# form's shapes, and the CTA timeline. Why: the timeline (session46c) put v3 wide's o stores at
# ~6.2 us and its Q load at 3.1-4.8 us of a 38-41 us row tile at B 32 / 128 with 1k keys.
# Predicted: o out 6.2 -> ~2 us and Q in ~3 -> ~1 us, 1.08-1.15x at B 32 / 128 1k, ~1.01-1.02x at
# 8k, about 1.0x where the call splits (partials: only Q changes).
# AB_ROUNDS (default 3) and TL_SHAPES (default three shapes) trim it to the device time left.
# Carry [".gpu-var/main46", ".gpu-var/kmq", ".gpu-var/kmq-m1", ".gpu-var/kmq-m2", ".gpu-var/kmq-m3", ".gpu-var/kmqtl"].
source tools/prepared/job-lib.sh; N=.gpu-var/kmq
step unit 120 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*:MlaAttentionCuda.KeysM*:MlaAttentionRule.*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4604 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/unit.log" "$OUT/z/matrix.log" | head -20
f=()
for s in verify8-B128-ctx1024-H128 verify8-B128-ctx1024-H96 verify4-B128-ctx1024-H128 verify2-B128-ctx1024-H128 decode-B128-ctx1024-H128 \
         verify8-B32-ctx1024-H128 verify4-B32-ctx1024-H128 decode-B32-ctx1024-H128 verify4-B128-ctx1024-H32 verify8-B8-ctx1024-H128 \
         verify8-B128-ctx8192-H128 decode-B128-ctx8192-H128 verify2-B32-ctx1024-H96 decode-B1-ctx1024-H128 verify8-B1-ctx1024-H128 \
         decode-B128-ctx8192-H32; do
  f+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP")
done
AB_TIMEOUT=150 scripts/gpu-ab "$OUT/z/ab" ${AB_ROUNDS:-3} .gpu-var/main46 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main46 | tee "$OUT/z/ab.txt"
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*' --gtest_brief=1
for m in 1 2 3; do  # each mutant must fail: o boxes on the wrong columns, a partial tile's last row, Q's second half
  step "mutant$m" 120 .gpu-var/kmq-m$m/kestrel-tests --gtest_filter='cuda/*mla_attention*kmw*:MlaAttentionCuda.WideKeysM*' --gtest_brief=1
  grep -c "^\[  FAILED  \] .*(" "$OUT/z/mutant$m.log"
done
for s in ${TL_SHAPES-verify8-B128-ctx1024-H128 decode-B128-ctx1024-H128 verify8-B1-ctx1024-H128}; do
  step "tl-$s" 120 .gpu-var/kmqtl/kestrel-bench --reps 2 --warmup 1 --no-ceilings --filter "mla_attention_kmw/$s-fp8_e4m3-qfp8-fastP"
  echo "== $s"; python3 tools/km_timeline.py "$OUT/z/tl-$s.log" | grep -vE "producer"
  xz -T4 "$OUT/z/tl-$s.log"
done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
