#!/usr/bin/env python3
"""What --json costs against the text of the same verb, on a home with a few thousand records.

    python3 tests/bench/bench_json.py [--reports 1500] [--runs 7]

Builds a ledger as tests/bench/bench_chart.py does (two ventures' reports every 10 s, the gate's actions and
outcomes, an ask now and then), starts a real avsmd on it, then times each verb as a user runs it (a subprocess of
the real client), its text and its --json in turn, best of --runs each: status, status -v, asks, summary,
tail of the whole ledger, why of an action, doctor, checkpoint. Prints each verb's two times and their ratio.

Target (issue 35 item 4): --json at most 1.1x the text of the same verb. Exits 1 when a verb misses it. Not
collected by pytest (pyproject: norecursedirs = tests/bench).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench_chart import ROOT, build

TARGET = 1.1


def timed(argv):
    t0 = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True)
    return time.perf_counter() - t0, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=int, default=1500)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    top = tempfile.mkdtemp(prefix="avbj", dir="/tmp")
    daemon = None
    try:
        home = os.path.join(top, "h")
        count, counts = build(home, top, args.reports, 1)
        avsm_py = os.path.join(ROOT, "avsm.py")
        daemon = subprocess.Popen([sys.executable, avsm_py, "avsmd", "--home", home], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        client = [sys.executable, "-S", avsm_py, "--home", home]
        deadline = time.monotonic() + 30
        while subprocess.run(client + ["status"], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline and daemon.poll() is None, "avsmd did not answer within 30 s"
            time.sleep(0.1)
        tail = subprocess.run(client + ["tail", "--since", "0", "--json"], capture_output=True, text=True).stdout
        action = next(r["seq"] for r in map(json.loads, tail.splitlines()) if r.get("record", {}).get("kind") == "action")
        print(f"a ledger of {count} records ({counts['action']} actions, {counts['ask']} asks of v0), avsmd running; "
              f"best of {args.runs}")
        verbs = [["status"], ["status", "-v"], ["asks"], ["summary"], ["tail", "--since", "0"], ["why", str(action)],
                 ["doctor"], ["checkpoint"]]
        missed = []
        for verb in verbs:
            best, codes = {"text": None, "json": None}, set()
            for _ in range(args.runs):
                for form, extra in (("text", []), ("json", ["--json"])):
                    took, run = timed(client + verb + extra)
                    codes.add(run.returncode)       # doctor here: 78, the venture directories are bare
                    assert len(codes) == 1 and run.stdout, (verb, form, run.stderr)
                    if form == "json":
                        for line in run.stdout.splitlines():
                            assert json.loads(line)["schema"] == 1
                    best[form] = took if best[form] is None else min(best[form], took)
            ratio = best["json"] / best["text"]
            missed += [verb] if ratio > TARGET else []
            print(f"{' '.join(verb):<16} text {best['text']:.3f} s  --json {best['json']:.3f} s  ratio {ratio:.2f}"
                  f"  (exit {codes.pop()})")
        print(f"target: --json within {TARGET}x the text: {'met' if not missed else 'MISSED by ' + repr(missed)}")
        return 1 if missed else 0
    finally:
        if daemon is not None and daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(15)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
