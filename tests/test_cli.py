"""Black-box tests of the command line: the argv[0] dispatch, usage and exit codes, avsmd -t/-T/-f, output
that cannot be written, imports, packaging, `avsm try`, and the files in examples/ and contrib/. The
real programs run through `avsm`/`avsmd` symlinks (or `python3 avsm.py`) on short /tmp homes; ledgers are
read read-only. Each test's docstring names the requirements it checks (spec/requirements.md)."""

import ast
import hashlib
import json
import os
import plistlib
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import ROOT, Avsm, children, cmdline, make_venture, processes_with, write

import avsm
from ledger_checks import verify_chain

AVSM_PY = os.path.join(ROOT, "avsm.py")
CONFIG_KEYS = ("nightly", "default", "backends", "escalate", "ratchet", "canary_asks", "adapters", "checkpoint",
               "research")


def run(argv, timeout=30, **kw):
    """Run a command line; return the CompletedProcess (text)."""
    env = kw.pop("env", None) or dict(os.environ)
    env.pop("AVSMD_HOME", None)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def prog(bindir, name):
    """The argv that runs `name` (avsm or avsmd) through its symlink."""
    return [sys.executable, os.path.join(bindir, name)]


def of(records, kind, venture=None):
    return [(s, r) for s, _, r in records if r["kind"] == kind and (venture is None or r["venture"] == venture)]


def fake_ledger(home, n):
    """Write a ledger of n chained report records by the README's recipe, as an avsmd would leave it."""
    os.makedirs(home, mode=0o700, exist_ok=True)
    db = sqlite3.connect(os.path.join(home, "ledger.db"), isolation_level=None)
    db.execute("CREATE TABLE records(seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, prev TEXT NOT NULL, "
               "hash TEXT NOT NULL, weight INTEGER NOT NULL DEFAULT 1, record TEXT NOT NULL)")
    prev, at, rows = "0" * 64, 1_790_000_000, []
    for seq in range(1, n + 1):
        text = json.dumps({"kind": "report", "claim": "measured", "venture": "dial", "value": seq,
                           "plausible": True, "status": "trusted", "note": "",
                           "summary": f"dial = {seq}"}, sort_keys=True, separators=(",", ":"))
        h = hashlib.sha256(f"{prev}\n{seq}\n{at + seq}\n{text}".encode()).hexdigest()
        rows.append((seq, at + seq, prev, h, text))
        prev = h
    db.execute("BEGIN")
    db.executemany("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, ?, 1, ?)", rows)
    db.execute("COMMIT")
    db.close()


DIAL = """purpose: Keep {name} low.
metric: dial
controller: {{kind: threshold, above: 10, action: {action}}}
cadence: 1s
permitted:
{levers}
forbidden: [rm]
"""


def dial_venture(root, name, levers, action, value="1", **files):
    """A venture whose report prints its file `value`; `levers` are (name, cap, reversible)."""
    lines = "\n".join(f"  - {{name: {n}, run: ./{n}, cap: {cap}, reversible: {'true' if rev else 'false'}}}"
                      for n, cap, rev in levers)
    scripts = {n: "#!/bin/sh\ntrue\n" for n, _, _ in levers}
    scripts.update({"report": "#!/bin/sh\ncat value\n"}, **files)
    d = make_venture(root, name, DIAL.format(name=name, action=action, levers=lines), scripts)
    write(os.path.join(d, "value"), value + "\n")
    return d


# ---- the argv[0] dispatch and usage ---------------------------------------------

