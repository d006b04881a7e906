"""Every state the kernel reads is folded from the ledger (issue 36 item 1, for issue 33's snapshots):
a ledger written while a check runs, a ratchet's forecast is in flight or a world has a state, folded
again from its first record, gives the state the live warden had; after a restart the kernel says
what becomes of what was running."""

import avsm
from test_kernel import V, mandate, report
from test_kernel_rules import CHECKED, Ledger, kinds

RATCHETED = CHECKED.replace("reversible: true, check: ./check}", "reversible: false}")
WORLD = CHECKED.replace("cadence: 10s", "cadence: 10s\nworld: ./world")
FOLDED = ("checking", "ratchet_forecasts", "world_state")


class Kept(Ledger):
    """A Ledger that keeps its records, answers a Forecast with `forecasts` and a ReadMandate
    with its text, as the warden does."""

    def __init__(self, text, forecasts=True):
        super().__init__(text)
        self.text, self.records, self.forecasts = text, [(1, 1000, mandate(text))], forecasts

    def add(self, record):
        seq = super().add(record)
        self.records.append((seq, self.at, record))
        return seq

    def run(self, intents):
        done, result = [], None
        while True:
            try:
                intent = intents.send(result)
            except StopIteration:
                return done
            result = None
            if isinstance(intent, avsm.Forecast):
                result = self.forecasts
            elif isinstance(intent, avsm.ReadMandate):
                result = ("/srv/v/mandate.yaml", self.text, None)
            else:
                result = self.add(intent.record)
            done.append(intent)

    def refolded(self):
        """The state folded again from the first record, as a restart (or a snapshot) has it."""
        states = {}
        for seq, at, record in self.records:
            avsm.fold_ledger(states, seq, at, record, lambda text, where: avsm.parse_mandate(text, "m.yaml"))
        return states[V]


def same_state(led):
    """Assert every slot of the live state equals the one folded again from the first record (what a
    snapshot of the venture serializes), and return the refolded state."""
    again = led.refolded()
    for name in avsm.VentureState.__slots__:
        if name != "__dict__":
            assert getattr(led.state, name) == getattr(again, name), name
    return again


def approve(led, lever):
    ask = led.add({"kind": "ask", "claim": "measured", "venture": V, "about": "lever", "lever": lever,
                   "question": "?", "summary": "?"})
    led.add({"kind": "approval", "claim": "declared", "venture": V, "ask": ask, "lever": lever, "summary": "yes"})


def test_a_running_check_is_folded_and_a_restart_ends_it_unpassed():
    """Open point 27, RUN-10: the start of a lever's check is written, so the gate refuses the lever
    while it runs, live and folded again alike; a warden that died meanwhile left no check running
    (avsmd ended its groups): the kernel writes the check as not passed, and the lever is free."""
    led = Kept(CHECKED)
    basis = ("permitted", [], ["a person asks"])
    assert avsm.prove(led.state, "lower", led.at + 1, basis).ok
    begun = led.add(next(avsm.begun(led.state, "check", "lower")).record)
    again = same_state(led)
    assert led.state.checking == again.checking == {"lower": begun}
    assert not avsm.prove(again, "lower", led.at + 1, basis).ok
    done = led.run(avsm.interrupted_rule(led.state, led.at + 5, 5))
    assert [(i.record["kind"], i.record["ok"]) for i in done] == [("check", False)]
    assert f"check (#{begun}) was cut off" in done[0].record["summary"]
    assert led.state.checking == led.refolded().checking == {}
    assert avsm.prove(led.refolded(), "lower", led.at + 1, basis).ok
    assert led.run(avsm.interrupted_rule(led.state, led.at + 6, 5)) == [], "once"
    same_state(led)


def test_a_ratchet_forecast_in_flight_is_folded_and_made_again_after_a_restart():
    """SELF-02, FORECAST-01: a ratchet's forecast, once started, is written; folded again, the lever
    still waits on it (no second forecast); after a restart the kernel forecasts again, or asks at
    once when no forecast can be made; the forecast or the ask ends the wait."""
    led = Kept(RATCHETED)
    approve(led, "lower")
    done = led.run(avsm.ratchet_rule(led.state, "lower", 1))
    assert [type(i).__name__ for i in done] == ["Forecast", "Write"] and done[1].record["what"] == "forecast"
    again = same_state(led)
    assert led.state.ratchet_forecasts == again.ratchet_forecasts == {"lower": led.seq}
    assert list(avsm.ratchet_rule(again, "lower", 1)) == [], "its forecast runs: not a second"
    done = led.run(avsm.interrupted_rule(led.state, led.at + 5, 1))
    assert [type(i).__name__ for i in done] == ["Forecast", "Write"], "a restart forecasts again"
    assert led.state.ratchet_forecasts == led.refolded().ratchet_forecasts == {"lower": led.seq}
    led.forecasts = False
    done = led.run(avsm.interrupted_rule(led.state, led.at + 5, 1))
    assert [type(i).__name__ for i in done] == ["Forecast", "ReadMandate", "Write"], \
        "no forecast can be made: it asks"
    assert done[2].record["about"] == "ratchet" and done[2].record["mandate"] is not None
    assert led.state.ratchet_forecasts == led.refolded().ratchet_forecasts == {}
    assert not avsm.ratchet_due(led.state, "lower", 1), "asked"
    same_state(led)


