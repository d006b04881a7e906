"""The kernel's entries per event (issue 36 item 1): records in, intents out, `now` given.

A report read and a lever ended each reach the kernel as one function; the warden only carries
out what it yields. `Ledger.drive` (test_kernel_rules) folds each Write and Pause as the warden
does."""

import avsm
from test_kernel import V
from test_kernel_rules import GUARDED, Ledger, kinds

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
