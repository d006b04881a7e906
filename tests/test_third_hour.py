"""Issue 37 items 2, 6, 7, 9 and 10: what a guard's pause and a resume say, `avsm try` interrupted at any
moment, the small untruths (why's hint, status with avsmd stopped), the OpenAI backends' effort and content
filter, and one check of a lever at a time."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import avsm
from conftest import ROOT, children, cmdline, make_venture, write
from test_daemon import LOWER, dial, of, threshold
from test_kernel_rules import CHECKED, Ledger, V, kinds, report
from test_notify import notify_on, of_kind, wait_told

AVSM_PY = os.path.join(ROOT, "avsm.py")

GUARDED = """purpose: Keep the dial low within a budget.
metric: dial
controller: {kind: threshold, above: 10, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: true}
guards:
  - {name: spend, run: ./spend, above: 100, then: pause}
"""


# ---- item 2: a guard's pause, and the resume after its cause is cleared ----------------------

def test_a_guard_pause_gives_its_way_out_and_resume_claims_only_the_last_reading(av, workdir):
    """Issue 37 item 2, PAUSE-03, GUARD-03: a guard's pause is told (notify's `answer:` line and
    $AVSM_EVENT) and summarized with the way out status gives: clear the cause, then resume. A resume
    after the cause was cleared says what is known (its last reading was past its bound; if it still is
    at its next reading, it pauses again), not that it still reads past it; the next reading is inside
    and the venture runs on."""
    log = notify_on(av, workdir)
    d = make_venture(workdir, "dial", GUARDED, {"report": "#!/bin/sh\necho 5\n", "lower": LOWER,
                                                "spend": "#!/bin/sh\ncat spent\n"})
    write(os.path.join(d, "spent"), "150\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    (told,) = wait_told(log, of_kind("pause"), what="the guard's pause")
    way_out = "clear what puts guard spend past its bound, then "
    event = told["event"]
    assert event["answer"].startswith(way_out) and event["answer"].endswith(" resume dial"), event
    assert f"\nanswer: {event['answer']}\n" in told["stdin"], told["stdin"]
    summary = av.cli("summary").stdout
    assert re.search(r"needs a person: dial is paused \(#\d+, by guard spend\) -> " + re.escape(way_out)
                     + r"\S*avsm\S* (--home \S+ )?resume dial$", summary, re.M), summary

    write(os.path.join(d, "spent"), "0\n")          # the cause cleared, as examples/guarded's ./clear does
    resumed = av.cli("resume", "dial")
    (pause_seq, pause), = of(av.records(), "pause")
    assert resumed.returncode == 0 and "still reads" not in resumed.stdout, resumed
    assert (f"guard spend: its last reading was past its bound (since #{pause['episode']}); if it still "
            "is at its next reading, it pauses dial again") in resumed.stdout, resumed.stdout
    inside = av.wait_for(lambda rs: [r for s, r in of(rs, "guard.spend") if s > pause_seq
                                     and r["value"] == 0], timeout=15, what="a reading back inside")
    assert inside and len(of(av.records(), "pause")) == 1
    av.wait_for(lambda rs: [s for s, _ in of(rs, "report") if s > pause_seq], timeout=15,
                what="a report after the resume")
    assert "dial: running" in av.cli("status").stdout


# ---- item 6: avsm try ---------------------------------------------------------------------------

def avsmd_home_of(pid, timeout=20):
    """The --home of the avsmd child `pid` started, as soon as it is started (not yet serving)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in children(pid):
            args = cmdline(child).split(b"\0")
            if b"avsmd" in args and b"--home" in args:
                return args[args.index(b"--home") + 1].decode()
        time.sleep(0.002)
    raise AssertionError(f"try started no avsmd within {timeout} s")


