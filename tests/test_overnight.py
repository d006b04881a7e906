"""Leaving it running overnight (issue 14 items 3 and 4): `avsm summary` tells what happened per venture from
the ledger alone, avsmd running or not; `avsm status` shows one line per venture with a sparkline of its last
trusted reports (ASCII where the output or the locale is not UTF-8), the detail under `status VENTURE` and
`-v`, and with avsmd stopped says so, shows what the ledger holds, and exits 69."""

import json
import os
import re
import pytest

import avsm
from conftest import Avsm, make_venture, write
from test_daemon import of

BLOCKS = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"     # the spec's block characters, lowest first

NIGHT = """\
purpose: Keep the backlog under ten.
metric: backlog
controller: {kind: threshold, above: 10, action: flush}
cadence: 1s
permitted:
  - {name: flush, run: ./flush, cap: 1/hour, reversible: true}
guards:
  - {name: load, run: ./load, above: 50, then: ask}
"""


def night(workdir):
    """A venture whose lever runs once and is then at its cap (a stuck refusal and its ask), whose guard reads
    from the file `load` beside it."""
    d = make_venture(workdir, "queue", NIGHT, {"report": "#!/bin/sh\necho 20\n", "flush": "#!/bin/sh\nexit 0\n",
                                              "load": "#!/bin/sh\ncat load.txt\n"})
    write(os.path.join(d, "load.txt"), "5\n")
    return d


def put(d, name, text):
    write(os.path.join(d, name + ".new"), text)
    os.replace(os.path.join(d, name + ".new"), os.path.join(d, name))


def paragraph(text, venture):
    """The lines of `venture`'s paragraph in a summary."""
    lines = text.splitlines()
    start = lines.index(venture)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def test_summary_tells_a_scripted_night_with_avsmd_running_and_stopped(av, workdir):
    """Issue 14 item 3 (CLI-11, LEDGER-01 read-only): a lever run, a refusal at its cap, an ask approved and one
    still open (a guard's episode, then: ask) each show in the venture's paragraph with their seqs and the
    command that answers the open ask; the same summary comes with avsmd stopped, which it says."""
    d = night(workdir)
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: [s for s, r in of(rs, "ask", "queue") if r["about"] == "stuck"] and rs, 15, "the stuck ask")
    (action, _), = of(recs, "action", "queue")
    (stuck, _), = [(s, r) for s, r in of(recs, "ask", "queue") if r["about"] == "stuck"]
    (refusal, _), = [(s, r) for s, r in of(recs, "refusal", "queue") if r.get("stuck") == "cap"]
    assert av.cli("approve", str(stuck)).returncode == 0
    put(d, "load.txt", "80\n")
    recs = av.wait_for(lambda rs: [s for s, r in of(rs, "ask", "queue") if r["about"] == "guard"] and rs, 15, "the guard's ask")
    (guard_ask, ask), = [(s, r) for s, r in of(recs, "ask", "queue") if r["about"] == "guard"]
    episode = ask["episode"]

    running = av.cli("summary")
    assert running.returncode == 0, running.stderr
    text = running.stdout
    assert text.startswith("summary of the last 24h: #1..#") and f"avsmd: running (pid {av.proc.pid})" in text, text
    queue = paragraph(text, "queue")
    said = "\n".join(queue)
    assert f"  lever flush: ran 1 time(s), 1 ok: #{action}" in queue, said
    assert re.search(r"^  refusals: \d+, by reason:$", said, re.M), said
    assert re.search(rf"^    1 x flush: flush reached its cap 1/hour: .*\(#{refusal}\)$", said, re.M), said
    assert re.search(rf"^  asks: 2 raised \(#{stuck}, #{guard_ask}\), 1 answered: 1 approved \(#{stuck}\), 1 still open$",
                     said, re.M), said
    assert re.search(rf"^  guard load: \d+ reading\(s\), 1 episode\(s\) past its bound \(#{episode}\)$", said, re.M), said
    assert re.search(r"^  metric backlog: \d+ trusted report\(s\): first 20, last 20, min 20, max 20$", said, re.M), said
    assert f"  needs a person: ask #{guard_ask}: guard load past its bound (#{episode})" in said, said
    assert f"-> avsm approve {guard_ask} or avsm deny {guard_ask}" in said, said
    assert f"ask #{stuck}" not in said.split("needs a person")[1], "an answered ask needs nobody"

    assert av.stop()[0] == 0
    stopped = av.cli("summary")
    assert stopped.returncode == 0 and stopped.stderr == "", stopped
    assert "avsmd: not running; nothing runs until" in stopped.stdout
    again = paragraph(stopped.stdout, "queue")
    assert [line for line in again if not line.startswith("  metric") and "reading(s)" not in line and "refusals:" not in line
            and not line.startswith("    ")] == \
        [line for line in queue if not line.startswith("  metric") and "reading(s)" not in line and "refusals:" not in line
         and not line.startswith("    ")], (queue, again)

    # --since: a record number, a duration, and the refusals of values that are neither
    last = av.records()[-1][0]
    after = av.cli("summary", "--since", str(guard_ask))
    assert after.returncode == 0 and after.stdout.startswith(f"summary of the records after #{guard_ask}: #{guard_ask + 1}..#{last}"), after.stdout
    assert "asks: 0 raised, 0 answered, 1 still open" in after.stdout and f"ask #{guard_ask}" in after.stdout
    assert "lever flush" not in after.stdout, "the run before the span is not in it"
    assert av.cli("summary", f"--since=#{action - 1}").stdout.count("lever flush: ran 1 time(s)") == 1
    assert av.cli("summary", "--since", "7d").stdout.startswith("summary of the last 7d: #1..")
    empty = av.cli("summary", "--since", str(last))
    assert empty.returncode == 0 and "no records" in empty.stdout.splitlines()[0] and "needs a person: ask" in empty.stdout
    past = av.cli("summary", "--since", str(last + 1))
    assert past.returncode == 65 and f"past the last record (#{last})" in past.stderr and past.stdout == "", past


