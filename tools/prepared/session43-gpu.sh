#!/usr/bin/env bash
# The forty-third session's check of v4's flattened runs with leads (kMlaAttentionSeesaw64FlatLeadTiles:
# each item's start charged 5 tiles of its run) and the source-level stalls. The unit tests, the
# -s64 matrix, memcheck and the flat-run mutant on the branch (.gpu-var/lead; .gpu-var/mut its
# tests with tests/mutations/cuda_mla_seesaw64_flat_run.patch: must fail), then an A/B of main
# (.gpu-var/spl2, b8fb6c8) against the branch and a lead of 3 (.gpu-var/lead3), 2 rounds, on the
# flattened shapes, FlashMLA on the one-wave ones, the timeline with leads (.gpu-var/tlead), and
# s64-source-stalls-gpu.sh. Carry [".gpu-var/spl2", ".gpu-var/lead", ".gpu-var/lead3",
# ".gpu-var/tlead", ".gpu-var/mut", ".peers/flashmla-bench"]. ~3 min on the device; ran in the
# forty-third session (perf.md's forty-third section, job 2).
source tools/prepared/job-lib.sh; N=.gpu-var/lead
step unit 120 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionRule.*' --gtest_brief=1
step matrix 120 env KESTREL_SEED=4343 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
step mutant 120 .gpu-var/mut/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64_flat*:MlaAttentionCuda.Seesaw64Flat*:MlaAttentionCuda.Seesaw64OneWave*' --gtest_brief=1
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*' --gtest_brief=1
f=()
for s in verify4-B8-ctx8192 verify8-B8-ctx8192 verify2-B32-ctx8192 verify4-B32-ctx8192 verify4-B8-ctx32768 verify8-B8-ctx32768 verify2-B32-ctx32768 verify4-B32-ctx32768 decode-B32-ctx8192; do
  f+=(--filter "mla_attention/$s-H96-bf16-fastP"); done
for s in verify2-B32 verify4-B8 verify8-B8; do f+=(--filter "mla_attention_s64flat/$s-ctx16384-H96-bf16"); done
AB_TIMEOUT=90 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/spl2 $N .gpu-var/lead3 -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
g=(); for s in verify4-B8-ctx8192 verify8-B8-ctx8192 verify2-B32-ctx8192; do g+=(--filter "$s-H96-bf16-fastP"); done
timeout 40 .peers/flashmla-bench --grid --reps 10 "${g[@]}" | grep fastP | awk '{print $1, $2}' | tee "$OUT/z/flashmla.txt"
for s in verify4-B8-ctx8192-H96 verify8-B8-ctx8192-H96; do
  timeout 60 .gpu-var/tlead/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter "mla_attention/$s-bf16-fastP" > "$OUT/z/tl-$s.txt" 2>&1
  echo "== timeline with leads $s"; python3 tools/cta_timeline.py "$OUT/z/tl-$s.txt" 2>&1 | head -8
done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "part 1 $(( $(date +%s) - t0 ))s"
mkdir -p "$OUT/src"; OUT=$OUT/src bash tools/prepared/s64-source-stalls-gpu.sh
