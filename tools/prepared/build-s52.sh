#!/usr/bin/env bash
# Builds here (nvcc, no GPU) the binaries session52b-gpu.sh carries, in one scratch worktree rebuilt
# incrementally (~15 minutes on 2 cores): .gpu-var/s52.tar.xz with m (kestrel-bench of main at
# 6dd8cd7, before ws-boxes and km-lead2 landed), land (kestrel-bench and kestrel-tests of REV,
# default HEAD) and mut-ws (kestrel-tests of REV with cuda_mla_keys_m_ws_swizzle). Then:
#   run: bash tools/prepared/session52b-gpu.sh   (carry .gpu-var/s52.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD T=${TMPDIR:-/tmp}/kestrel-s52 S=${TMPDIR:-/tmp}/kestrel-s52-bin
REV=$(git rev-parse "${REV:-HEAD}")
rm -rf "$S" && mkdir -p "$S"/m "$S"/land "$S"/mut-ws .gpu-var
git worktree remove --force "$T" 2>/dev/null || rm -rf "$T"
git worktree add --detach "$T" 6dd8cd7 >/dev/null
cmake -S "$T" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON >/dev/null
ninja -C "$T/build" kestrel-bench >/dev/null && cp "$T/build/kestrel-bench" "$S/m/"
git -C "$T" checkout -q --detach "$REV"
ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null && cp "$T/build/kestrel-bench" "$T/build/kestrel-tests" "$S/land/"
git -C "$T" apply tests/mutations/cuda_mla_keys_m_ws_swizzle.patch
ninja -C "$T/build" kestrel-tests >/dev/null && cp "$T/build/kestrel-tests" "$S/mut-ws/"
strip "$S"/*/*
(cd "$S" && tar cf - m land mut-ws | xz -T2 -6 > "$R/.gpu-var/s52.tar.xz") && echo "built .gpu-var/s52.tar.xz"
git worktree remove --force "$T" && git worktree prune
