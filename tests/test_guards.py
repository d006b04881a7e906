"""Black-box tests of guards, unwinds, audits, readings, bands and plausibility: a real avsmd on a short
temp home, the real client, the ledger read read-only. Each test's docstring names the requirements it
checks. Where a venture's inputs must change from one reading to the next, its script steps through them
by a counter file, so one reading sees one value whatever the timing."""

import concurrent.futures
import json
import os
import shutil
import tempfile
import time

import pytest

from conftest import Avsm, check_ledger_safety, make_venture, write
from test_daemon import dial, of, processes_with

TRUE = "#!/bin/sh\ntrue\n"
MARK = "#!/bin/sh\necho x >> ran\n"     # a lever that leaves the metric where it is


def steps(*outputs, counter=".n"):
    """A shell script whose i-th run runs outputs[i] (a shell snippet); the last one runs from then on."""
    lines = ["#!/bin/sh", f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}", "case $n in"]
    lines += [f"{i}) {snippet};;" for i, snippet in enumerate(outputs[:-1])]
    lines += [f"*) {outputs[-1]};;", "esac", ""]
    return "\n".join(lines)


def values(*numbers, counter=".n"):
    """A report (or guard, audit) script printing numbers[i] on its i-th run, the last from then on."""
    return steps(*[f"echo {n}" for n in numbers], counter=counter)


def put(d, name, text):
    """Replace the file `name` of venture `d` in one step (a reader never sees it half written)."""
    write(os.path.join(d, name + ".new"), text)
    os.replace(os.path.join(d, name + ".new"), os.path.join(d, name))


def asks_about(records, venture, about):
    """[(seq, ask)] of `venture`'s asks raised about `about` (implausible, guard, audit, lever, ...)."""
    return [(s, r) for s, r in of(records, "ask", venture) if r.get("about") == about]


SLOW = "slower than half a second; written when it is done"


def read_in_time(pairs):
    """The records of `pairs` that were read; each left out must be one a loaded machine made late, which the
    spec writes as not read and then writes again with its value when done (RUN-16)."""
    late = [r for _, r in pairs if r["status"] == "not read"]
    assert all(r["note"] == SLOW and r["value"] is None for r in late), late
    return [(s, r) for s, r in pairs if r["status"] != "not read"]


def resolved(records, ask_seq):
    """[(seq, record)] of the `resolved` records that settle ask `ask_seq`."""
    return [(s, r) for s, _, r in records if r["kind"] == "resolved" and r.get("ask") == ask_seq]


def rss_mb(pid):
    """The resident memory of process `pid`, in MB."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


GUARDED = """purpose: Keep the dial low within a budget.
metric: dial
controller: {{kind: threshold, above: 10, action: lower}}
cadence: 1s
permitted:
  - {{name: lower, run: ./lower, cap: 600/hour, reversible: {reversible}}}
{extra_levers}guards:
  - {guard}
