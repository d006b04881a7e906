"""The kernel's entries per event (issue 36 item 1): records in, intents out, `now` given.

A report read and a lever ended each reach the kernel as one function; the warden only carries
out what it yields. `Ledger.drive` (test_kernel_rules) folds each Write and Pause as the warden
does."""

import avsm
from test_kernel import V
from test_kernel_rules import GUARDED, Ledger, kinds, outcome

DRAWDOWN = """\
purpose: Keep equity.
metric: equity
controller: {kind: threshold, above: 100000, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: true}
guards:
  - {name: dd, drawdown: 15%, of: equity}
"""


NO_DD = "the failed metric report gives no drawdown"


def guard_dd(value, past, summary, **fields):
    return dict({"kind": "guard.dd", "claim": "measured", "venture": V, "value": value,
                 "plausible": value is not None, "past": past, "bound": 15.0, "side": "above",
                 "summary": summary}, **fields)


def test_a_report_read_writes_the_report_then_its_drawdown_from_the_folded_peak():
    """GUARD-08: the drawdown guard reads the report's fall from the peak at report time: 100 then
    80 is 20%, past 15%."""
    led = Ledger(DRAWDOWN)
    assert led.drive(avsm.report_read(led.state, 100, None)) == [
        ("Write", {"kind": "report", "claim": "measured", "venture": V, "metric": "equity",
                   "value": 100, "status": "trusted", "plausible": True, "note": "",
                   "summary": "equity = 100"}),
        ("Write", guard_dd(0.0, False, "guard dd = 0%", status="trusted"))]
    done = led.drive(avsm.report_read(led.state, 80, None))
    assert kinds(done) == [("Write", "report"), ("Write", "guard.dd")]
    assert done[1][1] == guard_dd(20.0, True, "guard dd = 20% past its bound (> 15%)",
                                  status="trusted")
    assert avsm.guards_past(led.state) == [("dd", led.seq)]


def test_a_failed_report_is_written_and_its_drawdown_fails_with_it():
    """REPORT-06: a failed report is written with its note; the drawdown it gives is failed too,
    neither tripping nor clearing (past: null)."""
    led = Ledger(DRAWDOWN)
    done = led.drive(avsm.report_read(led.state, None, "exit 1"))
    assert done == [
        ("Write", {"kind": "report", "claim": "measured", "venture": V, "metric": "equity",
                   "value": None, "status": "failed", "plausible": False, "note": "exit 1",
                   "summary": "equity failed: exit 1"}),
        ("Write", guard_dd(None, None, f"guard dd failed: {NO_DD}", status="failed", note=NO_DD))]
    no_guard = Ledger(GUARDED % "pause")
    assert kinds(no_guard.drive(avsm.report_read(no_guard.state, 3, None))) == [("Write", "report")]


def test_the_stop_lever_is_its_action_then_a_pause_and_an_ok_outcome():
    """LEVER-05, open point 12: the stop lever runs no program; its action (at the gate's time) is
    followed by the pause of its venture, citing it, and an ok outcome."""
    led = Ledger(GUARDED % "pause")
    verdict = avsm.prove(led.state, "stop", 1040, ("person", [], ["a person stops v"]))
    assert next(avsm.lever_ran(led.state, "stop", verdict, "stop runs", "person")).at == 1040
    done = led.drive(avsm.lever_ran(led.state, "stop", verdict, "stop runs", "person"))
    assert kinds(done) == [("Write", "action"), ("Pause", "pause"), ("Write", "outcome")]
    assert done[1][1] == {"kind": "pause", "claim": "measured", "venture": V,
                          "summary": "the stop lever (action #2) paused v"}
    assert done[2][1] == {"kind": "outcome", "claim": "measured", "venture": V, "lever": "stop",
                          "action": 2, "ok": True, "status": "exit 0", "duration": 0, "note": "",
                          "summary": "stop ok: v is paused"}
    assert led.state.paused
    other = Ledger(GUARDED % "pause")
    lower = avsm.prove(other.state, "lower", 1041, ("person", [], ["a person lowers v"]))
    assert kinds(other.drive(avsm.lever_ran(other.state, "lower", lower, "lower runs", "person"))) \
        == [("Write", "action")]


