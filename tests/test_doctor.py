"""Black-box tests of `avsm doctor`: a real home, made by a real avsmd, then broken the way a user or a
crash breaks it; the real client is run on it and its exit code and words are checked. Each test's
docstring names the requirements it checks."""

import hashlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

import avsm
from ledger_checks import verify_chain
from conftest import Avsm, write
from test_daemon import LOWER, dial, of, threshold

TRIGGERS = ("records_no_update", "records_no_delete", "records_chain")


# ---- helpers ------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def set_aside_what_was_broken_on_purpose(av):
    """After each test (and before the shared teardown checks the ledger's safety), a ledger a test broke on
    purpose is moved aside: what is checked there is doctor, not the ledger a test forged."""
    yield
    path = ledger_file(av.home)
    if av.proc is not None and av.proc.poll() is None or not os.path.isfile(path):
        return
    try:
        db = avsm.open_ledger_ro(path)
        try:
            broken = avsm.ledger_problem(db) is not None
        finally:
            db.close()
    except sqlite3.DatabaseError:
        broken = True
    if broken:
        os.replace(path, path + ".forged")


def doctor(av, *args):
    """Run `avsm --home HOME doctor ARGS`; check that every failed check prints its fix (DOCTOR-04)."""
    run = av.cli("doctor", *args)
    lines = run.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FAIL"):
            assert i + 1 < len(lines) and lines[i + 1].strip().startswith("fix: ") and len(lines[i + 1].strip()) > 6, \
                f"a failed check without the command that fixes it:\n{run.stdout}"
    assert "Traceback" not in run.stderr, run.stderr
    return run


def failures(run):
    return [line for line in run.stdout.splitlines() if line.startswith("FAIL")]


def fix_after(run, needle):
    """The fix line printed under the first FAIL line holding `needle`."""
    lines = run.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FAIL") and needle in line:
            return lines[i + 1].strip()[len("fix: "):]
    raise AssertionError(f"no FAIL line holds {needle!r}:\n{run.stdout}")


def ledger_file(home):
    return os.path.join(home, "ledger.db")


def rows(home, path=None):
    db = sqlite3.connect(f"file:{path or ledger_file(home)}?mode=ro", uri=True)
    try:
        return db.execute("SELECT seq, at, prev, hash, weight, record FROM records ORDER BY seq").fetchall()
    finally:
        db.close()


def triggers(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall())
    finally:
        db.close()


def populated(av, workdir, value="50", name="dial"):
    """A home made by a real avsmd with one adopted venture whose lever has run; avsmd is left stopped."""
    d = dial(workdir, name, threshold(extra=", deadband: 1"), value=value, lower="#!/bin/sh\ntrue\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: len(of(rs, "report")) >= 3 and (value != "50" or of(rs, "outcome")), timeout=15,
                what="three reports")
    assert av.stop()[0] == 0
    return d


def tamper(home, seq, old, new):
    """Change record `seq` of a COPY of the ledger with the triggers dropped, put the triggers back as they
    were, then put the copy in place of the ledger (avsmd is stopped): the way a crash or a hand edit breaks it."""
    path = ledger_file(home)
    copy = path + ".tamper"
    shutil.copyfile(path, copy)
    db = sqlite3.connect(copy, isolation_level=None)
    saved = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    assert {n for n, _ in saved} == set(TRIGGERS)
    for n, _ in saved:
        db.execute(f"DROP TRIGGER {n}")
    changed = db.execute("UPDATE records SET record = replace(record, ?, ?) WHERE seq = ?", (old, new, seq)).rowcount
    assert changed == 1
    for _, sql in saved:
        db.execute(sql)
    db.close()
    os.replace(copy, path)


