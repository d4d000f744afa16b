#!/usr/bin/env bash
# Builds here (nvcc, no GPU) the binaries session54-gpu.sh carries, as .gpu-var/s54.tar.xz, in one
# scratch worktree of REV (default HEAD; ~50 minutes on 2 cores):
#   new        REV's own kestrel-bench and kestrel-tests
#   merge1     kestrel-bench with tools/prepared/km-merge-v1.patch (the 32-row form only, any count)
#   merge2     kestrel-bench and kestrel-tests with tools/prepared/km-merge.patch (both forms, at
#              most kMlaAttentionKeysMMergeMaxSplits = 16 splits)
#   merge2-mut its tests with the patch's mutant cuda_mla_keys_m_merge_rows
#   flat       kestrel-bench and kestrel-tests with tools/prepared/km-flat.patch (v3's flattened
#              schedule; independent of the merge)
#   flat-mut   its tests with the patch's mutant cuda_mla_keys_m_flat_slot
#   fm         kestrel-bench and kestrel-tests with tools/prepared/km-flat-merge.patch (both above
#              and the flattened runs merged in the kernel; skipped with FM=0)
#   fm-mut     its tests with the patch's mutant cuda_mla_keys_m_flat_merge_rows
# Then (from a checkout of REV): run: bash tools/prepared/session54-gpu.sh   (carry .gpu-var/s54.tar.xz;
# on an H200 also .peers/flashmla-bench, from scripts/build-peer-flashmla)
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD T=${TMPDIR:-/tmp}/kestrel-s54 S=${TMPDIR:-/tmp}/kestrel-s54-bin
REV=$(git rev-parse "${REV:-HEAD}")
rm -rf "$S" && mkdir -p "$S"/new "$S"/merge1 "$S"/merge2 "$S"/merge2-mut "$S"/flat "$S"/flat-mut .gpu-var
git worktree remove --force "$T" 2>/dev/null || rm -rf "$T"
git worktree add --detach "$T" "$REV" >/dev/null
cmake -S "$T" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON >/dev/null
ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null && cp "$T/build/kestrel-bench" "$T/build/kestrel-tests" "$S/new/"
git -C "$T" apply "$R/tools/prepared/km-merge-v1.patch"
ninja -C "$T/build" kestrel-bench >/dev/null && cp "$T/build/kestrel-bench" "$S/merge1/"
git -C "$T" checkout -q -- . && git -C "$T" clean -fdq -e build
git -C "$T" apply "$R/tools/prepared/km-merge.patch"
ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null && cp "$T/build/kestrel-bench" "$T/build/kestrel-tests" "$S/merge2/"
git -C "$T" apply tests/mutations/cuda_mla_keys_m_merge_rows.patch
ninja -C "$T/build" kestrel-tests >/dev/null && cp "$T/build/kestrel-tests" "$S/merge2-mut/"
git -C "$T" checkout -q -- . && git -C "$T" clean -fdq -e build
git -C "$T" apply "$R/tools/prepared/km-flat.patch"
ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null && cp "$T/build/kestrel-bench" "$T/build/kestrel-tests" "$S/flat/"
git -C "$T" apply tests/mutations/cuda_mla_keys_m_flat_slot.patch
ninja -C "$T/build" kestrel-tests >/dev/null && cp "$T/build/kestrel-tests" "$S/flat-mut/"
if [ "${FM:-1}" = 1 ]; then
  mkdir -p "$S"/fm "$S"/fm-mut
  git -C "$T" checkout -q -- . && git -C "$T" clean -fdq -e build
  git -C "$T" apply "$R/tools/prepared/km-flat-merge.patch"
  ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null && cp "$T/build/kestrel-bench" "$T/build/kestrel-tests" "$S/fm/"
  git -C "$T" apply tests/mutations/cuda_mla_keys_m_flat_merge_rows.patch
  ninja -C "$T/build" kestrel-tests >/dev/null && cp "$T/build/kestrel-tests" "$S/fm-mut/"
fi
strip "$S"/*/*
(cd "$S" && tar cf - $(ls) | xz -T2 -6 > "$R/.gpu-var/s54.tar.xz") && echo "built .gpu-var/s54.tar.xz from $REV"
git worktree remove --force "$T" && git worktree prune