def test_a_lever_that_ended_non_zero_is_a_failed_outcome_and_brings_no_facts():
    """LEVER-10, LEVER-18: a lever's outcome is ok only on exit 0 with nothing ending it (an
    oversized output does); only then are research's facts read."""
    led = Ledger(GUARDED % "pause")
    fact = '{"fact": "f", "source": "s"}'
    done = led.drive(avsm.lever_outcome(led.state, "lower", 7, 3, None, 1.5, 30, "tail", [fact]))
    assert done == [("Write", {"kind": "outcome", "claim": "measured", "venture": V,
                               "lever": "lower", "action": 7, "ok": False, "status": "exit 3",
                               "ended_by": None, "duration": 1.5, "note": "tail",
                               "summary": "lower failed: exit 3 in 1.5s"})]
    assert kinds(led.drive(avsm.lever_outcome(led.state, "research", 7, 3, None, 1, 30, "",
                                              [fact]))) == [("Write", "outcome")]
    assert kinds(led.drive(avsm.lever_outcome(led.state, "research", 7, -9, "oversized", 1, 30, "",
                                              [fact]))) == [("Write", "outcome")]
    assert kinds(led.drive(avsm.lever_outcome(led.state, "research", 7, 0, None, 1, 30, "",
                                              [fact]))) == [("Write", "fact"), ("Write", "outcome")]


def test_a_lever_or_check_that_could_not_start():
    """LEVER-10, open point 27: a lever that could not start has a not-ok outcome taking no time; a
    check that could not start refuses its lever."""
    led = Ledger(GUARDED % "pause")
    (outcome,) = led.drive(avsm.unstarted_outcome(led.state, "lower", 7, "no such file"))
    assert outcome[1] == {"kind": "outcome", "claim": "measured", "venture": V, "lever": "lower",
                          "action": 7, "ok": False, "status": "not started", "duration": 0,
                          "note": "no such file", "summary": "lower failed to start: no such file"}
    (mail,) = led.drive(avsm.unstarted_outcome(led.state, "sell", 8, "", "mail.send needs x"))
    assert mail[1]["summary"] == "sell failed: mail.send needs x" and mail[1]["note"] == ""
    (refusal,) = led.drive(avsm.refusal(led.state, "lower", "its check could not start: no such file",
                                        "lower refused: its check could not start", by="controller"))
    assert refusal[1] == {"kind": "refusal", "claim": "measured", "venture": V, "lever": "lower",
                          "by": "controller", "why": "its check could not start: no such file",
                          "summary": "lower refused: its check could not start"}


SPENT = GUARDED % "pause"


def ended(led, round_, read, now=0.1):
    """Drive read_ended as the warden does; return (intents done, the round it hands back)."""
    box = {}

    def event():
        box["round"] = yield from avsm.read_ended(led.state, round_, read, now, False)
    return led.drive(event()), box["round"]


def read(what, name, value, number=7, ended_by=None):
    """The Read of a program that printed `value` and exited 0 (or was ended by `ended_by`)."""
    out = b"" if value is None else f"{value}\n".encode()
    return avsm.Read(what, name, 0, out, False, "", number, ended_by, 600)


def test_what_a_reading_program_printed_is_read_by_the_kernel():
    """GUARD-14, RUN-14: the number is the last non-empty line alone; a program that could not
    start, failed, printed a cut or no line, or a number past the largest, is a failure saying
    why; a guard's failure is told without what it wrote, the report's lines are not kept."""
    def output(what, out, status=0, cut=False, note="", ended_by=None):
        return avsm.read_output(avsm.Read(what, "n", status, out, cut, note, 1, ended_by, 60))
    assert output("reading", b"lead\r\n\n 42 \n") == (42, None, "lead\n 42 ")
    assert output("report", b"lead\n3.5\n") == (3.5, None, "")
    assert output("guard", b"", None, note="could not start: no such file") == (
        None, "could not start: no such file", "")
    assert output("guard", b"oops\n", 1, note="oops") == (None, "exit 1", "oops")
    assert output("audit", b"oops\n", 1, note="oops") == (None, "exit 1: oops", "oops")
    assert output("report", b"7\n", ended_by="timeout")[:2] == (
        None, "took longer than its time limit of 1m and was ended")
    assert output("report", b"7\n", ended_by="oversized")[:2] == (None, "ended: oversized")
    assert output("report", b"x" * 10, cut=True)[1].startswith("the last line is longer than")
    assert output("report", b"\n  \n")[:2] == (None, "printed no number")
    assert output("report", b"1e999\n")[1] == "1e999 is past the largest number a report may hold"
    assert output("report", b"7 apples\n")[1] == 'the last line is not a number alone: "7 apples"'


