#!/usr/bin/env bash
# Forty-fifth session: the whole bf16 grid beside FlashMLA and the whole fp8 grid with the ceilings,
# on main's kernels (.gpu-var/spl2 = 1d1acbd's CUDA code, the same as main at 0ab31b8). The last
# whole grids ran in the thirty-third session (2320078); everything since moved parts of them.
# Two rounds of each side, interleaved (the long shapes move 5-10% between single runs).
# Carry [".gpu-var/spl2", ".peers/flashmla-bench"].
source tools/prepared/job-lib.sh; B=.gpu-var/spl2/kestrel-bench
G=(); for n in $($B --list --filter mla_attention/ | awk '$1 ~ /^mla_attention\/.*-bf16-fastP$/ {print $1}'); do G+=(--filter "$n"); done
F=(); for n in $($B --list --filter mla_attention/ | awk '$1 ~ /^mla_attention\/.*-fp8_e4m3-qfp8-fastP$/ {print $1}'); do F+=(--filter "$n"); done
echo "bf16 grid ${#G[@]} args, fp8 grid ${#F[@]} args"
for r in 1 2; do
  step ours$r 240 $B --reps 10 --no-ceilings --json "$OUT/z/ours$r.json" "${G[@]}"
  step peer$r 240 .peers/flashmla-bench --grid --reps 10
  python3 scripts/flashmla-compare "$OUT/z/ours$r.json" "$OUT/z/peer$r.log" | tail -2
done
step fp8 300 $B --reps 10 --json "$OUT/z/fp8.json" "${F[@]}"
grep -E "copy|cuBLAS|ceiling" "$OUT/z/fp8.log" | head -5
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
