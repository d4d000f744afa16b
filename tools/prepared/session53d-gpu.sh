#!/usr/bin/env bash
# The fifty-third session's fourth job (~2 minutes; more on an H200): where the 32-row form's
# spills lie in SASS (main's rows, its partial boxes, km-o32's o boxes: tools/sass_spills.py) and
# how the memory-bound fp8 H 32 shapes below 90% of copy split their time between the attention
# kernel and the split combine (ncu, one kernel at a time, clocks left alone). On an H200 also
# the bf16 goal rows beside FlashMLA and the fp8 grid with the ceilings (as session53b-gpu.sh).
# Carry .gpu-var/s53.tar.xz, .gpu-var/s53c.tar.xz, .peers/flashmla-bench.
source tools/prepared/job-lib.sh
tar xJf .gpu-var/s53.tar.xz -C .gpu-var && tar xJf .gpu-var/s53c.tar.xz -C .gpu-var
cuobjdump --dump-sass .gpu-var/o32/kestrel-bench > "$OUT/z/o32.sass" 2>&1
python3 tools/sass_spills.py mla_attention_keys_m_kernel < "$OUT/z/o32.sass"
xz -T4 "$OUT/z/o32.sass"
B=.gpu-var/new/kestrel-bench
for sh in decode-B32-ctx8192-H32 decode-B8-ctx32768-H32 verify2-B32-ctx32768-H32 decode-B128-ctx1024-H32 decode-B128-ctx8192-H32; do
  timeout 120 ncu --clock-control none -c 40 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum \
    --csv "$B" --reps 2 --warmup 1 --no-ceilings --filter "mla_attention/$sh-fp8_e4m3-qfp8-fastP" > "$OUT/z/ncu-$sh.csv" 2> "$OUT/z/ncu-$sh.err"
  echo "== $sh (rc $?)"
  python3 - "$OUT/z/ncu-$sh.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("  no ncu rows"); sys.exit()
h = rows[0]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
agg = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows[1:]:
    agg[r[ki][:70]][r[mi]].append(float(r[vi].replace(",", "")))
for k, m in agg.items():
    print("  " + k, "; ".join(f"{n} {sorted(v)[len(v) // 2]:.4g} (n {len(v)})" for n, v in m.items()))
PY
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  goal_rows_and_fp8_grid .gpu-var/new
fi
(cd "$OUT" && tar cJf z.tar.xz z $( [ -d goal ] && echo goal ) && rm -rf z goal)
echo "all $(( $(date +%s) - t0 ))s"