def start_second(bindir, home, env=None):
    """Start an avsmd on `home` and wait until it says it serves (the first one may be stopped by SIGSTOP,
    so its socket cannot tell the two apart)."""
    b = Avsm(bindir, home, env=env)
    b.errfile = tempfile.TemporaryFile(mode="w+")
    b.proc = subprocess.Popen([sys.executable, os.path.join(bindir, "avsmd"), "--home", home],
                              stdout=subprocess.DEVNULL, stderr=b.errfile, env=b.env, start_new_session=True)
    deadline = time.monotonic() + 15
    while "serving" not in b.stderr():
        assert b.proc.poll() is None, f"the second avsmd exited {b.proc.returncode}: {b.stderr()}"
        assert time.monotonic() < deadline, "the second avsmd did not start serving"
        time.sleep(0.05)
    return b


def kill_session(proc):
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def snapshot(*roots):
    """Every file and directory under `roots`: its type, mode, size, mtime (ns) and bytes."""
    seen = {}
    for root in roots:
        for base, dirs, files in os.walk(root):
            for name in dirs + files:
                p = os.path.join(base, name)
                st = os.lstat(p)
                data = None
                if os.path.isfile(p) and not os.path.islink(p):
                    with open(p, "rb") as fh:
                        data = hashlib.sha256(fh.read()).hexdigest()
                seen[p] = (st.st_mode, st.st_size, st.st_mtime_ns, data)
        st = os.lstat(root)
        seen[root] = (st.st_mode, st.st_mtime_ns)
    return seen


# ---- every check passes, and the worst code wins ---------------------------------------

def test_all_checks_pass_with_a_daemon(av, workdir):
    """A home with a running avsmd, a config that holds, a keys file 0600, a sound ledger and an adopted
    venture whose mandate holds: doctor checks home, config, ledger, mandates and daemon, fails none, and
    exits 0. DOCTOR-01 DOCTOR-05"""
    d = dial(workdir, "dial", threshold(extra=", deadband: 1"), value="50", lower=LOWER)
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: of(rs, "outcome"), timeout=15, what="an outcome")
    write(os.path.join(av.home, "config.yaml"), "ratchet: 5\n")
    write(os.path.join(av.home, "keys"), "anthropic=sk-test\n", 0o600)
    run = doctor(av)
    assert run.returncode == 0, run.stdout + run.stderr
    assert not failures(run)
    out = run.stdout
    for what in (f"home {av.home}", "config.yaml", "keys", "ledger.db", "venture dial", "avsmd answers"):
        assert any(line.startswith("ok") and what in line for line in out.splitlines()), (what, out)
    assert "all checks pass" in out


def test_sound_ledger_and_no_daemon_exits_69(av, workdir):
    """A sound ledger and no avsmd running: 69, saying no avsmd runs, with the command that starts it.
    DOCTOR-12 DOCTOR-04"""
    populated(av, workdir)
    run = doctor(av)
    assert run.returncode == 69, run.stdout
    assert len(failures(run)) == 1 and "no avsmd is running" in failures(run)[0]
    assert f"avsmd --home {av.home}" in fix_after(run, "no avsmd")


def test_missing_home_exits_66_and_is_not_made(av):
    """A home that is not there: 66, with the fix; doctor does not create it. DOCTOR-11 EXIT-04 DOCTOR-02"""
    run = doctor(av)
    assert run.returncode == 66, run.stdout
    assert av.home in failures(run)[0] and "not there" in failures(run)[0]
    assert not os.path.lexists(av.home)


def test_home_that_is_a_file_exits_73(av):
    """A home that is a file: 73, and the file is left as it was. DOCTOR-10 EXIT-06 DOCTOR-02"""
    write(av.home, "not a directory\n")
    run = doctor(av)
    assert run.returncode == 73, run.stdout
    assert "not a directory" in failures(run)[0]
    with open(av.home) as fh:
        assert fh.read() == "not a directory\n"


