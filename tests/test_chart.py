"""`avsm chart VENTURE [--since DURATION|SEQ]` (issue 14 item 5): a standalone SVG of the metric's trusted
reports over time, the reports not trusted marked apart, the controller's bound or band, and each lever run and
ask as a marker whose tooltip names its record seq, read from the ledger alone (avsmd may be stopped).

One real avsmd runs two scripted ventures once for the module (a band that runs a lever, raises an ask on its
irreversible side, sees an implausible and a failed report with hostile output; a threshold with a deadband),
then is stopped; each test parses the chart with xml.etree and compares it with the ledger."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import pytest

from conftest import Avsm, check_ledger_safety, make_venture

import avsm

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE_METRIC = """temp <&> "q" it's"""
ROOM = """\
purpose: Keep the room between 19 and 24 degrees.
metric: 'temp <&> "q" it''s'
controller: {kind: band, low: 19, high: 24, below: heat, above: cool}
cadence: 1s
range: [0, 100]
permitted:
  - {name: cool, run: ./cool, cap: 10/hour, reversible: true}
  - {name: heat, run: ./heat, cap: 10/hour, reversible: false}
"""
# 20, then 30 (above the band: cool runs), 500 (outside range: implausible), 22, 10 (below: heat is irreversible,
# so an ask), a failed report printing markup and control characters, then 21 for ever
ROOM_REPORT = r"""#!/bin/sh
n=$(cat count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > count
case $n in
1) echo 20;; 2) echo 30;; 3) echo 500;; 4) echo 22;; 5) echo 10;;
6) printf 'bad <b>&amp; "x" \001\033[31m\n'; exit 1;;
*) echo 21;;
esac
"""
PLAIN = """\
purpose: Keep the queue under ten.
metric: queue
controller: {kind: threshold, above: 10, action: flush, deadband: 2}
cadence: 1s
permitted:
  - {name: flush, run: ./flush, cap: 10/hour, reversible: true}
"""
PLAIN_REPORT = """#!/bin/sh
n=$(cat count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > count
case $n in 1) echo 5;; 2) echo 12;; *) echo 7;; esac
"""


def of(records, kind, venture):
    return [(s, r) for s, _, r in records if r["kind"] == kind and r["venture"] == venture]


class Run:
    """The module's one run: the client, the ledger as it ended, and the chart made while avsmd ran."""


@pytest.fixture(scope="module")
def run(bindir):
    top = tempfile.mkdtemp(prefix="avc", dir="/tmp")
    a = Avsm(bindir, os.path.join(top, "h"))
    room = make_venture(top, "room", ROOM, {"report": ROOM_REPORT, "cool": "#!/bin/sh\nexit 0\n",
                                            "heat": "#!/bin/sh\nexit 0\n"})
    plain = make_venture(top, "plain", PLAIN, {"report": PLAIN_REPORT, "flush": "#!/bin/sh\nexit 0\n"})
    try:
        a.start()
        assert a.cli("add", room).returncode == 0 and a.cli("add", plain).returncode == 0
        a.wait_for(lambda rs: len(of(rs, "report", "room")) >= 6 and of(rs, "outcome", "room")
                   and of(rs, "outcome", "plain") and any(r.get("lever") == "heat" for _, r in of(rs, "ask", "room")),
                   timeout=30, what="room's six reports, cool's outcome, heat's ask and plain's flush")
        r = Run()
        r.a, r.running = a, a.cli("chart", "room")
        code, _ = a.stop()
        assert code == 0, a.stderr()
        check_ledger_safety(a.home)
        r.records = a.records()
        yield r
    finally:
        if a.proc is not None and a.proc.poll() is None:
            a.stop()
        shutil.rmtree(top, ignore_errors=True)


def chart(run, *args):
    """Run `avsm chart ARGS` with avsmd stopped; return the parsed SVG's root."""
    r = run.a.cli("chart", *args)
    assert r.returncode == 0 and r.stderr == "", r
    return ET.fromstring(r.stdout)


def marks(root, tag, cls):
    """Return [(element, seq in its tooltip)] of the elements whose class begins with `cls`, in document order."""
    found = []
    for el in root.iter(SVG + tag):
        if (el.get("class") or "").split()[:len(cls.split())] == cls.split():
            title = el.find(SVG + "title")
            m = re.match(r"#(\d+) ", title.text if title is not None else "")
            found.append((el, int(m.group(1)) if m else None))
    return found


