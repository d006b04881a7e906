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
    ("a ratchet in hex past 1e300", b"ratchet: " + HUGE_HEX.encode() + b"\n", 1),
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


# ---- the randomized campaign ---------------------------------------------------------
# A seeded generator of report outputs and model replies, against one real avsmd. For each input: no
# process died (avsmd, warden and roles keep their pids), no client exit is 70 (every one here is 0), no
# traceback on avsmd's stderr, and no wrong value: a report, guard, audit or reading holds either null
# or the number an independent reading of the whole output gives (its last non-empty line, split on \n,
# read only when it lies wholly in the last 64 KiB). A reply holding a number past 1e300, NaN or
# Infinity is unusable and nothing runs. At the end the ledger re-verifies and every proof re-checks
# (check_ledger_safety), and only the permitted levers a valid reply or a legitimate crossing asked for ran.

KEPT = 64 * 1024
NUMBER = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?"
CAMPAIGN = """purpose: Read whatever the program prints.
metric: dial
controller: {kind: threshold, above: 1e300, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 1000/hour, reversible: true}
guards:
  - {name: g, run: ./out, above: 1e300, then: ask}
audits:
  - {name: a, run: ./out, worse: up, tolerance: 1e300}
readings:
  - {name: r, run: ./out, lines: address}
"""


def true_value(data):
    """The number a whole output holds, read without avsm's code: None when its last non-empty line is
    not wholly among the last 64 KiB kept, is no number alone, or is NaN or beyond a float."""
    lines = data.split(b"\n")
    end = len(data)
    for line in reversed(lines):
        start = end - len(line)
        text = line.decode("utf-8", "replace").removesuffix("\r")
        if text.strip():
            if len(data) > KEPT and start - 1 < len(data) - KEPT:
                return None             # its line break before it (or its start) is not kept: cut
            s = text.strip()
            if not re.fullmatch(NUMBER, s):
                return None
            v = float(s)
            return None if math.isinf(v) else v
        end = start - 1
    return None


def report_output(rng):
    """A hostile program output: long lines, control characters, huge numbers, non-UTF-8, CRLF."""
    digit = rng.choice("0123456789")
    pad = rng.randrange(KEPT - 40, KEPT + 9000)
    before = rng.choice([b"", b"2\n", b"note line\n", b"a@b.c\n", b"x" * rng.randrange(KEPT - 5, KEPT + 5000) + b"\n"])
    end = rng.choice([b"\n", b"", b"\r\n", b"\n\n  \n"])
    body = rng.choice([
        lambda: str(rng.choice([0, 7, -3, 2.5, 1e-9, 1e300, -1e300, 123456789])).encode(),
        lambda: b"x" + b" " * pad + digit.encode(),
        lambda: b"-" + b"0" * pad + digit.encode(),
        lambda: b"0." + b"0" * pad + digit.encode(),
        lambda: b" " * pad + digit.encode(),
        lambda: digit.encode() + rng.choice([b"\x0c", b"\x0b", b"\x1c", b"\x00", "\u2028".encode(), b"\x85", b"\r"]) + b"1",
        lambda: rng.choice([b"1e400", b"-1e999", b"9" * rng.randrange(300, 6000), b"0x1f", b"1e301", b"nan", b"inf",
                            b"-1" + b"0" * 350, b"1_000", b"+.5", b"5."]),
        lambda: rng.choice([b"5\xff", b"\xff\xfe", b"\xc3", b"caf\xe9 5"]),
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))),
        lambda: b"",
    ])()
    return before + body + end


def number_text(rng, hostile):
    """A JSON number's text: within 1e300, or (hostile) past it, NaN or Infinity."""
    if hostile:
        return rng.choice(["1e999", "-1e999", "1e301", "-1e400", "NaN", "Infinity", "-Infinity",
                           "1" + "0" * rng.randrange(301, 5000), "-9" * 1 + "9" * 400, "1E+309"])
    return rng.choice(["0", "-1", "2.5", "1e300", "-1e300", "1" + "0" * 300, "123456789012345678901234567890", "1e-320"])


