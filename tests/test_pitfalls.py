"""Black-box tests of the pitfalls other supervisors fell into (../shared/PITFALLS.md): a real avsmd on a
short temp home, driven by the real client, the ledger read read-only, /proc read for what the processes
do. Each test's docstring names what it checks, the requirements and the PITFALLS item."""

import ast
import json
import os
import re
import signal
import socket
import sqlite3
import time

from conftest import ROOT, Avsm, check_ledger_safety, children, cmdline, make_venture, stat_fields, write
from test_daemon import dial, of

AVSM_PY = os.path.join(ROOT, "avsm.py")

MANDATE = """purpose: Keep the dial low.
metric: dial
controller: {{kind: threshold, above: 10, action: lower{extra}}}
cadence: {cadence}
permitted:
  - {{name: lower, run: ./lower, cap: 600/hour, reversible: true{lever}}}
forbidden: [rm]
"""


def mandate(extra="", cadence="1s", lever=""):
    return MANDATE.format(extra=extra, cadence=cadence, lever=lever)


def poll(predicate, timeout, what, step=0.05):
    """Call predicate until it returns something true; return that, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def raw_records(home, kind=None):
    """[(seq, stored record text)] straight from the ledger, read-only: the bytes that are kept."""
    db = sqlite3.connect(f"file:{os.path.join(home, 'ledger.db')}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute("SELECT seq, record FROM records ORDER BY seq").fetchall()
    finally:
        db.close()
    return [(s, text) for s, text in rows if kind is None or json.loads(text)["kind"] == kind]


def warden_of(av):
    """The warden: the child of avsmd whose command line holds `warden`."""
    wardens = av.wardens()
    assert len(wardens) == 1, f"expected one warden under avsmd {av.proc.pid}, found {wardens}"
    return wardens[0]


def cpu_seconds(pid):
    """utime + stime of the process itself (fields 14 and 15 of /proc/PID/stat), in seconds."""
    fields = stat_fields(pid)
    assert fields is not None, f"process {pid} is gone"
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def zombies_of(parents):
    """{pid: parent} of zombie processes whose parent is one of `parents`."""
    found = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            fields = stat_fields(p)
            if fields is not None and fields[0] == b"Z" and int(fields[1]) in parents:
                found[int(p)] = int(fields[1])
    return found


def after(records, seq):
    return [(s, a, r) for s, a, r in records if s > seq]


def started(a):
    """The seq of the last `start` record of avsmd (the start of its current run)."""
    return [s for s, _, r in a.records() if r["venture"] == "self" and r["kind"] == "start"][-1]


# ---- PITFALLS 4: reaping ------------------------------------------------------------

def test_lever_exiting_3_is_recorded_failed_never_ok(av, workdir):
    """A lever that exits 3 (reaped by its own pid, its status kept) is recorded in each outcome as exit 3,
    failed, never ok, run after run. LEVER-12 open point 29 PITFALLS 4"""
    d = dial(workdir, "dial", mandate(), value="50", lower="#!/bin/sh\nsleep 0.1\nexit 3\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: len(of(rs, "outcome")) >= 3 and rs, timeout=20, what="three outcomes")
    outcomes = [r for _, r in of(recs, "outcome")]
    for o in outcomes:
        assert o["ok"] is False and o["status"] == "exit 3", o
        assert "failed" in o["summary"] and "exit 3" in o["summary"], o["summary"]


def test_warden_leaves_no_zombie_children(av, workdir):
    """After rounds of reports, lever runs and a kept `run` that ended, neither the warden nor avsmd has a
    zombie child: a zombie seen in two scans 0.7 s apart was never reaped. RUN-11 PITFALLS 4"""
    d = dial(workdir, "dial", mandate() + "restart: never\n", value="50",
             lower="#!/bin/sh\n(sleep 0.05 &)\nexit 3\n", run="#!/bin/sh\nsleep 0.2\nexit 4\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: len(of(rs, "outcome")) >= 3 and of(rs, "exit"), timeout=20,
                what="three lever outcomes and the run's exit")
    parents = {av.proc.pid, warden_of(av)}
    scans = []
    for _ in range(3):
        scans.append(zombies_of(parents))
        time.sleep(0.7)
    leaked = {p: parent for first, second in zip(scans, scans[1:]) for p, parent in second.items() if p in first}
    assert not leaked, f"zombie children never reaped (pid: parent): {leaked}"
    assert len(of(av.records(), "report")) >= 3


def reaping_problems(source):
    """Calls in `source` that reap what is not the caller's own, or leave children to be reaped by no one."""
    tree = ast.parse(source)
    from_os = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == "os" for a in node.names}

    def name(node):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return f"{node.value.id}.{node.attr}"
        if isinstance(node, ast.Name):
            return f"os.{from_os[node.id]}" if node.id in from_os else node.id
        return None

    def constant(node):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return -node.operand.value
        return node.value if isinstance(node, ast.Constant) else None

    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = name(node.func)
        first = constant(node.args[0]) if node.args else None
        if called in ("os.wait", "os.wait3", "os.wait4"):
            problems.append(f"line {node.lineno}: {called}()")
        elif called == "os.waitpid" and first in (-1, 0):
            problems.append(f"line {node.lineno}: os.waitpid({first}, ...)")
        elif called == "os.waitid" and node.args and name(node.args[0]) in ("os.P_ALL", "os.P_PGID"):
            problems.append(f"line {node.lineno}: os.waitid({name(node.args[0])}, ...)")
        elif called == "signal.signal" and len(node.args) == 2 and name(node.args[0]) == "signal.SIGCHLD" \
                and name(node.args[1]) == "signal.SIG_IGN":
            problems.append(f"line {node.lineno}: signal.signal(SIGCHLD, SIG_IGN)")
    return problems