def scale(points):
    """Return the value -> y mapping the trusted points follow (two points with different values fix it)."""
    (v1, y1), (v2, y2) = points[0], next(p for p in points if p[0] != points[0][0])
    return lambda v: y1 + (v - v1) * (y2 - y1) / (v2 - v1)


def test_the_points_are_the_trusted_reports_in_order(run):
    """Issue 14 item 5: each trusted report of the venture is one point, in ledger order, its tooltip naming its
    seq, on one line through them; the points follow one linear scale of the values and stay inside the plot."""
    root = chart(run, "room")
    trusted = [(s, r["value"]) for s, r in of(run.records, "report", "room") if r["status"] == "trusted"]
    points = marks(root, "circle", "report trusted")
    assert [seq for _, seq in points] == [s for s, _ in trusted]
    lines = root.findall(f"{SVG}g[@class='trusted-line']/{SVG}polyline")    # broken where nothing was read
    xy = [tuple(map(float, p.split(","))) for line in lines for p in line.get("points").split()]
    assert xy == [(float(el.get("cx")), float(el.get("cy"))) for el, _ in points]
    assert [x for x, _ in xy] == sorted(x for x, _ in xy)
    y = scale([(v, float(el.get("cy"))) for (el, _), (_, v) in zip(points, trusted)])
    assert all(abs(float(el.get("cy")) - y(v)) < 0.2 for (el, _), (_, v) in zip(points, trusted))
    plot = root.find(f"{SVG}clipPath/{SVG}rect")
    left, top = float(plot.get("x")), float(plot.get("y"))
    right, bottom = left + float(plot.get("width")), top + float(plot.get("height"))
    assert all(left <= x <= right and top <= y_ <= bottom for x, y_ in xy)
    assert y(30) < y(20) and "report" in points[0][0].find(SVG + "title").text


def test_reports_not_trusted_are_marked_apart(run):
    """Issue 14 item 5, TRUST: the implausible report (500, outside range) and the failed one are marks of their
    own, off the line (the implausible one off the scale, at the plot's top edge), each naming its seq."""
    root = chart(run, "room")
    reports = of(run.records, "report", "room")
    apart = [(s, r["status"]) for s, r in reports if r["status"] != "trusted"]
    marked = marks(root, "path", "report")
    assert [seq for _, seq in marked] == [s for s, _ in apart]
    assert {seq: el.get("class") for el, seq in marked} == {
        s: "report implausible off-scale" if status == "implausible" else f"report {status}" for s, status in apart}
    assert {s for _, s in marks(root, "circle", "report trusted")}.isdisjoint(s for s, _ in apart)
    assert [status for _, status in apart] == ["implausible", "failed"]
    plot = root.find(f"{SVG}clipPath/{SVG}rect")
    failed = next(el for el, _ in marked if el.get("class") == "report failed")        # issue 22 item 7: on the axis
    ys = [float(v) for v in re.findall(r",(-?[0-9.]+)", failed.get("d"))]
    assert min(ys) >= float(plot.get("y")) + float(plot.get("height")), failed.get("d")


def test_the_value_axis_is_not_padded_past_zero():
    """Issue 22 item 7: the y range comes from the data and the bounds: a level that never went below 0 starts
    at 0 (not -200), one never above 0 ends at 0, a range across 0 is padded both ways, and all zeros is a range."""
    assert avsm.value_ticks(0, 1000)[:2] == (0, 1200) and avsm.value_ticks(3, 900)[0] == 0
    assert avsm.value_ticks(-1000, 0)[:2] == (-1200, 0)
    bottom, top, _ = avsm.value_ticks(-5, 10)
    assert bottom < -5 and top > 10
    bottom, top, ticks = avsm.value_ticks(0, 0)
    assert bottom == 0 < top and ticks[0] == (0, "0")


