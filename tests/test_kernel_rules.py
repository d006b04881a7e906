"""The rules of a settled round, in the kernel: records in, intents out, `now` given (issue 10).

Each rule is a generator of Write / Pause / Gate intents over a venture's state. `drive` carries them out the
way the warden does, on literal records: a Write or a Pause is folded with the next seq, a Gate is answered
by the real gate (prove) at `now` and, when it proves the lever, its action is folded too."""

import json
import os
import shutil
import subprocess
import tempfile

import pytest

import avsm
from test_kernel import V, adopt, report, outcome

GUARDED = """\
purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 10, action: lower}
cadence: 10s
permitted:
  - {name: lower, run: ./lower, cap: 2/hour, reversible: true}
  - {name: sell, run: ./sell, cap: 1/hour, reversible: true, takes: json}
  - {name: wipe, run: ./wipe, cap: 5/day, reversible: false}
guards:
  - {name: spend, run: ./spend, above: 100, then: %s}
"""

IRREVERSIBLE = """\
purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 10, action: wipe}
cadence: 10s
permitted:
  - {name: wipe, run: ./wipe, cap: 5/day, reversible: false}
"""

AUDITED = """\
purpose: Keep sales up.
metric: sales
controller: {kind: model}
cadence: 10s
audits:
  - {name: refunds, run: ./refunds, worse: up, tolerance: 2, window: 2}
"""

EXPECTING = """\
purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 10, action: lower}
cadence: 10s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: false, delegated: true, revoke_after: 2, expects: down within 1}
"""


class Ledger:
    """Literal records folded into one venture's state, numbered from 2 (the mandate is #1), one second apart;
    `content`: what the venture's files say of any payload (a Content's answer)."""

    def __init__(self, text):
        self.state = adopt(text)
        self.seq, self.at = 1, 1000
        self.content = None

    def add(self, record):
        self.seq += 1
        self.at += 1
        avsm.fold(self.state, self.seq, self.at, record)
        return self.seq

    def drive(self, intents):
        """Carry out `intents` as the warden does; return [(kind of intent, record or (lever, verdict))]."""
        done, result = [], None
        while True:
            try:
                intent = intents.send(result)
            except StopIteration:
                return done
            result = None
            if isinstance(intent, avsm.Content):
                result = self.content
            elif isinstance(intent, (avsm.Write, avsm.Pause)):
                seq = self.add(intent.record)
                result = seq if isinstance(intent, avsm.Write) else None      # a Write is answered with its seq
                done.append((type(intent).__name__, intent.record))
            else:
                result = avsm.prove(self.state, intent.lever, self.at + 1, intent.basis, trigger=intent.trigger,
                                    approval=intent.approval, payload=intent.payload, check=intent.check)
                done.append(("Gate", (intent.lever, intent.basis, result)))
                if result.ok:
                    self.add(dict({"kind": "action", "claim": "measured", "venture": V, "lever": intent.lever,
                                   "proof": result.proof, "by": intent.by, "summary": intent.summary,
                                   "basis": result.asked["basis"]}, **(intent.extra or {})))

    def guard(self, value, past):
        return self.add({"kind": "guard.spend", "claim": "measured", "venture": V, "value": value, "status": "trusted",
                         "plausible": True, "past": past, "bound": 100, "side": "above", "summary": f"spend = {value}"})


def kinds(done):
    return [(what, r["kind"] if what != "Gate" else r[0]) for what, r in done]


def test_guard_pause_once_per_episode():
    """GUARD-04, GUARD-05: a guard past its bound with then: pause pauses the venture once per episode; the same
    episode read again pauses nothing more; after a resume with the guard still past, it pauses again."""
    led = Ledger(GUARDED % "pause")
    first = led.guard(150, True)
    done = led.drive(avsm.guard_rules(led.state))
    assert kinds(done) == [("Pause", "pause")]
    assert done[0][1]["guard"] == "spend" and done[0][1]["episode"] == first and led.state.paused
    led.guard(160, True)
    assert led.drive(avsm.guard_rules(led.state)) == []
    led.add({"kind": "resume", "claim": "declared", "venture": V, "summary": "resumed"})
    assert kinds(led.drive(avsm.guard_rules(led.state))) == [("Pause", "pause")]


def test_guard_ask_once_then_settled_back_inside():
    """GUARD-07, ASK-03: then: ask asks once for the episode; back inside, the ask is settled."""
    led = Ledger(GUARDED % "ask")
    led.guard(150, True)
    done = led.drive(avsm.guard_rules(led.state))
    assert kinds(done) == [("Write", "ask")] and done[0][1]["about"] == "guard"
    ask = led.seq
    led.guard(170, True)
    assert led.drive(avsm.guard_rules(led.state)) == []
    led.guard(50, False)
    done = led.drive(avsm.guard_rules(led.state))
    assert kinds(done) == [("Write", "resolved")] and done[0][1]["ask"] == ask
    assert ask not in led.state.open_asks


def test_guard_unwind_through_the_gate_once_per_reading():
    """GUARD-10, GUARD-11: a guard's unwind goes through the gate with the reading as its basis, once per
    reading past the bound; a refusal is written."""
    text = (GUARDED % "pause").replace("then: pause}", "then: pause, unwind: {action: sell, payload: {qty: 1}}}")
    led = Ledger(text)
    reading = led.guard(150, True)
    done = led.drive(avsm.guard_rules(led.state))
    assert kinds(done) == [("Pause", "pause"), ("Gate", "sell")]
    lever, basis, verdict = done[1][1]
    assert basis[0] == "unwind" and basis[1] == [reading] and verdict.ok
    assert led.drive(avsm.guard_rules(led.state)) == []          # the same reading: tried already
    reading = led.guard(160, True)                               # a new reading past the bound, the cap 1/hour spent
    done = led.drive(avsm.guard_rules(led.state))
    assert [k for k, _ in done] == ["Gate", "Write"] or kinds(done) == []
    # the first unwind's action is still running (no outcome), so no second try starts until it ends
    assert kinds(done) == []
    led.add(outcome("sell", 4, ok=False))
    reading = led.guard(170, True)
    done = led.drive(avsm.guard_rules(led.state))
    assert kinds(done) == [("Gate", "sell"), ("Write", "refusal")]
    assert "cap" in done[1][1]["why"] and done[1][1]["guard"] == "spend"


def test_audit_asks_once_and_is_settled():
    """AUDIT-02, AUDIT-03: an audit that worsens past its tolerance while the metric improves asks once; when
    it no longer does, its ask is settled."""
    led = Ledger(AUDITED)
    for sales, refunds in ((10, 1), (15, 2), (20, 5)):
        led.add(report(sales))
        led.add({"kind": "audit.refunds", "claim": "measured", "venture": V, "value": refunds, "status": "trusted",
                 "plausible": True, "note": "", "summary": f"audit refunds = {refunds}"})
    done = led.drive(avsm.audit_rules(led.state))
    assert kinds(done) == [("Write", "ask")] and done[0][1]["audit"] == "refunds"
    ask = led.seq
    assert led.drive(avsm.audit_rules(led.state)) == []
    for sales in (30, 40):
        led.add(report(sales))
        led.add({"kind": "audit.refunds", "claim": "measured", "venture": V, "value": 5, "status": "trusted",
                 "plausible": True, "note": "", "summary": "audit refunds = 5"})
    done = led.drive(avsm.audit_rules(led.state))
    assert kinds(done) == [("Write", "resolved")] and done[0][1]["ask"] == ask and done[0][1]["audit"] == "refunds"


def test_effect_misses_suspend_the_delegation():
    """EFFECT-04, EFFECT-09 (revoke_after): a missed expected effect is written; two misses in a row suspend the
    delegation with one ask; the gate then refuses the lever until a person approves."""
    led = Ledger(EXPECTING)
    for value in (20, 21, 20, 21, 20):                            # lever-free history: the drift and noise are known
        led.add(report(value))
    for n in range(2):
        led.add(report(20))
        a = led.add({"kind": "action", "claim": "measured", "venture": V, "lever": "lower", "proof": {"premises": []},
                     "by": "controller", "summary": "lower runs"})
        led.add(outcome("lower", a))
        for _ in range(4):                                        # not down within 1 report, nor late: a miss
            led.add(report(25))
            done = led.drive(avsm.effect_rules(led.state))
            if done:
                break
        assert ("Write", "effect") in kinds(done) and done[0][1]["verdict"] == "miss"
    assert kinds(done) == [("Write", "effect"), ("Write", "ask")] and done[1][1]["about"] == "revoke"
    verdict = avsm.prove(led.state, "lower", led.at + 1, ("threshold", [led.seq - 2], []))
    assert not verdict.ok and "suspended" in verdict.why


def test_implausible_reading_asks_once_then_settled():
    """PLAUS-07: a failed report holds the venture implausible and asks once; a plausible one settles it."""
    led = Ledger(GUARDED % "pause")
    seq = led.add(report(None, status="failed") | {"note": "exit 1"})
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Write", "ask")] and done[0][1]["about"] == "implausible" and done[0][1]["reading"] == seq
    seq = led.add(report(None, status="failed") | {"note": "exit 1"})
    assert led.drive(avsm.settle_round(led.state, seq)) == []
    seq = led.add(report(5))
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Write", "resolved")]


