#!/usr/bin/env python3
"""avsm beside supervisord and monit, measured in one run, interleaved (issue 15 item 4).

    python3 tests/bench/bench_peers.py [--rounds 3] [--window 20]

supervisord is installed into a temporary venv with pip; monit is used where the machine has it (`apt-get
install -y monit` is tried, as root, when it is missing). A peer that cannot be had is skipped and said so.
Each round starts each tool in turn (in a shuffled order, one at a time, each in a session of its own, on
files of its own under one temporary directory) and measures:

  restart   first-restart latency of a crashing program: it appends `start $EPOCHREALTIME` when it starts,
            runs 1.5 s (past supervisord's startsecs), appends `exit $EPOCHREALTIME` and exits 1; the
            figure is the next start's stamp minus that exit's (ms). avsm: a `run:` with restart: always;
            supervisord: a [program] with autorestart=true; monit: a `check process` by pidfile, started
            by `setsid -f` (monit waits on a start program that stays in the foreground).
  rss       idle resident memory of the tool's own processes (its process group: avsmd, the warden and the
            roles process; supervisord; monit) with the one kept program up, MiB; beside it PSS (a shared page
            divided among the processes mapping it: what they cost together) and USS (pages only that process
            maps), all from /proc/PID/smaps_rollup, and each process's three printed as it is measured.
  status    wall time of the status command, median of 5 (ms): `avsm status`, `supervisorctl status`,
            `monit status` (avsm's through a console script as pip makes it: `from avsm import main`).
  check     CPU of the tool's own processes per check of a command-based check, over `--window` seconds
            (ms, from /proc/PID/schedstat): avsm's `report` at a 1 s cadence, monit's `check program` at `set daemon 1`; the check is the
            same script for both, appending a line per run so the checks are counted. supervisord has none.
            Beside it, the same with the CPU of the reaped check programs (`+children`).

Each figure is printed per tool (median over the rounds), with avsm's ratio to each peer (below 1: avsm
smaller or faster). Not collected by pytest (pyproject: norecursedirs = tests/bench).
"""

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AVSM = os.path.join(ROOT, "avsm.py")
TICK = os.sysconf("SC_CLK_TCK")

PROGRAM = """#!/bin/bash
cd "${0%/*}"
exec >/dev/null 2>&1
echo "start $EPOCHREALTIME" >> stamps
echo $$ > pid
if [ ! -e crashed ]; then sleep 1.5; touch crashed; echo "exit $EPOCHREALTIME" >> stamps; exit 1; fi
exec sleep 3600
"""
CHECK = "#!/bin/sh\ncd \"${0%/*}\"\necho x >> checks\necho 1\n"

MANDATE = """purpose: Keep a program up and read a command each second.
metric: one
controller: {kind: threshold, above: 1000000000, action: noop}
cadence: 1s
restart: always
run: ./prog
permitted:
  - {name: noop, run: ./noop, cap: 1/hour, reversible: true}
"""

SUPERVISORD = """[unix_http_server]
file={d}/sup.sock
[supervisord]
nodaemon=true
logfile={d}/sup.log
pidfile={d}/sup.pid
childlogdir={d}
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://{d}/sup.sock
[program:kept]
command={d}/prog
directory={d}
autorestart=true
startsecs=1
stdout_logfile=NONE
stderr_logfile=NONE
"""

MONITRC = """set daemon 1
set logfile {d}/monit.log
set pidfile {d}/monit.pid
set idfile {d}/monit.id
set statefile {d}/monit.state
set httpd unixsocket {d}/monit.sock
    allow localhost
check process kept with pidfile {d}/pid
    start program = "{setsid} -f {d}/prog"
check program probe with path "{d}/check"
    if status != 0 then alert
"""


def write(path, text, mode=0o644):
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)


def lines(path):
    try:
        with open(path) as fh:
            return [line.split() for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.005)
    raise RuntimeError(f"no {what} within {timeout} s")


def group_pids(pgid):
    """Pids of the live processes of process group `pgid` (the tool's own: its programs lead groups of their own)."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(p))
    return found


def cpu(pids):
    """(own, with reaped children) CPU seconds of `pids`: own from /proc/PID/schedstat (nanoseconds on a CPU),
    the reaped children's from /proc/PID/stat (clock ticks: coarse, so over a long window)."""
    own = kids = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/schedstat") as fh:
                own += int(fh.read().split()[0]) / 1e9
            with open(f"/proc/{p}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids += (int(f[13]) + int(f[14])) / TICK
    return own, own + kids


def memory_mib(pids):
    """Return ({"rss", "pss", "uss"} summed over `pids`, [(pid, name, rss, pss, uss)]) in MiB, from
    /proc/PID/smaps_rollup: RSS counts a page each process shares once per process; PSS divides a shared page
    among the processes that map it (so the processes' PSS adds up to what they cost together); USS is the
    pages only that process maps (Private_Clean + Private_Dirty)."""
    total, each = {"rss": 0.0, "pss": 0.0, "uss": 0.0}, []
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in fh if ":" in line)
                      if v.strip().endswith("kB")}
            with open(f"/proc/{p}/comm") as fh:
                name = fh.read().strip()
        except (OSError, ValueError):
            continue
        row = (kb.get("Rss", 0) / 1024, kb.get("Pss", 0) / 1024, (kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0)) / 1024)
        each.append((p, name) + row)
        for key, value in zip(("rss", "pss", "uss"), row):
            total[key] += value
    return total, each


