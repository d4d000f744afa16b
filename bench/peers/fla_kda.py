#!/usr/bin/env python3
"""The fla peer for the KDA benchmarks: fla's Triton kernels at the shapes and under the
timing rules of kestrel-bench (bench/kda_*.cpp), so that the two can be compared case by case.

fla is not a dependency of Kestrel. It runs from a git-ignored copy (.peers/fla, a checkout of
fla-org/flash-linear-attention; the commit is printed) on the GPU machine, which has PyTorch and
Triton. Case names are kestrel-bench's, so `--ours bench.json` prints the ratio per case.

  PYTHONPATH=.peers python3 bench/peers/fla_kda.py --json out/fla.json --ours out/bench.json
  ... --filter kda_chunk_prefill --filter kda_packed_decode/B32     (cases containing any word)

Timing, as kestrel-bench does it: every case rotates through enough independent buffer sets to
cover >= 4x the L2 (so state reads come from HBM, not L2); small cases are timed as CUDA-graph
replays of one launch per set, long prefills with events around single calls; the median of the
samples is reported. Inputs are random (the work does not depend on values, but NaN-free inputs
keep the exp paths honest).
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch

K = V = 128
ROTATE_BYTES = 256 << 20


def fla_commit():
    here = os.path.dirname(os.path.abspath(__import__("fla").__file__))
    stamp = os.path.join(here, "..", "fla.COMMIT")
    if os.path.exists(stamp):
        return open(stamp).read().strip()
    try:
        return subprocess.check_output(["git", "-C", here, "rev-parse", "--short", "HEAD"], text=True).strip()
    except Exception:
        return "unknown"


def rnd(shape, dtype, lo=-1.0, hi=1.0):
    return (torch.rand(shape, device="cuda", dtype=torch.float32) * (hi - lo) + lo).to(dtype)


def time_graph(calls, samples=10, replays=5):
    """Median us per call of `calls` (one per buffer set) captured into one graph."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for c in calls[: min(3, len(calls))]:
            c()  # compile / autotune outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for c in calls:
            c()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            graph.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (replays * len(calls)))
    return sorted(times)[len(times) // 2]


def time_events(call, samples=10):
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return sorted(times)[len(times) // 2]


def sets_for(bytes_per_set, cap=4096):
    return max(1, min(cap, math.ceil(ROTATE_BYTES / bytes_per_set)))


def recurrent_case(N, T, H, pool_dtype=torch.float32):
    """One decode (T = 1) or target-verify (T = 1 + drafts) step: packed tokens, slot table
    [N, T], num_accepted, state pool [slots, H, V, K] updated in place (fla's vLLM path)."""
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    slots = N * T + 1
    pool_bytes = slots * H * V * K * pool_dtype.itemsize
    calls = []
    for _ in range(sets_for(pool_bytes)):
        q, k, v = (rnd((1, N * T, H, K), torch.bfloat16) for _ in range(3))
        g = rnd((1, N * T, H, K), torch.bfloat16)
        beta = rnd((1, N * T, H), torch.bfloat16)
        A_log = rnd((H,), torch.float32, -1, 1)
        dt_bias = rnd((H * K,), torch.float32, -1, 1)
        pool = rnd((slots, H, V, K), pool_dtype, -0.05, 0.05)
        table = torch.arange(1, N * T + 1, device="cuda", dtype=torch.int32).reshape(N, T)
        idx = table[:, 0] if T == 1 else table
        acc = torch.ones(N, device="cuda", dtype=torch.int32) if T > 1 else None
        cu = torch.arange(0, N * T + 1, T, device="cuda", dtype=torch.int32)
        out = torch.empty_like(v)

        def call(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, pool=pool, idx=idx, acc=acc,
                 cu=cu, out=out):
            fused_recurrent_kda_fwd(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias,
                                    initial_state=pool, inplace_final_state=True, state_v_first=True,
                                    cu_seqlens=cu, ssm_state_indices=idx, num_accepted_tokens=acc,
                                    use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                    use_beta_sigmoid_in_kernel=True, out=out)
        calls.append(call)
    return time_graph(calls)


def prefill_case(lens, H):
    """chunk_kda over a varlen batch, initial state given, final state out (the prefill path)."""
    from fla.ops.kda import chunk_kda

    T = sum(lens)
    N = len(lens)
    q, k, v = (rnd((1, T, H, K), torch.bfloat16) for _ in range(3))
    g = rnd((1, T, H, K), torch.bfloat16)
    beta = rnd((1, T, H), torch.bfloat16)
    A_log = rnd((H,), torch.float32, -1, 1)
    dt_bias = rnd((H * K,), torch.float32, -1, 1)
    h0 = rnd((N, H, V, K), torch.float32, -0.05, 0.05)
    cu_list = [0]
    for n in lens:
        cu_list.append(cu_list[-1] + n)
    cu = torch.tensor(cu_list, device="cuda", dtype=torch.int32)
    cu_cpu = torch.tensor(cu_list, dtype=torch.int32)

    def call():
        with torch.inference_mode():
            chunk_kda(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, initial_state=h0,
                      output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                      use_beta_sigmoid_in_kernel=True, state_v_first=True, cu_seqlens=cu, cu_seqlens_cpu=cu_cpu)
    return time_events(call)


def cases():
    """kestrel-bench case name -> a function timing fla at that shape."""
    out = {}
    for H in (32, 96):
        for B in (1, 8, 32, 128, 256):
            out[f"kda_packed_decode/B{B}-H{H}-K{K}-bf16"] = lambda B=B, H=H: recurrent_case(B, 1, H)
    for N in (32, 128):
        for T in (2, 3, 4, 5):
            out[f"kda_recurrent/N{N}-T{T}-H96-K{K}-bf16"] = lambda N=N, T=T: recurrent_case(N, T, 96)
    for H in (32, 96):
        for T in (4096, 16384, 65536):
            out[f"kda_chunk_prefill/B1-T{T}-H{H}-K{K}-bf16"] = lambda T=T, H=H: prefill_case([T], H)
    out[f"kda_chunk_prefill/varlen16-T16384-H32-K{K}-bf16"] = lambda: prefill_case([1024] * 16, 32)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--ours", help="kestrel-bench JSON to compare with")
    ap.add_argument("--filter", action="append", default=[],
                    help="run only cases whose name contains this (repeatable: any of them), as kestrel-bench")
    ap.add_argument("--cases", help="comma-separated cases to run in this process (the driver's child)")
    args = ap.parse_args()

    if args.cases:  # a child: its cases in order, one result line each as it goes
        table = cases()
        for name in args.cases.split(","):
            print(f"RESULT {name} {table[name]():.4f}", flush=True)
        return 0

    # The cases run in a child process; when one faults (an illegal address poisons the CUDA
    # context for good) the child dies, that case is recorded as failed, and a new child takes
    # the rest.
    results, failures = {}, {}
    # A whole run outlasts one 10-minute GPU call (each child that replaces a faulted one
    # compiles its Triton kernels again): --filter picks the cases a comparison needs.
    todo = [name for name in cases() if not args.filter or any(f in name for f in args.filter)]
    if not todo:
        print(f"fla: no case matches {args.filter}", file=sys.stderr)
        return 2
    while todo:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--cases", ",".join(todo)],
                           capture_output=True, text=True)
        for line in r.stdout.splitlines():
            if line.startswith("RESULT "):
                _, name, us = line.split()
                results[name] = float(us)
                todo.remove(name)
                print(f"fla {name:48s} {results[name]:10.2f} us", flush=True)
        if r.returncode != 0 and todo:
            last = [l for l in r.stderr.strip().splitlines() if l.strip()][-1:] or ["(no output)"]
            failures[todo[0]] = last[0]
            print(f"fla {todo[0]:48s} FAILED: {last[0]}", flush=True)
            todo.pop(0)
        elif r.returncode != 0 or todo:
            break

    doc = {"peer": "fla", "fla_commit": fla_commit(), "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(), "results_us": results, "failures": failures}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.ours and os.path.exists(args.ours):
        ours = {c["name"]: c for c in json.load(open(args.ours))["cases"] if c.get("ok")}
        print(f"\n{'case':48s} {'kestrel us':>11s} {'fla us':>9s} {'fla/kestrel':>11s}")
        for name, us in results.items():
            if name in ours:
                mine = ours[name]["time"]["median_us"]
                print(f"{name:48s} {mine:11.2f} {us:9.2f} {us / mine:10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
