"""Being told (issue 14 item 2): an optional `notify:` command in config.yaml, run by avsmd once for each thing a
person must see: a new ask, a venture paused by a guard, a venture stuck or unable to run, the ledger unwritable,
avsmd stopping. Its standard input is a short text, $AVSM_EVENT one JSON object (kind, venture, seq, summary, the
command that answers it). It runs in a group of its own with a time limit, sees no key, never holds up the tick,
and a failing one is written once per stretch of failures.

The kernel part (which records are notices, the stretch of failures) is tested with records in; the rest against
a real avsmd, the notify command a real script that saves what it gets, one JSON line per run."""

import json
import os
import re
import signal
import sys
import time

import pytest

import avsm
from ledger_checks import shape_problem
from conftest import Avsm, check_ledger_safety, make_venture, stat_fields, write

# ---- the kernel: records in, notices out -----------------------------------------------------------

ASK = {"kind": "ask", "claim": "measured", "venture": "queue", "about": "lever", "lever": "purge",
       "question": "run purge? queue 20 > 10; purge is irreversible",
       "summary": "run purge? queue 20 > 10; purge is irreversible, so a person decides"}


def test_notice_of_each_record_a_person_must_see():
    """Issue 14 item 2: an ask (a stuck one as `stuck`), a measured pause (a guard's), the ledger taking writes
    again are notices, each with the command that answers it; a person's own pause, a report, a refusal are not.
    ASK-01 GUARD-03"""
    n = avsm.notice_of(17, ASK)
    assert (n["kind"], n["venture"], n["seq"], n["answer"], n["deny"], n["lever"]) == \
        ("ask", "queue", 17, "avsm approve 17", "avsm deny 17", "purge")
    assert n["summary"] == ASK["summary"] and n["question"] == ASK["question"]
    stuck = dict(ASK, about="stuck", summary="queue is stuck: flush cannot run (cap)")
    assert avsm.notice_of(18, stuck)["kind"] == "stuck"
    canary = dict(ASK, canary=True)               # a canary ask must read as any other
    assert avsm.notice_of(17, canary) == n
    pause = {"kind": "pause", "claim": "measured", "venture": "dial", "guard": "spend", "summary": "guard spend ..."}
    p = avsm.notice_of(5, pause)
    assert (p["kind"], p["seq"], p["guard"], p["answer"]) == ("pause", 5, "spend", "avsm resume dial")
    ledger = {"kind": "ledger", "claim": "measured", "venture": "self", "summary": "the ledger takes writes again"}
    assert avsm.notice_of(9, ledger)["kind"] == "ledger"
    for record in ({"kind": "pause", "claim": "declared", "venture": "dial", "summary": "a person paused dial"},
                   {"kind": "report", "claim": "measured", "venture": "dial", "value": 3, "summary": "dial 3"},
                   {"kind": "refusal", "claim": "measured", "venture": "dial", "lever": "x", "why": "cap", "summary": "x"},
                   {"kind": "start", "claim": "measured", "venture": "self", "summary": "avsmd started"}):
        assert avsm.notice_of(3, record) is None, record


def test_a_failing_notify_is_written_once_per_stretch():
    """Issue 14 item 2: the first failure writes a record, the next ones in the same stretch none, the first
    success after them one more (how many were missed), a success after a success none."""
    ask, other = avsm.notice_of(17, ASK), avsm.stopping_notice("SIGTERM")
    stretch, record = avsm.judge_notify(None, ask, None)
    assert (stretch, record) == (None, None)
    stretch, record = avsm.judge_notify(None, ask, "exit 1", "no route to the mail host")
    assert record["kind"] == "notify" and record["ok"] is False and record["venture"] == "self"
    assert record["status"] == "exit 1" and record["note"] == "no route to the mail host"
    assert record["notice"] == {"kind": "ask", "seq": 17} and "#17 (ask)" in record["summary"]
    assert shape_problem(record) is None
    for _ in range(3):
        stretch, record = avsm.judge_notify(stretch, other, "exit 1")
        assert record is None
    stretch, record = avsm.judge_notify(stretch, ask, None)
    assert stretch is None and record["ok"] is True and record["failed"] == 4 and "4 notice(s)" in record["summary"]
    assert avsm.judge_notify(stretch, ask, None) == (None, None)


