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


FLAT = [1, -1, 1, -1, 1, -1]                # no drift, noise 1: the bar after n reports is 2 * sqrt(n)
RISING = [5, 5, 4, 6, 5, 5]                 # drift 5 a report, noise 0.58


@pytest.mark.parametrize("expects, r0, after, steps, verdict", [
    (("down", None, 2), 10, [10, 0], FLAT, "hit"),                # the count-th report moved 10
    (("down", None, 2), 10, [0, 10], FLAT, "waiting"),            # only the first did: no effect at the count-th
    (("down", None, 2), 100, [104, 105], RISING, "hit"),          # a rise of 5 where the drift alone gives 10
    (("up", None, 2), 100, [105, 110, 115, 120], RISING, "miss"),  # a rise that is only the drift
])
def test_the_count_th_report_against_the_reading_before_net_of_drift(expects, r0, after, steps, verdict):
    """EFFECT-05, open point 36: the verdict compares the count-th trusted report after the run with the
    last reading before it, net of the metric's own drift: not the first report, and not the raw change."""
    assert avsm.judge_effect(expects, r0, after, steps)[0] == verdict


NOISY = [2, -2, 2, -2, 2, -2, 2, -2]        # no drift, noise 2: the bar after one report is 4


@pytest.mark.parametrize("after, verdict", [
    ([15], "hit"),                  # 5 up, beyond the noise
    ([1010], "hit"),                # any size beyond the noise: without a size none is the wrong size
    ([13, 13], "miss"),             # 3 up, within the noise: not the effect
    ([5, 5], "miss"),               # the wrong way
])
def test_without_a_size_any_move_beyond_the_noise_is_the_effect(after, verdict):
    """EFFECT-10, open point 36: `up within 1` with no size on a metric of noise 2: a move the right way
    beyond the noise counts as the effect whatever its size; one within the noise or the wrong way does not."""
    assert avsm.judge_effect(("up", None, 1), 10, after, NOISY)[0] == verdict


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