def test_dispatch_by_name_and_by_first_argument(bindir, home):
    """One file is both programs: `python3 avsm.py avsmd` and the `avsmd` symlink run the daemon's options,
    `python3 avsm.py avsm`, `python3 avsm.py` and the `avsm` symlink the client; no install step is needed.
    DIST-02 DIST-03 open point 1"""
    for argv in ([sys.executable, AVSM_PY, "avsmd", "--home", home, "-T"], prog(bindir, "avsmd") + ["--home", home, "-T"]):
        r = run(argv)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("nightly:") and "ratchet:" in r.stdout, argv
    for argv in ([sys.executable, AVSM_PY, "avsm", "--help"], [sys.executable, AVSM_PY, "--help"],
                 prog(bindir, "avsm") + ["--help"]):
        r = run(argv, cwd="/")
        assert r.returncode == 0 and r.stdout.startswith("usage: avsm "), argv
        assert "add DIR" in r.stdout and "tail" in r.stdout
    # beside the file, `python3 -m avsm` runs it from cached bytecode, with the same dispatch
    r = run([sys.executable, "-m", "avsm", "--help"], cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith("usage: avsm "), r.stderr
    r = run([sys.executable, "-m", "avsm", "avsmd", "--home", home, "-T"], cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith("nightly:"), r.stderr
    assert not os.path.exists(home), "-T and --help must not make the home"


@pytest.mark.parametrize("name", ["avsm", "avsmd"])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_exits_0_with_usage(bindir, home, name, flag):
    """-h and --help print the program's usage on standard output and exit 0, for both programs; the client's
    names every command it has, each at the start of a line of the list. EXIT-01 CLI-01"""
    r = run(prog(bindir, name) + ["--home", home, flag])
    assert r.returncode == 0 and r.stdout.startswith(f"usage: {name} ") and r.stderr == ""
    if name == "avsmd":
        assert all(opt in r.stdout for opt in ("-t", "-T", "-f", "-d", "--home"))
    else:
        listed = set(re.findall(r"^  ([a-z]+) ", r.stdout, re.M))
        assert {"add", "status", "tail", "asks", "approve", "deny", "propose", "pause", "resume", "why",
                "doctor"} <= listed, listed
        assert set(avsm.CLIENT_COMMANDS) <= listed, set(avsm.CLIENT_COMMANDS) - listed


BAD_USAGE = [
    ("avsm", ["frobnicate"]),
    ("avsmd", ["--frob"]),
    ("avsm", ["tail", "--since"]),
    ("avsm", ["tail", "--since", "x"]),
    ("avsm", ["tail", "--frob"]),
    ("avsm", ["why"]),
    ("avsm", ["why", "1", "2"]),
    ("avsm", ["approve", "x"]),
    ("avsm", ["deny"]),
    ("avsm", ["status", "one", "two"]),       # status takes one VENTURE (issue 14 item 4), not two
    ("avsm", ["add"]),
    ("avsm", ["pause"]),
    ("avsmd", ["-f"]),
    ("avsmd", ["-x"]),
    ("avsmd", ["extra"]),
    ("avsm", ["--home"]),
    ("avsm", ["--home=", "status"]),
    ("avsm", ["add", "--bogus"]),
    ("avsm", ["add", ""]),
    ("avsm", ["pause", "--force", "x"]),
    ("avsm", ["why", "-1"]),
]


@pytest.mark.parametrize("name,args", BAD_USAGE, ids=[f"{n} {' '.join(a)}" for n, a in BAD_USAGE])
def test_bad_usage_exits_64(bindir, home, name, args):
    """An unknown command, option or argument exits 64 for both programs, with one line on standard error
    naming the program, and no traceback; the home is not touched. EXIT-02 CLI-11"""
    argv = prog(bindir, name) + (args if args == ["--home"] else ["--home", home] + args)
    r = run(argv)
    assert r.returncode == 64, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith(f"{name}: ") and "Traceback" not in r.stderr
    assert r.stdout == ""
    assert not os.path.exists(home)


@pytest.mark.parametrize("via", ["python3 avsm.py avsmd", "python3 avsm.py avsm"])
def test_bad_usage_exits_64_by_explicit_name(home, via):
    """The explicit program name keeps the program's usage errors: 64. EXIT-02 open point 1"""
    args = ["--frob"] if via.endswith("avsmd") else ["frobnicate"]
    r = run([sys.executable, AVSM_PY, via.split()[-1], "--home", home] + args)
    assert r.returncode == 64 and "Traceback" not in r.stderr and r.stderr.startswith(via.split()[-1] + ": ")


def test_internal_program_name_without_its_arguments_is_bad_usage(bindir, home):
    """`avsm warden` without the arguments avsmd gives it is bad usage, not a crash. EXIT-02"""
    r = run(prog(bindir, "avsm") + ["warden", "--home", home])
    assert r.returncode == 64 and "Traceback" not in r.stderr


# ---- avsmd -T, -f, and a config that does not hold -----------------------------------

def test_T_prints_every_key_and_the_forecast_default(av):
    """avsmd -T prints the config in force, every key with its default, `canary_asks: null` for off and the
    forecast default as a comment; what it prints reads back as the same config. CLI-04 CONFIG-03 CONFIG-04"""
    r = av.daemon_cmd("-T")
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    for key in CONFIG_KEYS:
        assert any(line.startswith(f"{key}:") for line in lines), f"-T does not print {key}:\n{r.stdout}"
    assert "canary_asks: null" in lines and "ratchet: 5" in lines and not any(line.startswith("port:") for line in lines)
    forecast = [line for line in lines if "forecast" in line]
    assert len(forecast) == 1 and forecast[0].startswith("#") and "days: 30" in forecast[0] and "seeds: 16" in forecast[0]
    assert not os.path.exists(av.home)
    printed = write(os.path.join(os.path.dirname(av.home), "printed.yaml"), r.stdout)
    again = av.daemon_cmd("-f", printed, "-T")
    assert again.returncode == 0 and again.stdout == r.stdout


FULL_CONFIG = """nightly: "02:30"
backends:
  local: {kind: command, run: ./ask-model, offbox: false}
default: local
escalate: local
ratchet: 3
forecast: {days: 7, seeds: 4}
canary_asks: {every: 20}
adapters:
  stripe: {url: "https://api.stripe.example"}
  mail: {command: "sendmail -t -i", from: you@example.com}
research: ./research
"""


def test_f_reads_that_file_in_place_of_the_home_config(av, workdir):
    """avsmd -f other.yaml reads that file and not HOME/config.yaml; -T shows every key as it stands
    there, and what it prints reads back the same. CLI-05 CLI-04 CONFIG-04"""
    write(os.path.join(av.home, "config.yaml"), "ratchet: 2\nnightly: \"01:11\"\n")
    other = write(os.path.join(workdir, "other.yaml"), FULL_CONFIG)
    r = av.daemon_cmd("-f", other, "-T")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for expected in ('nightly: "02:30"', "ratchet: 3", "forecast: {days: 7, seeds: 4}",
                     "canary_asks: {every: 20}"):
        assert expected in lines, f"{expected!r} not in\n{r.stdout}"
    assert "sendmail -t -i" in r.stdout and "./ask-model" in r.stdout and "./research" in r.stdout
    assert "01:11" not in r.stdout and "ratchet: 2" not in lines
    printed = write(os.path.join(workdir, "printed.yaml"), r.stdout)
    assert av.daemon_cmd("-f", printed, "-T").stdout == r.stdout
    home_config = av.daemon_cmd("-T")
    assert "ratchet: 2" in home_config.stdout.splitlines() and 'nightly: "01:11"' in home_config.stdout


def test_f_of_a_missing_file_exits_78(av, workdir):
    """-f of a file that is not there is a config that does not hold: 78, naming the file, for -T, -t and
    avsmd itself, which does not start. CLI-05 CONFIG-10 EXIT-10"""
    missing = os.path.join(workdir, "nope.yaml")
    for args in (["-T"], ["-t"], []):
        r = av.daemon_cmd("-f", missing, *args, timeout=15)
        assert r.returncode == 78, (args, r.stderr)
        assert "nope.yaml" in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(os.path.join(av.home, "sock")) and not os.path.exists(os.path.join(av.home, "ledger.db"))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "latin-1"])