def test_a_read_ended_writes_its_record_and_the_round_settles_once_all_are_in():
    """RUN-16, RUN-17: the guard read apart is written and leaves the round waiting for the
    metric; the report then settles it (no reading left unread) and no round is left in flight."""
    led = Ledger(SPENT)
    round_ = {"deadline": 0.5, "metric": None, "pending": {("guard", "spend")}, "number": 7}
    done, round_ = ended(led, round_, read("guard", "spend", 20))
    assert kinds(done) == [("Write", "guard.spend")]
    assert round_ == {"deadline": 0.5, "metric": None, "pending": set(), "number": 7}
    done, after = ended(led, round_, read("report", None, 3))
    assert kinds(done)[0] == ("Write", "report") and after is None
    assert ("Write", "guard.spend") not in kinds(done)        # read once, not again as unread


def test_a_read_cut_short_is_no_reading_and_one_past_its_limit_failed_so():
    """RUN-14, RUN-15: a program ended by a pause or a stop writes nothing and leaves the round as
    it was; one ended at its time limit is a failed reading saying so."""
    led = Ledger(SPENT)
    round_ = {"deadline": 0.5, "metric": None, "pending": {("guard", "spend")}, "number": 7}
    for why in ("pause", "stop"):
        assert ended(led, round_, read("guard", "spend", None, ended_by=why)) == (
            [], round_)
    done, _ = ended(led, round_, read("guard", "spend", None, ended_by="timeout"))
    assert done[0][1]["status"] == "failed"
    assert done[0][1]["note"] == "took longer than its time limit of 10m and was ended"


def test_a_late_reading_is_written_and_leaves_the_round_in_flight_alone():
    """RUN-18: a reading of an earlier round, ended after its round settled without it, is written
    (its guard's rules run on it alone) and the round now in flight still waits for its own."""
    led = Ledger(SPENT)
    round_ = {"deadline": 9.0, "metric": 5, "pending": {("guard", "spend")}, "number": 8}
    done, after = ended(led, round_, read("guard", "spend", 150, number=7))
    assert kinds(done) == [("Write", "guard.spend"), ("Pause", "pause")]
    assert after is round_


def test_a_round_past_its_deadline_settles_what_is_unread():
    """RUN-18: round_due settles a round whose metric is in once its deadline passed, writing what
    is still running as not read; before the deadline it waits."""
    led = Ledger(SPENT)
    report = led.add({"kind": "report", "claim": "measured", "venture": V, "metric": "dial",
                      "value": 3, "status": "trusted", "plausible": True, "note": "",
                      "summary": "dial = 3"})
    round_ = {"deadline": 0.5, "metric": report, "pending": {("guard", "spend")}, "number": 7}
    box = {}

    def due(now):
        box["round"] = yield from avsm.round_due(led.state, round_, now, False)
    assert led.drive(due(0.4)) == [] and box["round"] is round_
    done = led.drive(due(0.6))
    assert kinds(done)[0] == ("Write", "guard.spend") and box["round"] is None
    assert done[0][1]["status"] == "not read"


PROVED = """\
purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 10, action: lower}
cadence: 10s
permitted:
  - {name: lower, run: ./lower, cap: 9/hour, reversible: true, timeout: 30s, takes: text}
  - {name: tidy, run: ./tidy, cap: 9/hour, reversible: true, check: ./ok}
  - {name: notify, run: mail.send, cap: 9/hour, reversible: true}
  - {name: research, cap: 9/hour, reversible: true}
"""


