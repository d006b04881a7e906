"""A venture's programs are its owner's (issue 32 item 6): as sshd's StrictModes and cron do, avsm refuses to
adopt or start a venture whose directory, mandate or any program it runs (report, run, a lever, a check, a
reading, a world) another user than avsmd's own or root could change: owned by another user, or writable by its
group or others, or inside a directory that is, up to /. A sticky directory owned by root (/tmp, 1777) is no
such directory. The message names the path and the fix (chmod go-w PATH, chown USER PATH). The check is made at
`avsm add`, at avsmd's start for each adopted venture, again at each start of a program (a mode changed after
adoption is seen), and by `avsm doctor`. A home others can read is a doctor warning; avsmd makes what it
writes under the home 0600 and 0700, while the programs it starts keep the umask it was started with.

The rows that need another user make one (avsmtest2) with useradd, and skip with one line when not root."""

import os
import pwd
import shutil
import stat
import subprocess
import time

import pytest

from conftest import Avsm, make_venture, write
from test_daemon import of

OTHER = "avsmtest2"

MANDATE = """purpose: Run only what its owner can change.
metric: count
controller: {kind: threshold, above: 5, action: lower}
cadence: 1s
run: ./serve
world: ./world
permitted:
  - {name: lower, run: bin/lower, check: ./check, cap: 6000/hour, reversible: true}
guards:
  - {name: heat, run: python3 heat.py, above: 50, then: ask}
readings:
  - {name: waiting, run: ./waiting, lines: address}
"""

WORLD = """#!/bin/sh
echo world >> ran
cat > /dev/null
echo '{"state": null, "metric": 9, "guards": {}}'
"""

FILES = {"report": "#!/bin/sh\necho report >> ran\necho 9\n",
         "serve": "#!/bin/sh\necho serve >> ran\nexit 0\n",
         "world": WORLD,
         "bin/lower": "#!/bin/sh\necho lower >> ran\n",
         "check": "#!/bin/sh\necho check >> ran\n",
         "heat.py": "open('ran', 'a').write('heat\\n')\nprint(10)\n",
         "waiting": "#!/bin/sh\necho waiting >> ran\necho a@example.com\necho 1\n"}


def venture(workdir, name="own"):
    return make_venture(workdir, name, MANDATE, FILES)


@pytest.fixture(scope="session")
def other():
    """The uid of a second local user, made once (useradd), for the rows a write bit alone cannot show."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("another user's files need root and useradd to make the user avsmtest2")
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER],
                   capture_output=True)     # a second worker may have made it first
    return pwd.getpwnam(OTHER).pw_uid


def stat_of(mode, uid):
    return os.stat_result((mode, 1, 1, 1, uid, 0, 0, 0, 0, 0))


NAMES = {0: "root", 1000: "me", 1001: "mallory"}.get

# (mode, owner, the fix, or None: it passes) for a path judged for uid 1000
JUDGED = [
    (stat.S_IFREG | 0o755, 1000, None),
    (stat.S_IFREG | 0o644, 0, None),                # root's: root may change anything anyway
    (stat.S_IFREG | 0o755, 1001, "chown me /v/p"),
    (stat.S_IFREG | 0o775, 1000, "chmod go-w /v/p"),
    (stat.S_IFREG | 0o646, 0, "chmod go-w /v/p"),
    (stat.S_IFDIR | 0o1777, 0, None),               # /tmp: sticky, root's
    (stat.S_IFDIR | 0o1777, 1000, None),            # sticky and ours: no one replaces what is ours
    (stat.S_IFDIR | 0o1777, 1001, "chown me /v/p"),
    (stat.S_IFDIR | 0o777, 0, "chmod go-w /v/p"),
    (stat.S_IFREG | 0o1666, 1000, "chmod go-w /v/p"),   # a sticky bit on a file means nothing
]


@pytest.mark.parametrize("mode,owner,fix", JUDGED)
def test_who_may_change_a_path_is_judged_from_its_stat_alone(mode, owner, fix):
    """The pure judgment: a stat result and avsmd's uid in, the problem with its fix out (or None)."""
    import avsm
    found = avsm.write_problem("/v/p", stat_of(mode, owner), 1000, NAMES)
    assert (found and found.fix) == fix, found
    if found:
        assert found.why.startswith("/v/p ") and "change what avsmd runs" in found.why


def runs(d, program):
    """How many times `program` of the venture in `d` has run (each appends its name to `ran`)."""
    try:
        with open(os.path.join(d, "ran")) as fh:
            return fh.read().split().count(program)
    except FileNotFoundError:
        return 0