def test_a_config_that_is_no_page_of_utf8_text_exits_78_at_once(av, kind):
    """Bad input: config.yaml a FIFO (its open would wait for ever), a link to /dev/zero (endless) or a file with a
    byte that is not UTF-8 is a config that does not hold: avsmd -T, -t and avsmd itself exit 78 at once, naming
    it, and avsm doctor fails it (they hung, or ran out of memory and crashed). CONFIG-10 DOCTOR-08 EXIT-10"""
    os.makedirs(av.home, mode=0o700)
    path = os.path.join(av.home, "config.yaml")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    else:
        with open(path, "wb") as fh:
            fh.write(b'nightly: "02:00"\n# caf\xe9\n')
    said = {"fifo": "cannot be read: it is a FIFO, not a regular file",
            "dev-zero": "cannot be read: it is a device, not a regular file",
            "latin-1": "config.yaml:2:6: byte 0xe9 is not UTF-8; save the config as UTF-8"}[kind]
    for args in (["-T"], ["-t"], []):
        r = av.daemon_cmd(*args, timeout=15)
        assert r.returncode == 78 and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    r = av.cli("doctor", timeout=15)
    assert r.returncode == 78 and f"FAIL  {path if kind != 'latin-1' else ''}" in r.stdout and said in r.stdout, r
    assert not os.path.exists(os.path.join(av.home, "sock")) and not os.path.exists(os.path.join(av.home, "ledger.db"))


def test_a_lock_file_that_is_a_fifo_leaves_no_client_waiting(av):
    """Bad input: HOME/avsmd.lock a FIFO (its open would wait for ever): status and checkpoint say at once that no
    avsmd runs, 69, and summary that the home has no ledger yet, 66 (they hung). EXIT-04 EXIT-05"""
    os.makedirs(av.home, mode=0o700)
    os.mkfifo(os.path.join(av.home, "avsmd.lock"))
    for verb, code, said in (("status", 69, "no avsmd is running"), ("summary", 66, "has no ledger yet"),
                             ("checkpoint", 69, "no avsmd is running")):
        r = av.cli(verb, timeout=15)
        assert r.returncode == code and said in r.stderr, (verb, r.returncode, r.stderr)


def test_unknown_config_key_exits_78_naming_line_and_column(av):
    """A config with an unknown key does not hold: avsmd -T, avsmd -t and avsmd itself exit 78 naming
    config.yaml:line:col and the key, and the daemon does not start. CONFIG-10 EXIT-10 open point 22"""
    write(os.path.join(av.home, "config.yaml"), 'nightly: "02:00"\nratchit: 3\n')
    for args in (["-T"], ["-t"], []):
        t0 = time.monotonic()
        r = av.daemon_cmd(*args, timeout=15)
        assert r.returncode == 78, (args, r.returncode, r.stderr)
        assert re.search(r"config\.yaml:2:1\b", r.stderr) and "ratchit" in r.stderr, r.stderr
        assert "ratchet" in r.stderr                      # the nearest known key
        assert "Traceback" not in r.stderr and time.monotonic() - t0 < 10
    assert not os.path.exists(os.path.join(av.home, "sock")) and not os.path.exists(os.path.join(av.home, "ledger.db"))


# ---- avsmd -t and ventures whose mandate cannot be read ---------------------------------

def test_t_says_what_each_venture_allows_and_avsmd_starts_beside_a_broken_one(av, workdir):
    """avsmd -t tests every adopted mandate, re-read from its directory, and says what each allows (lever,
    cap, "asks a person" for an irreversible one). A broken edit on disk makes -t exit 78 naming
    mandate.yaml:line:col; avsmd still starts (never 78) and the adopted mandate stays in force until the
    next avsm add. A venture whose adopted mandate cannot be read (its directory gone) is named on avsmd's
    standard error, runs nothing (a proposal and a decision are refused), and `avsm status` says it cannot run,
    while the others keep reporting. CLI-03 VENTURE-14 VENTURE-15 VENTURE-08 EXIT-10 EXIT-11 MANDATE-08 PITFALLS 8"""
    alpha = dial_venture(workdir, "alpha", [("lower", "3/hour", True), ("wipe", "1/day", False)], "lower")
    beta = dial_venture(workdir, "beta", [("nudge", "5/day", True)], "nudge")
    gamma = dial_venture(workdir, "gamma", [("trim", "2/week", True)], "trim")
    av.start()
    for d in (alpha, beta, gamma):
        r = av.cli("add", d)
        assert r.returncode == 0, r.stderr
    av.wait_for(lambda rs: all(of(rs, "report", v) for v in ("alpha", "beta", "gamma")), timeout=10,
                what="a report of each venture")
    assert av.stop()[0] == 0

    r = av.daemon_cmd("-t")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    for venture in ("alpha", "beta", "gamma"):
        assert any(venture in line for line in out), f"-t does not name {venture}:\n{r.stdout}"
    lower = [line for line in out if "lower" in line and "3/hour" in line]
    wipe = [line for line in out if "wipe" in line and "1/day" in line]
    assert lower and "asks a person" not in lower[0]
    assert wipe and "asks a person" in wipe[0], r.stdout
    assert any("nudge" in line and "5/day" in line for line in out)
    assert any("rm" in line for line in out)              # what never runs

    # a broken edit on disk shows before the next avsm add
    text = open(os.path.join(alpha, "mandate.yaml")).read()
    write(os.path.join(alpha, "mandate.yaml"), text.replace("cadence: 1s", "cadance: 1s"))
    r = av.daemon_cmd("-t")
    assert r.returncode == 78
    assert f"{alpha}/mandate.yaml:4:1" in r.stderr and "cadance" in r.stderr, r.stderr
    assert any("nudge" in line for line in r.stdout.splitlines()), "the other ventures are still described"

    # a venture whose adopted mandate cannot be read: its directory has gone
    shutil.rmtree(gamma)
    r = av.daemon_cmd("-t")
    assert r.returncode == 78 and "gamma" in r.stderr

    last = av.records()[-1][0]
    av.start()                                            # must not exit 78 (EXIT-11)
    recs = av.wait_for(lambda rs: len(of(rs[last:], "report", "beta")) >= 2 and len(of(rs[last:], "report", "alpha")) >= 2
                       and rs, timeout=10, what="beta and alpha reporting after the restart")
    assert not of(recs[last:], "report", "gamma") and not of(recs[last:], "start", "gamma")
    assert "gamma" in av.stderr() and "alpha" not in av.stderr()
    status = av.cli("status")
    assert status.returncode == 0
    assert re.search(r"^gamma: cannot run", status.stdout, re.M), status.stdout
    assert re.search(r"^beta: running", status.stdout, re.M) and re.search(r"^alpha: running", status.stdout, re.M)
    # nothing of it may run, whoever asks: a person's proposal and a model decision are refused, 65, unwritten
    before = av.records()[-1][0]
    for args in (("propose", "gamma", "trim"), ("decide", "gamma")):
        r = av.cli(*args)
        assert r.returncode == 65 and r.stderr.startswith(f"avsm: gamma cannot run: its directory {gamma} is"
                                                          " not there"), (args, r.stderr)
    assert not [r for _, _, r in av.records(before) if r["venture"] == "gamma"]
    time.sleep(1.2)
    assert not of(av.records(last), "report", "gamma")


