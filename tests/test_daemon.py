"""Black-box tests of avsmd and avsm: a real daemon on a short temp home, driven by the real client,
the ledger read read-only. Each test's docstring names the requirements it checks."""

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

import avsm
from conftest import ROOT, Avsm, ended_soon, make_venture, processes_with, write

DIAL_REPORT = "#!/bin/sh\ncat value\n"


def dial(root, name, mandate, value="0", **files):
    """A venture whose metric is the number in its file `value`; levers are given as scripts."""
    d = make_venture(root, name, mandate, dict({"report": DIAL_REPORT}, **files))
    write(os.path.join(d, "value"), f"{value}\n")
    return d


def set_value(d, value):
    write(os.path.join(d, "value.new"), f"{value}\n")
    os.replace(os.path.join(d, "value.new"), os.path.join(d, "value"))


def of(records, kind, venture=None):
    return [(s, r) for s, _, r in records if r["kind"] == kind and (venture is None or r["venture"] == venture)]


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


THRESHOLD = """purpose: Keep the dial low.
metric: dial
controller: {{kind: threshold, above: 10, action: lower{extra}}}
cadence: 1s
permitted:
  - {{name: lower, run: ./lower, cap: {cap}, reversible: {reversible}{lever}}}
forbidden: [rm]
"""


def threshold(extra="", cap="60/hour", reversible="true", lever=""):
    return THRESHOLD.format(extra=extra, cap=cap, reversible=reversible, lever=lever)


LOWER = "#!/bin/sh\necho 0 > value\n"


# ---- the daemon's life ----------------------------------------------------------

def test_start_and_clean_stop(av):
    """avsmd runs in the foreground, makes its home 0700 and socket 0600, writes self start and stop
    records, and exits 0 within 10 s of SIGTERM, saying so. RUN-01 RUN-03 RUN-08 HOME-04 HOME-09 SELF-01"""
    av.start()
    assert stat.S_IMODE(os.stat(av.home).st_mode) == 0o700
    sock = os.path.join(av.home, "sock")
    assert stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    assert os.path.isfile(os.path.join(av.home, "avsmd.lock"))
    code, took = av.stop()
    assert code == 0 and took < 10
    kinds = [(r["venture"], r["kind"], r["claim"]) for _, _, r in av.records()]
    assert kinds[0] == ("self", "start", "measured") and kinds[-1] == ("self", "stop", "measured")
    assert av.cli("status").returncode == 69
    # issue 22 item 9: a foreground avsmd says, in one line, that it stopped, and where its ledger ends
    last = av.records()[-1][0]
    assert av.stderr().splitlines()[-1] == f"avsmd: stopped {av.home} (pid {av.proc.pid}); its ledger ends at #{last}"


def test_sigint_stops_cleanly(av):
    """SIGINT stops avsmd as SIGTERM does, exit 0. RUN-03 RUN-08"""
    av.start()
    av.proc.send_signal(signal.SIGINT)
    assert av.proc.wait(10) == 0


def test_second_daemon_exits_75_naming_the_first(av):
    """A second avsmd on the same home exits 75 and names the first's pid, even with the socket deleted.
    LOCK-01 LOCK-02 LOCK-03 EXIT-08"""
    av.start()
    second = av.daemon_cmd()
    assert second.returncode == 75
    assert str(av.proc.pid) in second.stderr
    os.unlink(os.path.join(av.home, "sock"))
    second = av.daemon_cmd()
    assert second.returncode == 75 and str(av.proc.pid) in second.stderr


def test_deleted_socket_and_lock_are_made_again(av):
    """Each second avsmd checks its lock file and socket and makes again one that was deleted. LOCK-04 LOCK-05"""
    av.start()
    os.unlink(os.path.join(av.home, "sock"))
    os.unlink(os.path.join(av.home, "avsmd.lock"))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and av.cli("status").returncode != 0:
        time.sleep(0.2)
    assert av.cli("status").returncode == 0
    assert os.path.isfile(os.path.join(av.home, "avsmd.lock"))
    assert av.daemon_cmd().returncode == 75


def test_home_too_long_for_the_socket(bindir, workdir):
    """A home whose socket path passes 107 bytes is refused with 'use a shorter --home or AVSMD_HOME':
    avsmd exits 78, and so does avsmd -t. HOME-05 HOME-06 HOME-07"""
    home = os.path.join(workdir, "x" * (110 - len(workdir)))
    a = Avsm(bindir, home)
    run = a.daemon_cmd()
    assert run.returncode == 78 and "use a shorter --home or AVSMD_HOME" in run.stderr
    test = a.daemon_cmd("-t")
    assert test.returncode == 78 and "use a shorter --home or AVSMD_HOME" in test.stderr


