#!/usr/bin/env bash
# Forty-fifth session: the landed form of the shared-keys rule (three or more row tiles a sequence,
# splits of 640+ keys, no walk; branch s64-short-rule at its last commit): the CUDA mla_attention
# tests and matrix, and the A/B against main on four shapes it moves and two it leaves to v2
# (job 6 measured every moved shape with the same kernels). Carry [".gpu-var/spl2", ".gpu-var/rule"].
source tools/prepared/job-lib.sh; N=.gpu-var/rule
step unit 120 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.*:MlaAttentionRule.*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4549 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/unit.log" "$OUT/z/matrix.log" | head -20
f=()
for s in verify2-B32-ctx1024-H96 verify8-B8-ctx1024-H128 verify8-B1-ctx32768-H96 verify2-B8-ctx8192-H128 \
         decode-B8-ctx8192-H128 verify4-B8-ctx8192-H32; do f+=(--filter "mla_attention/$s-bf16-fastP"); done
AB_TIMEOUT=60 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
