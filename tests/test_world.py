"""World models against a real avsmd (issue 11): a real `./world` in the venture, predictions on every trusted
report, their scores, the calibration bar on a model's ranking, the capacity line, and what status and why
show. WORLD-01 to WORLD-09, EFFECT-17, open points 9, 37, 38."""

import json
import os
import time

from conftest import make_venture, write

COUNTING = "#!/bin/sh\nif [ -f fail ]; then echo broken >&2; exit 3; fi\n" \
           "n=$(cat n 2>/dev/null || echo 0)\nn=$((n + 1))\necho $n > n\necho $n\n"

# The world: its mode file says how to misbehave; it keeps every input it was given in inputs.
WORLD = r"""#!/usr/bin/env python3
import json, os, sys, time
given = json.loads(sys.stdin.read())
with open("inputs", "a") as fh:
    fh.write(json.dumps(given) + "\n")
mode = open("mode").read().strip() if os.path.exists("mode") else "good"
last = given["reports"][-1]["value"] if given["reports"] else 0
state = given["state"] or {"steps": 0, "pad": ""}
state["steps"] += 1
if mode == "grow":
    state["pad"] += "x" * 25000
out = {"state": state, "metric": last + 1, "guards": {"heat": 60 if given["seed"] % 2 else 10, "unnamed": 1},
       "extra": "dropped"}
if mode == "nan":
    sys.stdout.write('{"state": null, "metric": NaN}\n')
elif mode == "string":
    out["metric"] = "eleven"
    print(json.dumps(out))
elif mode == "exit":
    sys.exit(4)
elif mode == "big":
    sys.stdout.write("x" * 10_000_000)
elif mode == "hang":
    time.sleep(30)
else:
    print(json.dumps(out))
"""

MANDATE = """purpose: Count, and know how well the world is known.
metric: count
controller: {{kind: threshold, above: 1000000, action: lower}}
cadence: 1s
{extra}permitted:
  - {{name: lower, run: ./lower, cap: 60/hour, reversible: true, expects: down 5 within 1}}
guards:
  - {{name: heat, run: ./heat, above: 50, then: ask}}
"""


def mine(av, kind, venture="w"):
    return [(s, r) for s, _, r in av.records() if r["kind"] == kind and r["venture"] == venture]


def world_venture(workdir, extra="world: ./world\n", name="w"):
    return make_venture(workdir, name, MANDATE.format(extra=extra),
                        {"report": COUNTING, "world": WORLD, "lower": "#!/bin/sh\n", "heat": "#!/bin/sh\necho 10\n"})


def wait_reports(av, n, venture="w", since=0, timeout=30):
    return av.wait_for(lambda recs: len([1 for s, _, r in recs if s > since and r["kind"] == "report"
                                         and r["venture"] == venture]) >= n, timeout, f"{n} reports")


def test_a_world_command_predicts_each_trusted_report(av, workdir):
    """WORLD-01, WORLD-02, WORLD-03, WORLD-05, open point 38: `world: ./world` is run with one JSON object on
    standard input (state, lever, seed, time, the trusted reports as stored) and its state comes back next
    time; each trusted report brings an inferred prediction citing it, from the ensemble's metric, with the
    chance of the named guard reading past its bound (the unnamed guard and other keys dropped)."""
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"), "forecast: {days: 1, seeds: 0}\n")     # only predictions step it
    d = world_venture(workdir)
    av.start()
    assert av.cli("add", d).returncode == 0
    preds = av.wait_for(lambda recs: mine(av, "prediction")[2:], 30, "three predictions")
    records = {s: r for s, _, r in av.records()}
    for seq, p in preds:
        assert p["claim"] == "inferred" and p["source"] == "world"
        cited = records[p["report"]]
        assert cited["kind"] == "report" and cited["status"] == "trusted"
        assert p["median"] == cited["value"] + 1 and p["p10"] == p["p90"] == p["median"]
        assert p["guards"] == {"heat": 0.5}, p
        assert "unnamed" not in json.dumps(p) and "extra" not in json.dumps(p)
    with open(os.path.join(d, "inputs")) as fh:
        inputs = [json.loads(line) for line in fh]
    assert set(inputs[0]) == {"state", "lever", "seed", "time", "reports", "imagined"} and inputs[0]["imagined"] == []
    assert inputs[0]["state"] is None and inputs[0]["lever"] is None
    assert isinstance(inputs[0]["seed"], int) and abs(inputs[0]["time"] - time.time()) < 60
    assert set(inputs[0]["reports"][0]) == {"seq", "at", "value"}
    assert any(i["state"] and i["state"]["steps"] >= 1 for i in inputs), "the state it returned comes back"
    assert len({i["seed"] for i in inputs}) == len(inputs), "each step has its own seed"
    assert all(records[r["seq"]]["status"] == "trusted" for i in inputs for r in i["reports"])