# ---- output that cannot be written, broken pipes, no colour ------------------------------

UNWRITABLE = [("avsm", ["tail", "--since", "0"]), ("avsm", ["why", "1"]), ("avsmd", ["-T"]), ("avsm", ["--help"])]


@pytest.mark.parametrize("redirect", [">&-", ">/dev/full"], ids=["closed", "full"])
@pytest.mark.parametrize("name,args", UNWRITABLE, ids=[f"{n} {' '.join(a)}" for n, a in UNWRITABLE])
def test_unwritable_stdout_exits_74(bindir, home, redirect, name, args):
    """When standard output cannot be written (closed, or a full device) avsm says so on standard error,
    with no traceback, and exits 74. CLI-13 EXIT-07"""
    fake_ledger(home, 50)
    argv = prog(bindir, name) + ["--home", home] + args
    r = run(["sh", "-c", f'exec "$@" {redirect}', "sh"] + argv)
    assert r.returncode == 74, (r.returncode, r.stderr)
    assert "standard output" in r.stderr and "Traceback" not in r.stderr


CLOSED = [">&- <&-", "2>&-", ">&- 2>&- <&-"]


@pytest.mark.parametrize("redirect", CLOSED, ids=["stdin+stdout", "stderr", "all"])
def test_daemon_started_with_closed_standard_files_serves_and_stops_with_0(av, workdir, redirect):
    """avsmd started with some of its standard files closed (a careless service manager, `avsmd >&- &`)
    still serves, runs ventures, keeps its ledger sound (no record or output lands on a reused descriptor)
    and exits 0 on SIGTERM. RUN-01 RUN-03 RUN-08 CLI-13"""
    d = dial_venture(workdir, "dial", [("lower", "2/hour", True)], "lower", value="50")
    argv = ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, os.path.join(av.bindir, "avsmd"),
            "--home", av.home]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=av.env,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and av.cli("status").returncode != 0:
            assert p.poll() is None, f"avsmd exited {p.returncode} with {redirect}"
            time.sleep(0.1)
        assert av.cli("add", d).returncode == 0
        av.wait_for(lambda rs: of(rs, "outcome", "dial"), timeout=10, what="a lever's outcome")
        p.send_signal(signal.SIGTERM)
        assert p.wait(12) == 0
        assert av.records()[-1][2]["kind"] == "stop"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for pid in processes_with(av.home):
            os.kill(pid, signal.SIGKILL)


