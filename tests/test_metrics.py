"""Prometheus's textfile (issue 35 item 2): `metrics: {textfile: PATH, every: 15s}` in config.yaml has avsmd write
its figures in Prometheus's text exposition format, in whole (write beside it, then rename), mode 0644, to the
file node_exporter's textfile collector reads; avsm opens no listener for them. Per venture: the state status
shows (one series a state, 1 for the current one), the last trusted value, its bounds, reports, failed and
implausible reports, refusals, lever runs and refusals by lever, open asks, seconds since the last trusted
report; per home: the ledger's head and bytes, the newest checkpoint's seq and age, avsmd's starts and its
warden's and roles process's restarts. The counters are folded from the ledger, so they survive a restart.

The text is tested as a pure function of folded records; the file against a real avsmd; the file as a real
node_exporter serves it (Debian's prometheus-node-exporter, which .ci/run installs) and as `promtool check
metrics` judges it (Debian's prometheus); each of those two skips with one line when its program is missing."""

import ast
import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import textwrap
import time
import urllib.request

import pytest

import avsm
from conftest import check_ledger_safety, children, make_venture, write
from ledger_checks import shape_problem

LEVER = 'say "hi" \\ now'           # a lever's name is any text: a double quote and a backslash to escape

MANDATE = f"""\
purpose: Keep the level low.
metric: level
controller: {{kind: threshold, above: 10, action: '{LEVER}'}}
cadence: 1s
permitted:
  - {{name: '{LEVER}', run: ./lower, cap: 1/hour, reversible: true}}
forbidden: [rm]
"""


def mandate_record(text=MANDATE):
    """The record `avsm add` writes for tank (adoption_rule's first)."""
    return next(avsm.adoption_rule(avsm.VentureState("tank"), None, text, "/srv/tank")).record


def report(value, status="trusted"):
    return {"kind": "report", "claim": "measured", "venture": "tank", "metric": "level", "value": value,
            "status": status, "plausible": status in ("trusted", "unconfirmed"), "note": "",
            "summary": f"level = {value}"}


def folded(records, at=1000):
    """The venture states folded from `records` as the warden folds them, each at `at`."""
    states = {}
    for seq, record in enumerate(records, 1):
        avsm.fold_ledger(states, seq, at, record)
    return states


def samples(text):
    """{(name, frozenset of (label, value))): value} of exposition text, labels unescaped."""
    found = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset((k, re.sub(r"\\(.)", lambda e: {"n": "\n"}.get(e[1], e[1]), v))
                           for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m[2] or ""))
        found[(m[1], labels)] = float(m[3])
    return found


def value_of(found, name, **labels):
    """The value of the one sample of `name` whose labels include `labels` (None when there is none)."""
    hits = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) <= 1, f"{name} {labels}: {hits}"
    return hits[0] if hits else None


HOME = avsm.HomeFacts("/srv/avsm", 42, 8192, (40, 900), {"starts": 3, "restarts": {"warden": 1}})


# ---- the text, from records -----------------------------------------------------------------------

def test_a_label_escapes_backslash_double_quote_and_newline():
    """Issue 35 item 2: a label's value is quoted as the exposition format says (\\\\, \\", \\n); a lone
    surrogate, which UTF-8 cannot hold, becomes ?."""
    assert avsm.exposition_label('say "hi" \\ now\nthen') == 'say \\"hi\\" \\\\ now\\nthen'
    assert avsm.exposition_label("plain-name_1.2") == "plain-name_1.2"
    assert avsm.exposition_label("a\ud800b") == "a?b"
    assert [avsm.exposition_number(v) for v in (3, 3.0, 2.5, 1e300, float("inf"), -float("inf"), float("nan"), True)] \
        == ["3", "3", "2.5", "1e+300", "+Inf", "-Inf", "NaN", "1"]