def test_a_broken_world_is_a_failed_step_once_per_stretch_and_nothing_else_changes(av, workdir):
    """Bad input, open point 38: NaN, a string for the metric, a non-zero exit, 10 MB of output, a state that
    grows past 64 KiB, and a deleted world are each a failed step: one `world` record per stretch (not one per
    report), no prediction, never a crash; reports go on trusted, and a good step predicts again."""
    d = world_venture(workdir)
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda recs: mine(av, "prediction"), 30, "a first prediction")
    for mode, said in (("nan", "not one JSON object"), ("string", "not a finite number"), ("exit", "exit 4"),
                       ("big", "more than 64 KiB"), ("deleted", "exit 127"), ("grow", "more than 64 KiB")):
        before = av.records()[-1][0]
        if mode == "deleted":
            os.rename(os.path.join(d, "world"), os.path.join(d, "world.away"))
        else:
            write(os.path.join(d, "mode"), mode)
        failed = av.wait_for(lambda recs: [r for s, _, r in recs if s > before and r["kind"] == "world"], 30,
                             f"a failed step ({mode})")
        # a step started just before the rename has exec'd its interpreter, which then finds no file (exit 2)
        deleted = mode == "deleted" and "can't open file" in failed[0]["note"] and "exit 2" in failed[0]["note"]
        assert (said in failed[0]["note"] or deleted) and failed[0]["claim"] == "measured", (mode, failed[0])
        reports = wait_reports(av, 3, since=before)
        assert len([r for s, _, r in av.records() if s > before and r["kind"] == "world"]) == 1, mode
        assert all(r["status"] == "trusted" for s, _, r in av.records() if s > before and r["kind"] == "report"), mode
        if mode == "grow":
            break               # a state grown too big stays the last good one, and the world fails on it again
        if mode == "deleted":
            os.rename(os.path.join(d, "world.away"), os.path.join(d, "world"))
        write(os.path.join(d, "mode"), "good")
        mark = av.records()[-1][0]
        av.wait_for(lambda recs: [1 for s, _, r in recs if s > mark and r["kind"] == "prediction"], 30,
                    f"a prediction again after {mode}")
        assert reports
    assert av.proc.poll() is None


def test_a_world_past_ten_seconds_is_a_failed_step_and_delays_no_report(av, workdir):
    """Open point 38, WORLD-05: a world step that hangs is ended at 10 s and recorded as a failed step; the
    reports (and so guards and levers) go on at their cadence meanwhile."""
    d = world_venture(workdir)
    write(os.path.join(d, "mode"), "hang")
    av.start()
    t0 = time.monotonic()
    assert av.cli("add", d).returncode == 0
    failed = av.wait_for(lambda recs: mine(av, "world"), 25, "the timed-out step")
    assert time.monotonic() - t0 >= 9.5
    assert "longer than 10 s" in failed[0][1]["note"]
    assert len(mine(av, "report")) >= 8 and mine(av, "prediction") == []


