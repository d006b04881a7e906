"""The kernel alone: records in, decisions out, `now` given. No daemon, no clock, no subprocess.

A venture's state is folded from literal records; judge_report says what a new report is, decide says what
the controller wants, prove says whether the gate lets it run, and check_proof re-checks a stored proof."""

import pytest

import avsm

V = "v"

COUNTER = """\
purpose: Keep the counter below ten.
metric: count
controller: {kind: threshold, above: 10, action: reset%s}
cadence: 10s
permitted:
  - {name: reset, run: ./reset, cap: 60/hour, reversible: true}
forbidden: [rm]
"""

BELOW = """\
purpose: Keep the stock above five.
metric: stock
controller: {kind: threshold, below: 5, action: order, deadband: 2}
cadence: 1h
permitted:
  - {name: order, run: ./order, cap: 4/day, reversible: true}
"""

BAND = """\
purpose: Keep the room between 19 and 24.
metric: temperature
controller: {kind: band, low: 19, high: 24, below: heat, above: cool%s}
cadence: 1m
permitted:
  - {name: heat, run: ./heat, cap: 60/hour, reversible: true}
  - {name: cool, run: ./cool, cap: 60/hour, reversible: true}
"""

PALLETS = """\
purpose: Keep stock on the shelf.
metric: stock
controller: {kind: model}
cadence: 1h
max_rise: 800
max_fall: 300
"""

STEP = """\
purpose: Watch the balance.
metric: balance
controller: {kind: model}
cadence: 1h
range: [0, 100000]
max_step: 5000
%s"""

BACKUP = """\
purpose: Back up every hour.
metric: age
controller: {kind: threshold, above: 3600, action: backup}
cadence: 1m
permitted:
  - {name: backup, run: ./backup && touch stamp, cap: 2/hour, reversible: true}
max_rise: 120
"""

GATE = """\
purpose: Keep the counter below ten.
metric: count
controller: {kind: threshold, above: 10, action: reset}
cadence: 10s
permitted:
  - {name: reset, run: ./reset, cap: 2/hour, reversible: true}
  - {name: wipe, run: ./wipe, cap: 1/day, reversible: false}
  - {name: ship, run: ./ship, cap: 1/day, reversible: false, delegated: true}
forbidden: [rm]
"""


# ---- literal records -------------------------------------------------------------------------------------

def mandate(text):
    return {"kind": "mandate", "claim": "declared", "venture": V, "text": text, "directory": "/srv/v",
            "sha256": "0" * 64, "summary": "mandate adopted"}


def report(value, status="trusted"):
    return {"kind": "report", "claim": "measured", "venture": V, "metric": "m", "value": value, "status": status,
            "plausible": status in ("trusted", "unconfirmed"), "note": "", "summary": f"m = {value}"}


def action(lever, side="above", by="controller", proof=None):
    return {"kind": "action", "claim": "measured", "venture": V, "lever": lever, "by": by, "side": side,
            "proof": proof or {}, "summary": f"{lever} runs"}


def outcome(lever, action_seq, ok=True):
    return {"kind": "outcome", "claim": "measured", "venture": V, "lever": lever, "action": action_seq, "ok": ok,
            "summary": f"{lever} {'ok' if ok else 'failed'}"}


def refusal(lever, side="above"):
    return {"kind": "refusal", "claim": "measured", "venture": V, "lever": lever, "by": "controller", "side": side,
            "why": "reached its cap", "summary": f"{lever} refused"}


def adopt(text, records=()):
    """A venture state with `text` adopted as record #1 at t=1000, then `records` [(seq, at, record)] folded."""
    state = avsm.VentureState(V)
    avsm.fold(state, 1, 1000, mandate(text))
    state.mandate = avsm.parse_mandate(text, "m.yaml")
    for seq, at, record in records:
        avsm.fold(state, seq, at, record)
    return state


def decisions(state, records):
    """Fold `records` in order; after each report ask decide(); return {report seq: [(side, lever, cited)]}."""
    got = {}
    for seq, at, record in records:
        avsm.fold(state, seq, at, record)
        if record["kind"] == "report":
            got[seq] = [(side, lever, cited) for side, lever, cited, why in avsm.decide(state, seq, record["value"])]
    return got


def judge(state, value, failure=None):
    return avsm.judge_report(state.mandate, state, value, failure)[0]


# ---- plausibility (PLAUS-01..07, PLAUS-10..15, open points 10, 34) -----------------------------------------

@pytest.mark.parametrize("value, status", [
    (0, "trusted"), (100000, "trusted"), (-1, "implausible"), (100001, "implausible"),
])
def test_range(value, status):
    """PLAUS-01: a report outside range: [0, 100000] is implausible; the bounds themselves are inside."""
    assert judge(adopt(STEP % ""), value) == status