def test_controller_acts_through_the_gate_and_refuses_at_the_cap():
    """CTRL-02, LEVER-03: a trusted report past the bound sends the lever to the gate with the report as its
    basis; at the cap the refusal is written."""
    led = Ledger(GUARDED % "pause")
    ran = []
    for _ in range(3):
        seq = led.add(report(12))
        done = led.drive(avsm.settle_round(led.state, seq))
        ran.append(kinds(done))
        if led.state.running:
            led.add(outcome("lower", led.seq))
        led.add(report(5))                                        # back inside: the next excursion may act
    assert ran[0] == [("Gate", "lower")] and ran[1] == [("Gate", "lower")]
    assert ran[2] == [("Gate", "lower"), ("Write", "refusal"), ("Write", "ask")]


def test_stuck_at_the_cap_is_written_once_with_when_it_clears_and_one_ask():
    """Issue 14 item 1: past the bound with the lever at its cap, the refusal is written once per excursion and
    reason, saying when the cap frees up (the oldest run in the window plus the period), with one ask; later
    reports of the same excursion write nothing; back inside, the ask is settled; nothing runs sooner."""
    led = Ledger(GUARDED % "pause")
    firsts = []
    for _ in range(2):
        seq = led.add(report(12))
        led.drive(avsm.settle_round(led.state, seq))
        firsts.append(led.at)
        led.add(outcome("lower", led.seq))
        led.add(report(5))
    seq = led.add(report(12))
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Gate", "lower"), ("Write", "refusal"), ("Write", "ask")]
    refusal, ask = done[1][1], done[2][1]
    assert refusal["stuck"] == "cap" and refusal["clears_at"] == firsts[0] + 3600
    assert "the next run is possible at" in refusal["summary"] and "raise the cap" in refusal["summary"]
    assert ask["about"] == "stuck" and ask["side"] == "above" and "by" in ask and ask["by"] == "self"
    for value in (13, 14):
        seq = led.add(report(value))
        assert kinds(led.drive(avsm.settle_round(led.state, seq))) == [("Gate", "lower")], "written once"
    assert not led.state.side("above")["asked"], "the stuck ask is no ask of the controller's lever"
    seq = led.add(report(5))
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Write", "resolved")] and not [a for a in led.state.open_asks.values() if a["about"] == "stuck"]


def test_stuck_ends_when_the_lever_is_asked_about_or_runs_again():
    """Stuck (the README's Stuck): an irreversible lever held at its cap is stuck; once the cap frees up and the
    controller asks about it, the venture is no longer stuck (status says so, not the cap's way out), and when a
    person approves that ask and the lever runs, the stuck ask of its side is settled: it ran again."""
    led = Ledger(IRREVERSIBLE.replace("cap: 5/day", "cap: 1/hour"))
    seq = led.add(report(12))
    first = dict(led.drive(avsm.settle_round(led.state, seq)))["Write"]
    ask = led.seq
    led.drive(avsm.approval_rule(led.state, ask, first, {}, led.at + 1))
    led.add(outcome("wipe", led.seq))
    led.add(report(5))
    seq = led.add(report(12))
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Gate", "wipe"), ("Write", "refusal"), ("Write", "ask")] and done[1][1]["stuck"] == "cap"
    stuck = led.seq
    assert avsm.status_row(led.state, led.at).state == "stuck"
    led.at += 3600                                       # the cap frees up
    seq = led.add(report(13))
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Gate", "wipe"), ("Write", "ask")], done
    assert led.state.side("above")["stuck"] is None and avsm.status_row(led.state, led.at).state != "stuck"
    done = led.drive(avsm.approval_rule(led.state, led.seq, done[1][1], {}, led.at + 1))
    assert kinds(done) == [("Write", "approval"), ("Gate", "wipe"), ("Write", "resolved")] and done[1][1][2].ok
    assert done[2][1]["ask"] == stuck and "wipe ran again" in done[2][1]["summary"] and stuck not in led.state.open_asks


def test_an_answered_stuck_ask_is_not_asked_again_in_its_excursion():
    """Issue 22 item 3: a person who answered a stuck ask has seen it: when the reason changes within the same
    excursion (the cap, then the budget) the refusal is written, and no new ask; back inside and out again, a
    new excursion asks again. The question's way out reads as a command to paste, lowercase."""
    led = Ledger(GUARDED % "pause")
    for _ in range(2):
        seq = led.add(report(12))
        led.drive(avsm.settle_round(led.state, seq))
        led.add(outcome("lower", led.seq))
        led.add(report(5))
    seq = led.add(report(12))
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Gate", "lower"), ("Write", "refusal"), ("Write", "ask")]
    assert "; the way out: raise the cap in mandate.yaml" in done[2][1]["question"]
    led.add(done[1][1])
    ask = led.add(done[2][1])
    led.add({"kind": "denial", "claim": "declared", "venture": V, "ask": ask, "summary": "seen"})
    assert led.state.side("above")["seen"]
    led.state.side("above")["stuck"] = "budget"               # as if the budget had held it before
    seq = led.add(report(13))
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Gate", "lower"), ("Write", "refusal")], done
    led.add(done[1][1])
    seq = led.add(report(5))
    led.drive(avsm.settle_round(led.state, seq))
    assert not led.state.side("above")["seen"], "back inside: the excursion is over"


def test_controller_asks_once_per_excursion():
    """LEVER-04, ASK-02 (one ask per excursion, DESIGN): an irreversible lever the controller wants asks once;
    further reports in the same excursion ask nothing, answered or not; back inside, the next excursion asks."""
    led = Ledger(IRREVERSIBLE)
    seq = led.add(report(12))
    done = led.drive(avsm.settle_round(led.state, seq))
    assert kinds(done) == [("Gate", "wipe"), ("Write", "ask")]
    ask = led.seq
    seq = led.add(report(13))
    assert kinds(led.drive(avsm.settle_round(led.state, seq))) == [("Gate", "wipe")]
    led.add({"kind": "denial", "claim": "declared", "venture": V, "ask": ask, "lever": "wipe", "summary": "no"})
    seq = led.add(report(14))
    done = led.drive(avsm.settle_round(led.state, seq))      # stuck: asked once, answered (issue 14 item 1)
    assert kinds(done) == [("Gate", "wipe"), ("Write", "refusal")], "a person who has just answered is not asked again"
    assert done[1][1]["stuck"] == "asked" and "avsm propose v wipe" in done[1][1]["summary"]
    notice = avsm.notice_of(led.seq + 1, done[1][1])          # issue 22 item 3: told once, as a notice
    assert notice["kind"] == "stuck" and notice["answer"] == "avsm propose v wipe"
    seq = led.add(report(15))
    assert kinds(led.drive(avsm.settle_round(led.state, seq))) == [("Gate", "wipe")]
    seq = led.add(report(5))
    assert kinds(led.drive(avsm.settle_round(led.state, seq))) == [], "no stuck ask was written, so none settles"
    seq = led.add(report(12))
    assert kinds(led.drive(avsm.settle_round(led.state, seq))) == [("Gate", "wipe"), ("Write", "ask")]


def test_no_controller_while_paused_or_held():
    """PAUSE-02, PLAUS-07: a paused venture, or one an implausible reading holds, sends nothing to the gate."""
    led = Ledger(GUARDED % "pause")
    led.add({"kind": "pause", "claim": "declared", "venture": V, "summary": "paused"})
    seq = led.add(report(12))
    assert led.drive(avsm.settle_round(led.state, seq)) == []


def test_proposal_rule_asks_runs_or_refuses():
    """MODEL-05, LEVER-04, PROOF-03: a model's action goes to the gate with the proposal as its trigger; an
    irreversible lever or a model's content for an undelegated lever is asked about once; a lever the mandate
    does not permit is refused; a model's ask about a permitted lever becomes an inferred ask."""
    led = Ledger(GUARDED % "pause")
    seq = led.add({"kind": "proposal", "claim": "inferred", "venture": V, "lever": "lower", "summary": "p"})
    done = led.drive(avsm.proposal_rule(led.state, seq, {"choice": "action", "action": "lower"}, "model", "b"))
    lever, basis, verdict = done[0][1]
    assert kinds(done) == [("Gate", "lower")] and verdict.ok and verdict.proof["trigger"] == seq
    assert seq not in verdict.proof["premises"]
    for choice, expect in (({"choice": "action", "action": "wipe"}, [("Write", "ask")]),
                           ({"choice": "action", "action": "sell", "payload": {"qty": 1}}, [("Write", "ask")]),
                           ({"choice": "action", "action": "rm"}, [("Write", "refusal")]),
                           ({"choice": "ask", "action": "rm", "question": "?"}, [("Write", "refusal")]),
                           ({"choice": "ask", "action": "wipe", "question": "may I?"}, [("Write", "ask")])):
        seq = led.add({"kind": "proposal", "claim": "inferred", "venture": V, "summary": "p"})
        done = led.drive(avsm.proposal_rule(led.state, seq, choice, "model", "b"))
        assert kinds(done) == expect, (choice, done)
    assert done[0][1]["claim"] == "inferred" and done[0][1]["about"] == "model"
    seq = led.add({"kind": "proposal", "claim": "inferred", "venture": V, "summary": "p"})
    assert led.drive(avsm.proposal_rule(led.state, seq, {"choice": "action", "action": "wipe"}, "model", "b")) == [], \
        "the ask for wipe is open already: asked once"


