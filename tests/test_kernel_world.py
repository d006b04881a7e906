"""World models in the kernel (issue 11): the scores against values worked out by hand, when a prediction
resolves or is dropped, the calibration bar on a ranking, the world command's output, and the capacity check.
Records in, records out; no clock, no process."""

import json

import avsm
from test_kernel import V, adopt, report
from test_kernel_rules import Ledger

CALIBRATED = """\
purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 100, action: lower}
cadence: 10s
calibration: 0.1
permitted:
  - {name: lower, run: ./lower, cap: 6/hour, reversible: true, expects: down 4 within 1}
guards:
  - {name: heat, run: ./heat, above: 50, then: ask}
"""


# ---- the scores, by hand ------------------------------------------------------------

def test_crps_of_a_two_member_ensemble_and_of_a_point():
    """WORLD-07: members {0, 2}, y = 1: E|X - y| = 1, E|X - X'| = (0 + 2 + 2 + 0) / 4 = 1, CRPS = 1 - 1/2 = 0.5.
    A point forecast's CRPS is its absolute error: {3}, y = 1 gives 2. Members {1, 2, 4}, y = 4:
    E|X - y| = (3 + 2 + 0) / 3 = 5/3; E|X - X'| = 2 (1 + 3 + 2) / 9 = 4/3; CRPS = 5/3 - 2/3 = 1."""
    assert avsm.crps_ensemble([0, 2], 1) == 0.5
    assert avsm.crps_ensemble([3], 1) == 2
    assert abs(avsm.crps_ensemble([4, 1, 2], 4) - 1) < 1e-12


def test_rolling_skill_is_one_minus_summed_crps_over_summed_persistence():
    """Open point 37 as the issue settles it: skill 1 - (0.5 + 1) / (1 + 2) = 0.5; coverage 1 of 2;
    persistence that never missed gives no skill."""
    assert avsm.rolling_scores([(0.5, 1, True), (1, 2, False)]) == (0.5, 0.5)
    assert avsm.rolling_scores([(0.5, 0, True)]) == (None, 1.0)


def scored_ledger(values, members_of):
    """A calibrated venture fed trusted reports; after each, the prediction `members_of(value)` of the next
    one is folded and the calibration rule run, as the warden does. Returns the ledger and the scores written."""
    led = Ledger(CALIBRATED)
    scores = []
    for v in values:
        seq = led.add(report(v))
        scores += [r for _, r in led.drive(avsm.calibration_rule(led.state))]
        led.add(avsm.prediction_record(led.state, seq, members_of(v)))
    return led, scores


def test_a_prediction_is_scored_by_the_next_trusted_report():
    """WORLD-06, WORLD-07: prediction {v - 1, v + 1} from a report of 10; the next reads 11: crps 0.5 (the
    two-member case), persistence |11 - 10| = 1, skill 0.5; 11 is outside [p10, p90] = [9.2, 10.8].
    Its record is measured, cites the prediction and the report, and carries the rolling figures."""
    led, scores = scored_ledger([10, 11], lambda v: [v - 1, v + 1])
    assert len(scores) == 1
    s = scores[0]
    assert s["kind"] == "calibration.dial" and s["claim"] == "measured"
    assert s["crps"] == 0.5 and s["persistence"] == 1 and s["skill"] == 0.5
    assert s["coverage"] is False and s["brier"] is None
    assert s["rolling_skill"] == 0.5 and s["rolling_coverage"] == 0 and s["rolling"] == 1
    pred = led.state.prediction
    assert pred[1]["report"] == led.seq - 2 and pred[1]["p10"] == 10.2 and pred[1]["p90"] == 11.8
    assert s["prediction"] < s["report"]


def test_a_report_on_the_tenth_percentile_is_covered():
    """The 80% interval is closed: members {10, 20} have p10 = 11; a report of exactly 11 is inside it.
    Persistence: |11 - 15| = 4; CRPS = E|X - 11| - 1/2 E|X - X'| = (1 + 9) / 2 - 10 / 4 = 2.5; skill 1 - 2.5/4."""
    led, scores = scored_ledger([15, 11], lambda v: [10, 20])
    s = scores[0]
    assert s["coverage"] is True and s["crps"] == 2.5 and s["skill"] == 0.375