@pytest.mark.parametrize("value, status", [
    (5100, "trusted"), (5101, "implausible"), (0, "trusted"), (-4900, "implausible"),
])
def test_max_step(value, status):
    """PLAUS-02: a step larger than max_step (5000) from the last plausible report (100) is implausible."""
    state = adopt(STEP % "", [(2, 1010, report(100))])
    assert judge(state, value) == status


def test_first_report_has_no_step():
    """PLAUS-02, open point 34: the first report has no earlier report to step from."""
    assert judge(adopt(STEP % ""), 90000) == "trusted"


@pytest.mark.parametrize("start, value, status", [
    (398, 0, "implausible"),       # a fall of 398 is past max_fall 300
    (398, 998, "trusted"),         # a delivery of 600 is within max_rise 800
    (398, 98, "trusted"),          # a fall of exactly 300 is within
    (398, 1199, "implausible"),    # a rise of 801 is past max_rise
])
def test_max_rise_and_max_fall(start, value, status):
    """PLAUS-12, PLAUS-13: stock arriving by the pallet (max_rise 800) and leaving by the day (max_fall 300)."""
    state = adopt(PALLETS, [(2, 1010, report(start))])
    assert judge(state, value) == status


def test_only_max_rise_leaves_the_fall_unbounded():
    """PLAUS-15, EXAMPLE-04: with only max_rise: 120, the backup's age falls to 0 plausibly; a rise past 120
    does not pass."""
    state = adopt(BACKUP, [(2, 1010, report(3650))])
    assert judge(state, 0) == "trusted"
    assert judge(state, 3771) == "implausible"
    assert judge(state, 3770) == "trusted"


def test_nan_is_implausible():
    """PLAUS-04: a NaN report is implausible, with or without bounds."""
    assert judge(adopt(COUNTER % ""), float("nan")) == "implausible"
    assert judge(adopt(STEP % "", [(2, 1010, report(100))]), float("nan")) == "implausible"


def test_failed_report():
    """PLAUS-05, REPORT-06: a failed report is failed (never trusted) and keeps the note saying why."""
    state = adopt(COUNTER % "")
    status, note = avsm.judge_report(state.mandate, state, None, "exit 1")
    assert status == "failed" and note == "exit 1"


def test_unconfirmed_after_implausible_then_confirmed():
    """PLAUS-10, open point 34: the report right after an implausible one is unconfirmed; the next report that
    agrees with it within max_step makes it trusted."""
    state = adopt(STEP % "", [(2, 1010, report(100)), (3, 1020, report(9000, "implausible"))])
    assert judge(state, 9100) == "unconfirmed"
    avsm.fold(state, 4, 1030, report(9100, "unconfirmed"))
    assert judge(state, 9200) == "trusted"


def test_unconfirmed_not_confirmed_by_a_report_that_disagrees():
    """PLAUS-10, open point 34: an unconfirmed report is never acted on until the next agrees with it."""
    state = adopt(STEP % "", [(2, 1010, report(100)), (3, 1020, report(9000, "implausible")),
                              (4, 1030, report(9100, "unconfirmed"))])
    assert judge(state, 20000) != "trusted"


def test_unconfirmed_after_a_failed_report():
    """PLAUS-05, PLAUS-10: a failed report is implausible, so the report after it is unconfirmed too."""
    state = adopt(STEP % "", [(2, 1010, report(100)), (3, 1020, report(None, "failed"))])
    assert judge(state, 110) == "unconfirmed"


def test_an_unconfirmed_report_is_not_confirmed_across_a_failed_one():
    """PLAUS-05, PLAUS-10, open point 34: only the very next report confirms an unconfirmed one; after
    unconfirmed 9100 and a failed report, 9150 follows an implausible report, so it is unconfirmed itself,
    and the report after it that agrees makes it trusted."""
    state = adopt(STEP % "", [(2, 1010, report(100)), (3, 1020, report(9000, "implausible")),
                              (4, 1030, report(9100, "unconfirmed")), (5, 1040, report(None, "failed"))])
    assert judge(state, 9150) == "unconfirmed"
    avsm.fold(state, 6, 1050, report(9150, "unconfirmed"))
    assert judge(state, 9200) == "trusted"
    implausible = adopt(STEP % "", [(2, 1010, report(100)), (3, 1020, report(9000, "implausible")),
                                    (4, 1030, report(9100, "unconfirmed")), (5, 1040, report(-5, "implausible"))])
    assert judge(implausible, 9150) == "unconfirmed"