def test_the_figures_of_a_venture_from_its_records():
    """Issue 35 item 2: the exposition text of a folded venture, sample by sample: its state among every state
    status shows, value and bound, age, the counters over every record, runs and refusals by lever (the lever
    name escaped), open asks; a refusal of a lever the mandate does not name counts in the venture's total
    only; then the home's figures, every sample labelled with the home."""
    records = [mandate_record(), report(4), report(None, "failed"), report(99, "implausible"), report(12),
               {"kind": "action", "claim": "measured", "venture": "tank", "lever": LEVER, "by": "controller",
                "proof": {"rule": "threshold", "premises": [1, 5], "steps": [], "trigger": None},
                "summary": "lower"},
               {"kind": "outcome", "claim": "measured", "venture": "tank", "lever": LEVER, "action": 6, "ok": True,
                "status": 0, "duration": 0.1, "note": "", "summary": "ok"},
               {"kind": "refusal", "claim": "measured", "venture": "tank", "lever": LEVER, "why": "cap",
                "summary": "capped"},
               {"kind": "refusal", "claim": "measured", "venture": "tank", "lever": "rm", "why": "forbidden",
                "summary": "rm is forbidden"},
               {"kind": "refusal", "claim": "measured", "venture": "tank", "lever": "made-up", "why": "unknown",
                "summary": "no such lever"},
               {"kind": "ask", "claim": "measured", "venture": "tank", "about": "lever", "lever": LEVER,
                "question": "run it?", "summary": "asks"}]
    text = avsm.metrics_text(folded(records), HOME, 1010.5)
    lines = text.splitlines()
    h, v = 'home="/srv/avsm"', 'venture="tank"'
    for line in (f'avsm_venture_state{{{h},{v},state="running"}} 1',
                 f'avsm_venture_state{{{h},{v},state="stuck"}} 0',
                 f'avsm_venture_state{{{h},{v},state="cannot run"}} 0',
                 f'avsm_venture_value{{{h},{v}}} 12',
                 f'avsm_venture_bound{{{h},{v},side="above",lever="say \\"hi\\" \\\\ now"}} 10',
                 f'avsm_venture_last_trusted_report_age_seconds{{{h},{v}}} 10.5',
                 f'avsm_venture_reports_total{{{h},{v}}} 4',
                 f'avsm_venture_failed_reports_total{{{h},{v}}} 1',
                 f'avsm_venture_implausible_reports_total{{{h},{v}}} 1',
                 f'avsm_venture_refusals_total{{{h},{v}}} 3',
                 f'avsm_venture_open_asks{{{h},{v}}} 1',
                 f'avsm_lever_runs_total{{{h},{v},lever="say \\"hi\\" \\\\ now"}} 1',
                 f'avsm_lever_runs_total{{{h},{v},lever="stop"}} 0',
                 f'avsm_lever_refusals_total{{{h},{v},lever="say \\"hi\\" \\\\ now"}} 1',
                 f'avsm_lever_refusals_total{{{h},{v},lever="rm"}} 1',
                 f'avsm_ledger_head_seq{{{h}}} 42', f'avsm_ledger_bytes{{{h}}} 8192',
                 f'avsm_checkpoint_seq{{{h}}} 40', f'avsm_checkpoint_age_seconds{{{h}}} 110.5',
                 f'avsm_avsmd_starts_total{{{h}}} 3',
                 f'avsm_restarts_total{{{h},process="warden"}} 1', f'avsm_restarts_total{{{h},process="roles"}} 0'):
        assert line in lines, f"{line!r} not in:\n{text}"
    assert not [line for line in lines if "made-up" in line]      # a model's made-up name is no series
    assert not [line for line in lines if line.startswith('avsm_lever_runs_total') and 'lever="rm"' in line]
    found = samples(text)
    assert value_of(found, "avsm_lever_runs_total", lever=LEVER) == 1     # read back, unescaped


