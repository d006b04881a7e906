#!/usr/bin/env python3
"""`avsm fleet witness --mirror` over 20 hosts through a real sshd, and the first copy of a large ledger.

    python3 tests/bench/bench_witness.py [--hosts 20] [--new 1000] [--runs 3] [--records 1000000]

A real sshd on 127.0.0.1 (tests/test_remote.py's Fleet) and N avsmd homes on this machine standing in for
hosts, each with one venture adopted and its checkpoints signed, reached through the key whose forced command
is the bridge (a write key: the witness asks each host for a checkpoint of its head, and verifies it against
this side's allowed_signers as the fleet file's principal). Two figures (issue 34 item 4):

1. After the first copy, a witness run over the N hosts that each wrote --new records since the last run
   (appended to each ledger through its triggers before each run), against N `ssh pNN true` at once through
   a key with no forced command (bench_fleet's floor). Medians of --runs, alternating. Target: ratio <= 1.5.
2. The first copy of one ledger of --records records (its avsmd stopped, a signed checkpoint of its head
   written: the bridge reads the file itself): records a second, the witness's peak memory (its ru_maxrss)
   against a first copy of a tenth as many, to show it flat, and the CPU both sides took a record.
   Target: >= 50,000 records/s.

Not collected by pytest (pyproject: norecursedirs = tests/bench). Exits 1 when a target is missed.
"""

import argparse
import hashlib
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bench_fleet import floor_argv, timed  # noqa: E402
from conftest import ROOT, Avsm, make_venture, write  # noqa: E402
import avsm  # noqa: E402  (conftest puts the repository on the path)
from test_checkpoints import keygen  # noqa: E402
from test_remote import OK, SLOW, Fleet  # noqa: E402


