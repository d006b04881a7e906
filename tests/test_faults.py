"""The fault campaign: a real avsmd on a short temp home, hurt the ways a machine hurts it (a warden
SIGKILLed while levers run, avsmd SIGKILLed mid-burst, both killed with a program that ignores SIGTERM,
the disk full, the socket and the lock file deleted, a second avsmd taking the lock, the journal truncated
after a crash, a WAL ledger whose writer died), and after each fault the same invariants are checked:

- the chain re-verifies, and every proof re-checks (conftest's check_ledger_safety);
- no acknowledged record is lost or changed, and none is written twice; a record is acknowledged when a
  client saw it through `avsm tail --since`, or when the client printed its seq (`avsm add`);
- no orphan process: every program a venture started is marked by a unique number in its command line
  and must be gone, or be a descendant of the avsmd that runs now;
- no lever ran twice for one decision: each action has at most one outcome, no two actions rest on the same
  crossing report or trigger, and the lever's own log never shows one action twice; an action whose run was
  cut off by a dead warden is answered by a `did X happen?` ask.

The campaigns are plain functions that count what they did in a Campaign, so tests/bench/soak.py runs the
same faults at scale. Each test's docstring names the requirements it checks."""

import collections
import os
import random
import re
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import avsm
from conftest import ROOT, Avsm, check_ledger_safety, make_venture, write

SEED = int(os.environ.get("AVSM_FAULT_SEED", str(int(time.time()))))
RNG = random.Random(SEED)


class Campaign:
    """What one fault campaign did and found."""

    def __init__(self, name):
        self.name = name
        self.faults = self.survived = self.records = self.orphans = self.duplicates = self.lost = 0
        self.journal_hits = 0
        self.violations = []
        self.known = []             # findings a campaign keeps apart from its violations (none now)

    def violate(self, text):
        self.violations.append(text)

    def merge(self, other):
        for key in ("faults", "survived", "records", "orphans", "duplicates", "lost", "journal_hits"):
            setattr(self, key, getattr(self, key) + getattr(other, key))
        self.violations += other.violations
        self.known += other.known
        return self

    def __repr__(self):
        return (f"{self.name}: {self.faults} faults, {self.survived} survived, {self.records} records checked, "
                f"{self.orphans} orphans, {self.duplicates} duplicates, {self.lost} lost")


def token():
    """Seven digits that mark the programs of one campaign in their command lines (unique across runs)."""
    return str(random.SystemRandom().randrange(1000000, 10000000))


# ---- processes ------------------------------------------------------------------------

def proc_table():
    """{pid: (state, ppid, pgid, cmdline bytes)} of every process now."""
    table = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[1].split()
        table[int(p)] = (fields[0].decode(), int(fields[1]), int(fields[2]), cmd)
    return table


def alive(pid, table=None):
    table = proc_table() if table is None else table
    return pid in table and table[pid][0] != "Z"


def marked(marker, table=None):
    """Live (not zombie) pids whose command line holds `marker`."""
    table = proc_table() if table is None else table
    return sorted(p for p, (st, _, _, cmd) in table.items() if marker.encode() in cmd and st != "Z" and p != os.getpid())


def descends(pid, ancestor, table):
    seen = set()
    while pid in table and pid not in seen and pid > 1:
        if pid == ancestor:
            return True
        seen.add(pid)
        pid = table[pid][1]
    return False


def orphans(markers, owners=()):
    """Live processes holding one of `markers` that descend from none of `owners` (running avsmd pids)."""
    table = proc_table()
    return [p for m in markers for p in marked(m, table) if not any(descends(p, o, table) for o in owners)]


def describe(pids):
    """pid, group, parent and command line of each pid, for a violation's message."""
    table, out = proc_table(), []
    for p in pids:
        if p not in table:
            out.append(f"{p} (gone)")
            continue
        cmd = table[p][3].replace(b"\0", b" ").decode(errors="replace").strip()[:60]
        out.append(f"{p} (group {table[p][2]}, parent {table[p][1]}: {cmd})")
    return ", ".join(out)


def wardens(avsmd_pid, table=None):
    table = proc_table() if table is None else table
    return [p for p, (st, pp, _, cmd) in table.items() if pp == avsmd_pid and b"warden" in cmd and st != "Z"]


def wait_until(predicate, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step)


