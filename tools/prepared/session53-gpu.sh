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
OUT=$OUT/goal timeout 420 scripts/gpu-mla-goal-rows .gpu-var/land > "$OUT/z/goal.log" 2>&1
echo "goal rc=$? $(( $(date +%s) - t0 ))s"
grep -vE "^(mla_attention|decode-|verify|  )" "$OUT/z/goal.log" | grep -vE "^$" | cut -c1-200 | tail -60
B=.gpu-var/land/kestrel-bench
F=(); for n in $($B --list --filter mla_attention/ | awk '$1 ~ /^mla_attention\/.*-fp8_e4m3-qfp8-fastP$/ {print $1}'); do F+=(--filter "$n"); done
step fp8grid 300 $B --reps 10 --json "$OUT/z/fp8grid.json" "${F[@]}"
grep -E "copy|cuBLAS|ceiling" "$OUT/z/fp8grid.log" | head -5
(cd "$OUT" && tar cJf z.tar.xz z goal && rm -rf z goal)
echo "all $(( $(date +%s) - t0 ))s"
