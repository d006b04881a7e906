"""Forecasts: the pure Monte Carlo (records in, a forecast out) and the forecast written after `avsm add`,
made apart from the warden's loop by the forecast program. Open point 39 (how a forecast is made)."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT, make_venture, write

import avsm

COUNTING = "#!/bin/sh\nn=$(cat n 2>/dev/null || echo 0)\nn=$((n + 1))\necho $n > n\necho $n\n"
MANDATE = """purpose: Count.
metric: count
controller: {{kind: threshold, above: 1000000000, action: lower}}
cadence: 1s
{extra}permitted:
  - {{name: lower, run: ./lower, cap: 60/hour, reversible: true}}
"""


def facts(free_steps, history, sides=(), levers=None, rng=None, days=30, seeds=16, cadence=10):
    return {"cadence": cadence, "range": list(rng) if rng else None, "sides": [list(s) for s in sides],
            "levers": levers or {}, "free_steps": list(free_steps), "history": list(history),
            "days": days, "seeds": seeds}


# ---- the pure forecast ----------------------------------------------------------

def test_fewer_than_three_lever_free_steps_is_too_little_history():
    """FORECAST-11: on fewer than three lever-free steps, `too little history to forecast`, no numbers."""
    for steps in ([], [1.0], [1.0, 2.0]):
        result = avsm.forecast(facts(steps, [0.0] * (len(steps) + 1)))
        assert set(result) == {"too_little"} and result["too_little"].startswith("too little history to forecast")
    assert "median" in avsm.forecast(facts([1.0, -1.0, 0.0], [0.0, 1.0, 0.0, 0.0], rng=(-100, 100), days=1, cadence=86400))


def test_a_level_metric_forecasts_its_level():
    """A metric that never moved forecasts where it is, with no spread."""
    result = avsm.forecast(facts([0.0] * 10, [42.0] * 11))
    assert (result["median"], result["p10"], result["p90"]) == (42.0, 42.0, 42.0)
    assert result["days"] == 30 and result["seeds"] == 16 and result["decimals"] == 0


def test_the_controller_holds_a_climbing_counter_within_its_bound():
    """Open point 39: levers applied as the controller would, within their caps: the counter (+1 a report,
    reset past 10, measured at -10 across each run) stays inside 0..11 over 30 days; without its lever, or
    with a cap too small to keep up, it climbs far past."""
    steps, history = [1.0] * 50, [float(i % 11) for i in range(60)]
    lever = {"steps": [-10.0] * 5, "cap": [60, 3600], "expects": None}
    held = avsm.forecast(facts(steps, history, sides=[("above", 10, "reset")], levers={"reset": lever},
                               rng=(0, 100000)))
    assert 0 <= held["p10"] <= held["median"] <= held["p90"] <= 11, held
    alone = avsm.forecast(facts(steps, history, rng=(0, 100000)))
    assert alone["median"] == 100000, alone                       # held to the range (FORECAST-09)
    starved = dict(lever, cap=[1, 86400])
    short = avsm.forecast(facts(steps, history, sides=[("above", 10, "reset")], levers={"reset": starved},
                                rng=(0, 100000)))
    assert short["median"] > 1000, short


def test_expects_gives_a_starting_effect_until_three_runs_are_measured():
    """EFFECT-17: before a lever has run three times, its `expects` size is the effect the forecast starts from."""
    steps, history = [1.0] * 50, [float(i % 11) for i in range(60)]
    unmeasured = {"steps": [], "cap": [60, 3600], "expects": ["down", 11]}
    held = avsm.forecast(facts(steps, history, sides=[("above", 10, "reset")], levers={"reset": unmeasured},
                               rng=(0, 100000)))
    assert held["p90"] <= 11, held
    unknown = dict(unmeasured, expects=None)
    free = avsm.forecast(facts(steps, history, sides=[("above", 10, "reset")], levers={"reset": unknown},
                               rng=(0, 100000)))
    assert free["median"] == 100000, "a lever with no known effect is not imagined to work"


def test_a_spread_the_history_cannot_account_for_is_too_little_history():
    """FORECAST-12, open point 39: an 80% interval wider than the range (or, without one, than ten times the
    span of the history) gives `too little history to forecast`, not numbers."""
    steps = [5.0, -5.0, 4.0, -4.0, 6.0, -6.0]
    wild = avsm.forecast(facts(steps, [50, 55, 50, 54, 50, 56, 50], rng=(0, 20)))
    assert wild["too_little"].startswith("too little history to forecast") and "range" in wild["too_little"]
    narrow = avsm.forecast(facts(steps, [50, 55, 50, 54, 50, 56, 50], days=1, cadence=86400))
    assert "median" in narrow, narrow


def test_numbers_are_shown_to_the_precision_of_the_readings_at_most_two_decimals():
    """FORECAST-10: shown with the readings' decimals, at most two."""
    assert avsm.decimals_of([1.0, 2.0]) == 0
    assert avsm.decimals_of([1.5, 2.25]) == 2
    assert avsm.decimals_of([1.123456]) == 2
    line = avsm.describe_forecast("temp", {"median": 21.456, "p10": 20.0, "p90": 22.9, "decimals": 1}, 7, 8)
    assert line == "forecast 7 days x 8 seeds: temp 21.5 (80%: 20.0 to 22.9)"
    line = avsm.describe_forecast("n", {"median": -0.2, "p10": -0.4, "p90": 0.3, "decimals": 0}, 30, 16)
    assert line == "forecast 30 days x 16 seeds: n 0 (80%: 0 to 0: every seeded path ends alike)", "no -0 shown"