def test_the_ledger_unwritable_is_told_once_until_it_takes_writes_again():
    """RUN-19: the warden and avsmd may each find the ledger unwritable; a person hears of it once, and again only
    after it took writes again."""
    down, up = avsm.ledger_down_notice("disk I/O error"), avsm.notice_of(9, {"kind": "ledger", "claim": "measured",
                                                                          "venture": "self", "summary": "again"})
    told = False
    admitted = []
    for notice in (down, down, up, down, avsm.notice_of(17, ASK), down):
        admit, told = avsm.admit_notice(told, notice)
        admitted.append((notice["kind"], admit))
    assert admitted == [("ledger-down", True), ("ledger-down", False), ("ledger", True), ("ledger-down", True),
                        ("ask", True), ("ledger-down", False)]


def test_notice_message_completes_the_answer_and_escapes_what_a_model_wrote():
    """The text on standard input names the home and the answer as this person runs avsm; $AVSM_EVENT holds the
    same; a control character from a model's question reaches neither a terminal nor a mail raw."""
    n = avsm.notice_of(17, dict(ASK, question="run purge?\x1b[2J now"))
    text, event = avsm.notice_message(n, {"avsm": "avsm --home /h", "avsmd": "avsmd --home /h"}, "/h")
    assert event["answer"] == "avsm --home /h approve 17" and event["deny"] == "avsm --home /h deny 17"
    assert (event["kind"], event["venture"], event["seq"], event["home"]) == ("ask", "queue", 17, "/h")
    lines = text.splitlines()
    assert lines[0] == "avsm: queue asks (#17) on /h" and lines[1] == ASK["summary"]
    assert "\x1b" not in text and "\\x1b[2J" in text
    assert lines[-1] == "answer: avsm --home /h approve 17, or avsm --home /h deny 17"
    text, event = avsm.notice_message(avsm.stopping_notice("SIGTERM"), {"avsm": "avsm", "avsmd": "avsmd --home /h"}, "/h")
    assert event["answer"] == "avsmd --home /h" and event["seq"] is None and "SIGTERM" in text


# ---- the config ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, where, says", [
    ("notify: 5\n", "config.yaml:1:", "not 5"),
    ("notify: [mail, -s]\n", "config.yaml:1:", "not ["),
    ("notify: true\n", "config.yaml:1:", "not true"),
    ('notify: ""\n', "config.yaml:1:", "notify is empty"),
    ('notify: "   "\n', "config.yaml:1:", "notify is empty"),
    ("notify: {timeout: 5s}\n", "config.yaml:1:", "no 'run'"),
    ("notify: {run: ./n, timeot: 5s}\n", "config.yaml:1:", "did you mean 'timeout'"),
    ("notify: {run: ./n, timeout: 1h30}\n", "config.yaml:1:", "write 90m"),
])
def test_parse_notify_refuses_with_the_fix(text, where, says):
    """CONFIG-10: a notify: that does not hold is refused at file:line:col with the fix (78)."""
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_config(text, "config.yaml")
    assert err.value.code == 78 and str(err.value).startswith(where) and says in str(err.value), str(err.value)
    if "not " in says or "empty" in says:
        assert 'notify: "mail -s avsm you@example.com"' in str(err.value)


def test_parse_notify_reads_a_command_or_a_mapping():
    """CONFIG-03: notify is optional (null: off); a command alone has a 30 s time limit; `timeout:` sets it."""
    assert avsm.parse_config("")["notify"] is None and avsm.parse_config("notify:\n")["notify"] is None
    assert avsm.parse_config("notify: mail -s avsm you@example.com\n")["notify"] == \
        {"run": "mail -s avsm you@example.com", "timeout": 30}
    assert avsm.parse_config("notify: {run: ./tell, timeout: 2m}\n")["notify"] == {"run": "./tell", "timeout": 120}


# ---- against a real avsmd -------------------------------------------------------------------------

NOTIFY = f"""#!{sys.executable}
# saves what it was given, one JSON line a run; fails while FAIL is there, hangs while HANG is (once for HANG1)
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
entry = {{"stdin": sys.stdin.read(), "event": json.loads(os.environ.get("AVSM_EVENT", "null")),
          "env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid(), "pgid": os.getpgid(0)}}
with open(os.path.join(here, "told.jsonl"), "a") as fh:
    fh.write(json.dumps(entry) + "\\n")
if os.path.exists(os.path.join(here, "HANG")):
    time.sleep(60)
if os.path.exists(os.path.join(here, "HANG1")):     # hangs this once
    os.unlink(os.path.join(here, "HANG1"))
    time.sleep(60)
if os.path.exists(os.path.join(here, "FAIL")):
    print("the mail host is down")
    sys.exit(1)
"""

