"""Slow readings finish (issue 15 item 3): a report, guard, audit, reading or adapter metric still running at its
next due time is written as not read and keeps running until done or its time limit, 10 minutes or its own
`timeout:`; it is not ended at one cadence, and its value, once done, is the reading. RUN-16 RUN-17 RUN-18
(DESIGN: "A reading program ... is not ended at one cadence", replacing open point 54's proposal)."""

import os
import time

import pytest

from conftest import make_venture, write
from test_adapters import Site
from test_daemon import of

MARK = "#!/bin/sh\necho x >> ran\n"

SLOW = """purpose: Keep the dial low while slow readings finish.
metric: dial
controller: {{kind: threshold, above: 10, action: lower}}
cadence: 1s
{extra}permitted:
  - {{name: lower, run: ./lower, cap: 600/hour, reversible: true}}
{items}"""


def venture(root, name, items, extra="", report="#!/bin/sh\necho 50\n", **files):
    return make_venture(root, name, SLOW.format(items=items, extra=extra), dict({"report": report, "lower": MARK}, **files))


def read(records, kind, venture):
    """[(seq, record)] of `venture`'s `kind` records that were read (neither not read nor failed)."""
    return [(s, r) for s, r in of(records, kind, venture) if r["status"] in ("trusted", "read")]


@pytest.fixture
def site():
    s = Site()
    yield s
    s.close()


def test_a_two_second_http_status_guard_on_a_one_second_cadence_is_read(av, workdir, site):
    """Issue 15 item 3's failing case: an http.status guard answering in 2 s on a 1 s cadence was ended at
    every cadence and never read, which held the venture implausible for ever. Now it is written not read
    while it runs (RUN-18), then read with its value (200), and the venture is not held by it. RUN-16 GUARD-06"""
    site.routes["/slow"] = (200, b"ok", {}, 2)
    d = venture(workdir, "web", f"guards:\n  - {{name: web, adapter: http.status {site.url}/slow, above: 500}}\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: read(rs, "guard.web", "web") and rs, timeout=10, what="the slow guard's reading")
    (seq, guard), *_ = read(recs, "guard.web", "web")
    assert guard["value"] == 200 and guard["plausible"] is True and guard["past"] is False
    unread = [r for s, r in of(recs, "guard.web", "web") if s < seq]
    assert unread and all(r["status"] == "not read" for r in unread), unread
    assert any(r["note"] == "its last read is still running" for r in unread), "the next due time wrote it not read"
    assert not [r for _, r in of(recs, "guard.web", "web") if r["status"] == "failed"], "ended at one cadence"
    status = av.cli("status").stdout
    assert "held by guard web" not in status, status


def test_a_slow_metric_guard_audit_and_reading_finish_with_their_values(av, workdir):
    """A ./report, a guard command, an audit and a reading each taking 1.6 s on a 1 s cadence run to their end:
    each is read with its value, none is ended at the cadence; the report waits for its metric (RUN-17) and the
    others are written not read while they run (RUN-18). RUN-16"""
    d = venture(workdir, "slow",
                "guards:\n  - {name: spend, run: sleep 1.6; echo 5, above: 100}\n"
                "audits:\n  - {name: refunds, run: sleep 1.6; echo 7, worse: up}\n"
                "readings:\n  - {name: waiting, run: sleep 1.6; echo bob@example.org; echo 3, lines: address}\n",
                report="#!/bin/sh\nmkdir running || echo two >> clash\nsleep 1.6\nrmdir running\necho 50\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: all(read(rs, k, "slow") for k in ("report", "guard.spend", "audit.refunds",
                                                                       "reading.waiting")) and rs,
                       timeout=10, what="each slow program's reading")
    assert [r["value"] for _, r in read(recs, "report", "slow")][:1] == [50]
    assert read(recs, "guard.spend", "slow")[0][1]["value"] == 5
    assert read(recs, "audit.refunds", "slow")[0][1]["value"] == 7
    reading = read(recs, "reading.waiting", "slow")[0][1]
    assert reading["value"] == 3 and reading["fields"] == "bob@example.org"
    for kind in ("report", "guard.spend", "audit.refunds", "reading.waiting"):
        assert not [r for _, r in of(recs, kind, "slow") if r["status"] == "failed"], (kind, "ended at one cadence")
    # the tick at 1 s came while the first report ran (1.6 s): a round started then would have marked a clash
    assert not os.path.exists(os.path.join(d, "clash")), "a round started while its report still ran"


def test_a_reading_is_ended_at_its_own_timeout(av, workdir):
    """`timeout:` on a guard, and at the mandate's top level for the metric's report, is that program's time
    limit: past it the program is ended (RUN-15) and its reading counts as failed, saying which limit; a program
    without one on the same 1 s cadence runs on past the cadence. RUN-16 RUN-18"""
    d = venture(workdir, "limited", "guards:\n  - {name: spend, run: sleep 4.5; echo 5, above: 100, timeout: 2s}\n"
                                    "  - {name: patient, run: sleep 1.6; echo 6, above: 100}\n",
                extra="timeout: 2s\n", report="#!/bin/sh\nsleep 4.5\necho 50\n")
    av.start()
    t0 = time.monotonic()
    assert av.cli("add", d).returncode == 0
    failed = lambda rs, kind: [r for _, r in of(rs, kind, "limited") if r["status"] == "failed"]   # noqa: E731
    recs = av.wait_for(lambda rs: failed(rs, "guard.spend") and failed(rs, "report") and rs,
                       timeout=8, what="the guard and the report ended at their time limit")
    took = time.monotonic() - t0
    assert took > 1.8, f"ended after {took:.1f} s, before its 2 s time limit (at the 1 s cadence)"
    note = "took longer than its time limit of 2s and was ended"
    assert failed(recs, "guard.spend")[0]["note"] == note
    assert failed(recs, "report")[0]["note"] == note
    recs = av.wait_for(lambda rs: read(rs, "guard.patient", "limited") and rs, timeout=6, what="the patient guard")
    assert read(recs, "guard.patient", "limited")[0][1]["value"] == 6
    assert not failed(recs, "guard.patient")