def test_home_from_environment(bindir, home):
    """--home wins over $AVSMD_HOME, which wins over the default. HOME-01 CLI-02"""
    a = Avsm(bindir, home, env={})
    a.env["AVSMD_HOME"] = home
    started = subprocess.Popen([sys.executable, os.path.join(bindir, "avsmd")], env=a.env,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(os.path.join(home, "sock")) and time.monotonic() < deadline:
            time.sleep(0.05)
        env_status = subprocess.run([sys.executable, os.path.join(bindir, "avsm"), "status"], env=a.env,
                                    capture_output=True, text=True)
        assert env_status.returncode == 0
        other = subprocess.run([sys.executable, os.path.join(bindir, "avsm"), "--home", home + "x", "status"],
                               env=a.env, capture_output=True, text=True)
        assert other.returncode == 69
    finally:
        started.send_signal(signal.SIGTERM)
        assert started.wait(10) == 0


def test_default_home_is_under_xdg_state_home(bindir, workdir):
    """With neither --home nor $AVSMD_HOME, the home is $XDG_STATE_HOME/avsmd, or ~/.local/state/avsmd when
    XDG_STATE_HOME is not set: avsmd serves its socket there and the client finds it. HOME-03 HOME-01"""
    env = {k: v for k, v in os.environ.items() if k not in ("AVSMD_HOME", "XDG_STATE_HOME")}
    state = os.path.join(workdir, "st")
    started = subprocess.Popen([sys.executable, os.path.join(bindir, "avsmd")], env=dict(env, XDG_STATE_HOME=state),
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(os.path.join(state, "avsmd", "sock")) and time.monotonic() < deadline:
            time.sleep(0.05)
        found = subprocess.run([sys.executable, os.path.join(bindir, "avsm"), "status"],
                               env=dict(env, XDG_STATE_HOME=state), capture_output=True, text=True)
        assert found.returncode == 0, found.stderr
    finally:
        started.send_signal(signal.SIGTERM)
        assert started.wait(10) == 0
    unset = subprocess.run([sys.executable, os.path.join(bindir, "avsm"), "status"],
                           env=dict(env, HOME=os.path.join(workdir, "h")), capture_output=True, text=True)
    assert unset.returncode == 69
    assert os.path.join(workdir, "h", ".local", "state", "avsmd") + " " in unset.stderr, unset.stderr


MACOS_CLIENT = """import sys
sys.platform = "darwin"                 # avsm as it imports on macOS
sys.path.insert(0, {root!r})
sys.argv = ["avsm", "status"]
import avsm
print(avsm.resolve_home(None))
print(avsm.SOCKET_LIMIT)
sys.exit(avsm.main())
"""


def test_default_home_on_macos(workdir):
    """On macOS (sys.platform darwin) the default home is ~/Library/Application Support/avsmd, even with
    XDG_STATE_HOME set: the client looks for avsmd there, and says so when none answers; a socket path may
    be 103 bytes there. HOME-02 HOME-01 HOME-05"""
    env = {k: v for k, v in os.environ.items() if k != "AVSMD_HOME"}
    env.update(HOME=os.path.join(workdir, "u"), XDG_STATE_HOME=os.path.join(workdir, "st"))
    run = subprocess.run([sys.executable, "-S", "-c", MACOS_CLIENT.format(root=ROOT)], env=env,
                         capture_output=True, text=True, timeout=30)
    home = os.path.join(workdir, "u", "Library", "Application Support", "avsmd")
    assert run.stdout.splitlines() == [home, "103"], run.stdout + run.stderr
    assert run.returncode == 69 and f"{home} does not exist" in run.stderr, run.stderr


def test_verbose_diagnostics_go_to_standard_error(av, workdir):
    """avsmd -d writes what it does to standard error: the warden it starts, the programs the warden starts
    and each record; without -d it writes none of that. CLI-06"""
    d = dial(workdir, "dial", threshold(), value="3", lower=LOWER)
    av.start("-d")
    av.cli("add", d)
    av.wait_for(lambda rs: of(rs, "report"), timeout=10, what="a report")
    assert av.stop()[0] == 0
    err = av.stderr()
    assert "started the warden" in err and "started report" in err and "dial report dial = 3" in err, err
    quiet = Avsm(av.bindir, av.home)
    quiet.start()
    quiet.cli("add", d)
    seq = quiet.records()[-1][0]
    quiet.wait_for(lambda rs: [s for s, r in of(rs, "report") if s > seq], timeout=10, what="a report")
    assert quiet.stop()[0] == 0
    assert "started" not in quiet.stderr() and "dial = 3" not in quiet.stderr(), quiet.stderr()


def test_client_without_daemon_exits_69(av):
    """Every command that needs the daemon exits 69 when none runs, saying which way it is missing. EXIT-05"""
    for args in (["status"], ["asks"], ["pause", "x"], ["resume", "x"], ["approve", "1"], ["deny", "1"]):
        run = av.cli(*args)
        assert run.returncode == 69, args
        assert "does not exist" in run.stderr or "no avsmd" in run.stderr


# ---- adding ventures ------------------------------------------------------------

def test_add_refusals_and_their_codes(av, workdir):
    """add: 66 for a missing directory, 65 for a file, 65 naming the rename for mandate.yml, 65 for a
    mandate the daemon refuses (with file:line:col), 65 for a bad directory name.
    VENTURE-03 VENTURE-09 VENTURE-10 VENTURE-11 VENTURE-12 MANDATE-08 EXIT-03 EXIT-04"""
    av.start()
    assert av.cli("add", os.path.join(workdir, "nope")).returncode == 66
    f = write(os.path.join(workdir, "afile"), "x")
    run = av.cli("add", f)
    assert run.returncode == 65 and "directory" in run.stderr
    yml = make_venture(workdir, "yml", "")
    os.rename(os.path.join(yml, "mandate.yaml"), os.path.join(yml, "mandate.yml"))
    run = av.cli("add", yml)
    assert run.returncode == 65 and "rename" in run.stderr and "mandate.yaml" in run.stderr
    bad = dial(workdir, "bad", threshold().replace("cadence", "cadance"), lower=LOWER)
    run = av.cli("add", bad)
    assert run.returncode == 65 and "cadance" in run.stderr and "mandate.yaml:" in run.stderr
    spaced = dial(workdir, "a b", threshold(), lower=LOWER)
    assert av.cli("add", spaced).returncode == 65
    assert av.kinds().count("mandate") == 0


def ask_socket(home, cmd, args):
    """Send one request straight to avsmd's socket (no client checks first); return its exit code and err lines."""
    import json
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(20)
        conn.connect(os.path.join(home, "sock"))
        conn.sendall((json.dumps({"v": 1, "cmd": cmd, "args": args}) + "\n").encode())
        data = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
            messages = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
            if any("exit" in m for m in messages):
                return [m["exit"] for m in messages if "exit" in m][0], [m["err"] for m in messages if "err" in m]
    raise AssertionError(f"no answer: {data!r}")


def test_hostile_mandate_files_are_refused_and_harm_nothing(av, workdir):
    """A mandate.yaml that is a directory, a FIFO, not UTF-8, over 256 KiB, or holds a number too large for
    a reading (1 and 400 zeros) or a duration past 100 years is refused with 65 saying what is wrong, by the
    client and by avsmd asked directly, never read past what it needs (a FIFO is not waited on); the warden
    does not die, nothing is adopted, and the venture already running goes on. VENTURE-12 MANDATE-08 EXIT-03
    open point 24"""
    ok = dial(workdir, "ok", threshold(), value="3", lower=LOWER)
    av.start()
    assert av.cli("add", ok).returncode == 0
    good = threshold()
    cases = {
        "isdir": None, "fifo": None,
        "latin": good.replace("Keep", "Caf\xe9 keep").encode("latin-1"),
        "huge": (good + "# " + "x" * 300000 + "\n").encode(),
        "bignum": good.replace("above: 10", "above: 1" + "0" * 400).encode(),
        "ages": good.replace("cadence: 1s", "cadence: 99999999999999999999999d").encode(),
    }
    expect = {"isdir": "is a directory", "fifo": "not a regular file", "latin": "not UTF-8", "huge": "KiB",
              "bignum": "too large", "ages": "100 years"}
    for name, data in cases.items():
        d = dial(workdir, name, threshold(), lower=LOWER)
        path = os.path.join(d, "mandate.yaml")
        os.unlink(path)
        if name == "isdir":
            os.mkdir(path)
        elif name == "fifo":
            os.mkfifo(path)
        else:
            with open(path, "wb") as fh:
                fh.write(data)
        run = av.cli("add", d, timeout=20)
        assert run.returncode == 65 and expect[name] in run.stderr, (name, run)
        code, errs = ask_socket(av.home, "add", {"dir": d})
        assert code == 65 and expect[name] in " ".join(errs), (name, code, errs)
    recs = av.records()
    assert not [r for _, _, r in recs if r["kind"] == "restart"], "the warden died"
    assert [r["venture"] for _, r in of(recs, "mandate")] == ["ok"]
    assert av.cli("status").returncode == 0
    n = len(of(recs, "report", "ok"))
    av.wait_for(lambda rs: len(of(rs, "report", "ok")) > n + 1, timeout=10, what="ok reporting on")


def test_readd_unchanged_writes_nothing_changed_adopts(av, workdir):
    """Re-adding an unchanged mandate writes nothing; a changed one is a new mandate record whose
    permissions replace the old. VENTURE-01 VENTURE-02 VENTURE-07"""
    d = dial(workdir, "dial", threshold(), lower=LOWER)
    av.start()
    run = av.cli("add", d)
    assert run.returncode == 0 and "dial" in run.stdout and "lower" in run.stdout
    count = len(av.records())
    again = av.cli("add", d)
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert len(of(av.records(), "mandate")) == 1
    write(os.path.join(d, "mandate.yaml"), threshold(cap="5/hour"))
    assert av.cli("add", d).returncode == 0
    mandates = of(av.records(), "mandate")
    assert len(mandates) == 2 and mandates[-1][1]["venture"] == "dial" and count < len(av.records())


def test_config_change_is_noticed_by_add(av, workdir):
    """avsm add says the config changed on disk while file and daemon differ. VENTURE-13 CONFIG-01"""
    d = dial(workdir, "dial", threshold(), lower=LOWER)
    av.start()
    assert "config.yaml changed" not in av.cli("add", d).stderr
    write(os.path.join(av.home, "config.yaml"), "ratchet: 3\n")
    run = av.cli("add", d)
    assert run.returncode == 0 and "config.yaml changed on disk; restart avsmd to apply it" in run.stderr


# ---- the tick, the controller, the gate --------------------------------------------

def test_counter_example_resets_with_proof(bindir, home, workdir):
    """The README's counter: report climbs, past 10 the reset runs, with an action whose proof cites only
    measured and declared records, and `avsm why` re-checks it; the count rises by one a report, a report every
    10 s (the rest of EXAMPLE-03, over an hour: test_kernel_rules). EXAMPLE-01 EXAMPLE-02 EXAMPLE-03 CTRL-02
    PROOF-02..05 LEVER-12"""
    d = os.path.join(workdir, "counter")
    shutil.copytree(os.path.join(ROOT, "examples", "counter"), d)
    tmp = os.path.join(workdir, "t")
    os.mkdir(tmp)
    a = Avsm(bindir, home, env={"TMPDIR": tmp})
    a.start()
    try:
        cksum = subprocess.run('echo "$AVSM_HOME $(pwd)" | cksum | cut -d" " -f1', shell=True, cwd=d, capture_output=True,
                               text=True, env=dict(os.environ, AVSM_HOME=home)).stdout.strip()      # its state, per home
        write(os.path.join(tmp, f"avsm-counter-{os.getuid()}-{cksum}"), "9\n")
        assert a.cli("add", d).returncode == 0
        recs = a.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=25, what="the reset's outcome")
        reports = [r["value"] for _, r in of(recs, "report")]
        assert reports[:2] == [10, 11]
        times = [at for _, at, r in recs if r["kind"] == "report"]
        assert 9 <= times[1] - times[0] <= 11, times
        (action_seq, action), = of(recs, "action")
        assert action["lever"] == "reset" and action["proof"]["rule"] == "threshold"
        outcome = of(recs, "outcome")[0][1]
        assert outcome["ok"] is True and outcome["action"] == action_seq
        why = a.cli("why", str(action_seq))
        assert why.returncode == 0 and "re-checks: yes" in why.stdout and "premise #" in why.stdout
        status = a.cli("status")
        assert "counter: running" in status.stdout and "reset: 1 of 60" in status.stdout
    finally:
        assert a.stop()[0] == 0
    from conftest import check_ledger_safety
    check_ledger_safety(home)


def test_cap_is_never_exceeded_and_refusals_say_why(av, workdir):
    """With the metric held past the bound, the lever runs on every crossed report until its cap, then
    each decision is a refusal naming the cap; status shows the controller past the bound. CTRL-04 LEVER-03
    CLI-07 open point 20"""
    d = dial(workdir, "dial", threshold(cap="2/hour"), value="50", lower="#!/bin/sh\ntrue\n")
    av.start()
    av.cli("add", d)
    refused = av.wait_for(lambda rs: of(rs, "refusal"), timeout=15, what="the refusal")[0][0]
    recs = av.wait_for(lambda rs: len([s for s, _ in of(rs, "report") if s > refused]) >= 3 and rs, timeout=15,
                       what="three reports after it")
    assert len(of(recs, "action")) == 2
    (_, refusal), = of(recs, "refusal")         # once per excursion and reason (issue 14: stuck is a state)
    assert "cap" in refusal["why"] and refusal["stuck"] == "cap"
    status = av.cli("status", "-v").stdout
    assert "lower: 2 of 2" in status
    assert "controller: above 10 (lower): past the bound; stuck (cap)" in status, "the position is the last trusted report's"


def test_deadband_acts_once_per_excursion(av, workdir):
    """deadband: one action per excursion even while the metric stays past the bound; re-armed at
    above - d. CTRL-05 CTRL-06"""
    d = dial(workdir, "dial", threshold(extra=", deadband: 2"), value="50", lower="#!/bin/sh\ntrue\n")
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "report")) >= 4, timeout=15, what="four reports")
    assert len(of(av.records(), "action")) == 1
    assert "(lower): past the bound, acted once in this excursion (deadband)" in av.cli("status", "-v").stdout
    set_value(d, 9)                          # inside but not past the deadband: still disarmed
    av.wait_for(lambda rs: of(rs, "report")[-1][1]["value"] == 9, timeout=10, what="a report of 9")
    assert "(lower): inside, deadband not yet re-armed" in av.cli("status", "-v").stdout
    set_value(d, 50)
    time.sleep(2.5)
    assert len(of(av.records(), "action")) == 1
    set_value(d, 8)
    av.wait_for(lambda rs: of(rs, "report")[-1][1]["value"] == 8, timeout=10, what="a report of 8")
    set_value(d, 50)
    av.wait_for(lambda rs: len(of(rs, "action")) == 2, timeout=10, what="the second action")


