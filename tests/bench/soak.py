#!/usr/bin/env python3
"""The fault campaign of tests/test_faults.py at scale: a plain script, not collected by pytest
(pyproject: norecursedirs = tests/bench).

    python3 tests/bench/soak.py [--quick] [--seed N]

It runs the same campaigns the default test run does, with more faults each: 50 warden SIGKILLs while
levers run, 50 SIGKILLs of avsmd mid-burst of appends, avsmd and warden killed together with stubborn
orphans (and just after a lever started), the disk full (for real on a tmpfs, and by RLIMIT_FSIZE), the
socket and lock file deleted, a second avsmd taking the lock (and then crashing), the journal deleted or
truncated after a SIGKILL mid-commit, and a WAL ledger whose writer died. After every fault the same
invariants are checked: the chain re-verifies, no acknowledged record is lost or written twice, no orphan
process, no lever ran twice for one decision. It prints what it counted and every violation, and exits 1
on any violation, 0 otherwise.

--quick runs a tenth of the faults (a smoke test of the script itself). Whole run: about 12 minutes.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the faults")
    parser.add_argument("--seed", type=int, help="seed for the random moments (default: the time)")
    parser.add_argument("--only", help="run only the campaigns whose title holds this text")
    args = parser.parse_args()
    if args.seed is not None:
        os.environ["AVSM_FAULT_SEED"] = str(args.seed)
    sys.path[:0] = [TESTS, ROOT]
    import test_faults as tf            # noqa: E402  (reads AVSM_FAULT_SEED when imported)

    scale = 0.1 if args.quick else 1.0

    def n(count):
        return max(1, round(count * scale))

    bindir = tempfile.mkdtemp(prefix="avs", dir="/tmp")
    for name in ("avsm", "avsmd"):
        os.symlink(os.path.join(ROOT, "avsm.py"), os.path.join(bindir, name))

    plan = [
        ("warden SIGKILL while levers run", lambda: tf.warden_kills(bindir, n(50))),
        ("avsmd SIGKILL mid-burst", lambda: tf.avsmd_kills(bindir, n(50))),
        ("avsmd+warden SIGKILL, stubborn orphans", lambda: tf.session_kills(bindir, n(5))),
        ("avsmd+warden SIGKILL just after a lever started", lambda: tf.session_kills_young(bindir, n(10))),
        ("disk full (RLIMIT_FSIZE)", lambda: repeat(tf.ledger_down_by_rlimit, bindir, n(2))),
        ("disk full for real (tmpfs)", lambda: repeat(tf.disk_full, bindir, n(2))),
        ("socket and lock file deleted", lambda: tf.socket_and_lock_deleted(bindir, n(10))),
        ("a second avsmd takes the lock", lambda: tf.second_daemon(bindir, n(5))),
        ("a second avsmd takes the lock, then crashes", lambda: repeat(tf.second_daemon_then_crash, bindir, n(3))),
        ("journal deleted/truncated after SIGKILL", lambda: tf.journal_after_crash(bindir, n(20))),
        ("WAL ledger whose writer died", lambda: repeat(tf.wal_writer_died, bindir, n(3))),
    ]

    if args.only:
        plan = [(title, run) for title, run in plan if args.only in title]

    def repeat(campaign, bindir, times):
        total = None
        for _ in range(times):
            c = campaign(bindir)
            if c is None:                   # not possible here (tmpfs cannot be mounted)
                continue
            total = c if total is None else total.merge(c)
        return total

    print(f"avsm fault soak: seed {tf.SEED}, {'quick' if args.quick else 'full'} run, avsm.py at {ROOT}")
    print()
    header = f"{'campaign':48} {'faults':>6} {'survived':>8} {'records':>8} {'orphans':>7} {'dupes':>5} {'lost':>4} {'violations':>10} {'secs':>5}"
    print(header)
    print("-" * len(header))
    results, t_all = [], time.monotonic()
    for title, run in plan:
        t0 = time.monotonic()
        try:
            c = run()
        except Exception as err:        # a campaign that breaks is a finding too
            c = tf.Campaign(title)
            c.violate(f"the campaign itself failed: {type(err).__name__}: {err}")
        if c is None:
            print(f"{title:48} skipped (tmpfs cannot be mounted here)")
            continue
        c.name = title
        for text in c.known:            # anything a campaign kept apart is still a violation here
            c.violate(f"(kept apart) {text}")
        results.append(c)
        print(f"{title:48} {c.faults:6} {c.survived:8} {c.records:8} {c.orphans:7} {c.duplicates:5} {c.lost:4} "
              f"{len(c.violations):10} {time.monotonic() - t0:5.0f}", flush=True)
    shutil.rmtree(bindir, ignore_errors=True)

    total = tf.Campaign("total")
    for c in results:
        total.merge(c)
    journal = next((c for c in results if c.name.startswith("journal")), None)
    print("-" * len(header))
    print(f"faults injected:           {total.faults}")
    print(f"faults survived:           {total.survived}")
    print(f"records checked:           {total.records}")
    print(f"orphans found:             {total.orphans}")
    print(f"duplicates found:          {total.duplicates}")
    print(f"acknowledged records lost: {total.lost}")
    if journal is not None:
        print(f"journal present at the kill: {journal.journal_hits} of {journal.faults}")
    print(f"violations:                {len(total.violations)}")
    print(f"time:                      {time.monotonic() - t_all:.0f} s")
    for c in results:
        if c.violations:
            print()
            print(f"[{c.name}] {len(c.violations)} violation(s):")
            for text in c.violations[:6]:
                print(f"  - {text[:300]}")
            if len(c.violations) > 6:
                print(f"  ... and {len(c.violations) - 6} more")
    return 1 if total.violations else 0


if __name__ == "__main__":
    sys.exit(main())
