#!/usr/bin/env bash
# Forty-fifth session, second pairs job: pairs only where the grid's pairs all fit at once and a
# split holds at most 2048 keys (the first job: walked and long grids 0.68-0.85x, verify 8 B8 1k H
# 128 1.098x). Carry [".gpu-var/spl2", ".gpu-var/pair"].
source tools/prepared/job-lib.sh; N=.gpu-var/pair
step unit 90 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionRule.*:MlaAttentionCuda.Combine*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4547 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/matrix.log" | head -20
f=()
for s in verify8-B8-ctx1024-H128 verify8-B8-ctx1024-H96 verify4-B8-ctx1024-H128 verify4-B8-ctx1024-H96 verify2-B32-ctx1024-H128 \
         verify8-B32-ctx1024-H32 verify4-B32-ctx1024-H32 verify8-B1-ctx8192-H128 verify8-B1-ctx32768-H96 verify4-B1-ctx8192-H128 \
         decode-B8-ctx8192-H128 verify8-B8-ctx8192-H128 decode-B32-ctx1024-H128 decode-B1-ctx32768-H128 verify2-B8-ctx1024-H128 decode-B128-ctx8192-H128; do
  f+=(--filter "mla_attention/$s-bf16-fastP"); done
KESTREL_S64_PAIRS_DEBUG=1 timeout 60 $N/kestrel-bench --reps 1 --warmup 0 --no-ceilings "${f[@]}" 2>&1 | grep -E "^s64 pairs|^mla_attention" | awk '{print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}' | uniq
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