def test_unconfirmed_applies_with_max_rise_alone():
    """Open point 34: the unconfirmed rule applies whenever any step bound is set (here only max_rise)."""
    state = adopt(BACKUP, [(2, 1010, report(100)), (3, 1020, report(None, "failed"))])
    assert judge(state, 110) == "unconfirmed"


def test_no_step_bound_no_unconfirmed():
    """PLAUS-10, open point 34: with no step bound, the report after an implausible one is trusted at once."""
    text = "purpose: p\nmetric: m\ncontroller: {kind: model}\ncadence: 1h\nrange: [0, 10]\n"
    state = adopt(text, [(2, 1010, report(5)), (3, 1020, report(50, "implausible"))])
    assert judge(state, 6) == "trusted"


def test_confirm_false_acts_at_once():
    """PLAUS-11: `confirm: false` on the mandate trusts the report after an implausible one."""
    state = adopt(STEP % "confirm: false\n", [(2, 1010, report(100)), (3, 1020, report(9000, "implausible"))])
    assert judge(state, 9100) == "trusted"


def test_flap_is_implausible():
    """PLAUS-03, open point 10: a step that reverses the previous one, both larger than half of max_step, is a
    flap."""
    state = adopt(STEP % "", [(2, 1010, report(100)), (3, 1020, report(3000))])
    assert judge(state, 100) == "implausible"
    assert "flap" in avsm.judge_report(state.mandate, state, 100)[1]


@pytest.mark.parametrize("value", [2000, 3100, 5500])
def test_not_a_flap(value):
    """Open point 10: a small reversal (1000 < 2500) or no reversal at all is no flap."""
    state = adopt(STEP % "", [(2, 1010, report(100)), (3, 1020, report(3000))])
    assert judge(state, value) == "trusted"


def test_flap_uses_rise_and_fall_bounds():
    """Open point 10: half of the bound that applies each way: +500 > 400 then -200 > 150 is a flap."""
    state = adopt(PALLETS, [(2, 1010, report(1000)), (3, 1020, report(1500))])
    assert judge(state, 1300) == "implausible"
    assert judge(state, 1400) == "trusted"      # -100 is not past half of max_fall


def test_no_step_bound_no_flap():
    """Open point 10: with no step bound there is no flap check."""
    text = "purpose: p\nmetric: m\ncontroller: {kind: model}\ncadence: 1h\nrange: [0, 100000]\n"
    state = adopt(text, [(2, 1010, report(100)), (3, 1020, report(3000))])
    assert judge(state, 100) == "trusted"


def test_report_after_a_lever_run_is_no_flap():
    """Open point 10: a report that follows a lever run is exempt."""
    text = """\
purpose: Watch the balance.
metric: balance
controller: {kind: threshold, above: 2000, action: sweep}
cadence: 1h
permitted:
  - {name: sweep, run: ./sweep, cap: 4/day, reversible: true}
max_step: 5000
"""
    state = adopt(text, [(2, 1010, report(100)), (3, 1020, report(3000)),
                         (4, 1021, action("sweep")), (5, 1030, outcome("sweep", 4))])
    assert judge(state, 100) == "trusted"


def test_no_flap_after_a_confirmed_level_shift():
    """PLAUS-03, open points 10 and 34: after 9000 (implausible), 9100 (unconfirmed) and 9200 (confirmed), both
    stand as the new level; the last step is +100, so a fall to 6500 (-2700) reverses nothing past half the
    bound and is trusted."""
    state = adopt(STEP % "", [(2, 1010, report(100)), (3, 1020, report(9000, "implausible")),
                              (4, 1030, report(9100, "unconfirmed")), (5, 1040, report(9200))])
    assert judge(state, 6500) == "trusted"


# ---- threshold (CTRL-02..08, open point 25) ----------------------------------------------------------------

def test_threshold_acts_on_every_crossed_report():
    """CTRL-02, CTRL-04: with neither deadband nor hold, every crossed trusted report calls for the lever."""
    state = adopt(COUNTER % "")
    got = decisions(state, [
        (2, 1010, report(9)),
        (3, 1020, report(11)),
        (4, 1021, action("reset")), (5, 1022, outcome("reset", 4)),
        (6, 1030, report(12)),
        (7, 1031, action("reset")), (8, 1032, outcome("reset", 7)),
        (9, 1040, report(13)),
    ])
    assert got == {2: [], 3: [("above", "reset", [3])], 6: [("above", "reset", [6])], 9: [("above", "reset", [9])]}


def test_threshold_bound_is_strict():
    """CTRL-02, open point 25: a report equal to `above` is not past it."""
    assert decisions(adopt(COUNTER % ""), [(2, 1010, report(10))]) == {2: []}


