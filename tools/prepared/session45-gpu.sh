#!/usr/bin/env bash
# Prepared in the forty-fourth session, not run (no device time left): v4 with its first item's
# plan (q_start, seq_lens) and first block-table entry prefetched into L2 while thread 0 sets up
# the barriers (tools/prepared/s64-first-prefetch.patch; branch s64-first-prefetch), against main.
# Those loads head the chain to a CTA's first copies (plan -> page -> tile): the thirty-seventh
# session's timeline put Q's arrival 4.9 us after a first item's start at verify 8 1k. Predicted:
# ~0.3-0.6 us a launch, so 1-2% on the 1k shapes (30-45 us), <= 0.5% at 8k+. ptxas: spills 172 /
# 204 bytes (the o-box kernels 12 more than main's 192).
# Built here first (main's bench and tests as spl2, the patch's as pre):
#   ONLY="spl2 branch:s64-first-prefetch" bash tools/prepared/build-gpu-var.sh && mv .gpu-var/s64-first-prefetch .gpu-var/pre
# and the timeline probe on each (tools/prepared/s64-cta-timeline.patch applied: .gpu-var/tl on main,
# .gpu-var/tlpre on the patch; built in the forty-fourth session).
# Carry [".gpu-var/spl2", ".gpu-var/pre", ".gpu-var/tl", ".gpu-var/tlpre"]. ~2-3 min on the device.
source tools/prepared/job-lib.sh; N=.gpu-var/pre
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*' --gtest_brief=1
step matrix 120 env KESTREL_SEED=4545 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
step unit 150 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionRule.*' --gtest_brief=1
f=()
for s in verify8-B128-ctx1024-H96 verify4-B32-ctx1024-H96 decode-B128-ctx1024-H128 verify4-B8-ctx8192-H96 verify8-B8-ctx8192-H96 \
         decode-B8-ctx32768-H96 decode-B128-ctx8192-H128; do f+=(--filter "mla_attention/$s-bf16-fastP"); done
for s in verify8-B128-ctx1024-H96 decode-B128-ctx1024-H128; do f+=(--filter "mla_attention_s64/$s-bf16-fastP"); done  # (v4 forced, whatever the rule takes)
AB_TIMEOUT=90 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
# The timeline probe (s64-cta-timeline.patch) on main (.gpu-var/tl) and on the patch (.gpu-var/tlpre):
# the first item's start -> Q and -> first QKs, at a 1k and a one-wave 8k shape.
for b in tl tlpre; do for c in verify8-B128-ctx1024-H96 verify4-B8-ctx8192-H96; do
  timeout 60 .gpu-var/$b/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter "mla_attention/$c-bf16-fastP" > "$OUT/z/$b-$c.txt" 2>&1
  echo "$b $c:"; python3 tools/cta_timeline.py "$OUT/z/$b-$c.txt" 2>&1 | head -8
done; done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
