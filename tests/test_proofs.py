"""Forged ledgers: one gate decides and re-checks. A real avsmd adopts a venture and stops; then records are
appended by hand with plain sqlite3, through the ledger's triggers and correctly chained, each action shaped
exactly like one the warden writes (its proof is what the gate gives when the breach is hidden from it). Each
breach of one rule the gate has must make `avsm why` say `re-checks: no` with the reason and `avsm doctor`
exit 65; the same ledger without the breach passes both. PROOF-02 PROOF-03 PROOF-04 PROOF-05 LEVER-03
LEVER-04 LEVER-16 PAUSE-02 GUARD-05 DOCTOR-01 (issue 10)."""

import copy
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

import avsm
from conftest import Avsm, make_venture

V = "shop"
MANDATE = """\
purpose: Keep the count below ten.
metric: count
controller: {kind: threshold, above: 10, action: reset}
cadence: 1h
permitted:
  - {name: reset, run: ./reset, cap: 1/hour, reversible: true}
  - {name: buy, run: ./buy, cap: 10/day, reversible: true, delegated: true, takes: json, budget: {field: qty, max: 100, per: 1d}}
  - {name: wipe, run: ./wipe, cap: 5/day, reversible: false}
forbidden: [rm]
guards:
  - {name: disk, run: cat disk, above: 90}
"""
OK = "#!/bin/sh\nexit 0\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A home whose ledger a real avsmd wrote: the venture adopted, its first report and guard reading."""
    import tempfile
    top = tempfile.mkdtemp(prefix="avp", dir="/tmp")
    bindir = os.path.join(top, "b")
    os.makedirs(bindir)
    for name in ("avsm", "avsmd"):
        os.symlink(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "avsm.py"),
                   os.path.join(bindir, name))
    venture = make_venture(top, V, MANDATE, {"report": "#!/bin/sh\necho 5\n", "reset": OK, "buy": OK, "wipe": OK})
    with open(os.path.join(venture, "disk"), "w") as fh:
        fh.write("10\n")
    home = os.path.join(top, "h")
    av = Avsm(bindir, home)
    av.start()
    assert av.cli("add", venture).returncode == 0
    av.wait_for(lambda rs: any(r["kind"] == "report" for _, _, r in rs)
                and any(r["kind"] == "guard.disk" for _, _, r in rs), what="the first report and guard reading")
    code, _ = av.stop()
    assert code == 0
    yield bindir, home, top
    shutil.rmtree(top, ignore_errors=True)


