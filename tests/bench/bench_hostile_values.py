#!/usr/bin/env python3
"""The hostile-values campaign at size: seeded report outputs and model replies against one real avsmd.

    python3 tests/bench/bench_hostile_values.py [--n 3000] [--seed S]

The generator and the checks are tests/test_hostile_values.py's (run_campaign): about half the inputs
are report outputs (lines past the 64 KiB avsm keeps, control characters inside a number, numbers past
1e300 or a float, non-UTF-8), read at once by a report, a guard, an audit and a reading of four ventures;
the other half are model replies through a real `command` backend and `avsm decide`, most holding a
number past 1e300, NaN or Infinity somewhere. Per input: avsmd, the warden and the roles process keep
their pids, no client exit is 70, no traceback, no wrong value (a cut or malformed reading is never
recorded as a number), nothing runs that a valid reply or a legitimate crossing did not ask for; at the
end the ledger re-verifies and every proof re-checks. AVSM_HOSTILE_SEED and AVSM_HOSTILE_N (or --seed
and --n) replay a run. Prints the figures; exits 1 on any failure.

Not collected by pytest (pyproject: norecursedirs = tests/bench).
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)

from conftest import Avsm, check_ledger_safety  # noqa: E402
from test_hostile_values import campaign_settings, run_campaign  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, help="inputs (default 3000, or AVSM_HOSTILE_N)")
    parser.add_argument("--seed", type=int, help="seed (default random, or AVSM_HOSTILE_SEED)")
    parser.add_argument("--ventures", type=int, default=8, help="ventures reading report outputs at once (default 8)")
    args = parser.parse_args()
    if args.n is not None:
        os.environ["AVSM_HOSTILE_N"] = str(args.n)
    if args.seed is not None:
        os.environ["AVSM_HOSTILE_SEED"] = str(args.seed)
    seed, n = campaign_settings(3000)
    bindir = tempfile.mkdtemp(prefix="avb", dir="/tmp")
    root = tempfile.mkdtemp(prefix="av", dir="/tmp")
    workdir = tempfile.mkdtemp(prefix="avw", dir="/tmp")
    for name in ("avsm", "avsmd"):
        os.symlink(os.path.join(os.path.dirname(TESTS), "avsm.py"), os.path.join(bindir, name))
    av = Avsm(bindir, os.path.join(root, "h"))
    t0 = time.monotonic()
    failures = []
    try:
        figures, failures = run_campaign(av, workdir, seed, n, ventures=args.ventures, say=lambda line: print(f"  {line}", flush=True))
        code = None
        if av.proc is not None and av.proc.poll() is None:
            code, _ = av.stop()
        if code != 0:
            failures.append(("avsmd's exit at the end", code))
        try:
            check_ledger_safety(av.home)
            figures["ledger"] = "re-verifies, every proof re-checks"
        except AssertionError as err:
            figures["ledger"] = "BROKEN"
            failures.append(("ledger", str(err)[:300]))
    finally:
        if av.proc is not None and av.proc.poll() is None:
            av.stop()
        for d in (bindir, root, workdir):
            shutil.rmtree(d, ignore_errors=True)
    took = time.monotonic() - t0
    print(f"seed {seed}, {n} inputs asked, {took:.0f} s")
    for key, value in figures.items():
        print(f"  {key}: {value}")
    for failure in failures[:20]:
        print(f"FAIL {failure}")
    print(f"{len(failures)} failure(s); replay with AVSM_HOSTILE_SEED={seed} AVSM_HOSTILE_N={n}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