def test_reader_going_away_ends_quietly(bindir, home):
    """`avsm tail --since 0 | head -1` on a big ledger: the first line arrives, then avsm ends with 0 and
    writes nothing on standard error. CLI-14 open point 48"""
    fake_ledger(home, 30000)
    p = subprocess.Popen(prog(bindir, "avsm") + ["--home", home, "tail", "--since", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline().decode()
    p.stdout.close()
    err = p.stderr.read().decode()
    code = p.wait(30)
    assert first.startswith("#1 ") and " dial measured report dial = 1" in first
    assert code == 0 and err == ""
    shell = run(["sh", "-c", 'set -e; "$@" | head -1 >/dev/null; echo done', "sh"]
                + prog(bindir, "avsm") + ["--home", home, "tail", "--since", "0"])
    assert shell.stdout == "done\n" and shell.stderr == ""


ESC = "\\033"


def test_no_colour_in_any_output(av, workdir):
    """No output of add, status, tail, asks, why, avsmd -t or -T holds an ANSI escape, even when a report,
    a lever and a kept program print escape sequences themselves. CLI-12 CLI-11"""
    loud = dial_venture(workdir, "loud", [("lower", "2/hour", True)], "lower", value="50",
                        report=f'#!/bin/sh\nprintf "{ESC}[31mred{ESC}[0m\\n"\ncat value\n',
                        lower=f'#!/bin/sh\nprintf "{ESC}[1;31mboom{ESC}[0m\\n"\nprintf "{ESC}[2J" >&2\nexit 3\n',
                        run=f'#!/bin/sh\nprintf "{ESC}[32mgreen{ESC}[0m\\n"\nexit 4\n')
    shy = dial_venture(workdir, "shy", [("wipe", "1/day", False)], "wipe", value="50",
                       report=f'#!/bin/sh\nprintf "{ESC}[1m7{ESC}[0m\\n"\n')
    asker = dial_venture(workdir, "asker", [("wipe", "1/day", False)], "wipe", value="50")
    av.start()
    outputs = []
    for d in (loud, shy, asker):
        r = av.cli("add", d)
        assert r.returncode == 0, r.stderr
        outputs.append(r)
    av.wait_for(lambda rs: of(rs, "outcome", "loud") and of(rs, "ask", "shy") and of(rs, "ask", "asker")
                and of(rs, "exit", "loud"), timeout=15, what="an outcome, an exit and two asks")
    outputs += [av.cli("status"), av.cli("tail", "--since", "0"), av.cli("tail", "5"), av.cli("asks")]
    assert "wipe" in outputs[-1].stdout
    outputs += [av.cli("why", str(seq)) for seq, _, _ in av.records()]
    assert av.stop()[0] == 0
    outputs += [av.daemon_cmd("-t"), av.daemon_cmd("-T")]
    for r in outputs:
        assert "\x1b" not in r.stdout and "\x1b" not in r.stderr, (r.args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr


def test_control_characters_from_outside_are_shown_escaped(av, workdir):
    """Text avsm did not write (a directory name here; a report, a model's words elsewhere) is shown with its
    control characters escaped, so no output carries colour or moves the terminal. CLI-12 open point 18"""
    parent = os.path.join(workdir, "e\x1b[31mx")
    d = dial_venture(parent, "tinted", [("lower", "2/hour", True)], "lower")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: of(rs, "report", "tinted"), timeout=10, what="a report")
    outputs = [av.cli("status"), av.cli("tail", "--since", "0"), av.cli("why", "2")]
    assert av.stop()[0] == 0
    outputs.append(av.daemon_cmd("-t"))
    for r in outputs:
        assert "\x1b" not in r.stdout and "\x1b" not in r.stderr, (r.args, r.stdout)


# ---- the standard library alone -------------------------------------------------------

LAZY = ("urllib", "http", "email", "ssl", "subprocess", "sqlite3", "selectors", "hashlib", "difflib", "tempfile")


def test_import_loads_no_heavy_module():
    """`import avsm` loads none of the modules only some commands need; each is imported where it is used.
    DIST-01 DIST-04"""
    code = ("import json, sys; sys.path.insert(0, %r); before = set(sys.modules); import avsm; "
            "assert avsm.__file__.startswith(%r); print(json.dumps(sorted(set(sys.modules) - before)))") % (ROOT, ROOT)
    r = run([sys.executable, "-c", code], cwd="/")
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout)
    heavy = sorted(m for m in loaded if m.split(".")[0] in LAZY)
    assert heavy == [], f"import avsm loads {heavy}"


def test_import_compiles_no_regular_expression():
    """Client start-up: `import avsm` compiles no regular expression (each is compiled on first use, which
    cost 6 ms of every command when done at import). DIST-04"""
    code = ("import collections, heapq, json, os, re, sys; sys.path.insert(0, %r); re.purge(); import avsm; "
            "print(len(re._cache))") % ROOT
    r = run([sys.executable, "-c", code], cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0", f"import avsm compiled {r.stdout.strip()} regular expression(s)"


def test_imports_only_the_standard_library():
    """avsm.py imports nothing outside the standard library, at any depth of the file, and imports nothing
    by a computed name. DIST-01 DIST-04"""
    tree = ast.parse(open(AVSM_PY, encoding="utf-8").read(), AVSM_PY)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import in a one-file program"
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            called = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            assert called not in ("__import__", "import_module"), f"a computed import at line {node.lineno}"
    assert names, "no import found"
    outside = sorted(names - set(sys.stdlib_module_names))
    assert outside == [], f"avsm.py imports {outside} from outside the standard library"
    for used in ("sqlite3", "subprocess", "selectors", "socket", "urllib"):
        assert used in names, f"DIST-04 names {used}, which avsm.py never imports"


# ---- packaging -------------------------------------------------------------------

def test_repository_layout():
    """The top level holds avsm.py, pyproject.toml, tests/, examples/, contrib/ and README.md; pyproject
    declares the two console scripts on avsm:main and no dependency. DIST-05 DIST-01"""
    for f in ("avsm.py", "pyproject.toml", "README.md"):
        assert os.path.isfile(os.path.join(ROOT, f)), f
    for d in ("tests", "examples", "contrib"):
        assert os.path.isdir(os.path.join(ROOT, d)), d
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)["project"]
    assert project["scripts"] == {"avsm": "avsm:main", "avsmd": "avsm:main"}
    assert project.get("dependencies", []) == []


def test_pip_install_gives_both_console_scripts(workdir, home):
    """`pip install .` into a fresh venv installs bin/avsm and bin/avsmd, the one file chosen by the script's
    name: bin/avsmd -T prints the config and bin/avsm --help the client's usage. DIST-02 DIST-05"""
    src = os.path.join(workdir, "src")
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "build",
                                                            "*.egg-info", ".benchmarks"))
    venv = os.path.join(workdir, "venv")
    made = run([sys.executable, "-m", "venv", venv], timeout=120)
    if made.returncode != 0:
        pytest.skip(f"python3 -m venv cannot make a venv here: {made.stderr.strip()[-300:]}")
    py = os.path.join(venv, "bin", "python")
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    # --no-build-isolation builds offline with what the venv holds: setuptools, and wheel unless setuptools
    # is new enough to build wheels itself (70.1)
    probe = run([py, "-c", "import setuptools, importlib.util as u; v = tuple(int(x) for x in "
                 "setuptools.__version__.split('.')[:2]); print(v >= (70, 1) or u.find_spec('wheel') is not None)"])
    offline = probe.returncode == 0 and probe.stdout.strip() == "True"
    argv = [py, "-m", "pip", "install", "--quiet"] + (["--no-build-isolation"] if offline else []) + ["."]
    r = run(argv, cwd=src, env=env, timeout=240)
    if r.returncode != 0:
        unreachable = ("No matching distribution", "Could not find a version", "NewConnectionError",
                       "Temporary failure in name resolution", "Network is unreachable", "Max retries exceeded",
                       "No module named 'setuptools'")
        if any(s in r.stdout + r.stderr for s in unreachable):
            pytest.skip("pip cannot build offline here (no setuptools/wheel to build with): "
                        + (r.stdout + r.stderr).strip().splitlines()[-1])
        raise AssertionError(f"{' '.join(argv)} failed:\n{r.stdout}\n{r.stderr}")
    bin_avsm, bin_avsmd = os.path.join(venv, "bin", "avsm"), os.path.join(venv, "bin", "avsmd")
    assert os.access(bin_avsm, os.X_OK) and os.access(bin_avsmd, os.X_OK)
    t = run([bin_avsmd, "--home", home, "-T"], cwd="/", env=env)
    assert t.returncode == 0 and t.stdout.startswith("nightly:") and "canary_asks: null" in t.stdout, t.stderr
    h = run([bin_avsm, "--help"], cwd="/", env=env)
    assert h.returncode == 0 and h.stdout.startswith("usage: avsm ")
    where = run([py, "-c", "import avsm; print(avsm.__file__)"], cwd="/", env=env)
    assert where.stdout.startswith(venv), "the installed avsm is the venv's own copy"


