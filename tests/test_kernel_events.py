"""The kernel's entries per event (issue 36 item 1): records in, intents out, `now` given.

A report read and a lever ended each reach the kernel as one function; the warden only carries
out what it yields. `Ledger.drive` (test_kernel_rules) folds each Write and Pause as the warden does."""

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
        ("Write", guard_dd(None, None, "guard dd failed: the failed metric report gives no drawdown",
                           status="failed", note="the failed metric report gives no drawdown"))]
    no_guard = Ledger(GUARDED % "pause")
    assert kinds(no_guard.drive(avsm.report_read(no_guard.state, 3, None))) == [("Write", "report")]