def kill_marked(markers):
    """End what a campaign left behind (only processes holding its own markers), by process group."""
    for m in markers:
        for p in marked(m):
            try:
                os.killpg(os.getpgid(p), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def kill_daemon(av):
    """SIGKILL avsmd's whole session (avsmd and its warden) if it still runs."""
    if av.proc is not None and av.proc.poll() is None:
        try:
            os.killpg(av.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        av.proc.wait()


# ---- starting avsmd, reading what it wrote ---------------------------------------------

def start(av, preexec_fn=None, wait=True, timeout=20):
    """Start avsmd on av.home as the test's own child (so it may set limits first); with `wait`, return once
    it says it serves and answers `status`; return False when it exited instead."""
    av.errfile = tempfile.TemporaryFile(mode="w+")
    av.proc = subprocess.Popen([sys.executable, os.path.join(av.bindir, "avsmd"), "--home", av.home],
                               stdout=subprocess.DEVNULL, stderr=av.errfile, env=av.env, start_new_session=True,
                               preexec_fn=preexec_fn)
    if not wait:
        return True
    deadline = time.monotonic() + timeout
    serving = f"serving {av.home} (pid {av.proc.pid})"
    while time.monotonic() < deadline:
        if av.proc.poll() is not None:
            return False
        if serving in av.stderr() and status_ok(av):
            return True
        time.sleep(0.05)
    return False


def status_ok(av, timeout=5):
    """Whether `avsm status` answers 0 within `timeout` seconds."""
    try:
        return av.cli("status", timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def records(av):
    try:
        return av.records()
    except sqlite3.Error:
        return []


def count(recs, kind, venture=None):
    return sum(1 for _, _, r in recs if r["kind"] == kind and (venture is None or r["venture"] == venture))


def answer_cut_off(av, wait=5.0):
    """Answer "it did not happen" to each `did X happen?` ask as it comes, so the lever may run again (it waits
    for the answer, RUN-10); wait up to `wait` s for one after a restart. Return how many were answered."""
    def waiting():
        recs = records(av)
        answered = {r.get("ask") for _, _, r in recs if r["kind"] in ("approval", "denial", "resolved")}
        return [s for s, _, r in recs if r["kind"] == "ask" and r.get("about") == "interrupted" and s not in answered]
    asks = wait_until(waiting, wait, step=0.05) or []
    for seq in asks:
        av.cli("deny", str(seq))
    return len(asks)


def last_seq(av):
    recs = records(av)
    return recs[-1][0] if recs else 0


class Tailer(threading.Thread):
    """A script following the ledger with `avsm tail --since`: every line it saw is acknowledged."""

    def __init__(self, av, campaign):
        super().__init__(daemon=True)
        self.av, self.c = av, campaign
        self.seen, self.last = {}, 0
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            try:
                run = self.av.cli("tail", "--since", str(self.last), timeout=15)
            except subprocess.TimeoutExpired:
                continue
            if run.returncode == 0:
                for line in run.stdout.splitlines():
                    m = re.match(r"#(\d+) ", line)
                    if not m:
                        continue
                    seq = int(m.group(1))
                    if self.seen.get(seq, line) != line:
                        self.c.violate(f"tail showed #{seq} two ways: {self.seen[seq]!r} then {line!r}")
                    self.seen[seq] = line
                    self.last = max(self.last, seq)
            self.halt.wait(0.15)

    def stop(self):
        self.halt.set()
        self.join(30)


def check_acknowledged(av, seen, c):
    """Every line a client saw is still in the ledger, the same."""
    run = av.cli("tail", "--since", "0", timeout=60)
    if run.returncode != 0:
        c.violate(f"avsm tail --since 0 exited {run.returncode}: {run.stderr[-300:]}")
        return
    final = {}
    for line in run.stdout.splitlines():
        m = re.match(r"#(\d+) ", line)
        if m:
            final[int(m.group(1))] = line
    for seq, line in sorted(seen.items()):
        if final.get(seq) != line:
            c.lost += 1
            c.violate(f"acknowledged #{seq} lost or changed: saw {line!r}, now {final.get(seq)!r}")


def check_invariants(av, c, lever_log=None, venture=None, lever=None):
    """The invariants over the whole ledger, after a clean stop; count what was checked."""
    try:
        check_ledger_safety(av.home)
    except AssertionError as err:
        c.violate(f"ledger safety: {err}")
    recs = records(av)
    c.records += len(recs)
    by_seq = {s: r for s, _, r in recs}
    outcomes, interrupted, basis, triggers, current = {}, {}, {}, {}, {}
    for seq, _, r in recs:
        kind = r["kind"]
        if kind == "outcome":
            if r["action"] in outcomes:
                c.duplicates += 1
                c.violate(f"action #{r['action']} has two outcomes (#{outcomes[r['action']][0]} and #{seq})")
            outcomes[r["action"]] = (seq, r)
        elif kind == "ask" and r.get("about") == "interrupted":
            if r["action"] in interrupted:
                c.duplicates += 1
                c.violate(f"action #{r['action']} was asked about twice")
            interrupted[r["action"]] = (seq, r)
        elif kind == "action":
            proof = r.get("proof", {})
            for p in proof.get("premises", []):
                if by_seq.get(p, {}).get("kind") == "report":
                    key = (r["venture"], p)
                    if key in basis:
                        c.duplicates += 1
                        c.violate(f"actions #{basis[key]} and #{seq} rest on the same report #{p}: one decision ran twice")
                    basis[key] = seq
            if proof.get("trigger") is not None:
                key = (r["venture"], proof["trigger"])
                if key in triggers:
                    c.duplicates += 1
                    c.violate(f"actions #{triggers[key]} and #{seq} cite the same trigger #{proof['trigger']}")
                triggers[key] = seq
        elif kind == "mandate":
            if current.get(r["venture"]) == (r.get("directory"), r.get("sha256")):
                c.duplicates += 1
                c.violate(f"mandate #{seq} adopts again the mandate already in force: written twice")
            current[r["venture"]] = (r.get("directory"), r.get("sha256"))
    for seq, _, r in recs:
        if r["kind"] != "action":
            continue
        o = outcomes.get(seq)
        if o is None or o[1].get("status") == "unknown":
            ask = interrupted.get(seq)
            if ask is None or ask[1].get("question") != f"did {r['lever']} happen?":
                c.violate(f"action #{seq} ({r['lever']}) has no outcome of its run and no 'did {r['lever']} happen?' ask")
    if lever_log is not None:
        check_lever_log(recs, outcomes, c, lever_log, venture, lever)


def check_lever_log(recs, outcomes, c, path, venture, lever):
    """The lever writes the seq of its action to `path` as its last step: every line has its action, no action
    shows twice, and an ok outcome has its line."""
    try:
        with open(path) as fh:
            lines = [line.strip() for line in fh if line.strip()]
    except FileNotFoundError:
        lines = []
    actions = {s: r for s, _, r in recs if r["kind"] == "action" and r["venture"] == venture and r["lever"] == lever}
    logged = collections.Counter()
    for line in lines:
        if not line.isdigit():
            c.violate(f"the lever could not tell its action: {line!r}")
            continue
        logged[int(line)] += 1
    for seq, n in logged.items():
        if seq not in actions:
            c.violate(f"the lever ran for #{seq}, which is no action of {lever}: it ran without its action")
        if n > 1:
            c.duplicates += 1
            c.violate(f"the lever ran {n} times for action #{seq}")
    for seq in actions:
        o = outcomes.get(seq)
        if o is not None and o[1].get("ok") and seq not in logged:
            c.violate(f"action #{seq} has an ok outcome but its lever never finished")
        if o is not None and seq in logged and not o[1].get("ok") and not o[1].get("ended_by") \
                and o[1].get("status") not in ("unknown",):
            c.violate(f"action #{seq}: its lever finished but its outcome says {o[1].get('summary')!r}")


# ---- the ventures ------------------------------------------------------------------------

LEVEL = """purpose: {purpose}
metric: level
controller: {{kind: threshold, above: 10, action: lower}}
cadence: {cadence}
permitted:
  - {{name: lower, run: ./lower, cap: 100000/hour, reversible: true}}
{extra}"""

# The lever finds its action (the last one of its venture: the warden writes it before it starts the lever),
# sleeps a random 0 to 0.5 s, then writes that action's seq to `lines`. Its sleep carries the campaign's mark.
LEVER = """#!/bin/sh
seq=""
for try in 1 2 3 4 5 6 7 8 9 10; do
  seq=$(sqlite3 -readonly -cmd '.timeout 5000' "$AVSM_HOME/ledger.db" \\
        "SELECT max(seq) FROM records WHERE json_extract(record, '\\$.kind') = 'action' AND json_extract(record, '\\$.venture') = '$AVSM_VENTURE'" 2>/dev/null) && [ -n "$seq" ] && break
  sleep 0.05
done
r=$(( $(od -An -N2 -tu2 /dev/urandom) % 50 ))
sleep "0.$(printf %02d $r){mark}"
echo "${{seq:-none}}" >> lines
"""

GUARDS = "guards:\n" + "".join(f"  - {{name: g{i}, run: 'echo {i}', below: -1, then: ask}}\n" for i in range(4))


def level_venture(root, name, mark, purpose="Keep the level down.", cadence="1s", run_mark=None, guards=False,
                  report="#!/bin/sh\necho 50\n"):
    """A venture whose level reads 50 against a bound of 10: its lever runs on every report."""
    extra = (GUARDS if guards else "") + ("run: ./keep\n" if run_mark else "")
    files = {"report": report, "lower": LEVER.format(mark=mark)}
    if run_mark:
        files["keep"] = f"#!/bin/sh\nexec sleep 300.{run_mark}\n"
    d = make_venture(root, name, LEVEL.format(purpose=purpose, cadence=cadence, extra=extra), files)
    return d


def new_root():
    return tempfile.mkdtemp(prefix="avq", dir="/tmp")


def settle_stop(av, c, what):
    """Stop avsmd cleanly; it must exit 0."""
    if av.proc is None or av.proc.poll() is not None:
        return
    try:
        code, _ = av.stop()
    except AssertionError as err:
        c.violate(f"{what}: {err}")
        return
    if code != 0:
        c.violate(f"{what}: avsmd exited {code} at a clean stop: {av.stderr()[-400:]}")


# ---- 1. the warden SIGKILLed while levers run ----------------------------------------------

def warden_restarts(recs):
    return [r for _, _, r in recs if r["kind"] == "restart" and r["venture"] == "self"
            and r.get("process", "warden") == "warden"]


def warden_kills(bindir, n=10):
    """SIGKILL the warden n times at random moments (every other time while a lever runs). Each time a new
    warden must start with a self `restart` record (after the back-off the record announces, for a warden that
    keeps dying young), the dead warden's groups must be ended, and afterwards every lever line has its action
    and every cut-off run is asked about. Every fourth kill (after the first) waits until the warden has run
    10 s, so the back-off starts over and the campaign stays short."""
    c = Campaign("warden SIGKILL while levers run")
    root, mark = new_root(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = level_venture(root, "level", mark)
    try:
        if not start(av):
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        if av.cli("add", d).returncode != 0:
            c.violate("avsm add failed")
            return c
        wait_until(lambda: count(records(av), "outcome") >= 1, 15)
        seen_at, delay = time.monotonic() - 60, 0
        for i in range(n):
            ws = wait_until(lambda: wardens(av.proc.pid), 15 + delay)
            if not ws:
                c.violate(f"fault {i}: no warden to kill")
                break
            if i % 4 == 0 and i:
                time.sleep(max(0.0, seen_at + 10.5 - time.monotonic()))
            if i % 2 == 0:
                wait_until(lambda: marked(mark), 5, step=0.01)
                time.sleep(RNG.uniform(0, 0.3))
            else:
                time.sleep(RNG.uniform(0.1, 1.2))
            os.kill(ws[0], signal.SIGKILL)
            c.faults += 1
            restarts = wait_until(lambda: len(warden_restarts(records(av))) >= i + 1 and warden_restarts(records(av)), 20)
            delay = (restarts[-1].get("restart_in") or 0) if restarts else 0
            back = wait_until(lambda: [w for w in wardens(av.proc.pid) if w != ws[0]], 15 + delay)
            seen_at = time.monotonic()
            if i % 2 == 0:
                answer_cut_off(av, 2)   # a kill while the lever ran leaves it asked about, and waiting
            if not restarts:
                c.violate(f"fault {i}: no self restart record for the killed warden")
            if not back:
                c.violate(f"fault {i}: the warden was not started again (back-off announced: {delay} s)")
            elif restarts and av.proc.poll() is None:
                c.survived += 1
            left = orphans([mark], [av.proc.pid])
            if left:
                c.orphans += len(left)
                c.violate(f"fault {i}: the dead warden's lever outlived it: {describe(left)}")
                kill_marked([mark])
        time.sleep(1)
        settle_stop(av, c, "after the warden kills")
        check_invariants(av, c, os.path.join(d, "lines"), "level", "lower")
        if len(warden_restarts(records(av))) != c.faults:
            c.violate(f"{c.faults} wardens killed but {len(warden_restarts(records(av)))} restart records")
        if orphans([mark]):
            c.orphans += len(orphans([mark]))
            c.violate("a lever outlived avsmd")
    finally:
        kill_daemon(av)
        kill_marked([mark])
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_warden_sigkilled_while_levers_run(bindir):
    """SIGKILL the warden 3 times (50 in tests/bench/soak.py) while a 1 s level venture's lever (random 0-0.5 s) runs: each time the
    warden is started again and self records it; the groups it left are ended (no orphan); the lever it ran
    is never run again blindly but asked about (`did lower happen?`); every line the lever wrote has its
    action, no action ran twice, and the chain re-verifies. RUN-09 RUN-10 RUN-11 RUN-12 RUN-13 RUN-15"""
    c = warden_kills(bindir, 3)
    assert not c.violations, "\n".join(c.violations)
    assert c.faults == 3 and c.survived == 3 and c.orphans == 0 and c.duplicates == 0


# ---- 2. avsmd SIGKILLed mid-burst of appends ----------------------------------------------

class Adder(threading.Thread):
    """A person re-adopting the venture again and again with a new purpose each time: each seq the client
    prints is acknowledged. A failed add is retried with the same text, as a person would."""

    def __init__(self, av, d, campaign):
        super().__init__(daemon=True)
        self.av, self.d, self.c = av, d, campaign
        self.acks = {}          # seq -> purpose
        self.k = 0
        self.halt = threading.Event()

    def run(self):
        path = os.path.join(self.d, "mandate.yaml")
        with open(path) as fh:
            template = fh.read()
        while not self.halt.is_set():
            write(path + ".new", re.sub(r"(?m)^purpose: .*$", f"purpose: burst {self.k}", template))
            os.replace(path + ".new", path)
            try:
                run = self.av.cli("add", self.d, timeout=15)
            except subprocess.TimeoutExpired:
                continue
            m = re.search(r"adopted as mandate #(\d+)", run.stdout)
            if run.returncode == 0:
                if m:
                    self.acks[int(m.group(1))] = f"burst {self.k}"
                self.k += 1
            self.halt.wait(RNG.uniform(0.05, 0.3))

    def stop(self):
        self.halt.set()
        self.join(30)


def check_adds(av, adder, c):
    by_seq = {s: r for s, _, r in records(av)}
    for seq, purpose in adder.acks.items():
        r = by_seq.get(seq)
        if r is None or r["kind"] != "mandate" or f"purpose: {purpose}\n" not in r.get("text", ""):
            c.lost += 1
            c.violate(f"avsm add printed mandate #{seq} ({purpose}), which the ledger no longer holds")
    texts = collections.Counter(re.search(r"(?m)^purpose: (.*)$", r["text"]).group(1)
                                for r in by_seq.values() if r["kind"] == "mandate")
    for purpose, n in texts.items():
        if n > 1:
            c.duplicates += 1
            c.violate(f"the mandate with purpose {purpose!r} was written {n} times")


def avsmd_kills(bindir, n=10):
    """SIGKILL avsmd alone n times while the ledger takes a burst of appends (a venture with four guards and a
    lever at 1 s, a kept program, a person re-adding it, a script tailing): its warden must stop by itself,
    ending what it ran; the next avsmd starts (sweeping what is left); nothing acknowledged is lost."""
    c = Campaign("avsmd SIGKILL mid-burst")
    root, mark, run_mark = new_root(), token(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = level_venture(root, "burst", mark, purpose="burst start", run_mark=run_mark, guards=True)
    tailer, adder = Tailer(av, c), Adder(av, d, c)
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        tailer.start()
        adder.start()
        for i in range(n):
            if i and not start(av):
                c.violate(f"fault {i}: avsmd did not start after the last SIGKILL: {av.stderr()[-400:]}")
                break
            time.sleep(RNG.uniform(0.3, 1.2))
            ws = wardens(av.proc.pid)
            os.kill(av.proc.pid, signal.SIGKILL)
            av.proc.wait()
            c.faults += 1
            if not ws:
                c.violate(f"fault {i}: avsmd had no warden")
            gone = wait_until(lambda: not any(alive(w) for w in ws), 15)
            if not gone:
                c.violate(f"fault {i}: the warden {ws} did not stop by itself after avsmd died")
                for w in ws:
                    os.kill(w, signal.SIGKILL)
            left = orphans([mark, run_mark])
            if "Traceback" in av.stderr():
                c.violate(f"fault {i}: the warden crashed when avsmd died: {av.stderr().strip().splitlines()[-3:]}")
            if left:
                # ended here once counted, so that the next fault does not count them again
                c.orphans += len(left)
                c.violate(f"fault {i}: programs outlived avsmd and its warden: {describe(left)}")
                kill_marked([mark, run_mark])
            if gone and not left and "Traceback" not in av.stderr():
                c.survived += 1
        if not start(av):
            c.violate(f"avsmd did not start after the last SIGKILL: {av.stderr()[-400:]}")
        else:
            time.sleep(1.0)
        adder.stop()
        tailer.stop()
        settle_stop(av, c, "after the avsmd kills")
        check_acknowledged(av, tailer.seen, c)
        check_adds(av, adder, c)
        check_invariants(av, c, os.path.join(d, "lines"), "burst", "lower")
        if orphans([mark, run_mark]):
            c.orphans += 1
            c.violate("programs outlived the final stop")
    finally:
        adder.halt.set()
        tailer.halt.set()
        kill_daemon(av)
        for w in wardens(av.proc.pid) if av.proc else []:
            os.kill(w, signal.SIGKILL)
        kill_marked([mark, run_mark])
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_avsmd_sigkilled_mid_burst(bindir):
    """SIGKILL avsmd 4 times (50 in tests/bench/soak.py) mid-burst: its warden stops by itself and ends its programs (no orphan); the next
    avsmd starts; every record a client saw (tail --since, the seq `avsm add` printed) is still there, none is
    written twice, and the chain re-verifies. RUN-13 RUN-14 LEDGER-03 PITFALLS 2"""
    c = avsmd_kills(bindir, 4)
    assert not c.violations, "\n".join(c.violations)
    assert c.faults == 4 and c.survived == 4 and c.records > 40


def avsmd_killed_while_not_reading(bindir, n=1):
    """SIGKILL avsmd while the warden's messages to it wait unread (avsmd stopped with SIGSTOP for a moment, as
    a busy or swapped-out avsmd would be): the warden must still stop by itself, ending what it runs."""
    c = Campaign("avsmd SIGKILLed with the warden's messages unread")
    root, mark, run_mark = new_root(), token(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = level_venture(root, "burst", mark, run_mark=run_mark, guards=True)
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        for i in range(n):
            if i and not start(av):
                c.violate(f"fault {i}: avsmd did not start: {av.stderr()[-400:]}")
                break
            wait_until(lambda: marked(run_mark), 10)
            time.sleep(1.5)
            ws = wardens(av.proc.pid)
            os.kill(av.proc.pid, signal.SIGSTOP)
            time.sleep(1.2)                 # a round or so: the warden tells avsmd of the groups it starts
            os.kill(av.proc.pid, signal.SIGKILL)
            av.proc.wait()
            c.faults += 1
            if not wait_until(lambda: not any(alive(w) for w in ws), 15):
                c.violate(f"fault {i}: the warden did not stop after avsmd died")
            left = orphans([mark, run_mark])
            crashed = "Traceback" in av.stderr()
            if crashed:
                c.violate(f"fault {i}: the warden crashed when avsmd died: {av.stderr().strip().splitlines()[-3:]}")
            if left:
                c.orphans += len(left)
                c.violate(f"fault {i}: its programs outlived avsmd and the warden: {describe(left)}")
            if not crashed and not left:
                c.survived += 1
        if start(av):
            time.sleep(0.5)
            settle_stop(av, c, "after the kills")
            check_invariants(av, c, os.path.join(d, "lines"), "burst", "lower")
        else:
            c.violate(f"avsmd did not start after the kills: {av.stderr()[-400:]}")
    finally:
        kill_daemon(av)
        kill_marked([mark, run_mark])
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_avsmd_sigkilled_with_unread_messages_warden_still_stops_cleanly(bindir):
    """avsmd SIGKILLed while the warden's messages to it wait unread (it was stopped a moment): the warden stops
    by itself as at a SIGTERM, ending its programs; nothing outlives them. RUN-14 RUN-13 RUN-07"""
    c = avsmd_killed_while_not_reading(bindir, 1)
    assert not c.violations, "\n".join(c.violations)


# ---- 3. avsmd and its warden SIGKILLed together ---------------------------------------------

KEEP_STUBBORN = """#!/bin/sh
(if [ -e stubborn ]; then trap '' TERM; fi; sleep 300.{a}
) &
sleep 300.{b}
"""


def session_kills(bindir, n=1):
    """killpg avsmd's session (avsmd and the warden die together) while a kept program runs whose child
    ignores SIGTERM: the next avsmd ends those groups before it answers or starts anything, and writes a
    `sweep` record right after its start record."""
    c = Campaign("avsmd and warden SIGKILLed, stubborn orphans")
    root, a, b = new_root(), token(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = make_venture(root, "keep", LEVEL.format(purpose="Keep it up.", cadence="1m", extra="run: ./keep\n"),
                     {"report": "#!/bin/sh\necho 0\n", "lower": "#!/bin/sh\ntrue\n", "keep": KEEP_STUBBORN.format(a=a, b=b)})
    stubborn = write(os.path.join(d, "stubborn"), "")
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        seen = set()
        for i in range(n):
            if not wait_until(lambda: set(marked(a)) - seen and set(marked(b)) - seen, 15):
                c.violate(f"fault {i}: the kept program did not start")
                break
            time.sleep(1.5)                 # avsmd keeps its record of groups on disk within the second
            old = marked(a) + marked(b)
            os.killpg(av.proc.pid, signal.SIGKILL)
            av.proc.wait()
            c.faults += 1
            wait_until(lambda: not wardens(av.proc.pid), 5)
            os.unlink(stubborn)             # the programs the next avsmd starts may go at the first SIGTERM
            if not all(alive(p) for p in old):
                c.violate(f"fault {i}: precondition: the kept program did not outlive its avsmd")
            t0 = time.monotonic()
            start(av, wait=False)
            answered = wait_until(lambda: av.proc.poll() is not None or status_ok(av), 25, step=0.1)
            if av.proc.poll() is not None or not answered:
                c.violate(f"fault {i}: the next avsmd did not come up: {av.stderr()[-400:]}")
                break
            everything = records(av)
            before = next((s - 1 for s, _, r in everything
                           if r["kind"] == "start" and r["venture"] == "self" and r.get("pid") == av.proc.pid), 0)
            left = [p for p in old if alive(p)]
            if left:
                c.orphans += len(left)
                c.violate(f"fault {i}: avsmd answered while the orphans {left} of the last one still ran")
                kill_marked([a, b])
            else:
                c.survived += 1
            recs = [(s, r) for s, _, r in records(av) if s > before]
            kinds = [(r["venture"], r["kind"]) for s, r in recs]
            if kinds[:2] != [("self", "start"), ("self", "sweep")] or not recs[1][1].get("groups"):
                c.violate(f"fault {i}: the next avsmd's first records are {kinds[:4]}, not start then sweep")
            took = time.monotonic() - t0
            if took > 15:
                c.violate(f"fault {i}: ending the orphans took {took:.1f}s")
            seen.update(old)
            if i < n - 1:                   # the next round's kept program is stubborn again
                write(stubborn, "")
                for p in marked(b):
                    os.killpg(os.getpgid(p), signal.SIGTERM)
        settle_stop(av, c, "after the session kills")
        if marked(a) or marked(b):
            c.orphans += 1
            c.violate("the kept program outlived the final stop")
        check_invariants(av, c)
    finally:
        kill_daemon(av)
        kill_marked([a, b])
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_avsmd_and_warden_sigkilled_together_orphans_are_swept(bindir):
    """killpg of avsmd's session with a `run` whose child ignores SIGTERM: the orphaned groups outlive it; the
    next avsmd ends them (TERM, then KILL 7 s later) before it answers, and writes a `sweep` record right after
    its start. RUN-13 RUN-14 RUN-15 PITFALLS 1 PITFALLS 2"""
    c = session_kills(bindir, 1)
    assert not c.violations, "\n".join(c.violations)
    assert c.faults == 1 and c.survived == 1


YOUNG = """#!/bin/sh
exec sleep 30.{mark}
"""


def session_kills_young(bindir, n=3):
    """killpg avsmd's session a random 0-0.1 s after a long lever has started: the next avsmd must end it.
    The lever leads a group the warden told avsmd of; whether avsmd had it on disk yet is what this tries."""
    c = Campaign("avsmd and warden SIGKILLed just after a lever started")
    root, mark = new_root(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = make_venture(root, "young", LEVEL.format(purpose="Keep it low.", cadence="1s", extra=""),
                     {"report": "#!/bin/sh\necho 50\n", "lower": YOUNG.format(mark=mark)})
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        before = set()
        for i in range(n):
            young = wait_until(lambda: [p for p in marked(mark) if p not in before], 10, step=0.005)
            if not young:
                c.violate(f"fault {i}: the lever did not start")
                break
            time.sleep(RNG.uniform(0, 0.1))
            os.killpg(av.proc.pid, signal.SIGKILL)
            av.proc.wait()
            c.faults += 1
            if not start(av):
                c.violate(f"fault {i}: the next avsmd did not start: {av.stderr()[-400:]}")
                break
            answer_cut_off(av)
            left = [p for p in young if alive(p)]
            if left:
                c.orphans += len(left)
                c.violate(f"fault {i}: the lever {left} started just before avsmd died outlived it, and the next "
                          f"avsmd did not end it")
                kill_marked([mark])
            else:
                c.survived += 1
            before |= set(young)
        settle_stop(av, c, "after the kills")
        check_invariants(av, c)
    finally:
        kill_daemon(av)
        kill_marked([mark])
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_lever_started_just_before_avsmd_dies_is_ended_by_the_next(bindir):
    """SIGKILL avsmd and its warden a random 0-0.1 s after a long lever started (3 times): the next avsmd ends
    that lever (it must have been on disk before it could outlive avsmd). RUN-12 RUN-13 RUN-14 PITFALLS 2"""
    c = session_kills_young(bindir, 3)
    assert not c.violations, "\n".join(c.violations)


# ---- 4. the ledger cannot be written --------------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe room is set with Linux's F_SETPIPE_SZ")
def test_a_flood_of_output_waits_for_no_one_up_to_a_mebibyte(tmp_path):
    """A program's output pipe holds 1 MiB, so a report printing 900 KB ends without waiting for the warden's
    turns (on a loaded machine a 10 MB report met its cadence only so); what it printed is still read after
    it ended, keeping the last 64 KiB. REPORT-04 RUN-16"""
    child = avsm.Child("report", "flood", ["sh", "-c", "head -c 900000 /dev/zero | tr '\\0' x; echo 5"],
                       str(tmp_path), dict(os.environ))
    try:
        deadline = time.monotonic() + 10
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.poll() == 0, "the program waited for its output to be read"
        while child.drain(child.stdout):
            time.sleep(0.01)
        assert len(child.out) == avsm.OUTPUT_KEEP and child.out.endswith(b"xxx5\n")
    finally:
        if child.poll() is None:
            os.killpg(child.pgid, signal.SIGKILL)
            os.waitpid(child.pid, 0)
        child.close()


def test_a_group_is_ended_only_while_it_is_still_the_one_started():
    """avsmd and the next avsmd end a group they were told of only while it is that group: alive, and its
    leader the very process (by start time) or gone while members remain; a pid now naming another
    process, or a group gone, is left alone (a group's end reaches avsmd late). RUN-13 RUN-14 PITFALLS 3"""
    leader = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], process_group=0)
    try:
        start = avsm.process_start(leader.pid)
        assert start is not None
        assert avsm.group_is_still(leader.pid, start)
        assert avsm.group_is_still(leader.pid, None)                 # start unknown: the group is taken as ours
        assert not avsm.group_is_still(leader.pid, start + 1)        # another process under that pid
        member = wait_until(lambda: [p for p, row in proc_table().items() if row[1] == leader.pid], 5, step=0.01)
        assert member
        os.kill(leader.pid, signal.SIGKILL)                          # the leader goes; its member stays
        leader.wait()
        assert alive(member[0])
        assert avsm.group_is_still(leader.pid, start), "a group whose leader is gone is still the one started"
    finally:
        try:
            os.killpg(leader.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        leader.wait()
    assert wait_until(lambda: not avsm.group_is_still(leader.pid, start), 5), "a group gone is not ours to end"


def test_orphans_no_record_names_are_ended_and_no_one_elses(bindir):
    """A warden killed between starting a program and recording its group leaves an orphan no record names:
    the next avsmd finds it by its environment (AVSM_HOME of this home and a venture), ends its group before
    anything else and counts it in the sweep record; an orphan of another home, or one naming no venture, is
    left alone. RUN-13 RUN-14 PITFALLS 2"""
    root, mark = new_root(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    try:
        assert start(av), av.stderr()[-400:]
        settle_stop(av, Campaign("orphans"), "before the orphans")

        def orphan(tag, **env):
            subprocess.Popen(["sh", "-c", f"sleep 60.{mark}{tag} & exit 0"], start_new_session=True,
                             env=dict(os.environ, **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait()
            return wait_until(lambda: marked(f"60.{mark}{tag}"), 5, step=0.01)[0]

        ours = orphan("1", AVSM_HOME=av.home, AVSM_VENTURE="ghost")
        other = orphan("2", AVSM_HOME=av.home + "x", AVSM_VENTURE="ghost")
        nameless = orphan("3", AVSM_HOME=av.home)
        assert start(av), av.stderr()[-400:]
        assert wait_until(lambda: not alive(ours), 10), "the next avsmd left the orphan running"
        assert alive(other) and alive(nameless), "an orphan of another home, or of no venture, was ended"
        sweeps = [r for _, _, r in records(av) if r["kind"] == "sweep" and r["venture"] == "self"]
        assert sweeps and sweeps[-1]["groups"] == 1, sweeps
        c = Campaign("orphans")
        settle_stop(av, c, "after the sweep")
        assert not c.violations, "\n".join(c.violations)
    finally:
        kill_daemon(av)
        kill_marked([mark])
        shutil.rmtree(root, ignore_errors=True)


def test_groups_journal_is_compacted_to_what_still_runs_and_never_replaces_anothers(tmp_path):
    """HOME/groups past 64 KiB is replaced by the groups still running (with their leaders' start times),
    while the home's lock names our avsmd; once another avsmd's pid stands in the lock, the journal is only
    appended to, never replaced. RUN-14 LOCK-05"""
    home = str(tmp_path)
    lock, journal = os.path.join(home, "avsmd.lock"), os.path.join(home, "groups")
    with open(lock, "w") as fh:
        fh.write(f"{os.getppid()}\n")               # the warden's avsmd is its parent: here, pytest's
    ours, theirs = socket.socketpair()
    try:
        warden = avsm.GroupsJournal(home, avsm.LockCheck(lock, os.getppid()).lock_is_ours)    # the warden's room
        warden.journal_group("+7 123 v run")
        for pgid in range(100, 3000):
            warden.journal_group(f"+{pgid} {pgid * 10} v report")
            warden.journal_group(f"-{pgid}")
        with open(journal) as fh:
            text = fh.read()
        assert len(text) < 64 * 1024 + 100, "never compacted"
        live = {}
        for line in text.splitlines():
            fields = line.split()
            if fields[0].startswith("+"):
                live[fields[0][1:]] = fields
            else:
                live.pop(fields[0][1:], None)
        assert live == {"7": ["+7", "123", "v", "run"]}, live
        inode = os.stat(journal).st_ino
        with open(lock, "w") as fh:
            fh.write("999999\n")                     # another avsmd took the home
        for pgid in range(3000, 6000):
            warden.journal_group(f"+{pgid} 1 v report")
            warden.journal_group(f"-{pgid}")
        assert os.stat(journal).st_ino == inode, "another avsmd's journal was replaced"
    finally:
        ours.close()
        theirs.close()


def test_groups_journal_deleted_under_a_running_lever_is_made_again(bindir):
    """HOME/groups deleted while a long lever runs: the warden makes it again at its next start of a group,
    with what still runs, so avsmd and its warden SIGKILLed together after that still leave no orphan: the
    next avsmd ends the lever and records a sweep. RUN-14 PITFALLS 2"""
    root, mark = new_root(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    journal = os.path.join(av.home, "groups")
    d = make_venture(root, "deleted", LEVEL.format(purpose="Keep it low.", cadence="1s", extra=""),
                     {"report": "#!/bin/sh\necho 50\n", "lower": YOUNG.format(mark=mark)})
    try:
        assert start(av) and av.cli("add", d).returncode == 0, av.stderr()[-400:]
        lever = wait_until(lambda: marked(mark), 10, step=0.01)
        assert lever, "the lever did not start"
        assert wait_until(lambda: os.path.exists(journal), 5)
        os.unlink(journal)
        # the next report (cadence 1 s) starts a group: the journal is made again, the lever in it
        assert wait_until(lambda: os.path.exists(journal), 5), "HOME/groups was not made again"
        with open(journal) as fh:
            lines = fh.read().split("\n")
        group = os.getpgid(lever[0])
        assert any(line.startswith(f"+{group} ") for line in lines), lines
        os.killpg(av.proc.pid, signal.SIGKILL)
        av.proc.wait()
        assert all(alive(p) for p in lever), "the lever died with avsmd; nothing left to sweep"
        assert start(av), av.stderr()[-400:]
        assert wait_until(lambda: not any(alive(p) for p in lever), 10), "the next avsmd left the lever running"
        sweeps = [r for _, _, r in records(av) if r["kind"] == "sweep" and r["venture"] == "self"]
        assert sweeps and sweeps[-1]["groups"] >= 1, sweeps
        c = Campaign("groups journal deleted")
        settle_stop(av, c, "after the sweep")
        check_invariants(av, c)
        assert not c.violations, "\n".join(c.violations)
    finally:
        kill_daemon(av)
        kill_marked([mark])
        shutil.rmtree(root, ignore_errors=True)


def down_checks(av, c, venture, lines, mark, seconds=3.0):
    """While the ledger cannot be written: status and doctor say so, nothing is appended, no lever starts,
    and a command that would write exits 75."""
    time.sleep(0.8)                       # a lever already running finishes; its outcome waits
    with_lines = lambda: sum(1 for _ in open(lines)) if os.path.exists(lines) else 0   # noqa: E731
    n_lines, seq0 = with_lines(), last_seq(av)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = av.cli("status")
        if "ledger: cannot be written" not in status.stdout:
            c.violate(f"status does not say the ledger cannot be written: {status.stdout[:300]!r} {status.stderr[-200:]!r}")
            break
        if marked(mark):
            c.violate("a lever started while the ledger could not be written")
            break
        time.sleep(0.5)
    if with_lines() != n_lines:
        c.violate("a lever ran while the ledger could not be written")
    if last_seq(av) != seq0:
        c.violate("records were appended while the ledger could not be written")
    paused = av.cli("pause", venture)
    if paused.returncode != 75 or "cannot be written" not in paused.stderr:
        c.violate(f"avsm pause while the ledger cannot be written exited {paused.returncode}: {paused.stderr[-200:]}")
    doc = av.cli("doctor")
    if doc.returncode == 0 or "cannot be written" not in doc.stdout:
        c.violate(f"doctor does not say the ledger cannot be written (exit {doc.returncode})")
    return seq0


def recovery_checks(av, c, seq0, lifted_at):
    """Once writes are possible again: within ~35 s the backlog, then a `ledger` record, then reports again."""
    found = wait_until(lambda: [s for s, _, r in records(av) if s > seq0 and r["kind"] == "ledger"], 40, step=0.25)
    if not found:
        c.violate(f"no `ledger` record within 40 s of lifting the fault: {av.stderr()[-300:]}")
        return
    took = time.monotonic() - lifted_at
    if took > 36:
        c.violate(f"the ledger was tried again only after {took:.0f}s")
    ledger_seq = found[0]
    recs = records(av)
    between = [r["kind"] for s, _, r in recs if seq0 < s < ledger_seq]
    if any(k not in ("outcome", "exit") for k in between):
        c.violate(f"before the `ledger` record came {between}: only what had already happened may wait")
    if not wait_until(lambda: [s for s, _, r in records(av) if s > ledger_seq and r["kind"] == "report"], 6):
        c.violate("reports did not resume after the ledger took writes again")
    status = av.cli("status")
    if "cannot be written" in status.stdout:
        c.violate("status still says the ledger cannot be written")
    if count(records(av), "pause"):
        c.violate("the refused pause was written after all")
    if count(records(av), "ledger", "self") != 1:
        c.duplicates += 1
        c.violate(f"{count(records(av), 'ledger', 'self')} `ledger` records for one fault")


def ledger_down_by_rlimit(bindir):
    """The ledger stops taking writes: avsmd is started with RLIMIT_FSIZE just above the ledger's size (its
    warden inherits it), so the ledger's next page cannot be written (EFBIG); the limit is then lifted with
    prlimit."""
    c = Campaign("ledger cannot be written (RLIMIT_FSIZE)")
    root, mark = new_root(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = level_venture(root, "level", mark)
    lines = os.path.join(d, "lines")
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        wait_until(lambda: count(records(av), "outcome") >= 2, 15)
        settle_stop(av, c, "before the fault")
        limit = os.path.getsize(os.path.join(av.home, "ledger.db")) + 8192
        if not start(av, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))):
            c.violate(f"avsmd did not start under the limit: {av.stderr()[-400:]}")
            return c
        down = wait_until(lambda: "ledger: cannot be written" in av.cli("status").stdout or av.proc.poll() is not None, 60, step=0.3)
        if av.proc.poll() is not None or not down:
            c.violate(f"the ledger never went down, or avsmd exited ({av.proc.poll()}): {av.stderr()[-400:]}")
            return c
        c.faults += 1
        seq0 = down_checks(av, c, "level", lines, mark)
        if av.proc.poll() is not None:
            c.violate(f"avsmd exited {av.proc.poll()} while the ledger could not be written: {av.stderr()[-400:]}")
            return c
        for pid in [av.proc.pid] + wardens(av.proc.pid):
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        recovery_checks(av, c, seq0, time.monotonic())
        if av.proc.poll() is None:
            c.survived += 1
        settle_stop(av, c, "after the fault")
        check_invariants(av, c, lines, "level", "lower")
    finally:
        kill_daemon(av)
        kill_marked([mark])
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_ledger_that_cannot_be_written_stops_writers_and_catches_up(bindir):
    """The ledger cannot be written (RLIMIT_FSIZE just above its size): status and doctor say so, nothing is
    appended, no lever starts, a command that would write exits 75; once the limit is lifted, within ~35 s
    the outcome that waited is written, then a `ledger` record, and reports resume; nothing is written twice.
    RUN-19 RUN-20 RUN-21"""
    probe = mount_tmpfs("1m")
    if probe is not None:
        unmount(probe)
        pytest.skip("a tmpfs can be mounted here: the disk-full test below fills a real one (this RLIMIT_FSIZE "
                    "variant is the fallback; tests/bench/soak.py runs both)")
    c = ledger_down_by_rlimit(bindir)
    assert not c.violations, "\n".join(c.violations)
    assert c.faults == 1 and c.survived == 1


def mount_tmpfs(size="8m"):
    """A small tmpfs of our own, or None where mounting is not allowed."""
    mnt = tempfile.mkdtemp(prefix="avt", dir="/tmp")
    run = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", mnt],
                         capture_output=True, text=True)
    if run.returncode != 0:
        os.rmdir(mnt)
        return None
    return mnt


def unmount(mnt):
    subprocess.run(["umount", "-l", mnt], capture_output=True)
    shutil.rmtree(mnt, ignore_errors=True)


def disk_full(bindir):
    """The disk is full for real: the home is on a small tmpfs, filled by a filler file while a venture runs
    (a lever at 1 s and a kept program); then the filler is deleted."""
    c = Campaign("disk full for real (tmpfs)")
    mnt = mount_tmpfs()
    if mnt is None:
        return None
    root, mark, run_mark = new_root(), token(), token()
    av = Avsm(bindir, os.path.join(mnt, "h"))
    d = level_venture(root, "level", mark, run_mark=run_mark)
    lines = os.path.join(d, "lines")
    filler = os.path.join(mnt, "filler")
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        wait_until(lambda: count(records(av), "outcome") >= 2, 15)
        time.sleep(RNG.uniform(0, 1))
        with open(filler, "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        c.faults += 1
        down = wait_until(lambda: av.proc.poll() is not None or "ledger: cannot be written" in av.cli("status").stdout, 15, step=0.3)
        if av.proc.poll() is not None or not down:
            c.violate(f"with the disk full avsmd exited {av.proc.poll()} instead of waiting for space: "
                      f"{av.stderr().strip().splitlines()[-2:]}")
            return c
        seq0 = down_checks(av, c, "level", lines, mark)
        if av.proc.poll() is not None:
            c.violate(f"with the disk full avsmd exited {av.proc.poll()} while the ledger could not be written: "
                      f"{av.stderr().strip().splitlines()[-2:]}")
            return c
        os.unlink(filler)
        recovery_checks(av, c, seq0, time.monotonic())
        if av.proc.poll() is None:
            c.survived += 1
        settle_stop(av, c, "after the fault")
        check_invariants(av, c, lines, "level", "lower")
    finally:
        kill_daemon(av)
        kill_marked([mark, run_mark])
        unmount(mnt)
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_disk_full_for_real_stops_writers_and_catches_up(bindir):
    """The disk is full for real (the home on a small tmpfs, filled up while a venture with a lever and a kept
    program runs): avsmd stays up, status and doctor say the ledger cannot be written, nothing is appended,
    no lever starts; once the filler is deleted, within ~35 s the backlog and a `ledger` record are written and
    reports resume, nothing twice. RUN-19 RUN-20 RUN-21"""
    c = disk_full(bindir)
    if c is None:
        pytest.skip("mount -t tmpfs is not allowed here; the RLIMIT_FSIZE test covers the ledger going down")
    assert not c.violations, "\n".join(c.violations)


# ---- 5. the socket and the lock file deleted ---------------------------------------------------

def socket_and_lock_deleted(bindir, n=3):
    """Delete the socket and the lock file n times while a busy venture runs: each time both must be made
    again within a second (a second avsmd is refused meanwhile), and the deletion must cut nothing off: the
    same warden runs throughout, no lever is cut off, and the clean stop is recorded."""
    c = Campaign("socket and lock file deleted")
    root, mark = new_root(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = level_venture(root, "level", mark, guards=True)
    tailer = Tailer(av, c)
    lock, sock = os.path.join(av.home, "avsmd.lock"), os.path.join(av.home, "sock")
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        tailer.start()
        wait_until(lambda: count(records(av), "outcome") >= 1, 15)
        first_warden = wardens(av.proc.pid)
        for i in range(n):
            time.sleep(RNG.uniform(0.3, 1.0))
            os.unlink(sock)
            os.unlink(lock)
            t0 = time.monotonic()
            c.faults += 1

            def remade():
                try:
                    with open(lock) as fh:
                        if fh.read().strip() != str(av.proc.pid):
                            return False
                    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        probe.connect(sock)
                    finally:
                        probe.close()
                except OSError:
                    return False
                return True
            if not wait_until(remade, 5, step=0.02):
                c.violate(f"fault {i}: the lock file and socket were not made again within 5 s")
                continue
            took = time.monotonic() - t0
            if took > 2.0:                  # each second, with some slack for a loaded machine
                c.violate(f"fault {i}: making the lock file and socket again took {took:.2f}s")
            if wait_until(lambda: status_ok(av), 10, step=0.1):
                if took <= 2.0:
                    c.survived += 1
            else:
                c.violate(f"fault {i}: avsmd did not answer status within 10 s of the deletion")
            if i == 0:
                second = av.daemon_cmd(timeout=20)
                if second.returncode != 75 or str(av.proc.pid) not in second.stderr:
                    c.violate(f"a second avsmd was not refused once the lock was made again: {second.returncode}")
        time.sleep(1)
        now_warden = wardens(av.proc.pid)
        tailer.stop()
        settle_stop(av, c, "after the deletions")
        check_acknowledged(av, tailer.seen, c)
        check_invariants(av, c, os.path.join(d, "lines"), "level", "lower")
        check_nothing_cut(av, c, first_warden, now_warden, "deleting the lock file")
    finally:
        tailer.halt.set()
        kill_daemon(av)
        kill_marked([mark])
        shutil.rmtree(root, ignore_errors=True)
    return c


def check_nothing_cut(av, c, first_warden, now_warden, what):
    """After `what` and a clean stop: the same warden ran throughout, no lever was cut off, the stop was recorded."""
    recs = records(av)
    if now_warden != first_warden:
        c.violate(f"{what} ended the warden ({first_warden} -> {now_warden}), with "
                  f"{len(warden_restarts(recs))} restart record(s) for it")
    cut = [s for s, _, r in recs if r["kind"] == "outcome" and r.get("status") == "unknown"]
    if cut:
        c.violate(f"{what} cut off the levers of actions {cut}")
    if not recs or (recs[-1][2]["venture"], recs[-1][2]["kind"]) != ("self", "stop"):
        c.violate(f"the clean stop after {what} wrote no stop record (last record: {recs[-1][2]['kind'] if recs else None})")


def test_deleted_socket_and_lock_file_are_made_again_within_a_second(bindir):
    """Delete the socket and the lock file while levers run: avsmd makes both again within a second, a second
    avsmd is refused with 75 meanwhile, the warden goes on (no lever cut off, no restart), the clean stop is
    recorded, nothing acknowledged is lost and the chain re-verifies. LOCK-04 LOCK-05 LOCK-03 LOCK-07"""
    c = socket_and_lock_deleted(bindir, 3)
    assert not c.violations, "\n".join(c.violations)
    assert c.faults == 3 and c.survived == 3


def lock_deleted_while_avsmd_is_busy(bindir):
    """Delete the lock file while avsmd cannot make it again at once (stopped a moment with SIGSTOP, as a busy
    avsmd is, say while it ends a group that ignores SIGTERM): a deleted lock file is no other avsmd's lock, so
    the warden must go on (no lever cut off, no restart), and avsmd must go on writing its own records (a
    warden that did end is recorded by a `restart`; the clean stop by a `stop`)."""
    c = Campaign("lock file deleted while avsmd is busy")
    root, mark = new_root(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = level_venture(root, "level", mark, guards=True)
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        wait_until(lambda: count(records(av), "outcome") >= 1, 15)
        first_warden = wardens(av.proc.pid)
        os.kill(av.proc.pid, signal.SIGSTOP)
        try:
            os.unlink(os.path.join(av.home, "avsmd.lock"))
            time.sleep(1.5)                 # the warden's rounds go on meanwhile
        finally:
            os.kill(av.proc.pid, signal.SIGCONT)
        c.faults += 1
        if not wait_until(lambda: status_ok(av), 15, step=0.1):
            c.violate("avsmd did not answer after the lock file was deleted")
        time.sleep(2)
        now_warden = wardens(av.proc.pid)
        settle_stop(av, c, "after the deletion")
        check_invariants(av, c, os.path.join(d, "lines"), "level", "lower")
        check_nothing_cut(av, c, first_warden, now_warden, "deleting the lock file")
        if not c.violations:
            c.survived += 1
    finally:
        kill_daemon(av)
        kill_marked([mark])
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_deleting_the_lock_file_cuts_nothing_off(bindir):
    """A deleted lock file is not another avsmd's lock: while avsmd is slow to make it again, its warden keeps
    working (no lever cut off, no restart) and avsmd keeps writing its own records (the clean stop is recorded).
    LOCK-05 LOCK-07 RUN-09 SELF-01"""
    c = lock_deleted_while_avsmd_is_busy(bindir)
    assert not c.violations, "\n".join(c.violations)


# ---- 6. a second avsmd takes the lock ---------------------------------------------------------

def start_serving(av, env_who):
    """Start avsmd while another (stopped) avsmd still has a socket here; wait for it to say it serves."""
    av.env["WHO"] = env_who
    if not start(av, wait=False):
        return False
    serving = f"serving {av.home} (pid {av.proc.pid})"
    return wait_until(lambda: av.proc.poll() is not None or serving in av.stderr(), 20) and av.proc.poll() is None


def second_daemon(bindir, n=1):
    """While the first avsmd is stopped (SIGSTOP), its lock file is deleted and a second avsmd starts and takes
    the lock; the first, let go on, must exit 75 saying why, and from the second's start on nothing of the first
    (avsmd or warden) is appended. The venture's report prints $WHO, so each warden's reports are told apart."""
    c = Campaign("a second avsmd takes the lock")
    for i in range(n):
        root, mark, run_mark = new_root(), token(), token()
        home = os.path.join(root, "h")
        first, second = Avsm(bindir, home, env={"WHO": "11"}), Avsm(bindir, home, env={"WHO": "22"})
        d = level_venture(root, "who", mark, run_mark=run_mark, report="#!/bin/sh\necho $WHO\n")
        write(os.path.join(d, "keep"), f"#!/bin/sh\nexec sleep 300.${{WHO}}{run_mark}\n", 0o755)
        try:
            if not start(first) or first.cli("add", d).returncode != 0:
                c.violate(f"the first avsmd did not start: {first.stderr()[-400:]}")
                continue
            wait_until(lambda: count(records(first), "outcome") >= 1, 15)
            time.sleep(RNG.uniform(0, 1))
            os.kill(first.proc.pid, signal.SIGSTOP)
            try:
                os.unlink(os.path.join(home, "avsmd.lock"))
                ok = start_serving(second, "22")
            finally:
                os.kill(first.proc.pid, signal.SIGCONT)
            c.faults += 1
            if not ok:
                c.violate(f"the second avsmd did not start: {second.stderr()[-400:]}")
                continue
            try:
                code = first.proc.wait(20)
            except subprocess.TimeoutExpired:
                code = None
            if code != 75 or "took the lock" not in first.stderr():
                c.violate(f"the first avsmd exited {code}, not 75 saying why: {first.stderr()[-300:]}")
            time.sleep(1.5)
            recs = records(second)
            starts = [s for s, _, r in recs if r["kind"] == "start" and r["venture"] == "self" and r.get("pid") == second.proc.pid]
            if not starts:
                c.violate("the second avsmd wrote no start record")
                continue
            after = [(s, r["kind"], r["summary"]) for s, _, r in recs if s > starts[0] and
                     ((r["kind"] == "report" and r.get("value") == 11) or str(first.proc.pid) in r["summary"])]
            if after:
                c.violate(f"the first avsmd or its warden appended after the second took the lock: {after[:3]}")
            if second.cli("status").returncode == 0:
                c.survived += 1
            settle_stop(second, c, "the second avsmd")
            check_invariants(second, c, os.path.join(d, "lines"), "who", "lower")
            left = orphans([mark, "300.11" + run_mark, "300.22" + run_mark])
            if left:
                c.orphans += len(left)
                c.violate(f"programs outlived both avsmd: {left}")
        finally:
            for av in (first, second):
                if av.proc is not None and av.proc.poll() is None:
                    try:
                        os.kill(av.proc.pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                kill_daemon(av)
            kill_marked([mark, "300.11" + run_mark, "300.22" + run_mark])
            shutil.rmtree(root, ignore_errors=True)
    return c


def test_second_avsmd_taking_the_lock_stops_the_first(bindir):
    """A second avsmd that takes the lock after the first's lock file was deleted: the first exits 75 and says
    why, and from that moment neither it nor its warden appends anything; the chain re-verifies and nothing is
    left running. LOCK-06 LOCK-07 EXIT-08 open point 53"""
    c = second_daemon(bindir, 1)
    assert not c.violations, "\n".join(c.violations)
    assert c.faults == 1 and c.survived == 1


def second_daemon_then_crash(bindir):
    """After a second avsmd took the lock and the first stopped, the second is SIGKILLed with its warden: the
    avsmd after it must end the kept program the second left (it is in the second's record of groups)."""
    c = Campaign("a second avsmd takes the lock, then crashes")
    root, run_mark = new_root(), token()
    home = os.path.join(root, "h")
    first, second, third = (Avsm(bindir, home, env={"WHO": w}) for w in ("11", "22", "33"))
    d = make_venture(root, "who", LEVEL.format(purpose="Keep it up.", cadence="1m", extra="run: ./keep\n"),
                     {"report": "#!/bin/sh\necho 0\n", "lower": "#!/bin/sh\ntrue\n",
                      "keep": f"#!/bin/sh\nexec sleep 300.${{WHO}}{run_mark}\n"})
    mine = ["300.11" + run_mark, "300.22" + run_mark, "300.33" + run_mark]
    try:
        if not start(first) or first.cli("add", d).returncode != 0:
            c.violate(f"the first avsmd did not start: {first.stderr()[-400:]}")
            return c
        wait_until(lambda: marked(mine[0]), 10)
        first_wardens = wardens(first.proc.pid)
        os.kill(first.proc.pid, signal.SIGSTOP)
        try:
            os.unlink(os.path.join(home, "avsmd.lock"))
            ok = start_serving(second, "22")
            ok = ok and wait_until(lambda: marked(mine[1]), 10)
            # the second's sweep ended the first's kept program; the first's warden, told so, tries to append
            # and, the lock being another's, ends: the first avsmd meets that end first when it goes on
            wait_until(lambda: not any(alive(w) for w in first_wardens), 5)

            def on_disk():
                try:
                    listed = set()
                    with open(os.path.join(home, "groups")) as fh:      # a journal: +PGID START ... / -PGID
                        for line in fh:
                            if line.strip():
                                pgid = line.split()[0]
                                listed.discard(pgid[1:]) if pgid.startswith("-") else listed.add(pgid.lstrip("+"))
                except OSError:
                    return False
                return all(str(os.getpgid(p)) in listed for p in marked(mine[1]))
            ok = ok and wait_until(on_disk, 5)      # the second's record of its groups is on disk
        finally:
            os.kill(first.proc.pid, signal.SIGCONT)
        if not ok:
            c.violate(f"the second avsmd did not start its kept program, or has no record of it on disk: {second.stderr()[-400:]}")
            return c
        try:
            first.proc.wait(20)
        except subprocess.TimeoutExpired:
            c.violate("the first avsmd did not stop")
        kept = marked(mine[1])
        os.killpg(second.proc.pid, signal.SIGKILL)
        second.proc.wait()
        c.faults += 1
        try:
            with open(os.path.join(home, "groups")) as fh:
                groups = fh.read()
        except OSError:
            groups = None
        if not start(third):
            c.violate(f"the third avsmd did not start: {third.stderr()[-400:]}")
            return c
        left = [p for p in kept if alive(p)]
        if left:
            c.orphans += len(left)
            c.violate(f"the second avsmd's kept program {left} outlived it and the next avsmd did not end it "
                      f"(the groups file it found: {groups!r}, "
                      f"sweep records: {count(records(third), 'sweep')})")
        else:
            c.survived += 1
        settle_stop(third, c, "the third avsmd")
    finally:
        for av in (first, second, third):
            if av.proc is not None and av.proc.poll() is None:
                try:
                    os.kill(av.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            kill_daemon(av)
        kill_marked(mine)
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_second_avsmd_then_crash_leaves_no_orphan(bindir):
    """A second avsmd took the lock and the first stopped; the second is then SIGKILLed with its warden: the
    next avsmd ends what the second left running, since the first, having lost the lock, wrote nothing more
    into the home. RUN-14 LOCK-07 PITFALLS 2"""
    c = second_daemon_then_crash(bindir)
    assert not c.violations, "\n".join(c.violations)


# ---- 7. the journal deleted or truncated after a crash ---------------------------------------------

def journal_after_crash(bindir, n=3):
    """killpg avsmd and its warden the moment ledger.db-journal exists (mid-commit), then delete or truncate
    the journal: nothing committed is lost, the chain verifies, and the next avsmd starts."""
    c = Campaign("journal deleted or truncated after SIGKILL")
    root, mark, run_mark = new_root(), token(), token()
    av = Avsm(bindir, os.path.join(root, "h"))
    d = level_venture(root, "burst", mark, run_mark=run_mark, guards=True)
    journal = os.path.join(av.home, "ledger.db-journal")
    tailer = Tailer(av, c)
    try:
        if not start(av) or av.cli("add", d).returncode != 0:
            c.violate(f"avsmd did not start: {av.stderr()[-400:]}")
            return c
        tailer.start()
        for i in range(n):
            if i and not start(av):
                c.violate(f"fault {i}: avsmd did not start after the journal was {'truncated' if i % 2 else 'deleted'}: "
                          f"{av.stderr()[-400:]}")
                break
            time.sleep(RNG.uniform(1.2, 1.8))   # the kept program is on avsmd's record of groups by now
            deadline = time.monotonic() + 3
            while not os.path.exists(journal) and time.monotonic() < deadline:
                pass
            os.killpg(av.proc.pid, signal.SIGKILL)
            av.proc.wait()
            c.faults += 1
            wait_until(lambda: not wardens(av.proc.pid), 5)
            if os.path.exists(journal) and os.path.getsize(journal) > 0:
                c.journal_hits += 1
            if os.path.exists(journal):
                if i % 2:
                    os.truncate(journal, 0)
                else:
                    os.unlink(journal)
            c.survived += 1
            if os.path.exists(os.path.join(av.home, "ledger.db-wal")):
                c.violate("a ledger.db-wal exists: records would not all be in the main file")
        if not start(av):
            c.violate(f"avsmd did not start after the last journal was removed: {av.stderr()[-400:]}")
        else:
            time.sleep(1)
        tailer.stop()
        settle_stop(av, c, "after the journal faults")
        check_acknowledged(av, tailer.seen, c)
        check_invariants(av, c, os.path.join(d, "lines"), "burst", "lower")
        if orphans([mark, run_mark]):
            c.orphans += 1
            c.violate("programs outlived the final stop")
    finally:
        tailer.halt.set()
        kill_daemon(av)
        kill_marked([mark, run_mark])
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_journal_deleted_or_truncated_after_a_sigkill_loses_nothing(bindir):
    """SIGKILL avsmd and its warden mid-commit (the moment ledger.db-journal exists), then delete or truncate
    the journal: every record a client saw is still there, the chain verifies, the next avsmd starts, and
    there is never a ledger.db-wal. LEDGER-03 LEDGER-02"""
    c = journal_after_crash(bindir, 3)
    assert not c.violations, "\n".join(c.violations)
    assert c.faults == 3


# ---- 8. a WAL ledger whose writer died ------------------------------------------------------------

WAL_WRITER = """
import os, sqlite3, sys
sys.path.insert(0, {root!r})
import avsm
db = sqlite3.connect({path!r}, isolation_level=None)
assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
db.execute("PRAGMA wal_autocheckpoint=0")
db.executescript(avsm.LEDGER_SCHEMA)
prev = "0" * 64
for seq in range(1, {n} + 1):
    text = avsm.canonical({{"kind": "report", "claim": "measured", "venture": "old", "summary": f"written under WAL {{seq}}", "value": seq, "metric": "m", "status": "trusted", "plausible": True, "note": ""}})
    at = 1700000000 + seq
    h = avsm.chain_hash(prev, seq, at, text)
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, ?, 1, ?)", (seq, at, prev, h, text))
    db.execute("COMMIT")
    prev = h
print("written", flush=True)
os.kill(os.getpid(), 9)
"""


def wal_writer_died(bindir, n=20):
    """An earlier avsmd wrote the ledger in WAL mode and was SIGKILLed with its records still in ledger.db-wal:
    the next avsmd moves the ledger to the rollback journal, and every record is kept as written."""
    c = Campaign("WAL ledger whose writer was SIGKILLed")
    root = new_root()
    av = Avsm(bindir, os.path.join(root, "h"))
    os.makedirs(av.home, mode=0o700)
    path = os.path.join(av.home, "ledger.db")
    try:
        run = subprocess.run([sys.executable, "-c", WAL_WRITER.format(root=ROOT, path=path, n=n)],
                             capture_output=True, text=True)
        c.faults += 1
        if "written" not in run.stdout or run.returncode != -9:
            c.violate(f"the WAL writer did not die as planned: {run.returncode} {run.stderr[-300:]}")
            return c
        if not os.path.getsize(path + "-wal"):
            c.violate("precondition: the records are not in ledger.db-wal")
        written, prev = [], "0" * 64
        for seq in range(1, n + 1):     # what the writer wrote, by the same recipe
            text = avsm.canonical({"kind": "report", "claim": "measured", "venture": "old",
                                   "summary": f"written under WAL {seq}", "value": seq, "metric": "m", "status": "trusted", "plausible": True, "note": ""})
            h = avsm.chain_hash(prev, seq, 1700000000 + seq, text)
            written.append((seq, 1700000000 + seq, prev, h, 1, text))
            prev = h
        if not start(av):
            c.violate(f"avsmd did not start on the WAL ledger: {av.stderr()[-400:]}")
            return c
        c.survived += 1
        settle_stop(av, c, "on the moved ledger")
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        now = db.execute("SELECT seq, at, prev, hash, weight, record FROM records ORDER BY seq").fetchall()
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        db.close()
        if len(written) != n or now[:n] != written:
            c.lost += n - sum(1 for a, b in zip(written, now) if a == b)
            c.violate("records written under WAL were lost or rewritten")
        if mode != "delete" or os.path.exists(path + "-wal"):
            c.violate(f"the ledger was not moved to the rollback journal (journal_mode {mode})")
        check_invariants(av, c)
    finally:
        kill_daemon(av)
        shutil.rmtree(root, ignore_errors=True)
    return c


def test_wal_ledger_whose_writer_died_is_moved_without_loss(bindir):
    """A ledger an earlier avsmd wrote in WAL mode, its writer SIGKILLed with the records still in the -wal file:
    avsmd moves it to the rollback journal, keeping every record byte for byte. LEDGER-04 LEDGER-02 LEDGER-03"""
    c = wal_writer_died(bindir)
    assert not c.violations, "\n".join(c.violations)
