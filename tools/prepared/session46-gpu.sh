#!/usr/bin/env bash
# Prepared in the forty-fifth session, not run (no device time left): the grid's slowest bf16
# shapes beside FlashMLA under sustained load. Job 8's short runs put them at 0.82-0.87x of
# FlashMLA; the thirty-fourth session found such shapes at 0.955-0.993x under the 700 W cap (short
# runs favour FlashMLA at the boost clock). Each side ~5 s of launches a shape, interleaved, then
# the same in short runs for the record. Predicted: 0.93-1.00x sustained. Then v4's schedules
# forced over the grid (below).
# Build: ONLY=spl2 bash tools/prepared/build-gpu-var.sh (main). Carry [".gpu-var/spl2", ".peers/flashmla-bench"].
# PARTS (default "sustained flat exact") picks the parts, in that order, for calls under 600 s.
source tools/prepared/job-lib.sh; B=.gpu-var/spl2/kestrel-bench
PARTS=${PARTS:-sustained flat exact}
has() { [[ " $PARTS " == *" $1 "* ]]; }
has sustained && for sr in verify8-B128-ctx8192-H128:1400 verify8-B128-ctx1024-H96:10000 verify4-B128-ctx8192-H128:2800 verify2-B128-ctx32768-H128:1350; do
  s=${sr%%:*} n=${sr##*:}
  echo "$s:"
  scripts/gpu-sustained "$OUT/z/s" "ours-$s" -- $B --reps "$n" --no-ceilings --filter "mla_attention/$s-bf16-fastP" | tail -1
  grep -E "^mla_attention" "$OUT/z/s/ours-$s.log" | awk '{print "   ours", $5, "us median"}'
  scripts/gpu-sustained "$OUT/z/s" "flash-$s" -- .peers/flashmla-bench --grid --reps "$n" --filter "$s-bf16-fastP" | tail -1
  grep -E "^flashmla" "$OUT/z/s/flash-$s.log" | awk '{print "   FlashMLA", $2, "us median"}'
  rm -f "$OUT"/z/s/*.smi
done
# Then v4's two schedules forced over the grid (mla_attention_s64flat/, mla_attention_s64uniform/)
# beside the automatic choice, two rounds: the check of mla_attention_seesaw64_flat_wins, as the
# forty-fifth session's job 5 checked the kernel rule (scripts/kernel-grid-compare reads them, below).
sel() { for n in $($B --list | awk -v p="$1" '$1 ~ p {print $1}'); do printf -- '--filter\n%s\n' "$n"; done; }
# families ROUND NAME=REGEX...: each family's cases (REGEX over the case names) as $OUT/z/NAME<ROUND>.json
families() {
  local r=$1 pair name; shift
  for pair in "$@"; do
    name=${pair%%=*}
    mapfile -t F < <(sel "${pair#*=}")
    step "$name$r" 240 $B --reps 10 --no-ceilings --json "$OUT/z/$name$r.json" "${F[@]}"
  done
}
has flat && for r in 1 2; do
  families $r auto='^mla_attention/.*-bf16-fastP$' flat='^mla_attention_s64flat/.*-bf16-fastP$' uniform='^mla_attention_s64uniform/.*-bf16-fastP$'
done
# And the fp8 grid at the exact precision on automatic, v3 and v2 (the bench since 6728ab1; build
# main): whether the exact precision's rule (v2 below 24576 tile-keys) is stale as the fast one's was.
has exact && for r in 1 2; do
  families $r eauto='^mla_attention/.*-fp8_e4m3-qfp8$' ekm='^mla_attention_km/.*-fp8_e4m3-qfp8$' ev2='^mla_attention_v2/.*-fp8_e4m3-qfp8$'
done
has flat && scripts/kernel-grid-compare "$OUT"/z/auto?.json "$OUT"/z/flat?.json "$OUT"/z/uniform?.json | tail -20
has exact && scripts/kernel-grid-compare "$OUT"/z/eauto?.json "$OUT"/z/ekm?.json "$OUT"/z/ev2?.json --suffix=-fp8_e4m3-qfp8 | tail -20
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
