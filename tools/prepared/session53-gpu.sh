#!/usr/bin/env bash
# The fifty-third session's first job (~8 minutes): session52b-gpu.sh (the landed code proven and
# measured against 6dd8cd7; the H 32 decode's two forms), then, on main as landed (.gpu-var/land),
# issue 3's bf16 goal rows and whole bf16 grid beside FlashMLA (scripts/gpu-mla-goal-rows; FlashMLA
# from scripts/build-peer-flashmla) and the whole fp8 fast grid with the ceilings measured in the
# same run (the memory-bound and compute-bound counts). Carry .gpu-var/s52.tar.xz (build-s52.sh)
# and .peers/flashmla-bench.
set -uo pipefail
OUT=${OUT:-$PWD/out}
bash tools/prepared/session52b-gpu.sh
mv "$OUT/z.tar.xz" "$OUT/s52b.tar.xz"
source tools/prepared/job-lib.sh
goal_rows_and_fp8_grid .gpu-var/land
(cd "$OUT" && tar cJf z.tar.xz z goal && rm -rf z goal)
echo "all $(( $(date +%s) - t0 ))s"