def test_ratchet_and_canary_rules():
    """SELF-02, SELF-04: the ratchet proposes delegating a lever that waits for a person after n approvals (a
    denial resets the count; an open ratchet ask is not asked again); a canary ask comes every N asks."""
    led = Ledger(GUARDED % "pause")
    for n in range(2):
        ask = led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe", "summary": "?"})
        led.add({"kind": "approval", "claim": "declared", "venture": V, "ask": ask, "lever": "wipe", "summary": "yes"})
    assert avsm.ratchet_due(led.state, "wipe", 2) and not avsm.ratchet_due(led.state, "wipe", 3)
    assert not avsm.ratchet_due(led.state, "lower", 1), "a reversible lever with no content never waits for a person"
    text = GUARDED % "pause"
    record = avsm.ratchet_ask(led.state, "wipe", "/v/mandate.yaml", text, None)
    assert record["about"] == "ratchet" and "2 times" in record["question"]
    assert avsm.parse_mandate(record["mandate"], "m")["levers"]["wipe"]["delegated"] is True
    assert record["mandate"] == text.replace("reversible: false}", "reversible: false, delegated: true}")
    # the file since edited: the ask says why it cannot carry the change, and nothing is raised
    for edited, why in (("purpose: x\n", "has no 'metric'"), ("- a list\n", "must be a mapping"),
                        (text.replace("  - {name: wipe", "#"), "wipe is not permitted in /v/m")):
        record = avsm.ratchet_ask(led.state, "wipe", "/v/mandate.yaml", edited, None)
        assert record["mandate"] is None and why in record["question"] and "edit it by hand" in record["question"]
    record = avsm.ratchet_ask(led.state, "wipe", "/v/mandate.yaml", None, "it cannot be read")
    assert record["mandate"] is None and "(edit it by hand: it cannot be read)" in record["question"]
    led.add(record)
    assert not avsm.ratchet_due(led.state, "wipe", 2), "asked already"
    assert avsm.canary_ask(led.state, 3, 4) is None
    canary = avsm.canary_ask(led.state, 8, 4)
    assert canary["canary"] is True and canary["lever"] == "delete-everything"
    record, line = avsm.canary_result(led.state, 9, canary, approved=True)
    assert record["kind"] == "canary" and record["passed"] is False and "Nothing ran" in line


def test_ratchet_rule_forecasts_first():
    """SELF-02, FORECAST-01: n approvals of a lever call for its forecast first, and the ask only when that is in
    (or at once when none can be made, or the forecast was cut short); nothing while it runs, nothing when a
    denial reset the count meanwhile, nothing before n."""
    led = Ledger(GUARDED % "pause")
    def approve():
        ask = led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe", "summary": "?"})
        led.add({"kind": "approval", "claim": "declared", "venture": V, "ask": ask, "lever": "wipe", "summary": "yes"})
    approve()
    assert list(avsm.ratchet_rule(led.state, "wipe", 2)) == [], "one approval of two"
    approve()
    rule = avsm.ratchet_rule(led.state, "wipe", 2)
    assert next(rule) == avsm.Forecast("wipe")
    assert rule.send(False) == avsm.ReadMandate(), "no forecast made: asked at once"
    (ask,) = _rest(rule, ("/v/mandate.yaml", None, "it is gone"))
    assert ask.record["about"] == "ratchet" and ask.record["forecast"] is None
    rule = avsm.ratchet_rule(led.state, "wipe", 2)
    assert next(rule) == avsm.Forecast("wipe")
    begun = list(_rest(rule, True))
    assert [(type(i).__name__, i.record["kind"], i.record["what"]) for i in begun] == [("Write", "begun", "forecast")], \
        "the ask waits on the forecast, whose start is written"
    led.add(begun[0].record)
    assert list(avsm.ratchet_rule(led.state, "wipe", 2)) == [], "a forecast runs: not again"
    led.add({"kind": "forecast", "claim": "inferred", "venture": V, "days": 7, "seeds": 8, "why": "ratchet",
             "lever": "wipe", "summary": "f"})
    assert led.state.ratchet_forecasts == {}, "its forecast is in"
    for forecast in ((40, "forecast line"), (None, None)):
        rule = avsm.ratchet_rule(led.state, "wipe", 2, forecast)
        assert next(rule) == avsm.ReadMandate()
        (ask,) = _rest(rule, ("/v/mandate.yaml", None, "it is gone"))
        assert ask.record["forecast"] == forecast[0]
        assert ("(forecast line, #40)" in ask.record["question"]) == bool(forecast[0])
    ask = led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe", "summary": "?"})
    led.add({"kind": "denial", "claim": "declared", "venture": V, "ask": ask, "lever": "wipe", "summary": "no"})
    assert list(avsm.ratchet_rule(led.state, "wipe", 2, (41, "line"))) == [], "denied while it ran: the count reset"


def _rest(rule, answer):
    """The intents `rule` yields after its first is answered with `answer`."""
    try:
        yield rule.send(answer)
    except StopIteration:
        return
    yield from rule


def restarted(led, *args):
    """restart_rule(led.state, *args) run through, its records folded: (again, delay, the records)."""
    rule, records = avsm.restart_rule(led.state, *args), []
    while True:
        try:
            record = next(rule).record
        except StopIteration as end:
            return (*end.value, records)
        records.append(record)
        led.add(record)


def test_restart_rule_backs_off_and_asks_at_the_ceiling():
    """RUN-06, open point 31: a kept program that dies quickly after a restart waits twice as long each time up
    to the ceiling, where it asks once; one that ran long starts afresh; a pause or restart: never starts nothing.
    The back-off is folded from the exit records, so the ledger folded again (an avsmd restart) holds it; a
    resume and a new mandate start afresh."""
    led = Ledger(GUARDED % "pause")
    again, delay, records = restarted(led, 7, 256, None, 1.0, True)
    assert (again, delay, led.state.backoff) == (True, 0, 0), "the first exit restarts at once"
    assert "restarting now" in records[0]["summary"]
    exits = records + [restarted(led, 7, 256, None, 1.0, True)[2][0] for _ in range(3)]
    assert [e["restart_in"] for e in exits] == [0, 1, 2, 4] and led.state.backoff == 4
    refolded = adopt(GUARDED % "pause")
    for seq, record in enumerate(exits, 2):
        avsm.fold(refolded, seq, 1000 + seq, record)
    assert refolded.backoff == 4, "folded again from the ledger, the back-off is where it was"
    assert list(avsm.run_started(refolded, 9))[0].record["summary"] == "run restarted (pid 9)"
    assert restarted(led, 7, 256, None, 20.0, True)[:2] == (True, 0) and led.state.backoff == 4, \
        "a run past the quick death but short of the reset restarts at once and keeps the back-off"
    again, delay, records = restarted(led, 7, 256, None, 1.0, True)
    assert delay == 8 and "restarting in 8s" in records[0]["summary"]
    led.state.backoff = 200
    again, delay, records = restarted(led, 7, 256, None, 1.0, True)
    assert delay == avsm.BACKOFF_CEILING and [r["kind"] for r in records] == ["exit", "ask"]
    assert restarted(led, 7, 256, None, avsm.BACKOFF_RESET, True)[:2] == (True, 0) and led.state.backoff == 0
    again, _, records = restarted(led, 7, 0, "pause", 1.0, False)
    assert not again and "not restarted" in records[0]["summary"] and led.state.backoff is None
    assert list(avsm.run_started(led.state, 9))[0].record["summary"] == "run started (pid 9)"
    assert restarted(led, 7, 256, None, 1.0, True)[:2] == (True, 0), "after a stop: the first restart again"
    assert restarted(led, 7, 256, None, 1.0, True)[1] == 1
    led.add({"kind": "resume", "claim": "declared", "venture": V, "by": "person", "summary": "resumed"})
    assert led.state.backoff is None, "a resume starts afresh"
    led.add({"kind": "exit", "claim": "measured", "venture": V, "pid": 1, "status": "exit 1", "uptime": "long",
             "restart_in": "x", "summary": "hand-made"})
    assert led.state.backoff is None, "an exit whose fields are not numbers changes no back-off"
    assert not restarted(led, 7, -15, "a new mandate", 1.0, True)[0], "no run: none"
    kept = Ledger(GUARDED % "pause" + "restart: never\nrun: ./serve\n")
    kept.state.backoff = 8
    assert restarted(kept, 7, -15, "a new mandate", 1.0, True)[:2] == (True, 0), \
        "a new mandate's command starts at once, whatever restart: says"
    assert not restarted(kept, 7, -15, "a new mandate", 1.0, False)[0], "stopping"
    assert restarted(kept, 7, -9, "pause", 1.0, True)[:2] == (True, 0), \
        "ended by a pause a resume came after (it ended slowly): started again at once"
    assert not restarted(kept, 7, -9, "pause", 1.0, False)[0], "still paused"


def test_a_warden_start_reads_the_metric_a_cadence_after_its_last_report():
    """MANDATE-05: once per cadence, across a warden's or avsmd's start too: the first round waits
    until a cadence after the last report (none: at once), never more than a cadence (a clock set
    back), and a round missed whole is due at once."""
    led = Ledger(GUARDED % "pause")
    cadence = led.state.mandate["cadence"]
    assert avsm.first_round_wait(led.state, 5000, 0, 1) == 0, "no report yet"
    at = led.at + 1
    led.add({"kind": "report", "claim": "measured", "venture": V, "value": 1, "summary": "r"})
    assert avsm.first_round_wait(led.state, at + 1, 0, 1) == cadence - 1
    assert avsm.first_round_wait(led.state, at + cadence + 5, 0, 1) == 0, "missed: at once"
    assert avsm.first_round_wait(led.state, at - 10 * cadence, 0, 1) == cadence, "a clock set back"
    # the i-th of many: 2 ms apart, and a thousand fit in one cadence of 1 s
    assert avsm.first_round_wait(led.state, at + 1, 3, 10) == cadence - 1 + 3 / 10 * 0.02
    led.state.mandate = dict(led.state.mandate, cadence=1)
    assert avsm.first_round_wait(led.state, at + 1, 999, 1000) == 999 / 1000