def proved(lever, cfg=None, unsafe=None, payload=None, check=False, unstarted=None):
    """Drive gated for a person's `lever` as the warden does: [(intent, record or itself)];
    Owners is answered with `unsafe`, a Launch or a Check with `unstarted` (why it did not);
    `check`: its check passed first."""
    led = Ledger(PROVED)
    basis = ("person", [], [f"a person asks for {lever}"])
    if check:       # its check passed: the record the Gate cites
        check = led.add({"kind": "check", "claim": "measured", "venture": V, "lever": lever,
                         "ok": True, "status": "exit 0", "note": "", "summary": "it passed"})
    gate = avsm.Gate(lever, basis, payload=payload, by="person", summary=f"{lever} runs",
                     extra=avsm.some(payload=payload), check=check or None)
    cfg = cfg or {"adapters": {}, "research": None}
    verdict, steps = avsm.gated(led.state, gate, 1040, cfg)
    assert verdict.ok, verdict.why
    done, result = [], None
    while True:
        try:
            intent = steps.send(result)
        except StopIteration:
            return done
        if isinstance(intent, avsm.Owners):
            assert intent.programs == avsm.lever_programs(led.state.mandate["levers"].get(lever))
            result = unsafe
            continue
        result = (led.add(intent.record) if isinstance(intent, (avsm.Write, avsm.Pause))
                  else unstarted)
        done.append((type(intent).__name__,
                     intent.record if hasattr(intent, "record") else intent))


def test_a_gate_refused_runs_nothing_and_leaves_the_refusal_to_its_rule():
    """LEVER-01, PROOF-01: the gate's event returns its Verdict; a lever it cannot prove (here one
    the mandate does not permit) calls for nothing, its rule writing the refusal."""
    led = Ledger(PROVED)
    gate = avsm.Gate("wipe", ("person", [], ["a person asks for wipe"]), by="person")
    verdict, runs = avsm.gated(led.state, gate, 1040, {"adapters": {}, "research": None})
    assert not verdict.ok and verdict.why and tuple(runs) == ()


def test_a_proved_lever_is_its_action_then_its_program_for_the_warden_to_start():
    """LEVER-02, LEVER-07, LEVER-09: the action is written first; then the program to start, in
    the venture directory with its time limit, its owners already checked."""
    done = proved("lower", payload="x")
    assert [what for what, _ in done] == ["Write", "Launch"]
    assert done[0][1]["kind"] == "action" and done[0][1]["lever"] == "lower"
    assert done[1][1] == avsm.Launch("lower", 2, "./lower", b"x", {}, None, True, 30)


def test_a_lever_with_a_check_starts_the_check_and_writes_nothing_yet():
    """Open point 27, AUDIT-07: a lever with check: runs its check first, handed the venture, the
    lever, the payload and the audits' notes; the gate proves it again once the check passed (its
    seq in the Gate), and only then is the action written."""
    done = proved("tidy")
    assert [what for what, _ in done] == ["Check", "Write"] and done[0][1].gate.lever == "tidy"
    assert done[0][1].data == {"venture": V, "lever": "tidy", "payload": None, "audits": {}}
    assert done[1][1]["kind"] == "begun" and done[1][1]["what"] == "check", "it holds the lever"
    assert [what for what, _ in proved("tidy", check=True)] == ["Write", "Launch"]


def test_a_check_or_a_lever_that_cannot_start_is_a_refusal_or_a_failed_outcome():
    """Open point 27, LEVER-09: a check that could not start is no pass: the lever is refused
    saying why, with no check record; a lever whose program could not start after its action is
    written has the outcome of one not started, saying why."""
    done = proved("tidy", unstarted="[Errno 2] No such file or directory")
    assert [(what, r["kind"]) for what, r in done[1:]] == [("Write", "refusal")]
    assert done[1][1]["why"] == "its check could not start: [Errno 2] No such file or directory"
    assert done[1][1]["summary"] == "tidy refused: its check could not start"
    done = proved("lower", payload="x", unstarted="[Errno 13] Permission denied")
    assert [what for what, _ in done] == ["Write", "Launch", "Write"]
    outcome = done[2][1]
    assert (outcome["kind"], outcome["ok"], outcome["status"], outcome["action"]) == (
        "outcome", False, "not started", 2)
    assert outcome["summary"] == "lower failed to start: [Errno 13] Permission denied"


def test_a_lever_another_user_could_change_is_refused_before_its_action():
    """Issue 32 item 6: what owner_problem found refuses the lever with its fix and writes no
    action; the stop lever, which runs nothing, is not held by it (LEVER-05's stop: a pause)."""
    unsafe = avsm.Writable("./lower is writable by group staff", "chmod g-w ./lower")
    done = proved("lower", unsafe=unsafe, payload="x")
    assert [(what, r["kind"]) for what, r in done] == [("Write", "refusal")]
    assert "chmod g-w ./lower" in done[0][1]["summary"]
    assert [(what, r["kind"]) for what, r in proved("stop", unsafe=unsafe)] == [
        ("Write", "action"), ("Pause", "pause"), ("Write", "outcome")]