def test_hold_waits_for_reports_in_a_row(av, workdir):
    """hold: 3 acts on the third crossed report in a row, not before. CTRL-07"""
    d = dial(workdir, "dial", threshold(extra=", hold: 3, deadband: 1"), value="50", lower="#!/bin/sh\ntrue\n")
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: of(rs, "action") and rs, timeout=15, what="an action")
    reports = [s for s, r in of(recs, "report")]
    action = of(recs, "action")[0][1]
    assert len(reports) >= 3 and action["proof"]["premises"][1:4] == reports[:3]


def test_failed_reports_are_kept_and_never_acted_on(av, workdir):
    """A report that prints `count: 5`, exits non-zero or prints nothing is a failed report with a note;
    it raises one ask until a plausible report comes, and no lever runs. REPORT-02..06 PLAUS-05..07 CTRL-08"""
    d = dial(workdir, "dial", threshold(), value="count: 50", lower=LOWER)
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "report")) >= 3, timeout=10, what="three reports")
    write(os.path.join(d, "report"), "#!/bin/sh\necho 99; exit 3\n", 0o755)
    av.wait_for(lambda rs: "exit 3" in of(rs, "report")[-1][1]["note"], timeout=10, what="an exit-3 report")
    write(os.path.join(d, "report"), "#!/bin/sh\ntrue\n", 0o755)
    av.wait_for(lambda rs: "no number" in of(rs, "report")[-1][1]["note"], timeout=10, what="an empty report")
    recs = av.records()
    reports = [r for _, r in of(recs, "report")]
    assert all(r["status"] == "failed" and r["plausible"] is False and r["value"] is None and r["note"] for r in reports)
    assert "count: 50" in reports[0]["note"]
    assert len(of(recs, "ask")) == 1 and not of(recs, "action")
    assert "held by the dial report" in av.cli("status").stdout
    write(os.path.join(d, "report"), DIAL_REPORT, 0o755)
    set_value(d, 3)
    recs = av.wait_for(lambda rs: of(rs, "resolved") and rs, timeout=10, what="the ask resolved")
    assert not av.cli("asks").stdout.strip().startswith("#")