def test_a_warden_started_again_leaves_ended_what_restart_did_not_restart():
    """VENTURE-17: whether a warden's start starts the kept program is folded from its exits: avsmd's
    own start starts it always; a warden started again after one died does not start one that ended by
    itself and that its `restart:` did not restart, but does one an exit restarted, one avsm ended (a
    pause, a stop: the exit names it), or one whose last record is its start (the dead warden left it
    running)."""
    led = Ledger(GUARDED % "pause" + "restart: never\nrun: ./serve\n")
    assert avsm.starts_kept(led.state, again=True), "nothing ran yet"
    again, _, records = restarted(led, 7, 256, None, 1.0, True)
    assert not again and "ended_by" not in records[0] and led.state.run_ended
    assert not avsm.starts_kept(led.state, again=True) and avsm.starts_kept(led.state, again=False)
    led.add(next(avsm.run_started(led.state, 8)).record)
    assert avsm.starts_kept(led.state, again=True), "started again (avsmd's start): it runs"
    _, _, records = restarted(led, 8, -15, "stop", 1.0, False)
    assert records[0]["ended_by"] == "stop" and avsm.starts_kept(led.state, again=True), \
        "ended by avsmd's stop: the next start starts it"
    always = Ledger(GUARDED % "pause" + "run: ./serve\n")
    assert restarted(always, 7, 256, None, 1.0, True)[0] and avsm.starts_kept(always.state, True)


def test_implausible_ask_answered_is_not_asked_again_in_the_same_stretch():
    """PLAUS-07, one ask per stretch: once the implausible-reading ask is answered, further bad readings of the
    same stretch ask nothing; a plausible reading ends the stretch, and the next bad one asks again."""
    led = Ledger(GUARDED % "pause")
    seq = led.add(report(None, status="failed") | {"note": "exit 1"})
    led.drive(avsm.settle_round(led.state, seq))
    ask = led.seq
    led.add({"kind": "denial", "claim": "declared", "venture": V, "ask": ask, "summary": "no"})
    for _ in range(2):
        seq = led.add(report(None, status="failed") | {"note": "exit 1"})
        assert led.drive(avsm.settle_round(led.state, seq)) == [], "asked again in the same stretch"
    seq = led.add(report(5))
    assert led.drive(avsm.settle_round(led.state, seq)) == []
    seq = led.add(report(None, status="failed") | {"note": "exit 1"})
    assert kinds(led.drive(avsm.settle_round(led.state, seq))) == [("Write", "ask")]


CHECKED = """\
purpose: Keep the dial low.
metric: dial
controller: {kind: model}
cadence: 10s
permitted:
  - {name: lower, run: ./lower, cap: 2/hour, reversible: true, check: ./check}
"""


def test_approval_rule_proves_before_it_spends_the_approval():
    """LEVER-04, PROOF-03, issue 10 item 4: a person's yes to an ask about a lever is proved first as if approved,
    so a refusal writes no approval and the ask stays open; then the approval is written and the gate runs the lever
    on it, the approval among its premises. An ask about no lever is answered and nothing runs."""
    led = Ledger(GUARDED % "pause")
    ask = led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe",
                   "question": "run wipe?", "summary": "?"})
    done = led.drive(avsm.approval_rule(led.state, ask, led.state.open_asks[ask], {}, led.at + 1))
    assert kinds(done) == [("Write", "approval"), ("Gate", "wipe")]
    approval = ask + 1
    lever, basis, verdict = done[1][1]
    assert verdict.ok and approval in verdict.proof["premises"] and verdict.proof["trigger"] == ask
    assert ask not in led.state.open_asks
    ask = led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe",
                   "question": "run wipe?", "summary": "?"})
    led.content = "the diff names no file"
    with pytest.raises(avsm.Fail, match="stays open"):
        led.drive(avsm.approval_rule(led.state, ask, led.state.open_asks[ask], {}, led.at + 1))
    assert led.state.open_asks.get(ask) and led.seq == ask + 1, "only the refusal is written"
    plain = led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "audit", "audit": "refunds",
                     "question": "look?", "summary": "?"})
    done = led.drive(avsm.approval_rule(led.state, plain, led.state.open_asks[plain], {}, led.at + 1))
    assert kinds(done) == [("Write", "approval")] and "lever" not in done[0][1]


def test_person_proposal_rule_is_its_own_approval_or_refused():
    """open point 15, issue 10 item 4: a person's proposal is declared and is its own approval, so even an
    irreversible lever runs through the gate on it; an unpermitted lever writes the proposal and its refusal,
    and fails."""
    led = Ledger(GUARDED % "pause")
    done = led.drive(avsm.person_proposal_rule(led.state, "wipe", None))
    assert kinds(done) == [("Write", "proposal"), ("Gate", "wipe")] and done[0][1]["claim"] == "declared"
    lever, basis, verdict = done[1][1]
    assert verdict.ok and led.seq - 1 in verdict.proof["premises"]
    before = led.seq
    with pytest.raises(avsm.Fail, match="not permitted"):
        led.drive(avsm.person_proposal_rule(led.state, "rm", None))
    assert led.seq == before + 2, "the proposal and its refusal are written"


def test_check_rule_runs_only_after_its_check_passed():
    """open point 27, issue 10 item 4: a lever's check is written; a failed check refuses the lever; a passed one
    sends it to the gate again, the check among its premises."""
    led = Ledger(CHECKED)
    seq = led.add({"kind": "proposal", "claim": "inferred", "venture": V, "lever": "lower", "summary": "p"})
    first = avsm.prove(led.state, "lower", led.at + 1, ("permitted", [], ["p"]), trigger=seq)
    assert first.ok
    proposed = avsm.Gate("lower", None, by="model", extra={"proposal": seq}, summary="lower runs")
    done = led.drive(avsm.check_rule(led.state, proposed, first, 1, None, "no"))
    assert kinds(done) == [("Write", "check"), ("Write", "refusal")] and done[1][1]["check"] == led.seq - 1
    assert done[0][1]["note"] == "no" and done[0][1]["status"] == "exit 1" and "refused it: exit 1" in done[0][1]["summary"]
    done = led.drive(avsm.check_rule(led.state, proposed, first, 0, "timeout", "cut"))
    assert kinds(done) == [("Write", "check"), ("Write", "refusal")], "ended early: no pass, whatever its exit"
    assert done[0][1]["ok"] is False and "refused it: timeout" in done[0][1]["summary"]
    done = led.drive(avsm.check_rule(led.state, proposed, first, 0, None, "a note kept only of a refusal"))
    check = led.seq - 1
    assert kinds(done) == [("Write", "check"), ("Gate", "lower")]
    assert done[0][1]["ok"] is True and done[0][1]["note"] == "" and done[0][1]["status"] == "exit 0"
    lever, basis, verdict = done[1][1]
    assert verdict.ok and check in verdict.proof["premises"] and verdict.proof["trigger"] == seq


def test_a_checked_controller_lever_rests_on_what_calls_for_it_when_its_check_ends():
    """open point 27, issue 25 item 1: reports come in while a check runs; the action rests on the latest report
    the controller acts on, and a metric back inside by then refuses the lever instead of running it."""
    led = Ledger(CHECKED.replace("controller: {kind: model}", "controller: {kind: threshold, above: 10, action: lower}"))
    first_report = led.add(report(12))
    first = avsm.prove(led.state, "lower", led.at + 1, avsm.controller_basis(led.state, [first_report], "dial 12 > 10"))
    latest = led.add(report(13))
    called = avsm.Gate("lower", None, by="controller", side="above", summary="lower runs")
    done = led.drive(avsm.check_rule(led.state, called, first, 0, None, ""))
    lever, basis, verdict = done[1][1]
    assert verdict.ok and basis[1] == [latest] and first_report not in verdict.proof["premises"]
    led.add(report(5))
    done = led.drive(avsm.check_rule(led.state, called, first, 0, None, ""))
    assert kinds(done) == [("Write", "check"), ("Write", "refusal")] and "no longer" in done[1][1]["why"]


def test_a_model_proposal_of_a_suspended_delegation_asks_as_the_controller_does():
    """LEVER-16, issue 25 item 1: a delegated irreversible lever whose delegation is suspended (revoke_after) waits
    for a person when a model proposes it, as when the controller calls for it: an ask, not a refusal."""
    led = Ledger(EXPECTING.replace("{kind: threshold, above: 10, action: lower}", "{kind: model}"))
    led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "revoke", "lever": "lower", "summary": "?"})
    seq = led.add({"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action",
                   "lever": "lower", "summary": "p"})
    done = led.drive(avsm.proposal_rule(led.state, seq, {"choice": "action", "action": "lower"}, "model", "b"))
    assert kinds(done) == [("Gate", "lower"), ("Write", "ask")], done
    assert done[1][1]["proposal"] == seq and "suspended" in done[1][1]["summary"]