def test_research_and_mail_without_their_config_fail_after_their_action():
    """LEVER-17, LEVER-19, CONFIG-07: research with no research: command, and mail.send with no
    adapters: mail:, are each an action then a failed outcome saying what to configure; with them,
    the configured command is what starts."""
    research = proved("research", payload="why?")
    assert [(what, r["kind"]) for what, r in research] == [("Write", "action"),
                                                           ("Write", "outcome")]
    assert "config.yaml names no research: command" in research[1][1]["summary"]
    mail = proved("notify", payload="To: a@b\n\nhi")
    assert mail[1][1]["summary"] == ("notify failed: mail.send needs adapters: mail: in "
                                     "config.yaml and a text payload")
    cfg = {"adapters": {"mail": {"from": "avsm@h", "command": "sendmail -t"}},
           "research": "./ask"}
    launch = proved("notify", cfg, payload="To: a@b\n\nhi")[1][1]
    assert launch.run == "sendmail -t" and launch.data.startswith(b"From: avsm@h\n")
    asked = proved("research", cfg, payload="why?")[1][1]
    assert asked.run == "./ask" and asked.more["head"] == avsm.REPLY_MAX and not asked.checked


ESCALATE = {"escalate": "far", "backends": {"near": {"offbox": False}, "far": {"offbox": False}}}


def replied(led, d, event, content=None):
    """Drive a reply's event as the warden's carry_out does (a Gate proved is answered with its
    Verdict, its action's seq in it; a Content with `content`): (intents done, what the event says
    comes next)."""
    done, result = [], None
    while True:
        try:
            intent = event.send(result)
        except StopIteration as end:
            return done, end.value
        if isinstance(intent, avsm.Gate):
            result = avsm.prove(led.state, intent.lever, led.at + 1, intent.basis,
                                trigger=intent.trigger, payload=intent.payload)
            if result.ok:
                action = led.add(avsm.action_record(led.state, intent.lever, result,
                                                    intent.summary, intent.by))
                result = result._replace(action=action)
            done.append(("Gate", result))
        elif isinstance(intent, avsm.Content):
            result = content
        else:
            result = led.add(intent.record)
            done.append((type(intent).__name__, intent.record))


def decision(by="person"):
    d = avsm.Decision(V, by, "near", None)
    d.request = {"system": "s", "user": "u"}
    return d


def test_an_unusable_reply_escalates_and_the_escalation_is_answered():
    """ESC-01, ESC-04, ESC-06: an unusable reply writes only its record, then the escalation to
    the config's second backend, which the event returns to be asked; when the second backend's
    reply is unusable too, the escalation is answered "unusable" and the decision is done."""
    led, d = Ledger(SPENT), decision()
    done, then = replied(led, d, avsm.reply_parsed(led.state, d, {"unusable": "not JSON"}, None,
                                                   ESCALATE, False))
    assert [(w, r["kind"]) for w, r in done] == [("Write", "unusable"), ("Write", "escalation")]
    assert then == "far" and d.escalation == led.seq
    assert d.lines == [f"#{led.seq - 1} unusable: not JSON", f"#{led.seq} escalation to far"]
    done, then = replied(led, d, avsm.reply_unusable(led.state, d, "cut off", ESCALATE, False))
    assert [(w, r["kind"]) for w, r in done] == [("Write", "unusable"), ("Write", "answer")]
    assert done[1][1]["escalation"] == d.escalation and done[1][1]["cited"] == "unusable"
    assert then is None


