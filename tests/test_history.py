"""A long history (issue 33 items 2, 3 and 5; issue 37 item 8): the readers read their window, a chart
of any span stays a chart, and a long doctor never holds up the warden.

The chart tests give chart_svg records and read the SVG back; the others build a ledger through avsm's own
writer (tests/bench/bench_doctor.py's builder, or Ledger.append), then run the real client and avsmd."""

import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

from conftest import Avsm, check_ledger_safety, make_venture

import avsm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
import bench_doctor  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
TEXT = ("purpose: p\nmetric: m\ncontroller: {kind: threshold, above: 50, action: up}\ncadence: 1s\n"
        "permitted:\n  - {name: up, run: ./up, cap: 100000/hour, reversible: true}\n")
MANDATE = (1, 1000, {"kind": "mandate", "claim": "declared", "venture": "v", "directory": "/x", "sha256": "0",
                     "summary": "m", "text": TEXT})


def report(seq, at, value):
    return seq, at, {"kind": "report", "claim": "measured", "venture": "v", "metric": "m", "value": value,
                     "status": "trusted", "plausible": True, "note": "", "summary": f"m = {value}"}


def line_points(root):
    """Return the trusted line's polylines, each as [(x, y)]."""
    return [[tuple(map(float, p.split(","))) for p in line.get("points").split()]
            for line in root.findall(f"{SVG}g[@class='trusted-line']/{SVG}polyline")]


def test_a_chart_of_many_reports_keeps_a_spike_and_stays_small():
    """Issue 33 item 3: 20,000 reports and 3,000 lever runs draw about one point per pixel column, each
    column by its lowest, highest and last report, so a one-report spike and dip still reach their values;
    every run is still marked (in a group naming its seqs when too many share the plot), the SVG stays
    under 300 KB, and the title says the span. Before: a point and a marker each, 9 MB."""
    reports = [report(2 + i, 2000 + i, 10 + i % 3) for i in range(20000)]
    reports[7000] = report(7002, 9000, 90)           # the spike
    reports[15000] = report(15002, 17000, -40)       # the dip
    runs = [(30000 + i, 2000 + i * 6, {"kind": "action", "claim": "measured", "venture": "v", "lever": "up",
                                       "by": "controller", "proof": {}, "summary": "up runs"}) for i in range(3000)]
    svg = avsm.chart_svg("v", [MANDATE], sorted(reports + runs), "in the ledger")
    assert len(svg) < 300_000, len(svg)
    root = ET.fromstring(svg)
    circles = root.findall(f".//{SVG}circle[@class='report trusted']")
    assert len(circles) <= avsm.CHART_RIGHT - avsm.CHART_LEFT + 1, len(circles)
    ys = [y for line in line_points(root) for _, y in line]
    cy = {float(c.get("cy")) for c in circles}
    top, bottom = min(ys), max(ys)
    assert top == min(cy | {top}) and bottom == max(cy | {bottom})
    spike = next(c for c in circles if "highest 90 (#7002)" in c.find(SVG + "title").text)
    dip = next(c for c in circles if "lowest -40 (#15002)" in c.find(SVG + "title").text)
    assert spike is not dip and top < float(spike.get("cy")) + 60 and bottom > float(dip.get("cy")) - 60
    assert abs(top - avsm.CHART_TOP) < 20 and abs(bottom - avsm.CHART_BOTTOM) < 20      # spike and dip drawn
    marked = set()
    for g in root.findall(f".//{SVG}g[@class='actions']/{SVG}g"):
        title = g.find(SVG + "title").text
        first, _, last = title.split(":")[0].lstrip("#").partition("..#")
        marked |= {s for s, _, _ in runs if int(first) <= s <= int(last or first)}
    assert marked == {s for s, _, _ in runs}
    assert len(root.findall(f".//{SVG}g[@class='actions']/{SVG}g")) <= avsm.CHART_MARKS
    assert "20000 trusted reports" in root.find(SVG + "title").text


def test_the_line_breaks_where_nothing_was_read_for_two_cadences():
    """Issue 37 item 8: a venture read each second, then nothing for three minutes (a pause), then read
    again: the line is two, not one drawn straight across the stretch; a gap under two cadences is not a
    break."""
    records = [report(2 + i, 2000 + i, 5 + i % 2) for i in range(10)]
    records += [report(20 + i, 2011 + 180 + int(i * 1.9), 7) for i in range(5)]
    lines = line_points(ET.fromstring(avsm.chart_svg("v", [MANDATE], records)))
    assert [len(line) for line in lines] == [10, 5], lines