def test_an_implausible_report_or_a_gap_drops_the_prediction():
    """An implausible or failed report resolves nothing, and the prediction it interrupted is dropped, not
    scored against a later report; a report later than two cadences drops it too."""
    led = Ledger(CALIBRATED)
    seq = led.add(report(10))
    led.add(avsm.prediction_record(led.state, seq, [9, 11]))
    led.add(report(None, "failed"))
    assert led.state.prediction is None
    led.add(report(11))
    assert list(avsm.calibration_rule(led.state)) == []
    seq = led.add(report(12))
    led.add(avsm.prediction_record(led.state, seq, [11, 13]))
    led.at += 30                        # three cadences of 10 s pass
    led.add(report(12))
    assert led.state.prediction is None and list(avsm.calibration_rule(led.state)) == []


def test_brier_scores_the_guard_chances_against_the_guard_read_in_the_round():
    """WORLD-07: a world gave guard heat a 0.75 chance of reading past 50; it reads 60 (past) in the round:
    brier (0.75 - 1)^2 = 0.0625."""
    led = Ledger(CALIBRATED)
    seq = led.add(report(10))
    led.add(avsm.prediction_record(led.state, seq, [9, 11], guards={"heat": 0.75}, world=True))
    led.add(report(10))
    led.add({"kind": "guard.heat", "claim": "measured", "venture": V, "value": 60, "status": "trusted",
             "plausible": True, "past": True, "bound": 50, "side": "above", "summary": "heat = 60"})
    s = [r for _, r in led.drive(avsm.calibration_rule(led.state))][0]
    assert s["brier"] == 0.0625 and s["persistence"] == 0 and s["skill"] is None


def test_a_prediction_is_inferred_and_keeps_at_most_twenty_members():
    """WORLD-05, WORLD-09: a prediction is inferred; a large ensemble is kept as 20 evenly spaced quantiles."""
    led = Ledger(CALIBRATED)
    seq = led.add(report(0))
    p = avsm.prediction_record(led.state, seq, list(range(101)))
    assert p["claim"] == "inferred" and len(p["members"]) == 20 and p["members"][0] == 2.5 and p["report"] == seq
    assert p["median"] == 50 and p["summary"].startswith(f"next dial: 50 (80%: ") and "baseline" in p["summary"]


def test_the_baseline_adds_each_lever_free_step_and_a_lever_run_in_the_round():
    """WORLD-04, EFFECT-17: steps +1, +2, +3 from 16: members 17, 18, 19; with lower run in the round (not yet
    measured three times) its expects size 4 comes off: 13, 14, 15. Fewer than 3 steps: no prediction."""
    led = Ledger(CALIBRATED)
    for v in (10, 10, 11):
        led.add(report(v))
    assert avsm.baseline_members(led.state) is None
    for v in (13, 16):
        led.add(report(v))
    assert led.state.free_steps == [0, 1, 2, 3]
    assert avsm.baseline_members(led.state) == [16, 17, 18, 19]
    assert avsm.baseline_members(led.state, "lower") == [12, 13, 14, 15]


# ---- the calibration bar on a ranking ---------------------------------------------------

