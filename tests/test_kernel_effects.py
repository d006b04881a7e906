"""Expected effects: the verdict on a run that said what it should do to the metric, as a pure function
of the reading before the run, the trusted reports after it and the lever-free history (open point 36);
and a black-box run of `revoke_after` against a real daemon."""

import os

import pytest

import avsm
from test_daemon import dial, of

STEADY = [1, 1, 1, 1, 1, 0, 1, 1]          # drift 0.875 a report, little noise


@pytest.mark.parametrize("expects, r0, after, steps, verdict", [
    (("down", None, 2), 10, [5], STEADY, "waiting"),                 # EFFECT-06: until the count-th report
    (("down", None, 2), 10, [5, 4], STEADY, "hit"),                   # EFFECT-09/10: writes nothing
    (("down", None, 2), 10, [11, 12], STEADY, "waiting"),             # not yet a miss: watching until 2N
    (("down", None, 2), 10, [11, 12, 13, 14], STEADY, "miss"),        # EFFECT-07
    (("down", None, 2), 10, [11, 12, 6], STEADY, "late"),             # EFFECT-08
    (("up", 5, 3), 10, [20, 20, 20], STEADY, "hit"),                  # close enough to its size
    (("up", 5, 3), 10, [60, 60, 60], STEADY, "wrong size"),           # EFFECT-11: far off its size
    (("up", None, 2), 10, [12, 13], [0, 0], "not judged"),            # EFFECT-13: fewer than 3 steps
    (("up", None, 2), 10, [12, 13], [0, 0, 0, 0], "not judged"),      # EFFECT-15: a metric that never changed
    (("up", None, 2), 10, [10, 10], [0, 0, 1, 0], "waiting"),         # EFFECT-14: repeats may be a stale sensor
    (("up", None, 2), 10, [10, 10, 10, 10], [0, 1, 1, 1, 1, 1, 1, 1], "miss"),   # repeats now unlikely: judged
])
def test_judge_effect(expects, r0, after, steps, verdict):
    """EFFECT-04..15, open point 36: waiting, hit, late, miss, wrong size, not judged, stale waits."""
    assert avsm.judge_effect(expects, r0, after, steps)[0] == verdict


def test_absence_of_evidence_is_not_a_miss():
    """EFFECT-12: with no trusted report after the run there is no verdict but waiting."""
    assert avsm.judge_effect(("up", None, 3), 5, [], STEADY)[0] == "waiting"


MANDATE = """purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 10, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: false, delegated: true, revoke_after: 1, expects: down within 1}
"""


def test_revoke_after_suspends_the_delegation_until_approved(av, workdir):
    """EFFECT-07, EFFECT-16, LEVER-06: a delegated lever whose runs miss their effect: the miss is an `effect`
    record; after revoke_after misses in a row its delegation is suspended, it asks instead of running, and
    approving the revoke ask restores it."""
    counter = "#!/bin/sh\nn=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo $n\n"
    d = dial(workdir, "dial", MANDATE, lower="#!/bin/sh\ntrue\n")
    with open(os.path.join(d, "report"), "w") as fh:
        fh.write(counter)
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: of(rs, "effect") and any(r.get("about") == "revoke" for _, r in of(rs, "ask")) and rs,
                       timeout=40, what="a miss and the revoke ask")
    effect = of(recs, "effect")[0][1]
    assert effect["verdict"] == "miss" and effect["lever"] == "lower"
    revoke = [s for s, r in of(recs, "ask") if r.get("about") == "revoke"][0]
    actions_before = len([s for s, r in of(recs, "action") if s < revoke])
    recs = av.wait_for(lambda rs: [s for s, r in of(rs, "ask") if r.get("about") == "lever" and s > revoke] and rs,
                       timeout=10, what="an ask instead of a run")
    assert len(of(recs, "action")) == actions_before      # suspended: it asks, it does not run
    assert av.cli("approve", str(revoke)).returncode == 0
    assert any(r["kind"] == "approval" and r["ask"] == revoke and r["claim"] == "declared" for _, _, r in av.records())


def test_approving_the_revoke_ask_restores_the_delegation():
    """EFFECT-16: folding the approval of a revoke ask lifts the suspension and the count of misses."""
    state = avsm.VentureState("dial")
    avsm.fold(state, 1, 0, {"kind": "ask", "claim": "measured", "venture": "dial", "about": "revoke", "lever": "lower",
                            "summary": "s"})
    assert state.suspended == {"lower": 1}
    avsm.fold(state, 2, 0, {"kind": "approval", "claim": "declared", "venture": "dial", "ask": 1, "summary": "s"})
    assert state.suspended == {} and state.misses["lower"] == 0
