#!/usr/bin/env python3
"""Round trip of a client command: `avsm status` against a running avsmd, against the bare interpreter cost.

    python3 tests/bench/bench_roundtrip.py [--runs 30]

A real avsmd on a temporary home with the counter example adopted. Timed, alternating, against the baseline
`python3 -c 'import json, socket'`:

- `avsm status`: the `avsm` console script, installed by `pip install` of this checkout into a fresh venv
  (when pip cannot build it here, e.g. offline, the same script pip writes, beside a copy of avsm.py). It
  imports avsm from cached bytecode. This is the target's row, against the baseline run on the same
  interpreter (a venv's python skips the site-packages of the python that made it, and starts faster).
- `python3 -m avsm status`, run beside avsm.py: the one-file copy, also from cached bytecode.
- `python3 avsm.py status`: the one-file copy run as a script, which Python compiles whole at every run
  (about 60 ms for avsm.py here) and never caches; shown, with its ratio, not judged.

The environment is as given minus PYTHONDONTWRITEBYTECODE (an installed module's bytecode is cached).
Target: avsm status / baseline <= 1.5 (medians).

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
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - t0


PIP_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from avsm import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def install(tmp, env):
    """Return the path of an installed `avsm` console script, and how it was installed."""
    venv, source = os.path.join(tmp, "venv"), os.path.join(tmp, "source")
    os.makedirs(source)
    for name in ("avsm.py", "pyproject.toml", "README.md"):     # a copy: pip builds in place (build/, *.egg-info)
        shutil.copy(os.path.join(ROOT, name), source)
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=120)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", source], check=True, capture_output=True,
                       timeout=300, env=env, cwd=tmp)
        return os.path.join(venv, "bin", "avsm"), "pip install . into a fresh venv"
    except (subprocess.SubprocessError, OSError):
        bindir = os.path.join(tmp, "bin")
        os.makedirs(bindir)
        shutil.copy(AVSM, bindir)
        path = os.path.join(bindir, "avsm")
        with open(path, "w") as fh:
            fh.write(PIP_SCRIPT.format(python=sys.executable))
        os.chmod(path, 0o755)
        return path, "pip could not build here: the script pip writes, beside a copy of avsm.py"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="avbt", dir="/tmp")
    home = os.path.join(tmp, "h")
    env = dict(os.environ, TMPDIR=tmp)
    env.pop("AVSMD_HOME", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    avsm_bin, how = install(tmp, env)
    python = os.path.join(os.path.dirname(avsm_bin), "python3")      # the interpreter the script runs on
    if not os.path.exists(python):
        python = sys.executable
    commands = {"python3 -c 'import json, socket'": [sys.executable, "-c", "import json, socket"],
                "  the same, avsm's interpreter": [python, "-c", "import json, socket"],
                "avsm status": [avsm_bin, "--home", home, "status"],
                "python3 -m avsm status": [sys.executable, "-m", "avsm", "--home", home, "status"],
                "python3 avsm.py status": [sys.executable, AVSM, "--home", home, "status"],
                "python3 avsm.py --help (no daemon)": [sys.executable, AVSM, "--help"]}
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
          f"avsmd running with examples/counter adopted; avsm installed by {how}")
    print(f"  {'command':34} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'ratio':>6}")
    for name in names:
        med = statistics.median(times[name])
        print(f"  {name:34} {med * 1e3:10.1f} {min(times[name]) * 1e3:8.1f} {max(times[name]) * 1e3:8.1f} "
              f"{med / base:6.2f}")
    installed = statistics.median(times["avsm status"]) / statistics.median(times["  the same, avsm's interpreter"])
    module = statistics.median(times["python3 -m avsm status"]) / base
    script = statistics.median(times["python3 avsm.py status"]) / base
    ok = installed <= TARGET
    print(f"  ratio avsm status (installed) / baseline on its interpreter: {installed:.2f}; target <= {TARGET}: {'met' if ok else 'MISSED'}")
    print(f"  ratio python3 -m avsm status / baseline: {module:.2f} (shown: the one-file copy from cached bytecode)")
    print(f"  ratio python3 avsm.py status / baseline: {script:.2f} (shown: a script is compiled whole at every run; "
          "Python caches no bytecode for it)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