@pytest.mark.parametrize("status", ["implausible", "unconfirmed", "failed"])
def test_threshold_never_acts_on_an_untrusted_report(status):
    """CTRL-08, PLAUS-06: a crossed report that is not trusted calls for nothing."""
    value = None if status == "failed" else 50
    assert decisions(adopt(COUNTER % ""), [(2, 1010, report(value, status))]) == {2: []}


def test_deadband_acts_once_per_excursion():
    """CTRL-05, CTRL-06, open point 25: `deadband: 2` acts once, and again only after a report <= 10 - 2."""
    state = adopt(COUNTER % ", deadband: 2")
    got = decisions(state, [
        (2, 1010, report(11)),
        (3, 1011, action("reset")), (4, 1012, outcome("reset", 3)),
        (5, 1020, report(12)),      # still past the bound after the run: no second action
        (6, 1030, report(9)),       # back inside, but not by the deadband
        (7, 1040, report(11)),
        (8, 1050, report(8)),       # 10 - 2: re-armed
        (9, 1060, report(11)),
    ])
    assert got == {2: [("above", "reset", [2])], 5: [], 6: [], 7: [], 8: [], 9: [("above", "reset", [9])]}


def test_deadband_spent_by_a_refusal():
    """CTRL-06: the excursion is spent whether or not the lever then ran (here the gate refused it)."""
    state = adopt(COUNTER % ", deadband: 2")
    got = decisions(state, [
        (2, 1010, report(11)),
        (3, 1011, refusal("reset")),
        (4, 1020, report(12)),
        (5, 1030, report(8)),
        (6, 1040, report(11)),
    ])
    assert got == {2: [("above", "reset", [2])], 4: [], 5: [], 6: [("above", "reset", [6])]}


def test_deadband_below():
    """CTRL-05, open point 25: for `below: 5`, `deadband: 2` re-arms at a report >= 5 + 2."""
    state = adopt(BELOW)
    got = decisions(state, [
        (2, 1010, report(4)),
        (3, 1011, action("order", side="below")), (4, 1012, outcome("order", 3)),
        (5, 1020, report(3)),
        (6, 1030, report(6)),
        (7, 1040, report(4)),
        (8, 1050, report(7)),
        (9, 1060, report(4.5)),
    ])
    assert got == {2: [("below", "order", [2])], 5: [], 6: [], 7: [], 8: [], 9: [("below", "order", [9])]}


def test_hold_acts_on_the_third_crossed_report_in_a_row():
    """CTRL-07: `hold: 3` acts only on the third crossed trusted report in a row, citing all three."""
    state = adopt(COUNTER % ", hold: 3")
    got = decisions(state, [(2, 1010, report(11)), (3, 1020, report(12)), (4, 1030, report(13))])
    assert got == {2: [], 3: [], 4: [("above", "reset", [2, 3, 4])]}


@pytest.mark.parametrize("breaker", [report(None, "failed"), report(50, "implausible"), report(12, "unconfirmed"),
                                     report(9)])
def test_hold_row_is_broken(breaker):
    """CTRL-07, CTRL-08: a report that is not trusted (or is back inside) breaks "in a row"."""
    state = adopt(COUNTER % ", hold: 3")
    got = decisions(state, [(2, 1010, report(11)), (3, 1020, report(12)), (4, 1030, breaker),
                            (5, 1040, report(13)), (6, 1050, report(14)), (7, 1060, report(15))])
    assert got == {2: [], 3: [], 4: [], 5: [], 6: [], 7: [("above", "reset", [5, 6, 7])]}


def test_hold_with_deadband():
    """CTRL-05, CTRL-07: with both, three crossed reports act once; the next excursion needs re-arming and
    three more."""
    state = adopt(COUNTER % ", deadband: 2, hold: 3")
    got = decisions(state, [
        (2, 1010, report(11)), (3, 1020, report(11)), (4, 1030, report(11)),
        (5, 1031, action("reset")), (6, 1032, outcome("reset", 5)),
        (7, 1040, report(11)), (8, 1050, report(11)), (9, 1060, report(11)),
        (10, 1070, report(8)),
        (11, 1080, report(11)), (12, 1090, report(11)), (13, 1100, report(11)),
    ])
    assert [seq for seq, d in got.items() if d] == [4, 13]


# ---- band (BAND-02..06, open point 25) ------------------------------------------------------------------