def test_worst_code_wins_in_the_documented_order(av, workdir):
    """Several problems at once: the exit is the worst found, in the order 65, 78, 77, 73, 66, 69.
    A config that does not hold (78) beats a missing venture directory (66) and no daemon (69); a ledger that
    is not a database (65) beats them all; every problem is still listed. DOCTOR-06"""
    d = populated(av, workdir)
    shutil.rmtree(d)
    run = doctor(av)
    assert run.returncode == 66, run.stdout
    write(os.path.join(av.home, "config.yaml"), "ratchet: 3\nnightlly: \"02:00\"\n")
    run = doctor(av)
    assert run.returncode == 78, run.stdout
    assert len(failures(run)) == 3                      # config, venture directory, daemon
    tamper(av.home, 2, '"kind":"mandate"', '"kind":"mandatE"')
    run = doctor(av)
    assert run.returncode == 65, run.stdout


# ---- the config and the keys ----------------------------------------------------------

def test_config_with_an_unknown_key_exits_78_naming_file_line_and_column(av, workdir):
    """A config.yaml with an unknown key: 78, naming the file, line and column and the key, with a fix
    line; doctor reads the file itself, with no avsmd running. DOCTOR-08 DOCTOR-03 DOCTOR-04 EXIT-10"""
    populated(av, workdir)
    path = write(os.path.join(av.home, "config.yaml"), "ratchet: 3\nnightlly: \"02:00\"\n")
    run = doctor(av)
    assert run.returncode == 78, run.stdout
    (fail,) = [f for f in failures(run) if "config" in f]
    assert f"{path}:2:1" in fail and "nightlly" in fail
    assert path in fix_after(run, "nightlly")


def test_keys_readable_by_others_exits_78_with_chmod(av, workdir):
    """A keys file of mode 0644 does not hold: 78, printing `chmod 600 <home>/keys`. KEYS-02 open point 43
    DOCTOR-04 DOCTOR-08"""
    d = dial(workdir, "dial", threshold(), lower=LOWER)
    av.start()
    av.cli("add", d)
    write(os.path.join(av.home, "keys"), "anthropic=sk-test\n", 0o644)
    run = doctor(av)
    assert run.returncode == 78, run.stdout
    assert f"chmod 600 {av.home}/keys" in run.stdout
    assert len(failures(run)) == 1


def test_keys_that_is_a_directory_exits_78_saying_so(av, workdir):
    """A keys that is a directory does not hold: 78 and the fix; doctor looks at keys and never reads it.
    KEYS-01 KEYS-04 DOCTOR-04"""
    d = dial(workdir, "dial", threshold(), lower=LOWER)
    av.start()
    av.cli("add", d)
    os.mkdir(os.path.join(av.home, "keys"), 0o700)
    run = doctor(av)
    assert run.returncode == 78, run.stdout
    assert "not a regular file" in " ".join(failures(run))


# ---- the ledger ---------------------------------------------------------------------

def test_broken_chain_exits_65_naming_the_record_and_the_cut(av, workdir):
    """A ledger whose record #3 was changed behind the triggers' back (on a copy, put in place with avsmd
    stopped): 65, naming #3 and the fix `avsm doctor --cut 3`. DOCTOR-07 DOCTOR-04 LEDGER-16"""
    populated(av, workdir)
    recs = av.records()
    assert recs[2][2]["kind"] == "report"
    tamper(av.home, 3, '"status":"trusted"', '"status":"trustee"')
    run = doctor(av)
    assert run.returncode == 65, run.stdout
    (fail,) = [f for f in failures(run) if "#3" in f]
    assert re.search(r"\bavsm( --home \S+)? doctor --cut 3\b", fix_after(run, "#3")), run.stdout


def test_record_that_does_not_parse_exits_65(av, workdir):
    """A record whose JSON does not parse (open point 51's first case) is a ledger that does not read:
    doctor exits 65 and names the record and the cut; it does not crash. DOCTOR-07 LEDGER-16"""
    populated(av, workdir)
    tamper(av.home, 3, '{"', '{not json "')
    run = av.cli("doctor")
    assert run.returncode == 65, (run.returncode, run.stdout, run.stderr[-500:])
    assert "#3" in run.stdout and "doctor --cut 3" in run.stdout
    for args in (["tail"], ["tail", "--since", "1"], ["why", "3"]):     # the client says so too: 65, no traceback
        r = av.cli(*args)
        assert r.returncode == 65 and "Traceback" not in r.stderr and "doctor" in r.stderr, (args, r)


