#!/usr/bin/env python3
"""`avsm fleet status` over N homes through a real sshd, against N plain `ssh HOST true` at once (the floor).

    python3 tests/bench/bench_fleet.py [--sizes 1,5,20] [--runs 5] [--script]

A real sshd on 127.0.0.1 (tests/test_remote.py's Fleet: a host key and authorized_keys made here), and 20 avsmd
homes on this machine standing in for hosts, each with one venture adopted; each fleet entry is `hNN`, an ssh alias
of its own through a key of its own whose forced command is the README's own line (Many hosts):
`restrict,command="DIR/avsm --home HOME bridge"`, DIR/avsm written by `avsm link DIR` (issue 37 item 1). The
floor is N `ssh pNN true` at once, through a key with no forced command, in the same run. --script: the
forced command runs the script instead (`python3 avsm.py --home HOME bridge`), for comparison. Both are timed without and with OpenSSH connection sharing (ControlMaster
auto, ControlPersist; warmed by one untimed run first). Medians of --runs.

Targets (issue 23 item 6): at N = 20, fleet status within 1.5x of the floor, and within 2 s wall with sharing on.
Not collected by pytest (pyproject: norecursedirs = tests/bench). Exits 1 when a target is missed.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from conftest import ROOT, Avsm, make_venture, write  # noqa: E402
from test_remote import SLOW, OK, Fleet, keygen  # noqa: E402


def timed(argv, env):
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} … exited {done.returncode}: {(done.stdout + done.stderr)[-400:]}")
    return took


def floor_argv(n, ssh):
    """N `ssh HOST true` at once, each its own host, as one command: a shell starts them all and waits for each."""
    return ["sh", "-c", " ".join(f"{ssh} -T p{i:02d} true &" for i in range(n)) + " wait"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,5,20")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--script", action="store_true", help="python3 avsm.py as the forced command")
    opts = parser.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    top = tempfile.mkdtemp(prefix="avf", dir="/tmp")
    bindir = os.path.join(top, "b")
    os.makedirs(bindir)
    for name in ("avsm", "avsmd"):
        os.symlink(os.path.join(ROOT, "avsm.py"), os.path.join(bindir, name))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)      # avsm imported from cached bytecode, as installed
    fleet, daemons = Fleet(top), []
    fleet.env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        venture = make_venture(top, "shop", SLOW, {"report": "#!/bin/sh\necho 5\n", "reset": OK, "note": OK})
        for i in range(max(sizes)):
            av = Avsm(bindir, os.path.join(top, f"h{i:02d}")).start()
            assert av.cli("add", venture).returncode == 0
            daemons.append(av)
        linked = os.path.join(top, "far")       # on the far host: python3 avsm.py link DIR, as the README says
        subprocess.run([sys.executable, os.path.join(ROOT, "avsm.py"), "link", linked], check=True,
                       capture_output=True, env=fleet.env)
        with open(os.path.join(top, "authorized_keys"), "a") as fh:     # the README's line, one key a home
            start = f"{sys.executable} {ROOT}/avsm.py" if opts.script else f"{linked}/avsm"
            fh.write("".join(f'restrict,command="{start} --home {daemons[i].home} bridge" '
                             f'{keygen(os.path.join(top, f"k{i:02d}"))}\n' for i in range(max(sizes))))
        with open(fleet.config, "a") as fh:     # each home a host of its own name (hNN), and pNN its plain key
            fh.write("".join(fleet.entry(f"h{i:02d}", f"k{i:02d}", fleet.port) + fleet.entry(f"p{i:02d}", "plain", fleet.port)
                             for i in range(max(sizes))))
        shared = f"-o ControlMaster=auto -o ControlPath={top}/cm-%n -o ControlPersist=120"
        rows, ok = [], True
        for sharing in (False, True):
            ssh = f"ssh -F {fleet.config}" + (f" {shared}" if sharing else "")
            env = dict(fleet.env, AVSM_SSH=ssh)
            for n in sizes:
                path = write(os.path.join(top, f"fleet{n}.yaml"), "timeout: 60s\nhosts:\n" + "".join(
                    f"  - h{i:02d}\n" for i in range(n)))
                fleet_argv = [sys.executable, "-S", os.path.join(top, "avsm-client"), "fleet", "--fleet", path, "status"]
                write(fleet_argv[2], f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom avsm import main\nsys.exit(main())\n")
                if sharing:                     # one untimed run opens the masters
                    timed(floor_argv(n, ssh), env)
                    timed(fleet_argv, env)
                floor, ours = [], []
                for _ in range(opts.runs):      # alternating, so a slow moment of the machine hits both
                    floor.append(timed(floor_argv(n, ssh), env))
                    ours.append(timed(fleet_argv, env))
                f, o = statistics.median(floor), statistics.median(ours)
                rows.append((n, "on" if sharing else "off", f, o, o / f))
                if n == 20:
                    ok &= o / f <= 1.5 and (o <= 2.0 or not sharing)
        print(f"sshd {subprocess.run(['ssh', '-V'], capture_output=True, text=True).stderr.strip()}, "
              f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, {opts.runs} runs each, medians")
        print(f"{'hosts':>5} {'sharing':>7} {'N x ssh true s':>15} {'fleet status s':>15} {'ratio':>6}")
        for n, sharing, f, o, ratio in rows:
            print(f"{n:>5} {sharing:>7} {f:>15.3f} {o:>15.3f} {ratio:>6.2f}")
        print("targets at 20 hosts: ratio <= 1.5, and <= 2 s with sharing on:", "met" if ok else "MISSED")
        floor_on = next((f for n, sharing, f, _, _ in rows if n == 20 and sharing == "on"), None)
        if floor_on and floor_on > 2.0:
            print(f"(the floor itself, 20 x ssh true with sharing on, takes {floor_on:.2f} s here: each session's "
                  "shell is the far user's, and bash reads ~/.bashrc under sshd)")
        return 0 if ok else 1
    finally:
        for av in daemons:
            av.stop()
        subprocess.run(["sh", "-c", f"for s in {top}/cm-*; do [ -S \"$s\" ] && ssh -o ControlPath=\"$s\" -O exit x; done"],
                       capture_output=True)
        fleet.close()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