def test_irreversible_asks_once_then_approve_runs_it(av, workdir):
    """An irreversible lever is never run on the controller's word: one ask (not one per report); approve
    writes a declared approval and runs it through the gate with the approval as a premise.
    LEVER-04 ASK-01 ASK-03 ASK-11 PROOF-03"""
    d = dial(workdir, "dial", threshold(reversible="false"), value="50", lower=LOWER)
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "report")) >= 3, timeout=10, what="three reports")
    recs = av.records()
    (ask_seq, ask), = of(recs, "ask")
    assert ask["lever"] == "lower" and not of(recs, "action")
    listed = av.cli("asks")
    assert listed.stdout.startswith(f"#{ask_seq}  dial  lower  ")
    run = av.cli("approve", str(ask_seq))
    assert run.returncode == 0, run.stderr
    recs = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=10, what="the outcome")
    (approval_seq, approval), = of(recs, "approval")
    assert approval["claim"] == "declared" and approval["ask"] == ask_seq
    (action_seq, action), = of(recs, "action")
    assert action["proof"]["rule"] == "approval" and approval_seq in action["proof"]["premises"]
    assert av.cli("why", str(action_seq)).returncode == 0
    assert av.cli("approve", str(ask_seq)).returncode == 65


def test_one_ask_per_excursion_answered_or_not(av, workdir):
    """One ask per excursion, not one per report: once the controller asked to run an irreversible lever,
    it asks no more while the metric stays past the bound, whether the ask is denied or approved (and the
    lever ran without bringing it back); a trusted report back inside ends the excursion, and the next one
    asks again; the stuck state an answered ask leaves is a refusal, not one more ask. ASK-01 ASK-02 CTRL-02
    open point 25"""
    d = dial(workdir, "dial", threshold(reversible="false"), value="50", lower="#!/bin/sh\necho ran >> ran\n")
    av.start()
    av.cli("add", d)
    (first, _), = av.wait_for(lambda rs: of(rs, "ask"), timeout=10, what="the first ask")
    assert av.cli("deny", str(first)).returncode == 0
    denied = av.records()[-1][0]
    av.wait_for(lambda rs: len([s for s, r in of(rs, "report") if s > denied]) >= 2, timeout=10, what="two reports")
    asks = of(av.records(), "ask")
    assert [r["about"] for _, r in asks] == ["lever"], "asked again in the same excursion after a denial"
    set_value(d, 5)
    back = av.wait_for(lambda rs: [s for s, r in of(rs, "report") if r["value"] == 5], timeout=10, what="back inside")[0]
    set_value(d, 50)
    (second, _), = av.wait_for(lambda rs: [(s, r) for s, r in of(rs, "ask") if s > back], timeout=10,
                               what="the next excursion's ask")
    assert av.cli("approve", str(second)).returncode == 0
    ran = av.wait_for(lambda rs: [s for s, r in of(rs, "outcome") if r["ok"]], timeout=10, what="the approved run")[0]
    av.wait_for(lambda rs: len([s for s, r in of(rs, "report") if s > ran]) >= 2, timeout=10, what="two reports")
    asks = [r["about"] for _, r in of(av.records(), "ask")]
    assert asks.count("lever") == 2, "asked again in the same excursion after the approved run"
    assert "stuck" not in asks, "a person who has just answered is not asked about it (issue 22 item 3)"
    stuck = [r for _, r in of(av.records(), "refusal") if r.get("stuck") == "asked"]
    assert len(stuck) == 2, "stuck once in each excursion whose ask was answered, said by a refusal"


def test_deny_and_paused_approve(av, workdir):
    """approve of a paused venture's ask is refused with 65 and says to resume; deny works whatever the
    state. ASK-09 ASK-10 PAUSE-01"""
    d = dial(workdir, "dial", threshold(reversible="false"), value="50", lower=LOWER)
    av.start()
    av.cli("add", d)
    (ask_seq, _), = av.wait_for(lambda rs: of(rs, "ask"), timeout=10, what="an ask")
    assert av.cli("pause", "dial").returncode == 0
    run = av.cli("approve", str(ask_seq))
    assert run.returncode == 65 and "resume" in run.stderr
    assert not of(av.records(), "approval")
    run = av.cli("deny", str(ask_seq))
    assert run.returncode == 0
    assert of(av.records(), "denial")[0][1]["claim"] == "declared"
    assert av.cli("deny", str(ask_seq)).returncode == 65
    assert av.cli("approve", "x").returncode == 64