ASKING = """purpose: Keep the queue short.
metric: queue
controller: {kind: threshold, above: 10, action: purge}
cadence: 1s
permitted:
  - {name: purge, run: ./purge, cap: 1/hour, reversible: false}
"""
ASKING_FILES = {"report": "#!/bin/sh\necho 20\n", "purge": "#!/bin/sh\nexit 0\n"}


def notify_on(av, workdir, timeout="5s", extra=""):
    """Write the saving notify script into workdir and name it in the home's config; return the told-log path."""
    script = write(os.path.join(workdir, "tell", "notify"), NOTIFY, 0o755)
    write(os.path.join(av.home, "config.yaml"), f"notify: {{run: {script}, timeout: {timeout}}}\n{extra}")
    return os.path.join(workdir, "tell", "told.jsonl")


def told(log):
    """Every run of the notify command so far: [entry]."""
    try:
        with open(log) as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def wait_told(log, predicate, timeout=15, what="a notice"):
    """Poll the told-log until predicate(entries) is true; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate(told(log))
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; told: {[e['event'] for e in told(log)]}")


def of_kind(kind):
    return lambda entries: [e for e in entries if e["event"]["kind"] == kind]


def notify_records(av):
    return [(s, r) for s, _, r in av.records() if r["kind"] == "notify"]


def test_a_new_ask_is_told_once_with_the_command_that_answers_it(av, workdir):
    """Issue 14 item 2, ASK-01: a new ask runs the notify command once, in the home, in a process group of its
    own; its standard input is the short text (the summary, the question, the answer), $AVSM_EVENT the ask's kind,
    venture, seq, summary and the command that answers it; a notify that works writes nothing to the ledger."""
    log = notify_on(av, workdir)
    d = make_venture(workdir, "queue", ASKING, ASKING_FILES)
    av.start()
    assert av.cli("add", d).returncode == 0
    (entry,) = wait_told(log, of_kind("ask"), what="the ask's notice")
    asks = [(s, r) for s, _, r in av.records() if r["kind"] == "ask"]
    assert len(asks) == 1
    seq, ask = asks[0]
    event = entry["event"]
    assert (event["kind"], event["venture"], event["seq"], event["summary"]) == ("ask", "queue", seq, ask["summary"])
    assert event["answer"].endswith(f"--home {av.home} approve {seq}") and event["deny"].endswith(f"deny {seq}")
    assert event["home"] == av.home
    assert entry["stdin"].startswith(f"avsm: queue asks (#{seq}) on {av.home}\n")
    assert ask["summary"] in entry["stdin"] and ask["question"] in entry["stdin"] and event["answer"] in entry["stdin"]
    assert entry["cwd"] == av.home and entry["pgid"] not in (os.getpgid(av.proc.pid), os.getpgid(0))   # its own group
    answer = av.cli(*event["answer"].split(" --home ")[1].split()[1:])       # the answer, as told, works
    assert answer.returncode == 0, answer.stderr
    av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "approval"], what="the approval")
    time.sleep(0.3)
    assert len(of_kind("ask")(told(log))) == 1 and notify_records(av) == []


def test_the_notify_command_sees_no_key(bindir, home, workdir):
    """KEYS-06 and issue 14 item 2: whatever keys avsmd's environment holds and HOME/keys lists, the notify
    command's environment holds none of them: only PATH, HOME, the locale and AVSM_HOME, AVSM_EVENT."""
    secrets = {"ANTHROPIC_API_KEY": "sk-ant-env-secret", "OPENAI_API_KEY": "sk-openai-env-secret",
               "GITHUB_TOKEN": "ghp-env-secret", "AWS_SECRET_ACCESS_KEY": "aws-env-secret", "anthropic": "sk-bare"}
    av = Avsm(bindir, home, env=secrets)
    log = notify_on(av, workdir, extra="default: far\nbackends:\n  far: {kind: anthropic, model: m, key: anthropic}\n")
    write(os.path.join(home, "keys"), "anthropic=sk-ant-keys-file-secret\n", 0o600)
    d = make_venture(workdir, "queue", ASKING, ASKING_FILES)
    try:
        av.start()
        assert av.cli("add", d).returncode == 0
        (entry,) = wait_told(log, of_kind("ask"))
        env = entry["env"]
        for name, value in list(secrets.items()) + [("keys", "sk-ant-keys-file-secret")]:
            assert name not in env and not any(value in v for v in env.values()), name
        assert env["AVSM_HOME"] == home and "PATH" in env and json.loads(env["AVSM_EVENT"]) == entry["event"]
        assert not any(re.search("KEY|TOKEN|SECRET", k, re.I) for k in env), sorted(env)
        shell = {"PWD", "SHLVL", "_", "OLDPWD"}         # what sh -c sets itself
        assert set(env) <= set(avsm.NOTIFY_ENV) | {"AVSM_HOME", "AVSM_EVENT"} | shell | {k for k in env if k.startswith("LC_")}
    finally:
        code, _ = av.stop()
        assert code == 0
    check_ledger_safety(home)


