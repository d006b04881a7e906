#!/usr/bin/env python3
"""Leaving it running overnight (issue 14): `avsm status` at a glance and `avsm summary` on a large ledger.

    python3 tests/bench/bench_overnight.py [--ventures 200] [--records 100000] [--runs 7]

1. status: a ledger of N adopted ventures (cadence 1h, each with 16 trusted reports), a real avsmd started on
   it, then timed, alternating, medians of --runs: the baseline `python3 -c 'import json, socket'` (the
   interpreter's own start), `avsm status` (the one-line view, the target's row), `avsm status -v` (every
   venture's detail: what `status` printed before), and, with avsmd stopped, `avsm status` (the ledger folded
   by the client; shown, not judged).
2. summary: a ledger of --records records written one a second up to now (reports of 10 ventures, and now
   and then an action, its outcome, a refusal, an ask and its answer, guard readings), then timed: the same
   baseline, reading every record (avsm.read_records, the Python floor), `avsm summary` (the last 24h) and
   `avsm summary --since 0` (the whole ledger), each as a user runs it (a subprocess of the real client).

The client runs as `python3 -m avsm` beside avsm.py, so it imports avsm from cached bytecode as an installed
`avsm` does (`python3 avsm.py` compiles the whole file at every run, some 60 ms more).

Targets (issue 14): status with 200 ventures within 0.3 s, summary on a 100,000-record ledger within 1 s.
Prints the figures and their ratios to the baseline; exits 1 when a target is missed. Not collected by pytest.
"""

import argparse
import hashlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import avsm  # noqa: E402

AVSM = os.path.join(ROOT, "avsm.py")
CLIENT = [sys.executable, "-m", "avsm"]     # run beside avsm.py (cwd ROOT): imported from cached bytecode, as installed
MANDATE = """\
purpose: Keep the count below a million.
metric: count
controller: {kind: threshold, above: 1000000, action: reset}
cadence: 1h
permitted:
  - {name: reset, run: ./reset, cap: 6/hour, reversible: true}
guards:
  - {name: load, run: ./load, above: 50}
"""
STATUS_TARGET, SUMMARY_TARGET = 0.3, 1.0


class Writer:
    """Appends records to a new ledger in one transaction, through its triggers, as bench_doctor does."""

    def __init__(self, home):
        os.makedirs(home, mode=0o700)
        self.ledger = avsm.Ledger(os.path.join(home, "ledger.db"))
        self.ledger.db.execute("BEGIN IMMEDIATE")
        self.prev, self.seq = "0" * 64, 0

    def put(self, at, record):
        self.seq += 1
        text = avsm.canonical(record)
        digest = hashlib.sha256(f"{self.prev}\n{self.seq}\n{at}\n{text}".encode()).hexdigest()
        self.ledger.db.execute("INSERT INTO records (seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)",
                               (self.seq, at, self.prev, digest, text))
        self.prev = digest
        return self.seq

    def close(self):
        self.ledger.db.execute("COMMIT")
        self.ledger.db.close()


def venture_dir(top, name):
    d = os.path.join(top, name)
    os.makedirs(d)
    for fname, text in (("mandate.yaml", MANDATE), ("report", "#!/bin/sh\necho 5\n"), ("reset", "#!/bin/sh\ntrue\n"),
                        ("load", "#!/bin/sh\necho 1\n")):
        with open(os.path.join(d, fname), "w") as fh:
            fh.write(text)
        os.chmod(os.path.join(d, fname), 0o755)
    return d


def mandate(name, d):
    return {"kind": "mandate", "claim": "declared", "venture": name, "directory": d, "text": MANDATE,
            "sha256": hashlib.sha256(MANDATE.encode()).hexdigest(), "summary": f"mandate adopted for {name}"}


def report(name, value):
    return {"kind": "report", "claim": "measured", "venture": name, "metric": "count", "value": value,
            "status": "trusted", "plausible": True, "note": "", "summary": f"count = {value}"}


def build_status(home, top, n):
    """N adopted ventures, each with 16 trusted reports an hour apart, the last an hour ago."""
    w, now = Writer(home), int(time.time())
    names = [f"v{i:03d}" for i in range(n)]
    for name in names:
        w.put(now - 17 * 3600, mandate(name, venture_dir(top, name)))
    for k in range(16):
        for i, name in enumerate(names):
            w.put(now - (16 - k) * 3600, report(name, (i + k * 7) % 13))
    w.close()