class Forge:
    """Records appended after the base ledger: actions get the proof the gate gives on what it was shown.

    hidden=True writes a record the forger keeps from the gate (the breach); phantom=True shows the gate a
    record that is not written (yet)."""

    def __init__(self, rows):
        self.base = rows
        self.last_seq, self.at = rows[-1][0], rows[-1][1] + 10
        self.shown = {}
        for seq, at, r in rows:
            avsm.fold_ledger(self.shown, seq, at, r)
        self.rows = []
        self.genuine = {r["kind"]: r for _, _, r in rows if r.get("venture") == V}

    def add(self, record, dt=1, hidden=False, phantom=False):
        self.at += dt
        if phantom:
            avsm.fold_ledger(self.shown, 10 ** 9, self.at, record)
            return None
        self.last_seq += 1
        self.rows.append([self.last_seq, self.at, record])
        if not hidden:
            avsm.fold_ledger(self.shown, self.last_seq, self.at, record)
        return self.last_seq

    def report(self, value, dt=1):
        r = dict(self.genuine["report"], value=value, summary=f"count = {value}")
        return self.add(r, dt)

    def guard(self, value, **kw):
        r = dict(self.genuine["guard.disk"], value=value, past=value > 90, summary=f"disk = {value}")
        return self.add(r, **kw)

    def act(self, lever, basis, approval=None, payload=None, trigger=None, by="controller", dt=1, change=None):
        state = self.shown[V]
        verdict = avsm.prove(state, lever, self.at + dt, basis, trigger=trigger, approval=approval, payload=payload)
        assert verdict.ok, verdict.why
        record = {"kind": "action", "claim": "measured", "venture": V, "lever": lever, "proof": verdict.proof,
                  "by": by, "summary": f"{lever} runs", "basis": verdict.asked["basis"]}
        if approval is not None:
            record["approval"] = approval
        if payload is not None:
            record["payload"] = payload
        if by == "controller":
            record["side"] = "above"
        record = copy.deepcopy(record)
        if change:
            change(record)
        return self.add(record, dt)

    def outcome(self, lever, action, **kw):
        return self.add({"kind": "outcome", "claim": "measured", "venture": V, "lever": lever, "action": action,
                         "ok": True, "status": "exit 0", "duration": 0, "note": "", "summary": f"{lever} ok"}, **kw)

    def crossed(self, dt=1, value=12, cite=None, kind="threshold", why=None):
        seq = self.report(value, dt)
        cite = cite or [seq]
        shown = ", ".join(f"#{c}" for c in cite)
        return (kind, cite, [f"report{'s' if len(cite) > 1 else ''} {shown}: {why or f'count {value} > 10'}"])

    def adopt(self, text):
        """Adopt another mandate for the venture, as `avsm add` of an edited mandate.yaml writes it."""
        return self.add(dict(self.genuine["mandate"], text=text, sha256=hashlib.sha256(text.encode()).hexdigest()))

    def propose(self, lever, dt=1, **fields):
        return self.add(dict({"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action",
                              "backend": "m", "lever": lever, "summary": f"a model proposes {lever}"}, **fields), dt)

    def ask(self, lever):
        return self.add({"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": lever,
                         "by": "controller", "question": f"run {lever}?", "summary": f"run {lever}?"})

    def approve(self, ask, lever, **kw):
        return self.add({"kind": "approval", "claim": "declared", "venture": V, "ask": ask, "lever": lever,
                         "payload": None, "edited": False, "summary": f"a person approved {lever} (ask #{ask})"}, **kw)


def over_budget(f, breach):
    first = f.act("buy", ("permitted", [], []), payload={"qty": 60}, trigger=f.add(
        {"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action", "lever": "buy", "payload": {"qty": 60},
         "summary": "a model proposes buy"}))
    f.outcome("buy", first)
    qty = 50 if breach else 40
    trigger = f.add({"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action", "lever": "buy",
                     "payload": {"qty": qty}, "summary": "a model proposes buy"})
    f.act("buy", ("permitted", [], []), payload={"qty": 40}, trigger=trigger,
          change=lambda r: r.update(payload={"qty": qty}) if breach else None)
    return "budget"


def while_paused(f, breach):
    f.add({"kind": "pause", "claim": "declared", "venture": V, "by": "person", "summary": f"a person paused {V}"},
          hidden=breach)
    if not breach:
        f.add({"kind": "resume", "claim": "declared", "venture": V, "by": "person", "summary": f"a person resumed {V}"})
    f.act("reset", f.crossed())
    return "paused"


def while_running(f, breach):
    first = f.act("buy", ("permitted", [], []), payload={"qty": 1}, trigger=f.add(
        {"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action", "lever": "buy", "payload": {"qty": 1},
         "summary": "a model proposes buy"}))
    f.outcome("buy", first, phantom=breach)
    trigger = f.add({"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action", "lever": "buy",
                     "payload": {"qty": 2}, "summary": "a model proposes buy"})
    f.act("buy", ("permitted", [], []), payload={"qty": 2}, trigger=trigger)
    if breach:
        f.outcome("buy", first)
    return "still running"


def guard_past(f, breach):
    f.guard(95 if breach else 20, hidden=breach)
    f.act("reset", f.crossed())
    return "guard disk reads past its bound"


def over_cap(f, breach):
    first = f.act("reset", f.crossed())
    f.outcome("reset", first)
    at = f.at
    f.act("reset", f.crossed(dt=3700), change=(lambda r: None))
    if breach:      # the same action, written 100 s after the first instead of an hour and more
        f.rows[-2][1] = at + 50
        f.rows[-1][1] = at + 100
    return "cap"


