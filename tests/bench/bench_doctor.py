#!/usr/bin/env python3
"""doctor on a large ledger: every proof re-checked by the gate itself, in one pass.

    python3 tests/bench/bench_doctor.py [--records 100000,1000000] [--ventures 10]

Builds a ledger of N records (100,000 and 1,000,000 unless told) the way the warden writes them (each venture's reports; when one crosses the
bound and the cap allows, the gate's own action and its outcome), appended in one transaction through the
ledger's triggers. Then times, in the same run:

- the floor: a bare chain walk with sqlite3 and hashlib, every link recomputed, which doctor must do anyway;
- `avsm doctor` as a user runs it (a subprocess of the real client), which also folds the ledger once and
  re-checks every action with prove.

Target (issues 10, 24): doctor within 5 s per 100,000 records at each size, and linear beyond. Prints both
times, their ratio, and the seconds per 100,000 records at each size. Exits 1 when the
target is missed. Not collected by pytest (pyproject: norecursedirs = tests/bench).
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import avsm  # noqa: E402

MANDATE = """\
purpose: Keep the count below ten.
metric: count
controller: {kind: threshold, above: 10, action: reset}
cadence: 10s
permitted:
  - {name: reset, run: ./reset, cap: 6/hour, reversible: true}
"""
TARGET = 5.0


def build(home, top, n, ventures, start=1_700_000_000, step=1):
    """Write n records for `ventures` ventures into HOME/ledger.db, a report every `step` seconds from unix
    time `start`; return how many records and how many of them are actions."""
    os.makedirs(home, mode=0o700)
    ledger = avsm.Ledger(os.path.join(home, "ledger.db"))
    ledger.db.execute("BEGIN IMMEDIATE")
    prev, seq, at, states, actions = "0" * 64, 0, start, {}, 0

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

    names = [f"v{i}" for i in range(ventures)]
    for name in names:
        d = os.path.join(top, name)
        os.makedirs(d)
        with open(os.path.join(d, "mandate.yaml"), "w") as fh:
            fh.write(MANDATE)
        for prog in ("report", "reset"):
            with open(os.path.join(d, prog), "w") as fh:
                fh.write("#!/bin/sh\necho 5\n")
            os.chmod(os.path.join(d, prog), 0o755)
        put({"kind": "mandate", "claim": "declared", "venture": name, "directory": d, "text": MANDATE,
             "sha256": hashlib.sha256(MANDATE.encode()).hexdigest(), "summary": f"mandate adopted for {name}"})
    i = 0
    while seq < n:
        at += step
        name = names[i % ventures]
        value = 5 + (i // ventures) % 8           # 5 .. 12: crosses 10 now and then
        i += 1
        r = put({"kind": "report", "claim": "measured", "venture": name, "metric": "count", "value": value,
                 "status": "trusted", "plausible": True, "note": "", "summary": f"count = {value}"})
        state = states[name]
        for side, lever, reports, why in avsm.decide(state, r, value):
            verdict = avsm.prove(state, lever, at, ("threshold", reports, [f"report #{r}: {why}"]))
            if not verdict.ok:
                put({"kind": "refusal", "claim": "measured", "venture": name, "lever": lever, "by": "controller",
                     "side": side, "why": verdict.why, "reports": reports, "summary": f"{lever} refused: {verdict.why}"})
                continue
            a = put({"kind": "action", "claim": "measured", "venture": name, "lever": lever, "proof": verdict.proof,
                     "by": "controller", "side": side, "basis": verdict.asked["basis"], "summary": f"{lever} runs: {why}"})
            put({"kind": "outcome", "claim": "measured", "venture": name, "lever": lever, "action": a, "ok": True,
                 "status": "exit 0", "duration": 0, "note": "", "summary": f"{lever} ok"})
            actions += 1
    ledger.db.execute("COMMIT")
    ledger.db.close()
    return seq, actions


def bare_walk(path):
    """The floor: a bare chain walk, plain sqlite3 and hashlib, every link recomputed and nothing else."""
    import sqlite3
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    prev, n = "0" * 64, 0
    for seq, at, p, h, text in db.execute("SELECT seq, at, prev, hash, record FROM records ORDER BY seq"):
        assert p == prev and hashlib.sha256(f"{prev}\n{seq}\n{at}\n{text}".encode()).hexdigest() == h, seq
        prev, n = h, n + 1
    db.close()
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", default="100000,1000000", help="ledger sizes, comma-separated")
    ap.add_argument("--ventures", type=int, default=10)
    args = ap.parse_args()
    rows, ok = [], True
    for size in (int(n) for n in args.records.split(",")):
        top = tempfile.mkdtemp(prefix="avbd", dir="/tmp")
        try:
            home = os.path.join(top, "h")
            t0 = time.perf_counter()
            count, actions = build(home, top, size, args.ventures)
            print(f"built {count} records ({actions} actions, {args.ventures} ventures) in {time.perf_counter() - t0:.1f} s")
            t0 = time.perf_counter()
            assert bare_walk(os.path.join(home, "ledger.db")) == count
            base = time.perf_counter() - t0
            t0 = time.perf_counter()
            run = subprocess.run([sys.executable, os.path.join(ROOT, "avsm.py"), "--home", home, "doctor"],
                                 capture_output=True, text=True)
            took = time.perf_counter() - t0
            proofs = "ok    every proof in the ledger re-checks" in run.stdout and run.returncode == 69
            if not proofs:
                print(run.stdout[-2000:], run.stderr[-2000:])
            per = took / count * 100_000
            ok &= proofs and per <= TARGET
            rows.append((count, base, took, per, proofs))
        finally:
            shutil.rmtree(top, ignore_errors=True)
    print(f"{'records':>9} {'bare walk s':>11} {'doctor s':>9} {'ratio':>6} {'s/100k':>7}  proofs re-check")
    for count, base, took, per, proofs in rows:
        print(f"{count:>9} {base:>11.2f} {took:>9.2f} {took / base:>6.2f} {per:>7.2f}  {'yes' if proofs else 'NO'}")
    if len(rows) > 1:
        print(f"doctor s/100k at {rows[-1][0]} over at {rows[0][0]}: {rows[-1][3] / rows[0][3]:.2f} (1.00: linear)")
    print(f"target: at most {TARGET:.0f} s per 100,000 records at every size: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