# ---- avsm try ----------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_try_runs_until_interrupted_and_keeps_the_home(workdir, signum):
    """`python3 avsm.py try DIR` starts avsmd on a temporary home, names it in its banner with the command that
    answers its asks, adopts DIR and follows the ledger; Ctrl-C (SIGINT to its process group), `kill PID` (TERM)
    or its terminal gone (HUP) each end it with 128 + the signal within 15 s, saying where the home is kept;
    that ledger verifies and ends with a self stop record, and no process of the home remains. EXIT-01 (README:
    two commands; issue 22 items 1-2)"""
    d = os.path.join(workdir, "counter")
    shutil.copytree(os.path.join(ROOT, "examples", "counter"), d)
    env = dict(os.environ, TMPDIR=workdir)
    env.pop("AVSMD_HOME", None)
    p = subprocess.Popen([sys.executable, AVSM_PY, "try", d], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    home = None
    try:
        deadline, seen = time.monotonic() + 20, []
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            seen.append(line)
            if re.match(r"#\d+ \S+ counter declared mandate ", line):
                break
        else:
            raise AssertionError(f"no mandate record line within 20 s: {seen}")
        assert seen and re.match(r"#\d+ \S+ counter declared mandate ", seen[-1]), seen
        banner = next(line for line in seen if line.startswith("# the home is "))
        home = banner.split()[4].rstrip(";")
        assert f"in another terminal: {sys.executable} {AVSM_PY} --home {home} asks" in banner.replace("python3 ", sys.executable + " ", 1) \
            or f"avsm.py --home {home} asks" in banner, banner
        t0 = time.monotonic()
        (os.killpg if signum == signal.SIGINT else os.kill)(p.pid, signum)
        out, err = p.communicate(timeout=15)
        assert time.monotonic() - t0 < 15
        assert p.returncode == 128 + signum, err
        found = re.search(r"the home is kept at (\S+)", err)
        assert found and found.group(1) == home, err
        assert f"avsm.py --home {home} tail 50" in err
        assert "Traceback" not in err
        db = avsm.open_ledger_ro(os.path.join(home, "ledger.db"))
        checked, problem = verify_chain(db)
        last = json.loads(db.execute("SELECT record FROM records ORDER BY seq DESC LIMIT 1").fetchone()[0])
        db.close()
        assert problem is None and checked >= 3
        assert (last["venture"], last["kind"]) == ("self", "stop")
        assert not processes_with(home)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if home and home.startswith("/tmp/"):
            for pid in processes_with(home):
                os.kill(pid, signal.SIGKILL)
            shutil.rmtree(home, ignore_errors=True)


# ---- examples and contrib ------------------------------------------------------------

def test_counter_example_is_the_readmes():
    """examples/counter holds exactly report, reset and mandate.yaml; the two programs are executable and
    the mandate is the README's: threshold above 10 running reset, cadence 10s, cap 60/hour, reversible,
    rm forbidden; it holds. EXAMPLE-01"""
    d = os.path.join(ROOT, "examples", "counter")
    assert sorted(os.listdir(d)) == ["mandate.yaml", "report", "reset"]
    assert os.access(os.path.join(d, "report"), os.X_OK) and os.access(os.path.join(d, "reset"), os.X_OK)
    text = open(os.path.join(d, "mandate.yaml"), encoding="utf-8").read()
    doc = avsm.parse_yaml(text)
    assert doc == {"purpose": "Reset the counter once it passes ten, at eleven.", "metric": "count",
                   "controller": {"kind": "threshold", "above": 10, "action": "reset"}, "cadence": "10s",
                   "permitted": [{"name": "reset", "run": "./reset", "cap": "60/hour", "reversible": True}],
                   "forbidden": ["rm"]}
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.S)
    shown = [avsm.parse_yaml(b) for b in blocks if "Reset the counter once it passes ten" in b]
    assert shown and shown[0] == doc, "README.md shows the counter's mandate as it is"
    avsm.parse_mandate(text, os.path.join(d, "mandate.yaml"), d)


