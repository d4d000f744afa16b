#!/usr/bin/env bash
# Forty-fourth session: the in-kernel merge (tools/prepared/s64-merge.patch: .gpu-var/merge, its
# mutant .gpu-var/mmut) and, on top of it, partial rows staged through shared memory and written by
# bulk copy (.gpu-var/stage: branch stage-partials), against main 7decf83 (.gpu-var/spl2).
# Carry [".gpu-var/spl2", ".gpu-var/merge", ".gpu-var/mmut", ".gpu-var/stage", ".peers/flashmla-bench"].
source tools/prepared/job-lib.sh; N=.gpu-var/merge S=.gpu-var/stage
step unit 150 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionCuda.CombineByWarps*:MlaAttentionRule.*' --gtest_brief=1
step matrix 120 env KESTREL_SEED=4344 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
step mutant 120 .gpu-var/mmut/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64_flat*:MlaAttentionCuda.Seesaw64Flat*:MlaAttentionCuda.Seesaw64OneWave*' --gtest_brief=1
step sunit 150 $S/kestrel-tests --gtest_filter='MlaAttentionCuda.*:MlaAttentionRule.*' --gtest_brief=1
step smatrix 150 env KESTREL_SEED=4444 $S/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|PASSED" "$OUT"/z/{unit,matrix,mutant,sunit,smatrix}.log | head -30
f=()
for s in verify4-B8-ctx8192 verify8-B8-ctx8192 verify2-B32-ctx8192 verify4-B32-ctx8192 verify4-B8-ctx32768 verify8-B8-ctx32768 verify2-B32-ctx32768 decode-B32-ctx8192 decode-B8-ctx32768 verify4-B1-ctx32768; do
  f+=(--filter "mla_attention/$s-H96-bf16-fastP"); done
for s in verify2-B32 verify4-B8 verify8-B8; do f+=(--filter "mla_attention_s64flat/$s-ctx16384-H96-bf16"); done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/spl2 $N $S -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
g=(); for s in verify4-B8-ctx8192 verify8-B8-ctx8192 verify2-B32-ctx8192; do g+=(--filter "$s-H96-bf16-fastP"); done
timeout 40 .peers/flashmla-bench --grid --reps 10 "${g[@]}" | grep fastP | awk '{print $1, $2}' | tee "$OUT/z/flashmla.txt"
(cd "$OUT" && tar cJf z1.tar.xz z)
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $S/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $S/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64FlatScheduleMatchesV2' --gtest_brief=1
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z z1.tar.xz)
echo "all $(( $(date +%s) - t0 ))s"
