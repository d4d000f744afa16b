#!/usr/bin/env bash
# Forty-fourth session, second job: the partial rows in 16-byte stores (branch stg128: a quad's
# neighbours swap a column pair, 32 STG.128 a thread for 64 STG.64; ptxas: 348-428 bytes of spill
# stores against main's 172-192) against main 7decf83, its tests; and what the combine costs after
# the flattened runs at verify 4 B8 8k H 96 (ncu on the combine alone, with and without a cache
# flush, FlashMLA's beside it; nsys's trace of the pair in a graph, if nsys is there).
# Carry [".gpu-var/spl2", ".gpu-var/stg128", ".peers/flashmla-bench"].
source tools/prepared/job-lib.sh; N=.gpu-var/stg128
step unit 150 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.*:MlaAttentionRule.*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4445 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
grep -E "FAILED|PASSED" "$OUT"/z/{unit,matrix}.log | head -20
f=()
for s in verify4-B8-ctx8192 verify8-B8-ctx8192 verify2-B32-ctx8192 verify4-B8-ctx32768 decode-B8-ctx32768 decode-B32-ctx8192 verify4-B32-ctx8192; do
  f+=(--filter "mla_attention/$s-H96-bf16-fastP"); done
f+=(--filter "mla_attention/decode-B128-ctx8192-H128-bf16-fastP")
AB_TIMEOUT=90 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
c=verify4-B8-ctx8192-H96-bf16-fastP
for cc in all none; do
  timeout 60 ncu --cache-control $cc --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    -k "regex:combine" --launch-skip 2 -c 1 .gpu-var/spl2/kestrel-bench --reps 5 --no-ceilings --filter "mla_attention/$c" > "$OUT/z/ncu-comb-$cc.txt" 2>&1
  echo "combine, cache $cc:"; grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per|Grid Size|Theoretical Occupancy|Block Limit Registers|L2 Hit|Memory Throughput" "$OUT/z/ncu-comb-$cc.txt" | head -14
done
timeout 60 ncu --cache-control none --section SpeedOfLight -k "regex:combine|Combine" --launch-skip 2 -c 1 .peers/flashmla-bench --grid --reps 5 --filter "$c" > "$OUT/z/ncu-fcomb.txt" 2>&1
echo "FlashMLA's combine, cache none:"; grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput" "$OUT/z/ncu-fcomb.txt" | head -6
if command -v nsys >/dev/null; then
  timeout 90 nsys profile -o "$OUT/z/trace" --force-overwrite true .gpu-var/spl2/kestrel-bench --reps 10 --timing events --no-ceilings --filter "mla_attention/$c" > "$OUT/z/nsys.log" 2>&1
  timeout 60 nsys stats --report cuda_gpu_trace --format csv "$OUT/z/trace.nsys-rep" > "$OUT/z/trace.csv" 2>/dev/null
  grep -E "seesaw64|combine" "$OUT/z/trace.csv" | tail -6 | cut -c1-200
else echo "no nsys"; fi
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*' --gtest_brief=1
(cd "$OUT" && rm -f z/*.nsys-rep z/*.sqlite && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