def test_systemd_unit_verifies_and_says_how_to_install():
    """contrib/avsmd.service passes systemd-analyze verify, restarts avsmd when it dies, is wanted at login
    (default.target) and says inside how to install it. EXAMPLE-08"""
    path = os.path.join(ROOT, "contrib", "avsmd.service")
    text = open(path, encoding="utf-8").read()
    assert "install" in text.lower()
    assert re.search(r"^Restart=(always|on-failure)$", text, re.M)
    assert re.search(r"^WantedBy=default\.target$", text, re.M)
    assert re.search(r"^ExecStart=.*avsmd", text, re.M)
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    r = run(["systemd-analyze", "verify", path], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_launchd_agent_parses_and_says_how_to_install():
    """contrib/io.aesv.avsmd.plist is a plist with Label io.aesv.avsmd, RunAtLoad and KeepAlive true, runs
    avsmd, and says inside how to install it. EXAMPLE-07"""
    path = os.path.join(ROOT, "contrib", "io.aesv.avsmd.plist")
    with open(path, "rb") as fh:
        plist = plistlib.load(fh)
    assert plist["Label"] == "io.aesv.avsmd"
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] is True
    assert any("avsmd" in a for a in plist["ProgramArguments"])
    assert "install" in open(path, encoding="utf-8").read().lower()


# ---- hostile command lines against a real daemon ----------------------------------------------

