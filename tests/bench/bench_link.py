#!/usr/bin/env python3
"""A copied avsm.py started through `avsm link`'s wrapper: `avsm status` against `python3 -c 'import json, socket'`.

    python3 tests/bench/bench_link.py [--runs 30]

avsm.py is copied into a scratch directory, `python3 COPY link BIN` writes BIN/avsm and BIN/avsmd, and
BIN/avsmd runs one venture on a scratch home. Then, alternating, with PYTHONDONTWRITEBYTECODE=1 as in this
container (so no __pycache__ beside the copy helps): the bare interpreter importing json and socket (the
baseline; and without `site`, as the wrapper's `#!python -SP` starts), `BIN/avsm --home H status` (the wrapper), and `python3 COPY --home H status` (the copied file run
as a script, compiled afresh each time). The median of each counts. Target: wrapper / baseline <= 1.3.
Not collected by pytest (pyproject: norecursedirs = tests/bench). Exits 1 when the target is missed.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = 1.3


def timed(argv, env):
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="avl", dir="/tmp")
    copy, bindir, home, venture = (os.path.join(scratch, d) for d in ("avsm.py", "bin", "h", "tank"))
    shutil.copy(os.path.join(ROOT, "avsm.py"), copy)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(scratch, "cache"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("AVSMD_HOME", None)
    os.makedirs(venture)
    with open(os.path.join(venture, "mandate.yaml"), "w") as fh:
        fh.write("purpose: Hold the level.\nmetric: level\ncontroller: {kind: threshold, above: 10, action: drain}\n"
                 "cadence: 2s\npermitted:\n  - {name: drain, run: \"true\", cap: 6/hour, reversible: true}\nforbidden: [rm]\n")
    with open(os.path.join(venture, "report"), "w") as fh:
        fh.write("#!/bin/sh\necho 5\n")
    os.chmod(os.path.join(venture, "report"), 0o755)
    subprocess.run([sys.executable, copy, "link", bindir], env=env, check=True, stdout=subprocess.DEVNULL)
    daemon = subprocess.Popen([os.path.join(bindir, "avsmd"), "--home", home], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wrapper = [os.path.join(bindir, "avsm"), "--home", home, "status"]
        deadline = time.monotonic() + 20
        while subprocess.run(wrapper, env=env, capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise SystemExit("avsmd did not answer within 20 s")
            time.sleep(0.1)
        subprocess.run([os.path.join(bindir, "avsm"), "--home", home, "add", venture], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        commands = {"python3 -c 'import json, socket'": [sys.executable, "-c", "import json, socket"],
                    "python3 -S -c 'import json, socket'": [sys.executable, "-S", "-c", "import json, socket"],
                    "BIN/avsm status (link)": wrapper,
                    "python3 COPY status (script)": [sys.executable, copy, "--home", home, "status"]}
        names = list(commands)
        for name in names:                   # warm the OS's file cache and the wrapper's bytecode
            for _ in range(3):
                timed(commands[name], env)
        times = {name: [] for name in names}
        for r in range(args.runs):
            for name in (names if r % 2 == 0 else names[::-1]):
                times[name].append(timed(commands[name], env))
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(15)
        shutil.rmtree(scratch, ignore_errors=True)
    base = statistics.median(times[names[0]])
    print(f"python {sys.version.split()[0]} ({sys.executable}); {args.runs} runs each, alternating; "
          f"PYTHONDONTWRITEBYTECODE=1; one venture at a 2 s cadence")
    print(f"  {'command':34} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'ratio':>6}")
    for name in names:
        med = statistics.median(times[name])
        print(f"  {name:34} {med * 1e3:10.1f} {min(times[name]) * 1e3:8.1f} {max(times[name]) * 1e3:8.1f} "
              f"{med / base:6.2f}")
    ratio = statistics.median(times[names[2]]) / base
    ok = ratio <= TARGET
    print(f"  ratio link status / baseline: {ratio:.2f}; target <= {TARGET}: {'met' if ok else 'MISSED'} "
          f"(against the baseline without site, as the wrapper starts: "
          f"{statistics.median(times[names[2]]) / statistics.median(times[names[1]]):.2f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
