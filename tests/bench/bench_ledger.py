#!/usr/bin/env python3
"""Ledger benchmarks: what avsm's ledger costs over bare SQLite and bare hashlib.

    python3 tests/bench/bench_ledger.py [--rows 500] [--rounds 7] [--records 100000] [--only append|verify]

1. appends/second through avsm.Ledger.append (no lock check, and with a still_ours callback that stats and
   reads a small lock file as avsmd does) against a bare INSERT of the same rows with the same pragmas
   (journal_mode=DELETE, synchronous=FULL), one BEGIN IMMEDIATE ... COMMIT per row, on the same disk.
   Runs rotate their order each round; the median of the rounds counts. Target: avsm / bare >= 0.8.
2. chain verification of 100,000 records: avsm.verify_chain against bare hashlib.sha256 over the same bytes
   read with one SELECT. Target: bare time / avsm time >= 0.5.

Not collected by pytest (pyproject: norecursedirs = tests/bench). Exits 1 when a target is missed.
"""

import argparse
import hashlib
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import avsm  # noqa: E402

AT0 = 1_700_000_000
APPEND_TARGET = 0.8
VERIFY_TARGET = 0.5
BARE_SCHEMA = """CREATE TABLE records(seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, prev TEXT NOT NULL,
                 hash TEXT NOT NULL, weight INTEGER NOT NULL DEFAULT 1, record TEXT NOT NULL)"""


def sample_record(i):
    """A report of the size avsmd writes every cadence."""
    return {"kind": "report", "claim": "measured", "venture": "counter", "metric": "count", "value": i,
            "plausible": True, "note": "", "summary": f"count {i}: plausible, inside 0..10"}


def chained_rows(n):
    """(seq, at, prev, hash, text) for n records, chained as avsm chains them."""
    out, prev = [], avsm.ZERO_HASH
    for seq in range(1, n + 1):
        text = avsm.canonical(sample_record(seq))
        h = avsm.chain_hash(prev, seq, AT0 + seq, text)
        out.append((seq, AT0 + seq, prev, h, text))
        prev = h
    return out


# ---------------------------------------------------------------------------
# 1. appends
# ---------------------------------------------------------------------------

def run_avsm(path, n, lock_path=None):
    still_ours = None
    if lock_path is not None:
        fd = os.open(lock_path, os.O_RDONLY)
        pid = os.getpid()

        def still_ours():
            # as Daemon.lock_is_ours: the lock file is still the one we hold, and it names us
            st, mine = os.stat(lock_path), os.fstat(fd)
            return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino) and avsm.read_lock_pid(lock_path) == pid
    ledger = avsm.Ledger(path, still_ours=still_ours)
    records = [sample_record(i) for i in range(1, n + 1)]
    t0 = time.perf_counter()
    for i, record in enumerate(records, 1):
        ledger.append(record, AT0 + i)
    elapsed = time.perf_counter() - t0
    ledger.close()
    if lock_path is not None:
        os.close(fd)
    return elapsed


def run_bare(path, n, rows):
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(BARE_SCHEMA)
    t0 = time.perf_counter()
    for row in rows[:n]:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, ?, 1, ?)", row)
        db.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    db.close()
    return elapsed


