#!/usr/bin/env bash
# Where v4's tensor pipe idles against FlashMLA's (forty-third session). At verify 4 B8 8k H 96 the
# forty-third's Nsight counted the same tensor-pipe cycles for both (~101k a SM) but 56.7% against
# 66.3% of the elapsed cycles active, and stall reasons per issue of long_scoreboard 3.51 / 2.06,
# gmma 0.70 / 0.12, no_instruction 0.65 / 0.35. This job takes Nsight's per-instruction samples
# (SourceCounters) of one launch each and exports the SASS with its stall columns, to read here.
# Carry [".gpu-var/spl2", ".peers/flashmla-bench"]. ~1 min on the device.
source "$(dirname "$0")/job-lib.sh"
c=${SHAPE:-verify4-B8-ctx8192-H96}-bf16-fastP
src() {  # name, kernel regex, command...
  step "ncu-$1" 150 ncu --section WarpStateStats --section SourceCounters --section InstructionStats \
    -k "regex:$2" --launch-skip 2 -c 1 -o "$OUT/z/$1" -f "${@:3}"
  ncu --import "$OUT/z/$1.ncu-rep" --page source --csv --print-source sass > "$OUT/z/$1-sass.csv" 2> "$OUT/z/$1-sass.err"
  echo "$1: $(wc -l < "$OUT/z/$1-sass.csv") SASS lines"
}
src ours seesaw64 .gpu-var/spl2/kestrel-bench --reps 5 --no-ceilings --filter "mla_attention/$c"
src flashmla flash_fwd_splitkv .peers/flashmla-bench --grid --reps 5 --filter "$c"
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