class Tool:
    """One supervisor under test: start() it on a fresh directory, then the measures, then stop()."""
    name = ""
    has_check = True

    def __init__(self, root):
        self.root, self.proc, self.n = root, None, 0

    def fresh(self):
        self.n, self.proc = self.n + 1, None
        self.d = os.path.join(self.root, f"{self.name[:2]}{self.n}")
        os.makedirs(self.d)
        write(os.path.join(self.d, "prog"), PROGRAM, 0o755)
        write(os.path.join(self.d, "check"), CHECK, 0o755)
        write(os.path.join(self.d, "report"), CHECK, 0o755)     # avsm's name for the same check
        write(os.path.join(self.d, "noop"), "#!/bin/sh\ntrue\n", 0o755)

    def spawn(self, argv, env=None):
        self.proc = subprocess.Popen(argv, cwd=self.d, start_new_session=True, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.d, "err"), "w"),
                                     env=env)

    def stop(self):
        if self.proc is None:
            return
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for row in lines(os.path.join(self.d, "pid")):      # the kept program, whoever kept it
            try:
                os.killpg(os.getpgid(int(row[0])), signal.SIGKILL)
            except (OSError, ValueError):
                pass

    def pids(self):
        """The tool's own long-lived processes: in its group twice, a moment apart (not a check passing by)."""
        first = set(group_pids(self.proc.pid))
        time.sleep(0.2)
        return sorted(first & set(group_pids(self.proc.pid)))

    def checks(self):
        return len(lines(os.path.join(self.d, "checks")))

    def status(self):
        raise NotImplementedError


class Avsm(Tool):
    name = "avsm"

    def start(self):
        self.fresh()
        write(os.path.join(self.d, "mandate.yaml"), MANDATE)
        self.home = os.path.join(self.d, "h")
        self.env = {k: v for k, v in os.environ.items() if k != "AVSMD_HOME"}
        self.client = os.path.join(self.root, "avsm")       # what pip's console script is: import avsm, main()
        if not os.path.exists(self.client):
            write(self.client, f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {ROOT!r})\n"
                               "from avsm import main\nsys.exit(main())\n", 0o755)
        self.spawn([sys.executable, AVSM, "avsmd", "--home", self.home], self.env)
        wait(lambda: os.path.exists(os.path.join(self.home, "sock")), 15, "avsmd socket")
        subprocess.run([sys.executable, AVSM, "--home", self.home, "add", self.d], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)

    def status(self):
        subprocess.run([self.client, "--home", self.home, "status"], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)


class Supervisord(Tool):
    name = "supervisord"
    has_check = False

    def __init__(self, root, venv):
        super().__init__(root)
        self.venv = venv

    def start(self):
        self.fresh()
        self.conf = os.path.join(self.d, "supervisord.conf")
        write(self.conf, SUPERVISORD.format(d=self.d))
        self.spawn([os.path.join(self.venv, "bin", "supervisord"), "-c", self.conf])

    def status(self):
        r = subprocess.run([os.path.join(self.venv, "bin", "supervisorctl"), "-c", self.conf, "status"],
                           stdout=subprocess.DEVNULL)
        if r.returncode not in (0, 3):              # 3: a program not running, which is still an answer
            raise RuntimeError(f"supervisorctl status exited {r.returncode}")


class Monit(Tool):
    name = "monit"

    def start(self):
        self.fresh()
        self.rc = os.path.join(self.d, "monitrc")
        write(self.rc, MONITRC.format(d=self.d, setsid=shutil.which("setsid")), 0o600)
        self.spawn(["monit", "-I", "-c", self.rc])
        wait(lambda: os.path.exists(os.path.join(self.d, "monit.sock")), 15, "monit's socket")

    def status(self):
        subprocess.run(["monit", "-c", self.rc, "status"], check=True, stdout=subprocess.DEVNULL)


