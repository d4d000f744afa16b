#!/usr/bin/env python3
"""Where a kernel's local-memory accesses (spills) lie in its SASS: for each function of a
`cuobjdump --dump-sass` listing whose name contains FILTER, the number of LDL / STL, how many lie
between its first and last HGMMA (the tile loop, where a spill costs each tile) and how many
before / after that span (prologue, epilogue).

  cuobjdump --dump-sass BINARY | python3 tools/sass_spills.py [FILTER]
"""
import re
import sys


def main():
    filt = sys.argv[1] if len(sys.argv) > 1 else ""
    name, lines = None, []
    funcs = []
    for line in sys.stdin:
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name is not None:
                funcs.append((name, lines))
            name, lines = m.group(1), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        funcs.append((name, lines))
    for name, body in funcs:
        if filt not in name:
            continue
        mma = [i for i, l in enumerate(body) if "HGMMA" in l]
        loc = [i for i, l in enumerate(body) if re.search(r"\b(LDL|STL)\b", l)]
        if mma:
            a, b = mma[0], mma[-1]
            inside = sum(a < i < b for i in loc)
            before = sum(i < a for i in loc)
            after = sum(i > b for i in loc)
        else:
            inside = before = after = 0
        print(f"{name[:150]}: {len(body)} lines, {len(mma)} HGMMA, {len(loc)} LDL/STL "
              f"(before the HGMMA span {before}, inside {inside}, after {after})")


if __name__ == "__main__":
    main()