def test_a_guard_pause_and_a_stuck_venture_are_told(av, workdir):
    """Issue 14 items 1 and 2, GUARD-03: a venture a guard paused is told (kind pause, the guard, avsm resume V);
    a venture stuck at its cap is told by its one stuck ask (kind stuck), once over many reports."""
    log = notify_on(av, workdir)
    guarded = make_venture(workdir, "dial", """purpose: Keep the dial low within a budget.
metric: dial
controller: {kind: threshold, above: 10, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: true}
guards:
  - {name: spend, run: ./spend, above: 100, then: pause}
""", {"report": "#!/bin/sh\necho 5\n", "lower": "#!/bin/sh\nexit 0\n", "spend": "#!/bin/sh\necho 150\n"})
    stuck = make_venture(workdir, "backlog", ASKING.replace("reversible: false", "reversible: true"), ASKING_FILES)
    av.start()
    assert av.cli("add", guarded).returncode == 0 and av.cli("add", stuck).returncode == 0
    (pause,) = wait_told(log, of_kind("pause"), what="the guard's pause")
    (pause_seq, pause_record), = [(s, r) for s, _, r in av.records() if r["kind"] == "pause"]
    ev = pause["event"]
    assert (ev["venture"], ev["seq"], ev["guard"], ev["summary"]) == ("dial", pause_seq, "spend", pause_record["summary"])
    assert ev["answer"].endswith("resume dial") and f"dial was paused (#{pause_seq})" in pause["stdin"]
    (entry,) = wait_told(log, of_kind("stuck"), what="the stuck ask")
    (ask_seq, ask), = [(s, r) for s, _, r in av.records() if r["kind"] == "ask"]
    assert ask["about"] == "stuck" and entry["event"]["seq"] == ask_seq and entry["event"]["venture"] == "backlog"
    assert entry["event"]["answer"].endswith(f"approve {ask_seq}") and "is stuck" in entry["stdin"]
    av.wait_for(lambda rs: len([r for _, _, r in rs if r["kind"] == "report" and r["venture"] == "backlog"]) >= 4,
                what="more reports past the bound")
    assert [e["event"]["kind"] for e in told(log)].count("stuck") == 1
    assert len(told(log)) == 2


def test_a_venture_that_cannot_run_and_avsmd_stopping_are_told(av, workdir):
    """VENTURE-14, RUN-07 and issue 14 item 2: avsmd stopping is told (kind stop, the way to start it again) before
    avsmd exits, and its `stop` record stays the last; avsmd started beside a venture whose mandate no longer
    holds tells that it cannot run."""
    log = notify_on(av, workdir)
    d = make_venture(workdir, "queue", ASKING.replace("above: 10", "above: 100"), ASKING_FILES)
    av.start()
    assert av.cli("add", d).returncode == 0
    code, took = av.stop()
    assert code == 0 and took < 10
    (stop,) = of_kind("stop")(told(log))                  # told before avsmd exited
    assert stop["event"]["venture"] == "self" and stop["event"]["seq"] is None and "SIGTERM" in stop["event"]["summary"]
    assert stop["event"]["answer"].endswith(f"avsmd --home {av.home}") and stop["stdin"].startswith("avsm: avsmd is stopping")
    assert av.records()[-1][2]["kind"] == "stop"
    os.unlink(os.path.join(d, "report"))
    av.start()
    (entry,) = wait_told(log, of_kind("cannot-run"), what="the cannot-run notice")
    ev = entry["event"]
    assert ev["venture"] == "queue" and "report" in ev["summary"] and "missing" in ev["summary"]
    assert ev["answer"].endswith("doctor") and "queue cannot run" in entry["stdin"]