def test_delegated_irreversible_runs_unasked(av, workdir):
    """delegated: true runs an irreversible lever unasked, intent (the action) before, outcome after. LEVER-06 LEVER-07"""
    d = dial(workdir, "dial", threshold(reversible="false", lever=", delegated: true"), value="50", lower=LOWER)
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=10, what="an outcome")
    assert not of(recs, "ask")
    action_seq = of(recs, "action")[0][0]
    assert of(recs, "outcome")[0][0] > action_seq


# ---- levers apart, pause, time limits ----------------------------------------------

def test_pause_stops_a_running_lever_and_resume_starts_again(av, workdir):
    """Pausing ends a running lever's group and its outcome says the pause stopped it; while a lever runs
    the daemon answers; nothing runs while paused, and the pause survives a restart of avsmd; a second pause or
    resume writes nothing and says so. LEVER-08 LEVER-11 PAUSE-01 PAUSE-02 RUN-14"""
    d = dial(workdir, "dial", threshold(extra=", deadband: 1"), value="50",
             lower="#!/bin/sh\nsleep 60.101\n")
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: of(rs, "action"), timeout=10, what="an action")
    t0 = time.monotonic()
    assert av.cli("status").returncode == 0 and time.monotonic() - t0 < 2
    assert processes_with("60.101")
    assert av.cli("pause", "dial").returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=10, what="the outcome")
    outcome = of(recs, "outcome")[0][1]
    assert outcome["ok"] is False and "pause" in outcome["summary"]
    assert ended_soon("60.101"), processes_with("60.101")
    n = len(of(recs, "report"))
    again = av.cli("pause", "dial")           # a second pause writes nothing and says so
    assert again.returncode == 0 and again.stdout == "dial is already paused\n", again
    time.sleep(2)
    assert len(of(av.records(), "report")) == n and len(of(av.records(), "pause")) == 1
    assert "dial: paused" in av.cli("status").stdout
    assert av.stop()[0] == 0
    av.start()
    assert "dial: paused" in av.cli("status").stdout
    assert av.cli("resume", "dial").returncode == 0
    av.wait_for(lambda rs: len(of(rs, "report")) > n, timeout=10, what="a report after resume")
    again = av.cli("resume", "dial")
    assert again.returncode == 0 and again.stdout == "dial is not paused\n", again
    assert len(of(av.records(), "resume")) == 1


def test_lever_time_limit_kills_the_group(av, workdir):
    """A lever past its timeout gets SIGTERM, then SIGKILL 7 s later, and its outcome is failed.
    LEVER-09 LEVER-10 RUN-15"""
    lever = "#!/bin/sh\ntrap '' TERM\nsleep 60.102\n"
    d = dial(workdir, "dial", threshold(extra=", deadband: 1", lever=", timeout: 1s"), value="50", lower=lever)
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=20, what="the outcome")
    outcome = of(recs, "outcome")[0][1]
    assert outcome["ok"] is False and "time limit" in outcome["summary"]
    assert 7 <= outcome["duration"] < 12
    assert ended_soon("60.102"), processes_with("60.102")


def primed_client(av, *args):
    """The real client in a process of its own, its interpreter started and avsm imported, waiting for a
    line on standard input to run `avsm --home HOME ARGS`: what it then does takes no interpreter start,
    so a test can time it against avsmd whatever the machine's speed. Its first line out is `ready`."""
    code = (f"import sys; sys.path.insert(0, {ROOT!r}); import avsm; print('ready', flush=True); "
            "sys.stdin.readline(); sys.exit(avsm.main(sys.argv[1:]))")
    p = subprocess.Popen([av.python, *av.flags, "-c", code, "--home", av.home, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=av.env)
    assert p.stdout.readline() == "ready\n"
    return p


def test_stop_ends_a_running_lever_and_writes_its_outcome(av, workdir):
    """SIGTERM while a lever runs (one that lingers after SIGTERM: SIGKILL 7 s later): the lever is ended,
    its outcome written (stopped by the stop), avsmd exits 0; while it stops it takes no new command: status
    and add are answered 69 saying it is stopping, and the add adopts nothing. RUN-04 RUN-05 RUN-06 RUN-07
    RUN-14. Its margins do not hang on the machine's speed (issue 37 item 10): it waits for what happened
    (the lever's trap set, then run on TERM), not for a time, and the two clients are started and avsm
    imported before the stop, so within the 7 s grace they only connect."""
    d = dial(workdir, "dial", threshold(extra=", deadband: 1"), value="50",
             lower="#!/bin/sh\ntrap 'echo term > termed' TERM\necho up > up\n"
                   "while :; do sleep 60.103 & wait; done\n")     # a trap runs in wait, not in a sleep
    other = dial(workdir, "other", threshold(), lower=LOWER)
    av.start()
    av.cli("add", d)

    def appears(name, what):
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(d, name)):
            assert time.monotonic() < deadline, f"{what} within 60 s"
            time.sleep(0.01)
    appears("up", "the lever set its trap")
    status, add = primed_client(av, "status"), primed_client(av, "add", other)
    av.proc.send_signal(signal.SIGTERM)
    appears("termed", "the stop's TERM reached the lever")         # avsmd is stopping now
    assert av.proc.poll() is None, "avsmd stopped before the lever was ended"
    for client in (status, add):
        client.stdin.write("\n")
        client.stdin.flush()
    (_, status_err), (_, add_err) = status.communicate(timeout=60), add.communicate(timeout=60)
    assert status.returncode == 69 and "stopping" in status_err, status_err
    assert add.returncode == 69 and "stopping" in add_err, add_err
    assert av.proc.wait(60) == 0
    recs = av.records()
    outcome = of(recs, "outcome")[0][1]
    assert outcome["ok"] is False and outcome["ended_by"] == "stop", outcome
    assert outcome["duration"] >= avsm.KILL_GRACE, outcome      # it lingered until the KILL
    assert [r["kind"] for _, _, r in recs][-1] == "stop"
    assert not [r for _, r in of(recs, "mandate") if r["venture"] == "other"]
    assert ended_soon("60.103"), processes_with("60.103")


# ---- keeping run alive ----------------------------------------------------------

KEEP = """purpose: Keep a program up.
metric: dial
controller: {{kind: threshold, above: 10, action: lower}}
cadence: 1m
restart: {restart}
permitted:
  - {{name: lower, run: ./lower, cap: 1/hour, reversible: true}}
"""