def test_the_bar_holds_a_ranking_back_until_five_scores_meet_it():
    """WORLD-08, open point 37: fewer than 5 scores, or a rolling skill below calibration: 0.1, holds a ranking
    back; five scores of skill 0.5 let it go to the gate. A ranking names more than one action."""
    led, _ = scored_ledger([10, 11, 12, 13, 14], lambda v: [v, v + 2])       # crps 0.5 each, persistence 1
    assert len(led.state.scores) == 4
    ok, why = avsm.calibration_bar(led.state)
    assert not ok and "only 4 prediction(s) scored, 5 needed" in why
    led, _ = scored_ledger([10, 11, 12, 13, 14, 15], lambda v: [v, v + 2])
    assert avsm.calibration_bar(led.state) == (True, "rolling skill 0.5 over the last 5 meets the calibration bar 0.1")
    led, _ = scored_ledger([10, 11, 12, 13, 14, 15], lambda v: [v - 5, v - 4])      # far off: skill below 0
    ok, why = avsm.calibration_bar(led.state)
    assert not ok and "below the calibration bar 0.1" in why
    assert avsm.is_ranking([{"choice": "action", "action": "a"}, {"choice": "action", "action": "b"}])
    assert not avsm.is_ranking([{"choice": "action", "action": "a"}, {"choice": "ask", "question": "?"}])


# ---- the world command's output ------------------------------------------------------------

def test_a_world_step_output_keeps_only_its_fields():
    """WORLD-02, WORLD-03, open point 38: other keys and unnamed guards are dropped; not JSON, not an object,
    or a metric that is not a finite number is a failed step."""
    m = avsm.parse_mandate(CALIBRATED, "m.yaml")
    out, why = avsm.read_world_output('{"state": {"n": 1}, "metric": 5, "guards": {"heat": 7, "other": 1}, "x": 2}', m)
    assert why is None and out == {"state": {"n": 1}, "metric": 5.0, "guards": {"heat": 7}}
    for text, said in (("nope", "not one JSON object"), ("[1]", "not a JSON object"),
                       ('{"metric": NaN}', "not one JSON object"), ('{"metric": "5"}', "not a finite number"),
                       ('{"metric": 1e999}', "not a finite number"), ('{"metric": true}', "not a finite number")):
        out, why = avsm.read_world_output(text, m)
        assert out is None and said in why, (text, why)


def test_a_failed_world_step_is_written_once_per_stretch():
    """Bad input: a world failing at every report writes one `world` record until a step succeeds."""
    led = Ledger(CALIBRATED)
    seq = led.add(report(10))
    first = led.drive(avsm.world_rule(led.state, seq, None, [], "it ended exit 3"))
    assert [r["kind"] for _, r in first] == ["world"] and first[0][1]["claim"] == "measured"
    seq = led.add(report(11))
    assert led.drive(avsm.world_rule(led.state, seq, None, [], "it ended exit 3")) == []
    outputs = [{"state": None, "metric": 12.0, "guards": {"heat": 60}}, {"state": None, "metric": 10.0, "guards": {"heat": 40}}]
    done = led.drive(avsm.world_rule(led.state, seq, None, outputs, None))
    assert done[0][1]["kind"] == "prediction" and done[0][1]["guards"] == {"heat": 0.5}
    seq = led.add(report(12))
    assert len(led.drive(avsm.world_rule(led.state, seq, None, [], "it ended exit 3"))) == 1


# ---- the capacity check ----------------------------------------------------------------------

def test_capacity_against_the_drift():
    """Open point 9, EFFECT-17: the dial climbs 1 a report at a 10 s cadence: 8640/day. lower, 6/hour, expects
    down 4: 576/day; short by 8064/day. No drift yet before 3 steps; a climb that never reaches the bound
    within the horizon is enough; a model controller holds no bound."""
    led = Ledger(CALIBRATED)
    led.add(report(0))
    assert avsm.capacity_check(led.state, 30)[0] == "not known"
    assert "no drift yet" in avsm.describe_capacity(avsm.capacity_check(led.state, 30))
    for v in (1, 2, 3):
        led.add(report(v))
    assert avsm.describe_capacity(avsm.capacity_check(led.state, 30)) == "capacity: short by 8064/day"
    assert avsm.capacity_check(led.state, 0.0001)[0] == "enough"          # 0.86 in the horizon, 97 from the bound
    fast = Ledger(CALIBRATED.replace("6/hour", "6/minute").replace("down 4", "down 30"))
    for v in (0, 1, 2, 3):
        fast.add(report(v))
    assert avsm.capacity_check(fast.state, 30) == ("enough", None, "")
    none = Ledger(CALIBRATED.replace(", expects: down 4 within 1", ""))
    for v in (0, 1, 2, 3):
        none.add(report(v))
    assert avsm.describe_capacity(avsm.capacity_check(none.state, 30)) == \
        "capacity: not known (lower has no effect yet: no three measured runs, no expects size)"
    model = adopt(CALIBRATED.replace("{kind: threshold, above: 100, action: lower}", "{kind: model}"))
    assert "no bound" in avsm.describe_capacity(avsm.capacity_check(model, 30))


