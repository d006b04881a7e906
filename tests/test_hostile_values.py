"""Hostile values (issue 16, items 4 to 8): numbers past 1e300 in a mandate, a config, a payload or a
model's reply; configs of the wrong shape or not UTF-8; a program's last line longer than avsm keeps or
split by a form feed; stop given content. Then a seeded randomized campaign of report outputs and model
replies against one real avsmd (AVSM_HOSTILE_SEED and AVSM_HOSTILE_N replay it; the larger run is
tests/bench/bench_hostile_values.py). Black-box: a real avsmd on a short temp home, the real client,
real `command` backends, the ledger read read-only."""

import json
import math
import os
import random
import re
import sys
import time

import pytest

from conftest import check_ledger_safety, make_venture, write
from test_daemon import dial, of, threshold
from test_models import COMMAND_CONFIG, LEVER, Backend, add, last_seq, ran, roles_pid, setup_home, warden_pid

HUGE_HEX = "0x" + "f" * 4000


def added(av, d, code=0):
    run = av.cli("add", d)
    assert run.returncode == code, (run.returncode, run.stdout, run.stderr)
    return run


# ---- 4. one limit on every number ----------------------------------------------------

BAND = """purpose: Keep the dial between two bounds.
metric: dial
controller: {{kind: band, low: {low}, high: 10, below: heat, above: cool}}
cadence: 1s
permitted:
  - {{name: heat, run: ./heat, cap: 60/hour, reversible: true}}
  - {{name: cool, run: ./cool, cap: 60/hour, reversible: true}}
"""

PAST_LIMIT = [
    ("hold in hex", threshold(extra=f", hold: {HUGE_HEX}"), 3),
    ("above: 1e301", threshold().replace("above: 10", "above: 1e301"), 3),
    ("above: -1e999", threshold().replace("above: 10", "above: -1e999"), 3),
    ("a deadband in octal", threshold(extra=", deadband: 0o" + "7" * 400), 3),
    ("5000 decimal digits", threshold().replace("above: 10", "above: " + "9" * 5000), 3),
    ("a band's low in hex", BAND.format(low=HUGE_HEX), 3),
    ("a band's hold in hex", BAND.format(low=1).replace("cool}", f"cool, hold: {HUGE_HEX}}}"), 3),
]


@pytest.mark.parametrize("name,mandate,line", PAST_LIMIT, ids=[p[0] for p in PAST_LIMIT])
def test_a_number_past_1e300_in_a_mandate_is_refused_where_it_stands(av, workdir, name, mandate, line):
    """A number beyond 1e300, in decimal, hex or octal or as a float, is refused, not rounded (README:
    Mandates): `avsm add` exits 65 with mandate.yaml:LINE:COL, the value quoted shortened and the fix, and
    adopts nothing; `avsm status` goes on working; `avsmd -t` on an adopted venture edited so is 78, never
    70. MANDATE-08 EXIT-01 issue 16 item 4"""
    av.start()
    d = dial(workdir, "v", mandate, lower=LEVER, heat=LEVER, cool=LEVER)
    run = added(av, d, 65)
    assert re.search(rf"mandate\.yaml:{line}:\d+: .*beyond 1e300.*write a smaller number", run.stderr), run.stderr
    assert len(run.stderr) < 600 and "Traceback" not in run.stderr
    assert not of(av.records(), "mandate", "v")
    assert av.cli("status").returncode == 0
    # adopt a good one, then edit it past the limit: -t reads it again from its directory
    write(os.path.join(d, "mandate.yaml"), threshold())
    added(av, d)
    write(os.path.join(d, "mandate.yaml"), mandate)
    t = av.daemon_cmd("-t")
    assert t.returncode == 78, (t.returncode, t.stderr[-500:])
    assert "Traceback" not in t.stderr and "beyond 1e300" in t.stderr
    status = av.cli("status")
    assert status.returncode == 0, status.stderr[-300:]


def test_a_payload_number_past_1e300_is_refused_and_the_warden_lives(av, workdir):
    """`avsm propose` with a json payload holding 1e999 (which json reads as infinity) or a 5000-digit
    integer exits 65 naming the number; the warden keeps running and nothing runs. LEVER-09 issue 16 item 4"""
    mandate = threshold(lever=", takes: json")
    d = dial(workdir, "v", mandate, lower=LEVER)
    av.start()
    add(av, d)
    warden = warden_pid(av)
    for text in ('{"a": 1e999}', '{"a": -1e999}', '{"a": 1' + "0" * 5000 + "}", '{"a": NaN}'):
        run = av.cli("propose", "v", "lower", "--payload", "-", input=text)
        assert run.returncode == 65, (text[:20], run.returncode, run.stderr[-300:])
        assert "Traceback" not in run.stderr and len(run.stderr) < 600
        assert warden_pid(av) == warden
    assert av.cli("status").returncode == 0
    assert ran(d) == []


