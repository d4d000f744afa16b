#!/usr/bin/env bash
# Forty-fifth session: v4 with pairs of row tiles sharing their KV tiles by multicast (branch
# s64-pair; a cluster of two CTAs, each copying half of every tile's chunks into both), against
# main (.gpu-var/spl2). Tests first (a hang shows as a step's timeout), then the A/B.
# Carry [".gpu-var/spl2", ".gpu-var/pair"].
source tools/prepared/job-lib.sh; N=.gpu-var/pair
step unit 90 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionRule.*:MlaAttentionCuda.Combine*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4546 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/matrix.log" | head -20
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*' --gtest_brief=1
step racecheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*' --gtest_brief=1
f=()
for s in verify8-B128-ctx8192-H128 verify8-B128-ctx8192-H96 verify8-B128-ctx1024-H96 verify4-B128-ctx8192-H128 verify4-B128-ctx32768-H96 \
         decode-B128-ctx8192-H128 decode-B128-ctx1024-H128 verify2-B128-ctx32768-H128 decode-B32-ctx32768-H128 verify8-B8-ctx1024-H128 \
         verify4-B8-ctx8192-H96 decode-B128-ctx8192-H32; do f+=(--filter "mla_attention/$s-bf16-fastP"); done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
