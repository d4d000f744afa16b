#!/usr/bin/env bash
# Forty-fifth session: the bf16 grid (P rounded once) on each kernel, to refit the automatic
# choice: automatic (mla_attention/), v4 forced (mla_attention_s64/), v2 forced (mla_attention_v2/),
# two rounds interleaved, and FlashMLA once, on main's kernels (.gpu-var/spl2).
# Carry [".gpu-var/spl2", ".peers/flashmla-bench"].
source tools/prepared/job-lib.sh; B=.gpu-var/spl2/kestrel-bench
sel() { for n in $($B --list | awk -v p="$1" '$1 ~ p {print $1}'); do printf -- '--filter\n%s\n' "$n"; done; }
mapfile -t A < <(sel '^mla_attention/.*-bf16-fastP$')
mapfile -t S < <(sel '^mla_attention_s64/.*-bf16-fastP$')
mapfile -t V < <(sel '^mla_attention_v2/.*-bf16-fastP$')
echo "auto ${#A[@]} s64 ${#S[@]} v2 ${#V[@]} args"
for r in 1 2; do
  step auto$r 240 $B --reps 10 --no-ceilings --json "$OUT/z/auto$r.json" "${A[@]}"
  step s64$r 240 $B --reps 10 --no-ceilings --json "$OUT/z/s64$r.json" "${S[@]}"
  step v2$r 240 $B --reps 10 --no-ceilings --json "$OUT/z/v2$r.json" "${V[@]}"
done
step peer 240 .peers/flashmla-bench --grid --reps 10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