def test_source_reaps_only_its_own_children_by_pid():
    """avsm.py never reaps blindly: no os.wait(), os.wait3/wait4, os.waitpid(-1 or 0, ...), os.waitid(P_ALL),
    and never sets SIGCHLD to SIG_IGN (the check itself is shown to catch each). PITFALLS 4"""
    bad = ("import os, signal\nfrom os import waitpid as w\nos.wait()\nos.waitpid(-1, os.WNOHANG)\nw(0, 0)\n"
           "os.wait4(-1, 0)\nos.waitid(os.P_ALL, 0, os.WEXITED)\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\n")
    assert len(reaping_problems(bad)) == 6, reaping_problems(bad)
    assert reaping_problems("import os\nos.waitpid(pid, os.WNOHANG)\n") == []
    with open(AVSM_PY) as fh:
        problems = reaping_problems(fh.read())
    assert problems == [], "avsm.py reaps what may not be its own:\n" + "\n".join(problems)


# ---- PITFALLS 5: hold and deadband come from the ledger -------------------------------

COUNTING_REPORT = """#!/bin/sh
n=$(( $(cat runs 2>/dev/null || echo 0) + 1 ))
echo $n > runs
if [ $n -eq 3 ]; then touch third; exec sleep 30.5; fi
echo 50
"""