def test_summary_refuses_a_since_that_is_neither_a_duration_nor_a_record(av):
    """Issue 14 item 3 (EXIT-02, DESIGN's order of exit codes): a --since that is no duration and no record number
    is bad usage, 64, with the fix, found before the ledger is looked for (a home with none is 66)."""
    for args, words in ((["--since", "1h30"], "write 90m"), (["--since", "0s"], "more than zero"),
                        (["--since", "yesterday"], "such as 10s"), (["--since"], "needs a duration"),
                        (["--since=-3"], "such as 10s"), (["--sinc", "1d"], "usage: avsm summary [--since DURATION|SEQ]")):
        r = av.cli("summary", *args)
        assert r.returncode == 64 and words in r.stderr and r.stdout == "", (args, r)
    r = av.cli("summary", "--since", "7d")
    assert r.returncode == 66 and "does not exist" in r.stderr, r
    assert av.cli("summary", "--help").stdout.startswith("usage: avsm [--home DIR] summary [--since DURATION|SEQ]")
    assert not os.path.exists(av.home)


def test_summarize_is_a_function_of_records():
    """Issue 14 item 3, the kernel alone: records in, the summary out. Runs and their outcomes, refusals grouped by
    reason whatever their numbers, an ask answered and one open (raised before the span: still open at its end),
    a guard's episodes, effects written (late, miss) and a hit, which writes no record, found by the kernel's
    own judge; run's restarts; the metric over trusted reports only."""
    mandate = """\
purpose: p
metric: m
controller: {kind: threshold, above: 10, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: true, expects: down within 1}
guards:
  - {name: g, run: ./g, above: 5}
run: ./serve
"""
    rows, seq = [], 0

    def put(record, at=None):
        nonlocal seq
        seq += 1
        rows.append((seq, at or 1000 + seq, {"summary": "s", "venture": "v", **record}))
        return seq

    def report(value, status="trusted"):
        return put({"kind": "report", "claim": "measured", "metric": "m", "value": value, "status": status,
                    "plausible": status == "trusted", "note": ""})

    put({"kind": "mandate", "claim": "declared", "directory": "/v", "text": mandate, "sha256": "x"})
    early = put({"kind": "ask", "claim": "measured", "about": "backoff", "question": "look?", "summary": "run keeps dying"})
    for value in (5, 6, 5, 6, 5):            # lever-free history: the drift is known, the noise small
        report(value)
    since = seq
    report(12)
    act = put({"kind": "action", "claim": "measured", "lever": "lower", "proof": {}, "by": "controller"})
    put({"kind": "outcome", "claim": "measured", "lever": "lower", "action": act, "ok": True, "status": "exit 0", "duration": 0, "note": ""})
    report(2)                                # down by 10 within 1: a hit, which writes nothing
    failed = put({"kind": "action", "claim": "measured", "lever": "lower", "proof": {}, "by": "controller"})
    put({"kind": "outcome", "claim": "measured", "lever": "lower", "action": failed, "ok": False, "status": "exit 1", "duration": 0, "note": ""})
    lone = put({"kind": "action", "claim": "measured", "lever": "lower", "proof": {}, "by": "controller"})
    r1 = put({"kind": "refusal", "claim": "measured", "lever": "lower", "why": "lower reached its cap 60/hour: 60 runs in the window"})
    r2 = put({"kind": "refusal", "claim": "measured", "lever": "lower", "why": "lower reached its cap 60/hour: 61 runs in the window"})
    r3 = put({"kind": "refusal", "claim": "measured", "lever": "lower", "why": "guard g reads past its bound (since #9)"})
    asked = put({"kind": "ask", "claim": "measured", "about": "lever", "lever": "lower", "question": "q?"})
    answer = put({"kind": "approval", "claim": "declared", "ask": asked})
    for value, past, status in ((9, True, "trusted"), (9, True, "trusted"), (1, False, "trusted"), (None, False, "failed"), (8, True, "trusted")):
        put({"kind": "guard.g", "claim": "measured", "value": value, "status": status, "plausible": status == "trusted", "past": past})
    put({"kind": "effect", "claim": "measured", "lever": "lower", "action": failed, "verdict": "late", "why": "w"})
    restarted = put({"kind": "exit", "claim": "measured", "pid": 1, "status": "exit 1", "uptime": 1, "restart_in": 0})
    put({"kind": "exit", "claim": "measured", "pid": 2, "status": "exit 0", "uptime": 1, "restart_in": None})
    report(None, "failed")
    put({"kind": "start", "claim": "measured", "venture": "self"})     # the daemon's own life is no venture's
    s = avsm.summarize(rows, since)
    assert s.first == (since + 1, 1000 + since + 1) and s.last == (seq, 1000 + seq) and set(s.ventures) == {"v"}
    v = s.ventures["v"]
    assert v["levers"] == {"lower": {"runs": [act, failed, lone], "ok": [act], "failed": [failed]}}
    groups = sorted((g["count"], g["seqs"]) for g in v["refusals"].values())
    assert groups == [(1, [r3]), (2, [r1, r2])]
    assert v["raised"] == [asked] and v["answered"] == [(asked, "approval", answer)] and list(v["open"]) == [early]
    assert v["guards"]["g"]["episodes"] == [answer + 1, answer + 5] and v["guards"]["g"]["readings"] == 5
    assert v["effects"] == {"hit": [act], "late": [failed]}
    assert [again for _, again, _ in v["exits"]] == [True, False] and v["exits"][0][0] == restarted
    assert v["trusted"] == [12, 2] and v["untrusted"] == 1 and v["last_report"][1] == "failed"
    needs = [what for what, command in avsm.needs_person(v, "v")]
    assert needs[0].startswith(f"ask #{early}: run keeps dying") and "its last report" in needs[1] and len(needs) == 2