# (row, what to spoil, relative to the venture's directory ("" is the directory, ".." the one holding it),
#  the mode to give it or None to chown it to the other user, the fix the message gives)
SPOILED = [
    ("venture dir 0777", "", 0o777, "chmod go-w {path}"),
    ("venture dir group-writable", "", 0o775, "chmod go-w {path}"),
    ("mandate other-writable", "mandate.yaml", 0o646, "chmod go-w {path}"),
    ("report other-writable", "report", 0o757, "chmod go-w {path}"),
    ("run other-writable", "serve", 0o777, "chmod go-w {path}"),
    ("lever inside a writable dir", "bin", 0o777, "chmod go-w {path}"),
    ("lever other-writable", "bin/lower", 0o757, "chmod go-w {path}"),
    ("check group-writable", "check", 0o775, "chmod go-w {path}"),
    ("guard's script (python3 heat.py)", "heat.py", 0o666, "chmod go-w {path}"),
    ("reading other-writable", "waiting", 0o757, "chmod go-w {path}"),
    ("world other-writable", "world", 0o757, "chmod go-w {path}"),
    ("a directory up the path", "..", 0o777, "chmod go-w {path}"),
    ("venture dir another user's", "", None, "chown root {path}"),
    ("report another user's", "report", None, "chown root {path}"),
    ("world another user's", "world", None, "chown root {path}"),
    ("a directory up the path another user's", "..", None, "chown root {path}"),
]


def spoil(d, where, mode, request):
    path = os.path.normpath(os.path.join(d, where))
    if mode is None:
        os.chown(path, request.getfixturevalue("other"), -1)
    else:
        os.chmod(path, mode)
    return path


@pytest.mark.parametrize("row,where,mode,fix", SPOILED, ids=[r[0] for r in SPOILED])
def test_add_refuses_a_venture_another_user_could_change(av, workdir, request, row, where, mode, fix):
    """`avsm add` (and `avsmd -t DIR`, the same check) refuses with 65 a venture whose directory, mandate or a
    program it runs could be changed by another user than avsmd's or root, naming the path and the fix;
    nothing is adopted. VENTURE-05, MANDATE-08 (the mandate holds its programs), issue 32 item 6."""
    d = venture(workdir)
    path = spoil(d, where, mode, request)
    av.start()
    run = av.cli("add", d)
    assert run.returncode == 65, (run.returncode, run.stdout, run.stderr)
    assert path in run.stderr and fix.format(path=path) in run.stderr, run.stderr
    assert "avsm: own cannot be adopted:" in run.stderr, run.stderr
    tested = av.daemon_cmd("-t", d)
    assert tested.returncode == 65 and fix.format(path=path) in tested.stderr, tested.stderr
    assert not of(av.records(), "mandate", "own")
    assert runs(d, "report") == 0


def test_a_sticky_directory_owned_by_root_is_no_hole(av, workdir):
    """/tmp is 1777 and owned by root: others may add files but not replace ours, as sshd's StrictModes
    judges it, so a venture under such a directory is adopted (every test venture lives under /tmp)."""
    d = venture(workdir)
    os.chmod(workdir, 0o1777)
    av.start()
    run = av.cli("add", d)
    assert run.returncode == 0, run.stderr
    av.wait_for(lambda rs: runs(d, "report") > 0, what="a report")


# (program, its file, the record its refused start writes, whether that record says the fix: a failed reading
#  keeps no note at all, READING-08, so doctor says it)
AT_START = [
    ("report", "report", lambda r: r["kind"] == "report" and r["value"] is None, True),
    ("run", "serve", lambda r: r["kind"] == "exit" and r.get("status") == "not started", True),
    ("lever", "bin/lower", lambda r: r["kind"] == "refusal" and r["lever"] == "lower", True),
    ("check", "check", lambda r: r["kind"] == "refusal" and r["lever"] == "lower", True),
    ("guard", "heat.py", lambda r: r["kind"] == "guard.heat" and r["value"] is None, True),
    ("reading", "waiting", lambda r: r["kind"] == "reading.waiting" and r["status"] == "failed", False),
    ("world", "world", lambda r: True, True),
]


@pytest.mark.parametrize("program,where,refused,noted", AT_START, ids=[r[0] for r in AT_START])
def test_a_program_made_writable_after_adoption_is_never_started(av, workdir, program, where, refused, noted):
    """Adopted while it held, then made writable by others: the warden looks again at each start of a
    program (a stat of each path component, nothing kept), so the next start is refused and written with the
    path and `chmod go-w PATH` (a failed report or guard reading, a refusal of the lever or of its check, the
    run not started, a failed world step); the program never runs again, and doctor says why and the fix.
    RUN-12, READING-08, DOCTOR-04, issue 32 item 6."""
    d = venture(workdir)
    name = where.split("/")[-1].replace(".py", "")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: runs(d, name) > 0, what=f"{program} running once")
    if program == "lever":
        av.wait_for(lambda rs: of(rs, "outcome", "own"), what="the lever's first outcome")
    last = av.records()[-1][0]
    path = os.path.join(d, where)
    os.chmod(path, 0o757 if where != "heat.py" else 0o646)
    fix = f"chmod go-w {path}"
    found = av.wait_for(lambda rs: [(s, r) for s, _, r in rs if s > last and refused(r) and
                                    (fix in str(r) or not noted)], timeout=20, what=f"the refused {program}")
    seq, record = found[0]
    before = runs(d, name)
    av.wait_for(lambda rs: len([1 for s, _, r in rs if s > seq and r["kind"] == "report"]) >= 3,
                timeout=20, what="three more rounds")
    assert runs(d, name) == before, f"{program} ran after it was refused"
    if program == "lever":
        assert not [s for s, r in of(av.records(since=seq), "action", "own") if r["lever"] == "lower"]
    doctor = av.cli("doctor")
    assert doctor.returncode == 78 and f"FAIL  venture own: {path} can be written by" in doctor.stdout
    assert f"fix: {fix}, then" in doctor.stdout, doctor.stdout