def test_hold_counts_crossed_reports_from_before_a_restart(av, workdir):
    """hold: 3 with two crossed reports in the ledger when avsmd stops (SIGTERM, exit 0; the third report,
    cut short by the stop, is no reading): after the restart the action comes on the first crossed report,
    citing the two from before, not after three more. CTRL-07 RUN-08 PITFALLS 5"""
    d = make_venture(workdir, "dial", mandate(extra=", hold: 3", cadence="2s"),
                     {"report": COUNTING_REPORT, "lower": "#!/bin/sh\ntrue\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    poll(lambda: os.path.exists(os.path.join(d, "third")), 15, "the third report to start")
    code, _ = av.stop()
    assert code == 0, av.stderr()
    before = [(s, r) for s, r in of(av.records(), "report")]
    assert [(r["status"], r["value"]) for _, r in before] == [("trusted", 50), ("trusted", 50)], \
        f"setup: expected exactly two crossed reports before the stop, got {before}"
    assert not of(av.records(), "action")
    av.start()
    mark = started(av)
    recs = av.wait_for(lambda rs: of(after(rs, mark), "action") and rs, timeout=15, what="the action after the restart")
    (action_seq, action), = of(after(recs, mark), "action")
    reports_then = [s for s, _ in of(after(recs, mark), "report") if s < action_seq]
    assert len(reports_then) == 1, f"the action came after {len(reports_then)} reports since the restart, not the first"
    assert action["proof"]["premises"][1:] == [before[0][0], before[1][0], reports_then[0]], action["proof"]


def test_deadband_acts_once_per_excursion_across_a_restart(av, workdir):
    """deadband: with the metric held past the bound, one action; after a restart of avsmd, still no second
    action while it stays past the bound (the disarmed side is replayed from the ledger). CTRL-05 CTRL-06
    PITFALLS 5 PITFALLS 6"""
    d = dial(workdir, "dial", mandate(extra=", deadband: 2"), value="50", lower="#!/bin/sh\ntrue\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: of(rs, "outcome"), timeout=15, what="the first outcome")
    assert av.stop()[0] == 0
    av.start()
    mark = started(av)
    av.wait_for(lambda rs: len(of(after(rs, mark), "report")) >= 4, timeout=15, what="four reports after the restart")
    recs = av.records()
    assert all(r["value"] == 50 and r["status"] == "trusted" for _, r in of(recs, "report"))
    assert len(of(recs, "action")) == 1, [r["summary"] for _, r in of(recs, "action")]


# ---- PITFALLS 6: refuse, never clamp --------------------------------------------------

# (key, the mandate's line with the out-of-range value, the value as written, words the refusal must hold, why
# the spec refuses it)
OUT_OF_RANGE_MANDATES = [
    ("hold", "controller: {kind: threshold, above: 10, action: lower, hold: 0}", "0", ["hold", "at least 1"],
     "CTRL-07: n crossed reports in a row"),
    ("hold", "controller: {kind: threshold, above: 10, action: lower, hold: -1}", "-1", ["hold", "at least 1"],
     "CTRL-07"),
    ("cadence", "cadence: 0s", "0s", ["'0s'", "more than zero"], "open point 20: durations are positive"),
    ("cap", "  - {name: lower, run: ./lower, cap: -1/hour, reversible: true}", "-1/hour", ["'-1/hour'", "not a cap"],
     "LEVER-03, open point 20: a count and a period"),
    ("timeout", "  - {name: lower, run: ./lower, cap: 6/hour, reversible: true, timeout: 0s}", "0s",
     ["'0s'", "more than zero"], "open point 20: durations are positive"),
    ("expects", "  - {name: lower, run: ./lower, cap: 6/hour, reversible: true, expects: down 0 within 3}",
     "down 0 within 3", ["'0'", "above 0"], "EFFECT-03: a size above 0"),
]

BASE_MANDATE = ["purpose: Keep the dial low.", "metric: dial",
                "controller: {kind: threshold, above: 10, action: lower}", "cadence: 1s", "permitted:",
                "  - {name: lower, run: ./lower, cap: 6/hour, reversible: true}"]


def out_of_range_mandate(line=None):
    """A mandate that holds, but for `line` put in place of the line that starts as it does."""
    lines = [line if line is not None and line.split(":")[0] == base.split(":")[0] else base for base in BASE_MANDATE]
    return "\n".join(lines) + "\n"


def points_at(text, message, key, value):
    """Whether `message` names file:line:col at `key`, or at its value, in mandate `text`."""
    where = re.search(r"mandate\.yaml:(\d+):(\d+):", message)
    if not where:
        return False
    line = text.splitlines()[int(where[1]) - 1]
    col = int(where[2]) - 1
    at_key = line.find(f"{key}:")
    return at_key >= 0 and col in (at_key, line.index(value, at_key + len(key) + 1))


def test_out_of_range_values_are_refused_never_clamped(av, workdir):
    """Out-of-range mandate values (hold 0 and -1, cadence 0s, cap -1/hour, timeout 0s, an expected size of
    0) are refused by `avsm add` with 65 in one line naming file:line:col at that key (or its value) and the
    bound it breaks, and nothing is adopted; a valid mandate in the same directory is then adopted.
    MANDATE-08 VENTURE-12 EXIT-03 CTRL-07 LEVER-03 EFFECT-03 open point 20 PITFALLS 6"""
    d = dial(workdir, "dial", mandate(), value="5", lower="#!/bin/sh\ntrue\n")
    av.start()
    for key, line, value, words, why in OUT_OF_RANGE_MANDATES:
        text = out_of_range_mandate(line)
        assert line in text
        write(os.path.join(d, "mandate.yaml"), text)
        run = av.cli("add", d)
        assert run.returncode == 65, (key, value, run.returncode, run.stdout, run.stderr)
        message = run.stderr.strip()
        assert len(message.splitlines()) == 1, (key, value, message)
        said = message.split("mandate.yaml:", 1)[-1]          # the words after the path (which holds digits)
        assert all(w in said for w in words), (key, value, words, message)
        assert points_at(text, message, key, value), (key, value, message)
    assert not of(av.records(), "mandate")
    assert "dial" not in av.cli("status").stdout
    write(os.path.join(d, "mandate.yaml"), out_of_range_mandate())
    assert av.cli("add", d).returncode == 0
    assert len(of(av.records(), "mandate")) == 1


OUT_OF_RANGE_CONFIGS = [("ratchet", "-1", "SELF-02: 0 means never, no count is below it"),
                        ("port", "2876", "issue 23 item 4: no listener; port: is refused")]


def test_out_of_range_config_values_exit_78_naming_the_key(av, workdir):
    """An out-of-range config value (ratchet -1, port 0 or 65536) does not hold: `avsmd -t`, `avsmd -f FILE
    -t` and avsmd itself exit 78 naming the key and where it is; avsmd does not start on it. CONFIG-10
    EXIT-10 SELF-02 open point 4 PITFALLS 6 PITFALLS 8"""
    for key, value, why in OUT_OF_RANGE_CONFIGS:
        text = f"nightly: never\n{key}: {value}\n"
        path = write(os.path.join(av.home, "config.yaml"), text)
        other = write(os.path.join(workdir, "other.yaml"), text)
        for args, where in ((("-t",), "config.yaml:2:"), (("-f", other, "-t"), "other.yaml:2:"), ((), "config.yaml:2:")):
            run = av.daemon_cmd(*args, timeout=20)
            assert run.returncode == 78, (key, value, args, run.returncode, run.stderr)
            assert key in run.stderr and where in run.stderr, (key, value, args, run.stderr)
        assert not os.path.exists(os.path.join(av.home, "sock"))
        os.unlink(path)


# ---- PITFALLS 9: which way avsmd is missing --------------------------------------------

def test_status_says_in_one_line_which_way_avsmd_is_missing(av):
    """`avsm status` with no avsmd answering exits 69 with one line on standard error, different for each
    case, that says which it is: no home, avsmd running but its socket missing (avsmd held with SIGSTOP so it
    cannot make it again meanwhile; its pid named), not running, or its socket left behind; each case that
    is not running says how to start it. EXIT-05 LOCK-04 DOCTOR-17 PITFALLS 9"""
    start = f"avsmd --home {av.home}"
    said = {}

    def status(case):
        run = av.cli("status")
        assert run.returncode == 69 and run.stdout == "", (case, run)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1, (case, run.stderr)
        said[case] = lines[0]
        return lines[0]

    assert "does not exist" in status("no home") and start in said["no home"]
    av.start()
    os.kill(av.proc.pid, signal.SIGSTOP)
    try:
        os.unlink(os.path.join(av.home, "sock"))
        line = status("socket missing")
    finally:
        os.kill(av.proc.pid, signal.SIGCONT)
    assert "running" in line and "socket" in line and "missing" in line and str(av.proc.pid) in line, line
    poll(lambda: av.cli("status").returncode == 0, 5, "avsmd to make its socket again")
    assert av.stop()[0] == 0
    assert start in status("not running")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.path.join(av.home, "sock"))
    stale.close()
    line = status("left behind")
    assert "socket" in line and start in line, line
    assert len(set(said.values())) == 4, said


# ---- PITFALLS 10: drain every pipe, bound every record -----------------------------------

MB5 = 5 * 1024 * 1024


def test_chatty_lever_is_drained_and_its_outcome_stays_small(av, workdir):
    """A lever that writes 5 MB to standard output and 5 MB to standard error at once, then exits 0, finishes
    well inside its time limit (its pipes are drained, it never blocks on a full one), its outcome is ok,
    its note at most 2000 characters and the whole stored record under 10 KB. LEVER-12 open point 29
    PITFALLS 10"""
    lever = (f"#!/bin/sh\nyes 'chatty lever stderr line 0123456789' | head -c {MB5} >&2 &\n"
             f"yes 'chatty lever stdout line 0123456789' | head -c {MB5}\nwait\necho last words\n")
    d = dial(workdir, "dial", mandate(extra=", deadband: 2", lever=", timeout: 20s"), value="50", lower=lever)
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=30, what="the chatty lever's outcome")
    (seq, outcome), = of(recs, "outcome")
    assert outcome["ok"] is True and outcome["status"] == "exit 0" and outcome["ended_by"] is None, outcome["summary"]
    assert outcome["duration"] < 10, outcome["summary"]
    assert len(outcome["note"]) <= 2000 and outcome["note"].endswith("last words")
    (_, text), = [(s, t) for s, t in raw_records(av.home, "outcome") if s == seq]
    assert len(text.encode()) < 10_000, len(text.encode())


def test_chatty_report_is_read_as_its_last_number_and_stays_small(av, workdir):
    """A report that prints 5 MB of lines (and 5 MB to standard error) before its number is read as that
    number, trusted, and its stored record stays under 10 KB. REPORT-02 REPORT-07 PITFALLS 10"""
    report = (f"#!/bin/sh\nyes 'chatty report stderr line' | head -c {MB5} >&2 &\n"
              f"yes 'chatty report line 0123456789' | head -c {MB5}\nwait\necho\necho 7\n")
    d = make_venture(workdir, "dial", mandate(cadence="3s"), {"report": report, "lower": "#!/bin/sh\ntrue\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "report") and rs, timeout=20, what="the chatty report")
    (seq, report_record), = of(recs, "report")[:1]
    assert report_record["status"] == "trusted" and report_record["value"] == 7, report_record
    (_, text), = [(s, t) for s, t in raw_records(av.home, "report") if s == seq]
    assert len(text.encode()) < 10_000, len(text.encode())


# ---- PITFALLS 11: no busy loop -------------------------------------------------------

def test_idle_daemon_uses_almost_no_cpu(av):
    """A fresh avsmd with no venture, settled for 2 s, uses under 0.05 s of CPU over 3 s: avsmd, its warden
    and its roles process together (utime + stime of each). RUN-02 PITFALLS 11"""
    av.start()
    time.sleep(2)
    warden_of(av)
    pids = [av.proc.pid] + children(av.proc.pid)
    before = {p: cpu_seconds(p) for p in pids}
    time.sleep(3)
    used = {p: cpu_seconds(p) - before[p] for p in pids}
    assert sum(used.values()) < 0.05, f"CPU seconds over 3 s idle, by pid: {used}"


def test_warden_cpu_stays_low_at_a_one_second_cadence(av, workdir):
    """With one venture at cadence 1s whose report is `echo 1`, the warden's own CPU over 5 s stays under
    0.25 s (a busy loop would be about 5 s), while it does read the reports. PITFALLS 11"""
    d = make_venture(workdir, "dial", mandate(), {"report": "#!/bin/sh\necho 1\n", "lower": "#!/bin/sh\ntrue\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: of(rs, "report"), timeout=10, what="the first report")
    warden = warden_of(av)
    n = len(of(av.records(), "report"))
    before = cpu_seconds(warden)
    time.sleep(5)
    used = cpu_seconds(warden) - before
    assert len(of(av.records(), "report")) >= n + 4
    assert used < 0.25, f"the warden used {used:.2f} s of CPU over 5 s"


# ---- PITFALLS 12: the environment a venture's programs get ------------------------------

ENV_REPORT = "#!/bin/sh\nenv > report.env\nwc -c > report.stdin\npwd > report.pwd\necho 50\n"
SHELL_SET = {"PWD", "OLDPWD", "SHLVL", "_"}       # set by the shell and by env itself, not by avsm


def read_env(path):
    with open(path) as fh:
        return dict(line.split("=", 1) for line in fh.read().splitlines() if "=" in line)


def test_programs_get_avsmds_environment_plus_avsm_home_and_venture(bindir, home, workdir):
    """A report and a lever run in the venture directory with avsmd's own environment (its PATH and HOME as
    it was started with, and a variable of its own) plus AVSM_HOME and AVSM_VENTURE, and AVSM_LEVER for the
    lever only; standard input is empty; the README documents these names. VENTURE-05 PITFALLS 12"""
    path = f"{workdir}/pathmark:/usr/local/bin:/usr/bin:/bin"
    a = Avsm(bindir, home, env={"PATH": path, "HOME": os.path.join(workdir, "homemark"), "AVSM_TEST_MARK": "kept"})
    d = dial(workdir, "dial", mandate(extra=", deadband: 2", cadence="2s"), value="50",
             lower="#!/bin/sh\nenv > lever.env\n")
    write(os.path.join(d, "report"), ENV_REPORT, 0o755)
    a.start()
    try:
        assert a.cli("add", d).returncode == 0
        a.wait_for(lambda rs: of(rs, "outcome"), timeout=15, what="the lever's outcome")
    finally:
        assert a.stop()[0] == 0
    check_ledger_safety(home)
    expected = dict(a.env, AVSM_HOME=home, AVSM_VENTURE="dial")
    report_env = read_env(os.path.join(d, "report.env"))
    assert report_env.get("PATH") == path and report_env.get("HOME") == os.path.join(workdir, "homemark")
    assert report_env.get("AVSM_HOME") == home and report_env.get("AVSM_VENTURE") == "dial"
    assert report_env.get("AVSM_TEST_MARK") == "kept" and "AVSM_LEVER" not in report_env
    assert {k: v for k, v in report_env.items() if k not in SHELL_SET} == \
        {k: v for k, v in expected.items() if k not in SHELL_SET}
    lever_env = read_env(os.path.join(d, "lever.env"))
    assert {k: v for k, v in lever_env.items() if k not in SHELL_SET} == \
        {k: v for k, v in dict(expected, AVSM_LEVER="lower").items() if k not in SHELL_SET}
    with open(os.path.join(d, "report.stdin")) as fh:
        assert fh.read().strip() == "0"
    with open(os.path.join(d, "report.pwd")) as fh:
        assert os.path.realpath(fh.read().strip()) == os.path.realpath(d)
    with open(os.path.join(ROOT, "README.md")) as fh:
        readme = fh.read()
    environment = readme[readme.index("**The environment**"):][:400]
    for name in ("AVSM_HOME", "AVSM_VENTURE", "AVSM_LEVER", "avsmd's own environment"):
        assert name in environment, name
