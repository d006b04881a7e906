"""Snapshots (issue 33 item 1): the warden's fold kept at a seq in HOME/snapshots/SEQ.json, tied to the chain by a
`snapshot` record of its seq and sha256, so a start folds only the records after it.

A kernel test folds a ledger of every kind of record from the first record and from a snapshot at each seq, and
compares the two states field by field (types included); the others run the real avsmd and client on a ledger
built through avsm's own writer (tests/bench/bench_doctor.py's builder), long enough for a start to write one."""

import hashlib
import os
import re
import sys
import time

import pytest

from conftest import Avsm

import avsm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
import bench_doctor  # noqa: E402

MANDATE = """purpose: p
metric: m
controller: {kind: threshold, above: 50, action: up, deadband: 5}
cadence: 10s
world: ./world
permitted:
  - {name: up, run: ./up, check: ./check, cap: 10/hour, reversible: true, expects: down 3 within 1}
guards:
  - {name: errors, run: ./errors, above: 6}
audits:
  - {name: refunds, run: ./refunds, worse: up, tolerance: 2}
readings:
  - {name: waiting, run: ./waiting, lines: address}
"""


def every_kind():
    """Return [(seq, at, record)]: a venture's life with a record of every kind RECORD_KINDS names, an ask left
    open, approvals counted, a lever's run left without its outcome, a ratchet ask citing its forecast."""
    r, v = avsm.new_record, "v"
    proof = {"rule": "controller", "premises": [1, 7], "trigger": 7}
    records = [
        r("mandate", v, directory="/x", sha256=avsm.text_sha256(MANDATE), text=MANDATE),
        r("report", v, metric="m", value=10, status="trusted", plausible=True, note=""),
        r("guard.errors", v, value=1, status="trusted", plausible=True),
        r("audit.refunds", v, value=1.5, status="trusted", plausible=True, note=""),
        r("reading.waiting", v, claim="measured", value=3, status="trusted", plausible=True, fields={"a": 1}),
        r("prediction", v, report=2, median=11.0, p10=9.0, p90=13.0, members=[9.0, 11.0, 13.0]),
        r("report", v, metric="m", value=60, status="trusted", plausible=True, note=""),
        r("calibration.m", v, prediction=6, report=7, crps=0.5, skill=0.1, coverage=1.0, persistence=0.7),
        r("world", v, ok=False, note="it failed"),
        r("ask", v, about="lever", lever="up", by="controller", side="above", question="run up?"),
        r("approval", v, claim="declared", ask=10, lever="up", payload=None),
        r("begun", v, lever="up", what="check"),
        r("check", v, lever="up", ok=True, status="exit 0", note=""),
        r("action", v, lever="up", proof=proof, by="controller", side="above", check=13),
        r("outcome", v, lever="up", action=14, ok=True, status="exit 0", duration=0.1, note=""),
        r("report", v, metric="m", value=56, status="trusted", plausible=True, note=""),
        r("effect", v, lever="up", action=14, verdict="hit", why="down 4"),
        r("refusal", v, lever="up", why="its cap", by="controller", side="above", stuck="cap", clears_at=99),
        r("proposal", v, claim="inferred", by="model", choice="action", lever="up", backend="b"),
        r("proposal", v, claim="declared", by="person", choice="action", lever="up", payload="x"),
        r("unusable", v, backend="b", by="model", why="no answer"),
        r("look", v, backend="b", by="model", look="l", answer="a"),
        r("fact", v, action=14, fact="f", source="s"),
        r("begun", v, lever="up", what="forecast"),
        r("forecast", v, days=7, seeds=8, lever="up", median=50.0, p10=40.0, p90=60.0),
        r("ask", v, about="lever", lever="up", by="self", forecast=25, question="delegate up? (ratchet)"),
        r("ask", v, about="revoke", lever="up", question="up missed; run it again?"),
        r("denial", v, claim="declared", ask=27, lever="up"),
        r("ask", v, about="stuck", by="self", lever="up", side="above", reason="cap", question="stuck"),
        r("resolved", v, ask=29),
        r("ask", v, about="implausible", reading="m", question="implausible?", canary=False),
        r("canary", v, ask=31, passed=True),
        r("report", v, metric="m", value=9000, status="implausible", plausible=False, note="jump"),
        r("pause", v),
        r("resume", v, claim="declared"),
        r("start", v, pid=7, command="./up"),
        r("exit", v, status=0, pid=7, uptime=3),
        r("escalation", v, **{"from": "a", "to": "b", "why": "w"}),
        r("answer", v, escalation=38, cited=[], note="n"),
        r("action", v, lever="up", proof=dict(proof, premises=[1, 16], trigger=16), by="controller", side="above"),
        r("start", "self", pid=1), r("stop", "self", pid=1), r("ledger", "self"),
        r("restart", "self", process="warden", restart_in=1), r("sweep", "self", groups=[]),
        r("cut", "self", before=9, backup="b"), r("notify", "self", ok=True, failed=0),
        r("metrics", "self", ok=True, failed=0, textfile="/m.prom"),
        r("snapshot", "self", seq=3, sha256="0" * 64, code="0" * 64),
    ]
    # a kind added to RECORD_KINDS needs its record above, where its venture's life has it
    covered = {("self." if rec["venture"] == "self" else "") + rec["kind"] for rec in records}
    covered |= {k.partition(".")[0] + "." for k in covered if "." in k and not k.startswith("self.")}
    assert set(avsm.RECORD_KINDS) <= covered, set(avsm.RECORD_KINDS) - covered
    return [(seq, 1000 + 10 * seq, record) for seq, record in enumerate(records, 1)]