def test_each_lever_run_and_ask_is_a_marker_naming_its_seq(run):
    """Issue 14 item 5, CLI-08: every action of the venture (cool) and every ask (the implausible report's,
    heat's) is a marker whose tooltip begins with its record seq; an action's says its outcome, an ask's its
    answer or how to give one."""
    root = chart(run, "room")
    actions = [s for s, _ in of(run.records, "action", "room")]
    asks = [s for s, _ in of(run.records, "ask", "room")]
    assert [seq for _, seq in marks(root, "g", "action")] == actions and actions
    assert [seq for _, seq in marks(root, "g", "ask")] == asks and len(asks) >= 2
    outcome = next(s for s, r in of(run.records, "outcome", "room") if r["action"] == actions[0])
    el = marks(root, "g", "action")[0][0]
    assert el.get("class") == "action ok" and f"ended #{outcome}: ok" in el.find(SVG + "title").text
    heat = next(s for s, r in of(run.records, "ask", "room") if r.get("lever") == "heat")
    title = next(el for el, seq in marks(root, "g", "ask") if seq == heat).find(SVG + "title").text
    assert f"still open: avsm approve {heat}" in title and "run heat?" in title


def test_the_band_and_the_bound_are_drawn_at_their_values(run):
    """Issue 14 item 5, CONTROL: a band controller is a shaded band from low to high on the values' scale; a
    threshold is a line at its bound, with the deadband's re-arm level beside it, each naming its mandate."""
    root = chart(run, "room")
    trusted = [r["value"] for _, r in of(run.records, "report", "room") if r["status"] == "trusted"]
    y = scale([(v, float(el.get("cy"))) for (el, _), v in zip(marks(root, "circle", "report trusted"), trusted)])
    band = root.find(f".//{SVG}g[@class='band']")
    rect = band.find(SVG + "rect")
    assert abs(float(rect.get("y")) - y(24)) < 0.3
    assert abs(float(rect.get("y")) + float(rect.get("height")) - y(19)) < 0.3
    mandate = of(run.records, "mandate", "room")[0][0]
    assert band.find(SVG + "title").text == f"mandate #{mandate}: band [19, 24]: below runs heat, above runs cool"
    root = chart(run, "plain")
    trusted = [r["value"] for _, r in of(run.records, "report", "plain") if r["status"] == "trusted"]
    y = scale([(v, float(el.get("cy"))) for (el, _), v in zip(marks(root, "circle", "report trusted"), trusted)])
    bound = root.find(f".//{SVG}g[@class='bound']")
    lines = [float(line.get("y1")) for line in bound.findall(SVG + "line")]
    assert len(lines) == 2 and abs(lines[0] - y(10)) < 0.3 and abs(lines[1] - y(8)) < 0.3
    assert "threshold above 10 runs flush, deadband 2" in bound.find(SVG + "title").text
    assert [seq for _, seq in marks(root, "g", "action")] == [s for s, _ in of(run.records, "action", "plain")]


def test_since_a_record_or_a_duration(run):
    """Issue 14 item 5, CLI-09's --since: --since SEQ (17, #17, --since=17) charts the venture's records after
    that one; --since DURATION the last span; a bad --since is usage (64) saying what to write, and a span with
    no reports is refused (65) saying so."""
    reports = [s for s, _ in of(run.records, "report", "room")]
    after = reports[2]
    for args in (["--since", str(after)], ["--since", f"#{after}"], [f"--since={after}"], ["--since", str(after), "--"]):
        root = chart(run, "room", *args)
        shown = sorted(s for _, s in marks(root, "circle", "report trusted") + marks(root, "path", "report"))
        assert shown == [s for s in reports if s > after], args
    root = chart(run, "room", "--since", "1d")
    assert len(marks(root, "circle", "report trusted") + marks(root, "path", "report")) == len(reports)
    for since, words in (("1h30", "'1h30' is not a duration; write 90m"), ("soon", "--since 24h"),
                         ("0s", "more than zero"), ("-3", "not '-3'")):
        r = run.a.cli("chart", "room", "--since", since)
        assert r.returncode == 64 and words in r.stderr and r.stdout == "", (since, r)
    r = run.a.cli("chart", "room", "--since")
    assert r.returncode == 64 and "--since needs a duration or a record number" in r.stderr
    last = run.records[-1][0]
    r = run.a.cli("chart", "room", "--since", str(last))
    assert r.returncode == 65 and f"venture room has no reports after #{last}" in r.stderr and r.stdout == "", r


