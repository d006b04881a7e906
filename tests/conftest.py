"""Shared fixtures: a short temp home, a real avsmd and the real client as their console scripts
install them, and a safety check over every ledger a test leaves behind."""

import atexit
import functools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import avsm  # noqa: E402
from ledger_checks import shape_problem, verify_files  # noqa: E402

SHARED = os.path.join(ROOT, "..", "shared")


def console_scripts(*names):
    """The console scripts `names` as `pip install` writes them (each imports avsm from cached bytecode), in
    a directory of this test process's own, removed when it exits; return the directory."""
    d = tempfile.mkdtemp(prefix="avi", dir="/tmp")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    for name in names:
        with open(os.path.join(d, name), "w") as fh:
            fh.write(f"import sys\nsys.path.insert(0, {ROOT!r})\nfrom avsm import main\nsys.exit(main())\n")
    return d


@functools.cache
def installed_avsm():
    """The `avsm` console script, alone in its directory."""
    return os.path.join(console_scripts("avsm"), "avsm")


@functools.cache
def installed_avsmd():
    """The `avsmd` console script, with an `avsm` beside it as `bindir` has (avsmd names it in fix lines)."""
    return os.path.join(console_scripts("avsmd", "avsm"), "avsmd")


@pytest.fixture(scope="session")
def bindir():
    """A short directory holding `avsm` and `avsmd` symlinks to avsm.py, so argv[0] dispatch is exercised."""
    d = tempfile.mkdtemp(prefix="avb", dir="/tmp")
    for name in ("avsm", "avsmd"):
        os.symlink(os.path.join(ROOT, "avsm.py"), os.path.join(d, name))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def home():
    """A fresh, short home path under /tmp (socket paths are limited to ~107 bytes); not yet created."""
    d = tempfile.mkdtemp(prefix="av", dir="/tmp")
    h = os.path.join(d, "h")
    yield h
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def workdir():
    """A scratch directory for ventures and files a test writes."""
    d = tempfile.mkdtemp(prefix="avw", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write(path, text, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    if mode is not None:
        os.chmod(path, mode)
    return path


def make_venture(root, name, mandate, files=None):
    """Write a venture directory: mandate.yaml and executable scripts {name: text}."""
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "mandate.yaml"), mandate)
    for fname, text in (files or {}).items():
        write(os.path.join(d, fname), text, 0o755)
    return d


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name: [state, ppid, ...] as bytes, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


def children(pid):
    """Pids of the live (not zombie) processes whose parent is `pid`."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            fields = stat_fields(p)
            if fields is not None and int(fields[1]) == pid and fields[0] != b"Z":
                found.append(int(p))
    return found


def processes_with(marker):
    """Pids of live (not zombie) processes whose command line holds `marker`."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit() and marker.encode() in cmdline(p):
            fields = stat_fields(p)
            if fields is not None and fields[0] != b"Z":
                found.append(int(p))
    return found