def test_every_family_has_help_and_type_once_and_counters_end_in_total():
    """Issue 35 item 2: Prometheus's naming conventions: a # HELP and a # TYPE line before each family's
    samples, once; a counter's name ends in _total, a gauge's does not; seconds and bytes in the name; no
    timestamp (node_exporter refuses one); the text ends in a newline."""
    text = avsm.metrics_text(folded([mandate_record(), report(4)]), HOME, 1001)
    assert text.endswith("\n")
    seen = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            seen.append(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name == seen[-1] and kind in ("counter", "gauge")
            assert name.endswith("_total") == (kind == "counter"), name
        else:
            assert line.split("{")[0] == seen[-1] and len(line.rsplit("} ", 1)[1].split()) == 1, line
    assert len(seen) == len(set(seen)) == len(avsm.METRIC_FAMILIES)
    assert all(re.fullmatch(r"avsm_[a-z_]+", name) for name in seen)


def test_the_state_series_are_status_states_one_at_1():
    """Issue 35 item 2: avsm_venture_state has a series for each state `avsm status` shows, its own function's
    (status_row) states every one, and exactly the current one is 1: a paused venture, a stuck one."""
    conditions = {node.value.value if isinstance(node.value, ast.Constant) else node.value.elts[0].value
                  for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(avsm.status_row))))
                  if isinstance(node, ast.Assign) and "condition" in ast.unparse(node.targets[0])}
    assert conditions == set(avsm.STATUS_STATES)
    pause = {"kind": "pause", "claim": "declared", "venture": "tank", "summary": "a person paused tank"}
    stuck = {"kind": "refusal", "claim": "measured", "venture": "tank", "lever": LEVER, "why": "cap", "by": "controller",
             "side": "above", "stuck": "cap", "summary": "stuck"}
    for records, state in (([mandate_record(), report(4), pause], "paused"),
                           ([mandate_record(), report(12), stuck], "stuck")):
        found = samples(avsm.metrics_text(folded(records), HOME, 1001))
        values = {s: value_of(found, "avsm_venture_state", state=s) for s in avsm.STATUS_STATES}
        assert values == {s: float(s == state) for s in avsm.STATUS_STATES}, (state, values)


def test_a_failing_write_is_written_once_per_stretch():
    """Issue 35 item 2: a write of the textfile that fails writes a `metrics` record of self once, the next
    failures none, the first write that works one more saying how many failed."""
    spec = {"textfile": "/srv/prom/avsm.prom", "every": 15}
    assert avsm.judge_metrics(0, spec, None) == (0, None)
    failed, record = avsm.judge_metrics(0, spec, "No such file or directory: /srv/prom/avsm.prom.7.tmp")
    assert failed == 1 and record["kind"] == "metrics" and record["venture"] == "self" and record["ok"] is False
    assert "tried again every 15s" in record["summary"] and "metrics: textfile" in record["summary"]
    assert shape_problem(record) is None
    for n in (2, 3):
        assert avsm.judge_metrics(n - 1, spec, "again") == (n, None)
    failed, record = avsm.judge_metrics(3, spec, None)
    assert failed == 0 and record["ok"] is True and record["failed"] == 3 and shape_problem(record) is None


# ---- the config ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, where, says", [
    ("metrics: /srv/prom/avsm.prom\n", "1:1", "metrics is a mapping, as metrics: {textfile:"),
    ("metrics: {every: 15s}\n", "1:1", "metrics has no 'textfile'"),
    ("metrics: {textfile: /p/avsm.prom, evry: 15s}\n", "1:35", "did you mean 'every'"),
    ("metrics: {textfile: avsm.prom}\n", "1:11", "absolute path"),
    ("metrics: {textfile: /p/avsm.txt}\n", "1:11", "only files named NAME.prom"),
    ("metrics: {textfile: /p/avsm.prom, every: 1h30}\n", "1:35", "write 90m"),
    ("metrics: {textfile: /p/avsm.prom, every: 0s}\n", "1:35", "more than zero"),
])
def test_a_metrics_key_that_does_not_hold_is_refused_with_the_fix(text, where, says):
    """CONFIG-10, issue 35 item 2: metrics: is checked like every config key, 78 at file:line:col with the fix."""
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_config(text, "c.yaml")
    assert err.value.code == 78 and str(err.value).startswith(f"c.yaml:{where}: ") and says in str(err.value), \
        str(err.value)