def test_a_trusted_report_decodes_as_json_loads_does():
    """Issue 14 item 3, speed: the canonical text of a trusted report decodes to what json.loads gives but its
    summary; any other text (an escape in a string, another kind, another status, a key more) is json.loads's,
    and a number the pattern admits but JSON does not (1-2) is refused as json.loads refuses it, never a traceback."""
    def stored(**fields):
        return avsm.canonical(dict({"kind": "report", "claim": "measured", "venture": "v-1.x", "metric": "count",
                                    "value": 5, "status": "trusted", "plausible": True, "note": "", "summary": "count = 5"}, **fields))
    for text in (stored(), stored(value=1.5), stored(value=-2e-07), stored(value=1e+300), stored(value=0)):
        want = json.loads(text)
        del want["summary"]
        got = avsm.decode_record(text)
        assert got == want and type(got["value"]) is type(want["value"]), (text, got)
    for text in (stored(summary='say "hi"'), stored(metric="c\u00e9"), stored(status="failed", value=None),
                 stored(note="x"), stored(past=True), stored(kind="guard.x"), avsm.canonical({"kind": "ask", "summary": "s"})):
        assert avsm.decode_record(text) == json.loads(text), text
    for bad in ("1-2", "1e", "1..5", "-"):   # the shape's number class admits what no JSON number is: refused as json.loads does
        with pytest.raises(ValueError):
            avsm.decode_record(stored().replace('"value":5', f'"value":{bad}'))


