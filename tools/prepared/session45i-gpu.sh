#!/usr/bin/env bash
# Forty-fifth session: the fp8 grid (fp8 cache and q, P rounded once) on each of its kernels:
# automatic (mla_attention/), v3 (mla_attention_km/), v3 wide (mla_attention_kmw/) and v2
# (mla_attention_v2/) forced, two rounds interleaved, with the ceilings once; main's kernels with the
# bench's new forced families (.gpu-var/fp8k: the bench of c867e83). Carry [".gpu-var/fp8k"].
source tools/prepared/job-lib.sh; B=.gpu-var/fp8k/kestrel-bench
sel() { for n in $($B --list | awk -v p="$1" '$1 ~ p {print $1}'); do printf -- '--filter\n%s\n' "$n"; done; }
mapfile -t A < <(sel '^mla_attention/.*-fp8_e4m3-qfp8-fastP$')
mapfile -t K < <(sel '^mla_attention_km/.*-fp8_e4m3-qfp8-fastP$')
mapfile -t W < <(sel '^mla_attention_kmw/.*-fp8_e4m3-qfp8-fastP$')
mapfile -t V < <(sel '^mla_attention_v2/.*-fp8_e4m3-qfp8-fastP$')
echo "auto ${#A[@]} km ${#K[@]} kmw ${#W[@]} v2 ${#V[@]} args"
for r in 1 2; do
  c=--no-ceilings; [ $r = 1 ] && c=
  step auto$r 240 $B --reps 10 $c --json "$OUT/z/auto$r.json" "${A[@]}"
  step km$r 240 $B --reps 10 --no-ceilings --json "$OUT/z/km$r.json" "${K[@]}"
  step kmw$r 240 $B --reps 10 --no-ceilings --json "$OUT/z/kmw$r.json" "${W[@]}"
  step v2$r 240 $B --reps 10 --no-ceilings --json "$OUT/z/v2$r.json" "${V[@]}"
done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
