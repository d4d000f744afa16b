#!/bin/bash
# mla_attention: splits of at least 32 keys (s32) against 64 (base) at 1k keys.
set -u
O=$OUT; V=.gpu-var
timeout 120 $V/s32/kestrel-tests --gtest_filter='cuda/*mla_attention*:*MlaAttention*Cuda*' --gtest_brief=1 > $O/tests.log 2>&1; echo "tests rc=$?"; tail -3 $O/tests.log
for r in 1 2; do for v in base s32 s32 base; do
  timeout 100 $V/$v/kestrel-bench --filter -B1-ctx1024 --filter -B8-ctx1024 --reps 20 --no-ceilings --json $O/b-$v-$r$RANDOM.json > /dev/null 2>&1 || echo "bench $v failed"
done; done
cd $O && tar czf benches.tgz b-*.json && rm b-*.json