def test_a_mark_at_the_right_edge_keeps_its_label_inside_the_plot():
    """Issue 37 item 8: a guard trip at the chart's last moment is labelled to the left of its line,
    inside the plot, not cut to "gu" at the right edge; one mid-chart keeps its label on the right."""
    records = [report(2 + i, 2000 + i * 10, 5) for i in range(20)]
    for seq, at in ((50, 2100), (51, 2190)):
        records.append((seq, at, {"kind": "pause", "claim": "measured", "venture": "v", "guard": "errors",
                                  "summary": "paused by guard errors"}))
    root = ET.fromstring(avsm.chart_svg("v", [MANDATE], sorted(records)))
    labels = [g.find(SVG + "text") for g in root.iter(SVG + "g") if g.get("class") == "mark guard"]
    assert len(labels) == 2
    (mid, end) = sorted(labels, key=lambda t: float(t.get("x")))
    assert mid.get("text-anchor") in (None, "start") and end.get("text-anchor") == "end"
    assert float(end.get("x")) <= avsm.CHART_RIGHT and end.text == "guard errors"


def build_mixed(home, now):
    """Write a ledger through avsm's writer: two ventures adopted two days ago, an ask, a pause and a
    lever run then, and an hour of reports, an answer and a resume now; return the records."""
    os.makedirs(home, mode=0o700)
    ledger = avsm.Ledger(os.path.join(home, "ledger.db"))
    put = lambda at, kind, venture, **f: ledger.append(avsm.new_record(kind, venture, **f), at)
    old, text = now - 2 * 86400, TEXT.replace("cap: 100000/hour", "cap: 3/hour")
    for name in ("a", "b"):
        put(old, "mandate", name, directory=f"/nowhere/{name}", sha256=avsm.text_sha256(text), text=text,
            summary=f"mandate adopted for {name}")
    ask = put(old + 5, "ask", "a", about="model", question="run up?", summary="asked: run up?")
    put(old + 6, "pause", "b", summary="paused by a person")
    for i in range(200):
        at = now - 3000 + i * 15                     # inside the last hour while the test runs
        for name in ("a", "b"):
            put(at, "report", name, metric="m", value=40 + i % 20, status="trusted", plausible=True, note="",
                summary=f"m = {40 + i % 20}")
    put(now - 60, "denial", "a", ask=ask, summary=f"ask #{ask} denied")
    put(now - 30, "resume", "b", summary="resumed by a person")
    ledger.close()


def test_a_summary_reads_its_window_and_says_what_a_full_read_says(bindir, home):
    """Issue 33 item 2: `avsm summary` (24 hours, --since 1h, --since SEQ) on a ledger from before the
    indexes (a read-only reader: the same answer, slower), and after the writer's open made them (avsmd
    does at start), says exactly what summarize says over every record of the ledger: the ask raised
    two days ago and answered now, the pause from before the window. The indexes are made once, by the
    writer, and an old ledger gets them at its open."""
    now = int(time.time())
    build_mixed(home, now)
    path = os.path.join(home, "ledger.db")
    db = sqlite3.connect(path)
    for name in ("records_at", "records_kind", "records_venture"):
        db.execute(f"DROP INDEX {name}")             # as a ledger written before them
    db.close()
    a = Avsm(bindir, home)
    db = avsm.open_ledger_ro(path)
    rows = list(avsm.read_records(db))
    top = rows[-1][0]
    first_hour = next(s for s, at, _ in rows if at >= now - 3000) - 1    # the day's span is the hour's
    db.close()
    expected = {}
    for args, since in ((), first_hour), (("--since", "1h"), first_hour), (("--since", str(top - 50)), top - 50):
        span = "the last 24h" if not args else "the last 1h" if args[1] == "1h" else f"the records after #{since}"
        summary = avsm.summarize([r for r in rows], since)
        expected[args] = "\n".join(avsm.format_summary(avsm.summary_facts(summary, span, home))) + "\n"
    before = {args: a.cli("summary", *args) for args in expected}
    avsm.Ledger(path).close()                        # the writer's open makes the indexes
    db = avsm.open_ledger_ro(path)
    names = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    plan = " ".join(str(r) for r in db.execute(
        f"EXPLAIN QUERY PLAN SELECT seq FROM records WHERE {avsm.RECORD_KIND_SQL} = 'mandate'"))
    db.close()
    assert {"records_at", "records_kind", "records_venture"} <= names and "records_kind" in plan
    for args in expected:
        r = a.cli("summary", *args)
        assert r.returncode == 0 and r.stdout == before[args].stdout == expected[args], (args, r, before[args])
    assert "1 denied (#3)" in before[()].stdout and "resumed 1 time(s)" in before[()].stdout
    check_ledger_safety(home)


