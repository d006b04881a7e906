"""`--json` (issue 35 item 1): status, asks, summary, tail (and tail -f), why, doctor and checkpoint print one
JSON document of schema 1 (tail: one object a line) holding the facts their text is made from, with the exit
code and its meaning; errors keep their exit codes and print a document too; --json reaches a far host through
--host (its answer parsed and made again here; one not JSON is 69) and fleet status|asks gives one document keyed
by host. The real avsmd and client on a short home; the far host is this machine through a fake ssh (AVSM_SSH)
that runs the bridge command it is given."""

import json
import os
import select
import subprocess
import sys

import pytest

from conftest import installed_avsm, make_venture, write

import avsm

LOW = """purpose: Keep the dial low.
metric: dial
controller: {kind: threshold, above: 10, action: lower}
cadence: 1h
permitted:
  - {name: lower, run: ./lower, cap: 60/hour, reversible: REVERSIBLE}
forbidden: [rm]
"""
FILES = {"report": "#!/bin/sh\ncat value\n", "lower": "#!/bin/sh\necho 0 > value\n"}
LOCAL_SSH = '#!/bin/sh\nfor a; do last=$a; done\nexec /bin/sh -c "$last"\n'
DOWN_SSH = '#!/bin/sh\necho "ssh: Could not resolve hostname down: Name or service not known" >&2\nexit 255\n'
# a host whose bridge answers the ping as avsm's would, then sends a line that is no JSON
GARBAGE_SSH = '#!/bin/sh\nread line\necho \'{"out": "avsmd", "exit": 0}\'\necho "<html>hello</html>"\n'
# what each verb's JSON holds that its text does not say in words: the time a status was asked (age), the
# answering commands of an ask (the text's approve N / deny N), a summary's bookkeeping, a doctor finding's code
NOT_IN_TEXT = {"schema", "exit", "meaning", "age", "answer", "per", "directory", "starts", "mandate",
               "last_report", "code", "count", "run", "ledger_down", "rechecks", "problems"}


def dial(workdir, name, value, reversible):
    d = make_venture(workdir, name, LOW.replace("REVERSIBLE", reversible), FILES)
    write(os.path.join(d, "value"), f"{value}\n")
    return d


@pytest.fixture
def two(av, workdir):
    """avsmd with two ventures: `low`, whose lever ran once through the gate, and `asking`, with an open ask."""
    av.start()
    for name, reversible in (("low", "true"), ("asking", "false")):
        assert av.cli("add", dial(workdir, name, 50, reversible)).returncode == 0
    kinds = lambda rs: [r["kind"] for _, _, r in rs]     # noqa: E731
    recs = av.wait_for(lambda rs: {"outcome", "ask"} <= set(kinds(rs)) and kinds(rs).count("forecast") == 2 and rs,
                       timeout=20, what="an outcome, an ask and both forecasts")
    av.action = next(s for s, _, r in recs if r["kind"] == "action")
    av.ask = next(s for s, _, r in recs if r["kind"] == "ask")
    return av


def leaves(value, key=None, skip=()):
    """Yield (key, leaf) of a JSON value; a whole record shows in text as its venture, claim, kind, summary."""
    if isinstance(value, dict):
        if {"kind", "claim", "venture"} <= set(value):
            value = {k: value.get(k) for k in ("venture", "claim", "kind", "summary")}
        for k, v in value.items():
            if k not in NOT_IN_TEXT and k not in skip:
                yield from leaves(v, k, skip)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v, key, skip)
    elif value is not None and not isinstance(value, bool):
        yield key, value


def assert_agrees(doc, text, skip=()):
    """Every value, seq and command in the JSON appears in the text (numbers as avsm writes them, times local)."""
    for key, value in leaves(doc, None, skip):
        if key == "at" and str(value) not in text:          # a checkpoint says its time as a unix time too
            value = avsm.format_local_time(value)
        elif isinstance(value, float):
            value = avsm.format_number(value)
        for line in str(value).splitlines() or [""]:
            assert avsm.shown_text(line) in text or line in text, (key, value, text)


def both(av, *args):
    """The text and the --json of one command: the same exit code; the document parsed, of schema 1."""
    text, done = av.cli(*args), av.cli(*args, "--json")
    assert done.returncode == text.returncode, (args, text, done)
    doc = json.loads(done.stdout)
    assert doc["schema"] == 1 and doc["exit"] == done.returncode, doc
    assert doc["meaning"] == avsm.EXIT_MEANINGS[done.returncode], doc
    return text, doc


