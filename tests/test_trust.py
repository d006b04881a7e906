"""Growing trust, carefully: the ratchet, canary asks and the research lever, black-box against a real avsmd."""

import json
import os
import signal

from conftest import write
from test_daemon import dial, of, set_value

WIPE = """purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 10, action: wipe}
cadence: 1s
permitted:
  - {name: wipe, run: ./wipe, cap: 60/hour, reversible: false}
forbidden: [rm]
"""


def ask_for(av, lever, after=0):
    """Wait for an open ask about `lever` raised after record `after`; return its seq."""
    def found(rs):
        answered = {r.get("ask") for _, r in of(rs, "approval") + of(rs, "denial")}
        return [s for s, r in of(rs, "ask") if r.get("lever") == lever and s > after and s not in answered
                and r.get("about") == "lever"]
    return av.wait_for(found, timeout=15, what=f"an ask for {lever}")[0]


WIPE_LEVER = "#!/bin/sh\necho 0 > value\necho wiped >> wiped\n"


def approve_and_cross_again(av, d, ask):
    """Approve `ask` (wipe runs and sets the dial to 0), then push the dial past the bound again: a new
    excursion, which may ask again (one ask per excursion); return the next ask's seq."""
    assert av.cli("approve", str(ask)).returncode == 0
    av.wait_for(lambda rs: [r for s, r in of(rs, "outcome") if s > ask and r["lever"] == "wipe"], timeout=10,
                what="wipe's outcome")
    av.wait_for(lambda rs: [r for s, r in of(rs, "report") if s > ask and r["value"] == 0], timeout=10,
                what="the dial back inside")
    set_value(d, 50)
    return ask_for(av, "wipe", ask)


def test_ratchet_proposes_delegation_and_approving_it_adopts_the_change(av, workdir):
    """SELF-02, open point 41, FORECAST-01: after `ratchet` approvals of one lever, a forecast, then self asks to
    delegate it; approving that ask writes `delegated: true` into mandate.yaml and adopts it (a declared mandate record), after which the
    lever runs unasked."""
    write(os.path.join(av.home, "config.yaml"), "ratchet: 2\n")
    d = dial(workdir, "dial", WIPE, value="50", wipe=WIPE_LEVER)
    av.start()
    av.cli("add", d)
    first = ask_for(av, "wipe")
    second = approve_and_cross_again(av, d, first)
    assert av.cli("approve", str(second)).returncode == 0
    recs = av.wait_for(lambda rs: [(s, r) for s, r in of(rs, "ask") if r.get("about") == "ratchet"], timeout=10,
                       what="the ratchet ask")
    (ratchet, ask), = recs
    assert ask["lever"] == "wipe" and ask["by"] == "self" and "delegated: true" in ask["mandate"]
    # FORECAST-01: a forecast is made before the ratchet ask, which cites it (inferred: it shows, never proves)
    ahead = [(s, r) for s, r in of(av.records(), "forecast") if r.get("why") == "ratchet"]
    assert len(ahead) == 1 and ahead[0][0] < ratchet and ask["forecast"] == ahead[0][0], (ahead, ask)
    assert ahead[0][1]["claim"] == "inferred" and ahead[0][1]["lever"] == "wipe"
    assert f"#{ahead[0][0]}" in ask["question"]
    assert "delegated" not in open(os.path.join(d, "mandate.yaml")).read()
    run = av.cli("approve", str(ratchet))
    assert run.returncode == 0, run.stderr
    assert "delegated: true" in open(os.path.join(d, "mandate.yaml")).read()
    mandates = of(av.records(), "mandate")
    assert len(mandates) == 2 and mandates[-1][1]["claim"] == "declared" and mandates[-1][1]["approval_of"] == ratchet
    av.wait_for(lambda rs: len([r for s, r in of(rs, "outcome") if r["lever"] == "wipe"]) >= 2, timeout=10,
                what="the second approved wipe")
    set_value(d, 50)
    recs = av.wait_for(lambda rs: [r for s, r in of(rs, "action") if s > mandates[-1][0] and r["by"] == "controller"] and rs,
                       timeout=10, what="wipe running unasked")
    assert not [s for s, r in of(recs, "ask") if s > mandates[-1][0] and r.get("lever") == "wipe"]