def test_a_reply_not_escalated_says_why_and_ends():
    """ESC-01, ESC-08: with no escalate: the unusable reply ends the decision; while avsmd stops,
    or with an off-box second backend the mandate does not allow, it says why it was not sent."""
    led, d = Ledger(SPENT), decision()
    parsed = {"error": "bad bytes"}
    done, then = replied(led, d, avsm.reply_parsed(led.state, d, parsed, None,
                                                   {"backends": {}}, False))
    assert then is None and [r["why"] for _, r in done] == [
        "the roles process could not parse the reply: bad bytes"]
    d = decision()
    _, then = replied(led, d, avsm.reply_unusable(led.state, d, "x", ESCALATE, True))
    assert then is None and d.lines[-1] == "not escalated: avsmd is stopping"
    offbox = dict(ESCALATE, backends={"far": {"offbox": True}})
    d = decision()
    _, then = replied(led, d, avsm.reply_unusable(led.state, d, "x", offbox, False))
    assert then is None and "escalate: offbox" in d.lines[-1]


def test_a_reply_to_a_venture_that_can_no_longer_run_runs_nothing():
    """ESC-06, VENTURE-14: a reply that comes after the venture's mandate stopped holding (its
    directory gone while the call ran) is an unusable record saying so, escalated nowhere, and its
    choices go to no rule (it had raised in the warden)."""
    led, d = Ledger(SPENT), decision()
    led.state.mandate, led.state.problem = None, "its directory /v is not there"
    parsed = {"choices": [{"choice": "action", "action": "lower", "reason": "too high"}]}
    done, then = replied(led, d, avsm.reply_parsed(led.state, d, parsed, None, ESCALATE, False))
    assert then is None and [r["kind"] for _, r in done] == ["unusable"]
    assert done[0][1]["why"] == f"{V} cannot run: its directory /v is not there"
    assert d.lines[-1] == f"not escalated: {V} cannot run: its directory /v is not there"


def test_a_look_is_written_with_its_answer_and_asks_again():
    """MODEL-08: a model's look-up is written with the answer it is shown; the event returns
    "look" (the packet is built again with it), and what an escalation looked up is cited by its
    answer (ESC-03)."""
    led, d = Ledger(SPENT), decision()
    d.escalation = 1
    look = {"choice": "why", "record": 1}
    done, then = replied(led, d, avsm.reply_parsed(led.state, d, {"look": look}, "#1 the mandate",
                                                   ESCALATE, False))
    assert then == "look" and [r["kind"] for _, r in done] == ["look"]
    assert done[0][1]["answer"] == "#1 the mandate" and done[0][1]["escalation"] == 1
    assert d.looks == [{"look": look, "answer": "#1 the mandate"}]
    assert d.escalation_looks == [led.seq]


def test_choices_become_proposals_the_gate_proves_and_an_escalation_cites_them():
    """MODEL-05, ESC-03, ESC-04: each choice is an inferred proposal and what the gate makes of
    it; content the venture's files refuse is refused; an escalation's answer cites what it
    brought (its looks, proposals and actions); the decision is then done."""
    led, d = Ledger(SPENT), decision("self")
    d.escalation, d.escalation_looks = 1, [1]
    choices = [{"choice": "action", "action": "lower", "reason": "too high"},
               {"choice": "action", "action": "sell", "payload": {"qty": 1}}]
    parsed = {"choices": choices}
    done, then = replied(led, d, avsm.reply_parsed(led.state, d, parsed, None, ESCALATE,
                                                   False))
    assert then is None
    assert [w if w == "Gate" else r["kind"] for w, r in done] == [
        "proposal", "Gate", "proposal", "ask", "answer"]
    proposal, action = done[0][1], led.state.actions["lower"][-1][0]
    assert proposal["lever"] == "lower" and proposal["claim"] == "inferred"
    assert done[-1][1]["cited"] == [1, action - 1, action, action + 1, action + 2]
    assert d.lines[1] == f"#{action} action lower"
    d = decision("self")
    done, _ = replied(led, d, avsm.reply_parsed(led.state, d, {"choices": choices[1:]}, None,
                                                ESCALATE, False), "it leaves the venture")
    assert [r["kind"] for _, r in done] == ["proposal", "refusal"]
    assert "it leaves the venture" in done[1][1]["why"]