def test_band_sides_and_inside():
    """BAND-02..04, open point 25: below low runs `below`, above high runs `above`, low <= v <= high neither."""
    state = adopt(BAND % "")
    got = decisions(state, [
        (2, 1010, report(18)),
        (3, 1011, action("heat", side="below")), (4, 1012, outcome("heat", 3)),
        (5, 1020, report(19)), (6, 1030, report(21)), (7, 1040, report(24)),
        (8, 1050, report(25)),
    ])
    assert got == {2: [("below", "heat", [2])], 5: [], 6: [], 7: [], 8: [("above", "cool", [8])]}


def test_band_deadband_one_action_per_side_per_excursion():
    """BAND-05, BAND-06: with `deadband: 2`, each side acts once per excursion and re-arms on its own."""
    state = adopt(BAND % ", deadband: 2")
    got = decisions(state, [
        (2, 1010, report(18)),
        (3, 1011, action("heat", side="below")), (4, 1012, outcome("heat", 3)),
        (5, 1020, report(17)),
        (6, 1030, report(20)),      # not yet 19 + 2
        (7, 1040, report(18)),
        (8, 1050, report(25)),      # the high side is armed all along
        (9, 1051, action("cool", side="above")), (10, 1052, outcome("cool", 9)),
        (11, 1060, report(26)),
        (12, 1070, report(23)),     # not yet 24 - 2
        (13, 1080, report(25)),
        (14, 1090, report(22)),     # high side re-armed
        (15, 1100, report(21)),     # and low side re-armed
        (16, 1110, report(25)),
        (17, 1120, report(18)),
    ])
    acted = {seq: d for seq, d in got.items() if d}
    assert acted == {2: [("below", "heat", [2])], 8: [("above", "cool", [8])],
                     16: [("above", "cool", [16])], 17: [("below", "heat", [17])]}


def test_band_hold():
    """BAND-05: the band's hold applies to each side."""
    state = adopt(BAND % ", hold: 2")
    got = decisions(state, [(2, 1010, report(25)), (3, 1020, report(18)), (4, 1030, report(17)),
                            (5, 1040, report(25))])
    assert got == {2: [], 3: [], 4: [("below", "heat", [3, 4])], 5: []}


def test_controller_sides():
    """CTRL-02, BAND-01: a threshold has one side, a band two, a model none."""
    assert avsm.controller_sides(adopt(COUNTER % "").mandate) == [("above", "above", 10, "reset")]
    assert avsm.controller_sides(adopt(BAND % "").mandate) == [("below", "below", 19, "heat"), ("above", "above", 24, "cool")]
    assert avsm.controller_sides(adopt(PALLETS).mandate) == []
    assert avsm.controller_sides(None) == []


# ---- the gate: prove (PROOF-02/03, LEVER-03..06, open points 12, 30) ------------------------------------------

def gate_records():
    """A ledger of venture v: the mandate, a crossed report, a run of reset with its outcome, another report."""
    return {1: (1000, mandate(GATE)),
            2: (1010, report(11)),
            3: (1020, action("reset")),
            4: (1021, outcome("reset", 3)),
            5: (1030, report(12)),
            6: (1035, {"kind": "proposal", "claim": "inferred", "venture": V, "by": "model", "choice": "action", "lever": "reset",
                       "reason": "count is high", "summary": "a model proposes reset"})}


def gate_state(records):
    state = adopt(GATE)
    for seq in sorted(records):
        if seq > 1:
            avsm.fold(state, seq, *records[seq])
    return state


def test_prove_permitted_reversible():
    """PROOF-02, LEVER-05, LEVER-03: a permitted reversible lever within its cap runs; its premises are the
    mandate, the crossed report and the runs in the cap window, all measured or declared."""
    records = gate_records()
    verdict = avsm.prove(gate_state(records), "reset", 1040, ("threshold", [5], ["report #5: count 12 > 10"]))
    assert verdict.ok and not verdict.needs_ask
    assert verdict.proof["rule"] == "threshold"
    assert verdict.proof["premises"] == [1, 5, 3]
    assert all(records[p][1]["claim"] in ("measured", "declared") for p in verdict.proof["premises"])
    assert verdict.proof["trigger"] is None


def test_prove_never_cites_the_model_proposal():
    """PROOF-03: a model's proposal may be the trigger, never a premise."""
    records = gate_records()
    verdict = avsm.prove(gate_state(records), "reset", 1040, ("threshold", [5], ["crossed"]), trigger=6)
    assert verdict.ok and verdict.proof["trigger"] == 6 and 6 not in verdict.proof["premises"]


def test_prove_over_cap_is_refused_naming_the_cap():
    """LEVER-03: a third run of reset within the hour against `cap: 2/hour` is refused, and the refusal names
    the cap."""
    records = gate_records()
    records[7] = (1040, action("reset"))
    records[8] = (1041, outcome("reset", 7))
    verdict = avsm.prove(gate_state(records), "reset", 1050, ("threshold", [5], ["crossed"]))
    assert not verdict.ok and not verdict.needs_ask
    assert "2/hour" in verdict.why and "cap" in verdict.why