def test_avsmd_start_and_doctor_refuse_a_venture_made_writable(av, workdir):
    """A venture that held when adopted and was made writable by others while avsmd was stopped: avsmd
    starts beside it, runs nothing of it, names it with the fix on standard error, and status cautions; doctor
    fails it with 78 and prints the fix; once fixed and added again, it runs. VENTURE-14, DOCTOR-04, DOCTOR-08."""
    d = venture(workdir)
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: runs(d, "report") > 0, what="a report")
    assert av.stop()[0] == 0
    os.chmod(d, 0o777)
    doctor = av.cli("doctor")
    assert doctor.returncode == 78, doctor.stdout
    assert f"FAIL  venture own: {d} can be written by its group and others (mode 0777)" in doctor.stdout
    assert f"fix: chmod go-w {d}, then" in doctor.stdout, doctor.stdout
    tested = av.daemon_cmd("-t")
    assert tested.returncode == 78 and f"chmod go-w {d}, then" in tested.stderr, tested.stderr
    last = av.records()[-1][0]
    reports = runs(d, "report")
    av.start()
    time.sleep(2)
    assert f"avsmd: venture own cannot run: {d} can be written" in av.stderr(), av.stderr()
    assert f"chmod go-w {d}" in av.stderr()
    status = av.cli("status")
    assert "cannot run" in status.stdout + status.stderr, status.stdout
    assert runs(d, "report") == reports and not of(av.records(since=last), "report", "own")
    os.chmod(d, 0o755)
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: runs(d, "report") > reports, what="a report once fixed")


def test_doctor_warns_of_a_home_others_can_read(av, workdir):
    """A home of 0755 with ledger.db 0644 (an older avsmd's, or a hand-made home) is a doctor warning naming
    each path, with `chmod go-rwx PATH...`; it does not change doctor's exit code. DOCTOR-04, HOME-09."""
    av.start()
    assert av.stop()[0] == 0
    ledger = os.path.join(av.home, "ledger.db")
    os.chmod(av.home, 0o755)
    os.chmod(ledger, 0o644)
    doctor = av.cli("doctor")
    assert f"warn  others than you can read {av.home}, {ledger} " in doctor.stdout, doctor.stdout
    assert f"fix: chmod go-rwx {av.home} {ledger}" in doctor.stdout
    assert doctor.returncode == 69, doctor.stdout      # no avsmd: the warning adds no code
    os.chmod(av.home, 0o700)
    os.chmod(ledger, 0o600)
    assert "warn" not in av.cli("doctor").stdout


def test_avsmd_makes_what_it_writes_0600_and_0700_whatever_the_umask(bindir, home, workdir):
    """Started with umask 000, avsmd still makes the home, ledger.db, its lock, socket, groups journal and
    checkpoints readable by its owner alone; the programs it starts keep the umask it was started with (a
    venture's files are the venture's business). HOME-09, issue 32 item 6."""
    d = make_venture(workdir, "um", "purpose: p\nmetric: m\ncontroller: {kind: threshold, above: 5, action: lower}\n"
                     "cadence: 1s\npermitted:\n  - {name: lower, run: ./lower, cap: 6000/hour, reversible: true}\n",
                     {"report": "#!/bin/sh\numask > umask.txt\necho 9\n", "lower": "#!/bin/sh\n"})
    av = Avsm(bindir, home)
    old = os.umask(0)
    try:
        av.start()
    finally:
        os.umask(old)
    try:
        assert av.cli("add", d).returncode == 0
        av.wait_for(lambda rs: of(rs, "outcome", "um"), what="a lever's outcome")
        assert av.cli("checkpoint").returncode == 0
        with open(os.path.join(d, "umask.txt")) as fh:
            assert fh.read().strip() == "0000"
    finally:
        assert av.stop()[0] == 0
    loose = []
    for top, dirs, files in os.walk(home):
        for path in [top] + [os.path.join(top, f) for f in files]:
            mode = os.lstat(path).st_mode
            if stat.S_IMODE(mode) & 0o077 and not stat.S_ISLNK(mode):
                loose.append(f"{path} {stat.S_IMODE(mode):04o}")
    assert os.path.isdir(os.path.join(home, "checkpoints")) and not loose, loose