def typed(value):
    """`value` with every container's type said (a set as a sorted list): tuple and list, 1 and 1.0 differ."""
    if isinstance(value, avsm.History):
        return ["History", [typed(pair) for pair in value]]
    if isinstance(value, dict):
        return ["dict", sorted(([typed(k), typed(v)] for k, v in value.items()), key=repr)]
    if isinstance(value, (set, frozenset)):
        return [type(value).__name__, sorted((typed(v) for v in value), key=repr)]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [typed(v) for v in value]]
    return [type(value).__name__, value]


def fields(states):
    """Every field of every state (its slots and own attributes) but the parsed mandate, typed."""
    return {name: {f: typed(getattr(s, f)) for f in [*avsm.VentureState.__slots__, *vars(s)]
                   if f not in ("mandate", "__dict__") and hasattr(s, f)} for name, s in states.items()}


def fold(rows, states=None, counted=None):
    states, counted = {} if states is None else states, {} if counted is None else counted
    for seq, at, record in rows:
        avsm.fold_ledger(states, seq, at, record)
        avsm.count_self(counted, record)
    return states, counted


def test_a_fold_from_a_snapshot_at_any_seq_is_the_fold_from_the_first_record():
    """Issue 33 item 1: for every record kind, a snapshot taken after any record, written as JSON and read back,
    then folded with the records after it, is the fold from the first record: every field of the state, its type
    too (tuples, int keys, sets, History), the metrics' counters, with an ask open, approvals counted, a lever's run
    in flight and a ratchet ask's forecast. Before: no snapshot to start from."""
    rows = every_kind()
    whole, counted = fold(rows)
    assert whole["v"].open_asks and whole["v"].approvals and whole["v"].running and whole["v"].grants
    for cut in range(len(rows) + 1):
        states, again = avsm.states_of(avsm.snapshot_text(cut, *fold(rows[:cut])))
        states, again = fold(rows[cut:], states, again)
        assert fields(states) == fields(whole), f"a snapshot at #{cut}"
        assert again == counted
        assert (states["v"].mandate is None) == (whole["v"].mandate is None) if "v" in states else cut == 0


def test_a_snapshot_is_never_a_premise():
    """Issue 33 item 1: the gate cites records, never a snapshot of their fold: an action whose proof cites the
    snapshot record does not re-check."""
    rows = every_kind()
    records = {seq: (at, record) for seq, at, record in rows}
    seq, at, action = next(row for row in rows if row[2]["kind"] == "action")
    snapshot = next(s for s, _, r in rows if r["kind"] == "snapshot")
    cited = dict(action, proof=dict(action["proof"], premises=action["proof"]["premises"] + [snapshot]))
    records[snapshot + 100] = (at, cited)
    problems = avsm.check_proof(snapshot + 100, at, cited, records)
    assert any(f"#{snapshot}" in p for p in problems), problems