def test_cap_window_slides():
    """LEVER-03, open point 20: runs older than the cap's period no longer count."""
    records = gate_records()
    records[7] = (1040, action("reset"))
    records[8] = (1041, outcome("reset", 7))
    state = gate_state(records)
    assert avsm.cap_window(state, "reset", 1050) == [3, 7]
    assert avsm.cap_window(state, "reset", 1020 + 3600) == [7]
    verdict = avsm.prove(state, "reset", 1020 + 3600, ("threshold", [5], ["crossed"]))
    assert verdict.ok and verdict.proof["premises"] == [1, 5, 7]


@pytest.mark.parametrize("lever, word", [("rm", "forbidden"), ("format", "not permitted")])
def test_prove_forbidden_or_unpermitted_is_refused(lever, word):
    """LEVER-16, MODEL-19, open point 26: a forbidden or unpermitted lever is refused, never asked."""
    verdict = avsm.prove(gate_state(gate_records()), lever, 1040, ("proposal", [], ["a model proposed it"]))
    assert not verdict.ok and not verdict.needs_ask
    assert word in verdict.why


def test_prove_irreversible_needs_an_ask():
    """LEVER-04: an irreversible lever that is not delegated never runs on its own; it needs a person."""
    verdict = avsm.prove(gate_state(gate_records()), "wipe", 1040, ("proposal", [], ["a model proposed it"]))
    assert not verdict.ok and verdict.needs_ask
    assert "irreversible" in verdict.why


def test_prove_irreversible_with_approval():
    """LEVER-04, ASK-11, PROOF-02: with a declared approval the rule is `approval` and the approval is a
    premise."""
    records = gate_records()
    records[7] = (1040, {"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe",
                         "question": "run wipe?", "summary": "run wipe?"})
    records[8] = (1050, {"kind": "approval", "claim": "declared", "venture": V, "ask": 7, "lever": "wipe",
                         "payload": None, "summary": "a person approved wipe"})
    verdict = avsm.prove(gate_state(records), "wipe", 1060, ("approval", [], ["ask #7"]), trigger=7, approval=8)
    assert verdict.ok
    assert verdict.proof["rule"] == "approval"
    assert verdict.proof["premises"] == [1, 8]
    assert verdict.proof["trigger"] == 7


def test_prove_delegated_irreversible_runs_unasked():
    """LEVER-06: `delegated: true` lets an irreversible lever run without an ask."""
    verdict = avsm.prove(gate_state(gate_records()), "ship", 1040, ("proposal", [], ["a model proposed it"]))
    assert verdict.ok and not verdict.needs_ask
    assert any("delegated" in step for step in verdict.proof["steps"])


def test_prove_paused_is_refused():
    """PAUSE-01, open point 30: a paused venture runs no lever."""
    records = gate_records()
    records[7] = (1040, {"kind": "pause", "claim": "declared", "venture": V, "summary": "a person paused v"})
    verdict = avsm.prove(gate_state(records), "reset", 1050, ("threshold", [5], ["crossed"]))
    assert not verdict.ok and "paused" in verdict.why


def test_prove_after_resume():
    """PAUSE-02: after a resume the lever may run again."""
    records = gate_records()
    records[7] = (1040, {"kind": "pause", "claim": "declared", "venture": V, "summary": "paused"})
    records[8] = (1050, {"kind": "resume", "claim": "declared", "venture": V, "summary": "resumed"})
    assert avsm.prove(gate_state(records), "reset", 1060, ("threshold", [5], ["crossed"])).ok


def test_prove_stop_is_built_in():
    """Open point 12: stop is built in, always permitted, and counts against no cap."""
    verdict = avsm.prove(gate_state(gate_records()), "stop", 1040, ("person", [], ["a person stops v"]))
    assert verdict.ok and verdict.proof["rule"] == "stop" and verdict.proof["premises"] == [1]


def test_prove_without_mandate_is_refused():
    """PROOF-02: with no mandate in force there is nothing to prove from."""
    verdict = avsm.prove(avsm.VentureState(V), "reset", 1040, ("threshold", [], []))
    assert not verdict.ok


# ---- check_proof: a stored proof re-checked from the ledger alone (PROOF-02..05) -----------------------------

def stored_action(records, seq, at, lever, verdict):
    record = dict(action(lever), proof=verdict.proof)
    records[seq] = (at, record)
    return record


