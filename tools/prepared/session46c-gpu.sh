#!/usr/bin/env bash
# Forty-sixth session: (1) the exact precision's fp8 rule refit (v3 for calls of more than 32 rows
# a sequence at any size; main e9398af as .gpu-var/spl2 against the change as .gpu-var/rule46):
# its CUDA tests and matrix, and the A/B on the 11 grid shapes it moves (predicted from job 2's
# forced grids: 1.08-1.34x) with the H 32 decodes it keeps on v2 and the fast precision
# (unchanged) as controls; (2) v3 wide's CTA timeline (tools/prepared/km-cta-timeline.patch as
# .gpu-var/kmtl, read by tools/km_timeline.py) at B 128 / 32 with 1k and 8k keys: where the
# ~14 us a row tile beyond its tiles goes at 1k (the wide form runs 1.48x its 8k rate there).
# Carry [".gpu-var/spl2", ".gpu-var/rule46", ".gpu-var/kmtl"].
source tools/prepared/job-lib.sh; N=.gpu-var/rule46
step unit 120 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.WideKeysM*:MlaAttentionRule.*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4602 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/unit.log" "$OUT/z/matrix.log" | head -20
f=()
for s in verify2-B1-ctx1024-H32 decode-B1-ctx1024-H96 decode-B1-ctx1024-H128 verify4-B1-ctx1024-H32 verify2-B1-ctx1024-H96 \
         verify2-B1-ctx1024-H128 verify8-B1-ctx1024-H32 verify4-B1-ctx1024-H96 verify2-B1-ctx8192-H32 verify2-B8-ctx1024-H32 \
         verify4-B1-ctx1024-H128 decode-B1-ctx1024-H32 decode-B8-ctx1024-H32 decode-B32-ctx8192-H128; do
  f+=(--filter "mla_attention/$s-fp8_e4m3-qfp8")  # (a prefix: the -fastP case runs too, unchanged)
done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/spl2 $N -- --reps 20 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
for s in verify8-B128-ctx1024-H128 decode-B128-ctx1024-H128 verify4-B32-ctx1024-H128 verify8-B128-ctx8192-H128; do
  step "tl-$s" 120 .gpu-var/kmtl/kestrel-bench --reps 2 --warmup 1 --no-ceilings --filter "mla_attention_kmw/$s-fp8_e4m3-qfp8-fastP"
  echo "== $s"; python3 tools/km_timeline.py "$OUT/z/tl-$s.log"
  xz -T4 "$OUT/z/tl-$s.log"
done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
