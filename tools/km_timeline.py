#!/usr/bin/env python3
"""Where a CTA of v3 (the keys-as-M kernel, either form) spends its time, from the timeline probe
(tools/prepared/km-cta-timeline.patch: %globaltimer stamps per CTA, its first row tile; in the
32-row form "merge" is the first merge barrier and "o stored" follows the exchange of O^T halves
and the writer warps' stores).

Each launch prints "TL3B", then per CTA "TL3" and 16 numbers: cta + 1, smid, entry, plan in hand,
warpgroup 0's five stamps (Q in shared memory, first tile's full passed, tile loop retired, merge
barrier passed, o stored), warpgroup 1's, the producer's first copy issued, the row tile's tiles.
This prints, for the last launch (or --launch N from the end), each phase's median over the CTAs
(us), the share of the SMs' busy time each phase takes (summed over CTAs, over SMs x span), and the
gaps on an SM between one CTA's last stamp and the next CTA's entry.

  git apply tools/prepared/km-cta-timeline.patch && cmake --build build --target kestrel-bench
  build/kestrel-bench --reps 2 --warmup 1 --no-ceilings \\
      --filter mla_attention_kmw/verify8-B128-ctx1024-H128-fp8_e4m3-qfp8-fastP > tl.txt
  tools/km_timeline.py tl.txt
"""
import argparse
import statistics as st
from collections import defaultdict


def launches(path):
    out = []
    for line in open(path, errors="replace"):
        if line.startswith("TL3B"):
            out.append([])
        elif line.startswith("TL3 ") and out:
            out[-1].append(list(map(int, line.split()[1:])))
    return [lr for lr in out if lr]


def phases(r):
    """(name, ns) of one CTA: the later warpgroup's stamp for each point."""
    entry, plan = r[2], r[3]
    wg = [r[4 + 5 * c: 9 + 5 * c] for c in range(2)]
    q, first, loop, merge, out = (max(w[k] for w in wg) for k in range(5))
    return [("entry -> plan", plan - entry), ("plan -> Q in smem", q - plan),
            ("Q -> first tile", first - q), ("tile loop", loop - first), ("merge", merge - loop),
            ("o stores", out - merge)], out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--launch", type=int, default=1, help="which launch from the end (1: the last)")
    a = ap.parse_args()
    ls = launches(a.log)
    if not ls:
        raise SystemExit(f"km_timeline: no TL3 launch in {a.log}")
    rows = [r for r in ls[-a.launch] if len(r) == 16 and all(r[2:15])]
    t0 = min(r[2] for r in rows)
    per = defaultdict(list)
    by_sm = defaultdict(list)
    end_max = 0
    for r in rows:
        ph, end = phases(r)
        for name, ns in ph:
            per[name].append(ns)
        per["producer: plan -> first copy"].append(r[14] - r[3])
        per["tile loop a tile"].append((ph[3][1]) / max(r[15], 1))
        per["CTA, entry -> o stored"].append(end - r[2])
        by_sm[r[1]].append((r[2], end))
        end_max = max(end_max, end)
    span = end_max - t0
    sms = len(by_sm)
    gaps = []
    for v in by_sm.values():
        v.sort()
        gaps += [b[0] - a[1] for a, b in zip(v, v[1:])]
    print(f"{len(rows)} CTAs on {sms} SMs, span {span / 1e3:.1f} us, tiles a row tile {st.median(r[15] for r in rows)}")
    print(f"{'phase':34s} {'median us':>10s} {'p10':>8s} {'p90':>8s} {'share':>7s}")
    for name, v in per.items():
        q = st.quantiles(v, n=10) if len(v) > 1 else [v[0]] * 9
        share = sum(v) / (sms * span) if "a tile" not in name and "producer" not in name else float("nan")
        print(f"{name:34s} {st.median(v) / 1e3:10.2f} {q[0] / 1e3:8.2f} {q[-1] / 1e3:8.2f} {share:7.1%}")
    if gaps:
        q = st.quantiles(gaps, n=10) if len(gaps) > 1 else [gaps[0]] * 9
        print(f"{'gap on an SM (o stored -> entry)':34s} {st.median(gaps) / 1e3:10.2f} {q[0] / 1e3:8.2f} "
              f"{q[-1] / 1e3:8.2f} {sum(gaps) / (sms * span):7.1%}")
    first = sorted(r[2] for r in rows)[:sms]
    print(f"first wave's entries over {(first[-1] - first[0]) / 1e3:.1f} us; last CTA ends "
          f"{span / 1e3:.1f} us after the first entry")


if __name__ == "__main__":
    main()