"""


def guarded(guard, reversible="true", extra_levers=""):
    return GUARDED.format(guard=guard, reversible=reversible, extra_levers=extra_levers)


# ---- guard: then pause ---------------------------------------------------------------

def test_guard_pauses_and_resume_while_past_is_paused_again(av, workdir):
    """A guard past its bound pauses the venture by a measured pause record; no lever runs; status names
    the guard; a resume while it is still past goes through and says the guard will pause it again, and
    the next reading does; with the reading back inside, resume lets the lever run again.
    GUARD-01 GUARD-02 GUARD-03 GUARD-05 PAUSE-03"""
    d = dial(workdir, "dial", guarded("{name: spend, run: cat spend, above: 100}"), value="50", lower=MARK)
    write(os.path.join(d, "spend"), "0\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: [r for _, r in of(rs, "outcome") if r["ok"]], timeout=10, what="lower runs")
    put(d, "spend", "150\n")
    (pause_seq, pause), = av.wait_for(lambda rs: of(rs, "pause"), timeout=10, what="the guard's pause")
    recs = av.records()
    assert pause["claim"] == "measured" and "spend" in pause["summary"]
    tripped_seq, tripped = [(s, r) for s, r in of(recs, "guard.spend") if s < pause_seq][-1]
    assert tripped["value"] == 150 and tripped["status"] == "trusted" and tripped["past"] is True
    assert tripped["bound"] == 100 and tripped["side"] == "above" and "note" not in tripped
    assert all(r["past"] is False for s, r in of(recs, "guard.spend") if s < pause_seq and r["value"] == 0)
    assert not [s for s, r in of(recs, "action") if s > tripped_seq]
    status = av.cli("status").stdout
    assert "dial: paused" in status and "guard spend" in status and "past its bound" in status
    time.sleep(1.5)
    n = len(of(av.records(), "guard.spend"))
    assert len(of(av.records(), "report")) == len(of(recs, "report")), "a paused venture reads nothing"

    run = av.cli("resume", "dial")
    assert run.returncode == 0, run.stderr
    said = run.stdout + run.stderr
    assert "spend" in said and "pause" in said and "again" in said
    resume_seq = of(av.records(), "resume")[-1][0]
    (again_seq, again), = av.wait_for(lambda rs: [(s, r) for s, r in of(rs, "pause") if s > resume_seq],
                                      timeout=10, what="the second pause")
    recs = av.records()
    assert again["claim"] == "measured" and "spend" in again["summary"]
    assert len(of(recs, "guard.spend")) > n
    assert len([s for s, r in of(recs, "guard.spend") if resume_seq < s < again_seq]) == 1, "paused at the next reading"
    assert not [s for s, r in of(recs, "action") if s > pause_seq]

    put(d, "spend", "50\n")
    run = av.cli("resume", "dial")
    assert run.returncode == 0, run.stderr
    recs = av.wait_for(lambda rs: [1 for s, r in of(rs, "outcome") if s > again_seq and r["ok"]] and rs,
                       timeout=10, what="lower runs again")
    assert "dial: running" in av.cli("status").stdout
    last_guard = [r for s, r in of(recs, "guard.spend")][-1]
    assert last_guard["value"] == 50 and last_guard["past"] is False


# ---- guard: then ask -----------------------------------------------------------------

def test_guard_ask_once_per_episode_refuses_every_lever_even_approved(av, workdir):
    """then: ask raises one ask per episode, not one per reading; while past, every controller decision (a
    band's corrective lever, delegated at that, too) is a refusal naming the guard, and approving an
    irreversible lever's ask is refused with 65 and runs nothing; back inside, the guard's ask is resolved
    and the lever runs again (on its approval); a new episode asks again. GUARD-04 GUARD-05 ASK-11
    open point 35"""
    d = dial(workdir, "dial", guarded("{name: errors, run: cat errors, above: 299, then: ask}", reversible="false"),
             value="50", lower=MARK)
    write(os.path.join(d, "errors"), "200\n")
    band = make_venture(workdir, "room", BAND.format(extra="").replace(
        "{name: heat, run: ./heat, cap: 600/hour, reversible: true}",
        "{name: heat, run: ./heat, cap: 600/hour, reversible: false, delegated: true}")
        + "guards:\n  - {name: errors, run: cat errors, above: 299, then: ask}\n",
        {"report": "#!/bin/sh\necho 17\n", "heat": MARK, "cool": MARK})
    write(os.path.join(band, "errors"), "500\n")
    av.start()
    av.cli("add", d)
    av.cli("add", band)
    (lever_ask, ask), = av.wait_for(lambda rs: asks_about(rs, "dial", "lever"), timeout=10, what="the lever's ask")
    assert ask["lever"] == "lower"
    put(d, "errors", "500\n")
    (guard_ask, gask), = av.wait_for(lambda rs: asks_about(rs, "dial", "guard"), timeout=10, what="the guard's ask")
    assert gask["guard"] == "errors" and gask["claim"] == "measured"
    av.wait_for(lambda rs: len([1 for s, r in of(rs, "guard.errors", "dial") if s > guard_ask]) >= 3,
                timeout=10, what="three more readings past the bound")
    recs = av.records()
    assert len(asks_about(recs, "dial", "guard")) == 1
    assert len(asks_about(recs, "dial", "lever")) == 1
    refusals = [r for s, r in of(recs, "refusal", "dial") if s > guard_ask]
    assert len(refusals) >= 2 and all(r["lever"] == "lower" and "errors" in r["why"] for r in refusals)
    assert not of(recs, "action", "dial") and not of(recs, "pause", "dial")
    assert "dial: paused" not in av.cli("status").stdout

    run = av.cli("approve", str(lever_ask))
    assert run.returncode == 65 and "errors" in run.stderr
    recs = av.records()
    assert not of(recs, "action", "dial") and not of(recs, "approval", "dial")
    assert f"#{lever_ask} " in av.cli("asks").stdout

    put(d, "errors", "200\n")
    av.wait_for(lambda rs: resolved(rs, guard_ask), timeout=10, what="the guard's ask resolved")
    run = av.cli("approve", str(lever_ask))
    assert run.returncode == 0, run.stderr
    recs = av.wait_for(lambda rs: of(rs, "outcome", "dial") and rs, timeout=10, what="lower's outcome")
    (action_seq, action), = of(recs, "action", "dial")
    assert action["lever"] == "lower" and action["proof"]["rule"] == "approval"
    assert of(recs, "outcome", "dial")[0][1]["ok"] is True

    put(d, "errors", "500\n")
    av.wait_for(lambda rs: len(asks_about(rs, "dial", "guard")) == 2, timeout=10, what="the second episode's ask")

    # a band's corrective lever, delegated at that, is refused too while the guard reads past its bound
    recs = av.records()
    assert len(asks_about(recs, "room", "guard")) == 1
    refusals = [r for _, r in of(recs, "refusal", "room")]
    assert len(refusals) >= 3 and all(r["lever"] == "heat" and "errors" in r["why"] for r in refusals)
    assert not of(recs, "action", "room") and not os.path.exists(os.path.join(band, "ran"))


# ---- failed and implausible guard readings -------------------------------------------------

def test_failed_or_implausible_guard_reading_holds_and_neither_trips_nor_clears(av, workdir):
    """A guard reading that exits 1 (even printing a number past the bound), prints nan, or whose script
    was deleted after adoption (sh exits 127) neither trips the guard nor clears it: it holds the venture
    implausible, status says held by guard NAME and what clears it, one implausible ask, no lever runs; an
    audit's failed reading holds it too; a guard's record carries no text above its number; confirm: false on
    a guard trusts the reading after a failed one. GUARD-06 GUARD-14 PLAUS-08 PLAUS-09 PLAUS-11 REPORT-04 CTRL-08"""
    spend = steps("echo 150; exit 1", "echo 150; exit 1", "echo nan", "echo nan",
                  "rm -f ./spend; echo 150; exit 1", counter=".n_spend")
    d = dial(workdir, "held", guarded("{name: spend, run: ./spend, above: 100}"), value="50", lower=MARK, spend=spend)
    # then: ask, so a trusted reading past the bound leaves the venture running and a failed one must not clear it
    seq_guard = steps("printf 'note line\\n150\\n'", "exit 1", "exit 1", "echo 5", counter=".n_spend")
    e = dial(workdir, "kept", guarded("{name: spend, run: ./spend, above: 100, then: ask}"), value="5",
             lower=MARK, spend=seq_guard)
    f = dial(workdir, "audited", guarded("{name: spend, run: cat spend, above: 100}").replace(
        "guards:", "audits:\n  - {name: refunds, run: ./refunds, worse: up, tolerance: 2}\nguards:"),
        value="50", lower=MARK, refunds="#!/bin/sh\necho 3\nexit 1\n")
    write(os.path.join(f, "spend"), "0\n")
    g = dial(workdir, "eager", guarded("{name: spend, run: ./spend, above: 100, confirm: false}"), value="5",
             lower=MARK, spend=steps("exit 1", "echo 150", counter=".n_spend"))
    av.start()
    for venture in (d, e, f, g):
        av.cli("add", venture)
    av.wait_for(lambda rs: any("127" in (r.get("note") or "") for _, r in of(rs, "guard.spend", "held")),
                timeout=15, what="a reading of the deleted guard script")
    recs = av.records()
    readings = [r for _, r in of(recs, "guard.spend", "held")]
    assert [r["status"] for r in readings[:5]] == ["failed", "failed", "implausible", "implausible", "failed"]
    assert readings[5]["status"] == "failed" and "127" in readings[5]["note"]
    for r in readings:
        assert r["plausible"] is False and r["value"] is None and r["note"] and r["past"] is not True
    assert not of(recs, "pause", "held") and not of(recs, "action", "held") and not of(recs, "refusal", "held")
    (ask_seq, ask), = of(recs, "ask", "held")
    assert ask["about"] == "implausible"
    status = av.cli("status").stdout
    held_line = [line for line in status.splitlines() if line.startswith("held:")][0]
    assert "implausible" in held_line and "held by guard spend" in held_line and "clears" in held_line

    write(os.path.join(d, "spend"), "#!/bin/sh\necho 5\n", 0o755)
    recs = av.wait_for(lambda rs: resolved(rs, ask_seq) and of(rs, "outcome", "held") and rs,
                       timeout=10, what="the hold cleared and lower run")
    assert resolved(recs, ask_seq)[0][0] < of(recs, "action", "held")[0][0]

    # the venture whose guard tripped (then: ask) and then failed: the failure does not clear it
    krecs = [r for _, r in of(recs, "guard.spend", "kept")]
    first = krecs[0]
    assert first["value"] == 150 and first["status"] == "trusted" and first["past"] is True
    assert "note line" not in json.dumps(first), "a guard's record carries no text above its number (GUARD-14)"
    assert not any("note line" in json.dumps(r) for _, _, r in recs if r["venture"] == "kept")
    (gask, _), = asks_about(recs, "kept", "guard")
    av.wait_for(lambda rs: [r for _, r in of(rs, "guard.spend", "kept") if r["status"] == "trusted" and r["value"] == 5],
                timeout=10, what="kept's guard back inside")
    recs = av.records()
    krecs = of(recs, "guard.spend", "kept")
    inside = [s for s, r in krecs if r["value"] == 5][0]
    (res_seq, _), = resolved(recs, gask)
    assert res_seq > inside, "only a reading back inside clears the guard"
    assert not [s for s, r in of(recs, "action", "kept") if s < res_seq]
    failed = [s for s, r in krecs if r["status"] == "failed"]
    assert len(failed) == 2
    assert asks_about(recs, "kept", "implausible"), "a failed guard reading holds the venture implausible"

    # an audit's failed reading holds the venture implausible as the metric's would
    audits = [r for _, r in of(recs, "audit.refunds", "audited")]
    assert audits and all(r["status"] == "failed" and r["value"] is None and r["note"] for r in audits)
    assert not of(recs, "action", "audited")
    assert [r["about"] for _, r in of(recs, "ask", "audited")] == ["implausible"]
    line = [x for x in av.cli("status").stdout.splitlines() if x.startswith("audited:")][0]
    assert "held by audit refunds" in line and "clears" in line

    # confirm: false on a guard acts on the reading right after a failed one: it trips at once
    (pause_seq, pause), = of(recs, "pause", "eager")
    assert [(r["status"], r["past"]) for s, r in of(recs, "guard.spend", "eager") if s < pause_seq] == \
        [("failed", None), ("trusted", True)]


def test_first_plausible_reading_back_inside_ends_the_episode(av, workdir):
    """An episode ends at the first plausible reading back inside, a reading right after a failed one
    included (the mandate has no step bound, so nothing makes it unconfirmed). GUARD-06 open point 32 PLAUS-10"""
    spend = steps("echo 150", "exit 1", "echo 5", "echo 5", counter=".n_spend")
    d = dial(workdir, "dial", guarded("{name: spend, run: ./spend, above: 100, then: ask}"), value="5",
             lower=MARK, spend=spend)
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: len(of(rs, "guard.spend")) >= 4 and rs, timeout=10, what="four guard readings")
    readings = of(recs, "guard.spend")
    (gask, _), = asks_about(recs, "dial", "guard")
    assert readings[2][1]["value"] == 5 and readings[2][1]["plausible"] is True
    (res_seq, _), = resolved(recs, gask)
    assert readings[2][0] < res_seq < readings[3][0], "the first plausible reading back inside ends the episode"


def test_a_guard_that_hangs_holds_the_venture_and_asks_once(av, workdir):
    """A guard whose command never answers is written not read, then failed when its time limit (`timeout: 1s`)
    ends it; the failed reading holds the venture implausible (a later round's not-read does not hide it), so from
    then on the controller never acts, and one ask says so. PLAUS-06 PLAUS-07 PLAUS-08 GUARD-06 RUN-16"""
    d = dial(workdir, "dial", guarded("{name: spend, run: sleep 30.201; echo 5, above: 100, then: ask, timeout: 1s}"),
             value="50", lower=MARK)
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: len([r for _, r in of(rs, "guard.spend") if r["status"] == "failed"]) >= 2 and rs,
                       timeout=15, what="two failed guard readings")
    first_failed = [s for s, r in of(recs, "guard.spend") if r["status"] == "failed"][0]
    assert not [s for s, r in of(recs, "action") if s > first_failed], "a lever ran while the guard's reading failed"
    asks = asks_about(recs, "dial", "implausible")
    assert len(asks) == 1 and "guard spend" in asks[0][1]["question"], asks
    assert "implausible: held by guard spend" in av.cli("status", "-v").stdout


def test_slow_guard_past_its_bound_still_pauses_or_asks(av, workdir):
    """A guard read apart (slower than half a second) that reads past its bound still pauses the venture
    (then: pause) or asks (then: ask), and no lever runs after that reading. GUARD-03 GUARD-04 RUN-16 RUN-18"""
    slowp = dial(workdir, "slowp", guarded("{name: slow, run: sleep 0.7; echo 150, above: 100}"), value="50", lower=MARK)
    slowa = dial(workdir, "slowa", guarded("{name: slow, run: sleep 0.7; echo 150, above: 100, then: ask}"),
                 value="50", lower=MARK)
    av.start()
    av.cli("add", slowp)
    av.cli("add", slowa)
    recs = av.wait_for(lambda rs: of(rs, "pause", "slowp") and asks_about(rs, "slowa", "guard") and rs,
                       timeout=4, what="the slow guards' pause and ask")
    for venture in ("slowp", "slowa"):
        past = [s for s, r in of(recs, "guard.slow", venture) if r["past"]]
        assert past and not [s for s, r in of(recs, "action", venture) if s > past[0]]


# ---- unwind ----------------------------------------------------------------------------

SELL = ("#!/bin/sh\ncat > stdin.json\ncp \"$AVSM_PAYLOAD\" payload.json\necho run >> sells\n"
        "n=$(cat fails 2>/dev/null || echo 0)\nif [ \"$n\" -gt 0 ]; then echo $((n-1)) > fails; exit 1; fi\n")
SELL_LEVER = "  - {name: sell, run: ./sell, cap: 3/hour, reversible: false, takes: json}\n"
UNWIND = "unwind: {action: sell, payload: {side: sell, qty: 5}}"


def test_unwind_runs_once_with_its_payload_retries_until_ok_under_cap_and_budget(av, workdir):
    """A guard's unwind runs when it trips, irreversible though the lever is (the mandate declares it), with
    the exact payload on its standard input and in $AVSM_PAYLOAD, as an action of rule unwind; a run that
    fails is run again on the next reading past the bound until ok, then not again in the episode; the
    controller's own lever stays refused; a new episode unwinds again, and the cap and the budget still
    apply. GUARD-05 GUARD-09 GUARD-10 GUARD-11 GUARD-12 open point 27 open point 28"""
    spend = steps("echo 0", "echo 150", "echo 150", "echo 150", "echo 0", "echo 150", "echo 0", "echo 150", "echo 0",
                  counter=".n_spend")
    d = dial(workdir, "dial", guarded(f"{{name: spend, run: ./spend, above: 100, then: ask, {UNWIND}}}",
                                      extra_levers=SELL_LEVER), value="50", lower=MARK, spend=spend, sell=SELL)
    write(os.path.join(d, "fails"), "1\n")
    budget_lever = ("  - {name: sell, run: ./sell, cap: 10/hour, reversible: false, takes: json, "
                    "budget: {field: qty, max: 8, per: 1d}}\n")
    b = dial(workdir, "budgeted", guarded(f"{{name: spend, run: ./spend, above: 100, then: ask, {UNWIND}}}",
                                          extra_levers=budget_lever), value="5", lower=MARK, sell=SELL,
             spend=values(150, 0, 150, 0, counter=".n_spend"))
    av.start()
    av.cli("add", d)
    av.cli("add", b)
    recs = av.wait_for(lambda rs: len(of(rs, "guard.spend", "dial")) >= 10 and rs, timeout=20, what="10 guard readings")
    guards = of(recs, "guard.spend", "dial")
    assert [r["past"] for _, r in guards[:9]] == [False, True, True, True, False, True, False, True, False]
    assert all(r["status"] == "trusted" for _, r in guards)
    # episodes: readings 1-3, 5 and 7 (0-based) are past the bound
    bounds = [guards[i][0] for i in (1, 4, 5, 6, 7, 8)]
    sells = [(s, r) for s, r in of(recs, "action", "dial") if r["lever"] == "sell"]
    outcomes = {r["action"]: r for _, r in of(recs, "outcome")}
    ep1 = [(s, r) for s, r in sells if bounds[0] <= s < bounds[1]]
    ep2 = [(s, r) for s, r in sells if bounds[2] <= s < bounds[3]]
    ep3 = [(s, r) for s, r in sells if bounds[4] <= s < bounds[5]]
    assert len(sells) == len(ep1) + len(ep2) + len(ep3)
    assert len(ep1) == 2 and outcomes[ep1[0][0]]["ok"] is False and outcomes[ep1[1][0]]["ok"] is True
    assert len(ep2) == 1 and outcomes[ep2[0][0]]["ok"] is True
    assert not ep3, "the cap (3/hour) holds an unwind too"
    cap_refusals = [r for s, r in of(recs, "refusal", "dial") if r["lever"] == "sell" and bounds[4] <= s]
    assert cap_refusals and all("cap" in r["why"] for r in cap_refusals)
    for s, r in sells:
        assert r["proof"]["rule"] == "unwind" and r["payload"] == {"side": "sell", "qty": 5}
        assert r.get("guard") == "spend"
        assert any(p in dict(guards) for p in r["proof"]["premises"]), "the tripped guard reading is a premise"
    with open(os.path.join(d, "stdin.json")) as fh:
        assert json.load(fh) == {"side": "sell", "qty": 5}
    with open(os.path.join(d, "payload.json")) as fh:
        assert json.load(fh) == {"side": "sell", "qty": 5}
    lowers = [s for s, r in of(recs, "action", "dial") if r["lever"] == "lower"]
    for start, end in ((bounds[0], bounds[1]), (bounds[2], bounds[3]), (bounds[4], bounds[5])):
        assert not [s for s in lowers if start <= s < end], "the controller's lever runs while the guard is past"
    assert [s for s in lowers if bounds[1] < s < bounds[2]] and [s for s in lowers if s > bounds[5]]
    lower_refusals = [r for s, r in of(recs, "refusal", "dial") if r["lever"] == "lower"]
    assert len(lower_refusals) >= 5 and all("spend" in r["why"] for r in lower_refusals)
    why = av.cli("why", str(ep2[0][0]))
    assert why.returncode == 0 and "re-checks: yes" in why.stdout

    brecs = av.wait_for(lambda rs: len(of(rs, "guard.spend", "budgeted")) >= 4 and rs, timeout=5, what="budgeted")
    (first, _), (second, _) = [(s, r) for s, r in of(brecs, "guard.spend", "budgeted") if r["past"]][:2]
    bsells = [s for s, r in of(brecs, "action", "budgeted") if r["lever"] == "sell"]
    assert len(bsells) == 1 and first < bsells[0] < second
    refused = [r for s, r in of(brecs, "refusal", "budgeted") if r["lever"] == "sell" and s > second]
    assert refused and "budget" in refused[0]["why"]


def test_while_past_the_unwinds_lever_runs_with_no_other_payload(av, workdir):
    """While the guard is past its bound its unwind ran with the declared payload; the same lever with any
    other payload, proposed by a person, is refused (65, a refusal naming the guard) and never runs.
    GUARD-13 GUARD-10"""
    d = dial(workdir, "dial", guarded(f"{{name: spend, run: ./spend, above: 100, then: ask, {UNWIND}}}",
                                      extra_levers=SELL_LEVER), value="5", lower=MARK, sell=SELL,
             spend="#!/bin/sh\necho 150\n")
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: [s for s, r in of(rs, "outcome") if r["lever"] == "sell"] and rs, timeout=10,
                       what="the unwind's outcome")
    before = recs[-1][0]
    for payload in ('{"side": "sell", "qty": 6}', '{"side": "buy", "qty": 5}', '{"side": "sell", "qty": 5, "now": true}'):
        run = av.cli("propose", "dial", "sell", "--payload", "-", input=payload)
        assert run.returncode == 65 and "spend" in run.stderr, (payload, run)
    new = [r for _, _, r in av.records(before)]
    refusals = [r for r in new if r["kind"] == "refusal" and r["lever"] == "sell"]
    assert len(refusals) == 3 and all("guard spend" in r["why"] for r in refusals), refusals
    assert not [r for r in new if r["kind"] == "action" and r["lever"] == "sell"]
    with open(os.path.join(d, "sells")) as fh:
        assert fh.read() == "run\n", "sell ran once: the declared unwind"


def test_unwind_runs_under_the_levers_check(av, workdir):
    """An unwind runs under its lever's check: the check gets the payload on its standard input, and its
    non-zero exit refuses the run, so the lever never runs. GUARD-12 open point 27"""
    lever = "  - {name: sell, run: ./sell, cap: 10/hour, reversible: false, takes: json, check: ./check}\n"
    d = dial(workdir, "dial", guarded(f"{{name: spend, run: ./spend, above: 100, then: ask, {UNWIND}}}",
                                      extra_levers=lever), value="5", lower=MARK, sell=SELL,
             spend="#!/bin/sh\necho 150\n", check="#!/bin/sh\ncat > check.json\nexit 1\n")
    av.start()
    av.cli("add", d)
    av.wait_for(lambda rs: len(of(rs, "guard.spend")) >= 3, timeout=10, what="three guard readings")
    time.sleep(0.5)
    assert not os.path.exists(os.path.join(d, "sells")), "the unwind ran though its check refused it"
    with open(os.path.join(d, "check.json")) as fh:
        given = fh.read()
    assert '"qty": 5' in given or '"qty":5' in given, "the check is given the payload"
    assert not [r for _, r in of(av.records(), "outcome") if r["lever"] == "sell"]


def test_unwind_of_a_pausing_guard_runs_once_and_is_not_cut_off(bindir, home, workdir):
    """With then: pause (the default), the guard's declared unwind still runs once when it trips, with its
    exact payload, and the pause does not cut it off; nothing else runs while paused.
    GUARD-03 GUARD-10 PAUSE-01 open point 30"""
    spend = steps("echo 0", "echo 150", counter=".n_spend")
    d = dial(workdir, "dial", guarded(f"{{name: spend, run: ./spend, above: 100, {UNWIND}}}", extra_levers=SELL_LEVER),
             value="5", lower=MARK, spend=spend, sell="#!/bin/sh\nsleep 0.3\n" + SELL[len("#!/bin/sh\n"):])
    a = Avsm(bindir, home)
    a.start()
    try:
        a.cli("add", d)
        recs = a.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=10, what="the unwind's outcome")
        time.sleep(1.5)
        recs = a.records()
        (pause_seq, pause), = of(recs, "pause")
        assert pause["claim"] == "measured"
        (action_seq, action), = of(recs, "action")
        assert action["lever"] == "sell" and action["proof"]["rule"] == "unwind"
        assert action["payload"] == {"side": "sell", "qty": 5}
        (_, outcome), = of(recs, "outcome")
        assert outcome["ok"] is True, outcome["summary"]
        with open(os.path.join(d, "stdin.json")) as fh:
            assert json.load(fh) == {"side": "sell", "qty": 5}
    finally:
        assert a.stop()[0] == 0
    check_ledger_safety(home)


# ---- slow readings ------------------------------------------------------------------------

def test_slow_guard_is_written_not_read_and_the_round_goes_on(av, workdir):
    """A guard slower than half a second: the report is written and the round settles within about half a
    second with guard.NAME "not read", the controller acts, the guard's reading is written when done, and
    the daemon answers meanwhile. RUN-16 RUN-17 RUN-18"""
    mandate = guarded("{name: slow, run: sleep 2.017; echo 5, above: 100}").replace("cadence: 1s", "cadence: 3s")
    d = dial(workdir, "dial", mandate, value="50", lower=TRUE)
    av.start()
    av.cli("add", d)
    t_report = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        recs = av.records()
        if t_report is None and of(recs, "report"):
            t_report = time.monotonic()
        if of(recs, "guard.slow"):
            t_unread = time.monotonic()
            break
        time.sleep(0.02)
    else:
        raise AssertionError("no guard record")
    assert t_unread - t_report < 1.0
    assert processes_with("2.017")
    t0 = time.monotonic()
    assert av.cli("status").returncode == 0 and time.monotonic() - t0 < 1.5
    recs = av.wait_for(lambda rs: len(of(rs, "guard.slow")) >= 2 and rs, timeout=5, what="the slow guard's reading")
    (report_seq, _), = of(recs, "report")[:1]
    (unread_seq, unread), (read_seq, read) = of(recs, "guard.slow")[:2]
    assert unread["status"] == "not read" and unread["value"] is None
    assert read["status"] == "trusted" and read["value"] == 5 and read["past"] is False
    action_seq = of(recs, "action")[0][0]
    assert report_seq < unread_seq < action_seq < read_seq


# ---- ventures that need no one: they share one daemon, started once for the module ----------------
# Each of these ventures steps through its inputs by itself, so they all run side by side from the start
# and each test below only reads the ledger for its own ventures.

DRAWDOWN = """purpose: Keep equity.
metric: equity
controller: {{kind: threshold, above: 100000, action: lower}}
cadence: 1s
permitted:
  - {{name: lower, run: ./lower, cap: 60/hour, reversible: true}}
guards:
  - {{name: dd, drawdown: 15%, of: equity}}
{extra}"""

AUDITED = """purpose: Sell more without refunds.
metric: {metric}
controller: {{kind: threshold, above: 100000, action: lower}}
cadence: 1s
permitted:
  - {{name: lower, run: ./lower, cap: 60/hour, reversible: true}}
audits:
  - {audit}
"""

NOTE_LINES = [f"refund order {i:04d} for a customer who wrote at length about it" for i in range(50)]
NOTE = "\n".join(NOTE_LINES)

LONG = "a" * 290 + "@example.com"
EDGE = "e" * 242 + "@example.com"          # 254 characters: the longest kept
OVER = "o" * 243 + "@example.com"          # 255 characters
MANY = [f"u{i}@example.com" for i in range(60)]
WAITING = ["alice@example.com", "not an address", "bob@x.org", "<mallory@evil>", "a,b@c", LONG, EDGE, OVER,
           "semi;colon@x.org", "co:lon@x.org"] + MANY + ["3"]

READINGS = """purpose: Answer customers.
metric: dial
controller: {kind: threshold, above: 100000, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: true}
audits:
  - {name: customers, run: ./customers, worse: up, better: down}
readings:
  - {name: waiting, run: ./waiting, lines: address}
  - {name: named, run: ./waiting, lines: address, audit: customers}
  - {name: broken, run: ./broken, lines: address}
"""

BAND = """purpose: Keep the room comfortable.
metric: temp
controller: {{kind: band, low: 19, high: 24, below: heat, above: cool{extra}}}
cadence: 1s
permitted:
  - {{name: heat, run: ./heat, cap: 600/hour, reversible: true}}
  - {{name: cool, run: ./cool, cap: 600/hour, reversible: true}}
"""

PLAUSIBLE = """purpose: Act on plausible numbers only.
metric: level
controller: {{kind: threshold, above: {above}, action: lower}}
cadence: 1s
permitted:
  - {{name: lower, run: ./lower, cap: 600/hour, reversible: true}}
{extra}"""

HANG = f"30.{os.getpid()}"          # a report that never exits, told apart from another run's

BAD = {  # venture: (report script body, expected value or None for a failed/implausible report)
    "colon": ("echo 'count: 5'", None),
    "nan": ("echo nan", None),
    "inf": ("echo inf", None),
    "huge": ("echo 1e309", None),
    "blank": ("echo 5; echo", 5),
    "flood": ("head -c 10000000 /dev/zero | tr '\\0' x; echo; echo 5", 5),
    "binary": ("printf '\\000\\377\\376\\n'", None),
    "comma": ("echo 1,000", None),
    "nonl": ("printf 7", 7),
    "hang": (f"sleep {HANG}", None),
    "empty": ("true", None),
    "exit3": ("echo 5; exit 3", None),
    "prose": ("echo hello world; echo 5", 5),
}


def fleet_ventures(work):
    """Write every venture of the shared daemon; return their directories."""
    mk = lambda name, mandate, **files: make_venture(work, name, mandate, files)     # noqa: E731
    dirs = [
        mk("fund", DRAWDOWN.format(extra=""), report=values(100, 110, 95, 90), lower=TRUE),
        mk("spiky", DRAWDOWN.format(extra="range: [0, 1000]\n"), report=values(100, 110, 5000, 95, 90), lower=TRUE),
        mk("shop", AUDITED.format(metric="sales", audit="{name: refunds, run: ./refunds, worse: up, tolerance: 2, window: 3}"),
           report=values(*range(1, 10)), lower=TRUE,
           refunds=steps(*[f"cat notes; echo {n}" for n in (10, 10, 10, 12, 15, 15, 15, 15)], counter=".n_refunds")),
        mk("inbox", AUDITED.format(metric="unread", audit="{name: waiting, run: ./waiting, worse: up, better: down, tolerance: 2}"),
           report=values(*range(100, 90, -1)), lower=TRUE, waiting=values(*range(0, 10), counter=".n_w")),
        mk("desk", READINGS, report="#!/bin/sh\necho 1\n", lower=TRUE,
           waiting="#!/bin/sh\ncat <<'EOF'\n" + "\n".join(WAITING) + "\nEOF\n",
           customers="#!/bin/sh\nprintf 'From: bob@x.org wrote\\nu5@example.com asked\\nsomeone@else.org\\n2\\n'\n",
           broken="#!/bin/sh\necho alice@example.com\necho 3\nexit 1\n"),
        mk("room", BAND.format(extra=""), report=values(21, 17, 17, 26, 26, 21), heat=TRUE, cool=TRUE),
        mk("hall", BAND.format(extra=", deadband: 1"), report=values(17, 17, 19.5, 17, 26, 26, 17), heat=TRUE, cool=TRUE),
        mk("ranged", PLAUSIBLE.format(above=10, extra="range: [0, 100]\n"), report=values(150, 150, 150, 50), lower=TRUE),
        mk("stepped", PLAUSIBLE.format(above=40, extra="max_step: 10\n"), report=values(0, 50, 52, 53), lower=TRUE),
        mk("eager", PLAUSIBLE.format(above=40, extra="max_step: 10\nconfirm: false\n"), report=values(0, 50, 52), lower=TRUE),
        mk("flappy", PLAUSIBLE.format(above=40, extra="max_step: 10\n"), report=values(0, 8, 0, 0), lower=TRUE),
    ]
    write(os.path.join(work, "shop", "notes"), NOTE + "\n")
    for name, (body, _) in BAD.items():
        extra = "timeout: 1s\n" if name == "hang" else ""       # ended at its own time limit, not the 10 minutes
        dirs.append(mk(name, PLAUSIBLE.format(above=0, extra=extra), report=f"#!/bin/sh\n{body}\n", lower=TRUE))
    return dirs


@pytest.fixture(scope="module")
def fleet(bindir):
    """One daemon running every venture above side by side; stopped at the end of the module, when it must
    exit 0, leave no program behind and leave a ledger that passes the safety check."""
    root = tempfile.mkdtemp(prefix="avf", dir="/tmp")
    home, work = os.path.join(root, "h"), os.path.join(root, "w")
    os.makedirs(work)
    dirs = fleet_ventures(work)
    a = Avsm(bindir, home)
    try:
        a.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                added = list(pool.map(lambda d: a.cli("add", d), dirs))
            assert all(run.returncode == 0 for run in added), [run.stderr for run in added if run.returncode]
            yield a
        finally:
            code, _ = a.stop()
        assert code == 0, f"avsmd exited {code}: {a.stderr()}"
        assert not processes_with(HANG), "a report still runs after avsmd stopped"
        check_ledger_safety(home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_drawdown_guard_falls_from_the_trusted_peak(fleet):
    """A drawdown guard reads the fall from the metric's peak in percent: 100, 110, 95 (13.6%: inside),
    90 (18% from 110) trips it and pauses. An implausible spike is no peak. GUARD-08 GUARD-03 open point 32"""
    recs = fleet.wait_for(lambda rs: of(rs, "pause", "fund") and of(rs, "pause", "spiky") and rs,
                          timeout=20, what="both drawdown pauses")
    dd = [r for _, r in of(recs, "guard.dd", "fund")]
    assert [r["value"] for r in dd[:2]] == [0, 0]
    assert abs(dd[2]["value"] - 100 * 15 / 110) < 0.01 and dd[2]["past"] is False
    assert abs(dd[3]["value"] - 100 * 20 / 110) < 0.01 and dd[3]["past"] is True and dd[3]["status"] == "trusted"
    (pause_seq, pause), = of(recs, "pause", "fund")
    assert pause["claim"] == "measured" and "dd" in pause["summary"]
    assert not of(recs, "action", "fund")
    sdd = [r for _, r in of(recs, "guard.dd", "spiky")]
    assert sdd[2]["status"] in ("failed", "implausible") and sdd[2]["value"] is None
    assert abs(sdd[3]["value"] - 100 * 15 / 110) < 0.01, "the implausible 5000 is no peak"
    assert not of(recs, "action", "spiky")


def test_audit_asks_when_the_metric_improves_while_it_worsens(fleet):
    """An audit asks once when the metric improves over its window while the audit worsens by more than its
    tolerance (not by exactly it), and the ask is resolved when that stops; the default window is 5; with
    better: down a falling metric improves. The lines above an audit's number are its note, at most 2000
    characters. AUDIT-01 AUDIT-02 AUDIT-03 AUDIT-04 AUDIT-06 open point 33 open point 35"""
    recs = fleet.wait_for(lambda rs: of(rs, "ask", "shop") and of(rs, "ask", "inbox")
                          and len(read_in_time(of(rs, "audit.refunds", "shop"))) >= 9 and rs, timeout=20, what="both audits' asks")
    (ask_seq, ask), = of(recs, "ask", "shop")
    assert ask["about"] == "audit" and ask["audit"] == "refunds" and ask["claim"] == "measured"
    audits = read_in_time(of(recs, "audit.refunds", "shop"))
    before = [r["value"] for s, r in audits if s < ask_seq]
    assert before[:5] == [10, 10, 10, 12, 15] and before[5:] in ([], [15]), \
        "asks at the first worsening past tolerance (or the round after, when the 15 came late)"
    (res_seq, _), = resolved(recs, ask_seq)
    assert [r["value"] for s, r in audits if s < res_seq][-4:] == [15, 15, 15, 15]
    for _, r in audits:
        assert r["claim"] == "measured" and r["status"] == "trusted"
        assert 0 < len(r["note"]) <= 2000 and NOTE.endswith(r["note"]) and NOTE_LINES[-1] in r["note"]
        assert str(int(r["value"])) not in r["note"].splitlines()
    (iask_seq, iask), = of(recs, "ask", "inbox")
    assert iask["audit"] == "waiting"
    before = [r["value"] for s, r in read_in_time(of(recs, "audit.waiting", "inbox")) if s < iask_seq]
    assert before[:6] == [0, 1, 2, 3, 4, 5] and before[6:] in ([], [6]), \
        "the default window is 5: no ask before the sixth reading"


def test_readings_keep_only_address_fields(fleet):
    """A reading keeps only the lines above its number that are addresses (text@text, no spaces or <>,;:,
    at most 254 characters), at most 50, joined by single spaces, in an inferred reading.NAME record; with
    audit:, only addresses the audit's latest note names; a failed reading keeps no fields and none of its
    output. READING-01 READING-04 READING-05 READING-06 READING-07 READING-08 READING-09"""
    recs = fleet.wait_for(lambda rs: len(read_in_time(of(rs, "reading.named", "desk"))) >= 3
                          and len(read_in_time(of(rs, "reading.broken", "desk"))) >= 2 and rs, timeout=10, what="three rounds of readings")
    assert len(EDGE) == 254 and len(OVER) == 255
    expected = ["alice@example.com", "bob@x.org", EDGE] + MANY[:47]
    assert read_in_time(of(recs, "reading.waiting", "desk"))
    for _, r in read_in_time(of(recs, "reading.waiting", "desk")):
        assert r["claim"] == "inferred" and r["status"] == "read" and r["value"] == 3
        assert r["fields"] == " ".join(expected)
        text = json.dumps(r)
        assert "not an address" not in text and "mallory" not in text and LONG not in text and OVER not in text
    latest = read_in_time(of(recs, "reading.named", "desk"))[-1][1]
    assert latest["claim"] == "inferred" and latest["fields"] == "bob@x.org u5@example.com"
    for _, r in read_in_time(of(recs, "reading.broken", "desk")):
        assert r["claim"] == "inferred" and r["status"] == "failed"
        assert not r.get("fields") and "alice" not in json.dumps(r)
    assert not of(recs, "action", "desk")


def test_band_heats_below_cools_above_and_deadband_once_per_side(fleet):
    """A band runs below-lever under low, above-lever over high, neither in between; with deadband 1 one
    action per side per excursion, re-armed only back past the bound by the deadband.
    BAND-01 BAND-02 BAND-03 BAND-04 BAND-05 BAND-06"""
    recs = fleet.wait_for(lambda rs: len(of(rs, "report", "room")) >= 7 and len(of(rs, "report", "hall")) >= 8 and rs,
                          timeout=20, what="the band's reports")

    def acted(venture):
        """[(report value, lever)] of each action, by the report it followed."""
        reports, result = of(recs, "report", venture), []
        for s, r in of(recs, "action", venture):
            value = [rv["value"] for rs_, rv in reports if rs_ < s][-1]
            assert r["proof"]["rule"] == "band" and r["by"] == "controller"
            result.append((value, r["lever"]))
        return result

    assert acted("room") == [(17, "heat"), (17, "heat"), (26, "cool"), (26, "cool")]
    assert acted("hall") == [(17, "heat"), (26, "cool"), (17, "heat")]


def test_range_and_step_make_reports_implausible_or_unconfirmed(fleet):
    """range: 150 is implausible, kept, never acted on, one ask until a plausible report resolves it;
    max_step 10: 0, 50 (implausible), 52 (unconfirmed, past the bound yet not acted on), 53 (trusted, acts);
    confirm: false acts on the 52 at once; 0, 8, 0 under max_step 10 is a flap. PLAUS-01 PLAUS-02 PLAUS-03
    PLAUS-06 PLAUS-07 PLAUS-10 PLAUS-11 open point 10 open point 34 open point 35"""
    recs = fleet.wait_for(lambda rs: all(of(rs, "action", v) for v in ("ranged", "stepped", "eager"))
                          and len(of(rs, "report", "flappy")) >= 3 and rs, timeout=15, what="each venture's first action")
    reports = of(recs, "report", "ranged")
    assert [(r["value"], r["status"]) for _, r in reports[:4]] == [(150, "implausible")] * 3 + [(50, "trusted")]
    assert all(r["plausible"] is False and "range" in r["note"] for _, r in reports[:3])
    (ask_seq, ask), = of(recs, "ask", "ranged")
    assert ask["about"] == "implausible"
    (res_seq, _), = resolved(recs, ask_seq)
    first_action = of(recs, "action", "ranged")[0]
    assert reports[3][0] < first_action[0] and res_seq < first_action[0]
    assert first_action[1]["proof"]["premises"][1] == reports[3][0]

    reports = of(recs, "report", "stepped")
    assert [(r["value"], r["status"]) for _, r in reports[:4]] == \
        [(0, "trusted"), (50, "implausible"), (52, "unconfirmed"), (53, "trusted")]
    assert reports[2][1]["plausible"] is True
    first_action = of(recs, "action", "stepped")[0]
    assert first_action[0] > reports[3][0] and first_action[1]["proof"]["premises"][1] == reports[3][0]
    assert len(of(recs, "ask", "stepped")) == 1

    reports = of(recs, "report", "eager")
    assert [(r["value"], r["status"]) for _, r in reports[:3]] == [(0, "trusted"), (50, "implausible"), (52, "trusted")]
    first_action = of(recs, "action", "eager")[0]
    assert reports[2][0] < first_action[0] and first_action[1]["proof"]["premises"][1] == reports[2][0]

    reports = of(recs, "report", "flappy")
    assert [(r["value"], r["status"]) for _, r in reports[:3]] == [(0, "trusted"), (8, "trusted"), (0, "implausible")]
    assert "flap" in reports[2][1]["note"]


def test_bad_report_inputs_fail_with_a_note_and_never_act(fleet):
    """Each bad report (count: 5, nan, inf, 1e309, binary bytes, 1,000, one that never exits, one that prints
    nothing, one that exits 3) is a failed or implausible report with a note, and no lever runs on it though
    the threshold is 0; 5 followed by an empty line, 7 without a newline, text then 5 (the text dropped) and
    10 MB of output ending in 5 are valid numbers; the daemon's memory stays bounded; a report that never
    exits is ended at its time limit (`timeout: 1s`) and none outlives avsmd. REPORT-02 REPORT-03 REPORT-04 REPORT-05 REPORT-06
    REPORT-07 PLAUS-04 PLAUS-06 PLAUS-07 open point 19 DESIGN (reading time limits)"""
    recs = fleet.wait_for(lambda rs: all(len(of(rs, "report", v)) >= 2 for v in BAD) and rs,
                          timeout=20, what="two reports of each venture")
    for name, (_, expected) in BAD.items():
        reports = [r for _, r in of(recs, "report", name)]
        if expected is None:
            for r in reports:
                assert r["status"] in ("failed", "implausible") and r["plausible"] is False, (name, r)
                assert r["value"] is None and r["note"], (name, r)
                assert len(r["note"]) <= 2000
            assert not of(recs, "action", name), name
            assert len(of(recs, "ask", name)) == 1 and of(recs, "ask", name)[0][1]["about"] == "implausible"
        else:
            for r in reports:
                assert r["status"] == "trusted" and r["value"] == expected, (name, r)
            assert of(recs, "action", name), name
    assert "took longer" in of(recs, "report", "hang")[0][1]["note"]
    assert "exit 3" in of(recs, "report", "exit3")[0][1]["note"]
    assert not any("hello" in json.dumps(r) for _, r in of(recs, "report", "prose")), "text before the number is dropped"
    for pid in [fleet.proc.pid] + fleet.wardens():
        assert rss_mb(pid) < 60, f"pid {pid} holds {rss_mb(pid):.0f} MB"


CHECKED = """purpose: Answer customers, checking each reply.
metric: dial
controller: {kind: threshold, above: 10, action: reply}
cadence: 1s
permitted:
  - {name: reply, run: ./reply, cap: 3/hour, reversible: true, check: ./check}
audits:
  - {name: customers, run: ./customers, worse: up, better: down}
readings:
  - {name: waiting, run: ./waiting, lines: address, audit: customers}
"""


def test_a_check_whose_payload_file_is_gone_takes_no_warden_down(av, workdir):
    """Open point 27, RUN-10: the temporary file a check reads its payload from may be gone when the
    check ends (a /tmp cleaner; here the check removes it): the lever still runs on the check's 0,
    and the warden goes on (it raised FileNotFoundError and was started again)."""
    mandate = CHECKED.split("audits:")[0]
    d = dial(workdir, "desk", mandate, value="50", reply=MARK,
             check='#!/bin/sh\nrm -f "$(readlink /proc/self/fd/0)"\nexit 0\n')
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "outcome", "desk") and rs, timeout=15, what="the reply's outcome")
    assert of(recs, "check", "desk")[0][1]["ok"] is True
    time.sleep(0.5)
    assert not of(av.records(), "restart", "self"), "the warden died"


def test_a_lever_check_reads_the_audits_latest_note_and_no_reading(av, workdir):
    """AUDIT-07 READING-11: a lever's payload check is handed, on its standard input, the venture, the lever,
    the payload and each audit's latest note (the text above its number, which no model sees), and never a
    reading: a check that wants the sender reads the audit. The note it gets is the one of the last audit
    reading before its check record."""
    customers = ("#!/bin/sh\nn=$(cat .n 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .n\n"
                 "echo \"alice@example.com wrote about order $n\"\necho 2\n")
    d = dial(workdir, "desk", CHECKED, value="50", reply=MARK, customers=customers,
             waiting="#!/bin/sh\necho bob@x.org\necho alice@example.com\necho 2\n",
             check=f"#!/bin/sh\ncat >> {workdir}/checked.json\necho >> {workdir}/checked.json\nexit 0\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "outcome", "desk") and rs, timeout=15, what="the checked reply's outcome")
    (check_seq, check), *_ = of(recs, "check", "desk")
    assert check["ok"] is True and check["lever"] == "reply"
    with open(os.path.join(workdir, "checked.json")) as fh:
        handed = json.loads(fh.readline())
    notes = [r["note"] for s, r in of(recs, "audit.customers", "desk") if s < check_seq and r["status"] == "trusted"]
    assert notes and notes[-1].startswith("alice@example.com wrote about order"), notes
    assert handed == {"venture": "desk", "lever": "reply", "payload": None, "audits": {"customers": notes[-1]}}, handed
    assert "bob@x.org" not in json.dumps(handed), "a reading reached the check"
    (action_seq, action), *_ = of(recs, "action", "desk")
    assert check_seq in action["proof"]["premises"], action["proof"]