def test_each_verb_json_agrees_with_its_text(two):
    """Each verb's --json parses as one document of schema 1 with its exit code and its meaning, and every value,
    seq and command in it is in the verb's text: status (one line a venture, and with -v the bounds and detail),
    asks, summary, why (the action's proof: rule, steps, premises with their records, the re-check; the ask's
    answer still to come), doctor (each finding and its fix) and checkpoint. CLI-04 ASK-05 PROOF-05"""
    av = two
    text, doc = both(av, "status")
    assert [v["name"] for v in doc["ventures"]] == ["asking", "low"] and doc["ventures"][0]["asks"] == [av.ask]
    low = doc["ventures"][1]
    assert low["state"] == "running" and low["value"] == 50 and low["levers"][0]["runs"] == 1
    assert_agrees(doc, text.stdout, skip={"bounds"})       # the one-line view leaves the bounds to -v
    text, doc = both(av, "status", "-v")
    assert doc["ventures"][1]["bounds"] == [{"way": "above", "bound": 10, "lever": "lower"}]
    assert "controller: above 10 (lower)" in text.stdout
    assert_agrees(doc, text.stdout)
    text, doc = both(av, "asks")
    (ask,) = doc["asks"]
    assert ask["seq"] == av.ask and ask["venture"] == "asking" and ask["lever"] == "lower"
    assert ask["answer"] == [f"avsm approve {av.ask}", f"avsm deny {av.ask}"]
    assert_agrees(doc, text.stdout)
    text, doc = both(av, "summary")
    assert [v["name"] for v in doc["ventures"]] == ["asking", "low"] and doc["avsmd"]["running"]
    assert doc["ventures"][0]["needs"] and doc["ventures"][1]["trusted"]["max"] == 50
    assert_agrees(doc, text.stdout)
    text, doc = both(av, "why", str(av.action))
    assert doc["record"]["kind"] == "action" and doc["proof"]["rule"] == "threshold" and doc["rechecks"] is True
    assert all(p["record"]["claim"] in ("measured", "declared") for p in doc["proof"]["premises"])
    assert_agrees(doc, text.stdout)
    text, doc = both(av, "why", str(av.ask))
    assert doc["proof"] if "proof" in doc else doc["followed"], doc
    assert_agrees(doc, text.stdout)
    text, doc = both(av, "doctor")
    assert doc["findings"] and all(f["level"] in ("ok", "note", "warn", "fail") for f in doc["findings"])
    assert_agrees(doc, text.stdout)
    written = json.loads(av.cli("checkpoint", "--json").stdout)
    assert written["seq"] >= av.ask and len(written["hash"]) == 64 and written["origin"].startswith("avsm/")
    av.stop()                   # each checkpoint avsmd writes is new; a stopped one's newest is the same twice
    text, doc = both(av, "checkpoint")
    assert doc["hash"] == written["hash"] and "this is the newest checkpoint it wrote" in doc["error"]
    assert_agrees(doc, text.stdout, skip={"error"})


def test_tail_json_is_one_object_a_record_and_follows(two):
    """tail --json: one object a line, each record with its seq and time as the text's lines have them, then
    one last object with the exit code; tail -f --json follows, a line a new record. CLI-04"""
    av = two
    text, done = av.cli("tail", "5"), av.cli("tail", "5", "--json")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 6 and all(line["schema"] == 1 for line in lines)
    assert lines[-1] == {"schema": 1, "exit": 0, "meaning": "done"}
    for line, shown in zip(lines, text.stdout.splitlines()):
        assert shown == avsm.format_record_line(line["seq"], line["at"], line["record"])
    p = subprocess.Popen(av.client() + ["--home", av.home, "tail", "-f", "1", "--json"], stdout=subprocess.PIPE,
                         text=True, env=av.env)
    try:
        first = json.loads(p.stdout.readline())
        assert av.cli("pause", "low").returncode == 0
        assert select.select([p.stdout], [], [], 10)[0], "tail -f --json said nothing of the pause"
        paused = json.loads(p.stdout.readline())
        assert paused["seq"] == first["seq"] + 1 and paused["record"]["kind"] == "pause"
    finally:
        p.terminate()
        p.wait(10)