def test_ledger_that_is_not_a_database_exits_65(av, workdir):
    """A ledger.db that is not a SQLite database: 65, with the fix; doctor does not crash, nor do avsmd,
    avsmd -t, tail or why: each exits 65 naming it. DOCTOR-07 LEDGER-16"""
    populated(av, workdir)
    with open(ledger_file(av.home), "wb") as fh:
        fh.write(b"this is not a database\n" * 200)
    run = av.cli("doctor")
    assert "Traceback" not in run.stderr, run.stderr[-800:]
    assert run.returncode == 65, run.stdout
    assert "ledger.db" in " ".join(failures(run))
    for r in (av.daemon_cmd(), av.daemon_cmd("-t"), av.cli("tail"), av.cli("why", "1")):   # LEDGER-16: 65, named
        assert r.returncode == 65 and "Traceback" not in r.stderr and "ledger.db" in r.stderr, r


def test_since_with_the_right_anchor_passes_and_a_wrong_one_exits_65(av, workdir):
    """--since SEQ:16hex: with the anchor the ledger holds that part passes (0 with a daemon); with a
    wrong prefix, or a record the ledger does not have, 65. DOCTOR-13 open point 50"""
    d = dial(workdir, "dial", threshold(), lower=LOWER)
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "report")) >= 2, timeout=10, what="two reports")
    (h,) = [r[3] for r in rows(av.home) if r[0] == 3]
    run = doctor(av, "--since", f"3:{h[:16]}")
    assert run.returncode == 0, run.stdout
    assert any(line.startswith("ok") and f"3:{h[:16]}" in line for line in run.stdout.splitlines())
    wrong = h[:15] + ("0" if h[15] != "0" else "1")
    run = doctor(av, "--since", f"3:{wrong}")
    assert run.returncode == 65, run.stdout
    assert f"3:{wrong}" in failures(run)[0]
    run = doctor(av, "--since", f"999999:{h[:16]}")
    assert run.returncode == 65, run.stdout


@pytest.mark.parametrize("args", [["--since", "12"], ["--since", "12:0123"], ["--since", "x:0123456789abcdef"],
                                  ["--since", "1234:0123456789abcdefg"], ["--since"],
                                  ["--cut", "x"], ["--cut", "1.5"], ["--cut", "-3"], ["--cut", "0"], ["--cut"],
                                  ["--remote"], ["--remote", "box:2876"], ["--remote=box"]])
def test_bad_usage_exits_64(av, workdir, args):
    """doctor exits 64 for a --since that is not an anchor, a --cut that is not a record number, and
    --remote; it touches nothing. DOCTOR-16 EXIT-02"""
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"), "")
    before = snapshot(av.home)
    run = av.cli("doctor", *args)
    assert run.returncode == 64, (args, run.returncode, run.stdout, run.stderr)
    assert run.stderr.strip() and "Traceback" not in run.stderr
    assert snapshot(av.home) == before


# ---- the ventures -----------------------------------------------------------------------

def test_adopted_mandate_broken_on_disk_exits_78(av, workdir):
    """An adopted venture whose mandate.yaml was since broken on disk: doctor re-reads it and exits 78,
    naming the venture, file:line:col, and the fix. DOCTOR-08 DOCTOR-03 DOCTOR-04"""
    d = populated(av, workdir)
    path = os.path.join(d, "mandate.yaml")
    with open(path) as fh:
        text = fh.read()
    write(path, text.replace("cadence: 1s", "cadance: 1s"))
    run = doctor(av)
    assert run.returncode == 78, run.stdout
    (fail,) = [f for f in failures(run) if "dial" in f]
    assert "cadance" in fail and re.search(re.escape(path) + r":\d+:\d+", fail), fail
    assert path in fix_after(run, "cadance")