def json_value(rng, hostile, depth=0):
    """JSON text of a random value; with `hostile`, one number somewhere in it is past the limit."""
    if hostile and depth >= 2 or depth >= 3 or rng.random() < 0.3:
        return number_text(rng, hostile) if hostile or rng.random() < 0.6 else json.dumps(rng.choice(["x", "", None, True]))
    if rng.random() < 0.5:
        items = [json_value(rng, False, depth + 1) for _ in range(rng.randrange(0, 3))]
        items.insert(rng.randrange(len(items) + 1), json_value(rng, hostile, depth + 1))
        return "[" + ",".join(items) + "]"
    keys = [f'"k{i}":' + json_value(rng, False, depth + 1) for i in range(rng.randrange(0, 3))]
    keys.insert(rng.randrange(len(keys) + 1), '"h":' + json_value(rng, hostile, depth + 1))
    return "{" + ",".join(keys) + "}"


def model_reply(rng):
    """(reply bytes, whether it holds a number past 1e300, NaN or Infinity)."""
    hostile = rng.random() < 0.6
    lever = rng.choice(["lower", "reset", "stop", "rm"])
    shape = rng.choice(["payload", "payload", "why", "choices", "reason"])
    if shape == "payload":
        text = f'{{"choice":"action","action":"{lever}","payload":{{"a":{json_value(rng, hostile)}}}}}'
    elif shape == "why":
        text = f'{{"choice":"why","record":{number_text(rng, hostile) if hostile else rng.randrange(1, 5)}}}'
    elif shape == "choices":
        text = (f'{{"choices":[{{"choice":"nothing"}},{{"choice":"action","action":"lower",'
                f'"payload":{json_value(rng, hostile) if hostile else "{}"}}}]}}')
    else:
        text = f'{{"choice":"nothing","reason":"r","extra":{json_value(rng, hostile)}}}'
    return text.encode(), hostile


def settle_actions(av, seqs):
    """Wait until each action in seqs has its outcome, so that a lever a legitimate reply ran does not end
    inside the next reply's window (its outcome is not that reply's doing)."""
    if seqs:
        av.wait_for(lambda recs: set(seqs) <= {r.get("action") for _, _, r in recs if r["kind"] == "outcome"},
                    20, f"the outcomes of the actions {seqs}")


def campaign_settings(default_n):
    seed = int(os.environ.get("AVSM_HOSTILE_SEED") or random.SystemRandom().randrange(1 << 32))
    n = int(os.environ.get("AVSM_HOSTILE_N") or default_n)
    print(f"hostile-values campaign: AVSM_HOSTILE_SEED={seed} AVSM_HOSTILE_N={n}", file=sys.stderr)
    return seed, n