# ---- 5. a config of the wrong shape --------------------------------------------------

BAD_CONFIGS = [
    ("not UTF-8", b"nightly: never\nresearch: caf\xe9\n", 2),
    ("backends a number", b"backends: 5\n", 1),
    ("backends a list", b"backends: [a, b]\n", 1),
    ("backends a list of mappings", b"backends:\n  - {kind: command}\n", 1),
    ("a mapping as kind", b"backends:\n  mine: {kind: {a: 1}, run: ./x}\n", 2),
    ("a list as kind", b"backends:\n  mine: {kind: [command], run: ./x}\n", 2),
    ("backends zero", b"backends: 0\n", 1),
    ("adapters a list", b"adapters: [stripe]\n", 1),
    ("an adapter a number", b"adapters:\n  stripe: 5\n", 2),
    ("a port in hex past 1e300", b"port: " + HUGE_HEX.encode() + b"\n", 1),
    ("a forecast a list", b"forecast: [1, 2]\n", 1),
]


@pytest.mark.parametrize("name,data,line", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_config_of_the_wrong_shape_is_78_naming_its_line(bindir, home, workdir, name, data, line):
    """`avsmd -t -f FILE` and avsmd itself exit 78 naming FILE:LINE:COL and the fix, never 70 with a
    traceback. CONFIG-01 EXIT-01 issue 16 item 5"""
    from conftest import Avsm
    av = Avsm(bindir, home)
    path = os.path.join(workdir, "c.yaml")
    with open(path, "wb") as fh:
        fh.write(data)
    t = av.daemon_cmd("-t", "-f", path)
    assert t.returncode == 78, (t.returncode, t.stderr[-500:])
    assert re.search(rf"{re.escape(path)}:{line}:\d+: \S", t.stderr), t.stderr
    assert "Traceback" not in t.stderr and len(t.stderr) < 600
    os.makedirs(home, mode=0o700)
    with open(os.path.join(home, "config.yaml"), "wb") as fh:
        fh.write(data)
    run = av.daemon_cmd(timeout=20)
    assert run.returncode == 78, (run.returncode, run.stderr[-500:])
    assert f"config.yaml:{line}:" in run.stderr and "Traceback" not in run.stderr


# ---- 6. a reply's numbers ------------------------------------------------------------

MODEL = """purpose: Keep the dial low, whatever the model says.
metric: dial
controller: {kind: model}
cadence: 1h
permitted:
  - {name: lower, run: ./lower, cap: 1000/hour, reversible: true, delegated: true, takes: json}
  - {name: reset, run: ./reset, cap: 1000/hour, reversible: true}
"""

DEADLY_NUMBERS = [b'{"choice":"action","action":"lower","payload":{"a":-1e999}}',
                  b'{"choice":"action","action":"lower","payload":{"a":1e999}}',
                  b'{"choice":"action","action":"lower","payload":{"a":[1,2,1e400]}}',
                  b'{"choice":"action","action":"lower","payload":{"a":NaN}}',
                  b'{"choice":"action","action":"lower","payload":{"a":1' + b"0" * 5000 + b'}}',
                  b'{"choice":"action","action":"lower","payload":{"a":1e301}}',
                  b'{"choice":"why","record":1e999}']


def test_a_reply_number_past_1e300_is_unusable_and_the_warden_lives(av, workdir):
    """A model's reply carrying -1e999, 1e999, NaN or a number past 1e300 anywhere is unusable with a
    note naming the number, checked in the roles process before anything else sees it: recorded, nothing
    proposed or run, and the warden, avsmd and the roles process keep their pids.
    MODEL-13 MODEL-22 RUN-09 issue 16 item 6"""
    be = Backend(workdir, "mine")
    setup_home(av, COMMAND_CONFIG.format(run=be.run))
    d = make_venture(workdir, "m", MODEL, {"report": "#!/bin/sh\necho 5\n", "lower": LEVER, "reset": LEVER})
    av.start()
    add(av, d)
    pids = (av.proc.pid, warden_pid(av), roles_pid(av))
    for reply in DEADLY_NUMBERS:
        be.reply(reply)
        before = last_seq(av)
        run = av.cli("decide", "m")
        assert run.returncode == 0, (reply[:60], run.returncode, run.stderr[-300:])
        new = [r for _, _, r in av.records(before) if r["kind"] not in ("report",)]
        assert [r["kind"] for r in new] == ["unusable"], (reply[:60], new)
        assert "number" in new[0]["why"] or "NaN" in new[0]["why"], new[0]
        assert (av.proc.pid, warden_pid(av), roles_pid(av)) == pids
    assert ran(d) == []


# ---- 7. one bounded reader of a program's last line ----------------------------------

READERS = """purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 0.5, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: true}
guards:
  - {name: g, run: ./out, above: 1e300, then: ask}
audits:
  - {name: a, run: ./out, worse: up, tolerance: 1e300}
readings:
  - {name: r, run: ./out, lines: address}
"""
OUT = "#!/bin/sh\ncat out\n"

CUT_OR_SPLIT = [
    ("x, 70000 spaces, 7", b"x" + b" " * 70000 + b"7\n"),
    ("-, 70000 zeros, 5", b"-" + b"0" * 70000 + b"5\n"),
    ("0., 70000 zeros, 5", b"0." + b"0" * 70000 + b"5\n"),
    ("a form feed inside 9 1", b"9\x0c1\n"),
    ("a vertical tab inside 9 1", b"9\x0b1\n"),
    ("a cut line after whole ones", b"3\n" + b"-" + b"0" * 70000 + b"5"),
]


def reading_records(av, since):
    recs = [(s, r) for s, _, r in av.records(since)]
    kinds = ("report", "guard.g", "audit.a", "reading.r")
    return {k: [r for _, r in recs if r["kind"] == k and r["venture"] == "cut"] for k in kinds}


def test_a_cut_or_form_fed_last_line_is_a_failed_reading(av, workdir):
    """A last line longer than the 64 KiB avsm keeps is read as cut, never from its tail: a failed
    report, guard, audit and reading (value null, plausible false, a note saying so), and no lever runs;
    lines end at \\n (and \\r\\n) only, so `9\\x0c1` is not a number rather than 1.
    REPORT-02 REPORT-03 REPORT-06 GUARD-14 issue 16 item 7"""
    d = make_venture(workdir, "cut", READERS, {"report": OUT, "out": OUT, "lower": LEVER})
    write(os.path.join(d, "out"), "0\n")
    av.start()
    add(av, d)
    failures = []
    for name, data in CUT_OR_SPLIT:
        with open(os.path.join(d, "out.new"), "wb") as fh:
            fh.write(data)
        os.replace(os.path.join(d, "out.new"), os.path.join(d, "out"))
        time.sleep(1.2)             # a round that may have read the old file ends first
        since = last_seq(av)
        got = av.wait_for(lambda rs: (lambda g: all(g.values()) and g)(reading_records(av, since)),
                          timeout=15, what=f"every reading of {name}")
        for kind, rs in got.items():
            r = rs[0]
            if r["value"] is not None or r["plausible"] is not False or not r.get("note", "x" if kind == "reading.r" else ""):
                failures.append((name, kind, r["value"], r["plausible"], r.get("note")))
        cut = [r for rs in got.values() for r in rs if "cut" in (r.get("note") or "")]
        if len(data) > 65536 and b"\n" not in data[-65536:].rstrip(b"\n"):
            assert cut, (name, got["report"][0])
    assert not failures, failures
    assert ran(d) == [], "a lever ran on a reading that was not a number"


# ---- 8. stop takes no content --------------------------------------------------------

def test_stop_with_a_payload_is_refused_as_any_lever_without_content(av, workdir):
    """The built-in stop takes no content: given a payload, by a person or a model, it is refused as every
    lever without takes is (a refusal, 65 for a person), and the venture is not paused; stop alone still
    pauses it. LEVER-04 open point 12 issue 16 item 8"""
    be = Backend(workdir, "mine")
    setup_home(av, COMMAND_CONFIG.format(run=be.run))
    d = make_venture(workdir, "m", MODEL, {"report": "#!/bin/sh\necho 5\n", "lower": LEVER, "reset": LEVER})
    av.start()
    add(av, d)
    reset = av.cli("propose", "m", "reset", "--payload", "-", input="x")
    assert reset.returncode == 65 and "takes no content" in reset.stderr, reset.stderr
    run = av.cli("propose", "m", "stop", "--payload", "-", input="x")
    assert run.returncode == 65, (run.returncode, run.stderr)
    assert "stop takes no content" in run.stderr, run.stderr
    be.reply(json.dumps({"choice": "action", "action": "stop", "payload": "now"}))
    before = last_seq(av)
    assert av.cli("decide", "m").returncode == 0
    kinds = [r["kind"] for _, _, r in av.records(before) if r["kind"] != "report"]
    assert kinds == ["proposal", "refusal"], kinds
    assert not of(av.records(), "action", "m") and not of(av.records(), "pause", "m")
    ok = av.cli("propose", "m", "stop")
    assert ok.returncode == 0, ok.stderr
    assert of(av.records(), "pause", "m")