def measure(tool, window):
    """One round of one tool: {restart, rss, status, check, check_all}."""
    try:
        tool.start()
        stamps = os.path.join(tool.d, "stamps")
        got = wait(lambda: [r for r in lines(stamps) if r[0] == "start"][1:2] and lines(stamps), 30,
                   f"{tool.name}'s first restart")
        exit_at = float(next(r[1] for r in got if r[0] == "exit").replace(",", "."))
        restart = (float([r for r in got if r[0] == "start"][1][1].replace(",", ".")) - exit_at) * 1e3
        time.sleep(2)                               # settled: the kept program up, the first checks read
        memory, each = memory_mib(tool.pids())
        for pid, name, rss, pss, uss in each:
            print(f"    {tool.name} pid {pid} {name}: RSS {rss:.1f}, PSS {pss:.1f}, USS {uss:.1f} MiB", flush=True)
        walls = []
        for _ in range(5):
            t0 = time.perf_counter()
            tool.status()
            walls.append((time.perf_counter() - t0) * 1e3)
        result = {"restart": restart, "rss": memory["rss"], "pss": memory["pss"], "uss": memory["uss"],
                  "status": statistics.median(walls)}
        if tool.has_check:
            pids = tool.pids()
            c0, n0 = cpu(pids), tool.checks()
            time.sleep(window)
            c1, n1 = cpu(pids), tool.checks()
            done = max(1, n1 - n0)
            result.update(check=(c1[0] - c0[0]) * 1e3 / done, check_all=(c1[1] - c0[1]) * 1e3 / done, checks=n1 - n0)
        return result
    finally:
        tool.stop()


def get_supervisord(root):
    venv = os.path.join(root, "venv")
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=120)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "supervisor"], check=True,
                       capture_output=True, timeout=300)
    except (subprocess.SubprocessError, OSError) as err:
        return None, f"supervisord skipped: pip install supervisor into a venv failed ({err})"
    version = subprocess.run([os.path.join(venv, "bin", "supervisord"), "--version"], capture_output=True, text=True)
    return venv, f"supervisord {version.stdout.strip()} (pip, in a temporary venv)"


def get_monit():
    if not shutil.which("monit") and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "monit"], capture_output=True, timeout=300)
    if not shutil.which("monit"):
        return False, "monit skipped: not on this machine, and apt-get install -y monit did not bring it"
    version = subprocess.run(["monit", "-V"], capture_output=True, text=True).stdout.split("\n")[0]
    return True, f"{version.strip()} (apt)"


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            model = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cpus (nproc {len(os.sched_getaffinity(0))}), {model}, Python {sys.version.split()[0]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0, help="seconds the CPU per check is measured over")
    args = ap.parse_args()
    if "EPOCHREALTIME" not in subprocess.run(["bash", "-c", "echo ${EPOCHREALTIME:+EPOCHREALTIME}"],
                                             capture_output=True, text=True).stdout:
        raise SystemExit("bench_peers needs bash 5 ($EPOCHREALTIME)")
    root = tempfile.mkdtemp(prefix="avpe", dir="/tmp")
    try:
        tools, notes = [Avsm(root)], []
        venv, note = get_supervisord(root)
        notes.append(note)
        if venv:
            tools.append(Supervisord(root, venv))
        ok, note = get_monit()
        notes.append(note)
        if ok:
            tools.append(Monit(root))
        print(f"machine: {machine()}")
        for note in notes:
            print(note)
        results = {t.name: [] for t in tools}
        rng = random.Random(15)
        for r in range(args.rounds):
            order = tools[:]
            rng.shuffle(order)
            for tool in order:
                results[tool.name].append(measure(tool, args.window))
                print(f"  round {r + 1} {tool.name}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[tool.name][-1].items()),
                      flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(tools, results, args)


def report(tools, results, args):
    rows = [("restart", "first restart of a crashing program (ms)"), ("rss", "idle RSS, one kept program (MiB)"),
            ("pss", "idle PSS, one kept program (MiB)"), ("uss", "idle USS, one kept program (MiB)"),
            ("status", "status command wall time (ms)"), ("check", "CPU per command check, own (ms)"),
            ("check_all", "CPU per command check, +children (ms)")]
    med = {t.name: {k: statistics.median([x[k] for x in results[t.name]]) if k in results[t.name][0] else None
                    for k, _ in rows} for t in tools}
    peers = [t.name for t in tools if t.name != "avsm"]
    print(f"\nmedians of {args.rounds} rounds, interleaved; ratio = avsm / peer (below 1: avsm smaller or faster)")
    table = [["figure"] + [t.name for t in tools] + [f"avsm/{p}" for p in peers]]
    for key, label in rows:
        cells = [label] + [f"{med[t.name][key]:.2f}" if med[t.name][key] is not None else "-" for t in tools]
        for p in peers:
            a, b = med["avsm"][key], med[p][key]
            cells.append(f"{a / b:.2f}" if a is not None and b else "-")
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for n, row in enumerate(table):
        print("| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 1) + ("-" if i == 0 else ":") for i, w in enumerate(widths)) + "|")

if __name__ == "__main__":
    main()