def test_try_interrupted_before_avsmd_serves_names_its_home_and_exits_130(workdir):
    """Issue 37 item 6, CLI-10, EXIT-01: Ctrl-C as soon as try has started its avsmd, before that serves,
    ends as a later one does: avsmd stopped, the temporary home named (nothing written there yet),
    exit 130, no traceback. (That try says an irreversible lever asks a person first is the next test's,
    run end to end; that a reversible one runs is test_newcomer's.)"""
    d = make_venture(workdir, "dial", threshold(), {"report": "#!/bin/sh\necho 5\n", "lower": LOWER})
    env = dict(os.environ)
    env.pop("AVSMD_HOME", None)
    p = subprocess.Popen([sys.executable, AVSM_PY, "try", d], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    home = None
    try:
        home = avsmd_home_of(p.pid)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 130, (p.returncode, err)
        assert "Traceback" not in err and f"the home is kept at {home}\n" in err, err
        assert not os.path.exists(os.path.join(home, "sock")) or not children(p.pid)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if home and os.path.dirname(home) == "/tmp" and os.path.basename(home).startswith("av"):
            subprocess.run(["rm", "-rf", home])


def test_try_of_an_irreversible_lever_says_a_person_is_asked_first(workdir):
    """Issue 37 item 6, CLI-10: `avsm try examples/purge` opens saying purge asks a person before it
    runs, not that it runs when the disk passes 90."""
    env = dict(os.environ)
    env.pop("AVSMD_HOME", None)
    home = os.path.join(workdir, "h")
    p = subprocess.Popen([sys.executable, AVSM_PY, "--home", home, "try", os.path.join(ROOT, "examples", "purge")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        lines = []
        for line in p.stdout:
            lines.append(line)
            if line.startswith("# following"):
                break
        os.killpg(p.pid, signal.SIGINT)
        p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    said = [line for line in lines if line.startswith("# purge acts when")]
    assert said and "used > 90 (then a person is asked before purge runs: it is irreversible)" in said[0], lines
    assert p.returncode == 130


# ---- item 7: small untruths ------------------------------------------------------------------

def test_why_of_an_open_ask_names_both_commands_whole(av, workdir):
    """Issue 37 item 7, CLI-11, open point 3: `avsm why N` of an open ask says how to approve it and how
    to deny it, each as a whole command."""
    d = dial(workdir, "dial", threshold(reversible="false"), value="50", lower=LOWER)
    av.start()
    assert av.cli("add", d).returncode == 0
    (ask_seq, _), = av.wait_for(lambda rs: of(rs, "ask"), timeout=15, what="an ask")
    why = av.cli("why", str(ask_seq)).stdout
    hint = re.search(rf"not answered yet: (.+) approve {ask_seq} or (.+) deny {ask_seq}$", why, re.M)
    assert hint and hint.group(1) == hint.group(2) and "avsm" in hint.group(1), why


def test_status_with_avsmd_stopped_says_what_the_ledger_last_knew(av, workdir):
    """Issue 37 item 7, CLI-07, EXIT-05: with avsmd stopped, a venture the ledger last knew running is
    `was running`, in the one-line view and in its detail; nothing claims it runs; exit 69."""
    d = dial(workdir, "dial", threshold(), value="5", lower=LOWER)
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: of(rs, "report"), timeout=15, what="a report")
    assert av.cli("status").stdout.startswith("dial: running ")
    assert av.stop()[0] == 0
    r = av.cli("status")
    assert r.returncode == 69 and r.stdout.splitlines()[1].startswith("dial: was running  "), r.stdout
    detail = av.cli("status", "dial")
    assert detail.returncode == 69 and "\ndial: was running\n" in detail.stdout, detail.stdout
    assert not re.search(r"^dial: running", r.stdout + detail.stdout, re.M)


# ---- item 9: the OpenAI backends ----------------------------------------------------------------

def test_openai_effort_takes_what_the_api_takes(av):
    """Issue 37 item 9, MODEL-07: an openai backend takes every value of the official SDK's
    ReasoningEffort (openai 3.60: none, minimal, low, medium, high, xhigh, max), max among them, for both
    APIs; avsmd -t holds and -T shows it."""
    assert avsm.EFFORTS["openai"] == ("none", "minimal", "low", "medium", "high", "xhigh", "max")
    write(os.path.join(av.home, "config.yaml"),
          "backends:\n  o: {kind: openai, url: http://127.0.0.1:9/v1/chat/completions, model: m, effort: max}\n"
          "  r: {kind: openai, api: responses, url: http://127.0.0.1:9/v1/responses, model: m, effort: max}\n")
    t = av.daemon_cmd("-t")
    assert t.returncode == 0, t.stderr
    shown = av.daemon_cmd("-T").stdout
    assert shown.count('effort: "max"') == 2, shown
    body = avsm.backend_request(avsm.parse_config(open(os.path.join(av.home, "config.yaml")).read())
                                ["backends"]["r"], "s", "u", None)[2]
    assert body["reasoning"] == {"effort": "max"}


def test_a_content_filter_is_the_model_declining_in_both_apis():
    """Issue 37 item 9, MODEL-07: a Responses `incomplete` for `content_filter` is the model declining, as
    Chat Completions' finish_reason content_filter is: one word for one thing; max_output_tokens stays a
    reply cut off at the token limit."""
    chat = avsm.read_openai({"choices": [{"index": 0, "message": {"role": "assistant", "content": None},
                                          "finish_reason": "content_filter"}]}, None)
    responses = avsm.read_responses({"object": "response", "status": "incomplete", "output": [],
                                     "incomplete_details": {"reason": "content_filter"}}, None)
    for said in (chat, responses):
        assert said["why"].startswith("the model declined: ") and "text" not in said, said
        assert said["declined"] == {"text": None, "category": None}
    assert responses["why"] == "the model declined: no reason given (incomplete_details.reason content_filter)"
    cut = avsm.read_responses({"object": "response", "status": "incomplete", "output": [],
                               "incomplete_details": {"reason": "max_output_tokens"}}, 300)
    assert cut["why"] == "the reply was cut off at the token limit (max_output_tokens 300)"


# ---- item 10: one check of a lever at a time ----------------------------------------------------

def test_the_gate_refuses_a_lever_whose_check_runs_and_the_controller_waits_for_it():
    """Issue 37 item 10, open point 27: while a lever's check runs, the gate refuses the lever (so no
    second check starts) and the controller writes nothing for it; once the check has ended, the gate
    proves it again."""
    led = Ledger(CHECKED.replace("controller: {kind: model}",
                                 "controller: {kind: threshold, above: 10, action: lower}"))
    seq = led.add(report(12))
    basis = avsm.controller_basis(led.state, [seq], "dial 12 > 10")
    assert avsm.prove(led.state, "lower", led.at + 1, basis).ok
    led.add(next(avsm.begun(led.state, "check", "lower")).record)     # the warden started its check
    refused = avsm.prove(led.state, "lower", led.at + 1, basis)
    assert not refused.ok and refused.why == "lower's check is still running; it runs if that check passes"
    seq = led.add(report(13))
    assert led.drive(avsm.settle_round(led.state, seq)) == []
    led.add({"kind": "check", "claim": "measured", "venture": V, "lever": "lower", "ok": False, "status": "exit 1",
             "note": "", "summary": "c"})                         # it ended
    seq = led.add(report(14))
    assert kinds(led.drive(avsm.settle_round(led.state, seq))) == [("Gate", "lower")]


def test_a_slow_check_is_started_once_while_rounds_go_on(av, workdir):
    """Issue 37 item 10, open point 27, LEVER-08: a check that outlasts several rounds (cadence 1 s) is not
    started again by the next round; the lever runs once, on that one check (the deadband then holds it
    until the dial is back inside)."""
    check = "#!/bin/sh\necho started >> checks\nsleep 3\nexit 0\n"
    d = dial(workdir, "dial", threshold(extra=", deadband: 1", lever=", check: ./check"), value="50",
             lower="#!/bin/sh\ntrue\n", check=check)
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: of(rs, "outcome"), timeout=30, what="the lever's outcome")
    (action_seq, _), = of(av.records(), "action")
    av.wait_for(lambda rs: len([s for s, _ in of(rs, "report") if s > action_seq]) >= 3, timeout=15,
                what="three reports after the action")
    with open(os.path.join(d, "checks")) as fh:
        started = fh.read().split()
    records = av.records()
    assert len(started) == 1 and len(of(records, "check")) == 1, \
        "\n".join([str(started)] + [r["summary"] for _, _, r in records])
    assert len(of(records, "action")) == 1 and not of(records, "refusal")


def test_a_check_running_when_the_warden_dies_is_written_as_not_passed(av, workdir):
    """Issue 36 item 1, open point 27, RUN-10: a check's start is in the ledger; a warden killed while
    it runs is restarted, and the check avsmd ended is written as not passed (its lever did not run);
    the controller then starts one check again, which lets the lever run once."""
    check = "#!/bin/sh\necho started >> checks\nif [ -e once ]; then exit 0; fi\ntouch once\nsleep 60.107\n"
    d = dial(workdir, "dial", threshold(extra=", deadband: 1", lever=", check: ./check"), value="50",
             lower="#!/bin/sh\ntrue\n", check=check)
    av.start()
    assert av.cli("add", d).returncode == 0
    (begun, record), = av.wait_for(lambda rs: of(rs, "begun"), timeout=15, what="the check's start")
    assert record["what"] == "check" and record["lever"] == "lower"
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(d, "once")) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(av.wardens()[0], signal.SIGKILL)
    records = av.wait_for(lambda rs: of(rs, "outcome") and rs, timeout=30, what="the lever's outcome")
    checks = of(records, "check")
    assert [(c["ok"], c["status"]) for _, c in checks] == [(False, "unknown"), (True, "exit 0")], checks
    assert f"(#{begun}) was cut off" in checks[0][1]["summary"]
    assert len(of(records, "begun")) == 2 and len(of(records, "action")) == 1
    with open(os.path.join(d, "checks")) as fh:
        assert len(fh.read().split()) == 2