def test_a_timeout_that_does_not_hold_is_refused_like_a_levers(av, workdir):
    """A reading's `timeout:` is a duration, checked as a lever's is: `1h30` and `0s` do not hold, with the
    same message and exit code at file:line:col; a drawdown guard runs nothing, so it takes none. MANDATE-07"""
    lever = make_venture(workdir, "lever", SLOW.format(extra="", items="").replace("reversible: true}",
                                                                                     "reversible: true, timeout: 1h30}"),
                         {"report": "#!/bin/sh\necho 1\n", "lower": MARK})
    expected = av.daemon_cmd("-t", lever)
    assert expected.returncode == 65 and "'1h30' is not a duration; write 90m" in expected.stderr
    cases = {"guard": ("guards:\n  - {name: spend, run: ./spend, above: 100, timeout: 1h30}\n", "8:"),
             "audit": ("audits:\n  - {name: refunds, run: ./spend, worse: up, timeout: 1h30}\n", "8:"),
             "reading": ("readings:\n  - {name: waiting, run: ./spend, lines: address, timeout: 1h30}\n", "8:"),
             "metric": ("", "5:")}
    for name, (items, line) in cases.items():
        d = venture(workdir, name, items, extra="timeout: 1h30\n" if name == "metric" else "", spend="#!/bin/sh\necho 1\n")
        r = av.daemon_cmd("-t", d)
        assert r.returncode == expected.returncode, (name, r)
        assert r.stderr.startswith(f"avsmd: {d}/mandate.yaml:{line}"), (name, r.stderr)
        assert r.stderr.endswith("'1h30' is not a duration; write 90m\n"), (name, r.stderr)
    zero = venture(workdir, "zero", "guards:\n  - {name: spend, run: ./spend, above: 100, timeout: 0s}\n", spend=MARK)
    r = av.daemon_cmd("-t", zero)
    assert r.returncode == 65 and "'0s' is not a duration; a duration is more than zero" in r.stderr
    dd = venture(workdir, "dd", "guards:\n  - {name: fall, drawdown: 10%, of: dial, timeout: 5s}\n")
    r = av.daemon_cmd("-t", dd)
    assert r.returncode == 65 and "a drawdown guard is read from the metric's report and runs nothing" in r.stderr
    ok = venture(workdir, "ok", "guards:\n  - {name: spend, run: ./spend, above: 100, timeout: 30s}\n",
                 extra="timeout: 1m\n", spend=MARK)
    assert av.daemon_cmd("-t", ok).returncode == 0


def test_the_decisions_on_a_slow_reading_are_pure():
    """The kernel's part (round_started): a round starts each guard (but a drawdown guard), audit and reading,
    and writes as not read the one whose last read still runs; its time limit is its own `timeout:` or 10 minutes, never the
    cadence; a reading that ends after its round settled is late. RUN-18"""
    import avsm
    m = avsm.parse_mandate(SLOW.format(extra="timeout: 1m\n", items=(
        "guards:\n  - {name: spend, run: ./spend, above: 100, timeout: 30s}\n  - {name: fall, drawdown: 10%, of: dial}\n"
        "audits:\n  - {name: refunds, run: ./refunds, worse: up}\n"
        "readings:\n  - {name: waiting, run: ./waiting, lines: address, timeout: 2h}\n")))
    state = avsm.VentureState("slow")
    state.mandate = m
    rule, unread = avsm.round_started(state, {("guard", "spend"), ("reading", "other")}, 9, 100.0), []
    while True:
        try:
            unread.append(rule.send(None))
        except StopIteration as end:
            round_, starts = end.value
            break
    assert round_ == {"deadline": 100.5, "metric": None, "pending": set(), "number": 9}
    assert [(i.record["kind"], i.record["status"], i.record["note"]) for i in unread] == \
        [("guard.spend", "not read", "its last read is still running")]
    assert [(what, item["name"]) for what, item in starts] == [("audit", "refunds"), ("reading", "waiting")]
    assert [avsm.reading_limit(item) for item in (m["guards"][0], starts[0][1], starts[1][1])] == \
        [30, 600, 7200]
    assert avsm.reading_limit(m) == 60 and m["cadence"] == 1
    assert avsm.read_late(3, None) and avsm.read_late(3, {"number": 4}) and not avsm.read_late(4, {"number": 4})
    timed_out = avsm.Read("guard", "spend", None, b"", False, "", 9, "timeout", 600)
    assert avsm.read_output(timed_out)[1] == "took longer than its time limit of 10m and was ended"
    # the metric's report still running: no round at all, nothing written, nothing started (open point 54)
    rule = avsm.round_started(state, {("report", None), ("guard", "spend")}, 10, 101.0)
    with pytest.raises(StopIteration) as end:
        rule.send(None)
    assert end.value.value == (None, [])