def test_the_baseline_predicts_and_scores_with_calibration(av, workdir):
    """WORLD-04, WORLD-05, WORLD-06, WORLD-07: without world:, `calibration: 0.1` brings a baseline prediction
    on each trusted report; the next trusted report scores it in a measured calibration.count record citing
    the prediction and the report: a counter climbing by 1 is predicted exactly (crps 0, skill 1, inside its
    interval). A failed report resolves nothing, and the prediction it interrupted is dropped unscored."""
    d = world_venture(workdir, extra="calibration: 0.1\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda recs: mine(av, "calibration.count")[1:], 30, "two scores")
    write(os.path.join(d, "fail"), "")
    before = av.records()[-1][0]
    av.wait_for(lambda recs: [1 for s, _, r in recs if s > before and r["kind"] == "report" and r["status"] == "failed"],
                20, "a failed report")
    os.unlink(os.path.join(d, "fail"))
    av.wait_for(lambda recs: [1 for s, _, r in recs if s > before and r["kind"] == "calibration.count"][1:], 30,
                "scores again")
    records = {s: r for s, _, r in av.records()}
    reports = [s for s, r in records.items() if r["kind"] == "report"]
    assert all(records[s]["source"] == "baseline" and records[s]["claim"] == "inferred"
               for s, r in records.items() if r["kind"] == "prediction")
    for seq, c in mine(av, "calibration.count"):
        assert c["claim"] == "measured"
        pred, rep = records[c["prediction"]], records[c["report"]]
        assert pred["kind"] == "prediction" and rep["kind"] == "report" and rep["status"] == "trusted"
        assert reports[reports.index(pred["report"]) + 1] == c["report"], "scored against the very next report"
        assert c["crps"] == 0 and c["skill"] == 1 and c["coverage"] is True and c["brier"] is None
        assert c["rolling_skill"] == 1 and c["rolling_coverage"] == 1
    failed = [s for s in reports if records[s]["status"] == "failed"]
    assert not [c for _, c in mine(av, "calibration.count") if c["report"] in failed]
    after_fail = [reports[reports.index(f) + 1] for f in failed if reports.index(f) + 1 < len(reports)]
    assert not [c for _, c in mine(av, "calibration.count") if c["report"] in after_fail], \
        "no prediction is scored across a failed report"


def test_status_shows_the_calibration_and_why_shows_what_a_score_scored(av, workdir):
    """Item 8: avsm status shows the rolling skill and coverage and whether a ranking would run; avsm why of a
    calibration.count record shows the prediction it scored and the report that resolved it."""
    d = world_venture(workdir, extra="calibration: 0.1\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    first = av.wait_for(lambda recs: mine(av, "calibration.count"), 30, "a score")
    r = av.cli("status", "-v")
    assert "  calibration: " in r.stdout and "a ranking would ask, not run: only " in r.stdout, r.stdout
    av.wait_for(lambda recs: mine(av, "calibration.count")[4:], 30, "five scores")
    r = av.cli("status", "-v")
    line = next(x for x in r.stdout.splitlines() if x.startswith("  calibration: "))
    assert "skill 1, coverage 100%" in line and "a ranking would run" in line, line
    row = r.stdout.splitlines()[0]      # the one-line view says it too
    assert row.startswith("w: ") and "calibration: skill 1, coverage 100%" in row, row
    seq, c = first[0]
    r = av.cli("why", str(seq))
    assert r.returncode == 0, r.stderr
    assert f"cites #{c['prediction']} " in r.stdout and " prediction " in r.stdout
    assert f"cites #{c['report']} " in r.stdout and " report " in r.stdout


CAPACITY = """purpose: Count, below a bound.
metric: count
controller: {{kind: threshold, above: {bound}, action: lower}}
cadence: 1s
permitted:
  - {{name: lower, run: ./lower, cap: 1/hour, reversible: true, expects: down 5 within 1}}
"""


def test_add_and_avsmd_t_print_the_capacity_and_never_block(av, workdir):
    """Open point 9, EFFECT-17: avsm add prints `capacity: not known (no drift yet ...)` for a new venture;
    once the counter climbs 1 a second (86400/day) against lower's 1/hour of 5 (120/day), a changed mandate
    prints `capacity: short by 86280/day`, and so does avsmd -t; adoption goes ahead either way."""
    d = make_venture(workdir, "cap", CAPACITY.format(bound=1000000), {"report": COUNTING, "lower": "#!/bin/sh\n"})
    av.start()
    r = av.cli("add", d)
    assert r.returncode == 0 and "adopted" in r.stdout
    assert "  capacity: not known (no drift yet: 0 lever-free step(s) of history, 3 needed)" in r.stdout, r.stdout
    wait_reports(av, 5, venture="cap")
    write(os.path.join(d, "mandate.yaml"), CAPACITY.format(bound=100))
    r = av.cli("add", d)
    assert r.returncode == 0 and "adopted" in r.stdout
    assert "  capacity: short by 86280/day" in r.stdout, r.stdout
    t = av.daemon_cmd("-t")
    assert t.returncode == 0, t.stderr
    assert "  capacity: short by 86280/day" in t.stdout, t.stdout


def test_avsmd_t_checks_the_world_command_like_a_lever(av, workdir):
    """WORLD-01: avsmd -t re-reads the mandate and says when ./world is missing or not executable."""
    d = world_venture(workdir)
    av.start()
    assert av.cli("add", d).returncode == 0
    os.chmod(os.path.join(d, "world"), 0o644)
    t = av.daemon_cmd("-t")
    assert t.returncode == 78 and "./world is not executable" in t.stderr, t.stderr
    os.unlink(os.path.join(d, "world"))
    t = av.daemon_cmd("-t")
    assert t.returncode == 78 and "./world is missing" in t.stderr, t.stderr


RANKED = """purpose: Count, and let a model rank what to do.
metric: count
controller: {kind: model}
cadence: 1s
calibration: 0.1
permitted:
  - {name: first, run: ./first, cap: 10/hour, reversible: true}
  - {name: second, run: ./second, cap: 10/hour, reversible: true}
"""


def test_a_ranking_below_the_calibration_bar_asks_and_at_the_bar_goes_to_the_gate(av, workdir):
    """WORLD-08, WORLD-09, open point 37: a `choices` reply naming two actions is a ranking. With fewer than 5
    scores its top choice becomes an ask (measured, about the lever) and no lever runs; a single action is no
    ranking and goes to the gate as before. Once 5 predictions are scored with skill 1 (>= 0.1), the same
    ranking goes to the gate and runs; no action ever cites a prediction or a score."""
    from test_models import Backend, COMMAND_CONFIG, setup_home
    be = Backend(workdir, "mine")
    setup_home(av, COMMAND_CONFIG.format(run=be.run))
    d = make_venture(workdir, "ranked", RANKED, {"report": COUNTING, "first": "#!/bin/sh\n", "second": "#!/bin/sh\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    ranking = {"choices": [{"choice": "action", "action": "first", "reason": "best"},
                           {"choice": "action", "action": "second", "reason": "next"}]}
    be.reply_json(ranking)
    r = av.cli("decide", "ranked")
    assert r.returncode == 0, r.stderr
    asks = mine(av, "ask", "ranked")
    assert len(asks) == 1 and asks[0][1]["lever"] == "first" and asks[0][1]["ranking"] is True, asks
    assert asks[0][1]["claim"] == "measured" and "5 needed" in asks[0][1]["question"]
    assert mine(av, "action", "ranked") == []
    assert "second not proposed: the ranking is held back" in r.stdout, r.stdout
    av.wait_for(lambda recs: mine(av, "calibration.count", "ranked")[4:], 30, "five scores")
    be.reply_json(ranking)
    r = av.cli("decide", "ranked")
    assert r.returncode == 0, r.stderr
    actions = av.wait_for(lambda recs: mine(av, "action", "ranked"), 10, "the ranking's actions")
    assert [a["lever"] for _, a in actions][:1] == ["first"]
    records = {s: x for s, _, x in av.records()}
    for _, a in mine(av, "action", "ranked"):
        assert all(records[p]["kind"] not in ("prediction",) and not records[p]["kind"].startswith("calibration.")
                   for p in a["proof"]["premises"])


def test_the_forecast_at_add_steps_the_world_with_its_calls_capped(av, workdir):
    """Item 6, open point 39: with world:, the forecast at add steps the world command at the venture's cadence
    (a day at 1 s is 86400 steps a seed: more than the 400 calls allowed, so it is cut short and says so); it
    is written when done, inferred, and the reports go on meanwhile."""
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"), "forecast: {days: 1, seeds: 4}\n")
    d = world_venture(workdir)
    os.makedirs(os.path.join(d, "in"))
    write(os.path.join(d, "world"), "#!/bin/sh\ncat > in/$$\necho '{\"state\": {\"k\": 1}, \"metric\": 7, \"guards\": {}}'\n", 0o755)
    av.start()
    r = av.cli("add", d)
    assert r.returncode == 0 and "a forecast is being made" in r.stdout
    f = av.wait_for(lambda recs: mine(av, "forecast"), 60, "the forecast through the world")[0][1]
    assert f["claim"] == "inferred" and f["world"] is True and f["median"] == 7 and f["p10"] == f["p90"] == 7, f
    assert "cut short at 400 world steps (400 at most)" in f["note"] and "cut short" in f["summary"], f
    steps = []
    for name in os.listdir(os.path.join(d, "in")):
        with open(os.path.join(d, "in", name)) as fh:
            steps.append(json.loads(fh.read()))
    imagined = [s for s in steps if s["imagined"]]
    assert len(imagined) >= 390 and all(s["state"] == {"k": 1} for s in imagined), len(imagined)
    # issue 22 item 8: reports are the trusted reports as stored, every step; the path's own values apart
    records = {seq: x for seq, _, x in av.records()}
    assert all(r["seq"] is not None and records[r["seq"]]["status"] == "trusted" for s in steps for r in s["reports"])
    assert all(set(v) == {"at", "value"} and v["value"] == 7 for s in imagined for v in s["imagined"])


# A world that knows what a run of lower does: told it (or remembering it in its state), the metric is 555.
LEVER_WORLD = """#!/bin/sh
input=$(cat)
printf '%s\\n' "$input" > in/$$
case "$input" in
  *'"lever": "lower"'*|*'"lowered": 1'*) echo '{"state": {"lowered": 1}, "metric": 555, "guards": {}}';;
  *) echo '{"state": null, "metric": 777, "guards": {}}';;
esac
"""

DECIDED = """purpose: Count, and let a model choose with the world's forecast.
metric: count
controller: {kind: model}
cadence: 1s
world: ./world
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: true}
"""


def test_the_packet_forecast_steps_the_world_with_its_calls_capped(av, workdir):
    """Item 6: with world:, the forecast in the decision packet steps the world command, as the forecast at add
    does: doing nothing, and one run now of each lever (the world told it on the first step); its calls are
    capped (160 shared by the two: 80 each, 4 seeds of 20 steps of a day's 86400) and it says it was cut
    short. A real command backend keeps the packet it was given. FORECAST-03, open point 39, WORLD-01"""
    os.makedirs(av.home, mode=0o700)
    backend = write(os.path.join(workdir, "backend"),
                    f"#!/bin/sh\ncat > {workdir}/request.json\necho '{{\"choice\": \"nothing\", \"reason\": \"fine\"}}'\n", 0o755)
    write(os.path.join(av.home, "config.yaml"),
          f"nightly: never\ndefault: mine\nforecast: {{days: 1, seeds: 4}}\nbackends:\n  mine: {{kind: command, run: {backend}}}\n")
    d = make_venture(workdir, "w", DECIDED, {"report": COUNTING, "world": LEVER_WORLD, "lower": "#!/bin/sh\n"})
    os.makedirs(os.path.join(d, "in"))
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda recs: mine(av, "report"), 10, "a report")
    run = av.cli("decide", "w")
    assert run.returncode == 0, run.stderr
    with open(os.path.join(workdir, "request.json")) as fh:
        user = json.load(fh)["user"]
    assert "forecast through the world command (1 days x 4 seeds, at the horizon):" in user, user
    assert "cut short at 80 world steps (80 at most)" in user, user
    assert "doing nothing: count 777 (80%: 777 to 777: every seeded path ends alike)" in user, user
    assert "lower once now: count 555 (80%: 555 to 555: every seeded path ends alike)" in user, user
    told = []
    for name in os.listdir(os.path.join(d, "in")):
        with open(os.path.join(d, "in", name)) as fh:
            step = json.loads(fh.read())
        if step["lever"] == "lower":
            told.append(step)
    assert len(told) == 4, "each seed's first step of the lever's forecast, and no other, is told the lever"


def test_the_world_state_survives_a_warden_restart(av, workdir):
    """Issue 36 item 1, open point 38: the state the world returned last is in the ledger (the `state` of
    the prediction it changed), so a warden killed and restarted steps the world on from it, not from
    null."""
    import signal
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"), "forecast: {days: 1, seeds: 0}\n")
    d = world_venture(workdir)
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda recs: [r for s, _, r in recs if r["kind"] == "prediction" and r.get("state")], 30,
                "a prediction carrying the world's state")
    os.kill(av.wardens()[0], signal.SIGKILL)
    (restart, _), = av.wait_for(lambda recs: [(s, r) for s, _, r in recs if r["kind"] == "restart"], 30,
                                "the warden's restart")
    with open(os.path.join(d, "inputs")) as fh:
        before = len(fh.readlines())
    av.wait_for(lambda recs: [1 for s, _, r in recs if s > restart and r["kind"] == "prediction"], 30,
                "a prediction after the restart")
    with open(os.path.join(d, "inputs")) as fh:
        after = [json.loads(line) for line in fh.readlines()[before:]]
    assert after and all(i["state"] and i["state"]["steps"] >= 1 for i in after), after[:1]
