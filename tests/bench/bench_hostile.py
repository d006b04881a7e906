"""The hostile-input campaign at size (issue 16): thousands of socket lines, mandates and configs against
a real avsmd, printing the counts of inputs, crashes, daemon deaths and wrong values, and apart from them
what hit the defects the other items of issue 16 fix (4: numbers past the limits, 5: configs).

    python3 tests/bench/bench_hostile.py            # 3,000 inputs, a fresh seed (printed)
    AVSM_HOSTILE_SEED=7 AVSM_HOSTILE_N=500 python3 tests/bench/bench_hostile.py

Exits 1 when it found a crash, a death or a wrong value (not counting the other items')."""

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from hostile_campaign import Campaign, seed_and_count  # noqa: E402


def main():
    seed, n = seed_and_count(3000)
    print(f"hostile campaign: seed {seed}, {n} inputs (replay: AVSM_HOSTILE_SEED={seed} AVSM_HOSTILE_N={n})", flush=True)
    bindir = tempfile.mkdtemp(prefix="avb", dir="/tmp")
    root = tempfile.mkdtemp(prefix="avh", dir="/tmp")
    root_of_repo = os.path.dirname(os.path.dirname(HERE))
    for name in ("avsm", "avsmd"):
        os.symlink(os.path.join(root_of_repo, "avsm.py"), os.path.join(bindir, name))
    t0 = time.monotonic()
    try:
        tally = Campaign(bindir, root, seed, avoid_others=False, log=lambda line: print(line, flush=True)).run(n)
    finally:
        shutil.rmtree(bindir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    print(f"in {time.monotonic() - t0:.0f} s: {tally.summary()}")
    for what, kind, data, why in tally.failures[:20]:
        print(f"--- {what} ({kind}) {data!r}\n{why}")
    for item, found in sorted(tally.others.items()):
        print(f"--- item {item} (another branch's): {len(found)}; the first: {found[0][0]} {found[0][1][:120]!r}\n"
              f"{found[0][2][-600:]}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
