#!/usr/bin/env python3
"""Restart latency of a kept `run` program: from its exit to its next start, the ledger's `exit` record included.

    python3 tests/bench/bench_restart.py [--ventures 15] [--rounds 2]

A real avsmd on a temporary home keeps N ventures whose `run` is a bash script that appends
`$EPOCHREALTIME $$` to a file and then execs `sleep 3600` (restart: always; a threshold above 1e9 on a report
of `echo 1` at a 1h cadence, so nothing else happens). Each round, once a venture's program has been up
for more than 10 s (so no back-off applies: open point 31), the bench takes the time and SIGKILLs the
program's whole group (its pgid is the pid of the ledger's `start` record); the latency is the next stamp
minus that time. Between the two avsm reaps the program, appends the `exit` record (SQLite,
synchronous=FULL) and starts it again; the bench checks that every kill has its `exit` record before the
next `start`. The baseline, measured in the same run on the same script, is a 17-line keeper (Popen with
process_group=0, a pidfd in select, restart at once, no record). Target: avsm median <= 10 ms.
Published anchors, printed beside: supervisord ~1010 ms, a 40-line keeper ~2.6 ms.

Not collected by pytest (pyproject: norecursedirs = tests/bench). Exits 1 when the target is missed.
"""

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AVSM = os.path.join(ROOT, "avsm.py")
TARGET_MS = 10.0
UPTIME = 10.5          # seconds a program runs before it is killed: past QUICK_DEATH, so no back-off

RUN = "#!/bin/bash\necho \"$EPOCHREALTIME $$\" >> started\nexec sleep 3600\n"
MANDATE = """purpose: Keep a program up.
metric: one
controller: {kind: threshold, above: 1000000000, action: noop}
cadence: 1h
restart: always
permitted:
  - {name: noop, run: ./noop, cap: 1/hour, reversible: true}
"""
KEEPER = r"""
import os, select, subprocess, sys
procs = {}
def start(d):
    p = subprocess.Popen(["/bin/sh", "-c", "./run"], cwd=d, process_group=0, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs[os.pidfd_open(p.pid)] = (p, d)
for d in sys.argv[1:]:
    start(d)
while True:
    ready, _, _ = select.select(list(procs), [], [])
    for fd in ready:
        p, d = procs.pop(fd)
        os.close(fd)
        p.wait()
        start(d)
"""


def make(root, name, mandate=True):
    d = os.path.join(root, name)
    os.makedirs(d)
    files = {"run": RUN, "report": "#!/bin/sh\necho 1\n", "noop": "#!/bin/sh\ntrue\n"}
    if mandate:
        files["mandate.yaml"] = MANDATE
    for fname, text in files.items():
        with open(os.path.join(d, fname), "w") as fh:
            fh.write(text)
        if fname != "mandate.yaml":
            os.chmod(os.path.join(d, fname), 0o755)
    return d


def stamps(d):
    """[(time, pid)] the program appended at each start."""
    try:
        with open(os.path.join(d, "started")) as fh:
            return [(float(t.replace(",", ".")), int(p)) for t, p in (line.split() for line in fh if line.strip())]
    except FileNotFoundError:
        return []


