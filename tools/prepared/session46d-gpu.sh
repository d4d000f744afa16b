source tools/prepared/job-lib.sh
for s in verify8-B1-ctx1024-H128 decode-B1-ctx1024-H128 verify8-B8-ctx1024-H128 verify8-B1-ctx8192-H128; do
  step "tl-$s" 120 .gpu-var/kmtl/kestrel-bench --reps 2 --warmup 1 --no-ceilings --filter "mla_attention_kmw/$s-fp8_e4m3-qfp8-fastP"
  echo "== $s"; python3 tools/km_timeline.py "$OUT/z/tl-$s.log" | grep -vE "producer|a tile"
  xz -T4 "$OUT/z/tl-$s.log"
done
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