def test_sparkline_scales_between_the_least_and_greatest():
    """Issue 14 item 4: one block a value, lowest to highest; all equal is the middle; ASCII has the same heights."""
    assert avsm.sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == BLOCKS
    assert avsm.sparkline([0, 10], ascii=True) == "_#"
    assert avsm.sparkline([3, 3, 3]) == BLOCKS[3] * 3 and avsm.sparkline([]) == ""
    assert [avsm.format_age(s) for s in (0, 59, 119, 120, 7199, 7200, 172799, 172800, -3)] == \
        ["0s", "59s", "119s", "2m", "119m", "2h", "47h", "2d", "0s"]


GLANCE = """\
purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 100, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: true}
"""

RISING = "#!/bin/sh\nn=$(cat .n 2>/dev/null || echo 0); echo $((n+1)) > .n; echo $((n % 8))\n"


def glance(workdir, name):
    return make_venture(workdir, name, GLANCE, {"report": RISING, "lower": "#!/bin/sh\nexit 0\n"})


def in_utf8(av):
    """The client's environment with a UTF-8 locale and no other locale variable (whatever the test runner has)."""
    av.env = {k: v for k, v in av.env.items() if k not in ("LC_ALL", "LC_CTYPE", "LANG")}
    av.env["LANG"] = "C.UTF-8"