def test_same_facts_same_forecast():
    """The Monte Carlo is seeded: the same facts give the same forecast."""
    f = facts([1.0, -2.0, 0.5, 3.0, -1.0], [10, 11, 9, 9.5, 12.5, 11.5], rng=(-1000, 1000))
    assert avsm.forecast(f) == avsm.forecast(f)


def test_the_forecast_program_reads_facts_and_refuses_a_terminal_or_bad_input():
    """The forecast program (run by the warden) reads its facts on standard input; by hand it is bad usage
    (64), and facts that do not hold are refused with 65, without a traceback."""
    f = facts([0.0] * 5, [3.0] * 6)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "avsm.py"), "forecast"], input=avsm.json.dumps(f),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert avsm.json.loads(r.stdout)["median"] == 3.0
    r = subprocess.run([sys.executable, os.path.join(ROOT, "avsm.py"), "forecast"], input="{not json",
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 65 and "Traceback" not in r.stderr and "forecast" in r.stderr
    r = subprocess.run([sys.executable, os.path.join(ROOT, "avsm.py"), "forecast", "extra"], input="{}",
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 64


# ---- the forecast at add, against a real daemon --------------------------------------

def forecasts(av, venture):
    return [r for _, _, r in av.records() if r["kind"] == "forecast" and r["venture"] == venture]


def test_add_writes_a_forecast_when_it_is_done_and_an_unchanged_readd_none(av, workdir):
    """FORECAST-01 FORECAST-06 FORECAST-07 FORECAST-11 FORECAST-13: `avsm add` answers at once and says a
    forecast is being made (by a program of its own, apart from the warden's loop); the forecast
    record follows (inferred, never a premise); a fresh venture has too little history; a changed mandate
    is forecast again, with numbers once three lever-free steps are in; an unchanged re-add is not."""
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"), "forecast: {days: 1, seeds: 4}\n")
    d = make_venture(workdir, "counting", MANDATE.format(extra=""), {"report": COUNTING, "lower": "#!/bin/sh\n"})
    av.start()
    r = av.cli("add", d)
    assert r.returncode == 0, r.stderr
    assert "a forecast is being made; it is written to the ledger when done" in r.stdout
    first = av.wait_for(lambda recs: forecasts(av, "counting"), 20, "the forecast at add")
    assert first[0]["claim"] == "inferred" and first[0]["why"] == "add"
    assert first[0]["summary"].startswith("forecast: too little history to forecast"), first[0]
    assert "median" not in first[0]
    av.wait_for(lambda recs: len([1 for _, _, x in recs if x["kind"] == "report" and x["status"] == "trusted"]) >= 5,
                20, "five trusted reports")
    write(os.path.join(d, "mandate.yaml"), MANDATE.format(extra="range: [0, 1000000]\n"))
    r = av.cli("add", d)
    assert r.returncode == 0 and "a forecast is being made" in r.stdout, r.stdout + r.stderr
    second = av.wait_for(lambda recs: forecasts(av, "counting")[1:], 20, "the forecast of the changed mandate")
    f = second[0]
    assert f["days"] == 1 and f["seeds"] == 4 and f["median"] > 1000, f       # +1 a second for a day
    assert f["p10"] <= f["median"] <= f["p90"] <= 1000000
    assert f["summary"].startswith("forecast 1 days x 4 seeds: count "), f["summary"]
    r = av.cli("add", d)
    assert "mandate unchanged" in r.stdout and "forecast" not in r.stdout
    before = len(forecasts(av, "counting"))
    r = av.cli("status")
    assert r.returncode == 0
    assert len(forecasts(av, "counting")) == before


def test_seeds_zero_turns_forecasts_off(av, workdir):
    """FORECAST-04: `forecast: {seeds: 0}` in the config: no forecast at add, and add says none."""
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"), "forecast: {days: 30, seeds: 0}\n")
    d = make_venture(workdir, "quiet", MANDATE.format(extra=""), {"report": COUNTING, "lower": "#!/bin/sh\n"})
    av.start()
    r = av.cli("add", d)
    assert r.returncode == 0 and "forecast" not in r.stdout, r.stdout
    av.wait_for(lambda recs: len([1 for _, _, x in recs if x["kind"] == "report"]) >= 3, 20, "three reports")
    assert forecasts(av, "quiet") == []


# ---- the forecast in a decision packet ----------------------------------------------------

MODEL_MANDATE = """purpose: Count, and choose when to lower.
metric: count
controller: {kind: model}
cadence: 1s
range: [0, 100000]
permitted:
  - {name: lower, run: ./lower, cap: 7/day, reversible: true, expects: down 5 within 3}
  - {name: other, run: ./other, cap: 3/week, reversible: true}
"""


def test_a_decision_packet_shows_a_forecast_for_doing_nothing_and_each_lever(av, workdir):
    """FORECAST-01, FORECAST-03, open point 40: the text a model is shown holds a 7-day by 8-seed forecast
    for doing nothing and for one run now of each permitted lever (the `expects` size before a lever is
    measured; a lever with neither says so); made by the roles process, never a premise."""
    from test_models import Backend, COMMAND_CONFIG, setup_home
    be = Backend(workdir, "mine")
    setup_home(av, COMMAND_CONFIG.format(run=be.run))
    d = make_venture(workdir, "chosen", MODEL_MANDATE, {"report": COUNTING, "lower": "#!/bin/sh\n",
                                                          "other": "#!/bin/sh\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda recs: len([1 for _, _, x in recs if x["kind"] == "report" and x["status"] == "trusted"]) >= 5,
                20, "five trusted reports")
    be.reply_json({"choice": "nothing", "reason": "watching"})
    r = av.cli("decide", "chosen")
    assert r.returncode == 0, r.stderr
    user = be.request(1)["user"].splitlines()
    at = user.index("forecast (7 days x 8 seeds, at the horizon):")
    nothing, lower, other = user[at + 1:at + 4]
    assert nothing.startswith("  doing nothing: count ") and "(80%: " in nothing, nothing
    assert lower.startswith("  lower once now: count ") and "(80%: " in lower, lower
    assert other == "  other once now: its effect is not measured yet", other
    assert all(r["claim"] == "inferred" for r in forecasts(av, "chosen"))


def test_a_decision_packet_says_when_there_is_too_little_history_and_follows_the_config(av, workdir):
    """FORECAST-11 in a packet: with no history yet, the packet says `too little history to forecast`;
    FORECAST-04: `forecast:` in the config sets the packet's horizon and width too."""
    from test_models import Backend, COMMAND_CONFIG, setup_home
    be = Backend(workdir, "mine")
    setup_home(av, COMMAND_CONFIG.format(run=be.run) + "forecast: {days: 2, seeds: 3}\n")
    d = make_venture(workdir, "young", MODEL_MANDATE.replace("cadence: 1s", "cadence: 1h"),
                     {"report": COUNTING, "lower": "#!/bin/sh\n", "other": "#!/bin/sh\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    be.reply_json({"choice": "nothing", "reason": "watching"})
    assert av.cli("decide", "young").returncode == 0
    user = be.request(1)["user"].splitlines()
    at = user.index("forecast (2 days x 3 seeds, at the horizon):")
    assert user[at + 1].startswith("  too little history to forecast"), user[at + 1]


def test_numbers_too_large_to_add_up_give_no_forecast_and_no_error():
    """A metric whose steps overflow a float (1e200 a step) gives `too little history to forecast`, never an
    error, NaN or infinity: the same function runs in the roles process, which must not fall over."""
    for steps in ([1e200, -1e200, 1e200, 5e199], [1e307, 1e307, 1e307]):
        result = avsm.forecast(facts(steps, [1e200, 0.0, 1e200]))
        assert set(result) == {"too_little"} and "too large" in result["too_little"], result


def test_a_steady_climb_is_forecast_exactly_over_a_long_horizon():
    """Stepped in blocks, the horizon's report steps still add up exactly: +1 a report at 10 s for 30 days
    is 259,200 steps on from the last reading, with no spread."""
    result = avsm.forecast(facts([1.0] * 5, [1.0, 2.0, 3.0]))
    assert (result["median"], result["p10"], result["p90"]) == (259203.0, 259203.0, 259203.0), result