def test_a_record_written_is_folded_and_yields_its_notice_and_the_canary_due():
    """SELF-04, SELF-05: `written` folds a record into its venture and returns its notice and the
    canary ask due after every N asks a person was asked (a canary itself is not counted); with
    canary asks off none is due; a record of no venture held (self) is not folded."""
    led = Ledger(DRAWDOWN)
    ventures = {V: led.state}
    ask = {"kind": "ask", "claim": "declared", "venture": V, "about": "lever", "lever": "lower",
           "question": "run lower?", "summary": "run lower?"}
    seq = 100
    for n in (1, 2):
        seq += 1
        notice, canary, checkpoint = avsm.written(ventures, seq, 2000, dict(ask), 2)
        assert not checkpoint, "an ask is no irreversible action"
        assert led.state.asks_made == n and notice["seq"] == seq
        assert (canary is None) == (n == 1), n
    assert canary["canary"] is True and canary["venture"] == V
    assert avsm.written(ventures, seq + 1, 2000, canary, 2)[1] is None
    assert led.state.asks_made == 2, "a canary is not one of the asks it counts"
    assert avsm.written(ventures, seq + 2, 2000, dict(ask), None)[1] is None
    assert avsm.written(ventures, seq + 3, 2000, dict(ask), 1)[1]["canary"] is True
    other = dict(ask, venture="self")
    assert avsm.written(ventures, seq + 4, 2000, other, 1) == (avsm.notice_of(seq + 4, other),
                                                                None, False)
    assert led.state.asks_made == 4


def forecasts_refused(rule, seen):
    """Drive `rule` as the warden does with no forecast able to start: a Forecast is answered
    False, a ReadMandate with a file that cannot be read, and both go to `seen`."""
    result = None
    while True:
        try:
            intent = rule.send(result)
        except StopIteration:
            return
        if isinstance(intent, (avsm.Forecast, avsm.ReadMandate)):
            seen.append(intent)
            result = False if isinstance(intent, avsm.Forecast) else (
                "/v/mandate.yaml", None, "it is gone")
        else:
            result = yield intent


def test_an_approval_whose_lever_runs_asks_the_ratchet_and_a_canarys_is_its_record_alone():
    """SELF-02, SELF-04: answering an ask is the kernel's: a person's yes to a canary ask writes
    its canary record and nothing else; a yes whose lever runs is followed by the ratchet once
    `ratchet` approvals are in (a Forecast first, then the ratchet ask), and by none without."""
    led = Ledger(GUARDED % "pause")
    canary = avsm.canary_ask(led.state, 4, 4)
    seq = led.add(canary)
    done = led.drive(avsm.approval_rule(led.state, seq, canary, {}, led.at + 1, 1))
    assert kinds(done) == [("Write", "canary")] and done[0][1]["passed"] is False
    ask = {"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe",
           "summary": "?"}
    seen = []
    seq = led.add(dict(ask))
    led.drive(forecasts_refused(
        avsm.approval_rule(led.state, seq, dict(ask), {}, led.at + 1, None), seen))
    assert seen == [], "no ratchet: off"
    led.add(outcome("wipe", led.seq))
    seq = led.add(dict(ask))
    done = led.drive(forecasts_refused(
        avsm.approval_rule(led.state, seq, dict(ask), {}, led.at + 1, 2), seen))
    assert kinds(done) == [("Write", "approval"), ("Gate", "wipe"), ("Write", "ask")]
    assert done[1][1][2].ok and done[2][1]["about"] == "ratchet"
    assert done[2][1]["question"].endswith("(edit it by hand: it is gone)")
    assert seen == [avsm.Forecast("wipe"), avsm.ReadMandate()]


def test_every_escalation_still_open_at_a_stop_or_after_a_dead_warden_is_answered_unusable():
    """ESC-04: the escalations still open are folded from the ledger (an escalation opens one, its answer
    closes it); at a stop, and when a warden that died left one, each gets its answer from the kernel:
    unusable, saying why, citing nothing."""
    led = Ledger(GUARDED % "pause")
    esc = {"kind": "escalation", "claim": "measured", "venture": V, "from": "first", "to": "second",
           "why": "the reply was not JSON", "summary": "escalated"}
    first, second = led.add(dict(esc)), led.add(dict(esc))
    led.add({"kind": "answer", "claim": "measured", "venture": V, "escalation": first, "cited": [],
             "summary": "answered"})
    assert led.state.escalating == {second: "second"}
    done = list(avsm.unanswered(led.state, "avsmd stopped before the answer came"))
    assert [(i.record["venture"], i.record["escalation"], i.record["cited"]) for i in done] == \
        [(V, second, "unusable")]
    assert isinstance(done[0], avsm.Write) and "avsmd stopped before the answer came" in done[0].record["summary"]
    left = [i.record for i in avsm.interrupted_rule(led.state, led.at, 2)]
    assert [(r["kind"], r["escalation"], r["cited"]) for r in left] == [("answer", second, "unusable")]
    assert "the warden ended before the answer came" in left[0]["summary"]
    led.add(left[0])
    assert led.state.escalating == {} and list(avsm.unanswered(led.state, "stop")) == []


