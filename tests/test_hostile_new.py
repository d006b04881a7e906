"""A hostile or careless user against what landed with issues 14 and 15: `avsm summary`, the one-line
`avsm status` with its sparkline (avsmd running and stopped), `avsm chart`, and the homes and ledgers they
read. Each bad input gets a precise error and the spec's exit code, no traceback, and leaves the ledger and
the running avsmd unharmed.

One real avsmd runs for the module: `big`, whose report prints the largest finite numbers a report may hold
(a report's own number is only kept finite, not held to 1e300), alternating in sign, and `counter`."""

import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import pytest

from conftest import Avsm, check_ledger_safety, make_venture, stat_fields

import avsm

BIG = """\
purpose: Keep the size under ten.
metric: size
controller: {kind: threshold, above: 10, action: shrink}
cadence: 1s
permitted:
  - {name: shrink, run: ./shrink, cap: 1/hour, reversible: true}
"""
# the largest finite float and its negative, then 1e300 and 0, for ever
BIG_REPORT = r"""#!/bin/sh
n=$(cat count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > count
case $((n % 4)) in
1) echo 1.7976931348623157e308;; 2) echo -1.7976931348623157e308;; 3) echo 1e300;; *) echo 0;;
esac
"""
COUNTER = """\
purpose: Count.
metric: count
controller: {kind: threshold, above: 1000, action: reset}
cadence: 1s
permitted:
  - {name: reset, run: ./reset, cap: 1/hour, reversible: true}
"""
NUMBER_ATTRS = ("x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "width", "height", "r")


@pytest.fixture(scope="module")
def av(bindir):
    top = tempfile.mkdtemp(prefix="avq", dir="/tmp")
    a = Avsm(bindir, os.path.join(top, "h"))
    a.env = {k: v for k, v in a.env.items() if k not in ("LC_ALL", "LC_CTYPE", "LANG")}
    a.env["LANG"] = "C.UTF-8"
    a.top = top
    # the notify command tells of big's asks (it is stuck at its cap), leaving a member of its group behind
    # that would sleep for five minutes; it saves that member's pid and the event
    notify = os.path.join(top, "notify")
    with open(notify, "w") as fh:
        fh.write(f"#!/bin/sh\necho \"$AVSM_EVENT\" >> {top}/events\n"
                 f"sh -c 'echo $$ >> {top}/behind; exec sleep 300' </dev/null >/dev/null 2>&1 &\nexit 0\n")
    os.chmod(notify, 0o755)
    os.makedirs(a.home)
    with open(os.path.join(a.home, "config.yaml"), "w") as fh:
        fh.write(f"notify: {{run: {notify}, timeout: 2s}}\n")
    big = make_venture(top, "big", BIG, {"report": BIG_REPORT, "shrink": "#!/bin/sh\nexit 0\n"})
    counter = make_venture(top, "counter", COUNTER, {"report": "#!/bin/sh\necho 3\n", "reset": "#!/bin/sh\nexit 0\n"})
    try:
        a.start()
        assert a.cli("add", big).returncode == 0 and a.cli("add", counter).returncode == 0
        a.wait_for(lambda rs: sum(1 for _, _, r in rs if r["kind"] == "report" and r["venture"] == "big"
                                  and r["status"] == "trusted") >= 4, timeout=30, what="big's four trusted reports")
        yield a
        assert a.proc.poll() is None, "avsmd died: " + a.stderr()
        code, _ = a.stop()
        assert code == 0, a.stderr()
        check_ledger_safety(a.home)
    finally:
        if a.proc is not None and a.proc.poll() is None:
            a.stop()
        shutil.rmtree(top, ignore_errors=True)


def no_traceback(r):
    assert "Traceback" not in r.stderr and "bug in avsm" not in r.stderr, r.stderr
    return r


def test_status_with_a_venture_at_the_largest_floats(av):
    """Issue 14 item 4, CLI-*: a report of ±1.7976931348623157e308 (finite, so kept) leaves `avsm status` whole:
    one line per venture with its sparkline, exit 0, for that venture and every other; before, avsmd refused the
    whole status as a bug (70) for every venture."""
    r = no_traceback(av.cli("status"))
    assert r.returncode == 0, r
    lines = {line.split(":")[0]: line for line in r.stdout.splitlines() if re.match(r"^\w+: ", line)}
    assert set(lines) >= {"big", "counter"}
    assert re.search(r"[▁▂▃▄▅▆▇█]{4}", lines["big"]), lines["big"]
    for args in (("status", "big"), ("status", "-v")):
        r = no_traceback(av.cli(*args))
        assert r.returncode == 0 and re.search(r"^big: \w+ ", r.stdout, re.M), r


def copy_home(av, name):
    """A home of its own holding a copy of the module's ledger, and no avsmd."""
    other = Avsm(av.bindir, os.path.join(av.top, name), env={"LANG": "C.UTF-8"})
    os.makedirs(other.home)
    src = sqlite3.connect(os.path.join(av.home, "ledger.db"))
    dst = sqlite3.connect(os.path.join(other.home, "ledger.db"))
    src.backup(dst)
    src.close(), dst.close()
    return other


def test_status_from_the_ledger_into_a_pipe_closed_early_keeps_69(av):
    """Issue 14 item 4 (with avsmd stopped, status shows the ledger and its exit code stays 69), EXIT-*: a reader
    that goes away at once (`avsm status | head -1`) ends the ledger's lines quietly, but the exit stays 69, no
    avsmd answering; before, the closed pipe made it 0, as if avsmd ran."""
    other = copy_home(av, "piped")
    p = subprocess.Popen([sys.executable, os.path.join(av.bindir, "avsm"), "--home", other.home, "status", "-v"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=other.env)
    p.stdout.close()                    # before avsm writes its first line
    err = p.stderr.read().decode()
    assert p.wait(timeout=30) == 69 and "no avsmd is running" in err and "Traceback" not in err, err


def test_status_from_the_ledger_with_the_largest_floats(av):
    """Issue 14 item 4, EXIT-*: with no avsmd answering (the ledger copied to a home of its own), status still
    prints what the ledger holds for the extreme venture and exits 69, no traceback."""
    other = copy_home(av, "copy")
    r = no_traceback(other.cli("status"))
    assert r.returncode == 69 and re.search(r"^big: \w+ .*[▁▂▃▄▅▆▇█]{4}", r.stdout, re.M), r


def test_chart_of_the_largest_floats_is_an_svg_of_finite_numbers(av):
    """Issue 14 item 5: `avsm chart` of a venture whose reports reach ±1.7976931348623157e308 writes an SVG that
    parses, every coordinate a finite number, each trusted report a point; before, an OverflowError traceback."""
    r = no_traceback(av.cli("chart", "big"))
    assert r.returncode == 0, r
    root = ET.fromstring(r.stdout)
    for el in root.iter():
        for attr in NUMBER_ATTRS:
            if el.get(attr) is not None:
                assert math.isfinite(float(el.get(attr))), (el.tag, attr, el.get(attr))
    lines = root.findall("{http://www.w3.org/2000/svg}g[@class='trusted-line']/{http://www.w3.org/2000/svg}polyline")
    for point in (p for line in lines for p in line.get("points").split()):
        assert all(math.isfinite(float(v)) for v in point.split(",")), point


def test_chart_takes_a_name_after_double_dash(av):
    """README (Commands: `--` ends the options), CLI-*: `avsm chart -- -h` names a venture `-h`: there is none,
    so 65 saying so, not 64 for an option chart does not take."""
    r = no_traceback(av.cli("chart", "--", "-h"))
    assert r.returncode == 65 and "no venture is named '-h'" in r.stderr, r
    r = av.cli("chart", "--since", "1", "--", "big")
    assert r.returncode == 0 and r.stdout.startswith("<svg"), r


def test_a_home_that_is_a_file(av, workdir):
    """README exit codes: 73 is a home that is not a directory. summary, chart and tail on a home that is a file
    say so (they said it did not exist, 66)."""
    path = os.path.join(workdir, "afile")
    with open(path, "w") as fh:
        fh.write("x\n")
    other = Avsm(av.bindir, path)
    for args in (("summary",), ("chart", "big"), ("tail",)):
        r = no_traceback(other.cli(*args))
        assert r.returncode == 73 and "is not a directory" in r.stderr and "does not exist" not in r.stderr, (args, r)


def test_a_ledger_that_is_a_directory_or_a_fifo(av, workdir):
    """EXIT-*: a ledger.db that is a directory is refused with 65 naming it a directory (it said 'disk I/O
    error'), and one that is a FIFO with 65 naming it a FIFO (summary, chart and tail waited for ever on its
    open), for summary, chart and tail alike; `avsm doctor` and `avsmd -t` say it is no regular file (65), where
    on a FIFO they too waited for ever."""
    for what, make in (("a directory", os.makedirs), ("a FIFO", os.mkfifo)):
        home = os.path.join(workdir, what.split()[1])
        os.makedirs(home)
        make(os.path.join(home, "ledger.db"))
        other = Avsm(av.bindir, home)
        for args in (("summary",), ("chart", "big"), ("tail",)):
            r = no_traceback(other.cli(*args, timeout=10))
            assert r.returncode == 65 and f"ledger.db is {what}, not a ledger" in r.stderr, (args, r)
        r = no_traceback(other.cli("doctor", timeout=10))
        assert r.returncode == 65 and "ledger.db is not a regular file" in r.stdout, r
        r = no_traceback(other.daemon_cmd("-t", timeout=10))
        assert r.returncode == 65 and "ledger.db does not read (it is not a regular file" in r.stderr, r


def test_the_daemon_is_unharmed(av):
    """After every hostile call above, avsmd still answers and big still reports."""
    n = len(av.records())
    av.wait_for(lambda rs: len(rs) > n + 2, timeout=10, what="more records")
    assert av.cli("status").returncode == 0


@pytest.mark.parametrize("value, shown", [("null", "'null'"), ("[5s]", """'["5s"]'"""), ("{a: 1}", """'{"a": 1}'"""),
                                          ("true", "'true'")])
def test_a_timeout_that_is_not_text_is_shown_as_written(av, workdir, value, shown):
    """Issue 15 item 3 (a reading's own `timeout:`), CLI-*: `avsmd -t DIR` refuses a guard's `timeout:` that is
    not a duration with 65 at its line, showing the value in YAML's words (null, ["5s"]), not Python's
    ('None', "['5s']")."""
    d = make_venture(workdir, "t", COUNTER + f"guards:\n  - {{name: g, run: ./g, above: 5, then: pause, timeout: {value}}}\n",
                     {"report": "#!/bin/sh\necho 3\n", "reset": "#!/bin/sh\nexit 0\n", "g": "#!/bin/sh\necho 1\n"})
    r = no_traceback(av.daemon_cmd("-t", d))
    assert r.returncode == 65 and "mandate.yaml:8:48: " in r.stderr and f"{shown} is not a duration" in r.stderr, r


def test_what_a_notify_command_leaves_behind_ends_at_its_time_limit(av):
    """Issue 14 item 2 (the notify command runs like any other program of avsm: own process group, time limit):
    a notify script that exits at once but leaves `sleep 300` running in its group has that member ended at
    its time limit (2 s here, TERM then KILL), not left to outlive the notice and avsmd; the next notice is told."""
    behind = os.path.join(av.top, "behind")
    av.wait_for(lambda rs: os.path.exists(behind) and open(behind).read().split(), timeout=20, what="a notice told")
    first = int(open(behind).read().split()[0])
    deadline = time.monotonic() + 2 + 7 + 5
    while time.monotonic() < deadline and stat_fields(first) is not None and stat_fields(first)[0] != b"Z":
        time.sleep(0.1)
    assert stat_fields(first) is None or stat_fields(first)[0] == b"Z", f"pid {first} outlived the notify's 2 s limit"
    av.wait_for(lambda rs: len(open(behind).read().split()) >= 2, timeout=20, what="the next notice told")


def write_ledger(home, texts, at=None):
    """Write a ledger of these record texts, chained as avsmd chains them (a ledger edited by hand), the first
    at unix time `at` + 1 (100 s ago unless given), one a second."""
    os.makedirs(home)
    db = sqlite3.connect(os.path.join(home, "ledger.db"), isolation_level=None)
    db.executescript(avsm.LEDGER_SCHEMA)
    prev, at = avsm.ZERO_HASH, int(time.time()) - 100 if at is None else at
    for seq, text in enumerate(texts, 1):
        h = avsm.chain_hash(prev, seq, at + seq, text)
        db.execute("INSERT INTO records(seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)", (seq, at + seq, prev, h, text))
        prev = h
    db.close()


UNREADABLE = {
    "nested past Python's depth": ("[" * 100000 + "]" * 100000, None),
    "a number past Python's digits": ('{"claim":"measured","kind":"report","note":"","plausible":true,'
                                      '"status":"trusted","summary":"x","value":' + "7" * 5001 + ',"venture":"c"}', None),
    "bytes not UTF-8": (b"\xff\x00\xfe", None),
    "a time that is text": (None, "abc"),
}


@pytest.mark.parametrize("label", list(UNREADABLE))
def test_a_record_python_cannot_read_is_refused_not_a_traceback(av, workdir, label):
    """LEDGER-16, DOCTOR-07, EXIT-*: a soundly chained record Python's json cannot read (nested 100,000 deep, an
    integer of 5,001 digits, a BLOB of bytes not UTF-8) or one whose time is text (a ledger edited by hand): avsmd
    refuses to start on it (65, naming it), doctor fails it (65), and why, tail, summary, status and chart with
    no avsmd answer without a traceback (they were RecursionError, ValueError, TypeError: 70)."""
    home = os.path.join(workdir, "h")
    mandate = avsm.canonical({"kind": "mandate", "claim": "declared", "venture": "c", "directory": workdir,
                              "text": COUNTER, "sha256": avsm.text_sha256(COUNTER), "summary": "adopted c"})
    report = avsm.canonical({"kind": "report", "claim": "measured", "venture": "c", "metric": "count", "value": 1,
                             "status": "trusted", "plausible": True, "note": "", "summary": "count = 1"})
    text, at = UNREADABLE[label]
    os.makedirs(home)
    db = sqlite3.connect(os.path.join(home, "ledger.db"), isolation_level=None)
    db.executescript(avsm.LEDGER_SCHEMA)
    prev, t0 = avsm.ZERO_HASH, int(time.time()) - 100
    for seq, (row, row_at) in enumerate([(mandate, None), (report, None), (text or report, at)], 1):
        row_at = row_at or t0 + seq
        h = avsm.chain_hash(prev, seq, row_at, row.decode("latin-1") if isinstance(row, bytes) else row)
        db.execute("INSERT INTO records(seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)", (seq, row_at, prev, h, row))
        prev = h
    db.close()
    other = Avsm(av.bindir, home)
    r = no_traceback(other.daemon_cmd())
    assert r.returncode == 65 and f"record #3 of {home}/ledger.db does not read" in r.stderr, r
    r = no_traceback(other.cli("doctor"))
    assert r.returncode == 65 and "FAIL  record #3 does not read" in r.stdout, r
    for args in (("why", "3"), ("tail",), ("summary", "--since", "0"), ("status",), ("chart", "c")):
        r = no_traceback(other.cli(*args))
        assert r.returncode in (0, 65, 69), (args, r)


def test_a_lone_surrogate_in_the_ledger_reaches_the_page_as_a_character_reference(av, workdir):
    """EXIT-*: a summary holding a lone surrogate (valid JSON, \\ud800; a ledger edited by hand: a model's is
    refused) is written to the page as &#55296; (UTF-8 cannot hold it): `avsm page -o FILE` writes it with no
    traceback (it was a UnicodeEncodeError, 70; avsmd's own page writer would have ended its warden)."""
    home = os.path.join(workdir, "h")
    mandate = avsm.canonical({"kind": "mandate", "claim": "declared", "venture": "c", "directory": workdir,
                              "text": COUNTER, "sha256": avsm.text_sha256(COUNTER), "summary": "adopted c"})
    ask = avsm.canonical({"kind": "ask", "claim": "measured", "venture": "c", "about": "lever", "lever": "reset",
                          "question": "reset? \ud800", "summary": "reset? \ud800"})
    write_ledger(home, [mandate, ask])
    page = os.path.join(workdir, "page.html")
    r = no_traceback(Avsm(av.bindir, home).cli("page", "-o", page))
    with open(page, encoding="utf-8") as fh:
        assert "&#55296;" in fh.read(), r


def test_a_record_that_is_json_but_no_object(av, workdir):
    """LEDGER-*, EXIT-*: a ledger holding a record that is JSON but not an object ([1,2], 5, null), chained
    soundly, is refused as unreadable by summary, tail and why (65, naming the record and `avsm doctor`), and
    status with no avsmd says so and keeps 69; before, each was a traceback (70)."""
    home = os.path.join(workdir, "h")
    start = avsm.canonical({"kind": "start", "claim": "measured", "venture": "self", "summary": "started"})
    report = avsm.canonical({"kind": "report", "claim": "measured", "venture": "c", "metric": "m", "value": 1,
                             "status": "trusted", "plausible": True, "note": "", "summary": "m = 1"})
    write_ledger(home, [start, "[1,2]", report, "null"])
    other = Avsm(av.bindir, home)
    for args in (("summary", "--since", "0"), ("tail",), ("why", "2")):
        r = no_traceback(other.cli(*args))
        assert r.returncode == 65 and "record #2 is [1, 2], not a JSON object" in r.stderr and "doctor" in r.stderr, (args, r)
    r = no_traceback(other.cli("status"))
    assert r.returncode == 69 and "cannot be read" in r.stderr, r
    r = other.cli("doctor")
    assert "record #2 does not read: it is not a JSON object" in r.stdout, r


def test_a_config_too_large_to_hand_to_the_warden(av, workdir):
    """Issue 14 item 2 (`avsmd -t` shows the notify command), CONFIG-*, EXIT-*: a notify command of 300 KB makes
    a config that avsmd cannot hand to its warden (one environment variable holds at most 128 KiB on Linux), so
    `avsmd -t` and avsmd itself refuse it with 78 at the key, naming the fix, and leave no socket; before, -t said
    it held and avsmd died with a traceback (OSError E2BIG), its socket left behind."""
    home = os.path.join(workdir, "h")
    os.makedirs(home)
    with open(os.path.join(home, "config.yaml"), "w") as fh:
        fh.write('notify: "echo ' + "x" * 300_000 + '"\n')
    other = Avsm(av.bindir, home)
    for args in (("-t",), ()):
        r = no_traceback(other.daemon_cmd(*args, timeout=20))
        assert r.returncode == 78 and "config.yaml:1:1: the config is 293 KiB once read, most of it in notify" in r.stderr, (args, r)
    assert not os.path.exists(os.path.join(home, "sock"))


def test_a_time_no_clock_can_show(av, workdir):
    """LEDGER-*, EXIT-*: records whose `at` is past what the C library's localtime can show (2**62, a ledger
    edited by hand) are shown as @SECONDS by tail, why, summary and status with avsmd stopped (69), no
    traceback (it was an OSError from localtime, 70)."""
    home = os.path.join(workdir, "h")
    mandate = avsm.canonical({"kind": "mandate", "claim": "declared", "venture": "c", "directory": workdir,
                              "text": COUNTER, "sha256": avsm.text_sha256(COUNTER), "summary": "adopted c"})
    report = avsm.canonical({"kind": "report", "claim": "measured", "venture": "c", "metric": "count", "value": 1,
                             "status": "trusted", "plausible": True, "note": "", "summary": "count = 1"})
    write_ledger(home, [mandate, report], at=2 ** 62)
    other = Avsm(av.bindir, home)
    for args, code in ((("tail",), 0), (("why", "2"), 0), (("summary", "--since", "0"), 0), (("status",), 69)):
        r = no_traceback(other.cli(*args))
        assert r.returncode == code and f"@{2 ** 62 + 2}" in r.stdout, (args, r)


def bad_fold_records():
    """(label, record) of records whose fields are not what the fold reads (each chained soundly: edited by hand)."""
    base = {"claim": "measured", "venture": "c", "summary": "x"}
    report = dict(base, kind="report", metric="count", value=1, status="trusted", plausible=True, note="")
    action = dict(base, kind="action", claim="inferred", lever="reset", proof={"rule": "controller", "premises": [2]})
    return [
        ("a trusted report's value as text", dict(report, value="abc"), 'it is trusted and its value is "abc", not a number'),
        ("a report's status as a number", dict(report, status=5), "its status is 5, not text"),
        ("a lever's name as a list", dict(action, lever=[1]), "its lever is [1], not a lever's name"),
        ("an action with no lever", {k: v for k, v in action.items() if k != "lever"},
         "its lever is missing, not a lever's name"),
        ("a mandate's directory as a number", dict(base, kind="mandate", claim="declared", directory=7, text="x"),
         "its directory is 7, not text"),
        ("a proof as text", dict(action, proof="nope"), 'its proof is "nope", not an object'),
        ("premises as text", dict(action, proof={"premises": "2"}), 'its proof\'s premises are "2", not a list of record numbers'),
        ("an outcome's action as text", dict(base, kind="outcome", lever="reset", action="x", ok=True),
         'its action is "x", not a record number'),
        ("an approval's ask as text", dict(base, kind="approval", claim="declared", ask="7"), 'its ask is "7", not a record number'),
        ("a venture as a number", dict(report, venture=12), "its kind or venture is not text"),
        ("a calibration's score as text", dict(base, kind="calibration.count", claim="inferred", crps="x", persistence=1),
         'its crps is "x", not a number'),
        ("an answer's escalation as a list", dict(base, kind="answer", escalation=[2], cited="unusable"),
         "its escalation is [2], not a record number"),
    ]


@pytest.mark.parametrize("label,record,why", bad_fold_records(), ids=[b[0] for b in bad_fold_records()])
def test_a_record_whose_fields_are_not_what_the_fold_reads(av, workdir, label, record, why):
    """LEDGER-16, EXIT-*: a soundly chained record whose fields are not of the types the fold reads them as (a
    ledger edited by hand) does not read: avsmd stops at once (65) naming it and `avsm doctor --cut`, `avsm why`
    of it and `avsm summary` say so (65), doctor names it, and status with no avsmd answers without a traceback
    (before, the warden's fold raised a TypeError at every start, and why and status were tracebacks, 70)."""
    home = os.path.join(workdir, "h")
    mandate = avsm.canonical({"kind": "mandate", "claim": "declared", "venture": "c", "directory": workdir,
                              "text": COUNTER, "sha256": avsm.text_sha256(COUNTER), "summary": "adopted c"})
    good = avsm.canonical({"kind": "report", "claim": "measured", "venture": "c", "metric": "count", "value": 1,
                           "status": "trusted", "plausible": True, "note": "", "summary": "count = 1"})
    write_ledger(home, [mandate, good, avsm.canonical(record)])
    other = Avsm(av.bindir, home)
    r = no_traceback(other.daemon_cmd())
    assert r.returncode == 65 and f"record #3 of {home}/ledger.db does not read: {why}" in r.stderr, r
    assert "avsm doctor --cut 3" in r.stderr, r
    r = no_traceback(other.cli("why", "3"))
    assert r.returncode == 65 and f"record #3 does not read: {why}" in r.stderr, r
    assert f"record #3 does not read: {why}" in other.cli("doctor").stdout
    assert no_traceback(other.cli("status")).returncode == 69
    r = no_traceback(other.cli("summary", "--since", "0"))
    assert r.returncode == 65 and f"record #3 does not read: {why}" in r.stderr and "doctor" in r.stderr, r
    assert no_traceback(other.cli("why", "2")).returncode == 0


def test_a_chart_leaves_out_a_time_no_clock_wrote_and_says_so(av, workdir):
    """CLI-*: `avsm chart` of a venture with one report at 2**62 seconds (past what localtime can show: a ledger
    edited by hand) charts the others and says in its caption that one was left out; before, an OSError (70)."""
    home = os.path.join(workdir, "h")
    mandate = avsm.canonical({"kind": "mandate", "claim": "declared", "venture": "c", "directory": workdir,
                              "text": COUNTER, "sha256": avsm.text_sha256(COUNTER), "summary": "adopted c"})
    reports = [avsm.canonical({"kind": "report", "claim": "measured", "venture": "c", "metric": "count", "value": v,
                               "status": "trusted", "plausible": True, "note": "", "summary": f"count = {v}"})
               for v in (1, 2, 3)]
    write_ledger(home, [mandate] + reports[:2])
    db = sqlite3.connect(os.path.join(home, "ledger.db"), isolation_level=None)
    prev = db.execute("SELECT hash FROM records WHERE seq = 3").fetchone()[0]
    db.execute("INSERT INTO records(seq, at, prev, hash, record) VALUES (4, ?, ?, ?, ?)",
               (2 ** 62, prev, avsm.chain_hash(prev, 4, 2 ** 62, reports[2]), reports[2]))
    db.close()
    r = no_traceback(Avsm(av.bindir, home).cli("chart", "c"))
    assert r.returncode == 0, r
    title = ET.fromstring(r.stdout).find("{http://www.w3.org/2000/svg}title").text
    assert "2 trusted reports" in title and "(1 record at a time no clock wrote left out)" in title, title


def test_a_transaction_whose_writer_was_killed_is_waited_for_then_named(av, workdir):
    """LEDGER-*, EXIT-*: a writer SIGKILLed in a transaction leaves its journal hot beside the ledger, which a
    read-only reader cannot roll back (SQLITE_READONLY_ROLLBACK). With no avsmd, `avsm tail` waits a moment,
    then says so and how to fix it (65), and doctor says to start avsmd, not to move the ledger away (before:
    "attempt to write a readonly database", and doctor's fix was `mv ledger.db ledger.db.broken`). avsmd, as
    it starts, rolls it back, and every record is still there."""
    home = os.path.join(workdir, "h")
    start = avsm.canonical({"kind": "start", "claim": "measured", "venture": "self", "summary": "started"})
    write_ledger(home, [start, start])
    path = os.path.join(home, "ledger.db")
    killed = subprocess.run([sys.executable, "-c", f"""
import os, signal, sqlite3
db = sqlite3.connect({path!r}, isolation_level=None)
db.execute("PRAGMA cache_size=1")
db.execute("BEGIN IMMEDIATE")
db.execute("CREATE TABLE junk(x)")
for i in range(5000):
    db.execute("INSERT INTO junk VALUES (?)", ("x" * 500,))
os.kill(os.getpid(), signal.SIGKILL)
"""])
    assert killed.returncode == -signal.SIGKILL and os.path.getsize(path + "-journal") > 0
    other = Avsm(av.bindir, home)
    t0 = time.monotonic()
    r = no_traceback(other.cli("tail"))
    assert r.returncode == 65 and "holds a transaction its writer was killed in" in r.stderr and "start avsmd" in r.stderr, r
    assert time.monotonic() - t0 >= avsm.ROLLBACK_WAIT
    r = no_traceback(other.cli("doctor"))
    assert "holds a transaction its writer was killed in" in r.stdout and ".broken" not in r.stdout, r.stdout
    other.start()
    try:
        r = no_traceback(other.cli("tail", "--since", "0"))
        assert r.returncode == 0 and "#1 " in r.stdout and "#2 " in r.stdout, r
    finally:
        other.stop()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'junk'").fetchone()[0] == 0
    db.close()