def test_bad_input_gets_its_exit_code(run, home):
    """Issue 14 item 5, EXIT: an unknown venture is refused as the other commands refuse it (65, naming status);
    no venture name, a second one or an unknown option is usage (64); a home with no ledger is 66."""
    r = run.a.cli("chart", "nosuch")
    assert r.returncode == 65 and "no venture is named 'nosuch'" in r.stderr and "status lists them" in r.stderr, r
    assert run.a.cli("chart", "self").returncode == 65
    for args in ([], ["room", "plain"], ["room", "--width", "3"]):
        r = run.a.cli("chart", *args)
        assert r.returncode == 64 and "usage: avsm chart VENTURE [--since DURATION|SEQ]" in r.stderr, (args, r)
    r = Avsm(run.a.bindir, home).cli("chart", "room")
    assert r.returncode == 66 and "does not exist" in r.stderr, r
    r = run.a.cli("chart", "--help")
    assert r.returncode == 0 and "chart VENTURE [--since DURATION|SEQ]" in r.stdout


def test_the_chart_is_the_same_with_avsmd_stopped(run):
    """Issue 14 item 5: chart reads the ledger read-only, so it works while avsmd runs and once it has
    stopped, with the same marks for the same records."""
    assert run.running.returncode == 0, run.running
    before = ET.fromstring(run.running.stdout)
    after = chart(run, "room")
    for tag, cls in (("circle", "report trusted"), ("path", "report"), ("g", "action"), ("g", "ask")):
        was, now = [s for _, s in marks(before, tag, cls)], [s for _, s in marks(after, tag, cls)]
        assert was and now[:len(was)] == was, (cls, was, now)
    assert not os.path.exists(os.path.join(run.a.home, "sock")) and run.a.cli("status").returncode == 69


def test_hostile_text_from_the_ledger_is_escaped(run):
    """Issue 14 item 5: a metric named with markup and quotes, and a failed report printing markup and control
    characters (escape sequences), leave a chart that still parses, is ASCII only, and shows the text as written
    (control characters as \\x..)."""
    r = run.a.cli("chart", "room")
    assert r.stdout.isascii() and "\x1b" not in r.stdout and "\x01" not in r.stdout
    root = ET.fromstring(r.stdout)
    assert root.find(SVG + "title").text.startswith(f"room: {HOSTILE_METRIC}, ")
    assert [t.text for t in root.iter(SVG + "text")][0] == f"room: {HOSTILE_METRIC}"
    failed = next(el for el, _ in marks(root, "path", "report failed"))
    title = failed.find(SVG + "title").text
    assert 'bad <b>&amp; "x" \\x01\\x1b[31m' in title, title


def test_the_pure_chart_escapes_what_xml_cannot_hold():
    """Issue 14 item 5: chart_svg, records in and SVG out, writes a summary holding every control character,
    a lone surrogate, U+FFFF, a bidi override and markup as text a parser reads back, \\x.. and \\u.... in place
    of what XML cannot hold; a value far off the scale sits at the plot's edge."""
    mandate = {"kind": "mandate", "claim": "declared", "venture": "v", "directory": "/x", "sha256": "0",
               "summary": "m", "text": "purpose: p\nmetric: m\ncontroller: {kind: threshold, below: 3, action: up}\n"
                                       "cadence: 1s\npermitted:\n  - {name: up, run: ./up, cap: 1/hour, reversible: true}\n"}
    nasty = "".join(map(chr, range(32))) + "\x7f\ud800\uffff\u202e<&>\"'\u00e9"
    report = lambda v, status="trusted", summary="m": {
        "kind": "report", "claim": "measured", "venture": "v", "metric": "m", "value": v, "status": status,
        "plausible": status == "trusted", "note": "", "summary": summary}
    records = [(2, 1000, report(5)), (3, 1010, report(1e300, "implausible", nasty)), (4, 1020, report(4)),
               (5, 1030, {"kind": "ask", "claim": "inferred", "venture": "v", "about": "model", "question": nasty,
                          "summary": nasty})]
    svg = avsm.chart_svg("v", [(1, 990, mandate)], records)
    assert svg.isascii()
    root = ET.fromstring(svg)
    ask = marks(root, "g", "ask")[0][0].find(SVG + "title").text
    assert ask.startswith("#5 ") and "\\x00\\x01" in ask and "\\x1f\\x7f\\ud800\\uffff\\u202e<&>\"'\u00e9" in ask
    el, seq = marks(root, "path", "report")[0]
    assert seq == 3 and el.get("class") == "report implausible off-scale"
    assert [s for _, s in marks(root, "circle", "report trusted")] == [2, 4]
    assert root.find(f".//{SVG}g[@class='bound']") is not None


