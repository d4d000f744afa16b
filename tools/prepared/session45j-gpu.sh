#!/usr/bin/env bash
# Forty-fifth session: the fp8 rule (v3 at any size at the fast precision, its wide form from
# 98304 tile-keys and for short H 32 decodes; .gpu-var/rule2 = main at its commit): the two CUDA
# tests of that choice, the CUDA mla_attention matrix, then 2 rounds against the bf16 rule's tree
# (.gpu-var/rule, same kernels) on six of the 23 shapes it moves and one it keeps.
# Carry [".gpu-var/rule", ".gpu-var/rule2"].
source tools/prepared/job-lib.sh; N=.gpu-var/rule2
step unit 60 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysM*:MlaAttentionCuda.WideKeysM*:MlaAttentionRule.*' --gtest_brief=1
step matrix 120 env KESTREL_SEED=4550 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/unit.log" "$OUT/z/matrix.log" | head -20
f=()
for s in verify2-B8-ctx1024-H32 decode-B1-ctx1024-H128 decode-B8-ctx1024-H32 decode-B32-ctx1024-H128 verify4-B1-ctx1024-H96 \
         verify4-B1-ctx8192-H128 decode-B128-ctx8192-H32; do f+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP"); done
AB_TIMEOUT=40 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/rule $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base rule | tee "$OUT/z/ab.txt"
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
