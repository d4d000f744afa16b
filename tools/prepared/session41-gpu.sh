#!/usr/bin/env bash
# The forty-first session's third device call (ran in the forty-second, H100: docs/perf.md; its
# A/B then shared $OUT/z/ab with the dyncol step, which replaced main's runs: now ab41, and each
# table is also kept in $OUT/z): v3's split rule with
# the CTA cost measured in the first (kMlaAttentionKeysMCtaCostKeys 512 -> 1200; branch keys-m-splits), the timeline probe at
# verify 8 B128 1k, then the dyncol check (tools/prepared/s64-dyncol-gpu.sh). .gpu-var/spl2 is a build
# of main at ed87d45 (the rule as landed; the branch keys-m-splits at 8b3c4ef is the same code),
# .gpu-var/main one of 9897f96 (before it).
# Carry [".gpu-var/main", ".gpu-var/spl2", ".gpu-var/tl", ".peers/flashmla-bench"].
source "$(dirname "$0")/job-lib.sh"
S2=.gpu-var/spl2
step unit 90 $S2/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMBalancedSplitsAreTaken:MlaAttentionRule.*:MlaAttentionCpu.CudaSplits*' --gtest_brief=1
S="decode-B32-ctx8192-H96 decode-B32-ctx32768-H96 verify2-B32-ctx8192-H96 verify2-B32-ctx32768-H96
   verify4-B32-ctx8192-H96 verify4-B32-ctx32768-H96 verify4-B8-ctx8192-H96 verify4-B8-ctx32768-H96
   verify8-B8-ctx8192-H96 verify8-B8-ctx32768-H96
   decode-B128-ctx8192-H96 verify2-B32-ctx8192-H128 decode-B32-ctx8192-H32 verify4-B128-ctx8192-H32 decode-B128-ctx8192-H128"
f=(); for s in $S; do f+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP"); done
AB_TIMEOUT=150 scripts/gpu-ab "$OUT/z/ab41" ${AB_ROUNDS:-2} .gpu-var/main $S2 -- --reps 10 --no-ceilings "${f[@]}" > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab41" --base main | tee "$OUT/z/ab41.txt"
g=(); for s in decode-B32 verify2-B32 verify4-B32 verify4-B8 verify8-B8; do g+=(--filter "mla_attention_splits/$s-ctx16384-H96"); done
timeout 90 $S2/kestrel-bench --reps 10 "${g[@]}" --json "$OUT/z/splits16k.json" > "$OUT/z/splits16k.log" 2>&1
echo "splits16k rc=$?"
grep -E "^mla_attention_splits.*ctx16384" "$OUT/z/splits16k.log" | awk '{print $1, $4, $5, $13}' | sed 's/-fp8_e4m3-qfp8-fastP//'
# v4's two schedules forced on the one-wave bf16 H 96 shapes at 8k (0.86-0.91x of FlashMLA, whose
# scheduler spreads them over all SMs as the flattened runs would).
h=(); for s in decode-B32 verify2-B32 verify4-B8 verify8-B8; do
  for k in mla_attention_s64flat mla_attention_s64uniform; do h+=(--filter "$k/$s-ctx8192-H96-bf16-fastP"); done
done
timeout 60 $S2/kestrel-bench --reps 10 --no-ceilings "${h[@]}" | grep -E "^mla_attention_s64" | awk '{print $1, $4, $5}' | tee "$OUT/z/s64-schedules.txt"
echo "splits $(( $(date +%s) - t0 ))s"
c=verify8-B128-ctx1024-H128-bf16-fastP
timeout 60 .gpu-var/tl/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter "mla_attention/$c" > "$OUT/z/tl-$c.txt" 2>&1
echo "== timeline $c (rc=$?)"
python3 tools/cta_timeline.py "$OUT/z/tl-$c.txt" 2>&1 | head -40
# (It then ran the dyncol check, tools/prepared/s64-dyncol-gpu.sh, removed since: 8929b78's tree.)