def test_run_is_restarted_with_backoff(av, workdir):
    """A `run` that keeps dying is restarted at once the first time, then with a growing back-off; each
    start and exit is a record. VENTURE-16 VENTURE-17 open point 31"""
    d = dial(workdir, "keep", KEEP.format(restart="always"), lower=LOWER, run="#!/bin/sh\nexit 3\n")
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: len(of(rs, "start", "keep")) >= 4 and rs, timeout=15, what="four starts")
    exits = [r for _, r in of(recs, "exit")]
    assert exits[0]["status"] == "exit 3" and exits[0]["restart_in"] == 0
    assert [e["restart_in"] for e in exits[1:3]] == [1, 2]
    status = av.cli("status", "-v").stdout
    assert "restarts" in status


def test_a_new_mandate_starts_its_run_at_once_though_a_back_off_was_waiting(av, workdir):
    """VENTURE-07, open point 31: a new mandate resets the back-off, so one adopted while the kept
    program waits out a back-off of 4 s starts its `run` at once, not when the old wait is over."""
    d = dial(workdir, "dies", KEEP.format(restart="always"), lower=LOWER, run="#!/bin/sh\nexit 3\n")
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: [r["restart_in"] for _, r in of(rs, "exit", "dies")] == [0, 1, 2, 4], timeout=20,
                what="the fourth exit, its restart 4 s away")
    write(os.path.join(d, "run"), "#!/bin/sh\nexec sleep 300.143\n", 0o755)
    write(os.path.join(d, "mandate.yaml"), KEEP.format(restart="always") + "# a new mandate\n")
    before, t0 = av.records()[-1][0], time.monotonic()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: [s for s, r in of(rs, "start", "dies") if s > before], timeout=3,
                what="the new mandate's run started at once")
    assert time.monotonic() - t0 < 3


def test_a_resume_while_the_paused_program_is_still_ending_starts_it_again(av, workdir):
    """PAUSE-01, PAUSE-02, VENTURE-17: a kept program that ignores SIGTERM is still ending (until its
    SIGKILL) when a resume comes; once it has ended, it is started again at once, never left ended."""
    d = dial(workdir, "slow", KEEP.format(restart="never"), lower=LOWER,
             run="#!/bin/sh\n[ -f calm ] || trap '' TERM\nwhile :; do sleep 0.1; done\n")
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: of(rs, "start", "slow"), timeout=10, what="the program started")
    assert av.cli("pause", "slow").returncode == 0
    assert av.cli("resume", "slow").returncode == 0
    assert of(av.records(), "exit", "slow") == [], "the program ended before the resume"
    write(os.path.join(d, "calm"), "")        # its next start ends at SIGTERM: a quick teardown
    recs = av.wait_for(lambda rs: len(of(rs, "start", "slow")) == 2 and rs, timeout=20,
                       what="the program started again once the pause had ended it")
    (_, ended), = of(recs, "exit", "slow")
    assert ended["ended_by"] == "pause" and ended["restart_in"] == 0, ended


def test_a_resume_of_a_venture_that_cannot_run_says_why_and_starts_nothing(av, workdir):
    """PAUSE-02, VENTURE-14: a resume measures the venture again; one whose `run` another user could
    now change is resumed but starts nothing, and says why; once fixed, adding it again starts it."""
    d = dial(workdir, "loose", KEEP.format(restart="always"), lower=LOWER,
             run="#!/bin/sh\nexec sleep 300.144\n")
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: of(rs, "start", "loose"), timeout=10, what="the program started")
    assert av.cli("pause", "loose").returncode == 0
    os.chmod(os.path.join(d, "run"), 0o777)
    run = av.cli("resume", "loose")
    assert run.returncode == 0 and "loose resumed, but it cannot run: " in run.stdout, run
    assert "run" in run.stdout and "chmod" in run.stdout, run
    time.sleep(1.5)
    assert len(of(av.records(), "start", "loose")) == 1, "a venture that cannot run started"
    assert "cannot run" in av.cli("status", "loose").stdout
    os.chmod(os.path.join(d, "run"), 0o755)
    added = av.cli("add", d)
    assert added.returncode == 0 and "nothing written; it holds again, so the venture can run" in added.stdout, added
    av.wait_for(lambda rs: len(of(rs, "start", "loose")) == 2, timeout=10,
                what="the venture, its mandate holding again, started")


def test_a_warden_killed_while_run_backs_off_keeps_the_back_off(av, workdir):
    """The back-off is folded from the exit records, not held by one warden: SIGKILL the warden while its `run`
    keeps dying, and the warden avsmd starts again goes on from the wait the last exit named (it had started
    again from restarting at once). Open point 31, VENTURE-17, RUN-09"""
    d = dial(workdir, "keep", KEEP.format(restart="always"), lower=LOWER, run="#!/bin/sh\nexit 3\n")
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: [r["restart_in"] for _, r in of(rs, "exit")][:3] == [0, 1, 2], timeout=15,
                what="three exits, the last waiting 2 s")
    warden, = av.wardens()
    os.kill(warden, signal.SIGKILL)
    recs = av.wait_for(lambda rs: any(r.get("process") == "warden" for _, r in of(rs, "restart", "self"))
                       and len(of(rs, "exit")) >= 4 and rs, timeout=20, what="an exit after the new warden")
    restart = next(s for s, r in of(recs, "restart", "self") if r.get("process") == "warden")
    after = [r for s, r in of(recs, "exit") if s > restart]
    starts = [r for s, r in of(recs, "start", "keep") if s > restart]
    assert starts and starts[0]["summary"].startswith("run restarted"), starts
    assert after[0]["restart_in"] == 4, [r["summary"] for r in after]


def test_a_warden_started_again_reads_the_metric_a_cadence_after_the_last_report(av, workdir):
    """MANDATE-05 (once per cadence): a warden avsmd starts again after a SIGKILL does not read the
    metric at once, as it did, but a cadence after the last report the dead one wrote."""
    d = dial(workdir, "tick", KEEP.format(restart="always").replace("cadence: 1m", "cadence: 4s"),
             lower=LOWER)
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "report", "tick")) >= 2, timeout=15, what="two reports")
    warden, = av.wardens()
    os.kill(warden, signal.SIGKILL)
    recs = av.wait_for(lambda rs: [s for s, r in of(rs, "restart", "self") if r.get("process") == "warden"]
                       and len(of(rs, "report", "tick")) >= 3 and rs, timeout=20,
                       what="a report after the new warden")
    restart = next(s for s, r in of(recs, "restart", "self") if r.get("process") == "warden")
    before = [at for s, at, r in recs if r["kind"] == "report" and s < restart][-1]
    after = next(at for s, at, r in recs if r["kind"] == "report" and s > restart)
    assert after - before >= 3, f"read again {after - before} s after the last report, cadence 4s"