def test_why_re_checks_an_action_from_a_snapshot_before_it(workdir):
    """Issue 33 item 6: `why` folds the action's venture from the newest snapshot before it, not from the first
    record: with the fold kept at any seq before each of a built ledger's gated actions (and only the venture's
    records after it, and the premises), check_proof says what it says folding from the first record: it
    re-checks. Before: check_proof folded from the first record only."""
    home = built_home(workdir)
    db = avsm.open_ledger_ro(os.path.join(home, "ledger.db"))
    rows = list(avsm.read_records(db))
    db.close()
    everything = {seq: (at, record) for seq, at, record in rows}
    actions = [(seq, at, record) for seq, at, record in rows if record["kind"] == "action"]
    assert len(actions) >= 5
    for seq, at, action in actions[:5]:
        assert avsm.check_proof(seq, at, action, everything) == []
        for cut in (1, 2, seq // 2, seq - 1):
            kept = avsm.snapshot_text(cut, *fold(rows[:cut]))
            records = {s: everything[s] for s in everything if cut < s <= seq and
                       everything[s][1]["venture"] == action["venture"]}
            records.update({p: everything[p] for p in action["proof"]["premises"]})
            assert avsm.check_proof(seq, at, action, records, since=(cut, avsm.states_of(kept)[0])) == [], cut


def built_home(workdir, records=3000):
    """A home whose ledger holds `records` records of two ventures (bench_doctor's builder: reports, and the
    controller's gated runs), its last an hour old."""
    home = os.path.join(workdir, "h")
    bench_doctor.build(home, workdir, records, 2, start=int(time.time()) - records - 3600)
    return home


def ledger_rows(home, kind):
    db = avsm.open_ledger_ro(os.path.join(home, "ledger.db"))
    try:
        return [(s, r) for s, _, r in avsm.read_records(db) if r["kind"] == kind]
    finally:
        db.close()


def answers(av):
    """What status and asks say, ages aside (the same fold answers the same, a second later)."""
    return [re.sub(r"\b\d+[smhd] ago", "ago", av.cli(*args).stdout) for args in (["status"], ["asks"])]


def test_a_start_writes_a_snapshot_and_the_next_folds_from_it(bindir, workdir):
    """Issue 33 item 1: a start that folded more than SNAPSHOT_MIN records writes the fold to
    HOME/snapshots/SEQ.json (0600) and a `snapshot` record of its seq and sha256; the next start folds from it and
    answers as a start from the first record does (both ventures paused, so nothing new is read; an ask open);
    doctor compares it with its own fold (ok). Before: no snapshot."""
    home = built_home(workdir)
    ledger = avsm.Ledger(os.path.join(home, "ledger.db"))
    for record in (avsm.new_record("pause", "v0", claim="declared", summary="paused"),
                   avsm.new_record("pause", "v1", claim="declared", summary="paused"),
                   avsm.new_record("ask", "v1", about="lever", lever="reset", question="reset?", summary="ask")):
        ledger.append(record, int(time.time()))
    ledger.close()
    av = Avsm(bindir, home)
    av.start()
    [(seq, record)] = ledger_rows(home, "snapshot")
    path = avsm.snapshot_path(home, record["seq"])
    assert record["venture"] == "self" and record["claim"] == "measured" and record["seq"] < seq
    with open(path, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == record["sha256"]
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert av.stop()[0] == 0
    av.start()
    from_snapshot = answers(av)
    assert "paused" in from_snapshot[0] and "reset?" in from_snapshot[1]
    assert "is ignored" not in av.stderr()
    assert av.stop()[0] == 0
    doctor = av.cli("doctor")
    assert f"ok    snapshot #{record['seq']} ({path}) is the ledger's fold" in doctor.stdout, doctor.stdout
    os.rename(os.path.join(home, "snapshots"), os.path.join(workdir, "aside"))
    av.start()
    assert from_snapshot == answers(av)
    assert av.stop()[0] == 0


def started_once(bindir, workdir):
    """A built home that avsmd started on and stopped, so that it wrote one snapshot: (home, the Avsm, (the
    snapshot record's seq, the record))."""
    home = built_home(workdir)
    av = Avsm(bindir, home)
    av.start()
    assert av.stop()[0] == 0
    [snapshot] = ledger_rows(home, "snapshot")
    return home, av, snapshot


def test_a_changed_snapshot_is_ignored_and_doctor_fails_on_it(bindir, workdir):
    """Issue 33 item 1: a snapshot whose bytes were changed (a venture's pause flipped in it) is ignored at start
    with one line on stderr, and the fold starts from the first record, so the venture still runs (and `avsm
    status` with avsmd stopped says the same); doctor fails 65 naming the snapshot's seq and file and the fix.
    Before: nothing read or checked a snapshot."""
    home, av, (at, record) = started_once(bindir, workdir)
    path = avsm.snapshot_path(home, record["seq"])
    with open(path) as fh:
        text = fh.read()
    assert '["paused",false]' in text
    with open(path, "w") as fh:
        fh.write(text.replace('["paused",false]', '["paused",true] ', 1))
    offline = av.cli("status")          # no avsmd: the client folds the ledger, from a good snapshot only
    assert offline.returncode == 69 and "is ignored" in offline.stderr, offline.stderr
    assert "v0: was running" in offline.stdout and "v1: was running" in offline.stdout, offline.stdout
    av.start()
    assert av.stderr().count(f"snapshot #{record['seq']} (record #{at}) is ignored") == 1, av.stderr()
    assert "v0: running" in av.cli("status").stdout and "v1: running" in av.cli("status").stdout
    assert av.stop()[0] == 0
    doctor = av.cli("doctor")
    assert doctor.returncode == 65, doctor.stdout
    assert f"FAIL  snapshot #{record['seq']} (record #{at}): {path} does not hash" in doctor.stdout
    assert f"fix: rm {path}" in doctor.stdout


def test_doctor_fails_on_a_snapshot_that_is_not_the_fold(bindir, workdir):
    """Issue 33 item 1: a snapshot whose bytes hash to its record but whose state is not the ledger's fold to its
    seq (a venture's approvals changed, and a record of the changed file's sha256 appended) is 65 in doctor, naming
    the snapshot and the fix; the fold itself is what doctor compares with."""
    home, av, (_, record) = started_once(bindir, workdir)
    path = avsm.snapshot_path(home, record["seq"])
    with open(path) as fh:
        states, counted = avsm.states_of(fh.read())
    states["v1"].approvals = {"reset": 3}
    data = avsm.snapshot_text(record["seq"], states, counted).encode()
    with open(path, "wb") as fh:
        fh.write(data)
    ledger = avsm.Ledger(os.path.join(home, "ledger.db"))
    ledger.append(avsm.new_record("snapshot", "self", seq=record["seq"], sha256=hashlib.sha256(data).hexdigest(),
                                  code=record["code"], summary="changed"), int(time.time()))
    ledger.close()
    doctor = av.cli("doctor")
    assert doctor.returncode == 65, doctor.stdout
    assert f"FAIL  snapshot #{record['seq']} ({path}) is not the ledger's fold to #{record['seq']}" in doctor.stdout, \
        doctor.stdout
    assert f"fix: rm {path}" in doctor.stdout


def test_a_start_checks_the_chain_from_its_snapshot_and_doctor_checks_all(bindir, workdir):
    """Issue 33 item 1, LEDGER-16: a start reads only the records after its snapshot, and checks that much of
    the chain: a record after it that does not chain stops avsmd (65, named), as before; one before it is read by
    no start, and doctor, which reads the whole ledger, names it (65). Before: every start read every record."""
    from test_doctor import tamper
    home, av, (at, record) = started_once(bindir, workdir)
    tamper(home, 10, '"count = ', '"count: ')
    av.start()
    assert av.stop()[0] == 0
    doctor = av.cli("doctor")
    assert doctor.returncode == 65 and "FAIL  record #10 does not read" in doctor.stdout, doctor.stdout
    tamper(home, at + 1, '"summary":"', '"summary":"!')
    started = av.daemon_cmd(timeout=20)
    assert started.returncode == 65 and f"record #{at + 1} of" in started.stderr, started.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_snapshot_that_is_no_regular_file_is_passed_over_not_read(bindir, workdir, kind):
    """Issue 33 item 1, hostile: a snapshot file replaced by a FIFO (whose open would wait for a writer) or by a
    link to /dev/zero (which never ends) is passed over at start, with one line, for the first record, and
    doctor notes it is not compared, without hanging. Before: the start waited on the FIFO, or read /dev/zero until memory
    ran out."""
    home, av, (at, record) = started_once(bindir, workdir)
    path = avsm.snapshot_path(home, record["seq"])
    os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        os.symlink("/dev/zero", path)
    av.start()
    assert av.stderr().count(f"snapshot #{record['seq']} (record #{at}) is ignored") == 1, av.stderr()
    assert "v0: running" in av.cli("status").stdout
    assert av.stop()[0] == 0
    doctor = av.cli("doctor", timeout=120)
    assert "note  1 snapshot(s) the ledger names are not compared" in doctor.stdout, doctor.stdout