def test_a_ratchet_change_never_adds_escalate_offbox(av, workdir):
    """SELF-03, ESC-09: `escalate: offbox` written into mandate.yaml but never adopted with `avsm add` rides in
    the ratchet's proposed change; approving that change is refused (65, saying only a person's edit may add
    it), and nothing is adopted or written: mandate.yaml stays as the person left it, the lever still asks."""
    write(os.path.join(av.home, "config.yaml"), "ratchet: 2\n")
    d = dial(workdir, "dial", WIPE, value="50", wipe=WIPE_LEVER)
    av.start()
    av.cli("add", d)
    first = ask_for(av, "wipe")
    edited = WIPE + "escalate: offbox\n"
    write(os.path.join(d, "mandate.yaml"), edited)
    second = approve_and_cross_again(av, d, first)
    assert av.cli("approve", str(second)).returncode == 0
    (ratchet, ask), = av.wait_for(lambda rs: [(s, r) for s, r in of(rs, "ask") if r.get("about") == "ratchet"],
                                  timeout=10, what="the ratchet ask")
    assert "escalate: offbox" in ask["mandate"] and "delegated: true" in ask["mandate"]
    run = av.cli("approve", str(ratchet))
    assert run.returncode == 65 and "escalate: offbox" in run.stderr and "only you" in run.stderr, run
    assert open(os.path.join(d, "mandate.yaml")).read() == edited
    recs = av.records()
    assert len(of(recs, "mandate")) == 1
    assert not [r for _, r in of(recs, "approval") if r.get("ask") == ratchet]
    wiped = av.wait_for(lambda rs: [s for s, r in of(rs, "outcome") if r["lever"] == "wipe" and s > second],
                        timeout=10, what="the second approved wipe")[0]
    av.wait_for(lambda rs: [r for s, r in of(rs, "report") if s > wiped and r["value"] == 0], timeout=10,
                what="the dial back inside")
    set_value(d, 50)
    ask_for(av, "wipe", second)


def test_a_mandate_file_broken_since_its_adoption_gives_a_ratchet_ask_to_make_by_hand(av, workdir):
    """SELF-02, open point 41: mandate.yaml edited since `avsm add` into no mandate (its permitted:
    gone): the ratchet ask carries no change and says why, for the person to make by hand; the
    warden goes on (no restart) and the adopted mandate still rules."""
    write(os.path.join(av.home, "config.yaml"), "ratchet: 2\n")
    d = dial(workdir, "dial", WIPE, value="50", wipe=WIPE_LEVER)
    av.start()
    av.cli("add", d)
    first = ask_for(av, "wipe")
    write(os.path.join(d, "mandate.yaml"), WIPE.replace(WIPE[WIPE.index("permitted:"):], ""))
    second = approve_and_cross_again(av, d, first)
    assert av.cli("approve", str(second)).returncode == 0
    (ratchet, ask), = av.wait_for(lambda rs: [(s, r) for s, r in of(rs, "ask") if r.get("about") == "ratchet"],
                                  timeout=10, what="the ratchet ask")
    assert ask.get("mandate") is None and "edit it by hand" in ask["question"], ask
    assert "'wipe' is not a permitted lever" in ask["question"], ask
    recs = av.records()
    assert not of(recs, "self.restart") and len(of(recs, "mandate")) == 1
    asks = av.cli("asks")
    assert asks.returncode == 0 and f"#{ratchet}" in asks.stdout, asks


def test_canary_ask_checks_that_asks_are_read(av, workdir):
    """SELF-04, SELF-05, open point 8: with canary_asks: {every: 1}, a canary ask follows the first ask; it is listed
    like any other; approving it runs nothing and records that it was approved unread; denying the next passes."""
    write(os.path.join(av.home, "config.yaml"), "canary_asks: {every: 1}\n")
    d = dial(workdir, "dial", WIPE, value="50", wipe="#!/bin/sh\ntrue\n")
    av.start()
    av.cli("add", d)
    recs = av.wait_for(lambda rs: [(s, r) for s, r in of(rs, "ask") if r.get("canary")] and rs, timeout=15,
                       what="a canary ask")
    canary = [s for s, r in of(recs, "ask") if r.get("canary")][0]
    listed = av.cli("asks").stdout
    assert f"#{canary}  dial  rm  " in listed and "canary" not in listed
    run = av.cli("approve", str(canary))
    assert run.returncode == 0 and "canary" in run.stdout
    recs = av.records()
    (_, record), = [(s, r) for s, r in of(recs, "canary")]
    assert record["passed"] is False and record["ask"] == canary
    assert not [r for _, r in of(recs, "action") if r["lever"] == "rm"]
    assert av.cli("status").returncode == 0