def test_restart_policies(av, workdir):
    """restart: never does not restart; on-failure restarts after a failure only. VENTURE-17"""
    never = dial(workdir, "never", KEEP.format(restart="never"), lower=LOWER, run="#!/bin/sh\nexit 1\n")
    okay = dial(workdir, "okay", KEEP.format(restart="on-failure"), lower=LOWER, run="#!/bin/sh\nexit 0\n")
    fails = dial(workdir, "fails", KEEP.format(restart="on-failure"), lower=LOWER, run="#!/bin/sh\nsleep 0.2; exit 2\n")
    av.start()
    for d in (never, okay, fails):
        av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "start", "fails")) >= 2, timeout=10, what="fails restarted")
    time.sleep(1)
    recs = av.records()
    assert len(of(recs, "start", "never")) == 1 and len(of(recs, "start", "okay")) == 1


def test_a_program_its_restart_left_ended_stays_ended_when_the_warden_dies(av, workdir):
    """VENTURE-17: a `run` that ended by itself and that its `restart:` did not restart is not started
    by the warden avsmd starts again after its warden died (it was before); one the dead warden left
    running is, and avsmd's own start starts every one, as a service manager's boot does."""
    never = dial(workdir, "never", KEEP.format(restart="never"), lower=LOWER, run="#!/bin/sh\nexit 1\n")
    okay = dial(workdir, "okay", KEEP.format(restart="on-failure"), lower=LOWER, run="#!/bin/sh\nexit 0\n")
    held = dial(workdir, "held", KEEP.format(restart="never"), lower=LOWER,
                run="#!/bin/sh\nexec sleep 300.131\n")
    av.start()
    for d in (never, okay, held):
        av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "exit", "never")) == len(of(rs, "exit", "okay")) == 1
                and of(rs, "start", "held"), timeout=10, what="never and okay ended, held running")
    assert of(av.records(), "exit", "never")[0][1]["restart_in"] is None
    warden, = av.wardens()
    os.kill(warden, signal.SIGKILL)
    av.wait_for(lambda rs: len(of(rs, "start", "held")) == 2, timeout=20,
                what="held, which the dead warden left running, started by the new warden")
    time.sleep(1.5)         # the new warden's start is over: what it would start, it has
    recs = av.records()
    assert [len(of(recs, "start", v)) for v in ("never", "okay")] == [1, 1], \
        [r["summary"] for _, r in of(recs, "start")]
    assert av.stop()[0] == 0
    av.start()
    av.wait_for(lambda rs: len(of(rs, "start", "never")) == len(of(rs, "start", "okay")) == 2,
                timeout=15, what="avsmd's own start starting never and okay again")


def restarts_shown(av, name):
    return int(re.search(r"^  run: .*, restarts (\d+)$", av.cli("status", "-v", name).stdout, re.M)[1])


def test_the_restarts_status_shows_are_the_ledgers_and_outlive_the_warden(av, workdir):
    """VENTURE-17, open point 31: `avsm status -v` counts the restarts `restart:` made from the ledger
    (a start after an exit that said it restarts), so a new warden shows them all, not only its own."""
    run = ("#!/bin/sh\nn=$(cat n 2>/dev/null || echo 0)\necho $((n + 1)) > n\n"
           "if [ $n -ge 2 ]; then exec sleep 300.142; fi\nexit 2\n")
    d = dial(workdir, "flaky", KEEP.format(restart="on-failure"), lower=LOWER, run=run)
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "start", "flaky")) == 3, timeout=15, what="two restarts")
    assert restarts_shown(av, "flaky") == 2
    warden, = av.wardens()
    os.kill(warden, signal.SIGKILL)
    recs = av.wait_for(lambda rs: len(of(rs, "start", "flaky")) == 4 and rs, timeout=20,
                       what="the new warden starting the program the dead one left running")
    exits = [(s, r.get("restart_in") is not None) for s, r in of(recs, "exit", "flaky")]
    made = [s for s, _ in of(recs, "start", "flaky")
            if [again for e, again in exits if e < s][-1:] == [True]]
    assert len(made) >= 2 and restarts_shown(av, "flaky") == len(made), (made, exits)


def test_grandchildren_do_not_outlive_avsmd(av, workdir):
    """A `run` whose child ignores SIGTERM: stopping avsmd ends the whole group, the warden's grace waited out
    at rest. RUN-11 RUN-14 RUN-15"""
    run = "#!/bin/sh\n(trap '' TERM; sleep 300.104\n) &\nsleep 300.105\n"
    d = dial(workdir, "keep", KEEP.format(restart="always"), lower=LOWER, run=run)
    av.start()
    av.cli("add", d)
    deadline = time.monotonic() + 10
    while not processes_with("300.104") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with("300.104")
    code, took, cpu = stop_timing_cpu(av)
    assert code == 0 and took < 10
    assert ended_soon("300.104") and ended_soon("300.105")
    # avsmd waits out the warden's grace looking 10 times a second, not in a busy loop (it spun before)
    assert took > 5 and cpu < 0.1 * took, (took, cpu)


def stop_timing_cpu(av):
    """SIGTERM avsmd; return its exit code, the seconds it took and the CPU seconds it used meanwhile."""
    def cpu():
        with open(f"/proc/{av.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")      # utime + stime
    before, last, t0 = cpu(), None, time.monotonic()
    av.proc.send_signal(signal.SIGTERM)
    while av.proc.poll() is None and time.monotonic() < t0 + 12:
        last = cpu()
        time.sleep(0.1)
    code, took = av.stop()[0] if av.proc.poll() is None else av.proc.returncode, time.monotonic() - t0
    return code, took, (last or before) - before


