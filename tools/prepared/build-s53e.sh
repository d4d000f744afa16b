#!/usr/bin/env bash
# Builds here (nvcc, no GPU) the binaries session53e-gpu.sh carries: .gpu-var/s53e.tar.xz with
# merge (kestrel-bench and kestrel-tests of REV, default HEAD, with tools/prepared/km-merge.patch)
# and merge-mut (its tests with the patch's mutant cuda_mla_keys_m_merge_rows), and
# .gpu-var/s53.tar.xz with new (REV's own kestrel-bench and kestrel-tests), in one scratch worktree
# (~45 minutes on 2 cores). Then (from a checkout of REV):
#   run: bash tools/prepared/session53e-gpu.sh   (carry .gpu-var/s53.tar.xz, .gpu-var/s53e.tar.xz)
# (from main: the patch's tests are in the carried binaries).
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD T=${TMPDIR:-/tmp}/kestrel-s53e S=${TMPDIR:-/tmp}/kestrel-s53e-bin
REV=$(git rev-parse "${REV:-HEAD}")
rm -rf "$S" && mkdir -p "$S"/new "$S"/merge "$S"/merge-mut .gpu-var
git worktree remove --force "$T" 2>/dev/null || rm -rf "$T"
git worktree add --detach "$T" "$REV" >/dev/null
cmake -S "$T" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON >/dev/null
ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null && cp "$T/build/kestrel-bench" "$T/build/kestrel-tests" "$S/new/"
git -C "$T" apply "$R/tools/prepared/km-merge.patch"
ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null && cp "$T/build/kestrel-bench" "$T/build/kestrel-tests" "$S/merge/"
git -C "$T" apply tests/mutations/cuda_mla_keys_m_merge_rows.patch
ninja -C "$T/build" kestrel-tests >/dev/null && cp "$T/build/kestrel-tests" "$S/merge-mut/"
strip "$S"/*/*
(cd "$S" && tar cf - new | xz -T2 -6 > "$R/.gpu-var/s53.tar.xz")
(cd "$S" && tar cf - merge merge-mut | xz -T2 -6 > "$R/.gpu-var/s53e.tar.xz") && echo "built .gpu-var/s53.tar.xz, s53e.tar.xz from $REV"
git worktree remove --force "$T" && git worktree prune