def test_interrupted_rule_writes_not_known_and_asks_once():
    """RUN-10, issue 10 item 4: a lever a dead warden left running gets an outcome that is not ok, saying how
    long it ran at most, and an ask whether it happened; once written, there is nothing left to settle."""
    led = Ledger(GUARDED % "pause")
    action = led.add({"kind": "action", "claim": "measured", "venture": V, "lever": "lower", "proof": {}, "by": "x",
                      "summary": "lower runs"})
    assert "lower" in led.state.running
    done = led.drive(avsm.interrupted_rule(led.state, led.at + 30, 5))
    assert kinds(done) == [("Write", "outcome"), ("Write", "ask")]
    outcome_record, ask = done[0][1], done[1][1]
    assert outcome_record["ok"] is False and outcome_record["duration"] == 30 and outcome_record["action"] == action
    assert ask["about"] == "interrupted" and ask["lever"] == "lower" and ask["action"] == action
    assert "lower" not in led.state.running and led.drive(avsm.interrupted_rule(led.state, led.at + 60, 5)) == []


def test_escalation_to_the_second_backend_or_why_not():
    """ESC-01, ESC-06, ESC-08, issue 10 item 4: an unusable reply goes to the config's escalate: backend, never the
    same one, only once a request was built, not while avsmd stops, and off the machine only under escalate: offbox."""
    led = Ledger(GUARDED % "pause")
    cfg = {"escalate": "far", "backends": {"near": {"offbox": False}, "far": {"offbox": True}}}
    assert led.state.mandate["escalate"] != "offbox"
    assert avsm.escalation_to(led.state, {"backends": {}}, "near", True, False) == (None, None)
    assert avsm.escalation_to(led.state, cfg, "far", True, False) == (None, None)
    assert avsm.escalation_to(led.state, cfg, "near", False, False) == (None, None)
    assert avsm.escalation_to(led.state, cfg, "near", True, True) == (None, "not escalated: avsmd is stopping")
    second, why = avsm.escalation_to(led.state, cfg, "near", True, False)
    assert second is None and "leaves the machine" in why
    near = dict(cfg, escalate="near", backends={"near": {"offbox": False}, "other": {"offbox": False}})
    assert avsm.escalation_to(led.state, near, "other", True, False) == ("near", None)


def test_ranked_choices_below_the_bar_hold_the_top_and_drop_the_rest():
    """WORLD-08, open point 37, issue 10 item 4: a ranking under a calibration bar it does not meet goes on with
    its top action held (it asks a person) and the actions below it not proposed; an ask among them goes on as it
    came; a single action is no ranking and goes on unheld."""
    led = Ledger(GUARDED.replace("cadence: 10s\n", "cadence: 10s\ncalibration: 0.1\n") % "pause")
    a, b, q = ({"choice": "action", "action": "lower"}, {"choice": "action", "action": "sell"},
               {"choice": "ask", "question": "?"})
    ranked = avsm.ranked_choices(led.state, [a, q, b])
    assert [(c, bool(held), bool(line)) for c, held, line in ranked] == [(a, True, False), (q, False, False),
                                                                         (b, False, True)]
    assert "scored" in ranked[0][1] and ranked[2][2].startswith("sell not proposed: the ranking is held back")
    assert avsm.ranked_choices(led.state, [a, q]) == [(a, None, None), (q, None, None)]


# ---- what the warden's rooms and avsmd used to decide themselves (issue 10 item 3) ----

def test_child_restart_wait_doubles_while_dying_quickly():
    """Open point 31, for avsmd's own children: a dead warden or roles process starts again at once; while it
    keeps dying within QUICK_DEATH the wait doubles up to the ceiling; one that ran long keeps no back-off."""
    quick, long_ = avsm.QUICK_DEATH - 1, avsm.QUICK_DEATH
    assert avsm.child_restart_wait(None, quick) == (0, 0)
    assert avsm.child_restart_wait(0, quick) == (avsm.BACKOFF_FIRST, avsm.BACKOFF_FIRST)
    assert avsm.child_restart_wait(4, quick) == (8, 8)
    assert avsm.child_restart_wait(avsm.BACKOFF_CEILING, quick) == (avsm.BACKOFF_CEILING,) * 2
    assert avsm.child_restart_wait(64, long_) == (None, 0)
    assert avsm.child_restart_wait(None, long_) == (None, 0)


@pytest.mark.parametrize("status, ended_by, ok, summary", [
    (0, None, True, "lower ok in 1.5s"),
    (3, None, False, "lower failed: exit 3 in 1.5s"),
    (-15, "pause", False, "lower stopped by the pause of v (signal 15)"),
    (-15, "timeout", False, "lower failed: past its time limit 30s, ended (signal 15)"),
    (0, "stop", False, "lower stopped: avsmd is stopping (exit 0)"),
])
def test_lever_outcome_is_ok_only_on_exit_0_unended(status, ended_by, ok, summary):
    """LEVER-10, LEVER-11, LEVER-12, open point 29 (DESIGN: a lever stopped by a pause, a timeout or a stop is not
    ok): the outcome's ok and summary are judged from how the lever ended, citing its action."""
    led = Ledger(GUARDED % "pause")
    (write,) = avsm.lever_outcome(led.state, "lower", 7, status, ended_by, 1.5, 30, "tail", [])
    record = write.record
    assert record == {"kind": "outcome", "claim": "measured", "venture": V, "lever": "lower", "action": 7, "ok": ok,
                      "status": avsm.describe_status(status), "ended_by": ended_by, "duration": 1.5, "note": "tail",
                      "summary": summary}


READ = """\
purpose: Keep sales up.
metric: sales
controller: {kind: model}
cadence: 10s
guards:
  - {name: spend, run: ./spend, above: 100}
audits:
  - {name: customers, run: ./customers, worse: up}
readings:
  - {name: waiting, run: ./waiting, lines: address}
  - {name: named, run: ./waiting, lines: address, audit: customers}
"""


def test_unread_record_neither_trips_nor_clears_a_guard():
    """RUN-18: a guard, audit or reading still running (or slower than the round) is written as not read; a
    guard's has past: null, a reading's is inferred."""
    led = Ledger(READ)
    guard = avsm.unread_record(led.state, "guard", "spend", "its last read is still running")
    assert guard == {"kind": "guard.spend", "claim": "measured", "venture": V, "value": None, "status": "not read",
                     "plausible": False, "note": "its last read is still running", "past": None,
                     "summary": "guard spend not read: its last read is still running"}
    assert avsm.unread_record(led.state, "reading", "waiting", "x")["claim"] == "inferred"
    assert "past" not in avsm.unread_record(led.state, "audit", "customers", "x")


def test_report_record_is_judged_by_judge_report():
    """REPORT-06, REPORT-08, DESIGN (a failed or implausible reading has plausible: false and a non-empty note): the report's
    status, plausible, value and summary come from judge_report; NaN is stored as null."""
    led = Ledger(READ)
    ok = avsm.report_record(led.state, 12.5, None)
    assert ok == {"kind": "report", "claim": "measured", "venture": V, "metric": "sales", "value": 12.5,
                  "status": "trusted", "plausible": True, "note": "", "summary": "sales = 12.5"}
    failed = avsm.report_record(led.state, None, "exit 1")
    assert (failed["status"], failed["plausible"], failed["value"], failed["summary"]) == \
        ("failed", False, None, "sales failed: exit 1")
    nan = avsm.report_record(led.state, float("nan"), None)
    assert nan["status"] == "implausible" and nan["value"] is None and nan["note"] and not nan["plausible"]


def test_guard_record_says_past_its_bound():
    """GUARD-02, GUARD-03: a guard's reading record holds its value, bound and side, past only when read; the
    summary says when it is past its bound; a failed reading's past is null."""
    led = Ledger(READ)
    guard = led.state.mandate["guards"][0]
    past = avsm.guard_record(led.state, guard, 150, None)
    assert past == {"kind": "guard.spend", "claim": "measured", "venture": V, "value": 150, "status": "trusted",
                    "plausible": True, "past": True, "bound": 100, "side": "above",
                    "summary": "guard spend = 150 past its bound (> 100)"}
    assert avsm.guard_record(led.state, guard, 12.5, None, suffix="%")["summary"] == "guard spend = 12.5%"
    failed = avsm.guard_record(led.state, guard, None, "exit 2")
    assert (failed["past"], failed["note"], failed["summary"]) == (None, "exit 2", "guard spend failed: exit 2")


def test_audit_record_keeps_its_note_and_judges_nan():
    """AUDIT-05: an audit's record keeps the lines above its number as its note (never a model's to see); NaN is
    implausible, a failure failed."""
    led = Ledger(READ)
    rec = avsm.audit_record(led.state, "customers", 3.0, None, "a@b.example\nc@d.example\n3\n")
    assert rec == {"kind": "audit.customers", "claim": "measured", "venture": V, "value": 3.0, "status": "trusted",
                   "plausible": True, "note": "a@b.example\nc@d.example", "summary": "audit customers = 3"}
    nan = avsm.audit_record(led.state, "customers", float("nan"), None, "nan\n")
    assert (nan["status"], nan["value"], nan["note"], nan["plausible"]) == ("implausible", None, "NaN", False)
    failed = avsm.audit_record(led.state, "customers", None, "exit 1", "")
    assert (failed["status"], failed["note"], failed["summary"]) == ("failed", "exit 1", "audit customers failed: exit 1")


