#!/usr/bin/env bash
# The next GPU step for tools/prepared/s64-oboxes.patch (thirty-seventh session, perf.md's
# thirty-seventh section), one device call (~6 min). The patch sends a whole row tile's o out as
# 4 boxes a warpgroup by tensor copy instead of 128 row copies; its tests passed on the H100 and
# it gained 1.02-1.06x on the 1k rows, but decode B128 8k H 128 (a goal row) measured 0.983-0.990x
# in three short jobs and 0.984x under the power cap, while Nsight at the locked clock counted the
# same cycles (783-788k against 775-785k). Question: is the 8k loss the box path at run time or
# the changed code (layout)? `rule` takes the boxes only for row tiles of at most 32 KV tiles, so
# at 8k it runs main's row copies from the patch's code.
# Built here first, from the repository root (R); the second sed puts the patch's code back for
# the timeline probe:
#   R=$PWD; git worktree add --detach /tmp/ob HEAD && cd /tmp/ob && git apply $R/tools/prepared/s64-oboxes.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON && ninja -C build kestrel-tests kestrel-bench &&
#     mkdir -p $R/.gpu-var/new $R/.gpu-var/rule $R/.gpu-var/obtl &&
#     cp build/kestrel-tests build/kestrel-bench $R/.gpu-var/new/ &&
#     sed -i 's/tp.rows_here == kRows;/tp.rows_here == kRows \&\& tp.ntiles <= 32;/' src/ops/cuda/mla_attention_seesaw64.cu &&
#     ninja -C build kestrel-bench && cp build/kestrel-bench $R/.gpu-var/rule/ &&
#     sed -i 's/ \&\& tp.ntiles <= 32;/;/' src/ops/cuda/mla_attention_seesaw64.cu &&
#     git apply $R/tools/prepared/s64-oboxes-timeline.patch && ninja -C build kestrel-bench &&
#     cp build/kestrel-bench $R/.gpu-var/obtl/ && strip $R/.gpu-var/*/kestrel-* && cd $R
#   mkdir -p .gpu-var/main && cp build/kestrel-bench build/kestrel-tests .gpu-var/main/   (main's, built as usual)
# then run `bash tools/prepared/s64-oboxes-gpu.sh` (tracked files travel) with carry
# [".gpu-var/main", ".gpu-var/new", ".gpu-var/rule", ".gpu-var/obtl", ".peers/flashmla-bench"].
source "$(dirname "$0")/job-lib.sh"
# 1. Short runs, three builds (3 rounds, forward and back).
S="decode-B128-ctx8192-H128 verify8-B128-ctx8192-H96 decode-B128-ctx4096-H128 decode-B128-ctx1024-H128 verify8-B128-ctx1024-H128 verify4-B128-ctx1024-H96 verify4-B8-ctx8192-H96"
f=(); for s in $S; do f+=(--filter "mla_attention/$s-bf16-fastP"); done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/main .gpu-var/new .gpu-var/rule -- --reps 20 --no-ceilings "${f[@]}" > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main
g=(); for s in $S; do g+=(--filter "$s-bf16-fastP"); done
[ -x .peers/flashmla-bench ] && timeout 60 .peers/flashmla-bench --grid --reps 20 "${g[@]}" | grep fastP | awk '{print $1, $2}'
# 2. Under the power cap: decode 8k and verify 8 1k, two rounds of the three builds.
for r in 1 2; do
  for v in main new rule; do
    for c in decode-B128-ctx8192-H128:8000 verify8-B128-ctx1024-H128:6000; do
      scripts/gpu-sustained "$OUT/z/s" "$v-${c%%:*}-$r" -- .gpu-var/$v/kestrel-bench --reps "${c##*:}" --no-ceilings \
        --filter "mla_attention/${c%%:*}-bf16-fastP" | tail -1
      grep -E "^mla_attention" "$OUT/z/s/$v-${c%%:*}-$r.log" | awk '{print "   ", $1, "median", $5, "min", $6}'
    done
  done
done
rm -f "$OUT"/z/s/*.smi
# 3. Nsight at decode 8k: cycles of the three at the locked clock with L2 flushed (as job 5,
# where the patch counted main's cycles), then at the running clock with L2 as the last launch left
# it (as the timed runs), which is where they differ if the loss is the clock or L2's state; then
# the timed runs again with graph replay (no host work between launches).
M=gpu__time_duration.sum,sm__cycles_elapsed.max,smsp__inst_executed.sum
for mode in locked free; do
  extra=(); [ $mode = free ] && extra=(--cache-control none --clock-control none)
  for v in main new rule; do
    timeout 90 ncu "${extra[@]}" --metrics $M -k regex:seesaw64 --launch-skip 2 -c 3 .gpu-var/$v/kestrel-bench --reps 5 \
      --no-ceilings --filter mla_attention/decode-B128-ctx8192-H128-bf16-fastP > "$OUT/z/ncu-$mode-$v.log" 2>&1
    echo "ncu $mode $v rc=$?: $(grep -E 'gpu__time_duration|sm__cycles_elapsed' "$OUT/z/ncu-$mode-$v.log" | awk '{print $1, $NF}' | tr '\n' ' ')"
  done
done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/abg" 2 .gpu-var/main .gpu-var/new .gpu-var/rule -- --reps 20 --timing graph --no-ceilings \
  --filter mla_attention/decode-B128-ctx8192-H128-bf16-fastP --filter mla_attention/verify8-B128-ctx1024-H128-bf16-fastP > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/abg" --base main
# 4. The boxes kernel's item phases at decode 8k and verify 8 1k (tools/cta_timeline.py).
for s in decode-B128-ctx8192-H128 verify8-B128-ctx1024-H128; do
  timeout 60 .gpu-var/obtl/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter "mla_attention/$s-bf16-fastP" > "$OUT/z/tl-$s.txt" 2>&1
  echo "== timeline $s"; python3 tools/cta_timeline.py "$OUT/z/tl-$s.txt" 2>&1 | sed -n '1,7p'
  xz "$OUT/z/tl-$s.txt"
done
# 5. What landing needs besides the tests that passed (perf.md's thirty-seventh section): memcheck.
T=.gpu-var/new/kestrel-tests
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $T \
  --gtest_filter='MlaAttentionCuda.Seesaw64*:cuda/*mla_attention_decode_B140_H*' --gtest_brief=1
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