def test_metrics_reads_back_and_defaults_to_15s():
    """CLI-04, issue 35 item 2: every is 15s unless it says; avsmd -T prints metrics: and it reads back."""
    cfg = avsm.parse_config("metrics: {textfile: /p/avsm.prom}\n", "c.yaml")
    assert cfg["metrics"] == {"textfile": "/p/avsm.prom", "every": 15}
    assert "metrics: null" in avsm.format_config(avsm.parse_config("", "c.yaml")).splitlines()
    assert avsm.parse_config(avsm.format_config(cfg), "printed.yaml") == cfg


# ---- a real avsmd ---------------------------------------------------------------------------------

def tank(av, workdir, every="1s", level=20):
    """A home whose config writes the metrics to workdir/prom/avsm.prom every `every`, and the tank venture
    (its level read from a file; its lever only exits 0): return (the textfile, the venture's directory)."""
    prom = os.path.join(workdir, "prom")
    os.makedirs(prom, exist_ok=True)
    textfile = os.path.join(prom, "avsm.prom")
    os.makedirs(av.home, mode=0o700, exist_ok=True)
    write(os.path.join(av.home, "config.yaml"), f"metrics: {{textfile: {textfile}, every: {every}}}\n")
    d = make_venture(workdir, "tank", MANDATE, {"report": "#!/bin/sh\ncat level\n", "lower": "#!/bin/sh\nexit 0\n"})
    write(os.path.join(d, "level"), f"{level}\n")
    return textfile, d


def read_when(textfile, predicate, timeout=20, what="the metrics file"):
    """The samples of `textfile` once predicate(samples) holds."""
    deadline, found = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        if os.path.exists(textfile):
            with open(textfile, encoding="utf-8") as fh:
                found = samples(fh.read())
            if predicate(found):
                return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last read: {found}")


def stuck_once(found):
    return value_of(found, "avsm_lever_runs_total", lever=LEVER) == 1 and \
        value_of(found, "avsm_venture_state", state="stuck") == 1 and \
        (value_of(found, "avsm_venture_reports_total") or 0) >= 3


def test_avsmd_writes_the_textfile_and_its_counters_survive_a_restart(av, workdir):
    """Issue 35 item 2: a real avsmd with metrics: writes the file (mode 0644 under a umask of 077, no temporary
    file left beside it), updates it every `every`, shows the venture stuck at its cap (its lever ran once,
    then refused: RUN-05), and after a restart of avsmd the counters go on from where they were (folded from
    the ledger), with avsmd's starts at 2; a roles process killed while the warden runs, then the warden,
    each count as a restart of its process."""
    textfile, d = tank(av, workdir)
    was = os.umask(0o077)
    try:
        av.start()
    finally:
        os.umask(was)
    assert av.cli("add", d).returncode == 0
    before = read_when(textfile, stuck_once, what="the tank stuck after one run")
    assert os.stat(textfile).st_mode & 0o777 == 0o644
    assert os.listdir(os.path.dirname(textfile)) == ["avsm.prom"]
    assert value_of(before, "avsm_venture_value") == 20 and value_of(before, "avsm_venture_bound", side="above") == 10
    assert value_of(before, "avsm_avsmd_starts_total") == 1
    assert value_of(before, "avsm_ledger_head_seq") >= 5 and value_of(before, "avsm_ledger_bytes") > 0
    reports = value_of(before, "avsm_venture_reports_total")
    later = read_when(textfile, lambda f: value_of(f, "avsm_venture_reports_total") > reports, what="an update")
    assert value_of(later, "avsm_ledger_head_seq") > value_of(before, "avsm_ledger_head_seq")
    code, _ = av.stop()
    assert code == 0
    with open(textfile, encoding="utf-8") as fh:
        stopped = samples(fh.read())
    av.start()
    after = read_when(textfile, lambda f: value_of(f, "avsm_avsmd_starts_total") == 2, what="the restarted figures")
    for name, labels in (("avsm_venture_reports_total", {}), ("avsm_venture_refusals_total", {}),
                         ("avsm_lever_refusals_total", {"lever": LEVER})):
        assert value_of(after, name, **labels) >= value_of(stopped, name, **labels) > 0, name
    assert value_of(after, "avsm_lever_runs_total", lever=LEVER) == 1
    assert value_of(after, "avsm_checkpoint_seq") > 0
    roles = [p for p in children(av.proc.pid) if p not in av.wardens()]      # a fork of avsmd, no program
    assert len(roles) == 1
    os.kill(roles[0], signal.SIGKILL)       # restarted while the warden runs: counted from the ledger
    read_when(textfile, lambda f: value_of(f, "avsm_restarts_total", process="roles") == 1,
              what="the roles process's restart counted")
    os.kill(av.wardens()[0], signal.SIGKILL)
    last = read_when(textfile, lambda f: value_of(f, "avsm_restarts_total", process="warden") == 1,
                     what="the warden's restart counted")
    assert value_of(last, "avsm_restarts_total", process="roles") == 1
    assert value_of(last, "avsm_venture_reports_total") >= value_of(after, "avsm_venture_reports_total")