def wait_stamps(d, n, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = stamps(d)
        if len(s) >= n:
            return s
        time.sleep(0.002)
    raise SystemExit(f"{d}: no start #{n} within {timeout} s")


def records(home):
    db = sqlite3.connect(f"file:{home}/ledger.db?mode=ro", uri=True, timeout=10)
    try:
        return [(s, json.loads(r)) for s, r in db.execute("SELECT seq, record FROM records ORDER BY seq")]
    finally:
        db.close()


def kill_and_time(d, count):
    """SIGKILL the group of the program's latest start; return ms from the kill to the next start's stamp."""
    t, pid = stamps(d)[-1]
    pgid = os.getpgid(pid)
    t_kill = time.time()
    os.killpg(pgid, signal.SIGKILL)
    t_next, _ = wait_stamps(d, count + 1)[count]
    return (t_next - t_kill) * 1e3, pgid


def summary(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[int(0.9 * (len(xs) - 1))], xs[0], xs[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ventures", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not shutil.which("bash") or "EPOCHREALTIME" not in subprocess.run(
            ["bash", "-c", "echo ${EPOCHREALTIME:+EPOCHREALTIME}"], capture_output=True, text=True).stdout:
        raise SystemExit("bench_restart needs bash 5 ($EPOCHREALTIME)")
    tmp = tempfile.mkdtemp(prefix="avbr", dir="/tmp")
    home = os.path.join(tmp, "h")
    env = dict(os.environ)
    env.pop("AVSMD_HOME", None)
    daemon = keeper = None
    try:
        dirs = [make(tmp, f"v{i:02d}") for i in range(args.ventures)]
        daemon = subprocess.Popen([sys.executable, AVSM, "avsmd", "--home", home], env=env, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "avsmd.err"), "w"))
        deadline = time.monotonic() + 15
        while not os.path.exists(os.path.join(home, "sock")):
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("avsmd did not start")
            time.sleep(0.05)
        for d in dirs:
            subprocess.run([sys.executable, AVSM, "--home", home, "add", d], env=env, check=True,
                           stdout=subprocess.DEVNULL)
        for d in dirs:
            wait_stamps(d, 1)

        avsm_ms, killed = [], []
        for r in range(args.rounds):
            for d in dirs:
                t_last = stamps(d)[-1][0]
                time.sleep(max(0.0, t_last + UPTIME - time.time()))
                ms, pgid = kill_and_time(d, r + 1)
                avsm_ms.append(ms)
                killed.append((os.path.basename(d), pgid))
        time.sleep(0.3)

        # every kill has its exit record, written before the next start record of that venture
        recs = records(home)
        missing = 0
        for venture, pgid in killed:
            seqs = [(s, r["kind"], r.get("pid")) for s, r in recs if r["venture"] == venture and r["kind"] in ("start", "exit")]
            exit_at = [i for i, (_, kind, pid) in enumerate(seqs) if kind == "exit" and pid == pgid]
            if not exit_at or exit_at[0] + 1 >= len(seqs) or seqs[exit_at[0] + 1][1] != "start":
                missing += 1
        backoff = [r for _, r in recs if r["kind"] == "exit" and r.get("restart_in")]

        # the baseline: a bare keeper on the same scripts, killed as often
        kdirs = [make(tmp, f"k{i:02d}", mandate=False) for i in range(args.ventures)]
        keeper = subprocess.Popen([sys.executable, "-c", KEEPER] + kdirs, start_new_session=True)
        for d in kdirs:
            wait_stamps(d, 1)
        keeper_ms = []
        for r in range(args.rounds):
            for d in kdirs:
                time.sleep(0.2)
                keeper_ms.append(kill_and_time(d, r + 1)[0])
    finally:
        for p in (daemon, keeper):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM) if p is daemon else os.killpg(p.pid, signal.SIGKILL)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        for d in [os.path.join(tmp, x) for x in os.listdir(tmp)]:
            for t, pid in stamps(d) if os.path.isdir(d) else []:
                try:
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(tmp, ignore_errors=True)

    a, k = summary(avsm_ms), summary(keeper_ms)
    print(f"python {sys.version.split()[0]}; {os.cpu_count()} cpus; {len(avsm_ms)} kills of avsm-kept programs "
          f"({args.ventures} ventures x {args.rounds} rounds, each up > {UPTIME:g} s), {len(keeper_ms)} of the keeper's")
    print("restart latency: SIGKILL of the program's group -> the next start's first line (ms)")
    print(f"  {'what restarts it':34} {'median':>8} {'p90':>8} {'min':>8} {'max':>8} {'ratio':>6}")
    print(f"  {'bare keeper, no record (baseline)':34} {k[0]:8.2f} {k[1]:8.2f} {k[2]:8.2f} {k[3]:8.2f} {1:6.2f}")
    print(f"  {'avsmd (exit record, then start)':34} {a[0]:8.2f} {a[1]:8.2f} {a[2]:8.2f} {a[3]:8.2f} {a[0] / k[0]:6.2f}")
    print(f"  anchors (published): supervisord ~1010 ms, a 40-line keeper ~2.6 ms")
    print(f"  exit record before the next start: {len(killed) - missing} of {len(killed)}; "
          f"restarts that waited a back-off: {len(backoff)}")
    ok = a[0] <= TARGET_MS and missing == 0 and not backoff
    print(f"  target avsm median <= {TARGET_MS:g} ms, every exit recorded, no back-off: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