def test_the_ledger_unwritable_is_told_once_by_the_warden_or_avsmd(av, workdir):
    """RUN-19 and issue 14 item 2: a ledger that cannot be written (its journal cannot be made: a directory stands
    at its name) is told once, while what would write waits; avsmd finding it so too (its record of the warden's
    restart cannot be written) tells nothing more."""
    log = notify_on(av, workdir)
    d = make_venture(workdir, "queue", ASKING.replace("above: 10", "above: 100"), ASKING_FILES)
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "report"], what="a report")
    journal = os.path.join(av.home, "ledger.db-journal")
    os.mkdir(journal)
    try:
        (entry,) = wait_told(log, of_kind("ledger-down"), what="the ledger's notice")
        os.kill(av.wardens()[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while "avsmd: could not append to the ledger" not in av.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "avsmd: could not append to the ledger" in av.stderr()
    finally:
        os.rmdir(journal)
    ev = entry["event"]
    assert ev["venture"] == "self" and ev["seq"] is None and "cannot be written" in ev["summary"]
    assert ev["answer"].endswith("doctor") and "the ledger cannot be written" in entry["stdin"]
    av.wait_for(lambda rs: len(av.wardens()) == 1, what="the warden again")
    assert len(of_kind("ledger-down")(told(log))) == 1


def test_a_failing_notify_is_written_once_per_stretch_and_the_daemon_goes_on(av, workdir):
    """Issue 14 item 2: a notify command that exits 1 is written once (its status and output), not at each notice
    it fails, not tried again for a notice; reports go on; when it works again one record says how many it missed."""
    log = notify_on(av, workdir)
    write(os.path.join(workdir, "tell", "FAIL"), "")
    a = make_venture(workdir, "a", ASKING, ASKING_FILES)
    b = make_venture(workdir, "b", ASKING, ASKING_FILES)
    c = make_venture(workdir, "c", ASKING, ASKING_FILES)
    av.start()
    assert av.cli("add", a).returncode == 0 and av.cli("add", b).returncode == 0
    wait_told(log, lambda es: len(of_kind("ask")(es)) >= 2, what="two asks told")
    (seq, failed), = av.wait_for(lambda rs: [(s, r) for s, _, r in rs if r["kind"] == "notify"], what="the failure")
    assert failed["ok"] is False and failed["status"] == "exit 1" and "the mail host is down" in failed["note"]
    assert failed["venture"] == "self" and failed["claim"] == "measured"
    reports = len([r for _, _, r in av.records() if r["kind"] == "report"])
    av.wait_for(lambda rs: len([r for _, _, r in rs if r["kind"] == "report"]) >= reports + 2, what="reports going on")
    assert len(notify_records(av)) == 1 and len(told(log)) == 2              # not tried again
    os.unlink(os.path.join(workdir, "tell", "FAIL"))
    assert av.cli("add", c).returncode == 0
    wait_told(log, lambda es: len(es) == 3, what="the third notice")
    works = av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "notify" and r["ok"]], what="works again")
    assert works[0]["failed"] == 2 and works[0]["venture"] == "self"
    assert len(notify_records(av)) == 2


def test_a_hanging_notify_is_ended_at_its_time_limit_once_per_stretch(av, workdir):
    """Issue 14 item 2, RUN-12: a notify command past its time limit has its group ended and is written once for
    the stretch its next failure (exit 1) belongs to; avsmd serves and the tick goes on meanwhile (reports); the
    next notice starts after it, and the first that works says two were missed."""
    log = notify_on(av, workdir, timeout="2s")
    write(os.path.join(workdir, "tell", "HANG1"), "")
    write(os.path.join(workdir, "tell", "FAIL"), "")
    a, b, c = (make_venture(workdir, name, ASKING, ASKING_FILES) for name in "abc")
    av.start()
    assert av.cli("add", a).returncode == 0 and av.cli("add", b).returncode == 0
    first = wait_told(log, lambda es: es, what="the first notice")[0]
    started = time.monotonic()
    reports = len([r for _, _, r in av.records() if r["kind"] == "report"])
    assert av.cli("status").returncode == 0                              # avsmd serves while its notify hangs,
    assert not notify_records(av) and len(told(log)) == 1, "the notify did not hang"     # answered within the hang
    (_, failed), = av.wait_for(lambda rs: [(s, r) for s, _, r in rs if r["kind"] == "notify"], what="the failure")
    assert failed["ok"] is False and failed["status"] == "it took longer than its time limit of 2s"
    assert time.monotonic() - started < 5
    assert len([r for _, _, r in av.records() if r["kind"] == "report"]) > reports    # the tick went on
    fields = stat_fields(first["pid"])
    assert fields is None or fields[0] == b"Z", "the hanging notify's group was not ended"
    wait_told(log, lambda es: len(es) >= 2, what="the second notice")     # it fails (exit 1): no record of its own
    os.unlink(os.path.join(workdir, "tell", "FAIL"))
    assert av.cli("add", c).returncode == 0
    works = av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "notify" and r["ok"]], what="works again")
    assert works[0]["failed"] == 2 and len(notify_records(av)) == 2 and len(told(log)) == 3