# ---- forecasts through the world -------------------------------------------------------------

def test_a_forecast_through_the_world_steps_each_seed_and_names_the_lever_the_controller_would_run():
    """Item 6, open point 39: each seed's path steps the world from its state and the reports, each imagined
    value joining the next step's `imagined` (issue 22 item 8: `reports` stays the trusted reports as stored); past the bound (5), within lower's cap (60/minute: never short
    at 10 s), the next step is told lower: from 2, 3 4 5 6 | lower 3 4 5 6 | lower 3 4 5 6. With 1/hour, no run has
    accrued within two minutes, so none is imagined. 2 seeds x 12 steps (2 minutes at 10 s) fit under the cap."""
    calls = []

    def step(given):
        calls.append(given)
        value = (given["imagined"] or given["reports"])[-1]["value"] + (-3 if given["lever"] == "lower" else 1)
        return {"state": (given["state"] or 0) + 1, "metric": value, "guards": {}}, None

    facts = {"cadence": 10, "seeds": 2, "days": 120 / 86400, "sides": [["above", 5, "lower"]],
             "levers": {"lower": {"cap": [60, 60], "steps": [], "expects": None}},
             "history": [1, 2], "world_state": None, "time": 1000, "reports": [{"seq": 7, "at": 990, "value": 2}]}
    result = avsm.forecast_world_paths(facts, step)
    assert len(calls) == 24 and "cut" not in result
    first = calls[:12]
    assert [c["state"] for c in first] == [None] + list(range(1, 12))
    # issue 22 item 8: every step is told the trusted reports as stored, and its path's own values apart
    assert all(c["reports"] == [{"seq": 7, "at": 990, "value": 2}] for c in calls)
    assert [len(c["imagined"]) for c in first] == list(range(12)) and first[0]["imagined"] == []
    assert first[3]["imagined"] == [{"at": 1010, "value": 3}, {"at": 1020, "value": 4}, {"at": 1030, "value": 5}]
    assert [c["time"] for c in first[:2]] == [1010, 1020]
    assert [i for i, c in enumerate(first) if c["lever"] == "lower"] == [4, 8]
    assert result["median"] == result["p10"] == result["p90"] == 6
    facts["levers"]["lower"]["cap"] = [1, 3600]
    calls.clear()
    assert avsm.forecast_world_paths(facts, step)["median"] == 14 and not [c for c in calls if c["lever"]]
    facts["levers"]["lower"]["cap"] = [60, 60]
    facts["days"] = 1
    result = avsm.forecast_world_paths(facts, step)
    assert result["cut"].startswith("cut short at 400 world steps (400 at most): ")
    failed = avsm.forecast_world_paths(facts, lambda given: (None, "it ended exit 2"))
    assert failed == {"too_little": "the world failed a step of the forecast: it ended exit 2"}