def test_reading_record_keeps_fields_and_a_failure_no_note():
    """READING-08: a read reading keeps its address fields (with audit:, only those its audit's note names); a
    failed one keeps no note at all."""
    led = Ledger(READ)
    led.add(avsm.audit_record(led.state, "customers", 1.0, None, "c@d.example\n1\n"))
    waiting, named = led.state.mandate["readings"]
    text = "a@b.example\nc@d.example\n2\n"
    rec = avsm.reading_record(led.state, waiting, 2.0, None, text)
    assert rec == {"kind": "reading.waiting", "claim": "inferred", "venture": V, "value": 2.0, "status": "read",
                   "plausible": True, "fields": "a@b.example c@d.example", "summary": "reading waiting = 2: 2 field(s)"}
    assert avsm.reading_record(led.state, named, 2.0, None, text)["fields"] == "c@d.example"
    failed = avsm.reading_record(led.state, waiting, None, "exit 1", text)
    assert failed == {"kind": "reading.waiting", "claim": "inferred", "venture": V, "value": None, "status": "failed",
                      "plausible": False, "summary": "reading waiting failed"}


def test_notify_failure_from_how_the_command_ended():
    """Issue 14 item 2: a run of the notify command told its notice only when it exited 0 unended; else the
    failure judge_notify writes says how (its time limit, avsmd's stop, its exit status)."""
    assert avsm.notify_failure(None, 0, 10) is None
    assert avsm.notify_failure(None, 3, 10) == "exit 3"
    assert avsm.notify_failure("timeout", -15, 10) == "it took longer than its time limit of 10s"
    assert avsm.notify_failure("stop", 0, 10) == "it was still running when avsmd stopped"


def test_forecast_record_holds_numbers_too_little_or_why_none():
    """FORECAST-07, FORECAST-10: the forecast program's output becomes an inferred forecast record: its rounded numbers, why
    there is too little to forecast, or why none was made (ended, a non-zero exit, output that is not JSON)."""
    led = Ledger(READ)
    extra = {"days": 30, "seeds": 16, "why": "ratchet", "lever": "lower"}
    made = avsm.forecast_record(led.state, extra, b'{"median": 5.04, "p10": 2, "p90": 9, "decimals": 1}', 0, None)
    assert {k: made[k] for k in ("kind", "claim", "median", "p10", "p90", "lever", "why")} == \
        {"kind": "forecast", "claim": "inferred", "median": 5.0, "p10": 2.0, "p90": 9.0, "lever": "lower", "why": "ratchet"}
    assert made["summary"].startswith("forecast 30 days x 16 seeds: ")
    little = avsm.forecast_record(led.state, dict(extra, lever=None), b'{"too_little": "two reports"}', 0, None)
    assert little["note"] == "two reports" and "lever" not in little and little["summary"] == "forecast: two reports"
    ended = avsm.forecast_record(led.state, extra, b"", -15, "pause")
    assert (ended["note"], ended["summary"]) == ("it was ended", "forecast not made: it was ended")
    assert avsm.forecast_record(led.state, extra, b"not json", 0, None)["note"] == "the forecast program ended exit 0"
    assert avsm.forecast_record(led.state, extra, b"{}", 2, None)["note"] == "the forecast program ended exit 2"


def test_world_step_result_failures_and_output():
    """WORLD-02, WORLD-03, open point 38: a world step over 64 KiB, past its time, ended or exiting non-zero fails
    (with its standard error's tail); otherwise its output is read, dropping what is not a field."""
    m = Ledger(READ).state.mandate
    assert avsm.world_step_result(m, True, None, 0, b"", b"")[1] == "it printed more than 64 KiB"
    assert avsm.world_step_result(m, False, "timeout", -15, b"", b"")[1] == "it took longer than 10 s and was ended"
    assert avsm.world_step_result(m, False, None, 1, b"", b"oops\n") == (None, "it ended exit 1: oops")
    assert avsm.world_step_result(m, False, "kill", -9, b"", b"") == (None, "it ended kill")
    for cut_short in ("pause", "stop", "a new mandate"):
        assert avsm.world_step_result(m, False, cut_short, -15, b"", b"") is None, "the ensemble goes"
    out, why = avsm.world_step_result(m, False, None, 0, b'{"state": 1, "metric": 3, "guards": {"spend": 4, "x": 1}, "y": 2}', b"")
    assert why is None and out == {"state": 1, "metric": 3.0, "guards": {"spend": 4}}


def test_backend_for_the_default_or_the_controllers_and_never_offbox_unsaid():
    """MODEL-04, ESC-08: a decision goes to the controller's backend: or the config's default:; none named, or one that
    leaves the machine without escalate: offbox in the mandate, raises 65 and no call is made."""
    state = Ledger(READ).state
    cfg = {"default": "near", "backends": {"near": {"offbox": False}, "far": {"offbox": True}}}
    assert avsm.backend_for(state, cfg) == ("near", cfg["backends"]["near"])
    with pytest.raises(avsm.Fail) as none:
        avsm.backend_for(state, dict(cfg, default=None))
    assert none.value.code == avsm.EX_DATAERR and "names no backend" in str(none.value)
    with pytest.raises(avsm.Fail) as far:
        avsm.backend_for(state, dict(cfg, default="far"))
    assert "leaves the machine" in str(far.value)
    state.mandate = dict(state.mandate, escalate="offbox")
    assert avsm.backend_for(state, dict(cfg, default="far"))[0] == "far"


def test_model_packet_never_shows_an_audit():
    """AUDIT-05, MODEL-11, MODEL-12: the packet shows the recent records and open asks, but no audit reading, no audit's
    ask, nothing that cites one; readings that were read, and each lever's runs in its cap window."""
    led = Ledger(READ)
    audit = led.add(avsm.audit_record(led.state, "customers", 3.0, None, "a@b.example\n3\n"))
    ask = led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "audit", "audit": "customers",
                   "question": "q", "summary": "audit customers asks"})
    model_ask = led.add({"kind": "ask", "claim": "inferred", "venture": V, "about": "model", "lever": None,
                         "question": "what now?", "summary": "the model asks"})
    r = led.add(report(5.0))
    recent = [(seq, 1000 + seq, rec) for seq, rec in ((audit, {"kind": "audit.customers", "claim": "measured",
                                                                "summary": "audit customers = 3"}),
                                                       (ask, {"kind": "ask", "claim": "measured", "about": "audit",
                                                              "summary": "audit asks"}),
                                                       (ask + 10, {"kind": "denial", "claim": "declared", "ask": ask,
                                                                   "summary": "denied"}),
                                                       (r, report(5.0)))]
    assert avsm.model_packet(led.state, recent, 2000, [], {"days": 7, "seeds": 0})["forecast"] is None
    facts = avsm.model_packet(led.state, recent, 2000, [], None)["forecast"]
    assert facts == avsm.forecast_facts(led.state, 7, 8), "PACKET_FORECAST's: 7 days, 8 seeds"
    packet = avsm.model_packet(led.state, recent, 2000, [], {"days": 9, "seeds": 2}, {"days": 7})
    assert [line.split()[0] for line in packet["records"]] == [f"#{r}"]
    assert packet["asks"] == [f"#{model_ask} -: what now?"]
    assert packet["forecast"] == {"days": 7} and packet["looks"] == [] and packet["metric"] == "sales"
    assert "a@b.example" not in repr(packet) and "customers" not in repr(packet)


def test_action_record_carries_the_proof_basis_approval_and_check():
    """LEVER-07, PROOF-02, issue 10 item 1: the action written before a run carries the gate's proof and the basis
    the re-check needs, the approval and check it rests on, the controller's side and what the caller adds."""
    led = Ledger(GUARDED % "pause")
    verdict = avsm.Verdict(True, {"rule": "r", "premises": [1], "steps": [], "trigger": None},
                           asked={"basis": {"rule": "r", "premises": [1], "steps": []}, "at": 5, "approval": 3, "check": 4})
    record = avsm.action_record(led.state, "lower", verdict, "lower runs", "controller", "above", {"proposal": 9})
    assert record == {"kind": "action", "claim": "measured", "venture": V, "lever": "lower", "proof": verdict.proof,
                      "by": "controller", "summary": "lower runs", "basis": verdict.asked["basis"], "approval": 3,
                      "check": 4, "side": "above", "proposal": 9}
    bare = avsm.action_record(led.state, "lower", verdict._replace(asked={"basis": {}, "at": 5}), "s", "person")
    assert set(bare) == {"kind", "claim", "venture", "lever", "proof", "by", "summary", "basis"}


def test_fact_records_keep_only_fact_and_source_lines():
    """LEVER-18, PROOF-03: what research brings back is kept as inferred fact records, each with its source;
    a line that is not a {"fact", "source"} object of strings is dropped."""
    led = Ledger(GUARDED % "pause")
    lines = ['{"fact": "the sky is blue", "source": "https://sky.example"}', "not json", '{"fact": 1, "source": "x"}',
             '["fact"]', '{"fact": "f", "source": "s", "extra": 1}']
    facts = [write.record for write in avsm.fact_records(led.state, 12, lines)]
    assert [f["fact"] for f in facts] == ["the sky is blue", "f"]
    assert facts[0] == {"kind": "fact", "claim": "inferred", "venture": V, "action": 12, "fact": "the sky is blue",
                        "source": "https://sky.example", "summary": "fact from https://sky.example: the sky is blue"}