def irreversible_unapproved(f, breach):
    ask = f.ask("wipe")
    approval = f.approve(ask, "wipe")

    def drop(r):
        r["proof"]["premises"].remove(approval)
        r["proof"]["steps"] = [s for s in r["proof"]["steps"] if "approval" not in s]
        del r["approval"]
    f.act("wipe", ("approval", [], [f"ask #{ask}: run wipe?"]), approval=approval, trigger=ask, by="person",
          change=drop if breach else None)
    return "irreversible"


def wrong_payload(f, breach):
    trigger = f.add({"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action", "lever": "buy",
                     "payload": "60" if breach else {"qty": 60}, "summary": "a model proposes buy"})
    f.act("buy", ("permitted", [], []), payload={"qty": 60}, trigger=trigger,
          change=lambda r: r.update(payload="60") if breach else None)
    return "payload must be an object"


def forbidden(f, breach):
    f.act("reset", f.crossed(), change=lambda r: r.update(lever="rm") if breach else None)
    return "forbidden"


def inferred_premise(f, breach):
    proposal = f.add({"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action", "lever": "reset",
                      "summary": "a model proposes reset"})
    f.act("reset", f.crossed(), change=lambda r: r["proof"]["premises"].append(proposal) if breach else None)
    return "inferred"


def approval_twice(f, breach):
    ask = f.ask("wipe")
    first_approval = f.approve(ask, "wipe")
    first = f.act("wipe", ("approval", [], [f"ask #{ask}: run wipe?"]), approval=first_approval, trigger=ask, by="person")
    f.outcome("wipe", first)
    ask2 = f.ask("wipe")
    second = f.approve(ask2, "wipe", phantom=breach)     # the forger shows the gate an approval never written

    def reuse(r):
        r["approval"] = first_approval
        r["proof"]["premises"] = [first_approval if p == 10 ** 9 else p for p in r["proof"]["premises"]]
        r["proof"]["steps"] = [s.replace(f"#{10 ** 9}", f"#{first_approval}") for s in r["proof"]["steps"]]
    approval = second if not breach else 10 ** 9
    f.act("wipe", ("approval", [], [f"ask #{ask2}: run wipe?"]), approval=approval, trigger=ask2, by="person",
          change=reuse if breach else None)
    return "unspent approval"


# The basis re-checked by the function that made it (issue 25): each of these passed the re-check while it
# counted crossing reports alone, though the controller (decide), the guard's rule or proposal_rule, folded to the
# action, calls for nothing. CTRL-02 CTRL-03 CTRL-04 GUARD-05 WORLD-08 PROOF-04.

def deadband_twice(f, breach):
    f.adopt(MANDATE.replace("action: reset}", "action: reset, deadband: 3}"))
    first = f.act("reset", f.crossed())
    f.outcome("reset", first)
    if not breach:
        f.report(6)                 # back inside by the deadband (<= 7): the next excursion may act
    f.act("reset", f.crossed(dt=3700, value=11))
    return "deadband has not re-armed"


def stale_crossing(f, breach):
    basis = f.crossed()
    if breach:
        f.report(5)                 # the latest trusted report reads inside the bound
    else:
        basis = f.crossed()
    f.act("reset", basis)
    return "the latest report is #"


def hold_broken(f, breach):
    f.adopt(MANDATE.replace("action: reset}", "action: reset, hold: 2}"))
    first = f.report(12 if breach else 5)
    middle = f.report(5 if breach else 12)
    cite = [first, f.last_seq + 1] if breach else [middle, f.last_seq + 1]
    f.act("reset", f.crossed(cite=cite, why="count 12 > 10 for 2 reports in a row"))
    return "hold 2 wants 2 trusted reports past the bound in a row"


BAND = MANDATE.replace("controller: {kind: threshold, above: 10, action: reset}",
                       "controller: {kind: band, low: 4, high: 10, below: wipe, above: reset}")


def band_stale(f, breach):
    f.adopt(BAND)
    basis = f.crossed(kind="band")
    f.report(7 if breach else 11)   # breach: back inside the band; clean: still above, cited below
    if not breach:
        basis = ("band", [f.last_seq], [f"report #{f.last_seq}: count 11 > 10"])
    f.act("reset", basis)
    return "the latest report is #"