def test_why_rechecks_each_action_as_a_fold_of_the_whole_ledger_does(bindir, home):
    """Issue 33 item 2, PROOF-05: `avsm why` of each action (the builder's, the gate's own; a forged one past
    its cap; one citing another venture's report) re-checks, or not, exactly as check_proof does over
    the whole ledger, now that why folds only the venture's records, found by its index."""
    top = os.path.dirname(home)
    bench_doctor.build(home, top, 3000, 3)
    path = os.path.join(home, "ledger.db")
    ledger = avsm.Ledger(path)
    rows = list(avsm.read_records(ledger.db))
    records = {s: (at, r) for s, at, r in rows}
    last = [s for s, _, r in rows if r["kind"] == "action" and r["venture"] == "v0"][-1]
    other = next(s for s, _, r in reversed(rows) if r["kind"] == "report" and r["venture"] == "v1")
    forged = dict(records[last][1], summary="reset runs again")
    ledger.append(forged, records[last][0])
    cross = dict(forged, proof=dict(forged["proof"], premises=forged["proof"]["premises"] + [other]))
    ledger.append(cross, records[last][0])
    rows = list(avsm.read_records(ledger.db))
    ledger.close()
    records = {s: (at, r) for s, at, r in rows}
    actions = [s for s, _, r in rows if r["kind"] == "action"]
    a, seen = Avsm(bindir, home), set()
    for seq in actions[:3] + actions[-6:]:
        problems = avsm.check_proof(seq, records[seq][0], records[seq][1], records)
        r = a.cli("why", str(seq))
        said = [line[len("re-checks: no: "):] for line in r.stdout.splitlines() if line.startswith("re-checks: no: ")]
        assert said == problems and r.returncode == (65 if problems else 0), (seq, r, problems)
        assert f"premise #{records[seq][1]['proof']['premises'][0]} declared mandate" in r.stdout
        seen.add(bool(problems))
    assert seen == {True, False}
    assert f"premise #{other} measured report count = " in a.cli("why", str(actions[-1])).stdout


def start_slowly(a, limit=120):
    """Start avsmd as Avsm.start does, waiting up to `limit` s for it to answer: its first fold of a
    large ledger on a loaded host takes longer than conftest's 15 s."""
    a.errfile = tempfile.TemporaryFile(mode="w+")
    a.proc = subprocess.Popen([a.python, *a.flags, os.path.join(a.bindir, "avsmd"), "--home", a.home],
                              stdout=subprocess.DEVNULL, stderr=a.errfile, env=a.env, start_new_session=True)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert a.proc.poll() is None, a.stderr()
        if os.path.exists(os.path.join(a.home, "sock")) and a.cli("status").returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"avsmd did not answer within {limit} s")


def test_doctor_while_the_warden_writes_does_not_hold_up_its_reports(bindir, home, workdir):
    """Issue 33 item 5, DOCTOR-01, LEDGER-05: a full doctor of a 150,000-record ledger, run while avsmd
    reads a venture each second, leaves the reports committed as they come: none is held back by more
    than a small part of doctor's run (before, every report waited for doctor's one read of the whole
    ledger, and doctor could itself fail on the lock), and doctor passes."""
    bench_doctor.build(home, os.path.dirname(home), 150_000, 2)
    a = Avsm(bindir, home)
    quick = make_venture(workdir, "quick", TEXT.replace("up, run: ./up", "up, run: ./report"),
                         {"report": "#!/bin/sh\necho 5\n"})
    try:
        start_slowly(a)
        assert a.cli("add", quick).returncode == 0
        a.wait_for(lambda rs: [s for s, _, r in rs if r["kind"] == "report" and r["venture"] == "quick"],
                   what="quick's first report")
        seen, stop = {}, threading.Event()

        def watch():
            db = avsm.open_ledger_ro(os.path.join(home, "ledger.db"))
            after = avsm.last_seq(db)
            while not stop.is_set():
                for seq, at, r in avsm.read_records(db, after):
                    if r["kind"] == "report" and r["venture"] == "quick":
                        seen[seq] = time.time() - at
                    after = seq
                time.sleep(0.05)
            db.close()

        watcher = threading.Thread(target=watch)
        watcher.start()
        t0 = time.monotonic()
        try:
            r = a.cli("doctor", timeout=300)
        finally:
            took = time.monotonic() - t0
            time.sleep(1.5)
            stop.set()
            watcher.join()
        assert r.returncode == 0 and "every proof in the ledger re-checks" in r.stdout, r
        late = max(seen.values())
        assert len(seen) >= took / 2 and late < 2.5 + took / 4, (took, late, sorted(seen.items()))
        code, _ = a.stop()
        assert code == 0
    finally:
        if a.proc is not None and a.proc.poll() is None:
            a.stop()


def test_doctor_tells_a_slow_answer_from_a_missing_socket(home):
    """Issue 33 item 5, DOCTOR-01, DOCTOR-06: a socket that takes doctor's health request and answers
    after six seconds is an avsmd that answers slowly (a note), not a missing socket (69)."""
    os.makedirs(home, mode=0o700)
    avsm.Ledger(os.path.join(home, "ledger.db")).close()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.path.join(home, "sock"))
    server.listen(1)

    def answer():
        conn, _ = server.accept()
        conn.recv(65536)
        time.sleep(6)
        conn.sendall(json.dumps({"out": "avsmd answers slowly", "exit": 0}).encode() + b"\n")
        conn.close()

    t = threading.Thread(target=answer)
    t.start()
    try:
        r = Avsm("/nonexistent", home).cli("doctor", timeout=60)
    finally:
        t.join()
        server.close()
    assert "avsmd answers on" in r.stdout and "to answer doctor's health request" in r.stdout, r
    assert "missing" not in r.stdout and r.returncode != 69, r
