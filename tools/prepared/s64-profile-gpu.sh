#!/usr/bin/env bash
# Where v4's time still goes after the staged epilogue (440520d), in one device call (~4 min),
# prepared in the thirty-sixth session (docs/ops/mla_attention.md, "Open after the thirty-sixth
# session"): the 1k rows are still 0.84-0.96x of FlashMLA at boost clocks, and the pairs cost
# 3-10% more a tile than FlashMLA's. It collects what a session without a GPU can then read:
#   1. the timeline probe (tools/prepared/s64-cta-timeline.patch) at four shapes, read with
#      tools/cta_timeline.py: the item's phases now that Q comes by tensor copy (the thirty-fourth
#      section's table is the baseline: Q load ~5 us an item before, FlashMLA's 0.03);
#   2. Nsight's per-instruction counts (SourceCounters) for v4 and FlashMLA at verify 8 B128 8k
#      H 128, exported as SASS with executed-instruction and stall-sample columns, so that the
#      pair loops can be compared instruction by instruction;
#   3. both kernels' SASS (cuobjdump), for the same comparison without counts.
# Built here first, from the repository root (R):
#   R=$PWD; git worktree add /tmp/tl HEAD && cd /tmp/tl && git apply $R/tools/prepared/s64-cta-timeline.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON && ninja -C build kestrel-bench &&
#     mkdir -p $R/.gpu-var/tl && cp build/kestrel-bench $R/.gpu-var/tl/ && strip $R/.gpu-var/tl/kestrel-bench && cd $R
#   mkdir -p .gpu-var/main && cp build/kestrel-bench .gpu-var/main/   (main's, built as usual)
# then run it with carry [".gpu-var/tl", ".gpu-var/main", ".peers/flashmla-bench"]:
#   bash tools/prepared/s64-profile-gpu.sh
# Each result is written to $OUT as it ends (xz-compressed), the timeline's summary printed.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
tmp=$(mktemp -d)
for s in decode-B128-ctx1024-H128 verify8-B128-ctx1024-H128 verify8-B128-ctx8192-H128 verify4-B8-ctx8192-H96; do
  timeout 60 .gpu-var/tl/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter "mla_attention/$s-bf16-fastP" > "$tmp/tl-$s.txt" 2>&1
  echo "== timeline $s (rc=$?)"
  python3 tools/cta_timeline.py "$tmp/tl-$s.txt" 2>&1 | head -40
  xz -c "$tmp/tl-$s.txt" > "$OUT/tl-$s.txt.xz"
done
case=verify8-B128-ctx8192-H128-bf16-fastP
profile() {  # name, kernel regex, command...
  local name=$1 kernel=$2; shift 2
  timeout 150 ncu --section SourceCounters --section SpeedOfLight -k "regex:$kernel" --launch-skip 2 -c 1 \
    -o "$tmp/$name" -f "$@" > "$tmp/$name.ncu.log" 2>&1
  echo "== ncu $name (rc=$?)"
  ncu --import "$tmp/$name.ncu-rep" --page source --print-source sass --csv 2>&1 | xz > "$OUT/$name-sass-counts.csv.xz"
  ncu --import "$tmp/$name.ncu-rep" --page details 2>&1 | grep -E "Duration|Elapsed Cycles|Executed Ipc|Warp Cycles" | head -8
}
profile ours seesaw64 .gpu-var/main/kestrel-bench --reps 5 --no-ceilings --filter "mla_attention/$case"
profile flashmla flash_fwd_splitkv .peers/flashmla-bench --grid --reps 5 --filter "$case"
for b in .gpu-var/main/kestrel-bench .peers/flashmla-bench; do
  cuobjdump -sass "$b" 2>&1 | xz > "$OUT/$(basename "$(dirname "$b")")-$(basename "$b").sass.xz"
done
ls -la "$OUT"
rm -rf "$tmp"