def test_a_ratchet_forecast_ended_writes_it_then_the_ask():
    """FORECAST-01: the forecast that ended is written (none when a pause cut it short) and the ask
    follows; either way the lever waits no more."""
    for ended_by, written in ((None, ["forecast", "ask"]), ("pause", ["ask"])):
        led = Kept(RATCHETED)
        approve(led, "lower")
        led.run(avsm.ratchet_rule(led.state, "lower", 1))
        extra = {"days": 7, "seeds": 8, "why": "ratchet", "lever": "lower"}
        done = led.run(avsm.forecast_rule(led.state, extra, b"not json", 0, ended_by, 1))
        assert [r["kind"] for _, _, r in led.records[-len(written):]] == written, ended_by
        assert led.state.ratchet_forecasts == led.refolded().ratchet_forecasts == {}
        assert kinds([("Write", i.record) for i in done if isinstance(i, avsm.Write)]) == \
            [("Write", k) for k in written]


def test_the_world_state_is_folded_from_the_prediction_that_changed_it():
    """WORLD-05, open point 38: the state a world step returned is written with its prediction when it
    changed, so folded again (a restart) the world steps on from it, not from null."""
    led = Kept(WORLD)
    seq = led.add(report(5))
    out = [{"state": {"n": 1}, "metric": 6.0, "guards": {}}]
    (written,) = led.run(avsm.world_rule(led.state, seq, None, out, None))
    assert written.record["state"] == {"n": 1}
    assert led.state.world_state == led.refolded().world_state == {"n": 1}
    assert avsm.world_input(led.refolded(), None, 0, 3, 2000)["state"] == {"n": 1}
    # step i of report #5's ensemble: seed 5 * WORLD_SEEDS + i, a seed of its own
    assert [avsm.world_input(led.state, None, 5, i, 2000)["seed"] for i in (0, 3)] == [40, 43]
    seq = led.add(report(6))
    (same,) = led.run(avsm.world_rule(led.state, seq, None, out, None))
    assert "state" not in same.record, "unchanged: not written again"
    assert led.refolded().world_state == {"n": 1}
    seq = led.add(report(7))
    led.run(avsm.world_rule(led.state, seq, None, [dict(out[0], state=None)], None))
    assert led.state.world_state is None and same_state(led).world_state is None
    led.state.mandate = None
    assert list(avsm.world_rule(led.state, led.add(report(8)), None, out, "failed")) == [], \
        "an ensemble settled after its mandate stopped holding writes nothing"


def test_what_the_kernel_reads_is_in_the_slots_and_json():
    """Issue 33 item 1: the folded state a snapshot serializes is in VentureState's slots, as JSON."""
    import json
    state = avsm.VentureState(V)
    for name in FOLDED:
        assert name in avsm.VentureState.__slots__ and json.loads(json.dumps(getattr(state, name))) \
            == getattr(state, name)


def test_no_room_is_handed_a_way_to_write():
    """Issue 36 item 1: the rooms return intents; only the warden's carry_out appends, so no room's
    constructor takes append, carry_out, pause, adopt or its owner."""
    import inspect
    for room in (avsm.Rounds, avsm.Keeper, avsm.Levers, avsm.Worlds, avsm.Decisions, avsm.HomeFiles):
        taken = set(inspect.signature(room).parameters)
        assert not taken & {"append", "carry_out", "pause", "adopt", "warden"}, (room, taken)
    assert not hasattr(avsm, "Trust"), "the ratchet's and the canary's records are the kernel's"


def test_a_re_check_of_a_controller_call_changes_no_state():
    """LEDGER-12 DESIGN (proofs): re-checking a controller's call reads the state and adds no
    controller side, so doctor's fold, which re-checks every proof, equals a snapshot's, which
    re-checks none (a side made by the re-check read as a snapshot that is not the fold: 65)."""
    from test_kernel import COUNTER
    text, states = COUNTER % "", {}
    for seq, record in enumerate([mandate(text), report(50), mandate(text)], 1):
        avsm.fold_ledger(states, seq, 1000 + seq, record, lambda text, where: avsm.parse_mandate(text, "m.yaml"))
    state = states[V]
    before = {name: dict(side) for name, side in state.sides.items()}
    lever = avsm.controller_sides(state.mandate)[0][3]
    assert avsm.controller_call_problem(state, lever, [2]) is not None
    assert avsm.controller_calls(state) == [] and state.sides == before