def test_hostile_command_lines_get_their_codes_and_harm_nothing(av, workdir):
    """Record numbers past anything SQLite holds are 65 (not in the ledger), not a traceback; `tail` with
    standard output closed is 74; a ledger that is not a database is 65 for tail and why, naming it and
    doctor; a venture named -h is addressed after `--`; control characters from the command line are escaped
    on standard error, never written raw. EXIT-02 EXIT-03 EXIT-07 CLI-12 CLI-13 open point 3"""
    d = make_venture(workdir, "-h", "purpose: Odd name.\nmetric: dial\ncontroller: {kind: threshold, above: 10, "
                     "action: lower}\ncadence: 1s\npermitted:\n  - {name: lower, run: ./lower, cap: 60/hour, "
                     "reversible: true}\n", {"report": "#!/bin/sh\necho 1\n", "lower": "#!/bin/sh\ntrue\n"})
    av.start()
    assert av.cli("add", "--", d).returncode == 0
    for args in (["why", "9223372036854775808"], ["tail", "--since", "99999999999999999999999"],
                 ["doctor", "--since", "99999999999999999999999:0123456789abcdef"]):
        r = av.cli(*args)
        assert r.returncode == 65 and "Traceback" not in r.stderr and "past any record" in r.stderr, (args, r)
    closed = subprocess.run([sys.executable, os.path.join(av.bindir, "avsm"), "--home", av.home, "tail"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=av.env,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 74 and "standard output" in closed.stderr, closed
    assert av.cli("pause", "-h").returncode == 0 and "usage: avsm" in av.cli("pause", "-h").stdout
    assert not of(av.records(), "pause")
    assert av.cli("pause", "--", "-h").returncode == 0
    assert [r["venture"] for _, r in of(av.records(), "pause")] == ["-h"]
    r = av.cli("pause", "\x1b[31mRED\x1b[0m")
    assert r.returncode == 65 and "\x1b" not in r.stderr and "\\x1b[31mRED" in r.stderr, r
    r = av.cli("why", "\x1b]0;title\x07")
    assert r.returncode == 64 and "\x1b" not in r.stderr and "\x07" not in r.stderr, r
    assert av.cli("status").returncode == 0
    ruined = os.path.join(workdir, "ruined")
    write(os.path.join(ruined, "ledger.db"), "this is not a database, not at all\n" * 100)
    for args in (["tail"], ["why", "1"]):
        r = run(prog(av.bindir, "avsm") + ["--home", ruined] + args)
        assert r.returncode == 65 and "ledger.db cannot be read" in r.stderr and "doctor" in r.stderr, (args, r)
        assert "Traceback" not in r.stderr


def test_try_on_a_home_another_avsmd_holds_adopts_nothing(av, workdir):
    """`avsm try DIR` on a home a running avsmd holds exits 75 and adopts nothing into that avsmd (its own
    avsmd could not take the home); avsmd on a home that is a file exits 73. LOCK-02 EXIT-08 open point 13"""
    av.start()
    d = make_venture(workdir, "tried", "purpose: Try.\nmetric: dial\ncontroller: {kind: threshold, above: 10, "
                     "action: lower}\ncadence: 1s\npermitted:\n  - {name: lower, run: ./lower, cap: 60/hour, "
                     "reversible: true}\n", {"report": "#!/bin/sh\necho 1\n", "lower": "#!/bin/sh\ntrue\n"})
    r = av.cli("try", d, timeout=30)
    assert r.returncode == 75 and "adopts nothing" in r.stderr, r
    assert not of(av.records(), "mandate")
    assert av.cli("status").returncode == 0
    homefile = os.path.join(workdir, "homefile")
    write(homefile, "not a home\n")
    for extra in ([], ["-t"]):
        r = run(prog(av.bindir, "avsmd") + ["--home", homefile] + extra)
        assert r.returncode == 73 and "is not a directory" in r.stderr, r


def test_a_terminal_that_cannot_show_a_character_gets_an_escape_not_a_traceback(av, workdir):
    """CLI-11: on an ASCII (or Latin-1) standard output, what the ledger holds past it (a
    lever's output in Greek with an emoji) is written as a backslash escape; tail, status and why exit 0 with no
    traceback."""
    d = dial_venture(workdir, "greek", [("lower", "2/hour", True)], "lower", value="50",
                     lower="#!/bin/sh\necho '\u03b1\u03c1\u03b3\u03ac \u2615'\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: of(rs, "outcome", "greek"), timeout=15, what="an outcome")
    seq = of(av.records(), "action", "greek")[0][0]
    for encoding in ("ascii", "latin-1"):
        av.env["PYTHONIOENCODING"], shown = encoding, []
        for args in (("tail", "--since", "0"), ("status", "-v"), ("why", str(seq))):
            r = av.cli(*args)
            assert r.returncode == 0 and "Traceback" not in r.stderr, (encoding, args, r.stderr[-400:])
            shown.append(r.stdout)
        assert "\\u03b1\\u03c1\\u03b3\\u03ac \\u2615" in "".join(shown), (encoding, shown)


def test_ci_runs_exactly_the_readmes_one_line_test_command():
    """Issue 22 item 10: the README's test command is one line that works with only Python (it installs pytest
    and pytest-xdist first), and .ci/run runs exactly that line, last."""
    with open(os.path.join(ROOT, "README.md")) as fh:
        readme = fh.read()
    block = readme.split("Run the tests (what CI runs", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0].strip()
    assert "\n" not in block and block.startswith("python3 -m pip install") and "pytest -q -n 3" in block
    with open(os.path.join(ROOT, ".ci", "run")) as fh:
        lines = [line for line in fh.read().splitlines() if line.strip()]
    assert lines[-1] == block


def test_link_starts_a_copied_avsm_from_cached_bytecode(workdir, home):
    """issue 25 item 4: `python3 avsm.py link DIR` writes DIR/avsm and DIR/avsmd, which run the copied file from
    bytecode cached under $XDG_CACHE_HOME/avsm even with PYTHONDONTWRITEBYTECODE set (nothing is written beside
    the copy); the hints they print name them; avsmd started by one is found as avsmd and its warden shares the
    cache; a newer copy of the same size and mtime is seen at once; a file link did not write is left alone (73);
    link without a directory is a usage error (64). DIST-01 CLI-01"""
    src, bin_, cache = (os.path.join(workdir, d) for d in ("copy", "bin", "cache"))
    os.makedirs(src)
    copy = os.path.join(src, "avsm.py")
    shutil.copy(AVSM_PY, copy)
    env = dict(os.environ, XDG_CACHE_HOME=cache, PYTHONDONTWRITEBYTECODE="1")
    made = run([sys.executable, copy, "link", bin_], env=env)
    assert made.returncode == 0, made.stderr
    assert f"wrote {bin_}/avsm and {bin_}/avsmd" in made.stdout and "is not on your PATH" in made.stdout
    avsm_, avsmd_ = os.path.join(bin_, "avsm"), os.path.join(bin_, "avsmd")
    assert os.access(avsm_, os.X_OK) and os.access(avsmd_, os.X_OK)
    pyc = os.path.join(cache, "avsm", "pycache", src.lstrip("/"), f"avsm.{sys.implementation.cache_tag}.pyc")
    assert os.path.isfile(pyc), os.listdir(cache)
    assert run([avsm_, "--version"], env=env).stdout.strip() == f"avsm {avsm.VERSION}"
    assert os.listdir(src) == ["avsm.py"]                 # no __pycache__ beside the copy
    missing = run([avsm_, "--home", home, "status"], env=env)
    assert missing.returncode == 69 and f"start one with {avsmd_} --home {home}" in missing.stderr, missing.stderr

    daemon = subprocess.Popen([avsmd_, "--home", home], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while run([avsm_, "--home", home, "status"], env=env).returncode != 0:
            assert daemon.poll() is None and time.monotonic() < deadline, daemon.stderr.read() if daemon.poll() else "slow"
            time.sleep(0.1)
        assert avsm.is_avsmd_argv(cmdline(daemon.pid).decode().split("\0")), cmdline(daemon.pid)
        wardens = [p for p in children(daemon.pid) if b"warden" in cmdline(p)]
        assert wardens and f"-Xpycache_prefix={cache}/avsm/pycache".encode() in cmdline(wardens[0])
        assert avsm.avsmd_processes(home) == [daemon.pid]    # as doctor and a second avsmd find it
    finally:
        daemon.terminate()
        daemon.wait(15)
    assert os.listdir(src) == ["avsm.py"]

    # a newer copy, of the same size and with the old one's times, is what runs next
    st = os.stat(copy)
    with open(copy) as fh:
        text = fh.read()
    newer = text.replace(f'VERSION = "{avsm.VERSION}"', 'VERSION = "9.9.9"', 1)
    assert len(newer) == len(text) and newer != text
    with open(copy, "w") as fh:
        fh.write(newer)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run([avsm_, "--version"], env=env).stdout.strip() == "avsm 9.9.9"

    # link again rewrites its own wrappers; a file it did not write stays, and so does the other wrapper
    assert run([sys.executable, copy, "link", bin_], env=env).returncode == 0
    with open(avsm_, "w") as fh:
        fh.write("#!/bin/sh\necho mine\n")
    refused = run([sys.executable, copy, "link", bin_], env=env)
    assert refused.returncode == 73 and f"{avsm_} is there and avsm link did not write it" in refused.stderr
    assert open(avsm_).read() == "#!/bin/sh\necho mine\n"
    for args in ([], ["a", "b"], ["--force"]):
        bad = run([sys.executable, copy, "link", *args], env=env)
        assert bad.returncode == 64 and "usage: avsm link DIR" in bad.stderr, (args, bad.stderr)
