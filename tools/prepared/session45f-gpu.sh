#!/usr/bin/env bash
# Forty-fifth session: v4 for one-wave calls whose sequences have several row tiles, from splits
# of 640 keys (branch s64-short-rule), against main (.gpu-var/spl2): the rule's tests, the CUDA
# mla_attention matrix, and the A/B on the 19 grid shapes the rule moves to v4 (predicted from
# this session's forced grids, job 5: 1.01-1.25x, one at 0.98x) and four it leaves alone.
# Carry [".gpu-var/spl2", ".gpu-var/rule"].
source tools/prepared/job-lib.sh; N=.gpu-var/rule
step unit 120 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.*:MlaAttentionRule.*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4548 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/unit.log" "$OUT/z/matrix.log" | head -20
f=()
for s in decode-B8-ctx8192-H96 decode-B8-ctx8192-H128 verify2-B1-ctx32768-H96 verify2-B8-ctx8192-H96 verify2-B32-ctx1024-H96 \
         verify2-B1-ctx32768-H128 verify2-B8-ctx8192-H128 verify2-B32-ctx1024-H128 verify4-B8-ctx8192-H32 verify4-B1-ctx32768-H96 \
         verify4-B1-ctx32768-H128 verify8-B1-ctx32768-H32 verify8-B8-ctx8192-H32 verify8-B32-ctx1024-H32 verify8-B1-ctx8192-H96 \
         verify8-B1-ctx32768-H96 verify8-B8-ctx1024-H96 verify8-B1-ctx8192-H128 verify8-B8-ctx1024-H128 \
         decode-B32-ctx1024-H128 verify4-B8-ctx1024-H96 verify2-B128-ctx1024-H32 decode-B1-ctx32768-H128; do
  f+=(--filter "mla_attention/$s-bf16-fastP"); done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