def test_warden_killed_is_restarted_and_asks_about_its_lever(av, workdir):
    """A warden that dies is started again with a self record; the groups it left are ended; the lever it
    was running is not run again blindly but asked about: its outcome is unknown (with at most how long it
    ran), the ask names the lever, and the lever waits, refused each time the controller wants it, until a
    person answers; then it runs again. RUN-09 RUN-10 RUN-13"""
    d = dial(workdir, "dial", threshold(), value="50",
             lower="#!/bin/sh\nif [ -e once ]; then echo 0 > value; else touch once; sleep 60.106; fi\n")
    av.start()
    av.cli("add", d)
    (action_seq, _), = av.wait_for(lambda rs: of(rs, "action"), timeout=10, what="an action")
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(d, "once")) and time.monotonic() < deadline:
        time.sleep(0.02)                # the lever has begun its first run
    warden = av.wardens()
    assert len(warden) == 1, warden
    os.kill(warden[0], signal.SIGKILL)
    recs = av.wait_for(lambda rs: of(rs, "ask") and rs, timeout=20, what="the did-it-happen ask")
    assert any(r["kind"] == "restart" and r["venture"] == "self" for _, _, r in recs)
    (ask_seq, ask), = of(recs, "ask")
    assert ask["question"] == "did lower happen?" and ask["lever"] == "lower" and ask["action"] == action_seq
    (_, outcome), = of(recs, "outcome")
    assert outcome["action"] == action_seq and outcome["ok"] is False and outcome["status"] == "unknown"
    assert isinstance(outcome["duration"], int) and 0 <= outcome["duration"] <= 30
    assert ended_soon("60.106"), processes_with("60.106")
    recs = av.wait_for(lambda rs: len([s for s, r in of(rs, "refusal") if s > ask_seq]) >= 2 and rs, timeout=10,
                       what="the controller refused while the ask waits")
    assert len(of(recs, "action")) == 1, "the interrupted lever ran again before anyone answered"
    assert all(f"ask #{ask_seq}" in r["why"] for s, r in of(recs, "refusal") if s > ask_seq)
    assert av.cli("status").returncode == 0
    assert av.cli("deny", str(ask_seq)).returncode == 0
    recs = av.wait_for(lambda rs: len(of(rs, "outcome")) >= 2 and rs, timeout=10, what="lower running again")
    assert of(recs, "outcome")[-1][1]["ok"] is True


# ---- a venture's identity; no remove ------------------------------------------------

def test_a_moved_directory_is_a_new_venture_and_none_is_removed(av, workdir):
    """A venture is its directory: renamed, it is adopted as a new venture beside the old, which stays in
    the ledger and in status (cannot run); another directory may take an unpaused venture's name only once
    that venture is paused (65 until then, saying so), and the venture then runs from there. The old one's
reports fail, naming the directory that has gone. There is no
    command that removes a venture, and nothing of its records goes. VENTURE-04 VENTURE-06 PAUSE-04
    open point 21"""
    first = dial(os.path.join(workdir, "a"), "dial", threshold(), value="3", lower=LOWER)
    av.start()
    assert av.cli("add", first).returncode == 0
    av.wait_for(lambda rs: of(rs, "report", "dial"), timeout=10, what="a report of dial")
    renamed = os.path.join(workdir, "a", "dial2")
    os.rename(first, renamed)
    assert av.cli("add", renamed).returncode == 0
    (m2_seq, m2), = of(av.records(), "mandate", "dial2")
    assert m2["directory"] == renamed
    av.wait_for(lambda rs: of(rs, "report", "dial2"), timeout=10, what="a report of dial2")
    recs = av.wait_for(lambda rs: [r for s, r in of(rs, "report", "dial") if s > m2_seq] and rs, timeout=15,
                       what="dial's next report, from a directory that has gone")
    gone = [r for s, r in of(recs, "report", "dial") if s > m2_seq][0]
    assert gone["status"] == "failed" and first in gone["note"], gone
    assert any(line.startswith("dial: ") for line in av.cli("status").stdout.splitlines()), "dial stays listed"

    elsewhere = dial(os.path.join(workdir, "b"), "dial", threshold(), value="4", lower=LOWER)
    taken = av.cli("add", elsewhere)
    assert taken.returncode == 65 and "avsm pause dial" in taken.stderr, taken
    assert len(of(av.records(), "mandate", "dial")) == 1
    for verb in ("remove", "rm", "delete"):
        assert av.cli(verb, "dial").returncode == 64
    assert av.cli("pause", "dial").returncode == 0
    assert av.cli("add", elsewhere).returncode == 0
    mandates = of(av.records(), "mandate", "dial")
    assert [r["directory"] for _, r in mandates] == [first, elsewhere]
    av.cli("resume", "dial")
    recs = av.wait_for(lambda rs: [r for s, r in of(rs, "report", "dial") if s > mandates[-1][0] and r["value"] == 4]
                       and rs, timeout=10, what="dial reading from its new directory")
    assert [r["value"] for s, r in of(recs, "report", "dial") if s < mandates[-1][0]][0] == 3, "its old records stay"


def test_asks_with_avsmd_stopped_reads_the_ledger_and_still_exits_69(av, workdir):
    """Issue 22 item 9: `avsm asks` with avsmd stopped says so and lists the open asks the ledger holds, as
    status does, in separate columns (#SEQ, venture, lever, question), and still exits 69; a home with no
    ledger prints only why no avsmd answers. CLI-04 ASK-05"""
    d = dial(workdir, "dial", threshold(reversible="false"), value="50", lower=LOWER)
    av.start()
    av.cli("add", d)
    (ask_seq, ask), = av.wait_for(lambda rs: of(rs, "ask"), timeout=10, what="an ask")
    live = av.cli("asks").stdout
    av.stop()
    offline = av.cli("asks")
    assert offline.returncode == 69 and "no avsmd" in offline.stderr, offline
    lines = offline.stdout.splitlines()
    assert lines[0].startswith("avsmd is not running: nothing runs; this is what the ledger holds"), lines
    assert lines[1:] == live.splitlines() and lines[1] == f"#{ask_seq}  dial  lower  {ask['question']}", lines
    empty = Avsm(av.bindir, av.home + "x").cli("asks")
    assert empty.returncode == 69 and empty.stdout == "", empty


def test_a_new_mandate_ends_the_kept_program_only_when_it_runs_another(av, workdir):
    """VENTURE-07: a changed mandate that keeps the same `run` command leaves the kept program
    running; one that names another ends it ("stopped by a new mandate") and starts the new
    command at once, whatever restart: says (the old one was never started again: the new
    command never ran)."""
    serve, other = "#!/bin/sh\nexec sleep 300.131\n", "#!/bin/sh\nexec sleep 300.132\n"
    first = KEEP.format(restart="never") + "run: ./serve\n"
    d = dial(workdir, "kept", first, lower=LOWER, serve=serve, other=other)
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: of(rs, "start", "kept"), timeout=10, what="serve started")
    write(os.path.join(d, "mandate.yaml"), first.replace("cap: 1/hour", "cap: 2/hour"))
    assert av.cli("add", d).returncode == 0
    time.sleep(0.5)
    assert not of(av.records(), "exit", "kept"), "the same command goes on running"
    write(os.path.join(d, "mandate.yaml"), first.replace("run: ./serve", "run: ./other"))
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: len(of(rs, "start", "kept")) >= 2 and of(rs, "exit", "kept") and rs,
                       timeout=10, what="serve ended and other started")
    (_, ended), = of(recs, "exit", "kept")
    assert ended["summary"].endswith("stopped by a new mandate after %.1fs; restarting now"
                                     % ended["uptime"]), ended
    assert [r["command"] for _, r in of(recs, "start", "kept")] == ["./serve", "./other"]
