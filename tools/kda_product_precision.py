#!/usr/bin/env python3
"""How precise must kda_chunk_prefill's serial-step products be? A host emulation (numpy) of the
chunked KDA algorithm (the CUDA kernels' form: Y = V - Kg S, Vn = Tm Y, O = Qg S + Aqk Vn,
S = diag(e^Gam_last) S + Kd^T Vn; the intra-chunk part in f64, the products in f32 with their
operands rounded as each variant says) against the f64 token recurrence, on the op matrix's
generators (docs/ops/kda.md) and on weak decays (raw_g in [-12, -6]: channels that remember).

  python3 tools/kda_product_precision.py [T] [seed]      (T a multiple of 64; ~1 min at 4096)
  KK_TF32=1 python3 tools/kda_product_precision.py ...   the intra kernel's kk blocks with plain
      tf32 operands (truncated, as its tensor-core path forms them since the ninth session; it
      ran 3xTF32 before) instead of f64 (T = 4096, seed 1, every operand f16: final states
      9.1e-4 -> 1.1e-3 on weak decays, outputs 1.1e-4 -> 1.2e-4; kk alone with f32 products:
      states 5.0e-4 / 1.5e-5)

Variants: f32 products; every operand rounded to bf16 (fla's serial step: bf16 operands, f32
accumulation); only the output products (Qg S, Aqk Vn) in bf16; the state's path (Kg S, Tm Y,
Kd^T Vn) as 3xBF16 (a = hi + lo in bf16, a b ~ hi hi + hi lo + lo hi) with bf16 output products;
every operand rounded to f16 (the CUDA state kernel's choice since the ninth session); the state's
path in f16 with bf16 output products. Measured (docs/ops/kda.md, "Beside fla's chunk_kda") at
T = 4096: all-bf16 states err up to 8.1e-3 on weak decays (over the 4e-3 allowance), the 3xBF16
state path 1.5e-5 with outputs at 4.6e-4 (bf16 output products), all-f16 9.1e-4 on states and
1.1e-4 on outputs.
"""
import numpy as np, os, sys
rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
K = V = 128; C = 64
T = int(sys.argv[1]) if len(sys.argv) > 1 else 4096

def bf16(x):
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)

def inputs(weak):
    q = rng.uniform(-1, 1, (T, K)); k = rng.uniform(-1, 1, (T, K)); v = rng.uniform(-1, 1, (T, V))
    q = q / np.sqrt((q * q).sum(1, keepdims=True) + 1e-6) / np.sqrt(K)
    k = k / np.sqrt((k * k).sum(1, keepdims=True) + 1e-6)
    A_log = rng.uniform(-1, 1); dt = rng.uniform(-1, 1, K)
    raw_g = rng.uniform(-4, 2, (T, K)) if not weak else rng.uniform(-12, -6, (T, K))
    a = raw_g + dt
    g = -np.exp(A_log) * np.where(a > 20, a, np.log1p(np.exp(a)))
    beta = 1 / (1 + np.exp(-rng.uniform(-3, 3, T)))
    S0 = rng.uniform(-0.5, 0.5, (K, V))
    return q, k, v, g, beta, S0

def f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)

def split3(a, b):
    ah = bf16(a); al = bf16(np.asarray(a, np.float32) - ah)
    bh = bf16(b); bl = bf16(np.asarray(b, np.float32) - bh)
    return ah @ bh + (ah @ bl + al @ bh)

def token_ref(q, k, v, g, beta, S0):
    S = S0.copy(); o = np.zeros((T, V))
    for t in range(T):
        S = np.exp(g[t])[:, None] * S
        u = beta[t] * (v[t] - k[t] @ S)
        S = S + np.outer(k[t], u)
        o[t] = q[t] @ S
    return o, S

def tf32t(x):  # an f32 passed as a .tf32 operand: its low 13 mantissa bits dropped (truncation)
    x = np.asarray(x, np.float32)
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)