def test_round_unread_settles_once_read_or_late():
    """RUN-16, RUN-18: a round settles once its metric is in and every guard, audit and reading is read, or at
    its deadline (half a second) without the slow ones, which are written as not read; not before its metric."""
    assert avsm.round_unread(None, 5) is None
    waiting = {"metric": None, "pending": set(), "deadline": 1.0, "number": 1}
    assert avsm.round_unread(waiting, 9.0) is None                       # no metric yet: never settles
    read = dict(waiting, metric=4)
    assert avsm.round_unread(read, 0.1) == []                            # all read: settles at once
    slow = dict(read, pending={("reading", "b"), ("guard", "a")})
    assert avsm.round_unread(slow, 0.9) is None                          # waits for them until its deadline
    assert avsm.round_unread(slow, 1.0) == [("guard", "a"), ("reading", "b")]


WORLDLY = READ.replace("cadence: 10s\n", "cadence: 10s\ncalibration: 0.1\n")


def test_prediction_due_on_the_last_trusted_report_only():
    """WORLD-05: with calibration: (or world:) the last trusted report brings a prediction; not an untrusted or
    older one, not while paused or while avsmd stops, and never without either key."""
    led = Ledger(WORLDLY)
    first = led.add(report(5.0))
    assert avsm.prediction_due(led.state, first, False)
    assert not avsm.prediction_due(led.state, first, True)
    second = led.add(report(6.0, status="implausible"))
    assert not avsm.prediction_due(led.state, second, False) and not avsm.prediction_due(led.state, first, False)
    led.add({"kind": "pause", "claim": "declared", "venture": V, "summary": "paused"})
    third = led.add(report(7.0))
    assert not avsm.prediction_due(led.state, third, False)
    plain = Ledger(READ)
    assert not avsm.prediction_due(plain.state, plain.add(report(5.0)), False)


def test_still_past_lines_say_what_a_guard_does_after_resume():
    """PAUSE-03: resuming while a guard's last reading was past its bound goes through and says the guard
    pauses the venture again if it still is at its next reading (then: pause), or that only stop and its
    unwind run until a reading is back inside (then: ask); it claims no more than the last reading
    (issue 37 item 2)."""
    led = Ledger(GUARDED % "pause")
    assert avsm.still_past_lines(led.state) == []
    first = led.guard(150, True)
    assert avsm.still_past_lines(led.state) == [
        f"guard spend: its last reading was past its bound (since #{first}); if it still is at its next "
        "reading, it pauses v again"]
    asking = Ledger(GUARDED % "ask")
    first = asking.guard(150, True)
    assert avsm.still_past_lines(asking.state) == [
        f"guard spend: its last reading was past its bound (since #{first}); no lever but stop and its unwind "
        "runs until a reading is back inside"]


def test_decide_problem_says_why_no_decision_runs():
    """MODEL-01, DESIGN (avsm decide runs that venture's model decision now): refused for a venture that cannot
    run, one no model decides for, and a paused one."""
    led = Ledger(READ)
    assert avsm.decide_problem(led.state) is None
    led.add({"kind": "pause", "claim": "declared", "venture": V, "summary": "paused"})
    assert avsm.decide_problem(led.state) == "v is paused; resume it first"
    assert avsm.decide_problem(Ledger(GUARDED % "pause").state) == \
        "v's controller is threshold: no model decides for it"
    broken = Ledger(READ).state
    broken.mandate, broken.problem = None, "its directory /srv/v is not there"
    assert avsm.decide_problem(broken) == "v cannot run: its directory /srv/v is not there"


def test_denial_record_names_the_lever_but_not_a_canarys():
    """ASK-03: a denial is a declared record citing its ask, naming the ask's lever; a canary's names none."""
    state = Ledger(READ).state
    def denial(seq, ask):
        return next(avsm.denial_rule(state, seq, ask)).record
    assert denial(4, {"lever": "wipe"}) == {
        "kind": "denial", "claim": "declared", "venture": V, "ask": 4, "lever": "wipe",
        "summary": "a person denied ask #4 (wipe)"}
    assert denial(4, {"about": "guard"})["summary"] == "a person denied ask #4"
    assert denial(5, {"lever": "wipe", "canary": True}) == {
        "kind": "denial", "claim": "declared", "venture": V, "ask": 5, "summary": "a person denied ask #5"}


def test_reply_failure_of_a_command_backend():
    """MODEL-23, ESC-01: a command backend's reply over 256 KiB, or one that was ended or exited non-zero, is
    unusable; one that exited 0 is read."""
    assert avsm.reply_failure("./model", True, None, 0) == "the reply is bigger than 256 KiB"
    assert avsm.reply_failure("./model", False, "timeout", -15) == "./model ended: timeout"
    assert avsm.reply_failure("./model", False, None, 2) == "./model ended: exit 2"
    assert avsm.reply_failure("./model", False, None, 0) is None


def test_unusable_record_keeps_a_refusal_and_the_call():
    """ESC-06: an unusable reply is written (it changes nothing), keeping a provider's refusal apart from the
    rest of what it said of the call; a short why in the summary."""
    state = Ledger(READ).state
    record = avsm.unusable_record(state, "near", "nightly", "declined: no", {"declined": {"text": "no"}, "model": "m"})
    assert record == {"kind": "unusable", "claim": "measured", "venture": V, "backend": "near", "by": "nightly",
                      "why": "declined: no", "summary": "the reply of near is unusable: declined: no",
                      "declined": {"text": "no"}, "call": {"model": "m"}}
    bare = avsm.unusable_record(state, "near", "person", "x" * 3000, None)
    assert "call" not in bare and "declined" not in bare and len(bare["why"]) == avsm.NOTE_MAX


def test_mail_to_send_needs_the_adapter_and_a_message_that_holds():
    """CONFIG-07, issue 17 item 1: mail.send sends only with adapters: mail: (its from:) and a text payload that
    write_mail can send; otherwise its outcome is not started, saying why."""
    spec = {"name": "notify", "takes": "text", "run": "mail.send", "budget": None}
    cfg = {"adapters": {"mail": {"command": "sendmail -t -i", "from": "me@example.com"}}}
    mail, _ = avsm.mail_to_send(spec, cfg, "Subject: hi\n\nbody\n")
    assert mail is not None and mail.text.startswith("From: me@example.com\n")
    none, why = avsm.mail_to_send(spec, {"adapters": {}}, "Subject: hi\n\nbody\n")
    assert none is None and why == "mail.send needs adapters: mail: in config.yaml and a text payload"
    assert avsm.mail_to_send(spec, cfg, {"not": "text"})[0] is None
    bad, why = avsm.mail_to_send(spec, cfg, "no headers at all")
    assert bad is None and why.startswith("mail.send refused the message: ")


def test_approve_problem_while_paused():
    """ASK-09: approving an ask of a paused venture is refused, saying to resume first; the approval is not spent."""
    led = Ledger(READ)
    assert avsm.approve_problem(led.state, 4) is None
    led.add({"kind": "pause", "claim": "declared", "venture": V, "summary": "paused"})
    assert avsm.approve_problem(led.state, 4) == \
        "v is paused, so approving #4 would spend it without running; resume it first (avsm resume v)"


def test_ratchet_change_problem_refuses_adding_offbox():
    """SELF-03, ESC-09: a mandate change proposed by self may not add escalate: offbox; one that keeps it may."""
    state = Ledger(READ).state
    assert avsm.ratchet_change_problem(state, dict(state.mandate)) is None
    assert "may not add escalate: offbox" in avsm.ratchet_change_problem(state, dict(state.mandate, escalate="offbox"))
    state.mandate = dict(state.mandate, escalate="offbox")
    assert avsm.ratchet_change_problem(state, dict(state.mandate)) is None


def test_an_approved_ratchet_change_is_its_approval_the_file_then_its_adoption():
    """Open point 41, SELF-03: approving a ratchet ask writes the change to mandate.yaml, then the
    approval, then adopts it as avsm add would, the mandate record citing the approval; an ask with
    no change, or a change adding escalate: offbox, is refused (65) before any record, and a
    mandate.yaml that cannot be written refuses it (73) with no record, its ask open."""
    led = Ledger(READ)
    changed = READ + "# delegated\n"
    ask = {"kind": "ask", "claim": "measured", "venture": V, "about": "ratchet", "lever": "lower",
           "by": "self", "mandate": changed, "summary": "?"}
    seq = led.add(ask)
    mandate = avsm.parse_mandate(changed, "m")
    done = list(avsm.ratchet_approved_rule(led.state, seq, ask, mandate, "/v/mandate.yaml"))
    assert [type(i).__name__ for i in done] == ["WriteFile", "Write", "Write", "Adopt"]
    assert (done[1].record["kind"], done[1].record["ask"], done[1].record["about"]) == (
        "approval", seq, "ratchet")
    assert done[0] == avsm.WriteFile("/v/mandate.yaml", changed)
    assert (done[2].record["kind"], done[2].record["text"], done[2].record["approval_of"]) == (
        "mandate", changed, seq)
    assert done[3] == avsm.Adopt(mandate, False, True)
    rule = avsm.ratchet_approved_rule(led.state, seq, ask, mandate, "/v/mandate.yaml")
    assert next(rule) == avsm.WriteFile("/v/mandate.yaml", changed)
    with pytest.raises(avsm.Fail, match="cannot be written .Read-only file system.; ask #") as cut:
        rule.send("Read-only file system")
    assert cut.value.code == avsm.EX_CANTCREAT, "mandate.yaml not written: nothing is, the ask stays open"
    with pytest.raises(avsm.Fail, match="carries no mandate change; edit /v/mandate.yaml by hand"):
        next(avsm.ratchet_approved_rule(led.state, seq, dict(ask, mandate=None), None,
                                        "/v/mandate.yaml"))
    offbox = dict(mandate, escalate="offbox")
    with pytest.raises(avsm.Fail, match="may not add escalate: offbox") as refused:
        next(avsm.ratchet_approved_rule(led.state, seq, ask, offbox, "/v/mandate.yaml"))
    assert refused.value.code == avsm.EX_DATAERR


