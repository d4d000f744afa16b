#!/usr/bin/env bash
# The fifty-third session's second job (~4 minutes; ~7 on an H200): main with the H 32 decode's
# wide bound at 16384 tile-keys (new, .gpu-var/s53.tar.xz: kestrel-bench and kestrel-tests of main
# at that commit, built here) proven (rule tests, the keys-as-M unit tests, the whole
# cuda/*mla_attention* matrix) and A/B'd against main as landed before it (land, .gpu-var/s52.tar.xz)
# on the H 32 decodes the bound moves (B1 32k, B32 1k), those it keeps wide (B1 1k / 8k, B8 1k),
# controls, and the 32-row and wide forms forced on them, 3 rounds; then new's cases between
# 8192 and 32768 tile-keys (bench/mla_attention.cpp), each form forced; v3 wide's lead under
# sustained load (m against land). On an H200 also issue 3's bf16 goal rows beside FlashMLA
# (scripts/gpu-mla-goal-rows, carry .peers/flashmla-bench) and the fp8 fast grid with the
# ceilings, on new. Carry .gpu-var/s52.tar.xz, .gpu-var/s53.tar.xz, .peers/flashmla-bench.
source tools/prepared/job-lib.sh
tar xJf .gpu-var/s52.tar.xz -C .gpu-var && tar xJf .gpu-var/s53.tar.xz -C .gpu-var
P=.gpu-var/new/kestrel-tests
step unit 150 $P --gtest_filter='MlaAttentionRule.*:MlaAttentionCuda.KeysM*:MlaAttentionCuda.WideKeysM*' --gtest_brief=1
step matrix 300 env KESTREL_SEED=5301 $P --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit.log "$OUT"/z/matrix.log 2>/dev/null | cut -c1-160 | head -10
f=()
for sh in decode-B1-ctx1024-H32 decode-B1-ctx8192-H32 decode-B1-ctx32768-H32 decode-B8-ctx1024-H32 decode-B32-ctx1024-H32; do
  f+=(--filter "mla_attention/$sh-fp8_e4m3-qfp8-fastP" --filter "mla_attention_km/$sh-fp8_e4m3-qfp8-fastP" --filter "mla_attention_kmw/$sh-fp8_e4m3-qfp8-fastP")
done
for sh in decode-B8-ctx8192-H32 decode-B128-ctx1024-H32 verify2-B1-ctx32768-H32 decode-B1-ctx8192-H96; do f+=(--filter "mla_attention/$sh-fp8_e4m3-qfp8-fastP"); done
AB_TIMEOUT=200 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/land .gpu-var/new -- --reps 20 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base land | tee "$OUT/z/ab.txt"
# Between the grid's points: 16384 and 24576 tile-keys (B 1 16k / 24k, B 2 / 3 8k, B 16 / 24 1k),
# automatic and both forms forced, new only (land lacks these cases), two runs.
g=(); for sh in decode-B1-ctx16384-H32 decode-B2-ctx8192-H32 decode-B16-ctx1024-H32 decode-B1-ctx24576-H32 decode-B3-ctx8192-H32 decode-B24-ctx1024-H32; do
  for k in mla_attention mla_attention_km mla_attention_kmw; do g+=(--filter "$k/$sh-fp8_e4m3-qfp8-fastP"); done; done
for r in 1 2; do
  step "cross$r" 90 .gpu-var/new/kestrel-bench --reps 20 --no-ceilings "${g[@]}"
  grep -E "^mla_attention" "$OUT/z/cross$r.log" | awk '{print $1, $5}' | sed 's/-fp8_e4m3-qfp8-fastP//'
done
# v3 wide's walk with the lead (landed in the fifty-second session) against main before it (m,
# 6dd8cd7) on walked wide shapes at 8k / 32k under sustained load (the power cap), where the short
# runs spread 3-10%: m, land, land, m on each shape.
for sh in decode-B128-ctx8192-H128 verify2-B128-ctx8192-H96 verify4-B128-ctx8192-H32 decode-B128-ctx32768-H128; do
  reps=4000; [[ $sh == *32768* ]] && reps=1200
  for run in m1 land1 land2 m2; do  # (each run's own log: the first job overwrote a build's first with its second)
    echo "== $sh $run"
    sustained "$run-$sh" .gpu-var/${run%[12]}/kestrel-bench "mla_attention/$sh-fp8_e4m3-qfp8-fastP" $reps
  done
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  goal_rows_and_fp8_grid .gpu-var/new
fi
(cd "$OUT" && tar cJf z.tar.xz z $( [ -d goal ] && echo goal ) && rm -rf z goal)
echo "all $(( $(date +%s) - t0 ))s"
