#!/usr/bin/env bash
# Prepared in the forty-sixth session, not run (its device time went to machines that did not
# start). Five things, in the order of their worth:
# (1) main as landed (.gpu-var/main46b, 88f42ef: v3 wide's Q by tensor copy for every call, o boxes
#     for one split of at most 2048 keys) against main46 (292b818, before both) on the 8k / 32k
#     one-split wide shapes, where the landed form runs Q by copy without the boxes: not measured
#     (predicted 1.00-1.005x), and on the 1k shapes again (job 6: 1.055-1.087x with 2 rounds).
# (2) Branch km-next (.gpu-var/next): the wide form's boxes staged from two bases a thread (ptxas
#     shows no spills in the boxes' instantiation, which had 4 bytes and ran its tile loop ~2%
#     slower, 1.75 against 1.71 us a tile; predicted 1.01-1.02x over main46b at 1k) and the fast
#     32-row form's Q by tensor copy too (the H 32 decode with work enough; predicted 1.02-1.05x
#     at B 8 / 32, ~1.01x at B 128): its tests (KeysMQByTensorCopy* covers both forms), matrix,
#     sanitizers, the mutant cuda_mla_keys_m_q_chunks (.gpu-var/next-mut: must fail), and in the
#     same A/B. Branch km-obox-all (.gpu-var/oall, measurement only: its CPU rule test fails there)
#     takes the boxes for every one-split call: whether 8k then gains.
# (3) The timeline of km-next (.gpu-var/nexttl) at verify 8 B128 1k / 8k H 128 (a tile 1.71 us?).
# (4) The whole fp8 grid on main46b with the ceilings (fast, fp8 q): the goal counts since the 45th
#     (memory-bound 4 of 24 >= 90% of copy, compute-bound 50 of 125 >= 70% of the GEMM rate).
# (5) The 32-row form's timeline at the memory-bound H 32 decodes, main (.gpu-var/maintl) and
#     km-next (Q by copy).
# Build here: main46 = 292b818's bench, main46b = main 88f42ef's (the same kernels as 4338d84),
# next = km-next's bench and tests, next-mut = its tests with cuda_mla_keys_m_q_chunks.patch, oall
# = km-obox-all's bench, nexttl / maintl = tools/prepared/km-cta-timeline.patch (main's) on km-next
# (one conflict: keep both the row tile's start and the stamps) / on main (`git worktree` + ninja,
# stripped; the forty-sixth session built them all into .gpu-var). Carry [".gpu-var/main46",
# ".gpu-var/main46b", ".gpu-var/next", ".gpu-var/next-mut", ".gpu-var/oall", ".gpu-var/nexttl",
# ".gpu-var/maintl"] (~53 MB). About 6-7 minutes of device time.
source tools/prepared/job-lib.sh; N=.gpu-var/next
# The forty-seventh session carries the builds packed (.gpu-var/s47.tar.xz, 6.5 MB for 68 MB of
# binaries) and adds main47 (b35493e, main as it stands: the shared row-map encoder, never run).
# PART=1: correctness and the A/B; PART=2: the timelines and the fp8 grid (each fits one call).
[ -f .gpu-var/s47.tar.xz ] && [ ! -d .gpu-var/main47 ] && tar xJf .gpu-var/s47.tar.xz -C .gpu-var
if [ "${PART:-1}" = 1 ]; then
step main-unit 150 .gpu-var/main47/kestrel-tests --gtest_filter='MlaAttention*:MlaStepBuffers*' --gtest_brief=1
step main-matrix 200 env KESTREL_SEED=4702 .gpu-var/main47/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/main-unit.log" "$OUT/z/main-matrix.log" | head -20
step unit 120 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*:MlaAttentionCuda.KeysM*:MlaAttentionRule.*:MlaAttentionKeysMLayout.*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4701 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/unit.log" "$OUT/z/matrix.log" | head -20
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*:MlaAttentionCuda.KeysMQ*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*:MlaAttentionCuda.KeysMQ*' --gtest_brief=1
step mutant 120 .gpu-var/next-mut/kestrel-tests --gtest_filter='cuda/*mla_attention*km*:MlaAttentionCuda.KeysM*:MlaAttentionCuda.WideKeysM*' --gtest_brief=1
grep -c "^\[  FAILED  \] .*(" "$OUT/z/mutant.log"
f=()
for s in verify8-B128-ctx1024-H128 verify4-B128-ctx1024-H128 decode-B128-ctx1024-H128 verify8-B32-ctx1024-H128 verify8-B128-ctx1024-H96 \
         decode-B128-ctx8192-H128 verify8-B128-ctx8192-H128 verify4-B128-ctx8192-H128 verify2-B128-ctx8192-H128 verify4-B128-ctx8192-H32 \
         verify8-B32-ctx8192-H128 decode-B128-ctx32768-H128 verify2-B128-ctx32768-H128 decode-B32-ctx32768-H128 decode-B128-ctx8192-H32 \
         decode-B32-ctx8192-H32 decode-B8-ctx32768-H32 decode-B32-ctx32768-H32 decode-B8-ctx8192-H32 decode-B128-ctx32768-H32; do
  f+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP")