def test_canary_asks_off_by_default(av, workdir):
    """SELF-05: without canary_asks, no canary ask is ever written."""
    d = dial(workdir, "dial", WIPE, value="50", wipe="#!/bin/sh\ntrue\n")
    av.start()
    av.cli("add", d)
    ask_for(av, "wipe")
    assert not [r for _, r in of(av.records(), "ask") if r.get("canary")]


RESEARCH = """purpose: Learn about the dial.
metric: dial
controller: {kind: model}
cadence: 1m
permitted:
  - {name: research, cap: 5/hour, reversible: true}
"""


def test_research_keeps_inferred_facts_with_their_source(av, workdir):
    """LEVER-17..19, CONFIG-08, open point 46: the question goes to the config's research command as {"venture",
    "question"}; each {"fact", "source"} line comes back as an inferred fact record; no provider is built in."""
    seen = os.path.join(workdir, "asked.json")
    command = write(os.path.join(workdir, "researcher"),
                    f"#!/bin/sh\ncat > {seen}\n"
                    "echo '{\"fact\": \"dials drift up\", \"source\": \"https://example.org/dials\"}'\n"
                    "echo 'not json'\n"
                    "echo '{\"fact\": \"resets help\", \"source\": \"manual p. 3\"}'\n", 0o755)
    write(os.path.join(av.home, "config.yaml"), f"research: {command}\n")
    d = dial(workdir, "dial", RESEARCH)
    av.start()
    av.cli("add", d)
    run = av.cli("propose", "dial", "research", "--payload", "-", input="why does the dial drift?")
    assert run.returncode == 0, run.stderr
    recs = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=10, what="research's outcome")
    facts = [r for _, r in of(recs, "fact")]
    assert [(f["fact"], f["source"], f["claim"]) for f in facts] == [
        ("dials drift up", "https://example.org/dials", "inferred"), ("resets help", "manual p. 3", "inferred")]
    assert json.load(open(seen)) == {"venture": "dial", "question": "why does the dial drift?"}
    assert of(recs, "outcome")[0][1]["ok"] is True


def test_a_research_command_others_could_change_never_starts_and_leaves_no_question(av, workdir):
    """LEVER-17, issue 32 item 6: a research: command another user could change is not started: its
    action's outcome fails with the path and the fix, and the question written for it is removed
    from the temporary directory, not left there."""
    tmp = os.path.join(workdir, "tmp")
    os.mkdir(tmp, 0o700)
    av.env["TMPDIR"] = tmp
    command = write(os.path.join(workdir, "researcher"), "#!/bin/sh\necho ran > ran\n", 0o757)
    write(os.path.join(av.home, "config.yaml"), f"research: {command}\n")
    d = dial(workdir, "dial", RESEARCH)
    av.start()
    assert av.cli("add", d).returncode == 0
    run = av.cli("propose", "dial", "research", "--payload", "-", input="why does it drift?")
    assert run.returncode == 0, run.stderr
    recs = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=10, what="research's outcome")
    outcome = of(recs, "outcome")[0][1]
    assert (outcome["ok"], outcome["status"]) == (False, "not started"), outcome
    assert f"chmod go-w {command}" in outcome["note"], outcome
    assert not os.path.exists(os.path.join(d, "ran"))
    assert not [n for n in os.listdir(tmp) if n.startswith("avsm-payload-")], os.listdir(tmp)


def test_an_edit_to_the_config_takes_effect_only_at_a_restart(av, workdir):
    """CONFIG-02: avsmd reads config.yaml once, at its start. With `research:` edited to another command while
    avsmd runs, a research run still goes to the command it started with (and `avsm add` says a restart
    applies the edit); once avsmd is restarted, the next goes to the new one."""
    commands = {}
    for name in ("first", "second"):
        commands[name] = write(os.path.join(workdir, name), f"#!/bin/sh\ncat >> {workdir}/{name}.asked\n"
                               f"echo '{{\"fact\": \"from {name}\", \"source\": \"{name}\"}}'\n", 0o755)
    write(os.path.join(av.home, "config.yaml"), f"research: {commands['first']}\n")
    d = dial(workdir, "dial", RESEARCH)
    av.start()
    av.cli("add", d)

    def research(question, runs):
        assert av.cli("propose", "dial", "research", "--payload", "-", input=question).returncode == 0
        recs = av.wait_for(lambda rs: len(of(rs, "outcome")) >= runs and rs, timeout=10, what="research's outcome")
        return [r["fact"] for _, r in of(recs, "fact")]
    assert research("one?", 1) == ["from first"]
    write(os.path.join(av.home, "config.yaml"), f"research: {commands['second']}\n")
    assert research("two?", 2) == ["from first", "from first"], "the edit took effect before a restart"
    assert "restart avsmd to apply it" in av.cli("add", d).stderr
    assert not os.path.exists(os.path.join(workdir, "second.asked"))
    code, _ = av.stop()
    assert code == 0
    av.start()
    assert research("three?", 3) == ["from first", "from first", "from second"]


