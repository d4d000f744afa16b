#!/usr/bin/env bash
# The check of v4's flattened runs merged in the kernel (tools/prepared/s64-merge.patch, forty-third
# session; prepared, not run: no device machine started for it): its tests (the merge against the
# combine kernel bit for bit, against v2 within the fast precision, a plan of tens of segments a
# sequence), the -s64 matrix, the merge mutant (the patch adds
# tests/mutations/cuda_mla_seesaw64_merge_segments.patch: must fail), then an A/B of main
# (.gpu-var/spl2) against the merge (.gpu-var/merge), 2 rounds, on the flattened shapes, FlashMLA on
# the one-wave ones, then memcheck and synccheck, and the timeline with the merge (.gpu-var/tmerge;
# its item stamps end before the merge). Predicted: the one-wave shapes 1.04-1.08x (the combine
# kernel, ~9-10 us of verify 4 B8 8k's 111, against ~2 us of merging at the kernel's end and a
# memset), the 32k and multi-wave shapes ~1.00-1.01x.
# Built here first: ONLY="spl2 merge mmut tmerge" bash tools/prepared/build-gpu-var.sh.
# Carry [".gpu-var/spl2", ".gpu-var/merge", ".gpu-var/mmut", ".gpu-var/tmerge", ".peers/flashmla-bench"].
# ~2-3 min on the device.
source tools/prepared/job-lib.sh; N=.gpu-var/merge
step unit 150 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionCuda.CombineByWarps*:MlaAttentionRule.*' --gtest_brief=1
step matrix 120 env KESTREL_SEED=4344 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
step mutant 120 .gpu-var/mmut/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64_flat*:MlaAttentionCuda.Seesaw64Flat*:MlaAttentionCuda.Seesaw64OneWave*' --gtest_brief=1
grep -E "FAILED|PASSED" "$OUT"/z/{unit,matrix,mutant}.log | head -20
f=()
for s in verify4-B8-ctx8192 verify8-B8-ctx8192 verify2-B32-ctx8192 verify4-B32-ctx8192 verify4-B8-ctx32768 verify8-B8-ctx32768 verify2-B32-ctx32768 decode-B32-ctx8192; do
  f+=(--filter "mla_attention/$s-H96-bf16-fastP"); done
for s in verify2-B32 verify4-B8 verify8-B8; do f+=(--filter "mla_attention_s64flat/$s-ctx16384-H96-bf16" --filter "mla_attention_s64flat/$s-ctx4096-H96-bf16"); done
AB_TIMEOUT=90 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
g=(); for s in verify4-B8-ctx8192 verify8-B8-ctx8192 verify2-B32-ctx8192; do g+=(--filter "$s-H96-bf16-fastP"); done
timeout 40 .peers/flashmla-bench --grid --reps 10 "${g[@]}" | grep fastP | awk '{print $1, $2}' | tee "$OUT/z/flashmla.txt"
(cd "$OUT" && tar cJf z1.tar.xz z)
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64FlatScheduleMatchesV2' --gtest_brief=1
timeout 60 .gpu-var/tmerge/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter "mla_attention/verify4-B8-ctx8192-H96-bf16-fastP" > "$OUT/z/tl.txt" 2>&1
python3 tools/cta_timeline.py "$OUT/z/tl.txt" 2>&1 | head -6
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z z1.tar.xz)
echo "all $(( $(date +%s) - t0 ))s"