def kk_tf32(kc, Gam):
    """kk as the intra kernel's tensor-core path forms it (16-row blocks, factors relative to the
    block ends), each operand passed as plain tf32; diagonal blocks whose decay exceeds e^40 take
    the kernel's f32 running product (P3a) instead."""
    n = len(kc); out = np.zeros((n, n))
    nb = (n + 15) // 16
    b = [Gam[min(16 * I + 15, n - 1)] for I in range(nb)]
    for I in range(nb):
        ref = b[I - 1] if I > 0 else np.zeros_like(Gam[0])
        for J in range(I + 1):
            ri = slice(16 * I, min(16 * I + 16, n)); rj = slice(16 * J, min(16 * J + 16, n))
            if J == I and np.max(ref - b[I]) > 40:
                D = Gam[ri][:, None, :] - Gam[rj][None, :, :]
                out[ri, rj] = np.einsum('id,jd,ijd->ij', kc[ri], kc[rj], np.exp(np.minimum(D, 0.0)))
                continue
            A = tf32t(kc[ri] * np.exp(Gam[ri] - ref) * np.exp(ref - b[J]))
            B = tf32t(kc[rj] * np.exp(b[J] - Gam[rj]))
            out[ri, rj] = A.astype(np.float64) @ B.astype(np.float64).T
    return out

KK_TF32 = os.environ.get("KK_TF32") == "1"

def chunked(q, k, v, g, beta, S0, rnd, rnd_out=None, mm=None):
    rnd_out = rnd_out or rnd
    mm = mm or (lambda a, b: rnd(a) @ rnd(b))
    # rnd: operand rounding applied to both operands of every product (identity = f32)
    f = np.float32
    S = S0.astype(f); o = np.zeros((T, V), f)
    for c0 in range(0, T, C):
        sl = slice(c0, c0 + C)
        qc, kc, vc, gc, bc = q[sl], k[sl], v[sl], g[sl], beta[sl]
        Gam = np.cumsum(gc, 0)                     # f64 for the intra part (its own precision is not the question)
        Qg = (qc * np.exp(Gam)).astype(f); Kg = (kc * np.exp(Gam)).astype(f)
        Kd = (kc * np.exp(Gam[-1] - Gam)).astype(f)
        n = len(qc)
        D = Gam[:, None, :] - Gam[None, :, :]      # [i, j, d] = Gam_i - Gam_j
        mask = np.tril(np.ones((n, n)), -1)
        E = np.exp(np.minimum(D, 0.0))
        kk = (kk_tf32(kc, Gam) if KK_TF32 else np.einsum('id,jd,ijd->ij', kc, kc, E)) * mask
        L = bc[:, None] * kk
        Tm = (np.linalg.inv(np.eye(n) + L) * bc[None, :]).astype(f)
        Aqk = (np.einsum('id,jd,ijd->ij', qc, kc, E) * np.tril(np.ones((n, n)))).astype(f)
        Y = vc.astype(f) - mm(Kg, S)
        Vn = mm(Tm, Y)
        o[sl] = rnd_out(Qg) @ rnd_out(S) + rnd_out(Aqk) @ rnd_out(Vn)
        S = np.exp(Gam[-1]).astype(f)[:, None] * S + mm(Kd.T, Vn)
    return o, S

for weak in (False, True):
    q, k, v, g, beta, S0 = inputs(weak)
    o_ref, S_ref = token_ref(q, k, v, g, beta, S0)
    ident = lambda x: x
    for name, rnd, ro, mm in (("f32 products", ident, ident, None), ("bf16 operands", bf16, bf16, None),
                              ("bf16 output products only", ident, bf16, None),
                              ("3xBF16 state path, bf16 output products", ident, bf16, split3),
                              ("f16 operands", f16, f16, None), ("f16 state path, bf16 output products", f16, bf16, None)):
        o, S = chunked(q, k, v, g, beta, S0, rnd, ro, mm)
        print(f"T={T} {'weak' if weak else 'matrix'} decay, {name}: out max|err| {np.abs(o - o_ref).max():.2e} "
              f"(max|o| {np.abs(o_ref).max():.2f}), state max|err| {np.abs(S - S_ref).max():.2e} (max|S| {np.abs(S_ref).max():.2f})")