def test_a_write_that_fails_is_written_once_and_tried_again(av, workdir):
    """Issue 35 item 2: the textfile's directory gone while avsmd runs: one `metrics` record of self (and one
    line on avsmd's standard error) says so, avsmd keeps running, and once the directory is back the file is
    written again and one more record says so."""
    textfile, d = tank(av, workdir)
    av.start()
    read_when(textfile, lambda f: value_of(f, "avsm_ledger_head_seq") is not None)
    shutil.rmtree(os.path.dirname(textfile))
    failed = av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "metrics" and not r["ok"]], timeout=10,
                         what="a metrics record of the failure")
    assert len(failed) == 1 and failed[0]["textfile"] == textfile and "No such file" in failed[0]["note"]
    assert av.proc.poll() is None and "cannot be written" in av.stderr()
    time.sleep(2.5)                     # failures in the same stretch write nothing more, nor log
    assert av.stderr().count("cannot be written") == 1, av.stderr()
    os.makedirs(os.path.dirname(textfile))
    read_when(textfile, lambda f: value_of(f, "avsm_ledger_head_seq") is not None, what="the file written again")
    again = av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "metrics" and r["ok"]], timeout=10)
    assert again[0]["failed"] >= 2
    assert len([r for _, _, r in av.records() if r["kind"] == "metrics"]) == 2


def test_avsmd_t_says_what_it_writes_and_a_missing_directory_is_78(av, workdir):
    """CONFIG-10, issue 35 item 2: avsmd -t says where and how often the figures are written; a textfile whose
    directory is not there is a config that does not hold, 78, with the fix, at avsmd -t, at avsmd's start and
    in avsm doctor."""
    textfile, d = tank(av, workdir, every="30s")
    run = av.daemon_cmd("-t")
    assert run.returncode == 0, run.stderr
    assert f"metrics: the figures of every venture and of the home are written to {textfile} every 30s" in run.stdout
    assert "mode 0644" in run.stdout
    shutil.rmtree(os.path.dirname(textfile))
    run = av.daemon_cmd("-t")
    assert run.returncode == 78
    assert f"metrics: the textfile's directory {os.path.dirname(textfile)} is not there; make it (mkdir -p" \
        in run.stderr
    start = subprocess.run([av.python, *av.flags, os.path.join(av.bindir, "avsmd"), "--home", av.home],
                           capture_output=True, text=True, timeout=20, env=av.env)
    assert start.returncode == 78 and "is not there; make it" in start.stderr, start.stderr
    doctor = av.cli("doctor")
    assert doctor.returncode == 78 and "is not there; make it" in doctor.stdout + doctor.stderr
    write(os.path.join(av.home, "config.yaml"), "")
    assert "metrics: not set" in av.daemon_cmd("-t").stdout


