#!/usr/bin/env python3
"""avsm chart of a venture with many reports, read from a large ledger with avsmd stopped.

    python3 tests/bench/bench_chart.py [--reports 10000] [--others 1]

Builds a ledger the way the warden writes it (as tests/bench/bench_doctor.py does): the charted venture's
reports every 10 s (now and then an implausible or a failed one), the gate's own actions and outcomes when a
report crosses the bound and the cap allows, an ask now and then; and as many reports again for each other
venture, interleaved, so the chart must find its venture's records among the rest. Then times, in the same run
(best of three each):

- the baseline: `avsm tail 10` on the same ledger (the interpreter, avsm.py's import, opening the ledger);
- `avsm chart VENTURE` as a user runs it (a subprocess of the real client), its SVG parsed afterwards to check
  it holds one point per trusted report.

Target (issue 14): the chart of a 10,000-report venture within 1 s. Prints both times and their ratio. Exits 1
when the target is missed. Not collected by pytest (pyproject: norecursedirs = tests/bench).
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import avsm  # noqa: E402

MANDATE = """\
purpose: Keep the count below ten.
metric: count
controller: {kind: threshold, above: 10, action: reset}
cadence: 10s
range: [0, 100]
permitted:
  - {name: reset, run: ./reset, cap: 6/hour, reversible: true}
"""
TARGET = 1.0


def build(home, top, reports, others):
    """Write `reports` reports for venture v0 and as many for each other venture into HOME/ledger.db; return
    (records, trusted reports of v0, actions of v0, asks of v0)."""
    os.makedirs(home, mode=0o700)
    ledger = avsm.Ledger(os.path.join(home, "ledger.db"))
    ledger.db.execute("BEGIN IMMEDIATE")
    prev, seq, at, states = "0" * 64, 0, 1_790_000_000, {}
    counts = {"trusted": 0, "action": 0, "ask": 0}

    def put(record):
        nonlocal prev, seq
        seq += 1
        text = avsm.canonical(record)
        digest = hashlib.sha256(f"{prev}\n{seq}\n{at}\n{text}".encode()).hexdigest()
        ledger.db.execute("INSERT INTO records (seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)",
                          (seq, at, prev, digest, text))
        prev = digest
        avsm.fold_ledger(states, seq, at, record)
        return seq

    names = [f"v{i}" for i in range(1 + others)]
    for name in names:
        d = os.path.join(top, name)
        os.makedirs(d)
        with open(os.path.join(d, "mandate.yaml"), "w") as fh:
            fh.write(MANDATE)
        put({"kind": "mandate", "claim": "declared", "venture": name, "directory": d, "text": MANDATE,
             "sha256": hashlib.sha256(MANDATE.encode()).hexdigest(), "summary": f"mandate adopted for {name}"})
    for i in range(reports):
        at += 10
        for name in names:
            value = 5 + i % 8                       # 5 .. 12: crosses 10 now and then
            if i % 97 == 50:
                record = {"value": 1000, "status": "implausible", "plausible": False,
                          "note": "1000 is outside range [0, 100]", "summary": "count = 1000 implausible: outside range"}
            elif i % 499 == 250:
                record = {"value": None, "status": "failed", "plausible": False, "note": "exit 1",
                          "summary": "count failed: exit 1"}
            else:
                record = {"value": value, "status": "trusted", "plausible": True, "note": "",
                          "summary": f"count = {value}"}
                counts["trusted"] += name == "v0"
            r = put(dict(record, kind="report", claim="measured", venture=name, metric="count"))
            if record["status"] != "trusted":
                continue
            state = states[name]
            for side, lever, seqs, why in avsm.decide(state, r, value):
                verdict = avsm.prove(state, lever, at, ("threshold", seqs, [f"report #{r}: {why}"]))
                if not verdict.ok:
                    continue                        # at the cap: the chart draws no refusal
                a = put({"kind": "action", "claim": "measured", "venture": name, "lever": lever, "proof": verdict.proof,
                         "by": "controller", "side": side, "basis": verdict.asked["basis"], "summary": f"{lever} runs: {why}"})
                put({"kind": "outcome", "claim": "measured", "venture": name, "lever": lever, "action": a, "ok": True,
                     "status": "exit 0", "duration": 0, "note": "", "summary": f"{lever} ok"})
                counts["action"] += name == "v0"
            if i % 1000 == 999 and name == "v0":
                put({"kind": "ask", "claim": "measured", "venture": name, "about": "stuck", "question": "stuck?",
                     "lever": "reset", "summary": "v0 is stuck: reset reached its cap"})
                counts["ask"] += 1
    ledger.db.execute("COMMIT")
    ledger.db.close()
    return seq, counts


def best_of(argv, times=3):
    """Return (the fastest of `times` runs in seconds, the last run's CompletedProcess)."""
    best, run = None, None
    for _ in range(times):
        t0 = time.perf_counter()
        run = subprocess.run(argv, capture_output=True, text=True)
        took = time.perf_counter() - t0
        best = took if best is None else min(best, took)
    return best, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=int, default=10_000)
    ap.add_argument("--others", type=int, default=1, help="other ventures with as many reports, interleaved")
    args = ap.parse_args()
    top = tempfile.mkdtemp(prefix="avbc", dir="/tmp")
    try:
        home = os.path.join(top, "h")
        t0 = time.perf_counter()
        count, counts = build(home, top, args.reports, args.others)
        print(f"built {count} records ({args.reports} reports of v0, {counts['trusted']} trusted, {counts['action']} "
              f"actions, {counts['ask']} asks; {args.others} other venture(s) as big) in {time.perf_counter() - t0:.1f} s")
        client = [sys.executable, os.path.join(ROOT, "avsm.py"), "--home", home]
        base, tail = best_of(client + ["tail", "10"])
        took, chart = best_of(client + ["chart", "v0"])
        assert tail.returncode == 0, tail.stderr
        assert chart.returncode == 0, chart.stderr
        root = ET.fromstring(chart.stdout)
        points = [el for el in root.iter("{http://www.w3.org/2000/svg}circle") if el.get("class") == "report trusted"]
        sound = len(points) == counts["trusted"]
        print(f"baseline (avsm tail 10: start, import, open the ledger): {base:.3f} s")
        print(f"avsm chart v0: {took:.3f} s, {len(chart.stdout) / 1e6:.2f} MB of SVG, {len(points)} points "
              f"({'one per trusted report' if sound else 'NOT one per trusted report'})")
        print(f"ratio chart / baseline: {took / base:.2f}; target: chart within {TARGET:.0f} s: "
              f"{'met' if took <= TARGET else 'MISSED'}")
        return 0 if took <= TARGET and sound else 1
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