def run_campaign(av, workdir, seed, n, ventures=4, say=lambda line: None):
    """Run n inputs (about half report outputs, half model replies) of seed `seed`, the report outputs
    read by `ventures` ventures at a time; return the figures and the failures found (each naming its
    input, so it can be replayed). The seed alone fixes the inputs, whatever `ventures` is."""
    rng = random.Random(seed)
    be = Backend(workdir, "mine")
    setup_home(av, COMMAND_CONFIG.format(run=be.run))
    names = [f"r{i}" for i in range(ventures)]
    dirs = {}
    for name in names:
        dirs[name] = make_venture(workdir, name, CAMPAIGN, {"report": OUT, "out": OUT, "lower": LEVER})
        write(os.path.join(dirs[name], "out"), "0\n")
    m = make_venture(workdir, "m", MODEL, {"report": "#!/bin/sh\necho 5\n", "lower": LEVER, "reset": LEVER})
    av.start()
    for d in list(dirs.values()) + [m]:
        add(av, d)
    pids = (av.proc.pid, warden_pid(av), roles_pid(av))
    figures = {"inputs": 0, "report outputs": 0, "replies": 0, "hostile replies": 0, "readings checked": 0,
               "cut or malformed readings": 0, "crashes": 0, "daemon deaths": 0, "wrong values": 0, "exit 70": 0}
    failures = []
    inputs = [("reply" if rng.random() < 0.5 else "report") for _ in range(n)]
    replies = [model_reply(rng) for kind in inputs if kind == "reply"]
    outputs = [report_output(rng) for kind in inputs if kind == "report"]

    def alive(where):
        now = (av.proc.poll() is None and av.proc.pid, av.proc.poll() is None and warden_pid(av),
               av.proc.poll() is None and roles_pid(av))
        if now != pids:
            figures["daemon deaths"] += 1
            failures.append((where, "a process died", pids, now, av.stderr()[-400:]))
            return False
        return True

    for i, (data, hostile) in enumerate(replies):
        be.reply(data)
        before = last_seq(av)
        run = av.cli("decide", "m")
        figures["replies"] += 1
        figures["hostile replies"] += hostile
        figures["exit 70"] += run.returncode == 70
        rows = [(seq, r) for seq, _, r in av.records(before) if r["kind"] != "report" and r["venture"] == "m"]
        new = [r for _, r in rows]
        settle_actions(av, [seq for seq, r in rows if r["kind"] == "action"])
        if run.returncode != 0 or "Traceback" in run.stderr:
            failures.append((f"reply {i}", run.returncode, data[:80], run.stderr[-200:]))
        if hostile and [r["kind"] for r in new] != ["unusable"]:
            failures.append((f"reply {i}", "a hostile number was not unusable", data[:120], [r["kind"] for r in new]))
        if of([(0, 0, r) for r in new], "pause"):
            av.cli("resume", "m")
        if not alive(f"reply {i}"):
            break
    say(f"{figures['replies']} replies done")

    # the report outputs, one to each venture at a time; then two of each one's reports pass
    for start in range(0, len(outputs), ventures):
        batch = list(zip(names, outputs[start:start + ventures]))
        since = last_seq(av)
        previous = {}
        for name, data in batch:
            path = os.path.join(dirs[name], "out")
            with open(path, "rb") as fh:
                previous[name] = true_value(fh.read())
            with open(path + ".new", "wb") as fh:
                fh.write(data)
            os.replace(path + ".new", path)

        def two_rounds(rs):
            got = {name: [r for s, _, r in rs if s > since and r["venture"] == name and r["kind"] == "report"] for name, _ in batch}
            return all(len(v) >= 2 for v in got.values()) and rs
        try:
            av.wait_for(two_rounds, timeout=30, what="two reports of each venture")
            time.sleep(0.6)           # the second round's guard, audit and reading land
        except AssertionError:
            failures.append((f"outputs {start}..", "no two reports within 30 s"))
        recs = av.records(since)
        for k, (name, data) in enumerate(batch):
            figures["report outputs"] += 1
            want = true_value(data)
            figures["cut or malformed readings"] += want is None
            for _, _, r in recs:
                if r["venture"] != name or r["kind"] not in ("report", "guard.g", "audit.a", "reading.r"):
                    continue
                figures["readings checked"] += 1
                v = r["value"]
                if v is not None and v != want and v != previous[name]:
                    figures["wrong values"] += 1
                    failures.append((f"output {start + k} ({name})", r["kind"], v, want, data[:60], len(data)))
        figures["inputs"] = figures["replies"] + figures["report outputs"]
        if not alive(f"outputs {start}.."):
            break
        if start // ventures % 25 == 24:
            say(f"{figures['report outputs']} report outputs done")
    figures["inputs"] = figures["replies"] + figures["report outputs"]
    status = av.cli("status")
    figures["exit 70"] += status.returncode == 70
    if status.returncode != 0:
        failures.append(("status", status.returncode, status.stderr[-300:]))
    if "Traceback" in av.stderr():
        figures["crashes"] += av.stderr().count("Traceback")
        failures.append(("avsmd stderr", av.stderr()[-600:]))
    recs = av.records()
    for s, _, r in recs:
        if r["kind"] == "action" and r["lever"] not in ("lower", "reset"):
            failures.append((f"#{s}", "an action on", r["lever"]))
    for name in names:
        if set(ran(dirs[name])) - {"lower"}:
            failures.append((name, "ran", ran(dirs[name])))
    if set(ran(m)) - {"lower", "reset"}:
        failures.append(("m", "ran", ran(m)))
    return figures, failures


def test_a_seeded_campaign_of_hostile_values(av, workdir):
    """A small seeded run of the campaign (AVSM_HOSTILE_SEED and AVSM_HOSTILE_N replay one): hostile
    report outputs and model replies never end a process, never exit 70 or print a traceback, never
    become a wrong value, and run nothing a legitimate proposal or crossing did not ask for; the ledger
    re-verifies. MODEL-13 REPORT-02 REPORT-03 LEDGER-01 PROOF-02 issue 16 items 6 and 7"""
    seed, n = campaign_settings(12)
    figures, failures = run_campaign(av, workdir, seed, n)
    assert not failures, (f"AVSM_HOSTILE_SEED={seed} AVSM_HOSTILE_N={n}", figures, failures[:10])
    assert figures["daemon deaths"] == figures["crashes"] == figures["wrong values"] == figures["exit 70"] == 0
    check_ledger_safety(av.home)