def bench_append(n, rounds):
    work = tempfile.mkdtemp(prefix="avbench", dir="/tmp")
    lock_path = os.path.join(work, "avsmd.lock")
    with open(lock_path, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    rows = chained_rows(n)
    variants = {
        "bare INSERT": lambda p: run_bare(p, n, rows),
        "avsm.Ledger.append": lambda p: run_avsm(p, n),
        "avsm.Ledger.append + still_ours": lambda p: run_avsm(p, n, lock_path),
    }
    names = list(variants)
    times = {name: [] for name in names}
    try:
        # one unmeasured warm-up of each, then rounds with the order rotated
        for name in names:
            variants[name](os.path.join(work, f"warm-{len(times[name])}-{names.index(name)}.db"))
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                path = os.path.join(work, f"r{r}-{names.index(name)}.db")
                times[name].append(variants[name](path))
                os.unlink(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bare = statistics.median(times["bare INSERT"])
    print(f"appends: {n} rows, one transaction each, journal_mode=DELETE, synchronous=FULL, on /tmp; "
          f"{rounds} rounds, order rotated")
    print(f"  {'variant':34} {'median s':>9} {'min s':>8} {'max s':>8} {'appends/s':>10} {'us/append':>10} {'ratio':>6}")
    ratios = {}
    for name in names:
        med = statistics.median(times[name])
        ratios[name] = bare / med
        print(f"  {name:34} {med:9.3f} {min(times[name]):8.3f} {max(times[name]):8.3f} {n / med:10.0f} "
              f"{med / n * 1e6:10.1f} {ratios[name]:6.2f}")
    worst = min(ratios["avsm.Ledger.append"], ratios["avsm.Ledger.append + still_ours"])
    ok = worst >= APPEND_TARGET
    print(f"  ratio avsm/bare appends per second: {ratios['avsm.Ledger.append']:.2f} (no lock check), "
          f"{ratios['avsm.Ledger.append + still_ours']:.2f} (with still_ours); "
          f"target >= {APPEND_TARGET}: {'met' if ok else 'MISSED'}")
    return ok


# ---------------------------------------------------------------------------
# 2. verification
# ---------------------------------------------------------------------------

def build_big(path, n):
    """n chained records in one transaction of plain INSERTs (avsm's triggers still check each)."""
    avsm.Ledger(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.executemany("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, ?, 1, ?)",
                   chained_rows(n))
    db.execute("COMMIT")
    db.close()


def verify_avsm(path):
    db = avsm.open_ledger_ro(path)
    t0 = time.perf_counter()
    checked, problem = avsm.verify_chain(db)
    elapsed = time.perf_counter() - t0
    db.close()
    assert problem is None, problem
    return elapsed, checked


def verify_bare(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    sha256 = hashlib.sha256
    t0 = time.perf_counter()
    n = 0
    for seq, at, prev, _, text in db.execute("SELECT seq, at, prev, hash, record FROM records ORDER BY seq"):
        sha256(f"{prev}\n{seq}\n{at}\n{text}".encode()).hexdigest()
        n += 1
    elapsed = time.perf_counter() - t0
    db.close()
    return elapsed, n


def bench_verify(n, rounds):
    work = tempfile.mkdtemp(prefix="avbench", dir="/tmp")
    path = os.path.join(work, "ledger.db")
    try:
        t0 = time.perf_counter()
        build_big(path, n)
        built = time.perf_counter() - t0
        variants = {"bare SELECT + hashlib.sha256": verify_bare, "avsm.verify_chain": verify_avsm}
        names = list(variants)
        times = {name: [] for name in names}
        for name in names:
            variants[name](path)      # warm the page cache
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                elapsed, count = variants[name](path)
                assert count == n, (name, count)
                times[name].append(elapsed)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bare = statistics.median(times[names[0]])
    print(f"verification: {n} records (built in {built:.1f} s), {rounds} rounds, order alternated")
    print(f"  {'variant':34} {'median s':>9} {'min s':>8} {'max s':>8} {'records/s':>10} {'ratio':>6}")
    for name in names:
        med = statistics.median(times[name])
        print(f"  {name:34} {med:9.3f} {min(times[name]):8.3f} {max(times[name]):8.3f} {n / med:10.0f} "
              f"{bare / med:6.2f}")
    ratio = bare / statistics.median(times["avsm.verify_chain"])
    ok = ratio >= VERIFY_TARGET
    print(f"  ratio bare time / avsm time: {ratio:.2f}; target >= {VERIFY_TARGET}: {'met' if ok else 'MISSED'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--only", choices=("append", "verify"))
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, avsm {avsm.VERSION}")
    results = []
    if args.only in (None, "append"):
        results.append(bench_append(args.rows, args.rounds))
    if args.only in (None, "verify"):
        if results:
            print()
        results.append(bench_verify(args.records, max(3, args.rounds // 2 + 1)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