def test_run_start_record_says_started_or_restarted():
    """VENTURE-17, open point 31 (each start and exit is a measured record): the kept run program's start names
    its pid and command, and says restarted after an exit that restarted it (as the ledger folds it)."""
    text = READ.replace("cadence: 10s\n", "cadence: 10s\nrun: ./serve\n")
    led = Ledger(text)
    assert list(avsm.run_started(led.state, 41))[0].record == {
        "kind": "start", "claim": "measured", "venture": V, "pid": 41, "command": "./serve",
        "summary": "run started (pid 41)"}
    led.add({"kind": "exit", "claim": "measured", "venture": V, "pid": 41, "status": "exit 1", "uptime": 2.5,
             "restart_in": 0, "summary": "run (pid 41) ended: exit 1 after 2.5s; restarting now"})
    assert list(avsm.run_started(led.state, 42))[0].record["summary"] == "run restarted (pid 42)"
    assert list(avsm.run_started(led.state, None, "no such file"))[0].record["summary"] == \
        "run could not start: no such file"


def test_the_counter_example_over_an_hour():
    """EXAMPLE-03 EXAMPLE-02, without waiting an hour: examples/counter's own mandate, one round a cadence on a
    clock that is given, carried out as the warden does (report_read, round_settled, the gate at the round's
    time, lever_ran, the reset, its outcome). The first 35 rounds (three resets) run the example's own `report`
    and `reset` on a fresh count; the rest of the hour a stand-in that does what those were just seen to do
    (one more a report, 0 at a reset), for speed. The count rises by one each round, a round every 10 s; reset
    first runs 100 s after the adoption (within two minutes), then every 110 s (about two minutes): 32 resets
    in the hour's 360 rounds, 33 an hour at that pace, never refused at the cap of 60. Not shown here: avsmd's
    own scheduling of rounds 10 s apart (test_daemon's counter test sees two reports of a real avsmd 10 s
    apart)."""
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "counter")
    with tempfile.TemporaryDirectory(prefix="avx", dir="/tmp") as tmp:
        d = os.path.join(tmp, "counter")
        shutil.copytree(examples, d)
        env = dict(os.environ, TMPDIR=tmp, AVSMD_HOME=os.path.join(tmp, "h"))     # a count of its own
        path = os.path.join(d, "mandate.yaml")
        text = open(path).read()
        state = avsm.VentureState("counter")
        avsm.fold(state, 1, 0, {"kind": "mandate", "claim": "declared", "venture": "counter", "text": text,
                                "directory": d, "sha256": "0" * 64, "summary": "mandate adopted"})
        state.mandate = avsm.parse_mandate(text, path, d)
        cadence = state.mandate["cadence"]
        assert cadence == 10
        seqs = iter(range(2, 10 ** 6))
        count = [0]                                 # the count as the programs left it: the stand-in's start

        def program(name, k):
            if k < 35:
                run = subprocess.run(["./" + name], cwd=d, env=env, capture_output=True, text=True)
                count[0] = int(run.stdout) if name == "report" else 0
                return run.returncode, run.stdout
            count[0] = count[0] + 1 if name == "report" else 0
            return 0, f"{count[0]}\n"

        def carry_out(intents, now, k):
            """Answer a Write or a Pause with its seq, a Gate with the gate's verdict at `now` (running the
            lever it proves, then writing its outcome); return [(seq, record)] written."""
            result, written = None, []
            while True:
                try:
                    intent = intents.send(result)
                except StopIteration:
                    return written
                if isinstance(intent, (avsm.Write, avsm.Pause)):
                    result = next(seqs)
                    avsm.fold(state, result, now, intent.record)
                    written.append((result, intent.record))
                    continue
                assert isinstance(intent, avsm.Gate), intent
                result = avsm.prove(state, intent.lever, now, intent.basis, trigger=intent.trigger,
                                    approval=intent.approval, payload=intent.payload, check=intent.check)
                if result.ok:
                    written += carry_out(avsm.lever_ran(state, intent.lever, result, intent.summary, intent.by,
                                                        intent.side, intent.extra), now, k)
                    seq = written[-1][0]
                    status, _ = program(intent.lever, k)
                    written += carry_out(avsm.lever_outcome(state, intent.lever, seq, status, None, 0.01, 600, "",
                                                            []), now, k)
                    result = result._replace(action=seq)

        values, resets, refused = [], [], []
        for k in range(3600 // cadence):
            now = k * cadence
            status, out = program("report", k)
            value = avsm.parse_number(out.splitlines()[-1])
            (report_seq, _), = carry_out(avsm.report_read(state, value, None), now, k)
            values.append(value)
            written = carry_out(avsm.round_settled(state, report_seq, [], False), now, k)
            resets += [now for _, r in written if r["kind"] == "action" and r["lever"] == "reset"]
            refused += [r for _, r in written if r["kind"] == "refusal"]
            assert status == 0 and all(r["ok"] for _, r in written if r["kind"] == "outcome"), written
    steps = [b - a for a, b in zip(values, values[1:])]
    assert values[:11] == list(range(1, 12)) and set(steps) == {1, -10}, values     # +1 a round; a reset: 11 -> 1
    assert resets[:3] == [100, 210, 320] and resets[0] <= 120
    assert {b - a for a, b in zip(resets, resets[1:])} == {110}
    assert len(resets) == 32 and round(3600 / 110) == 33 and not refused


def test_an_irreversible_action_asks_for_a_checkpoint_after_it():
    """Issue 24: a checkpoint follows each irreversible action: the kernel's `written` says which
    written record is one (an action of a lever not reversible), not the warden."""
    led = Ledger(GUARDED % "pause")
    action = {"kind": "action", "claim": "measured", "venture": V, "lever": "wipe", "summary": "a"}

    def checkpoint(record, ventures=None):
        led.seq += 1
        return avsm.written({V: led.state} if ventures is None else ventures, led.seq, led.at,
                            record, None)[2]
    assert checkpoint(action)
    assert not checkpoint(dict(action, lever="lower")), "reversible"
    assert not checkpoint(dict(action, kind="outcome", ok=True, action=led.seq)), "not an action"
    assert not checkpoint(action, {}) and not checkpoint(dict(action, lever="gone")), \
        "no venture held, or no such lever"


def test_person_rule_pauses_and_resumes_once_and_may_run_says_what_starts():
    """PAUSE-01, PAUSE-02, VENTURE-14: a person's pause is one declared record and a Pause; a second pause,
    or a resume of a venture not paused, writes nothing (the verb answers that it already is). may_run is
    false while paused, while avsmd stops, and for a mandate that does not hold."""
    led = Ledger(READ)
    assert avsm.may_run(led.state, False) and not avsm.may_run(led.state, True)
    assert led.drive(avsm.person_rule(led.state, "resume")) == []
    assert kinds(led.drive(avsm.person_rule(led.state, "pause"))) == [("Pause", "pause")]
    assert led.state.paused and not avsm.may_run(led.state, False)
    assert led.drive(avsm.person_rule(led.state, "pause")) == []
    # a resume: its record, then the mandate as measured against its directory put in force, and
    # the venture started afresh; one that cannot run now is not started, and says why
    for measured, adopt in (((None, "its directory is gone"), avsm.Adopt(None, False, False, "its directory is gone")),
                            ((led.state.mandate, None), avsm.Adopt(led.state.mandate, False, True))):
        led.state.paused = True
        rule = avsm.person_rule(led.state, "resume", measured)
        resume = next(rule)
        assert type(resume) is avsm.Write and resume.record["kind"] == "resume" and resume.record["claim"] == "declared"
        assert rule.send(led.add(resume.record)) == adopt
        assert list(rule) == []
    assert not led.state.paused and avsm.may_run(led.state, False)
    led.state.mandate = None
    assert not avsm.may_run(led.state, False)


def test_the_next_round_keeps_to_the_cadence_grid_and_a_missed_round_is_not_made_up():
    """MANDATE-05: once per cadence: the next round is due a cadence after the one due, on its
    grid, even when this one started late within it; a warden behind by whole cadences (a slow
    ledger, a stopped clock) starts one round now and the next a cadence later, not a burst."""
    assert avsm.next_round_at(100.0, 10, 103.5) == 110.0, "late within the cadence: on the grid"
    assert avsm.next_round_at(100.0, 10, 109.9) == 110.0
    assert avsm.next_round_at(100.0, 10, 110.0) == 120.0, "a whole cadence late: one round now"
    assert avsm.next_round_at(100.0, 10, 155.0) == 165.0, "five missed: a cadence from now"


def test_ask_content_is_the_payload_as_json_and_an_ask_without_one_is_refused():
    """ASK-04 (approve --edit): the content an open ask carries is its payload as JSON; an ask that
    carries none is refused (65), saying to approve it without --edit."""
    assert json.loads(avsm.ask_content(7, {"payload": {"to": "a@b"}})) == {"to": "a@b"}
    assert avsm.ask_content(7, {"payload": ""}) == '""'
    with pytest.raises(avsm.Fail) as refused:
        avsm.ask_content(7, {"question": "Lower it?"})
    assert refused.value.code == 65 and "ask #7 carries no content to edit" in str(refused.value)
    assert "without --edit" in str(refused.value)
