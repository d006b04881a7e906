#!/usr/bin/env python3
"""`avsm fleet page` against `avsm fleet status` over the same N hosts of V ventures each, through a real sshd.

    python3 tests/bench/bench_page.py [--hosts 20] [--ventures 10] [--runs 5]

The setup is bench_fleet.py's: a real sshd on 127.0.0.1 (tests/test_remote.py's Fleet), N avsmd homes on this
machine standing in for hosts, each its own ssh alias hNN through a key whose forced command is the README's
line (`restrict,command="DIR/avsm --home HOME bridge"`, DIR/avsm written by `avsm link DIR`); here each home
adopts V ventures, some past their bound (each of those runs its lever once: a proof on the page). Both commands run alternately, --runs times each, without connection sharing; medians.

Targets (issue 35 item 4): fleet page within 1.5x of fleet status, and the page at most 2 MB. Not collected by
pytest. Exits 1 when a target is missed.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_fleet import timed  # noqa: E402
from conftest import ROOT, Avsm, make_venture, write  # noqa: E402
from test_remote import SLOW, OK, Fleet, keygen  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--ventures", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    top = tempfile.mkdtemp(prefix="avp", dir="/tmp")
    bindir = os.path.join(top, "b")
    os.makedirs(bindir)
    for name in ("avsm", "avsmd"):
        os.symlink(os.path.join(ROOT, "avsm.py"), os.path.join(bindir, name))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)      # avsm imported from cached bytecode, as installed
    fleet, daemons = Fleet(top), []
    fleet.env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        # a venture whose report is past 10 runs its lever once (a proof on the page), then waits an hour
        ventures = [make_venture(top, f"shop{v:02d}", SLOW, {"report": f"#!/bin/sh\necho {v * 4 % 20}\n",
                                                               "reset": OK, "note": OK}) for v in range(opts.ventures)]
        for i in range(opts.hosts):
            av = Avsm(bindir, os.path.join(top, f"h{i:02d}")).start()
            for d in ventures:
                assert av.cli("add", d).returncode == 0
            daemons.append(av)
        linked = os.path.join(top, "far")
        subprocess.run([sys.executable, os.path.join(ROOT, "avsm.py"), "link", linked], check=True,
                       capture_output=True, env=fleet.env)
        with open(os.path.join(top, "authorized_keys"), "a") as fh:
            fh.write("".join(f'restrict,command="{linked}/avsm --home {daemons[i].home} bridge" '
                             f'{keygen(os.path.join(top, f"k{i:02d}"))}\n' for i in range(opts.hosts)))
        with open(fleet.config, "a") as fh:
            fh.write("".join(fleet.entry(f"h{i:02d}", f"k{i:02d}", fleet.port) for i in range(opts.hosts)))
        env = dict(fleet.env, AVSM_SSH=f"ssh -F {fleet.config}")
        path = write(os.path.join(top, "fleet.yaml"), "timeout: 60s\nhosts:\n" + "".join(
            f"  - h{i:02d}\n" for i in range(opts.hosts)))
        client = write(os.path.join(top, "avsm-client"),
                       f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom avsm import main\nsys.exit(main())\n")
        page = os.path.join(top, "page.html")
        status_argv = [sys.executable, "-S", client, "fleet", "--fleet", path, "status"]
        page_argv = [sys.executable, "-S", client, "fleet", "--fleet", path, "page", "-o", page]
        timed(status_argv, env)                 # untimed: caches warm for both
        timed(page_argv, env)
        status, pages = [], []
        for _ in range(opts.runs):              # alternating, so a slow moment of the machine hits both
            status.append(timed(status_argv, env))
            pages.append(timed(page_argv, env))
        s, p, size = statistics.median(status), statistics.median(pages), os.path.getsize(page)
        with open(page, encoding="utf-8") as fh:
            text = fh.read()
        shown = f"{text.count('<li class=')} items, {text.count('<details><summary>proof')} proofs"
        ok = p / s <= 1.5 and size <= 2 * 1024 * 1024
        print(f"{subprocess.run(['ssh', '-V'], capture_output=True, text=True).stderr.strip()}, nproc "
              f"{os.cpu_count()}, load {os.getloadavg()[0]:.2f}, {opts.runs} runs each, medians, no sharing")
        print(f"{opts.hosts} hosts x {opts.ventures} ventures: fleet status {s:.3f} s, fleet page {p:.3f} s, "
              f"ratio {p / s:.2f}; page {size} bytes ({size / 1024 / 1024:.2f} MB, {shown})")
        print("targets: ratio <= 1.5 and page <= 2 MB:", "met" if ok else "MISSED")
        return 0 if ok else 1
    finally:
        for av in daemons:
            av.stop()
        fleet.close()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