@pytest.mark.parametrize("redirect", [">&-", ">/dev/full"], ids=["closed", "full"])
def test_unwritable_stdout_exits_74_without_a_traceback(run, redirect):
    """Issue 14 item 5, CLI-13, CLI-14: a chart to a closed or full standard output says so on standard error
    and exits 74; one whose reader goes away ends quietly."""
    argv = [sys.executable, os.path.join(run.a.bindir, "avsm"), "--home", run.a.home, "chart", "room"]
    r = subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh"] + argv, capture_output=True, text=True,
                       env=run.a.env, timeout=30)
    assert r.returncode == 74 and "standard output" in r.stderr and "Traceback" not in r.stderr, r
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run.a.env)
    p.stdout.close()                    # the reader is gone before the chart is written
    assert p.wait(30) == 0 and p.stderr.read() == b""
    p.stderr.close()


def test_each_mandate_draws_its_bound_while_it_was_in_force():
    """Issue 14 item 5, VENTURE (a new mandate replaces the old): a threshold's bound is drawn from the
    chart's start to the next mandate's adoption, then that band until the model's mandate, which draws none;
    the line under the title names the mandate in force last, and one that no longer reads draws nothing."""
    def mandate(seq, at, controller):
        text = (f"purpose: p\nmetric: m\ncontroller: {controller}\ncadence: 1s\npermitted:\n"
                "  - {name: up, run: ./up, cap: 1/hour, reversible: true}\n"
                "  - {name: dn, run: ./dn, cap: 1/hour, reversible: true}\n")
        return seq, at, {"kind": "mandate", "claim": "declared", "venture": "v", "directory": "/x", "sha256": "0",
                         "summary": "m", "text": text}
    report = lambda seq, at, v: (seq, at, {"kind": "report", "claim": "measured", "venture": "v", "metric": "m",
                                           "value": v, "status": "trusted", "plausible": True, "note": "", "summary": "m"})
    mandates = [mandate(1, 100, "{kind: threshold, above: 10, action: up}"),
                mandate(5, 200, "{kind: band, low: 2, high: 8, below: up, above: dn}"),
                mandate(9, 300, "{kind: model}")]
    records = [report(2, 110, 5), report(3, 150, 12), report(6, 210, 4), report(10, 310, 3)]
    root = ET.fromstring(avsm.chart_svg("v", mandates, records))
    xs = {s: float(el.get("cx")) for el, s in marks(root, "circle", "report trusted")}
    x = lambda at: xs[2] + (at - 110) * (xs[3] - xs[2]) / 40         # the time scale, from two reports
    bound, band = root.find(f".//{SVG}g[@class='bound']"), root.find(f".//{SVG}g[@class='band']")
    assert bound.find(SVG + "title").text == "mandate #1: threshold above 10 runs up"
    line = bound.find(SVG + "line")
    assert float(line.get("x1")) < xs[2] and abs(float(line.get("x2")) - x(200)) < 0.3
    rect = band.find(SVG + "rect")
    assert abs(float(rect.get("x")) - x(200)) < 0.5 and abs(float(rect.get("x")) + float(rect.get("width")) - x(300)) < 0.5
    assert len(root.findall(f".//{SVG}g[@class='controller']/{SVG}g")) == 2
    assert [t.text for t in root.iter(SVG + "text")][2].startswith("controller (mandate #9): model")
    broken = (12, 305, {"kind": "mandate", "claim": "declared", "venture": "v", "text": "controller: ["})
    root = ET.fromstring(avsm.chart_svg("v", mandates + [broken], records))
    assert "mandate #12 does not read, so no bound is drawn" in [t.text for t in root.iter(SVG + "text")][2]


