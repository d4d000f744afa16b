#!/usr/bin/env bash
# Forty-fifth session, last job: the whole bf16 grid (automatic) beside FlashMLA on main as landed
# (the shared-keys rule, a3ee7f6: .gpu-var/rule), two rounds of each side interleaved, as job 2 ran
# main before it. Carry [".gpu-var/rule", ".peers/flashmla-bench"].
source tools/prepared/job-lib.sh; B=.gpu-var/rule/kestrel-bench
G=(); for n in $($B --list --filter mla_attention/ | awk '$1 ~ /^mla_attention\/.*-bf16-fastP$/ {print $1}'); do G+=(--filter "$n"); done
for r in 1 2; do
  step ours$r 240 $B --reps 10 --no-ceilings --json "$OUT/z/ours$r.json" "${G[@]}"
  step peer$r 240 .peers/flashmla-bench --grid --reps 10
  python3 scripts/flashmla-compare "$OUT/z/ours$r.json" "$OUT/z/peer$r.log" | tail -2
done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
