"""Stuck is a state (issue 14 item 1): past its bound with its lever at its cap, a venture writes the refusal
once per excursion, saying when the cap frees up, raises one ask, and `avsm status` says it is stuck and the
way out. The cap's own sliding window still holds: nothing runs sooner."""

import os

from conftest import make_venture

CAPPED = """\
purpose: Keep the backlog under ten.
metric: backlog
controller: {kind: threshold, above: 10, action: flush}
cadence: 1s
permitted:
  - {name: flush, run: ./flush, cap: 2/hour, reversible: true}
"""


def test_a_venture_at_its_cap_is_stuck_once_and_says_so(av, workdir):
    """LEVER-03 and issue 14 item 1: two runs in the hour, then one refusal (stuck: cap, with the time the next
    run is possible) and one ask over many more reports past the bound; status says stuck and names the fix."""
    d = make_venture(workdir, "queue", CAPPED, {"report": "#!/bin/sh\necho 20\n", "flush": "#!/bin/sh\nexit 0\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    of = lambda rs, kind: [(s, r) for s, _, r in rs if r["kind"] == kind and r["venture"] == "queue"]
    recs = av.wait_for(lambda rs: len(of(rs, "report")) >= 8 and rs, timeout=30, what="eight reports")
    actions, refusals, asks = of(recs, "action"), of(recs, "refusal"), of(recs, "ask")
    assert len(actions) == 2, [r["summary"] for _, r in recs if r["venture"] == "queue"]
    assert len(refusals) == 1, [r["summary"] for _, r in refusals]
    refusal = refusals[0][1]
    assert refusal["stuck"] == "cap" and refusal["lever"] == "flush"
    first = next(at for s, at, r in recs if s == actions[0][0])
    assert refusal["clears_at"] == first + 3600
    assert "the next run is possible at" in refusal["summary"] and "raise the cap" in refusal["summary"]
    assert [r["about"] for _, r in asks] == ["stuck"] and "queue is stuck" in asks[0][1]["summary"]
    status = av.cli("status")
    assert status.returncode == 0 and "queue: stuck" in status.stdout, status.stdout
    assert "avsm propose queue flush" in status.stdout
    asks_out = av.cli("asks")
    assert f"#{asks[0][0]}" in asks_out.stdout


IRREVERSIBLE = """\
purpose: Keep the tank under ten.
metric: level
controller: {kind: threshold, above: 10, action: drain}
cadence: 1s
permitted:
  - {name: drain, run: ./drain, cap: 2/hour, reversible: false}
"""


def test_a_denied_ask_is_not_followed_by_an_ask_about_it(av, workdir):
    """Issue 22 item 3: after `avsm deny N` of the controller's ask, the venture is stuck (asked once, answered)
    and says so once, as a refusal and a notice, with no new ask over the reports that follow; `avsm asks`
    is empty; status names the way out."""
    d = make_venture(workdir, "tank", IRREVERSIBLE, {"report": "#!/bin/sh\necho 20\n", "drain": "#!/bin/sh\nexit 0\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    of = lambda rs, kind: [(s, r) for s, _, r in rs if r["kind"] == kind and r["venture"] == "tank"]
    recs = av.wait_for(lambda rs: of(rs, "ask") and rs, timeout=20, what="the controller's ask")
    (ask, _), = of(recs, "ask")
    denied = av.cli("deny", str(ask))
    assert denied.returncode == 0, denied.stderr
    after = av.wait_for(lambda rs: len([s for s, r in of(rs, "report") if s > ask]) >= 5 and rs, timeout=30,
                        what="five reports after the denial")
    assert [s for s, _ in of(after, "ask")] == [ask], [r["summary"] for _, r in of(after, "ask")]
    refusals = [r for s, r in of(after, "refusal") if s > ask]
    assert len(refusals) == 1 and refusals[0]["stuck"] == "asked", [r["summary"] for r in refusals]
    assert "avsm propose tank drain" in refusals[0]["summary"]
    assert av.cli("asks").stdout.strip() == "no open asks", av.cli("asks").stdout
    status = av.cli("status").stdout
    assert "tank: stuck" in status and "avsm propose tank drain" in status, status


def test_a_stuck_ask_settled_by_a_new_mandate_names_it_and_why_and_approve_agree(av, workdir):
    """Issue 22 item 4: a stuck ask settled because the mandate was added again (its cap raised) says so, not
    that the metric is back inside (it is not); `avsm why` of the ask says it was settled and by what record,
    and `avsm approve` of it is refused (65) naming that same record."""
    d = make_venture(workdir, "queue", CAPPED, {"report": "#!/bin/sh\necho 761\n", "flush": "#!/bin/sh\nexit 0\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    of = lambda rs, kind: [(s, r) for s, _, r in rs if r["kind"] == kind and r["venture"] == "queue"]
    recs = av.wait_for(lambda rs: of(rs, "ask") and rs, timeout=30, what="the stuck ask")
    (ask, record), = of(recs, "ask")
    assert record["about"] == "stuck"
    with open(os.path.join(d, "mandate.yaml"), "w") as fh:
        fh.write(CAPPED.replace("cap: 2/hour", "cap: 20/hour"))
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "resolved") and rs, timeout=20, what="the ask settled")
    (mandate, _), = of(recs, "mandate")[-1:]
    (settled, resolved), = of(recs, "resolved")
    assert resolved["ask"] == ask and resolved["summary"] == \
        f"ask #{ask} settled: mandate #{mandate} replaced the one it was asked under", resolved["summary"]
    why = av.cli("why", str(ask))
    assert why.returncode == 0 and f"settled by #{settled}" in why.stdout and "not answered yet" not in why.stdout, why.stdout
    approve = av.cli("approve", str(ask))
    assert approve.returncode == 65, approve
    assert f"ask #{ask} is answered already: settled by avsm (#{settled}: " in approve.stderr, approve.stderr
    ran = av.wait_for(lambda rs: len(of(rs, "action")) >= 3 and rs, timeout=20, what="a run under the raised cap")
    assert len(of(ran, "action")) >= 3