done
AB_TIMEOUT=200 scripts/gpu-ab "$OUT/z/ab" ${AB_ROUNDS:-3} .gpu-var/main46 .gpu-var/main46b .gpu-var/next .gpu-var/oall -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main46 | tee "$OUT/z/ab.txt"
python3 scripts/bench-compare "$OUT/z/ab" --base main46b | tail -n +2 | head -20
fi
if [ "${PART:-1}" = 2 ]; then
# Part 1 on an H100 read main46b 0.95x of main46 at verify 2 B128 32k H 128 (runs 3310-3492 against
# 3497-3653 us) where Q by copy cannot matter (512 tiles a row tile): again, main46 against main47.
g=(); for s in verify2-B128-ctx32768-H128 decode-B128-ctx32768-H128 verify8-B128-ctx8192-H128 verify4-B128-ctx8192-H128; do
  g+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP"); done
AB_TIMEOUT=200 scripts/gpu-ab "$OUT/z/ab32" ${AB32_ROUNDS:-4} .gpu-var/main46 .gpu-var/main47 -- --reps 10 --no-ceilings "${g[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab32" --base main46 | tee "$OUT/z/ab32.txt"
for s in verify8-B128-ctx1024-H128 verify8-B128-ctx8192-H128; do
  step "tl-$s" 120 .gpu-var/nexttl/kestrel-bench --reps 2 --warmup 1 --no-ceilings --filter "mla_attention_kmw/$s-fp8_e4m3-qfp8-fastP"
  echo "== $s"; python3 tools/km_timeline.py "$OUT/z/tl-$s.log" | grep -vE "producer"
  xz -T4 "$OUT/z/tl-$s.log"
done
# (5) The memory-bound H 32 decode (the 32-row form) on main as landed: where a CTA's time goes at
# B 32 8k and B 8 32k (83% of copy) against B 128 8k (98%): its partials' stores, Q, the first tile
# (the probe now stamps the 32-row form too; .gpu-var/maintl = main 88f42ef + the probe).
for s in decode-B32-ctx8192-H32 decode-B8-ctx32768-H32 decode-B128-ctx8192-H32; do
  for v in maintl nexttl; do
    step "tl32-$v-$s" 120 .gpu-var/$v/kestrel-bench --reps 2 --warmup 1 --no-ceilings --filter "mla_attention/$s-fp8_e4m3-qfp8-fastP"
    echo "== $v $s"; python3 tools/km_timeline.py "$OUT/z/tl32-$v-$s.log" | grep -vE "producer"
    xz -T4 "$OUT/z/tl32-$v-$s.log"
  done
done
B=.gpu-var/main47/kestrel-bench
F=(); for n in $($B --list --filter mla_attention/ | awk '$1 ~ /^mla_attention\/.*-fp8_e4m3-qfp8-fastP$/ {print $1}'); do F+=(--filter "$n"); done
step fp8grid 300 $B --reps 10 --json "$OUT/z/fp8grid.json" "${F[@]}"
grep -E "copy|cuBLAS|ceiling" "$OUT/z/fp8grid.log" | head -5
fi
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