def test_check_proof_holds():
    """PROOF-02, PROOF-05: the proof the gate gave re-checks against the ledger."""
    records = gate_records()
    verdict = avsm.prove(gate_state(records), "reset", 1040, ("threshold", [5], ["crossed"]), trigger=6)
    act = stored_action(records, 7, 1040, "reset", verdict)
    assert avsm.check_proof(7, 1040, act, records) == []


def test_check_proof_approval_holds():
    """LEVER-04, PROOF-02: an approved irreversible run re-checks."""
    records = gate_records()
    records[7] = (1040, {"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe", "summary": "?"})
    records[8] = (1050, {"kind": "approval", "claim": "declared", "venture": V, "ask": 7, "lever": "wipe",
                         "payload": None, "summary": "yes"})
    verdict = avsm.prove(gate_state(records), "wipe", 1060, ("approval", [], ["ask #7"]), trigger=7, approval=8)
    act = stored_action(records, 9, 1060, "wipe", verdict)
    assert avsm.check_proof(9, 1060, act, records) == []


def tampered(change):
    """A good reset proof at #7, changed by `change(action, records)`; return check_proof's problems."""
    records = gate_records()
    verdict = avsm.prove(gate_state(records), "reset", 1040, ("threshold", [5], ["crossed"]))
    act = stored_action(records, 7, 1040, "reset", verdict)
    change(act, records)
    return avsm.check_proof(7, 1040, act, records)


def test_check_proof_premise_inferred():
    """PROOF-03: an inferred record (the model's proposal, #6) cited as a premise is a problem."""
    problems = tampered(lambda act, records: act["proof"]["premises"].append(6))
    assert any("#6" in p and "inferred" in p for p in problems)


def test_check_proof_premise_missing():
    """PROOF-02: a premise that is not in the ledger is a problem."""
    problems = tampered(lambda act, records: act["proof"]["premises"].append(99))
    assert any("#99" in p for p in problems)


def test_check_proof_cap_window_not_cited():
    """LEVER-03, PROOF-02: a run in the cap window (#3) left out of the premises is a problem."""
    problems = tampered(lambda act, records: act["proof"]["premises"].remove(3))
    assert any("cap" in p for p in problems)


def test_check_proof_over_cap():
    """LEVER-03: a run past the cap (a third reset within the hour against 2/hour) does not re-check, even when
    every earlier run is cited."""
    records = gate_records()
    records[7] = (1040, action("reset"))
    records[8] = (1041, outcome("reset", 7))
    act = dict(action("reset"), proof={"rule": "threshold", "premises": [1, 5, 3, 7], "steps": [], "trigger": None})
    records[9] = (1050, act)
    problems = avsm.check_proof(9, 1050, act, records)
    assert any("cap" in p for p in problems)


def test_check_proof_mandate_not_cited():
    """PROOF-02: the mandate in force must be a premise."""
    problems = tampered(lambda act, records: act["proof"]["premises"].remove(1))
    assert any("mandate" in p for p in problems)


def test_check_proof_report_not_past_the_bound():
    """CTRL-02, PROOF-02: a threshold action whose cited report is not past the bound does not re-check."""
    problems = tampered(lambda act, records: records.__setitem__(5, (1030, report(9))))
    assert problems


def test_check_proof_forbidden_lever():
    """LEVER-16: an action of a forbidden lever does not re-check."""
    problems = tampered(lambda act, records: act.__setitem__("lever", "rm"))
    assert any("forbidden" in p for p in problems)


def test_check_proof_irreversible_without_approval():
    """LEVER-04: an irreversible, undelegated run with no approval among its premises does not re-check."""
    records = gate_records()
    act = dict(action("wipe"), proof={"rule": "approval", "premises": [1], "steps": [], "trigger": None})
    records[7] = (1040, act)
    problems = avsm.check_proof(7, 1040, act, records)
    assert any("approval" in p for p in problems)