def test_json_goes_anywhere_among_the_options_and_errors_are_documents(two, workdir):
    """--json goes before or after a verb's other options; an unknown flag stays 64 and a verb with no --json
    is 64; an error with --json keeps its exit code and prints a document with the code, its meaning and the
    message: an unknown venture 65, a record not in the ledger 65, no avsmd 69 (with what the ledger holds)."""
    av = two
    for args in (["--json", "status", "-v"], ["status", "--json", "-v"], ["status", "-v", "--json"]):
        done = av.cli(*args)
        assert done.returncode == 0 and "detail" in json.loads(done.stdout)["ventures"][0], (args, done)
    assert av.cli("status", "--jsn").returncode == 64
    done = av.cli("pause", "low", "--json")
    assert done.returncode == 64 and json.loads(done.stdout)["exit"] == 64
    for args, code, words in ((["status", "nope"], 65, "no venture is named 'nope'"),
                              (["why", "99999"], 65, "#99999 is not in the ledger")):
        done = av.cli(*args, "--json")
        doc = json.loads(done.stdout)
        assert done.returncode == code and doc["exit"] == code and doc["meaning"] == "refused", done
        assert words in doc["error"] and words in done.stderr, doc
    av.stop()
    done = av.cli("status", "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 69 and doc["exit"] == 69 and "no avsmd" in doc["error"], done
    assert {v["state"] for v in doc["ventures"]} == {"was running"}, doc
    assert doc["ledger"]["seq"] >= av.ask and {v["name"] for v in doc["ventures"]} == {"asking", "low"}
    done = av.cli("tail", "--json", "--home", os.path.join(workdir, "none"))
    assert done.returncode == 66 and json.loads(done.stdout.splitlines()[-1])["exit"] == 66


def far_env(workdir, home):
    env = dict(os.environ, AVSM_SSH=write(os.path.join(workdir, "ssh"), LOCAL_SSH, 0o755),
               AVSM_BRIDGE=f"{sys.executable} -S {installed_avsm()} --home {home} bridge",
               XDG_CONFIG_HOME=os.path.join(workdir, "cfg"))
    env.pop("AVSMD_HOME", None)
    return env


def far(env, *args):
    return subprocess.run([sys.executable, "-S", installed_avsm(), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_host_json_is_parsed_and_made_here(two, workdir):
    """avsm --host HOST VERB --json: the far host's document, parsed and printed again on this side, each avsm
    command in it naming the host; tail's lines as well; an unknown venture there keeps 65 in a document; a far
    host that answers with no JSON is 69, with a document saying so."""
    env = far_env(workdir, two.home)
    done = far(env, "--host", "web1", "status", "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["schema"] == 1 and doc["exit"] == 0, done
    assert [v["name"] for v in doc["ventures"]] == ["asking", "low"]
    done = far(env, "--host", "web1", "--json", "summary")
    needs = json.loads(done.stdout)["ventures"][0]["needs"]
    assert done.returncode == 0 and any("--host web1 approve" in command for _, command in needs), needs
    done = far(env, "--host", "web1", "tail", "2", "--json")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0 and len(lines) == 3 and lines[0]["seq"] + 1 == lines[1]["seq"], done
    done = far(env, "--host", "web1", "status", "nope", "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 65 == doc["exit"] and "nope" in doc["error"], done
    env["AVSM_SSH"] = write(os.path.join(workdir, "garbage"), GARBAGE_SSH, 0o755)
    done = far(env, "--host", "web1", "status", "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 69 == doc["exit"] and "no JSON" in doc["error"] and "<html>" not in done.stdout, done


def test_fleet_status_json_is_keyed_by_host(two, workdir):
    """fleet status --json and fleet asks --json: one document keyed by host, each host's own document, and a
    host not reached with its exit code (68), its meaning and why; the fleet exits with that code."""
    av, env = two, far_env(workdir, two.home)
    down = write(os.path.join(workdir, "down-ssh"), DOWN_SSH, 0o755)
    write(os.path.join(workdir, "cfg", "avsm", "fleet.yaml"),
          f"hosts: [web1, {{host: down, ssh: {down}}}]\n")
    done = far(env, "fleet", "status", "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 68 and doc["exit"] == 68 and set(doc["hosts"]) == {"web1", "down"}, done
    assert [v["name"] for v in doc["hosts"]["web1"]["ventures"]] == ["asking", "low"]
    assert doc["hosts"]["web1"]["exit"] == 0
    assert doc["hosts"]["down"]["exit"] == 68 and "could not reach" in doc["hosts"]["down"]["error"]
    done = far(env, "fleet", "--json", "asks")
    doc = json.loads(done.stdout)
    assert [a["seq"] for a in doc["hosts"]["web1"]["asks"]] == [av.ask] and doc["hosts"]["down"]["exit"] == 68