def test_the_readme_shows_a_real_chart():
    """Issue 14 (done when: the README shows a chart): README.md links contrib/chart-example.svg, a chart avsm
    chart wrote from a real run: it parses, is small, and holds trusted points, lever runs and asks."""
    readme = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md"), encoding="utf-8").read()
    assert "](contrib/chart-example.svg)" in readme and "avsm chart VENTURE" in readme
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "contrib", "chart-example.svg")
    assert os.path.getsize(path) < 40_000
    root = ET.parse(path).getroot()
    assert marks(root, "circle", "report trusted") and marks(root, "g", "action") and marks(root, "g", "ask")


TANK = """\
purpose: Keep the tank between 2 and 8.
metric: level
controller: {kind: band, low: 2, high: 8, below: fill, above: drain}
cadence: 1s
permitted:
  - {name: fill, run: ./fill, cap: 5/hour, reversible: true}
  - {name: drain, run: ./drain, cap: CAP, reversible: true}
guards:
  - {name: errors, run: ./errors, above: 6}
"""
# 5, 12 (drain runs), 1 (fill runs), 12 and 12 (drain's cap is spent: stuck), then 5 for ever (back inside)
TANK_REPORT = """#!/bin/sh
n=$(cat count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > count
case $n in 1) echo 5;; 2) echo 12;; 3) echo 1;; 4|5) echo 12;; *) echo 5;; esac
"""
# 0 until the tank is back inside, then 9 once (past 6: the guard pauses the tank), then 0
TANK_ERRORS = """#!/bin/sh
n=$(cat count 2>/dev/null || echo 0)
if [ "$n" -ge 7 ] && [ ! -e tripped ]; then touch tripped; echo 9; else echo 0; fi
"""


def png_colours(png):
    """Return {(r, g, b): pixels} of a PNG, read by Pillow (which cairosvg itself needs)."""
    from PIL import Image
    import io
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return {rgb: n for n, rgb in image.getcolors(maxcolors=1 << 20)}, image