def test_check_proof_approval_of_another_lever():
    """LEVER-04, PROOF-02: an approval of a different lever does not authorize wipe."""
    records = gate_records()
    records[7] = (1040, {"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "reset", "summary": "?"})
    records[8] = (1050, {"kind": "approval", "claim": "declared", "venture": V, "ask": 7, "lever": "reset",
                         "payload": None, "summary": "a person approved reset"})
    act = dict(action("wipe"), proof={"rule": "approval", "premises": [1, 8], "steps": [], "trigger": 7})
    records[9] = (1060, act)
    assert avsm.check_proof(9, 1060, act, records) != []


# ---- open asks (ASK-01, PLAUS-07, open point 35) -----------------------------------------------------------

def test_fold_tracks_open_asks_and_the_implausible_ask():
    """PLAUS-07, open point 35: the implausible ask is remembered until a record resolves it."""
    state = adopt(COUNTER % "")
    avsm.fold(state, 2, 1010, report(None, "failed"))
    avsm.fold(state, 3, 1010, {"kind": "ask", "claim": "measured", "venture": V, "about": "implausible", "report": 2,
                               "summary": "asking once"})
    assert state.implausible_ask == 3 and 3 in state.open_asks
    avsm.fold(state, 4, 1020, report(5))
    avsm.fold(state, 5, 1020, {"kind": "resolved", "claim": "measured", "venture": V, "ask": 3, "summary": "settled"})
    assert state.implausible_ask is None and state.open_asks == {}


def test_a_forecast_is_fit_only_to_trusted_reports():
    """What a forecast starts from holds only trusted reports: an implausible, unconfirmed or failed one adds
    neither to its history nor to its lever-free steps; a step across an unconfirmed one (a move that may have
    been real) is left out too, so every step is between neighbouring trusted reports. FORECAST-08 PLAUS-16"""
    records = [(2, 1010, report(1)), (3, 1020, report(2)), (4, 1030, report(9000, "implausible")),
               (5, 1040, report(None, "failed")), (6, 1050, report(500, "unconfirmed")), (7, 1060, report(3)),
               (8, 1070, report(4))]
    facts = avsm.forecast_facts(adopt(COUNTER % "", records), 7, 8)
    assert facts["history"] == [1, 2, 3, 4]
    assert facts["free_steps"] == [1, 1]


def guard_reading(value, status, past):
    return {"kind": "guard.spend", "claim": "measured", "venture": V, "value": value, "status": status, "past": past,
            "plausible": status in ("trusted", "unconfirmed"), "note": "" if status == "trusted" else "why",
            "summary": f"guard spend = {value}"}


def test_the_gate_and_the_re_check_agree_on_when_a_guard_episode_ends():
    """GUARD-05, GUARD-06, open point 32: past its bound (trusted 500), a failed reading neither clears nor trips;
    the plausible (unconfirmed) 5 after it, back inside, ends the episode; the gate then lets reset run and the
    proof re-checks from the ledger alone; before that 5 the gate refuses, naming the guard."""
    text = GATE + "guards:\n  - {name: spend, run: ./spend, above: 100, then: ask}\n"
    records = {1: (1000, mandate(text)), 2: (1010, report(12)), 3: (1011, guard_reading(500, "trusted", True)),
               4: (1020, report(12)), 5: (1021, guard_reading(None, "failed", False))}
    state = adopt(text, [(s, *records[s]) for s in sorted(records) if s > 1])
    refused = avsm.prove(state, "reset", 1025, ("threshold", [4], ["crossed"]))
    assert not refused.ok and "guard spend" in refused.why
    records[6], records[7] = (1030, report(12)), (1031, guard_reading(5, "unconfirmed", False))
    for s in (6, 7):
        avsm.fold(state, s, *records[s])
    verdict = avsm.prove(state, "reset", 1035, ("threshold", [6], ["crossed"]))
    assert verdict.ok, verdict.why
    act = stored_action(records, 8, 1035, "reset", verdict)
    assert avsm.check_proof(8, 1035, act, records) == []
    records[7] = (1031, guard_reading(150, "unconfirmed", True))        # an unconfirmed one still past: no end
    assert any("guard spend" in p for p in avsm.check_proof(8, 1035, act, records))


def test_check_proof_of_an_action_written_before_actions_kept_their_basis():
    """PROOF-04: an action from an older ledger (no basis field) re-checks from its proof alone: a model's stop,
    a person's own proposal and an approved irreversible run; a forged rule still does not."""
    records = gate_records()
    state = gate_state(records)
    stop = avsm.prove(state, "stop", 1040, ("permitted", [], ["proposal #6 (inferred) prompted this"]), trigger=6)
    records[6] = (1035, dict(records[6][1], lever="stop"))
    act = stored_action(records, 7, 1040, "stop", stop)
    assert stop.proof["rule"] == "stop" and avsm.check_proof(7, 1040, act, records) == []
    records = gate_records()
    records[7] = (1040, {"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": "wipe", "summary": "?"})
    records[8] = (1050, {"kind": "approval", "claim": "declared", "venture": V, "ask": 7, "lever": "wipe",
                         "payload": None, "summary": "yes"})
    verdict = avsm.prove(gate_state(records), "wipe", 1060, ("approval", [], ["ask #7"]), trigger=7, approval=8)
    act = stored_action(records, 9, 1060, "wipe", verdict)
    assert "basis" not in act and avsm.check_proof(9, 1060, act, records) == []
    act["proof"] = dict(act["proof"], rule="threshold")
    assert avsm.check_proof(9, 1060, act, records) != []