def test_the_packet_forecast_through_the_world_shares_its_calls_and_tells_a_lever_on_the_first_step():
    """Item 6: the decision packet's forecasts through the world, doing nothing and one run now of each lever,
    with no controller, share PACKET_WORLD_CALLS (160: 80 each with one lever, 2 seeds of 40 steps of a day at
    10 s), the lever's paths told it on their first step alone; each says where it was cut. What the forecast
    program printed is checked before it goes into a packet, and the packet's lines say it came from the world."""
    calls = []

    def step(given):
        calls.append(given)
        lowered = given["lever"] == "lower" or given["state"] == "lowered"
        return {"state": "lowered" if lowered else None, "metric": 3 if lowered else 9, "guards": {}}, None

    facts = {"cadence": 10, "seeds": 2, "days": 1, "sides": [["above", 5, "lower"]],
             "levers": {"lower": {"cap": [60, 60], "steps": [], "expects": None}},
             "history": [1, 2], "world_state": None, "time": 1000, "reports": [{"seq": 7, "at": 990, "value": 2}]}
    made = avsm.packet_world_forecast(facts, step)
    assert len(calls) == avsm.PACKET_WORLD_CALLS == 160
    assert [i for i, c in enumerate(calls) if c["lever"]] == [80, 120], "the lever's two seeds, first step each"
    assert made["nothing"]["median"] == 9 and made["levers"]["lower"]["median"] == 3
    assert made["nothing"]["cut"].startswith("cut short at 80 world steps (80 at most): ")
    checked = avsm.packet_world_made(json.dumps(made).encode(), 0, None)
    assert checked["levers"]["lower"]["p90"] == 3
    lines = avsm.packet_forecast_lines({"metric": "dial", "forecast": {"days": 1, "seeds": 2, "made": checked}})
    assert lines[0] == "forecast through the world command (1 days x 2 seeds, at the horizon):"
    assert lines[1].startswith("  cut short at 80 world steps") and lines[2:] == ["  doing nothing: dial 9 (80%: 9 to 9: every seeded path ends alike)",
                                                                                  "  lower once now: dial 3 (80%: 3 to 3: every seeded path ends alike)"]
    for bad in ({"nothing": {"median": "x"}, "levers": {}}, {"nothing": made["nothing"], "levers": {"lower": None}}, []):
        assert avsm.packet_world_made(json.dumps(bad).encode(), 0, None)["nothing"] == {
            "too_little": "the forecast through the world was not made: its output does not hold"}
    for output, status, ended_by, why in ((b"not json", 0, None, "its output is not JSON"),
                                          (json.dumps(made).encode(), 1, None, "the forecast program ended exit 1")):
        assert avsm.packet_world_made(output, status, ended_by)["nothing"]["too_little"].endswith(why)
    ended = avsm.packet_world_made(json.dumps(made).encode(), 0, "pause")
    assert avsm.packet_forecast_lines({"metric": "dial", "forecast": {"days": 1, "seeds": 2, "made": ended}})[1] == \
        "  the forecast through the world was not made: it was ended (pause)"


def test_whether_a_forecast_is_made_and_what_it_is_handed_is_the_kernels():
    """FORECAST-06, open point 39: forecast_wanted hands the forecast program the config's days
    and seeds (or the default: 30 by 16, a decision's packet 7 by 8), with where stepping the
    world starts; none with seeds: 0 or a stop under way, and a packet's only through a world."""
    led = Ledger(CALIBRATED)
    facts = avsm.forecast_wanted(led.state, None, False, False, 1000.0)
    assert (facts["days"], facts["seeds"]) == (30, 16) and "world" not in facts and "packet" not in facts
    assert avsm.forecast_wanted(led.state, {"days": 2, "seeds": 3}, False, False, 1000.0)["seeds"] == 3
    assert avsm.forecast_wanted(led.state, {"days": 2, "seeds": 0}, False, False, 1000.0) is None
    assert avsm.forecast_wanted(led.state, None, False, True, 1000.0) is None, "stopping"
    assert avsm.forecast_wanted(led.state, None, True, False, 1000.0) is None, "a packet: no world"
    world = Ledger(CALIBRATED.replace("calibration: 0.1", "world: ./world"))
    world.add(report(7))
    facts = avsm.forecast_wanted(world.state, None, True, False, 1000.0)
    assert (facts["days"], facts["seeds"], facts["packet"]) == (7, 8, True)
    assert facts["world"] == "./world" and facts["guards"] == ["heat"] and facts["reports"]
