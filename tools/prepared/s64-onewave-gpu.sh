#!/usr/bin/env bash
# Where v4's time goes on the one-wave H 96 shapes that now take the flattened runs (forty-second
# session: verify 4 / 8 B8 and verify 2 B32 8k, 0.89-0.93x of FlashMLA in the same job; at the same
# decomposition the thirty-fourth's Nsight put v4's attention kernel at 1.09-1.18x FlashMLA's).
# Prepared in the forty-second session; ran in the forty-third (perf.md's forty-third section,
# job 1). One lean device call (~2 min):
#   1. the timeline probe (s64-cta-timeline.patch) at verify 8 / 4 B8 8k H 96: each CTA holds one
#      run of two segments here, so the first item's cost (4.9 us to Q, o out 6.2-6.6 us at
#      verify 8 B128 1k) is most of the gap if it repeats;
#   2. Nsight's warp-state stall reasons and the duration, v4 against FlashMLA at verify 4 B8 8k
#      H 96 (one launch each, after two), and each kernel's duration (attention and combine) at the
#      three shapes.
# Predicted: if the first item's extra time is instruction fetch (its epilogue and prologue code
# run once a CTA here), v4's `no_instruction` stalls are a visible share (> 5%) and FlashMLA's are
# not (measured here without a GPU: v4's four kernels are 204-214 KB of SASS each, FlashMLA's
# splitkv kernel 120 KB: the .text sections of `nvcc -cubin` at sm_90a, read with readelf); if it is the cold Q / KV loads, `long_scoreboard` grows instead. Either way the pairs' share
# against FlashMLA's says how much is the per-tile cost.
# Built here first: `ONLY="spl2 tl" bash tools/prepared/build-gpu-var.sh` and
# `scripts/build-peer-flashmla` (its header). Carry [".gpu-var/spl2", ".gpu-var/tl", ".peers/flashmla-bench"].
source "$(dirname "$0")/job-lib.sh"
for s in verify8-B8-ctx8192-H96 verify4-B8-ctx8192-H96; do
  timeout 60 .gpu-var/tl/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter "mla_attention/$s-bf16-fastP" > "$OUT/z/tl-$s.txt" 2>&1
  echo "== timeline $s (rc=$?)"
  python3 tools/cta_timeline.py "$OUT/z/tl-$s.txt" 2>&1 | head -16
done
c=verify4-B8-ctx8192-H96-bf16-fastP
stalls() {  # name, kernel regex, command...: one launch (after two), its report kept in $OUT/z
  step "ncu-$1" 120 ncu --section WarpStateStats --section SpeedOfLight -k "regex:$2" --launch-skip 2 -c 1 -o "$OUT/z/$1" -f "${@:3}"
  ncu --import "$OUT/z/$1.ncu-rep" --page raw --csv 2>/dev/null > "$OUT/z/$1-raw.csv"
  ncu --import "$OUT/z/$1.ncu-rep" --page details 2>&1 | grep -E "Duration|Warp Cycles Per Issued|Stall" | head -12
}
durations() {  # who, command...: each kernel's time over four launches (after four)
  local who=$1; shift
  timeout 90 ncu --print-kernel-base function --metrics gpu__time_duration.sum --launch-skip 4 -c 4 "$@" 2>&1 |
    grep -E "^  [a-z_].*\(|gpu__time_duration" | paste - - | awk -v w="$who" '{print w, $1, $(NF)}'
}
stalls ours seesaw64 .gpu-var/spl2/kestrel-bench --reps 5 --no-ceilings --filter "mla_attention/$c"
stalls flashmla flash_fwd_splitkv .peers/flashmla-bench --grid --reps 5 --filter "$c"
for s in verify4-B8-ctx8192-H96 verify8-B8-ctx8192-H96 verify2-B32-ctx8192-H96; do
  durations ours .gpu-var/spl2/kestrel-bench --reps 5 --no-ceilings --filter "mla_attention/$s-bf16-fastP"
  durations flashmla .peers/flashmla-bench --grid --reps 5 --filter "$s-bf16-fastP"
done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
