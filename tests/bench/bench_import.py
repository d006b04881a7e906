#!/usr/bin/env python3
"""Import cost: `python3 -c 'import avsm'` against `python3 -c 'import json, sqlite3, socket'`.

    python3 tests/bench/bench_import.py [--runs 30]

Both run from the repository with PYTHONPATH set to it, so the repository's avsm.py is the one imported;
its __pycache__ is warmed first. Runs alternate; the median of each counts. Target: avsm / baseline <= 1.3.
Not collected by pytest (pyproject: norecursedirs = tests/bench). Exits 1 when the target is missed.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = 1.3
COMMANDS = {
    "import json, sqlite3, socket": "import json, sqlite3, socket",
    "import avsm": "import avsm; assert avsm.__file__.startswith(%r), avsm.__file__" % ROOT,
}


def timed(code, env):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    names = list(COMMANDS)
    for name in names:                       # warm __pycache__ and the OS's file cache
        for _ in range(3):
            timed(COMMANDS[name], env)
    times = {name: [] for name in names}
    for r in range(args.runs):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            times[name].append(timed(COMMANDS[name], env))
    base = statistics.median(times[names[0]])
    print(f"python {sys.version.split()[0]}; {args.runs} runs each, alternating; cwd and PYTHONPATH {ROOT}")
    print(f"  {'command':32} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'ratio':>6}")
    for name in names:
        med = statistics.median(times[name])
        print(f"  {name:32} {med * 1e3:10.1f} {min(times[name]) * 1e3:8.1f} {max(times[name]) * 1e3:8.1f} "
              f"{med / base:6.2f}")
    ratio = statistics.median(times["import avsm"]) / base
    ok = ratio <= TARGET
    print(f"  ratio import avsm / baseline: {ratio:.2f}; target <= {TARGET}: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
