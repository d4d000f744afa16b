#!/usr/bin/env bash
# Forty-fourth session, third job: the warp-per-row combine held to 6 CTAs an SM (.gpu-var/cr6:
# __launch_bounds__(128, 6), 80 registers, 76 bytes of spills) or 8 (.gpu-var/cr8: 64 registers,
# 232 bytes), against main 7decf83's 96 registers and 5 CTAs (.gpu-var/spl2): at verify 4 B8 8k
# H 96 its 768 CTAs took two waves (ncu: 9.86 us, achieved occupancy 27%, block limit registers 5).
# Carry [".gpu-var/spl2", ".gpu-var/cr6", ".gpu-var/cr8"].
source tools/prepared/job-lib.sh; N=.gpu-var/cr6
step unit 150 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.*:MlaAttentionRule.*' --gtest_brief=1
step matrix 200 env KESTREL_SEED=4446 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|PASSED" "$OUT"/z/{unit,matrix}.log | head -20
f=()
for s in verify4-B8-ctx8192-H96-bf16-fastP verify8-B8-ctx8192-H96-bf16-fastP verify2-B32-ctx8192-H96-bf16-fastP decode-B8-ctx32768-H96-bf16-fastP \
         verify4-B8-ctx32768-H96-bf16-fastP decode-B32-ctx32768-H32-fp8_e4m3-qfp8-fastP decode-B32-ctx32768-H32-bf16-fastP decode-B8-ctx8192-H32-bf16-fastP \
         decode-B1-ctx32768-H32-bf16-fastP decode-B128-ctx8192-H32-bf16-fastP; do
  f+=(--filter "mla_attention/$s"); done
AB_TIMEOUT=90 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/spl2 $N .gpu-var/cr8 -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
for b in spl2 cr6 cr8; do
  timeout 60 ncu --cache-control none --section SpeedOfLight --section Occupancy -k "regex:combine" --launch-skip 2 -c 1 \
    .gpu-var/$b/kestrel-bench --reps 5 --no-ceilings --filter "mla_attention/verify4-B8-ctx8192-H96-bf16-fastP" > "$OUT/z/ncu-$b.txt" 2>&1
  echo "$b: $(grep -E "Duration|Achieved Occupancy|DRAM Throughput" "$OUT/z/ncu-$b.txt" | awk '{print $1, $2, $NF}' | tr '\n' ' ')"
done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