def test_the_chart_shows_pauses_stuck_stretches_guard_trips_mandates_and_each_lever(bindir):
    """Issue 22 item 7, CLI-08: a real run with two levers, a spent cap, a guard trip, a person's resume and a
    re-added mandate. Each lever has its own colour and legend entry; the stuck stretch is shaded from the
    refusal that said so to the first trusted report back inside; the pause from the guard's pause to the
    resume; the guard trip and the new mandate are labelled marks naming their seqs; bound labels do not rely
    on paint-order; and a real renderer (cairosvg) draws it, not blank, with each lever's colour in the pixels."""
    top = tempfile.mkdtemp(prefix="avt", dir="/tmp")
    a = Avsm(bindir, os.path.join(top, "h"))
    tank = make_venture(top, "tank", TANK.replace("CAP", "1/hour"), {
        "report": TANK_REPORT, "errors": TANK_ERRORS, "fill": "#!/bin/sh\nexit 0\n", "drain": "#!/bin/sh\nexit 0\n"})
    try:
        a.start()
        assert a.cli("add", tank).returncode == 0
        pause = a.wait_for(lambda rs: [s for s, _, r in rs if r["kind"] == "pause" and r.get("guard") == "errors"],
                           timeout=40, what="the guard's pause")[0]
        time.sleep(1.5)
        assert a.cli("resume", "tank").returncode == 0
        with open(os.path.join(tank, "mandate.yaml"), "w") as fh:
            fh.write(TANK.replace("CAP", "9/hour"))
        assert a.cli("add", tank).returncode == 0
        a.wait_for(lambda rs: len(of(rs, "mandate", "tank")) == 2 and of(rs, "report", "tank")[-1][0] > of(rs, "mandate", "tank")[1][0],
                   what="a report under the new mandate")
        code, _ = a.stop()
        assert code == 0, a.stderr()
        records = a.records()
        root = chart(type("R", (), {"a": a}), "tank")
    finally:
        if a.proc is not None and a.proc.poll() is None:
            a.stop()
    svg = a.cli("chart", "tank").stdout
    shutil.rmtree(top, ignore_errors=True)
    at = {s: t for s, t, _ in records}
    trusted = [(s, r) for s, r in of(records, "report", "tank") if r["status"] == "trusted"]
    xs = {s: float(el.get("cx")) for el, s in marks(root, "circle", "report trusted")}
    (s1, _), (s2, _) = trusted[0], trusted[-1]
    x = lambda seq: xs[s1] + (at[seq] - at[s1]) * (xs[s2] - xs[s1]) / (at[s2] - at[s1])

    # each lever its own colour, named in the legend
    runs = {r["lever"]: s for s, r in of(records, "action", "tank")}
    assert set(runs) == {"fill", "drain"}
    colour = {seq: el.get("fill") for el, seq in marks(root, "g", "action")}
    assert colour[runs["fill"]] != colour[runs["drain"]]
    legend = {t.text: t for t in root.iter(SVG + "text") if t.text in ("fill run", "drain run", "stuck", "paused",
                                                                      "guard trip", "new mandate")}
    assert set(legend) == {"fill run", "drain run", "stuck", "paused", "guard trip", "new mandate"}, legend

    # the stuck stretch: from drain's stuck refusal to the first trusted report back inside [2, 8]
    refusal = next(s for s, r in of(records, "refusal", "tank") if r.get("stuck") == "cap")
    inside = next(s for s, r in trusted if s > refusal and 2 <= r["value"] <= 8)
    (span, seq), = marks(root, "g", "span stuck")
    rect = span.find(SVG + "rect")
    assert seq == refusal and f"until #{inside}" in span.find(SVG + "title").text
    assert abs(float(rect.get("x")) - x(refusal)) < 1 and abs(float(rect.get("x")) + float(rect.get("width")) - x(inside)) < 1

    # the pause: from the guard's pause to the person's resume; the trip a labelled mark at the pause
    resume = next(s for s, r in of(records, "resume", "tank"))
    (span, seq), = marks(root, "g", "span paused")
    assert seq == pause and f"until #{resume}" in span.find(SVG + "title").text
    rect = span.find(SVG + "rect")
    assert abs(float(rect.get("x")) + float(rect.get("width")) - x(resume)) < 1
    (mark, seq), = marks(root, "g", "mark guard")
    assert seq == pause and mark.find(SVG + "text").text == "guard errors"
    second = of(records, "mandate", "tank")[1][0]
    (mark, seq), = marks(root, "g", "mark mandate")
    assert seq == second and mark.find(SVG + "text").text == f"mandate #{second}"
    assert abs(float(mark.find(SVG + "line").get("x1")) - x(second)) < 1

    # the y axis starts at 0 (the tank never went below it), the bound labels are drawn twice, no paint-order
    assert "paint-order" not in svg
    ticks = [t.text for t in root.find(f"{SVG}g[@class='axes']").iter(SVG + "text") if re.fullmatch(r"-?[0-9.]+", t.text or "")]
    assert ticks[0] == "0", ticks
    halo, shown = root.find(f"{SVG}g[@class='controller-halo']"), root.find(f"{SVG}g[@class='controller-labels']")
    assert [t.text for t in halo] == [t.text for t in shown] and len(shown) == 4

    try:
        import cairosvg
    except (ImportError, OSError) as err:       # OSError: cairocffi found no libcairo
        pytest.skip(f"cairosvg cannot load ({err}; .ci/run installs it from the package index): the chart is "
                    "not rendered in a real renderer")
    colours, image = png_colours(cairosvg.svg2png(bytestring=svg.encode()))
    assert image.size == (960, int(root.get("height"))) and len(colours) > 50          # not blank
    for lever in ("fill", "drain"):
        rgb = tuple(int(colour[runs[lever]][i:i + 2], 16) for i in (1, 3, 5))
        assert colours.get(rgb, 0) > 20, (lever, rgb)
    for what, rgb in (("paused", (231, 231, 231)), ("stuck", (248, 236, 204))):      # 20% of each over white
        rect = marks(root, "g", f"span {what}")[0][0].find(SVG + "rect")
        middle = float(rect.get("x")) + float(rect.get("width")) / 2
        pixels = [image.getpixel((int(middle) + dx, int(float(rect.get("y"))) + 30)) for dx in (-3, 0, 3)]
        assert sum(all(abs(p - q) <= 2 for p, q in zip(pixel, rgb)) for pixel in pixels) >= 2, (what, pixels)