def test_a_venture_that_cannot_run_is_told_unless_paused_and_a_ledger_back_is_a_record():
    """VENTURE-14, RUN-19: the kernel says whether an adopted venture that cannot run is told of
    (not when paused, not when it can), and builds the record of a ledger that takes writes again."""
    led = Ledger(DRAWDOWN)
    assert avsm.cannot_run_notice(led.state) is None
    led.state.problem = "its directory /srv/v is not there"
    notice = avsm.cannot_run_notice(led.state)
    assert notice["kind"] == "cannot-run" and notice["venture"] == V
    assert f"{V} cannot run: its directory /srv/v is not there" in notice["summary"]
    led.state.paused = True
    assert avsm.cannot_run_notice(led.state) is None
    record = avsm.ledger_back_record("disk I/O error")
    assert (record["kind"], record["venture"]) == ("ledger", "self")
    assert record["summary"] == "the ledger takes writes again (it could not: disk I/O error)"


def test_a_new_mandate_ends_the_kept_program_only_when_it_runs_another():
    """VENTURE-07: adopting a mandate ends the kept `run` program of the one in force only
    when the new one runs another command (or none); the same command keeps running."""
    text = DRAWDOWN + "run: ./serve\n"
    led = Ledger(text)
    same = avsm.parse_mandate(text, "m")
    assert not avsm.run_replaced(led.state, same)
    assert avsm.run_replaced(led.state, avsm.parse_mandate(DRAWDOWN + "run: ./other\n", "m"))
    assert avsm.run_replaced(led.state, avsm.parse_mandate(DRAWDOWN, "m")), "no run any more"
    led.state.mandate = avsm.parse_mandate(DRAWDOWN, "m")
    assert not avsm.run_replaced(led.state, same), "none ran before"
    led.state.mandate = None
    assert not avsm.run_replaced(led.state, same), "no mandate in force"


def test_a_mandate_adopted_is_its_record_then_the_mandate_in_force():
    """VENTURE-01, VENTURE-07, PAUSE-02: adoption is the kernel's event: the mandate record, then
    the mandate put in force, the kept program ended only when another runs now, and the venture
    started unless it is paused, then an add's forecast (FORECAST-01); a ratchet's change cites the
    approval it came from and forecasts nothing; the mandate in force added again from its directory
    writes nothing, and is put in force again when it could not run. VENTURE-14"""
    text = DRAWDOWN + "run: ./serve\n"
    led = Ledger(text)
    other = avsm.parse_mandate(DRAWDOWN + "run: ./other\n", "m")
    write, adopt, forecast = avsm.adoption_rule(led.state, other, "new text", "/srv/v")
    assert forecast == avsm.Forecast(None, "add")
    assert (write.record["kind"], write.record["directory"], write.record["text"]) == (
        "mandate", "/srv/v", "new text")
    assert write.record["sha256"] == avsm.text_sha256("new text")
    assert adopt == avsm.Adopt(other, True, True)
    led.state.paused = True
    same = avsm.parse_mandate(text, "m")
    ask = {"lever": "lower"}
    write, adopt = avsm.adoption_rule(led.state, same, text, "/srv/v", ask, 41)
    assert write.record["approval_of"] == 41 and "lower delegated" in write.record["summary"]
    assert adopt == avsm.Adopt(same, False, False), "the same run goes on; paused: not started"
    led.add(write.record)
    assert list(avsm.adoption_rule(led.state, same, text, "/srv/v")) == [], \
        "the mandate in force, added again from its directory: nothing written"
    assert len(list(avsm.adoption_rule(led.state, same, text, "/srv/w"))) == 3, "another directory"
    led.state.mandate, led.state.paused = None, False      # it could not run (VENTURE-14), now it can
    assert list(avsm.adoption_rule(led.state, same, text, "/srv/v")) == [avsm.Adopt(same, False, True)], \
        "added again once fixed: put in force and started, nothing written"