def unwind_again(f, breach):
    f.adopt(MANDATE.replace("above: 90}", "above: 90, unwind: {action: reset}}"))
    for round_ in range(2):
        reading = f.guard(95, dt=3700)
        action = f.act("reset", ("unwind", [reading], [f"guard disk reading #{reading} is past its bound"]), by="guard",
                       change=lambda r: r.update(guard="disk"))
        f.outcome("reset", action)
        if not breach:
            f.guard(20)             # back inside: the next reading past the bound is a new episode
    return "unwind already ran ok in this episode"


MODEL = MANDATE.replace("controller: {kind: threshold, above: 10, action: reset}",
                        "controller: {kind: model}\ncalibration: 0.1")


def ranking_below_bar(f, breach):
    f.adopt(MODEL)
    trigger = f.propose("reset", **({"ranking": True} if breach else {}))
    f.act("reset", ("permitted", [], [f"proposal #{trigger} (inferred) prompted this"]), trigger=trigger, by="model",
          change=lambda r: r.update(proposal=trigger))
    return "waits for a person"


def proposal_replayed(f, breach):
    f.adopt(MANDATE.replace("controller: {kind: threshold, above: 10, action: reset}", "controller: {kind: classifier}"))
    trigger = f.propose("reset")
    first = f.act("reset", ("permitted", [], [f"proposal #{trigger} (inferred) prompted this"]), trigger=trigger, by="model")
    f.outcome("reset", first)
    again = trigger if breach else f.propose("reset", dt=3700)
    f.act("reset", ("permitted", [], [f"proposal #{again} (inferred) prompted this"]), trigger=again, by="model",
          dt=3700 if breach else 1)
    return "a proposal is gated once"


CASES = [over_budget, while_paused, while_running, guard_past, over_cap, irreversible_unapproved, wrong_payload,
         forbidden, inferred_premise, approval_twice, deadband_twice, stale_crossing, hold_broken, band_stale,
         unwind_again, ranking_below_bar, proposal_replayed]


def write_ledger(home, rows):
    """Append `rows` to HOME/ledger.db the way anyone can: plain sqlite3 INSERTs through the triggers, chained."""
    db = sqlite3.connect(os.path.join(home, "ledger.db"), isolation_level=None)
    prev = (db.execute("SELECT hash FROM records ORDER BY seq DESC LIMIT 1").fetchone() or ["0" * 64])[0]
    db.execute("BEGIN IMMEDIATE")
    for seq, at, record in rows:
        text = json.dumps(record, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{prev}\n{seq}\n{at}\n{text}".encode()).hexdigest()
        db.execute("INSERT INTO records (seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)", (seq, at, prev, digest, text))
        prev = digest
    db.execute("COMMIT")
    db.close()


@pytest.mark.parametrize("breach", [False, True], ids=["clean", "breach"])
@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_forged_action_does_not_recheck(base, case, breach):
    bindir, home0, top = base
    home = os.path.join(top, f"{case.__name__[:6]}{int(breach)}")
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(home0, home)
    db = avsm.open_ledger_ro(os.path.join(home, "ledger.db"))
    rows = list(avsm.read_records(db))
    db.close()
    forge = Forge(rows)
    reason = case(forge, breach)
    write_ledger(home, forge.rows)
    action = max(seq for seq, _, r in forge.rows if r["kind"] == "action")
    av = Avsm(bindir, home)
    why = av.cli("why", str(action))
    doctor = av.cli("doctor")
    if not breach:
        assert why.returncode == 0 and "re-checks: yes" in why.stdout, why.stdout + why.stderr
        # doctor's one failure on a home no avsmd serves is that (69); it finds nothing wrong with the ledger
        fails = [line for line in doctor.stdout.splitlines() if line.startswith("FAIL")]
        assert doctor.returncode == 69 and fails == [f"FAIL  no avsmd is running on {home}"], doctor.stdout
        assert "ok    every proof in the ledger re-checks" in doctor.stdout
        return
    assert why.returncode == 65, why.stdout + why.stderr
    lines = [line for line in why.stdout.splitlines() if line.startswith("re-checks: no: ")]
    assert lines and any(reason in line for line in lines), why.stdout
    assert "re-checks: yes" not in why.stdout
    assert doctor.returncode == 65, doctor.stdout + doctor.stderr
    assert f"action #{action}" in doctor.stdout + doctor.stderr
