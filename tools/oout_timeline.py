#!/usr/bin/env python3
"""v4's staged epilogue ("o out") split into its steps, from the probe tools/prepared/s64-oout-probe.patch.

The probe (applied after tools/prepared/s64-cta-timeline.patch, whose TL2 lines tools/cta_timeline.py
reads) adds a TL3 line per item: in
thread 0 of each consumer warpgroup, %globaltimer after o's staging stores (and the fence), after
the warpgroup's barrier, after its row copies were issued and after its wait for them to be read;
and the read-wait end of threads 32 and 63 (the last rows' copies). This prints, for the last
launch, the medians of each step over the CTAs' first items and over the later ones.

  tools/oout_timeline.py tl.txt
"""
import os
import statistics as st
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cta_timeline import launches  # noqa: E402  (the TL2 rows: the same probe, the same reader)


def last_tl3(path):
    """The TL3 rows of the last launch that has any, by row."""
    blocks = []
    for line in open(path):
        if line.startswith("TL2B"):
            blocks.append({})
        elif line.startswith("TL3 ") and blocks:
            v = list(map(int, line.split()[1:]))
            blocks[-1][v[0]] = v[1:]
    return [b for b in blocks if b][-1]


def main():
    tl3 = last_tl3(sys.argv[1])
    steps = {}
    for a in launches(sys.argv[1])[-1]:
        row = a[0]
        if row not in tl3:
            continue
        b = tl3[row]
        for c in (0, 1):
            t5, t6 = a[2 + 7 * c + 5], a[2 + 7 * c + 6]  # after the L barrier; item end
            t7, t8, t9, t10 = b[5 * c:5 * c + 4]
            if t7 == 0:
                continue  # not the staged epilogue
            last = max(b[10 + 2 * c], b[11 + 2 * c], t10)
            key = ("first" if (row - 1) % 32 == 0 else "later", c)
            steps.setdefault(key, []).append([(t7 - t5) / 1e3, (t8 - t7) / 1e3, (t9 - t8) / 1e3, (t10 - t9) / 1e3,
                                              (last - t9) / 1e3, (t6 - t10) / 1e3, (t6 - t5) / 1e3])
    for key in sorted(steps):
        m = [st.median(x[i] for x in steps[key]) for i in range(7)]
        print("%s items wg%d (%d): stores %.2f, barrier %.2f, issuing the copies %.2f, read wait %.2f (all rows %.2f), "
              "arrive %.2f; o out %.2f us" % (key[0], key[1], len(steps[key]), *m))


if __name__ == "__main__":
    main()