def append_filler(home, n):
    """Append n records to HOME/ledger.db the way anyone can, through the triggers (avsmd may be running)."""
    db = sqlite3.connect(os.path.join(home, "ledger.db"), isolation_level=None, timeout=30)
    db.executescript(avsm.LEDGER_SCHEMA)
    db.execute("BEGIN IMMEDIATE")
    seq, prev = db.execute("SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1").fetchone() or (0, "0" * 64)
    at, rows = int(time.time()), []
    for seq in range(seq + 1, seq + n + 1):
        text = json.dumps({"kind": "ledger", "claim": "measured", "venture": "self",
                           "summary": f"a reading of the kind a report writes, #{seq}, with a note of its size",
                           "value": seq % 97}, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{prev}\n{seq}\n{at}\n{text}".encode()).hexdigest()
        rows.append((seq, at, prev, digest, text))
        prev = digest
        if len(rows) >= 10000:
            db.executemany("INSERT INTO records (seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)", rows)
            rows = []
    db.executemany("INSERT INTO records (seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)", rows)
    db.execute("COMMIT")
    db.close()


def witness_argv(top, fleet_file, keep):
    return [sys.executable, "-S", os.path.join(top, "avsm-client"), "fleet", "--fleet", fleet_file, "witness",
            "--keep", keep, "--mirror"]


def far_cpu(fleet):
    """CPU seconds the sshd's ended sessions took (its sessions and their bridges, waited for by sshd)."""
    with open(f"/proc/{fleet.sshd.pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def first_copy(top, fleet, alias, home, keep):
    """Time one first copy of HOME's ledger; return (seconds, records copied, the witness's peak RSS in KiB,
    CPU seconds of the witness and its ssh, CPU seconds of the far side: sshd's session and the bridge)."""
    path = write(os.path.join(top, f"copy-{alias}.yaml"), f"hosts:\n  - {{host: '{alias}:{home}', name: big}}\n")
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "took = time.perf_counter() - t; "
             "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
             "print(done.returncode, took, r.ru_maxrss, r.ru_utime + r.ru_stime); "
             "sys.stderr.write(done.stdout + done.stderr)")
    # the witness alone is measured: ssh is its child, and RUSAGE_CHILDREN of a process that ran only the
    # witness is the largest of the two (ssh is a few MiB)
    far = far_cpu(fleet)
    done = subprocess.run([sys.executable, "-S", "-c", probe, *witness_argv(top, path, keep)],
                          env=fleet.env, capture_output=True, text=True)
    time.sleep(0.5)                 # sshd waits for its session
    far = far_cpu(fleet) - far
    code, took, rss, cpu = done.stdout.split()
    if code != "0":
        raise SystemExit(f"the first copy exited {code}: {done.stderr[-600:]}")
    db = sqlite3.connect(os.path.join(keep, "big", "ledger.db"))
    count = db.execute("SELECT count(*) FROM records").fetchone()[0]
    db.close()
    return float(took), count, int(rss), float(cpu), far


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=1_000_000)
    opts = parser.parse_args()
    top = tempfile.mkdtemp(prefix="avx", dir="/tmp")
    bindir = os.path.join(top, "b")
    os.makedirs(bindir)
    for name in ("avsm", "avsmd"):
        os.symlink(os.path.join(ROOT, "avsm.py"), os.path.join(bindir, name))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)      # avsm imported from cached bytecode, as installed
    fleet, daemons = Fleet(top), []
    fleet.env.pop("PYTHONDONTWRITEBYTECODE", None)
    write(os.path.join(top, "avsm-client"), f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom avsm import main\n"
                                            f"sys.exit(main())\n")
    key = os.path.join(top, "ck")
    allowed = write(os.path.join(top, "allowed_signers"), f'ops namespaces="avsm-checkpoint" {keygen(key)}\n')
    ok = True
    try:
        venture = make_venture(top, "shop", SLOW, {"report": "#!/bin/sh\necho 5\n", "reset": OK, "note": OK})
        for i in range(opts.hosts + 2):
            home = os.path.join(top, f"h{i:02d}")
            os.makedirs(home, mode=0o700)
            write(os.path.join(home, "config.yaml"), f"checkpoint: {{key: {key}}}\n")
            if i >= opts.hosts:         # the bridge reads the file itself: no avsmd needed to copy it
                append_filler(home, opts.records // (10 if i == opts.hosts else 1))
                db = avsm.open_ledger_ro(os.path.join(home, "ledger.db"))
                spec = {"key": key, "namespace": avsm.CHECKPOINT_NAMESPACE, "every": 86400}
                avsm.Checkpoints(home, spec).write(avsm.ledger_head(db), time.time())
                db.close()
                daemons.append(Avsm(bindir, home))
                continue
            av = Avsm(bindir, home).start()
            assert av.cli("add", venture).returncode == 0
            daemons.append(av)
        with open(fleet.config, "a") as fh:
            fh.write("".join(fleet.entry(f"h{i:02d}", "full", fleet.port) + fleet.entry(f"p{i:02d}", "plain", fleet.port)
                             for i in range(opts.hosts + 2)))
        env = dict(fleet.env, AVSM_SSH=f"ssh -F {fleet.config}")
        keep = os.path.join(top, "keep")
        path = write(os.path.join(top, "fleet.yaml"), f"allowed_signers: {allowed}\nhosts:\n" + "".join(
            f"  - {{host: 'h{i:02d}:{daemons[i].home}', principal: ops}}\n" for i in range(opts.hosts)))
        timed(witness_argv(top, path, keep), env)          # the first copy of each, untimed
        floor, ours = [], []
        for _ in range(opts.runs):
            floor.append(timed(floor_argv(opts.hosts, env["AVSM_SSH"]), env))
            for av in daemons[:opts.hosts]:
                append_filler(av.home, opts.new)
            ours.append(timed(witness_argv(top, path, keep), env))
        f, o = statistics.median(floor), statistics.median(ours)
        ok &= o / f <= 1.5
        small = first_copy(top, fleet, f"h{opts.hosts:02d}", daemons[opts.hosts].home, os.path.join(top, "k1"))
        large = first_copy(top, fleet, f"h{opts.hosts + 1:02d}", daemons[opts.hosts + 1].home,
                           os.path.join(top, "k2"))
        rate = large[1] / large[0]
        ok &= rate >= 50_000
        print(f"{subprocess.run(['ssh', '-V'], capture_output=True, text=True).stderr.strip()}, nproc "
              f"{os.cpu_count()}, load {os.getloadavg()[0]:.2f}, {opts.runs} runs each, medians")
        print(f"{opts.hosts} hosts, {opts.new} new records each: {opts.hosts} x ssh true {f:.3f} s, "
              f"fleet witness --mirror {o:.3f} s, ratio {o / f:.2f} (target <= 1.5)")
        for took, count, rss, cpu, far in (small, large):
            print(f"first copy of {count:,} records: {took:.2f} s, {count / took:,.0f} records/s, "
                  f"witness peak RSS {rss / 1024:.1f} MiB; CPU {cpu:.2f} s here (witness, ssh) and "
                  f"{far:.2f} s there (sshd, bridge): {1e6 * (cpu + far) / count:.1f} us a record")
        print(f"target >= 50,000 records/s on the large copy, memory flat: {'met' if ok else 'MISSED'}")
        return 0 if ok else 1
    finally:
        for av in daemons:
            if av.proc is not None:
                av.stop()
        fleet.close()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