def build_summary(home, top, n, ventures=10):
    """n records, one a second up to now: mostly reports; every 50th an action and its outcome, a refusal, an
    ask and its answer, a guard reading."""
    w, start = Writer(home), int(time.time()) - n
    names = [f"v{i}" for i in range(ventures)]
    for name in names:
        w.put(start, mandate(name, venture_dir(top, name)))
    i = 0
    while w.seq < n:
        at, name = start + w.seq, names[i % ventures]
        i += 1
        w.put(at, report(name, 5 + i % 8))
        if i % 51 == 0:
            a = w.put(at, {"kind": "action", "claim": "measured", "venture": name, "lever": "reset", "by": "controller",
                           "proof": {"rule": "threshold", "premises": [], "steps": [], "trigger": None}, "summary": "reset runs"})
            w.put(at, {"kind": "outcome", "claim": "measured", "venture": name, "lever": "reset", "action": a,
                       "ok": i % 100 != 0, "status": "exit 0", "duration": 0, "note": "", "summary": "reset ended"})
            w.put(at, {"kind": "refusal", "claim": "measured", "venture": name, "lever": "reset",
                       "why": f"reset reached its cap 6/hour: {6 + i % 3} runs in the window", "summary": "reset refused"})
            q = w.put(at, {"kind": "ask", "claim": "measured", "venture": name, "about": "lever", "lever": "reset",
                           "question": "run reset?", "summary": "asking"})
            if i % 200:
                w.put(at, {"kind": "denial", "claim": "declared", "venture": name, "ask": q, "summary": "no"})
            w.put(at, {"kind": "guard.load", "claim": "measured", "venture": name, "value": 60 if i % 150 == 0 else 1,
                       "status": "trusted", "plausible": True, "past": i % 150 == 0, "summary": "load"})
    w.close()
    return w.seq


def timed(argv, env):
    t0 = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    return time.perf_counter() - t0, run


def medians(commands, runs, env):
    """Run each (label, argv) in turn, `runs` rounds; return {label: (median seconds, last run)}."""
    times, last = {label: [] for label, _ in commands}, {}
    for _ in range(runs):
        for label, argv in commands:
            took, last[label] = timed(argv, env)
            times[label].append(took)
    return {label: (statistics.median(times[label]), last[label]) for label, _ in commands}


def wait_socket(home, env, daemon):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SystemExit(f"avsmd exited {daemon.returncode}")
        if subprocess.run([sys.executable, AVSM, "--home", home, "status"], capture_output=True, env=env).returncode == 0:
            return
        time.sleep(0.2)
    raise SystemExit("avsmd did not answer within 60 s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ventures", type=int, default=200)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    env = dict(os.environ, LANG="C.UTF-8")
    env.pop("AVSMD_HOME", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    baseline = ("baseline: python3 -c 'import json, socket'", [sys.executable, "-c", "import json, socket"])
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {ROOT!r}); import avsm"], check=True)   # cache bytecode
    top = tempfile.mkdtemp(prefix="avbo", dir="/tmp")
    daemon, ok = None, True
    try:
        # 1. status with N ventures
        home = os.path.join(top, "s")
        build_status(home, top, args.ventures)
        daemon = subprocess.Popen([sys.executable, AVSM, "avsmd", "--home", home], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        wait_socket(home, env, daemon)
        time.sleep(3)                       # the first round of reports (one each) is written
        cli = CLIENT + ["--home", home]
        got = medians([baseline, ("avsm status (one line per venture)", cli + ["status"]),
                       ("avsm status -v (the detail, as status printed before)", cli + ["status", "-v"])], args.runs, env)
        lines = got["avsm status (one line per venture)"][1].stdout.splitlines()
        assert len(lines) == args.ventures, (len(lines), lines[:3])
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(20)
        stopped = medians([("avsm status, avsmd stopped (the ledger folded)", cli + ["status"])], max(3, args.runs // 2), env)
        base = got[baseline[0]][0]
        print(f"status, {args.ventures} ventures ({len(lines)} lines; e.g. {lines[0]!r}):")
        for label, (took, run) in list(got.items()) + list(stopped.items()):
            print(f"  {label:58} {took:6.3f} s  ratio {took / base:5.2f}  exit {run.returncode}")
        took = got["avsm status (one line per venture)"][0]
        met = took <= STATUS_TARGET
        ok &= met
        print(f"  target: status within {STATUS_TARGET} s with {args.ventures} ventures: {'met' if met else 'MISSED'}")

        # 2. summary on a large ledger
        home = os.path.join(top, "m")
        t0 = time.perf_counter()
        count = build_summary(home, top, args.records)
        print(f"summary, a ledger of {count} records (built in {time.perf_counter() - t0:.1f} s):")
        t0 = time.perf_counter()
        db = avsm.open_ledger_ro(os.path.join(home, "ledger.db"))
        rows = sum(1 for _ in avsm.read_records(db))
        db.close()
        floor = time.perf_counter() - t0
        cli = CLIENT + ["--home", home]
        got = medians([baseline, ("avsm summary (the last 24h)", cli + ["summary"]),
                       ("avsm summary --since 0 (the whole ledger)", cli + ["summary", "--since", "0"])], args.runs, env)
        base = got[baseline[0]][0]
        print(f"  {'floor: read every record in this process (' + str(rows) + ')':58} {floor:6.3f} s  ratio {floor / base:5.2f}")
        for label, (took, run) in got.items():
            print(f"  {label:58} {took:6.3f} s  ratio {took / base:5.2f}  exit {run.returncode}")
        print("  " + "\n  ".join(got["avsm summary (the last 24h)"][1].stdout.splitlines()[:8]))
        worst = max(got["avsm summary (the last 24h)"][0], got["avsm summary --since 0 (the whole ledger)"][0])
        met = worst <= SUMMARY_TARGET
        ok &= met
        print(f"  target: summary within {SUMMARY_TARGET} s on {count} records: {'met' if met else 'MISSED'}")
        return 0 if ok else 1
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