def test_research_without_a_command_fails_plainly(av, workdir):
    """LEVER-19: with no research: command in the config the run fails and says so; nothing is made up."""
    d = dial(workdir, "dial", RESEARCH)
    av.start()
    av.cli("add", d)
    assert av.cli("propose", "dial", "research", "--payload", "-", input="anything?").returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=10, what="research's outcome")
    outcome = of(recs, "outcome")[0][1]
    assert outcome["ok"] is False and "research" in outcome["summary"] and not of(recs, "fact")


def test_the_canary_count_is_folded_from_the_ledger_and_survives_a_warden_restart(av, workdir):
    """SELF-04, issue 25 item 2: canary_asks counts the asks the ledger holds, not the asks one warden has seen:
    with {every: 2}, one ask, then the warden killed (avsmd starts another), then a second ask: the canary
    follows the second ask. Before, the new warden counted from 0 and no canary came."""
    write(os.path.join(av.home, "config.yaml"), "canary_asks: {every: 2}\n")
    d = dial(workdir, "dial", WIPE, value="50", wipe=WIPE_LEVER)
    av.start()
    av.cli("add", d)
    first = ask_for(av, "wipe")
    (warden,) = av.wardens()
    os.kill(warden, 9)
    av.wait_for(lambda rs: [r for s, r in of(rs, "restart") if s > first] and [p for p in av.wardens() if p != warden],
                timeout=15, what="the warden started again")
    assert not [r for _, r in of(av.records(), "ask") if r.get("canary")], "one ask is not yet every 2"
    second = approve_and_cross_again(av, d, first)
    recs = av.wait_for(lambda rs: [s for s, r in of(rs, "ask") if r.get("canary")] and rs, timeout=10,
                       what="the canary after the second ask")
    (canary,) = [s for s, r in of(recs, "ask") if r.get("canary")]
    assert canary > second


SLOW_WORLD = """#!/bin/sh
if [ ! -e fast ]; then sleep 5; fi
echo '{"state": null, "metric": 5, "guards": {}}'
"""


def test_a_ratchet_forecast_cut_off_by_a_dead_warden_is_made_again(av, workdir):
    """Issue 36 item 1, SELF-02, FORECAST-01: the forecast a ratchet ask waits on starts with a `begun`
    record; a warden killed while it runs (avsmd ends its group) is restarted, and the kernel, from the
    folded ledger, makes the forecast again; once it is in, the ratchet ask cites it."""
    write(os.path.join(av.home, "config.yaml"), "ratchet: 1\nforecast: {days: 1, seeds: 2}\n")
    d = dial(workdir, "dial", WIPE + "world: ./world\n", value="50", wipe=WIPE_LEVER, world=SLOW_WORLD)
    av.start()
    av.cli("add", d)
    first = ask_for(av, "wipe")
    assert av.cli("approve", str(first)).returncode == 0
    (begun, record), = av.wait_for(lambda rs: of(rs, "begun"), timeout=15, what="the forecast's start")
    assert record["what"] == "forecast" and record["lever"] == "wipe"
    os.kill(av.wardens()[0], signal.SIGKILL)
    again = av.wait_for(lambda rs: [s for s, r in of(rs, "begun") if s > begun], timeout=30,
                        what="the forecast started again")
    assert not [r for s, r in of(av.records(), "ask") if r.get("about") == "ratchet"], "it waits on it"
    write(os.path.join(d, "fast"), "")
    (ratchet, ask), = av.wait_for(lambda rs: [(s, r) for s, r in of(rs, "ask") if r.get("about") == "ratchet"],
                                  timeout=60, what="the ratchet ask")
    ahead = [s for s, r in of(av.records(), "forecast") if r.get("why") == "ratchet"]
    assert len(ahead) == 1 and again[0] < ahead[0] < ratchet and ask["forecast"] == ahead[0], (ahead, ask)
