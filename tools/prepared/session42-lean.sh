#!/usr/bin/env bash
# The forty-second session's check of v4's one-wave flattened runs and v3's CTA cost of 1000 keys
# (ran on an H100 with 375 s of device time left: perf.md's forty-second section, job 3). The rule
# tests and the GPU unit tests of both rules, then an A/B of main (.gpu-var/spl2, f10985a) against
# the branch (.gpu-var/idle: its bench and tests, built as build-gpu-var.sh builds spl2), 2 rounds,
# on the changed shapes, v4's schedules forced at 4k / 16k and v3's counts at 16k, and FlashMLA.
# Carry [".gpu-var/spl2", ".gpu-var/idle", ".peers/flashmla-bench"]. ~35 s on the device.
source tools/prepared/job-lib.sh; N=.gpu-var/idle
step unit 90 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.Seesaw64*:MlaAttentionCuda.KeysMBalanced*:MlaAttentionRule.*' --gtest_brief=1
f=(); for s in verify4-B8-ctx8192-H96 verify8-B8-ctx8192-H96 verify2-B32-ctx8192-H96 decode-B32-ctx8192-H96; do f+=(--filter "mla_attention/$s-bf16-fastP"); done
f+=(--filter mla_attention/verify4-B8-ctx16384-H96-fp8 --filter mla_attention_splits/verify4-B8-ctx16384-H96-fp8_e4m3-qfp8-fastP-sp2 --filter mla_attention_splits/verify4-B8-ctx16384-H96-fp8_e4m3-qfp8-fastP-sp5)
for s in verify2-B32 verify4-B8 verify8-B8; do for c in 4096 16384; do f+=(--filter "mla_attention_s64flat/$s-ctx$c-H96-bf16" --filter "mla_attention_s64uniform/$s-ctx$c-H96-bf16"); done; done
AB_TIMEOUT=60 scripts/gpu-ab "$OUT/z/ab" 2 .gpu-var/spl2 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base spl2 | tee "$OUT/z/ab.txt"
g=(); for s in verify4-B8-ctx8192-H96 verify8-B8-ctx8192-H96 verify2-B32-ctx8192-H96 decode-B32-ctx8192-H96; do g+=(--filter "$s-bf16-fastP"); done
timeout 40 .peers/flashmla-bench --grid --reps 10 "${g[@]}" | grep fastP | awk '{print $1, $2}' | tee "$OUT/z/flashmla.txt"
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z); echo "all $(( $(date +%s) - t0 ))s"