def test_status_is_one_line_per_venture_with_a_sparkline(av, workdir):
    """Issue 14 item 4 (CLI-07, CLI-12): one line per venture, `NAME: STATE` first, the last trusted value and its
    age, a sparkline of the last trusted reports in block characters, levers against caps and open asks; ASCII
    heights where LANG is C or the output encoding is not UTF-8; the detail under `status VENTURE` and `-v`;
    an unknown venture is 65, two names or an unknown option 64."""
    in_utf8(av)
    av.start()
    for name in ("alpha", "beta.long"):
        assert av.cli("add", glance(workdir, name)).returncode == 0
    av.wait_for(lambda rs: len(of(rs, "report", "beta.long")) >= 3 and len(of(rs, "report", "alpha")) >= 3, 15, "three reports each")
    r = av.cli("status")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("alpha: running  ") and lines[1].startswith("beta.long: running  "), lines
    for line in lines:
        spark = re.search(f"[{BLOCKS}]+", line)
        assert spark and len(spark[0]) >= 3 and spark[0][0] == BLOCKS[0], line     # 0, 1, 2, ... rising from the lowest
        assert re.search(r"  \d \(\d+s ago\)  ", line) and "lower: 0 of 60 per 1h  asks: 0" in line, line
    assert lines[0].index("(") == lines[1].index("("), "the columns line up"
    assert "last report #" not in r.stdout, "the detail is under -v"
    env = dict(av.env)
    for extra in ({"LANG": "C"}, {"LANG": "C.UTF-8", "PYTHONIOENCODING": "ascii"}, {"LC_ALL": "POSIX", "LANG": "C.UTF-8"}):
        av.env = dict(env, **extra)
        plain = av.cli("status")
        assert plain.returncode == 0 and plain.stdout.isascii() and re.search(r"  [_.~=+*#-]{3,} ", plain.stdout), (extra, plain)
    av.env = dict(env, LANG="en_US.UTF-8", LC_CTYPE="C.UTF-8")
    assert re.search(f"[{BLOCKS}]{{3,}}", av.cli("status").stdout)

    one = av.cli("status", "alpha").stdout.splitlines()
    assert one[0].startswith("alpha: running  ") and one[1] == "" and one[2] == "alpha: running", one
    assert one[3].startswith("  last report #") and "  lever lower: 0 of 60 per 1h" in one and "beta.long" not in "\n".join(one)
    every = av.cli("status", "-v").stdout.splitlines()
    assert every[0].startswith("alpha: running  ") and every[1].startswith("beta.long: running  ") and every[2] == "", every
    assert every.count("alpha: running") == 1 and every.count("beta.long: running") == 1
    assert av.cli("status", "--", "alpha").stdout.splitlines()[2] == "alpha: running"
    for args, code, words in ((["nosuch"], 65, "no venture is named 'nosuch'"), (["alpha", "beta.long"], 64, "one venture at a time"),
                              (["--bogus"], 64, "usage: avsm status [-v] [VENTURE]")):
        r = av.cli("status", *args)
        assert r.returncode == code and words in r.stderr and r.stdout == "", (args, r)


def test_status_with_avsmd_stopped_shows_the_ledger_and_exits_69(av, workdir):
    """Issue 14 item 4 (EXIT-05, CLI-07): with avsmd stopped, `avsm status` says so on standard error (one line,
    as before) and prints what the ledger holds on standard output: the line of each venture as the ledger left
    it, a paused one paused, and the detail with -v; exit 69. A ledger that cannot be read is said so too."""
    in_utf8(av)
    av.start()
    for name in ("alpha", "beta"):
        assert av.cli("add", glance(workdir, name)).returncode == 0
    av.wait_for(lambda rs: len(of(rs, "report", "beta")) >= 3 and len(of(rs, "report", "alpha")) >= 3, 15, "three reports each")
    assert av.cli("pause", "beta").returncode == 0
    assert av.stop()[0] == 0
    last = av.records()[-1][0]
    r = av.cli("status")
    assert r.returncode == 69 and len(r.stderr.strip().splitlines()) == 1 and "no avsmd is running" in r.stderr, r
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"avsmd is not running: nothing runs; this is what the ledger holds, to #{last} at "), lines
    assert lines[1].startswith("alpha: was running  ") and re.search(f"[{BLOCKS}]{{3,}}", lines[1]), lines
    assert lines[2].startswith("beta: paused  ") and "avsm resume beta starts it again" in lines[2] and len(lines) == 3, lines
    detail = av.cli("status", "-v")
    assert detail.returncode == 69 and "  last report #" in detail.stdout and "\nbeta: paused\n" in detail.stdout
    assert av.cli("status", "nosuch").returncode == 65
    other = Avsm(av.bindir, os.path.join(workdir, "ruined"))
    write(os.path.join(other.home, "ledger.db"), "this is not a database, not at all\n" * 100)
    ruined = other.cli("status")
    assert ruined.returncode == 69 and ruined.stdout == "" and "the ledger cannot be read" in ruined.stderr, ruined
    assert "Traceback" not in ruined.stderr
