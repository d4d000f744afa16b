#!/usr/bin/env bash
# Forty-fourth session, fourth job: v4's partial rows written with an L2 evict-last policy and read
# by the combine kernels with streaming loads (.gpu-var/keep: branch keep-partials), or only the
# writes' policy (.gpu-var/keepw), against main 7decf83 (.gpu-var/spl2). ncu (cache control none)
# put the warp-per-row combine after the flattened runs at verify 4 B8 8k H 96 at 9.9-12.4 us with
# DRAM throughput at 37-54%: the 17 MB of partials it reads come partly from DRAM. Ran (job 4);
# landed as 00dd66c and 1d1acbd.
# Carry [".gpu-var/spl2", ".gpu-var/keep"]. (.gpu-var/keepw, the writes' policy alone, ran beside them in job 6.)
source tools/prepared/job-lib.sh; N=.gpu-var/keep
f=()
for s in verify4-B8-ctx8192-H96-bf16-fastP verify8-B8-ctx8192-H96-bf16-fastP verify2-B32-ctx8192-H96-bf16-fastP decode-B8-ctx32768-H96-bf16-fastP \
         verify4-B8-ctx32768-H96-bf16-fastP decode-B32-ctx32768-H32-fp8_e4m3-qfp8-fastP decode-B32-ctx32768-H32-bf16-fastP decode-B8-ctx8192-H32-bf16-fastP \
         decode-B1-ctx32768-H32-bf16-fastP decode-B128-ctx8192-H32-bf16-fastP; do
  f+=(--filter "mla_attention/$s"); done
AB_TIMEOUT=90 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
for b in spl2 keep; do
  timeout 60 ncu --cache-control none --section SpeedOfLight --section MemoryWorkloadAnalysis -k "regex:combine" --launch-skip 2 -c 1 \
    .gpu-var/$b/kestrel-bench --reps 5 --no-ceilings --filter "mla_attention/verify4-B8-ctx8192-H96-bf16-fastP" > "$OUT/z/ncu-$b.txt" 2>&1
  echo "$b: $(grep -E "Duration|L2 Hit Rate|DRAM Throughput" "$OUT/z/ncu-$b.txt" | awk '{print $1, $2, $NF}' | tr '\n' ' ')"
done
step unit 150 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionCuda.Combine*:MlaAttentionRule.*' --gtest_brief=1
step matrix 200 env KESTREL_SEED=4446 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|PASSED" "$OUT"/z/{unit,matrix}.log | head -20
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