def test_unpaused_venture_whose_directory_is_gone_exits_66(av, workdir):
    """An unpaused venture whose directory has gone: 66, naming it, with the fix. DOCTOR-11 DOCTOR-04"""
    d = populated(av, workdir)
    shutil.rmtree(d)
    run = doctor(av)
    assert run.returncode == 66, run.stdout
    (fail,) = [f for f in failures(run) if "dial" in f]
    assert d in fail


def test_paused_venture_whose_directory_is_gone_is_noted_not_failed(av, workdir):
    """A paused venture whose directory has gone is noted, not failed: with avsmd running doctor exits 0.
    DOCTOR-11 DOCTOR-05 PAUSE-01 VENTURE-18"""
    d = dial(workdir, "dial", threshold(), lower=LOWER)
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: of(rs, "report"), timeout=10, what="a report")
    assert av.cli("pause", "dial").returncode == 0
    shutil.rmtree(d)
    run = doctor(av)
    assert run.returncode == 0, run.stdout
    assert not failures(run)
    assert any(line.startswith("note") and "dial" in line and d in line for line in run.stdout.splitlines()), run.stdout


# ---- the daemon, the lock and the socket -------------------------------------------------

def test_lock_file_that_is_a_directory_exits_73(av, workdir):
    """avsmd.lock that is not a regular file (a directory): doctor fails with 73 and says so.
    DOCTOR-19 open point 49"""
    populated(av, workdir)
    lock = os.path.join(av.home, "avsmd.lock")
    os.unlink(lock)
    os.mkdir(lock)
    run = doctor(av)
    assert run.returncode == 73, run.stdout
    assert any("avsmd.lock" in f and "not a regular file" in f for f in failures(run)), run.stdout


def test_running_avsmd_whose_socket_is_missing_exits_69_and_says_so(av, workdir):
    """avsmd holds the lock but its socket was deleted (it is stopped with SIGSTOP so it cannot make it
    again meanwhile): doctor exits 69 and says avsmd is running but its socket is missing, naming its pid;
    a second avsmd still does not start. DOCTOR-17 DOCTOR-12 LOCK-03 open point 49"""
    av.start()
    os.kill(av.proc.pid, signal.SIGSTOP)
    try:
        os.unlink(os.path.join(av.home, "sock"))
        run = doctor(av)
        second = av.daemon_cmd(timeout=20)
    finally:
        os.kill(av.proc.pid, signal.SIGCONT)
    assert run.returncode == 69, run.stdout
    (fail,) = failures(run)
    assert "running" in fail and "socket" in fail and "missing" in fail and str(av.proc.pid) in fail
    assert second.returncode == 75 and str(av.proc.pid) in second.stderr
    deadline = time.monotonic() + 5
    while av.cli("status").returncode != 0:
        assert time.monotonic() < deadline, "avsmd did not make its socket again"
        time.sleep(0.1)


def test_two_avsmd_on_one_home_fail_naming_both_pids(av, bindir, workdir):
    """A second avsmd that took the lock after the first's lock file was deleted (the first stopped with
    SIGSTOP meanwhile): doctor finds both, fails naming both pids; the first, let go on, exits 75 saying
    why. DOCTOR-18 open point 49 LOCK-06"""
    d = dial(workdir, "dial", threshold(), lower=LOWER)
    av.start()
    av.cli("add", d)
    os.kill(av.proc.pid, signal.SIGSTOP)
    second = None
    try:
        os.unlink(os.path.join(av.home, "avsmd.lock"))
        second = start_second(bindir, av.home)
        run = doctor(second)
    finally:
        os.kill(av.proc.pid, signal.SIGCONT)
        try:
            first_code = av.proc.wait(15)
        finally:
            if second is not None:
                code, _ = second.stop()
                assert code == 0, second.stderr()
    assert run.returncode == 69, run.stdout
    assert any(str(av.proc.pid) in f and str(second.proc.pid) in f for f in failures(run)), run.stdout
    assert first_code == 75 and "took the lock" in av.stderr()