# ---- the real tools: node_exporter and promtool -----------------------------------------------------

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stopped_file(av, workdir):
    """The textfile a real avsmd wrote of the stuck tank, avsmd stopped (exit 0), so it holds still."""
    textfile, d = tank(av, workdir)
    av.start()
    assert av.cli("add", d).returncode == 0
    read_when(textfile, stuck_once, what="the tank stuck after one run")
    code, _ = av.stop()
    assert code == 0
    check_ledger_safety(av.home)
    return textfile


@pytest.mark.skipif(NODE_EXPORTER is None, reason="no prometheus-node-exporter here: apt-get install "
                                                  "prometheus-node-exporter (.ci/run does) to read the file with it")
def test_node_exporter_serves_every_figure(stopped_file):
    """Issue 35 item 2: a real node_exporter's textfile collector, on a free port of 127.0.0.1, reads the file
    with no scrape error and serves each avsm sample with its value (the lever's escaped name read back)."""
    port = free_port()
    proc = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                             f"--collector.textfile.directory={os.path.dirname(stopped_file)}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline, body = time.monotonic() + 15, None
        while body is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                    body = reply.read().decode()
            except OSError:
                time.sleep(0.1)
        assert body is not None, "node_exporter did not answer within 15 s"
    finally:
        proc.terminate()
        proc.wait(10)
    served = samples(body)
    assert value_of(served, "node_textfile_scrape_error") == 0
    with open(stopped_file, encoding="utf-8") as fh:
        written = samples(fh.read())
    assert len(written) > 20
    for key, value in written.items():
        assert served.get(key) == value, f"{key}: wrote {value}, node_exporter serves {served.get(key)}"
    assert value_of(served, "avsm_lever_runs_total", lever=LEVER) == 1


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="no promtool here: apt-get install prometheus (.ci/run tries) to lint the file with it")
def test_promtool_check_metrics_finds_nothing(stopped_file):
    """Issue 35 item 2: `promtool check metrics` reads the file and finds no problem (names, types, help,
    units, _total counters)."""
    with open(stopped_file, "rb") as fh:
        run = subprocess.run(["promtool", "check", "metrics"], stdin=fh, capture_output=True, timeout=30)
    assert run.returncode == 0 and not run.stdout.strip() and not run.stderr.strip(), run.stdout + run.stderr


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="no promtool here: apt-get install prometheus (.ci/run tries) to check the README's rule")
def test_the_readmes_queries_and_alerting_rule_hold(tmp_path):
    """Issue 35 item 2: the README's two PromQL queries and its alerting rule (a venture stuck for 15 minutes)
    are what `promtool check rules` accepts, and name only metrics avsm writes."""
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md"),
              encoding="utf-8") as fh:
        section = fh.read().split("\n## Prometheus\n", 1)[1].split("\n## ", 1)[0]
    queries = [line.split("   #")[0].strip() for line in
               re.search(r"```promql\n(.*?)```", section, re.S)[1].splitlines() if line.strip()]
    rule = re.search(r"```yaml\n(groups:.*?)```", section, re.S)[1]
    assert len(queries) == 2 and 'avsm_venture_state{state="stuck"} == 1' in rule and "for: 15m" in rule
    families = {name for name, _, _ in avsm.METRIC_FAMILIES}
    for text in queries + [rule]:
        assert set(re.findall(r"\bavsm_[a-z_]+", text)) <= families, text
    rules = rule + "".join(f"      - record: avsm:readme:{i}\n        expr: '{q}'\n" for i, q in enumerate(queries))
    path = tmp_path / "rules.yml"
    path.write_text(rules)
    run = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and "SUCCESS: 3 rules found" in run.stdout, run.stdout + run.stderr


def test_the_fix_for_a_missing_directory_pastes_as_a_command():
    """Issue 35 item 2 (found by the session's audit): the mkdir the message gives quotes a directory
    with a space or a quote, so it pastes into a shell as it reads."""
    problem = avsm.metrics_problem({"textfile": '/tmp/no such/a"b/avsm.prom', "every": 15})
    assert """(mkdir -p '/tmp/no such/a"b')""" in problem, problem
