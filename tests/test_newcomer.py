"""A newcomer's first hour (issue 13): the entry points on an old Python, checking a venture before adopting it,
a mandate edited on disk, what `why` shows, and the small things of the CLI. Black-box through the real client
and daemon."""

import glob
import re
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, Avsm, make_venture, write  # noqa: F401

AVSM_PY = os.path.join(ROOT, "avsm.py")


def version():
    import avsm
    return avsm.VERSION


def old_pythons():
    """Every interpreter older than 3.11 this machine has (pyenv's, or on the PATH), newest first."""
    found = {}
    for path in sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3")) + \
            [shutil.which(f"python3.{minor}") for minor in range(6, 11)]:
        if not path or not os.access(path, os.X_OK):
            continue
        version = subprocess.run([path, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                                 capture_output=True, text=True).stdout.strip()
        if version and tuple(map(int, version.split("."))) < (3, 11) and tuple(map(int, version.split("."))) >= (3, 6):
            found.setdefault(version, path)
    return sorted(found.items(), key=lambda kv: tuple(map(int, kv[0].split("."))), reverse=True)


OLD = old_pythons()
OLD = OLD[:1] + OLD[-1:] if len(OLD) > 1 else OLD      # the newest and the oldest: the check and the parse hold for both


@pytest.mark.skipif(not OLD, reason="no Python older than 3.11 on this machine")
@pytest.mark.parametrize("version,python", OLD, ids=[v for v, _ in OLD])
def test_old_python_gets_one_line_and_78_at_every_entry_point(version, python, bindir, home):
    """Issue 13 item 1: on an interpreter older than 3.11 every entry point (`python avsm.py`, the client and the
    daemon under their symlinks, `python avsm.py avsmd`, the console scripts' `avsm.main()`) writes one line naming
    the version and the interpreter, and exits 78 (EX_CONFIG), never a traceback or 'a bug in avsm'; the file still
    parses there, so the check can run."""
    ok = subprocess.run([python, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())", AVSM_PY],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    console = "import sys; sys.path.insert(0, sys.argv[1]); import avsm; sys.exit(avsm.main())"
    for argv in ([python, AVSM_PY, "--home", home, "status"],
                 [python, os.path.join(bindir, "avsm"), "--home", home, "status"],
                 [python, os.path.join(bindir, "avsmd"), "--home", home],
                 [python, AVSM_PY, "avsmd", "--home", home, "-t"],
                 [python, "-c", console, ROOT, "--help"]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert r.returncode == 78, (argv, r.returncode, r.stderr)
        assert r.stdout == ""
        exe = subprocess.run([python, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True).stdout.strip()
        assert r.stderr == f"avsm needs Python 3.11 or later; this is {version} at {exe}\n", argv
    assert not os.path.exists(home)          # nothing was started, nothing made


@pytest.fixture
def av(bindir, home):
    a = Avsm(bindir, home)
    yield a
    a.stop()


DIAL = """purpose: Keep {name} low.
metric: dial
controller: {{kind: threshold, above: 10, action: lower}}
cadence: 1s
permitted:
  - name: lower
    run: ./lower
    cap: {cap}
    reversible: true
forbidden: [rm]
"""


def dial(root, name, cap="3/hour"):
    d = make_venture(root, name, DIAL.format(name=name, cap=cap),
                     {"report": "#!/bin/sh\necho 1\n", "lower": "#!/bin/sh\ntrue\n"})
    return d


def test_t_of_a_directory_checks_it_as_add_would_with_no_daemon(av, workdir):
    """Issue 13 item 3 (CLI-03, VENTURE-08): `avsmd -t DIR...` checks venture directories with no daemon
    running and no home, through the same function as `avsm add`: the same messages and exit codes (66 for a
    directory that is not there, 65 for a file, a mandate that does not hold, a name avsm cannot take), the first
    code found winning; a directory that holds is described as adopting it would allow, with the add that adopts it."""
    good = dial(workdir, "good")
    broken = dial(workdir, "broken")
    write(os.path.join(broken, "mandate.yaml"), open(os.path.join(broken, "mandate.yaml")).read().replace("cadence", "cadance"))
    a_file = write(os.path.join(workdir, "afile"), "x\n")
    missing = os.path.join(workdir, "missing")

    r = av.daemon_cmd("-t", good)
    assert r.returncode == 0, r.stderr
    assert f"venture good ({good}): holds" in r.stdout and f"add {good}" in r.stdout, r.stdout
    assert "may run lower: cap 3/hour, runs unasked" in r.stdout
    assert not os.path.exists(av.home)                    # checked without a daemon, nothing made

    tested = {}
    for d in (broken, a_file, missing):
        t = av.daemon_cmd("-t", d)
        assert t.stderr.startswith("avsmd: ") and t.stdout == "", t
        tested[d] = (t.returncode, t.stderr[len("avsmd: "):])
    assert tested[broken][0] == 65 and f"{broken}/mandate.yaml:4:1" in tested[broken][1] and "cadance" in tested[broken][1]
    assert tested[a_file][0] == 65 and tested[missing][0] == 66

    # several at once: each is checked, the first code found wins
    r = av.daemon_cmd("-t", good, missing, broken)
    assert r.returncode == 66 and "venture good" in r.stdout and "cadance" in r.stderr and "missing" in r.stderr

    # the same as avsm add says to a running avsmd
    av.start()
    for d, (code, message) in tested.items():
        add = av.cli("add", d)
        assert (add.returncode, add.stderr[len("avsm: "):]) == (code, message), (d, add)
    assert av.cli("add", good).returncode == 0
    r = av.daemon_cmd("-t", good)
    assert r.returncode == 0 and "the same as mandate #" in r.stdout, r.stdout
    # a second venture of that name from elsewhere: refused as add refuses it
    other = dial(os.path.join(workdir, "elsewhere"), "good")
    t, add = av.daemon_cmd("-t", other), av.cli("add", other)
    assert t.returncode == add.returncode == 65
    assert t.stderr[len("avsmd: "):] == add.stderr[len("avsm: "):] and "already adopted" in t.stderr
    # a directory is taken only with -t
    r = av.daemon_cmd(good)
    assert r.returncode == 64 and "-t" in r.stderr


def test_t_and_doctor_say_an_edited_mandate_differs_from_the_one_in_force(av, workdir):
    """Issue 13 item 4 (VENTURE-14, DOCTOR-01): after mandate.yaml is edited on disk without avsm add, `avsmd -t`
    and `avsm doctor` say it differs from mandate #N in force, show what differs (a short diff), and name the add
    that applies it; the new cap is never shown under the old mandate's number. After the add, both agree again."""
    d = dial(workdir, "dial")
    av.start()
    assert av.cli("add", d).returncode == 0
    seq = max(s for s, _, r in av.records() if r["kind"] == "mandate")
    path = os.path.join(d, "mandate.yaml")
    write(path, open(path).read().replace("cap: 3/hour", "cap: 9/hour"))

    for r in (av.daemon_cmd("-t"), av.daemon_cmd("-t", d)):
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        head = [line for line in lines if line.startswith("venture dial")]
        assert len(head) == 1 and f"differs from mandate #{seq} in force" in head[0] and f"add {d} applies it" in head[0], r.stdout
        assert any(line.strip() == "-    cap: 3/hour" for line in lines) and any(line.strip() == "+    cap: 9/hour" for line in lines)
        assert not any(f"mandate #{seq}" in line and "9/hour" in line for line in lines)
        assert "as on disk, once added, it allows:" in r.stdout

    doc = av.cli("doctor")
    assert doc.returncode == 0, doc.stdout
    note = [line for line in doc.stdout.splitlines() if "venture dial" in line]
    assert len(note) == 1 and note[0].startswith("note") and f"differs from mandate #{seq} in force" in note[0], doc.stdout
    assert f"add {d} applies it" in note[0] and "+    cap: 9/hour" in doc.stdout and "holds, the same" not in doc.stdout

    assert av.cli("add", d).returncode == 0
    new = max(s for s, _, r in av.records() if r["kind"] == "mandate")
    r = av.daemon_cmd("-t")
    assert f"venture dial (mandate #{new}, {d}):" in r.stdout and "differs" not in r.stdout and "9/hour" in r.stdout
    doc = av.cli("doctor")
    assert f"holds, the same as mandate #{new} in force" in doc.stdout and "differs" not in doc.stdout


ASKING = """purpose: Keep {name} at or below ten.
metric: dial
controller: {{kind: threshold, above: 10, action: wipe}}
cadence: 1s
permitted:
  - name: wipe
    run: ./wipe
    cap: 5/hour
    reversible: false
"""


def test_why_shows_what_the_lever_printed_and_an_asks_answer(av, workdir):
    """Issue 13 item 6 (CLI-05, PROOF-03): `avsm why` of an action and of its outcome shows what the lever printed
    (escaped, as all output is); `why` of an ask shows its answer and what ran on it, down to the output."""
    d = make_venture(workdir, "dial", ASKING.format(name="dial"),
                     {"report": "#!/bin/sh\necho 11\n",
                      "wipe": "#!/bin/sh\necho 'wiped 3 files'\nprintf 'then \\033[31mred\\n' >&2\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: [s for s, _, r in rs if r["kind"] == "ask"] and rs, what="an ask")
    ask = [s for s, _, r in recs if r["kind"] == "ask"][0]
    why = av.cli("why", str(ask))
    assert why.returncode == 0 and re.search(rf"approve {ask} or \S*avsm\S* (--home \S+ )?deny {ask}$",
                                             why.stdout, re.M), why.stdout
    assert av.cli("approve", str(ask)).returncode == 0
    recs = av.wait_for(lambda rs: [(s, r) for s, _, r in rs if r["kind"] == "outcome"] and rs, what="the outcome")
    action = [s for s, _, r in recs if r["kind"] == "action"][0]
    outcome = [s for s, _, r in recs if r["kind"] == "outcome"][0]
    for seq in (action, outcome, ask):
        why = av.cli("why", str(seq))
        assert why.returncode == 0, why.stderr
        assert "wiped 3 files" in why.stdout and "printed" in why.stdout, (seq, why.stdout)
        assert "then \\x1b[31mred" in why.stdout and "\x1b" not in why.stdout
    why = av.cli("why", str(ask))
    assert "answered by #" in why.stdout and "approval" in why.stdout and f"ran as #{action}" in why.stdout, why.stdout
    assert f"ended #{outcome}" in why.stdout
    assert "re-checks: yes" in av.cli("why", str(action)).stdout


def test_implausible_ask_says_what_answers_do_and_status_names_the_trusted_report(av, workdir):
    """Issue 13 item 7 (PLAUS-03, CLI-02): the ask an implausible reading raises says what approve and deny do;
    `status` says the controller's position comes from the last trusted report, names it and the implausible one,
    and does not say `implausible` twice about one report."""
    d = make_venture(workdir, "dial", DIAL.format(name="dial", cap="3/hour").replace("cadence: 1s", "cadence: 1s\nrange: [0, 100]"),
                     {"report": "#!/bin/sh\ncat value\n", "lower": "#!/bin/sh\ntrue\n"})
    write(os.path.join(d, "value"), "5\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: [s for s, _, r in rs if r["kind"] == "report"], what="a trusted report")
    write(os.path.join(d, "value"), "500\n")
    recs = av.wait_for(lambda rs: [s for s, _, r in rs if r["kind"] == "ask"] and rs, what="the implausible ask")
    asks = av.cli("asks").stdout
    assert "approve (it is sound) and deny (it is not) each only record your answer" in asks, asks
    assert "neither runs a lever nor lifts the hold" in asks and "first plausible reading" in asks
    status = av.cli("status", "-v").stdout
    control = [line for line in status.splitlines() if line.strip().startswith("controller:")]
    last = [line for line in status.splitlines() if line.strip().startswith("last report")]
    bad = int(last[0].split("#")[1].split()[0])
    trusted = max(s for s, _, r in av.records() if r["kind"] == "report" and r["value"] == 5)
    assert control and f"from the last trusted report #{trusted} (5); #{bad} is implausible and not acted on" in control[0], status
    assert last[0].count("implausible") == 1, status


# ---- item 8: the small things ------------------------------------------------------------

def test_usage_of_the_client_names_the_fix(av):
    """Issue 13 item 8 (CLI-01, CLI-11, EXIT-02): `avsm status --bogus` is a usage error that shows status's usage and
    suggests no `--`; `avsm --bogus status` says `--bogus` is an unknown option; `avsm CMD --help` prints that
    command's help; `avsm --help` mentions avsmd."""
    r = av.cli("status", "--bogus")
    assert r.returncode == 64 and "usage: avsm status" in r.stderr and " -- " not in r.stderr, r.stderr
    r = av.cli("--bogus", "status")
    assert r.returncode == 64 and "'--bogus' is not an avsm option" in r.stderr and "not an avsm command" not in r.stderr
    for verb in ("tail", "approve", "doctor", "status", "try"):
        r = av.cli(verb, "--help")
        assert r.returncode == 0 and r.stdout.startswith(f"usage: avsm [--home DIR] {verb}"), (verb, r.stdout)
        assert "commands:" not in r.stdout and len(r.stdout.splitlines()) <= 6
    r = av.cli("pause", "-x")
    assert r.returncode == 64 and "avsm pause -- -x" in r.stderr      # a name may begin with -: there the -- helps
    r = av.cli("--help")
    assert "avsmd" in r.stdout and "avsm CMD --help" in r.stdout
    assert not os.path.exists(av.home)


def test_tail_minus_n_and_the_doctor_anchor(av, workdir):
    """Issue 13 item 8 (CLI-04, DOCTOR-01, LEDGER-05): `avsm tail -5` is the last five records, as Unix tail;
    doctor prints the ledger's head as SEQ:HASH16, says to keep it elsewhere, and `doctor --since` takes what it
    printed."""
    d = dial(workdir, "dial")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: len(rs) >= 7, what="seven records")
    assert av.stop()[0] == 0
    five, minus, n3 = av.cli("tail", "5"), av.cli("tail", "-5"), av.cli("tail", "-n", "3")
    assert minus.returncode == 0 and minus.stdout == five.stdout and len(minus.stdout.splitlines()) == 5, minus.stderr
    assert n3.stdout.splitlines() == five.stdout.splitlines()[2:]
    av.start()
    doc = av.cli("doctor")
    assert doc.returncode == 0, doc.stdout
    seq, h = av.records()[-1][0], None
    head = [line for line in doc.stdout.splitlines() if "head" in line and "keep it somewhere else" in line]
    assert len(head) == 1, doc.stdout
    anchor = head[0].split("head now is ")[1].split(";")[0]
    import sqlite3
    db = sqlite3.connect(os.path.join(av.home, "ledger.db"))
    seq_h = db.execute("SELECT seq, hash FROM records WHERE seq = ?", (int(anchor.split(":")[0]),)).fetchone()
    db.close()
    assert anchor == f"{seq_h[0]}:{seq_h[1][:16]}" and seq_h[0] <= seq
    again = av.cli("doctor", "--since", anchor)
    assert again.returncode == 0 and f"the ledger still holds {anchor}" in again.stdout, again.stdout
    full = av.cli("doctor", "--since", f"{seq_h[0]}:{seq_h[1]}")          # the whole hash is an anchor too
    assert full.returncode == 0, full.stdout + full.stderr


def test_doctor_ledger_growth_uses_the_ledgers_own_span(bindir, home):
    """Issue 13 item 8 (DOCTOR-01): the ledger's growth a day is its size over its own time span (here two days),
    not over at least a day."""
    import hashlib
    import json
    import sqlite3
    os.makedirs(home, mode=0o700)
    db = sqlite3.connect(os.path.join(home, "ledger.db"), isolation_level=None)
    db.execute("CREATE TABLE records(seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, prev TEXT NOT NULL, "
               "hash TEXT NOT NULL, weight INTEGER NOT NULL DEFAULT 1, record TEXT NOT NULL)")
    prev, at = "0" * 64, 1_790_000_000
    for seq in range(1, 50):
        text = json.dumps({"kind": "report", "claim": "measured", "venture": "dial", "value": seq, "plausible": True,
                           "status": "trusted", "note": "", "summary": f"dial = {seq}"}, sort_keys=True, separators=(",", ":"))
        when = at + (seq - 1) * 3600
        h = hashlib.sha256(f"{prev}\n{seq}\n{when}\n{text}".encode()).hexdigest()
        db.execute("INSERT INTO records VALUES (?, ?, ?, ?, 1, ?)", (seq, when, prev, h, text))
        prev = h
    db.close()
    size = os.path.getsize(os.path.join(home, "ledger.db"))
    doc = Avsm(bindir, home).cli("doctor")
    line = [ln for ln in doc.stdout.splitlines() if "records chained" in ln]
    assert line and f"about {size / 2 / 1e6:.2f} MB a day over its 2 days" in line[0], doc.stdout


def test_status_after_pause_shows_no_pid_of_the_ended_program(av, workdir):
    """Issue 13 item 8 (CLI-02, RUN-03): right after `avsm pause`, `status` does not show the kept program's pid
    as if it ran: it says it is being stopped by the pause, then not running."""
    d = make_venture(workdir, "kept", DIAL.format(name="kept", cap="3/hour").replace("cadence: 1s", "cadence: 1s\nrun: sleep 1000"),
                     {"report": "#!/bin/sh\necho 1\n", "lower": "#!/bin/sh\ntrue\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "start" and r["venture"] == "kept"], what="run started")
    assert re.search(r"^  run: pid \d+, restarts 0$", av.cli("status", "-v").stdout, re.M)
    assert av.cli("pause", "kept").returncode == 0
    status = av.cli("status", "-v").stdout
    run = [line for line in status.splitlines() if line.startswith("  run:")]
    assert run and (run[0].startswith("  run: not running (paused)") or "is being stopped (by the pause)" in run[0]), status
    av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "exit" and r["venture"] == "kept"], what="run ended")
    assert "  run: not running (paused), restarts 0" in av.cli("status", "-v").stdout


def test_forecast_says_when_it_assumes_a_lever_does_nothing():
    """Issue 13 item 8 (FORECAST-10, open point 39): a forecast over a controller whose lever has run fewer than three
    times and has no `expects` says it assumes the lever does nothing, rather than showing a bare interval."""
    import avsm
    facts = {"cadence": 10, "range": [0, 1000], "sides": [["above", 10, "reset"]], "free_steps": [1.0, 1.0, 1.0],
             "levers": {"reset": {"steps": [-11.0], "cap": [60, 3600], "expects": None}}, "history": [1, 2, 3, 4],
             "days": 0.01, "seeds": 8}
    line = avsm.describe_forecast("count", avsm.forecast(facts), 0.01, 8)
    assert "assumes reset does nothing (fewer than 3 runs, and no expects: in the mandate)" in line, line
    facts["levers"]["reset"]["expects"] = ["down", 11.0]
    assert "assumes" not in avsm.describe_forecast("count", avsm.forecast(facts), 0.01, 8)


def test_avsm_py_is_committed_executable_so_a_symlink_runs(workdir):
    """Issue 13 item 10 (open point 1: the multi-call binary): avsm.py is committed as mode 100755 and is
    executable here, so `ln -s avsm.py avsmd; ./avsmd` runs with no `chmod +x` and no `python3` before it."""
    listed = subprocess.run(["git", "-C", ROOT, "ls-files", "-s", "avsm.py"], capture_output=True, text=True)
    if listed.returncode != 0 or not listed.stdout:
        pytest.skip("not a git checkout")
    assert listed.stdout.split()[0] == "100755", listed.stdout
    assert os.access(AVSM_PY, os.X_OK)
    link = os.path.join(workdir, "avsmd")
    os.symlink(AVSM_PY, link)
    r = subprocess.run([link, "--version"], capture_output=True, text=True, timeout=30)
    if r.returncode == 78 and "needs Python 3.11" in r.stderr:
        pytest.skip("the python3 on the PATH is older than 3.11: " + r.stderr.strip())
    assert r.returncode == 0 and r.stdout == f"avsmd {version()}\n", r


def test_fix_lines_name_the_command_the_way_the_user_started_it(bindir, home):
    """Issue 13 item 2 (CLI-11, DOCTOR-04): a fix line names avsmd and avsm the way this user runs them:
    `python3 avsm.py avsmd` for someone who ran `python3 avsm.py`, the symlink beside the one they ran, and
    `--home` only when the home is not the one found by itself (an exported AVSMD_HOME needs none)."""
    env = dict(os.environ)
    env.pop("AVSMD_HOME", None)
    python = "python3" if shutil.which("python3") and os.path.realpath(shutil.which("python3")) == os.path.realpath(sys.executable) \
        else sys.executable
    r = subprocess.run([sys.executable, "avsm.py", "--home", home, "status"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 69 and f"start one with {python} avsm.py avsmd --home {home}" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "avsm.py", "status"], cwd=ROOT, capture_output=True, text=True,
                       env=dict(env, AVSMD_HOME=home))
    assert r.returncode == 69 and r.stderr.rstrip().endswith(f"start one with {python} avsm.py avsmd"), r.stderr
    r = subprocess.run([sys.executable, "avsm.py", "doctor"], cwd=ROOT, capture_output=True, text=True,
                       env=dict(env, AVSMD_HOME=home))
    assert f"fix: {python} avsm.py avsmd   (avsmd makes it)" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, os.path.join(bindir, "avsm"), "--home", home, "status"], capture_output=True,
                       text=True, env=env)
    if not shutil.which("avsmd"):
        assert f"start one with {os.path.join(bindir, 'avsmd')} --home {home}" in r.stderr, r.stderr


def install_lines(path, prefix, marker):
    """The install commands a contrib file's comment gives: the lines after `prefix` holding `marker`."""
    return [line[len(prefix):].strip() for line in open(path, encoding="utf-8").read().splitlines()
            if line.startswith(prefix) and marker in line]


def test_contrib_install_steps_write_the_absolute_path_and_the_unit_verifies(bindir, workdir):
    """Issue 13 item 9 (EXAMPLE-07, EXAMPLE-08): the service managers do not see a venv, pipx or ~/.local/bin, so
    the install steps in contrib/ write avsmd's absolute path (`command -v avsmd`, or the ~/.local/bin/avsmd that
    avsm link writes for a copied avsm.py, issue 25 item 4) into the unit and the plist; the installed unit still passes systemd-analyze verify, and does
    not restart on 78 (a config or Python that does not hold) or 64."""
    unit = os.path.join(ROOT, "contrib", "avsmd.service")
    steps = install_lines(unit, "#   ", "sed ")
    assert len(steps) == 2 and "command -v avsmd" in steps[0] and "$HOME/.local/bin/avsmd" in steps[1], steps
    fake_home = os.path.join(workdir, "u")
    os.makedirs(os.path.join(fake_home, ".config", "systemd", "user"))
    env = dict(os.environ, HOME=fake_home, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("XDG_CACHE_HOME", None)
    installed = os.path.join(fake_home, ".config", "systemd", "user", "avsmd.service")
    # the copied-file path: avsm link writes ~/.local/bin/avsmd first, as the unit's comment says
    assert "`python3 avsm.py link ~/.local/bin`" in open(unit).read()
    linked = subprocess.run([sys.executable, "avsm.py", "link", "~/.local/bin"], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert linked.returncode == 0, linked.stderr
    for step, want in ((steps[0], os.path.join(bindir, "avsmd")), (steps[1], f"{fake_home}/.local/bin/avsmd")):
        r = subprocess.run(["sh", "-c", step], cwd=ROOT, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        text = open(installed).read()
        exec_start = [line for line in text.splitlines() if line.startswith("ExecStart=")]
        assert len(exec_start) == 1 and exec_start[0].startswith("ExecStart=/") and exec_start[0].endswith(want), exec_start
        assert "RestartPreventExitStatus=64 78" in text
        if shutil.which("systemd-analyze"):
            v = subprocess.run(["systemd-analyze", "verify", installed], capture_output=True, text=True, timeout=60)
            assert v.returncode == 0, v.stdout + v.stderr
    plist = os.path.join(ROOT, "contrib", "io.aesv.avsmd.plist")
    steps = install_lines(plist, "    ", "plutil -replace ProgramArguments")
    assert len(steps) == 2 and "command -v avsmd" in steps[0] and "$HOME/.local/bin/avsmd" in steps[1], steps
    import plistlib
    with open(plist, "rb") as fh:
        assert plistlib.load(fh)["Label"] == "io.aesv.avsmd"


# ---- item 5: examples that show what avsm is for -----------------------------------------------

EXAMPLES = os.path.join(ROOT, "examples")


@pytest.fixture
def tmpdir_env(workdir):
    """The examples keep their state under $TMPDIR: a fresh one per test, so each starts from the beginning."""
    d = os.path.join(workdir, "tmp")
    os.makedirs(d)
    return {"TMPDIR": d}


def records_of(av, kind, venture):
    return [(s, r) for s, _, r in av.records() if r["kind"] == kind and r["venture"] == venture]


def test_purge_example_asks_before_its_irreversible_lever(bindir, home, tmpdir_env):
    """Issue 13 item 5 (EXAMPLE-01, GATE-04, CLI-05): examples/purge has an irreversible lever: past the bound it
    asks; once approved the lever runs through the gate, and `why` of the ask shows the answer, the run and what
    the lever printed."""
    av = Avsm(bindir, home, env=tmpdir_env)
    try:
        av.start()
        assert av.cli("add", os.path.join(EXAMPLES, "purge")).returncode == 0
        av.wait_for(lambda rs: records_of(av, "ask", "purge"), what="the ask")
        assert not records_of(av, "action", "purge")
        ask = records_of(av, "ask", "purge")[0][0]
        assert f"#{ask}  purge  purge  " in av.cli("asks").stdout
        assert av.cli("approve", str(ask)).returncode == 0
        av.wait_for(lambda rs: records_of(av, "outcome", "purge"), what="the purge's outcome")
        why = av.cli("why", str(ask)).stdout
        assert "approval" in why and "ran as #" in why and "deleted 1,204 files older than 30 days" in why, why
    finally:
        av.stop()


def test_guarded_example_pauses_on_its_guard(bindir, home, tmpdir_env):
    """Issue 13 item 5 and issue 22 item 6 (EXAMPLE-01, GUARD-01): examples/guarded does what the README says, in
    its order: the queue grows and drain empties it, then errors past 6 pause the venture, and status says so;
    its state is per home, so a second home starts it from the beginning; ./clear, given the home, sets the
    errors back."""
    d = os.path.join(EXAMPLES, "guarded")
    for h in (home, home + "2"):
        av = Avsm(bindir, h, env=tmpdir_env)
        try:
            av.start()
            assert av.cli("add", d).returncode == 0
            av.wait_for(lambda rs: records_of(av, "pause", "guarded"), timeout=40, what="the guard's pause")
            status = av.cli("status").stdout
            assert "guarded: paused" in status and "guard errors: #" in status and "past its bound" in status, status
            (drain, _), = records_of(av, "action", "guarded")
            (pause, record), = records_of(av, "pause", "guarded")
            assert drain < pause and record["guard"] == "errors", (drain, pause)
            values = [r["value"] for _, r in records_of(av, "report", "guarded")]
            assert values[:8] == [5, 10, 15, 20, 25, 5, 10, 15], values
        finally:
            av.stop()
    r = subprocess.run(["./clear"], cwd=d, env=dict(os.environ, AVSM_HOME=home, **tmpdir_env), capture_output=True)
    assert r.returncode == 0
    state = [f for f in os.listdir(tmpdir_env["TMPDIR"]) if f.endswith(".errors")]
    assert len(state) == 2, state                 # one per home
    assert sorted(open(os.path.join(tmpdir_env["TMPDIR"], f)).read().strip() for f in state)[0] == "-1"


def test_thermostat_example_a_model_on_a_deterministic_command_backend(bindir, home, tmpdir_env):
    """Issue 13 item 5 (EXAMPLE-01, MODEL-01, KEYS-01): examples/thermostat has `controller: {kind: model}` on
    examples/backends/steady, a deterministic command backend with no key and no network: `avsm decide` gets a
    proposal, the gate runs it with the proposal as trigger, and the outcome says what the lever did."""
    os.makedirs(home, mode=0o700)
    text = open(os.path.join(EXAMPLES, "thermostat", "config.yaml")).read().replace("/path/to/avsm", ROOT)
    write(os.path.join(home, "config.yaml"), text)
    av = Avsm(bindir, home, env=tmpdir_env)
    try:
        av.start()
        assert av.cli("add", os.path.join(EXAMPLES, "thermostat")).returncode == 0
        av.wait_for(lambda rs: records_of(av, "report", "thermostat"), what="a report")
        r = av.cli("decide", "thermostat", timeout=60)
        assert r.returncode == 0 and "proposal" in r.stdout and "cool" in r.stdout, r.stdout + r.stderr
        av.wait_for(lambda rs: records_of(av, "outcome", "thermostat"), what="cool's outcome")
        action = records_of(av, "action", "thermostat")[0]
        assert action[1]["lever"] == "cool" and action[1]["proof"]["trigger"] == records_of(av, "proposal", "thermostat")[0][0]
        assert "cooled from 25 to 22" in av.cli("why", str(action[0])).stdout
    finally:
        av.stop()


def test_examples_keep_their_state_out_of_the_tree_and_the_readme_names_each():
    """Issue 13 item 5 (EXAMPLE-02): examples/backup's stamp is ignored by git; the README mentions every example;
    the counter's purpose says what `above: 10` does."""
    ignored = subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", "examples/backup/stamp"])
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.returncode == 0
    readme = open(os.path.join(ROOT, "README.md")).read()
    for name in os.listdir(EXAMPLES):
        assert f"examples/{name}" in readme, name
    assert "passes ten" in open(os.path.join(EXAMPLES, "counter", "mandate.yaml")).read()


def test_try_says_when_the_venture_first_acts(workdir):
    """Issue 13 item 5 (CLI-10): `avsm try` says what the venture acts on and what the first report said."""
    import signal
    env = dict(os.environ, TMPDIR=os.path.join(workdir))
    env.pop("AVSMD_HOME", None)
    home = os.path.join(workdir, "h")
    p = subprocess.Popen([sys.executable, AVSM_PY, "--home", home, "try", os.path.join(EXAMPLES, "counter")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        lines = []
        for line in p.stdout:
            lines.append(line)
            if line.startswith("# following"):
                break
        os.killpg(p.pid, signal.SIGINT)
        p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    said = [line for line in lines if line.startswith("# counter acts when")]
    assert said and "count > 10 (then reset runs); the first report says 1, and a report comes every 10s" in said[0], lines


def test_the_daemons_fix_lines_name_the_client_the_way_the_user_runs_it(av, workdir):
    """Issue 13 item 2 (CLI-11): a fix line in avsmd's answer (`avsm resume VENTURE`) reaches a user of
    `python3 avsm.py --home H` as `python3 avsm.py --home H resume VENTURE`."""
    d = dial(workdir, "dial")
    av.start()
    assert av.cli("add", d).returncode == 0
    env = dict(os.environ)
    env.pop("AVSMD_HOME", None)
    r = subprocess.run([sys.executable, "avsm.py", "--home", av.home, "pause", "dial"], cwd=ROOT, capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0 and f"avsm.py --home {av.home} resume dial" in r.stdout, r.stdout
    assert " avsm resume" not in r.stdout