def test_cut_while_avsmd_runs_exits_75_and_changes_nothing(av, workdir):
    """--cut while avsmd runs on the home: 75, saying to stop it; no backup made, nothing cut. DOCTOR-15 EXIT-08"""
    d = dial(workdir, "dial", threshold(), lower=LOWER)
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "report")) >= 2, timeout=10, what="two reports")
    run = av.cli("doctor", "--cut", "3")
    assert run.returncode == 75, (run.stdout, run.stderr)
    assert "stop" in run.stderr
    assert not [f for f in os.listdir(av.home) if f.startswith("ledger.db.before-cut")]
    assert av.records()[2][0] == 3


# ---- the cut -----------------------------------------------------------------------------

def test_cut_backs_up_cuts_and_the_next_start_records_it(av, workdir):
    """The way back from a record that does not read: avsmd refuses to start naming #K and the cut; doctor
    says the same; `doctor --cut K` with avsmd stopped copies the whole ledger to
    ledger.db.before-cut-K-<unix time>, removes #K and later in one go, keeps #1..#K-1 exactly, leaves the
    chain verifying and the triggers in place; the next avsmd start appends a measured `cut` record naming
    the backup, and doctor passes again. DOCTOR-14 LEDGER-16 open point 11 open point 51"""
    populated(av, workdir)
    before = rows(av.home)
    k = next(r[0] for r in before if r[0] > 3 and '"kind":"report"' in r[5])
    trig_before = triggers(ledger_file(av.home))
    tamper(av.home, k, '"status":"trusted"', '"status":"trustee"')
    tampered = open(ledger_file(av.home), "rb").read()
    refused = av.daemon_cmd(timeout=20)
    assert refused.returncode == 65 and f"#{k}" in refused.stderr and f"avsm doctor --cut {k}" in refused.stderr
    run = doctor(av)
    assert run.returncode == 65 and f"#{k}" in run.stdout
    t0 = int(time.time())
    cut = av.cli("doctor", "--cut", str(k))
    t1 = int(time.time())
    assert cut.returncode == 0, cut.stdout + cut.stderr
    backups = [f for f in os.listdir(av.home) if f.startswith(f"ledger.db.before-cut-{k}-")]
    assert len(backups) == 1
    stamp = backups[0].rsplit("-", 1)[1]
    assert stamp.isdigit() and t0 <= int(stamp) <= t1
    backup = os.path.join(av.home, backups[0])
    assert backup in cut.stdout
    with open(backup, "rb") as fh:
        assert fh.read() == tampered
    after = rows(av.home)
    assert after == before[:k - 1]
    db = avsm.open_ledger_ro(ledger_file(av.home))
    assert verify_chain(db) == (k - 1, None)
    db.close()
    assert triggers(ledger_file(av.home)) == trig_before
    db = sqlite3.connect(ledger_file(av.home), isolation_level=None)
    try:
        for sql in ("UPDATE records SET at = at + 1 WHERE seq = 1", "DELETE FROM records WHERE seq = 1",
                    "INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (1, 1, 'x', 'y', 1, '{}')"):
            with pytest.raises(sqlite3.DatabaseError):
                db.execute(sql)
    finally:
        db.close()
    assert doctor(av).returncode == 69
    av.start()
    recs = av.records()
    cuts = of(recs, "cut")
    assert len(cuts) == 1
    seq, record = cuts[0]
    assert seq > k - 1 and record["claim"] == "measured" and record["venture"] == "self"
    assert backup in record["summary"] or backup in str(record.get("backup"))
    assert str(k) in record["summary"]
    assert doctor(av).returncode == 0
    av.stop()
    av.start()
    assert len(of(av.records(), "cut")) == 1      # written once, not at every start


# ---- doctor changes nothing ---------------------------------------------------------------