def test_avsmd_t_shows_and_T_prints_the_notify_command(av, workdir):
    """CLI-04, CONFIG-04 and issue 14 item 2: avsmd -T prints notify: as it stands (null when absent), and what it
    prints reads back the same; avsmd -t says what the notify command runs for, or that nobody is told, and exits
    78 naming the fix when its program is missing."""
    r = av.daemon_cmd("-T")
    assert r.returncode == 0 and "notify: null" in r.stdout.splitlines()
    t = av.daemon_cmd("-t")
    assert t.returncode == 0 and "notify: not set" in t.stdout
    notify_on(av, workdir, timeout="2m")
    script = os.path.join(workdir, "tell", "notify")
    r = av.daemon_cmd("-T")
    assert r.returncode == 0 and f'notify: {{run: "{script}", timeout: "2m"}}' in r.stdout.splitlines(), r.stdout
    printed = write(os.path.join(workdir, "printed.yaml"), r.stdout)
    assert av.daemon_cmd("-f", printed, "-T").stdout == r.stdout
    t = av.daemon_cmd("-t")
    assert t.returncode == 0 and f"notify: {script} runs for each new ask" in t.stdout and "time limit 2m" in t.stdout
    write(os.path.join(av.home, "config.yaml"), "notify: ./no-such-notify\n")
    t = av.daemon_cmd("-t")
    assert t.returncode == 78 and "no-such-notify is missing" in t.stderr and "create it or fix the path" in t.stderr


@pytest.mark.parametrize("text, says", [("notify: 5\n", "not 5"), ('notify: ""\n', "notify is empty"),
                                        ("notify: [mail]\n", 'not ["mail"]')])
def test_a_notify_that_does_not_hold_stops_avsmd_at_start(av, text, says):
    """CONFIG-10, EXIT-10: a notify: of the wrong type, or empty, is refused by avsmd -T, -t and avsmd itself
    with 78 at config.yaml:line:col and the fix; the daemon does not start."""
    write(os.path.join(av.home, "config.yaml"), text)
    for args in (["-T"], ["-t"], []):
        r = av.daemon_cmd(*args, timeout=15)
        assert r.returncode == 78, (args, r.returncode, r.stderr)
        assert re.search(r"config\.yaml:1:\d+: ", r.stderr) and says in r.stderr, r.stderr
        assert 'notify: "mail -s avsm you@example.com"' in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(os.path.join(av.home, "sock"))


def test_the_readmes_notify_examples_hold():
    """CONFIG-03 and issue 14 item 2: each notify: line the README's *Being told* section shows is a config that
    holds, and its text example begins as notice_message writes one."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as fh:
        section = fh.read().split("\n## Being told\n", 1)[1].split("\n## ", 1)[0]
    blocks = [block.split("\n", 1)[1] for block in section.split("```")[1::2]]
    lines = [line for line in blocks[0].splitlines() if line.startswith("notify:")]
    assert len(lines) == 2
    assert [avsm.parse_config(line + "\n")["notify"] for line in lines] == [
        {"run": "mail -s avsm you@example.com", "timeout": 30}, {"run": "/home/you/bin/post-to-chat", "timeout": 10}]
    home = "/home/you/.local/state/avsmd"
    text, _ = avsm.notice_message(avsm.notice_of(17, ASK), {"avsm": "avsm"}, home)
    assert blocks[1] == text