def ended_soon(marker, within=5):
    """Whether every process whose command line holds `marker` is gone within `within` seconds: one
    that was sent SIGKILL is gone at its next turn on a CPU, which on a loaded machine is not at once."""
    deadline = time.monotonic() + within
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def cmdline(pid):
    """The command line of `pid` as bytes (NUL-separated), or b"" once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


class Avsm:
    """The real client and daemon on one home."""

    def __init__(self, bindir, home, env=None):
        self.bindir, self.home = bindir, home
        self.env = dict(os.environ, **(env or {}))
        self.env.pop("AVSMD_HOME", None)
        self.proc = None
        # How the client and avsmd are started: as their installed console scripts. Run as a script, avsm.py
        # is compiled afresh each time (some 0.2 s here), the cost of the many client runs and avsmd starts of
        # the suite; tests of `python3 avsm.py` and of the symlinks in `bindir` start those themselves (test_cli,
        # test_daemon, test_newcomer). -S: no site, whose .pth files
        # in this container import certifi at each start (~45 ms); avsm needs nothing from site-packages.
        self.python, self.flags = sys.executable, ["-S"]

    def client(self):
        return [self.python, *self.flags, installed_avsm()]

    def cli(self, *args, timeout=30, input=None):
        """Run `avsm --home HOME ARGS`; return the CompletedProcess (text)."""
        return subprocess.run(self.client() + ["--home", self.home, *args],
                              capture_output=True, text=True, timeout=timeout, env=self.env, input=input)

    def daemon_cmd(self, *args, timeout=30):
        return subprocess.run([self.python, *self.flags, installed_avsmd(), "--home", self.home, *args],
                              capture_output=True, text=True, timeout=timeout, env=self.env)

    def start(self, *args):
        """Start avsmd in the foreground (as a child of the test); wait until it answers."""
        self.errfile = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([self.python, *self.flags, installed_avsmd(), "--home", self.home, *args],
                                     stdout=subprocess.DEVNULL, stderr=self.errfile, env=self.env,
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"avsmd exited {self.proc.returncode}: {self.stderr()}")
            if os.path.exists(os.path.join(self.home, "sock")) and self.cli("status").returncode == 0:
                return self
            time.sleep(0.05)
        raise AssertionError("avsmd did not answer within 15 s")

    def stderr(self):
        self.errfile.seek(0)
        return self.errfile.read()

    def stop(self, timeout=12):
        """SIGTERM avsmd; return its exit code and the seconds it took."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None, 0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError("avsmd did not stop within the time limit after SIGTERM")
        return code, time.monotonic() - t0

    def wardens(self):
        """Pids of avsmd's live children whose command line holds `warden` (its fork of a program is no warden:
        its parent is the warden, not avsmd)."""
        return [p for p in children(self.proc.pid) if b"warden" in cmdline(p)]

    def records(self, since=0):
        """Every record after `since`, read through a read-only connection: [(seq, at, record)]."""
        path = os.path.join(self.home, "ledger.db")
        # a warden killed mid-transaction leaves a hot journal only a writer rolls back
        # (SQLITE_READONLY_ROLLBACK): the next warden does, as avsm's own readers wait for
        deadline = time.monotonic() + 10
        while True:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
            try:
                rows = db.execute("SELECT seq, at, record FROM records WHERE seq > ? ORDER BY seq",
                                  (since,)).fetchall()
                break
            except sqlite3.OperationalError as err:
                if not str(getattr(err, "sqlite_errorname", "")).startswith("SQLITE_READONLY") \
                        or time.monotonic() > deadline:
                    raise
            finally:
                db.close()
            time.sleep(0.1)
        return [(s, a, json.loads(r)) for s, a, r in rows]

    def kinds(self, venture=None):
        return [r["kind"] for _, _, r in self.records() if venture is None or r["venture"] == venture]

    def wait_for(self, predicate, timeout=30, what="a record"):
        """Poll the ledger until predicate(records) is true; return the records then."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(os.path.join(self.home, "ledger.db")):
                recs = self.records()
                found = predicate(recs)
                if found:
                    return found
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; ledger:\n" +
                             "\n".join(f"#{s} {r['venture']} {r['kind']} {r['summary']}" for s, _, r in self.records()))


def check_ledger_safety(home):
    """The safety invariants over a whole ledger: the chain re-verifies, every record has kind, claim,
    venture and summary, every action's proof re-checks from measured and declared premises only,
    every outcome cites an action and no action has two, and no lever ran while its venture was paused.
    Run over the ledger every black-box test leaves: PROOF-01 (exactly one claim of the three on every record),
    PROOF-02, PROOF-04 (each action carries the proof that allowed it), LEDGER-01, and no lever runs again while
    a `did X happen?` ask about its interrupted run waits (RUN-10)."""
    path = os.path.join(home, "ledger.db")
    if not os.path.exists(path):
        return
    db = avsm.open_ledger_ro(path)
    checked, problem = verify_files(home)
    assert problem is None, f"chain broken at #{checked}: {problem}"
    rows = list(avsm.read_records(db))
    if rows and rows[0][0] > 1:     # closed files let go (avsm rotate, keep:): doctor's own re-check, from the
        assert not avsm.scan_ledger(db).problems    # snapshot their successor carries
        db.close()
        return
    records = {s: (a, r) for s, a, r in rows}
    outcomes, paused, directory, unknown = {}, set(), {}, {}
    for seq, at, r in rows:
        for key in ("kind", "claim", "venture", "summary"):
            assert key in r, f"#{seq} has no {key}"
        assert shape_problem(r) is None, f"#{seq}: {shape_problem(r)}"     # the vocabulary (RECORD_KINDS)
        _, required, optional = avsm.record_shape(r["kind"], r["venture"])      # and no field it does not name
        assert not r.keys() - required - optional - {"kind", "claim", "venture", "summary"}, \
            f"#{seq}: a {r['kind']} record has {sorted(r.keys() - required - optional - set(avsm.RECORD_FIELDS))}, " \
            "which RECORD_KINDS does not name"
        assert r["claim"] in ("measured", "declared", "inferred"), f"#{seq} claim {r['claim']}"
        if r["kind"] == "ask" and r.get("about") == "interrupted":
            unknown[seq] = (r["venture"], r["lever"])
        elif r["kind"] in ("approval", "denial", "resolved"):
            unknown.pop(r.get("ask"), None)
        if r["kind"] == "pause":
            paused.add(r["venture"])
        elif r["kind"] == "resume":
            paused.discard(r["venture"])
        elif r["kind"] == "mandate":
            if directory.get(r["venture"], r["directory"]) != r["directory"]:
                paused.discard(r["venture"])     # a moved directory is a new venture
            directory[r["venture"]] = r["directory"]
        elif r["kind"] == "action":
            assert r["claim"] == "measured"
            for p in r["proof"]["premises"]:
                assert records[p][1]["claim"] in ("measured", "declared"), f"action #{seq} cites inferred #{p}"
            # only stop and a guard's own unwind pass a pause (GUARD-05, GUARD-10)
            assert r["lever"] == "stop" or r["proof"]["rule"] == "unwind" or r["venture"] not in paused, \
                f"action #{seq} ran while {r['venture']} was paused"
            assert (r["venture"], r["lever"]) not in unknown.values(), \
                f"action #{seq} ran {r['lever']} again while whether its interrupted run happened is asked (RUN-10)"
        elif r["kind"] == "outcome":
            assert records[r["action"]][1]["kind"] == "action", f"outcome #{seq} cites no action"
            assert r["action"] not in outcomes, f"action #{r['action']} has two outcomes"
            outcomes[r["action"]] = seq
    for seq, problems in avsm.recheck_ledger(rows):     # the gate itself, folding the ledger once (PROOF-04)
        assert not problems, f"action #{seq} does not re-check: {problems}"
    db.close()


@pytest.fixture
def av(bindir, home):
    """A client and daemon pair on a fresh home; the daemon, if started, is stopped and must exit 0."""
    a = Avsm(bindir, home)
    yield a
    if a.proc is not None and a.proc.poll() is None:
        code, _ = a.stop()
        assert code == 0, f"avsmd exited {code} at teardown: {a.stderr()}"
    check_ledger_safety(home)