def test_doctor_changes_nothing(av, workdir):
    """doctor without --cut changes nothing: every file in the home and the venture directory keeps its bytes,
    mode and mtime, and no file is added or removed, whatever it finds. DOCTOR-02"""
    d = populated(av, workdir)
    with open(ledger_file(av.home), "rb") as fh:
        ledger_bytes = fh.read()
    ledger_mtime = os.stat(ledger_file(av.home)).st_mtime_ns
    (h,) = [r[3] for r in rows(av.home) if r[0] == 2]
    time.sleep(0.05)
    before = snapshot(av.home, d)
    for args in ([], ["--since", f"2:{h[:16]}"], ["--since", "2:0000000000000000"]):
        doctor(av, *args)
    assert snapshot(av.home, d) == before
    with open(ledger_file(av.home), "rb") as fh:
        assert fh.read() == ledger_bytes
    assert os.stat(ledger_file(av.home)).st_mtime_ns == ledger_mtime
    write(os.path.join(d, "mandate.yaml"), "purpose: [broken\n")
    tamper(av.home, 3, '"status":"trusted"', '"status":"trustee"')
    before = snapshot(av.home, d)
    assert doctor(av).returncode == 65
    assert snapshot(av.home, d) == before


# ---- the home's length, and a permission missing ------------------------------------------

def test_home_too_long_for_its_socket_exits_78(bindir, workdir):
    """An existing home whose socket path would pass 107 bytes: doctor exits 78 and says
    `use a shorter --home or AVSMD_HOME`. HOME-08 HOME-05 HOME-06"""
    home = os.path.join(workdir, "x" * (110 - len(workdir)))
    os.makedirs(home, mode=0o700)
    run = Avsm(bindir, home).cli("doctor")
    assert run.returncode == 78, run.stdout
    assert "use a shorter --home or AVSMD_HOME" in run.stdout + run.stderr


def test_home_too_long_is_reported_before_avsmd_makes_it(bindir, workdir):
    """A home too long for its socket that does not exist yet (the usual case before a first start): doctor
    says `use a shorter --home or AVSMD_HOME` before then, and exits 78 (worse than 66). HOME-08 DOCTOR-06
    DOCTOR-04"""
    home = os.path.join(workdir, "x" * (110 - len(workdir)))
    run = Avsm(bindir, home).cli("doctor")
    assert "use a shorter --home or AVSMD_HOME" in run.stdout + run.stderr, run.stdout
    assert run.returncode == 78


def test_ledger_not_writable_exits_77(av, workdir):
    """A ledger the user may not write (made immutable, which holds even for root): 77, with the fix.
    DOCTOR-09 EXIT-09"""
    populated(av, workdir)
    path = ledger_file(av.home)
    if subprocess.run(["chattr", "+i", path], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        run = doctor(av)
    finally:
        subprocess.run(["chattr", "-i", path], check=True)
    assert run.returncode == 77, run.stdout
    assert any("ledger.db" in f for f in failures(run))


def test_avsmd_started_from_its_cached_bytecode_is_known_by_its_command_line():
    """DOCTOR-18 LOCK-06: doctor finds every avsmd on a home by its command line, the one avsm starts itself
    with (python -S -P -c LOAD_AVSM PATH avsmd ...) and the ones before -S and -P came in, and never takes a warden,
    an adapter or the client for one."""
    assert avsm.is_avsmd_argv(avsm.cached_command("avsmd", ["--home", "/tmp/h"]))
    assert avsm.is_avsmd_argv(["python3", "-c", avsm.LOAD_AVSM, avsm.AVSM_PATH, "avsmd", "--home", "/tmp/h"])
    assert avsm.is_avsmd_argv(["python3", "-P", "-c", avsm.LOAD_AVSM, avsm.AVSM_PATH, "avsmd", "--home", "/tmp/h"])
    for program in ("warden", "adapter", "status"):
        assert not avsm.is_avsmd_argv(avsm.cached_command(program, ["--home", "/tmp/h"])), program
    assert avsm.is_avsmd_argv(["python3", "avsm.py", "avsmd"]) and avsm.is_avsmd_argv(["/usr/local/bin/avsmd"])
    assert not avsm.is_avsmd_argv(["python3", "avsm.py", "status"])
