"""One page for a home or a fleet (issue 35 items 3 and 4): `avsm page -o FILE` and `avsm fleet page -o FILE` write
one self-contained HTML file (inline CSS, no script, nothing fetched), in whole (beside it, then renamed): first
what needs a person (open asks with the command that answers each, ventures stuck, paused or implausible with
their way out, hosts not reached and why), then every venture: state in words and a shape, value, bounds, a line
of its last trusted values, its last actions with their proofs under <details>, the newest checkpoint and whether
it is signed. Far hosts send facts (JSON, the `page` request, which a read-only key may send); the page is made
here, every text escaped. `page: {path, every}` in config.yaml has the warden write it.

The page is opened in a real browser, Debian's chromium (`--headless --dump-dom`, `--screenshot`), which .ci/run
installs; each browser test skips with one line where it is missing."""

import json
import os
import plistlib
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import pytest

import avsm
from conftest import Avsm, make_venture, write
from test_edges_farhost import FAKE
from test_remote import fleet  # noqa: F401  (a real sshd and its two homes: shop on the first, tank on the second)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here: apt-get install chromium "
                                                             "(.ci/run does) to open the page in a real browser")
HOSTILE = "<script>alert(1)</script>"

TANK = """\
purpose: Keep the level low.
metric: level
controller: {kind: threshold, above: 10, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 1/hour, reversible: false}
"""
EVIL = TANK.replace("reversible: false", "reversible: true")


def browser(path, *args):
    """Run headless chromium on file://path; return its standard output (bytes)."""
    with tempfile.TemporaryDirectory(prefix="avc") as profile:
        done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                               *args, f"file://{path}"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dom(path):
    return browser(path, "--dump-dom").decode()


def png_colours(path):
    """The distinct pixels of an 8-bit RGB(A) PNG, unfiltered here (no imaging library needed)."""
    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, head = 8, b"", None
    while at < len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + size]
        head = body if kind == b"IHDR" else head
        idat += body if kind == b"IDAT" else b""
        at += size + 12
    width, height, depth, colour = struct.unpack(">IIBB", head[:10])
    assert depth == 8 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a, b = line[i - bpp] if i >= bpp else 0, prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pred = {0: 0, 1: a, 2: b, 3: (a + b) // 2,
                    4: a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c)
                    else c}[kind]
            line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return {row[i:i + 3] for row in rows[::4] for i in range(0, stride, bpp * 4)}


def facts(**over):
    """A home's page facts as avsmd sends them, every text hostile unless `over` says."""
    venture = {"name": HOSTILE, "state": "stuck", "why": f"lower cannot run ({HOSTILE}): avsm resume x",
               "value": 20, "age": 3.0, "report": HOSTILE, "bounds": [10], "values": [1, 5, 20],
               "asks": [{"seq": 4, "question": HOSTILE}],
               "actions": [{"seq": 3, "at": 1e9, "summary": HOSTILE, "proof": {HOSTILE: [HOSTILE]}}]}
    return dict({"schema": 1, "home": HOSTILE, "at": 1e9, "stopped": False, "ventures": [venture],
                 "checkpoint": {"seq": 2, "at": 1e9, "signed": True}}, **over)


def test_every_text_of_the_facts_is_escaped():
    """Issue 35 item 3: a venture's name, state's cause, report, levers, ask, action and proof, a host's
    name and why it is not reached: each reaches the page escaped; the page holds no script and fetches nothing."""
    page = avsm.page_html([(HOSTILE, facts(), None, "avsm --host h"), ("dead", None, HOSTILE, "avsm --host dead")], 1e9)
    assert "<script" not in page and page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 12, page
    assert "avsm --host h approve 4" in page and "avsm --host h deny 4" in page
    assert "avsm --host h resume x" in page             # the way out names the host it runs on
    assert "checkpoint #2" in page and "signed" in page and "src=" not in page and "href=" not in page


DEEP = json.loads("[" * 90 + "]" * 90)


def answer(facts):
    """avsmd's answer to the page request, as its socket or a bridge sends it."""
    return (json.dumps({"out": json.dumps(facts)}) + '\n{"exit": 0}\n').encode()


@pytest.mark.parametrize("change, says", [
    ({"schema": 2}, "schema is not 1"),
    ({"ventures": [dict(facts()["ventures"][0], value="20")]}, "facts['ventures'][0]['value'] is no float"),
    ({"ventures": [dict(facts()["ventures"][0], value=10 ** 400)]}, "['value'] is no float"),
    ({"ventures": [dict(facts()["ventures"][0], values=[float("nan")])]}, "facts['ventures'][0]['values'][0] is no"),
    ({"ventures": [dict(facts()["ventures"][0], name="\ud800")]}, "facts['ventures'][0]['name'] is no str"),
    ({"stopped": 0}, "facts['stopped'] is no bool"),
    ({"checkpoint": {"seq": True, "at": 1, "signed": True}}, "facts['checkpoint']['seq'] is no int"),
    ({"ventures": [{"name": "a"}]}, "facts['ventures'][0] is a mapping, not as {\"name\""),
    ({"ventures": {"a": 1}}, "facts['ventures'] is a mapping, not as [{"),
    ({"ventures": [dict(facts()["ventures"][0], actions=[{"seq": 1, "at": 1, "summary": "", "proof": DEEP}])]},
     "facts['ventures'][0]['actions'][0]['proof'] is nested deeper than 64 levels"),
])
def test_facts_that_do_not_hold_are_refused_saying_where(change, says):
    """Issue 35 item 3: what a far host sends for the page is checked before anything of it is shown."""
    found, problem, code = avsm.page_answer(0, answer(facts(**change)))
    assert found is None and code == 69 and says in problem, problem
    assert avsm.page_answer(0, answer(facts()))[0] == facts()


@pytest.mark.parametrize("text, where, says", [
    ("page: /srv/avsm.html\n", "1:1", "page is a mapping, as page: {path:"),
    ("page: {every: 1m}\n", "1:1", "page has no 'path'"),
    ("page: {path: avsm.html}\n", "1:8", "path is a file's absolute path"),
    ("page: {path: /p/a.html, evry: 1m}\n", "1:25", "did you mean 'every'"),
    ("page: {path: /p/a.html, every: 0s}\n", "1:25", "more than zero"),
])
def test_a_page_key_that_does_not_hold_is_refused_with_the_fix(text, where, says):
    """CONFIG-10, issue 35 item 3: page: is checked like every config key, 78 at file:line:col with the fix."""
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_config(text, "c.yaml")
    assert err.value.code == 78 and str(err.value).startswith(f"c.yaml:{where}: ") and says in str(err.value)
    cfg = avsm.parse_config("page: {path: /p/a.html}\n", "c.yaml")
    assert cfg["page"] == {"path": "/p/a.html", "every": 60}
    assert avsm.parse_config(avsm.format_config(cfg), "printed.yaml") == cfg


def two_ventures(av, workdir):
    """tank, whose irreversible lever asks a person, and evil, whose report prints a script."""
    tank = make_venture(workdir, "tank", TANK, {"report": "#!/bin/sh\necho 20\n", "lower": "#!/bin/sh\nexit 0\n"})
    evil = make_venture(workdir, "evil", EVIL, {"report": f"#!/bin/sh\necho '{HOSTILE}'\n",
                                                 "lower": "#!/bin/sh\nexit 0\n"})
    return tank, evil


@needs_chromium
def test_the_page_of_a_home_in_a_real_browser(av, workdir):
    """Issue 35 item 3: a real avsmd's page, opened in chromium: both ventures, the tank's ask with the command that
    answers it, evil's report a text node (no script element in the DOM), mode 0644 and nothing left beside it;
    the screenshot is no blank page. With avsmd stopped, the page is what the ledger holds, and the exit is 69."""
    av.start()
    for d in two_ventures(av, workdir):
        assert av.cli("add", d).returncode == 0
    asks = av.wait_for(lambda rs: [s for s, _, r in rs if r["kind"] == "ask" and r["venture"] == "tank"])
    av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "report" and r["venture"] == "evil"])
    out = os.path.join(workdir, "www")
    os.makedirs(out)
    done = av.cli("page", "-o", os.path.join(out, "avsm.html"))
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stderr
    assert os.listdir(out) == ["avsm.html"] and os.stat(os.path.join(out, "avsm.html")).st_mode & 0o777 == 0o644
    tree = dom(os.path.join(out, "avsm.html"))
    assert "<script" not in tree and "&lt;script&gt;alert(1)&lt;/script&gt;" in tree, tree
    assert f"approve {asks[0]}</code>" in tree and f"deny {asks[0]}</code>" in tree
    assert "</b> tank<br>" in tree and "</b> evil<br>" in tree and "implausible" in tree
    shot = os.path.join(workdir, "shot.png")
    browser(os.path.join(out, "avsm.html"), f"--screenshot={shot}", "--window-size=1000,900")
    assert len(png_colours(shot)) > 20
    assert av.stop()[0] == 0
    stopped = av.cli("page", "-o", os.path.join(out, "avsm.html"))
    assert stopped.returncode == 69
    with open(os.path.join(out, "avsm.html")) as fh:
        page = fh.read()
    assert "no avsmd is running" in page and "was running" in page and "</b> tank<br>" in page


def test_page_refuses_what_it_cannot_write_and_a_usage(av, workdir):
    """Issue 35 item 3: -o is needed; a directory that is not there is 73 with the mkdir that fixes it, before
    avsmd is asked."""
    assert av.cli("page").returncode == 64
    done = av.cli("page", "-o", os.path.join(workdir, "no", "avsm.html"))
    assert done.returncode == 73 and "mkdir -p" in done.stderr, done.stderr


def test_the_warden_writes_the_page_when_due_and_a_missing_directory_is_78(av, workdir):
    """Issue 35 item 3, CONFIG-10: page: {path, every} has the warden write the page every `every`; a write that
    fails while avsmd runs is one line on its standard error, and one more once it works again; a path whose
    directory is not there is 78, with the fix, at avsmd -t, at avsmd's start and in avsm doctor."""
    path = os.path.join(workdir, "www", "avsm.html")
    os.makedirs(os.path.dirname(path))
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"), f"page: {{path: {path}, every: 1s}}\n")
    run = av.daemon_cmd("-t")
    assert run.returncode == 0 and f"page: written to {path} every 1s" \
        in run.stdout, run.stdout + run.stderr
    av.start()
    tank, _ = two_ventures(av, workdir)
    assert av.cli("add", tank).returncode == 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (os.path.exists(path) and "</b> tank<br>" in open(path).read()):
        time.sleep(0.1)
    assert "</b> tank<br>" in open(path).read()
    shutil.rmtree(os.path.dirname(path))        # while it runs: one line says so, and avsmd keeps running
    time.sleep(3)
    assert av.stderr().count(f"the page {path} cannot be written") == 1 and av.proc.poll() is None, av.stderr()
    os.makedirs(os.path.dirname(path))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not os.path.exists(path):
        time.sleep(0.1)
    assert os.path.exists(path) and f"the page {path} is written again" in av.stderr()
    assert av.stop()[0] == 0
    shutil.rmtree(os.path.dirname(path))
    for done in (av.daemon_cmd("-t"), av.cli("doctor"),
                 subprocess.run([av.python, *av.flags, os.path.join(av.bindir, "avsmd"), "--home", av.home],
                                capture_output=True, text=True, timeout=20, env=av.env)):
        assert done.returncode == 78 and f"page: the page's directory {os.path.dirname(path)} is not there; make it" \
            in done.stdout + done.stderr, done.stdout + done.stderr


@needs_chromium
def test_the_fleet_page_through_a_real_sshd_in_a_real_browser(fleet, bindir, tmp_path):  # noqa: F811
    """Issue 35 item 3: `fleet page` asks every host at once for its facts (a read-only key may), makes one page
    here: every host, each venture, the tank's ask with `avsm --host tank approve N`, a stuck venture and a
    paused one with their way out (naming their host), the stuck one's action with its proof, and a dead host
    with why it was not reached; the exit code says a host was not reached."""
    home, tank_home = fleet.homes
    av = Avsm(bindir, str(tmp_path / "h3")).start()
    try:
        for name in ("pump", "fan"):
            d = make_venture(str(tmp_path), name, EVIL.replace("cadence: 1s", "cadence: 2s"),
                             {"report": "#!/bin/sh\necho 20\n", "lower": "#!/bin/sh\nexit 0\n"})
            assert av.cli("add", d).returncode == 0
        assert av.cli("pause", "fan").returncode == 0
        av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "refusal" and r["venture"] == "pump"])
        path = write(str(tmp_path / "fleet.yaml"), f"timeout: 10s\nhosts:\n  - ro\n  - dead\n"
                                                    f"  - {{host: 'host2:{tank_home}', name: tank}}\n"
                                                    f"  - {{host: 'host1:{av.home}', name: web1}}\n")
        ask = next(s for s, _, r in fleet.daemons[1].records() if r["kind"] == "ask")
        page = str(tmp_path / "fleet.html")
        done = fleet.avsm("fleet", "--fleet", path, "page", "-o", page)
        assert done.returncode == 68, done.stderr
        tree = dom(page)
        for host in ("ro", "tank", "web1"):
            assert f"<h2>{host}</h2>" in tree, tree
        for venture in ("shop", "tank", "pump", "fan"):
            assert f"</b> {venture}<br>" in tree, tree
        assert f"avsm --host tank approve {ask}</code>" in tree and f"avsm --host tank deny {ask}</code>" in tree
        assert "dead: ssh could not reach avsm there" in tree
        assert "web1: pump: lower cannot run" in tree and "avsm --host web1 " in tree.split("web1: pump: ")[1]
        assert "web1: fan: avsm --host web1 resume fan starts it again" in tree
        assert "<summary>proof</summary>" in tree and '"trigger":' in tree.split("web1</h2>")[1]
        if os.environ.get("AVSM_SCREENSHOT"):       # the README's picture: AVSM_SCREENSHOT=contrib/fleet-page.png
            browser(page, f"--screenshot={os.environ['AVSM_SCREENSHOT']}", "--window-size=1000,1300")
    finally:
        assert av.stop()[0] == 0


def test_a_far_host_sends_facts_never_html(tmp_path):
    """Issue 35 item 3, issue 32: a far host's texts are shown as text, its facts checked; one that answers what is
    no page's facts is a host not reached, with why, and 69."""
    d = str(tmp_path)
    fake = write(os.path.join(d, "fake-ssh"), FAKE.replace("PYTHON", sys.executable), 0o755)
    write(os.path.join(d, "evil.json"), json.dumps({"relay": json.dumps({"out": json.dumps(facts())}) + '\n{"exit": 0}\n'}))
    write(os.path.join(d, "odd.json"), json.dumps({"relay": '{"out": "<svg onload=alert(1)>"}\n{"exit": 0}\n'}))
    write(os.path.join(d, "fleet.yaml"), "hosts: [evil, odd]\n")
    env = dict(os.environ, AVSM_SSH=fake, FAKE_DIR=d)
    page = os.path.join(d, "page.html")
    done = subprocess.run([sys.executable, avsm.__file__, "fleet", "--fleet", os.path.join(d, "fleet.yaml"), "page",
                           "-o", page], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 69, done.stderr
    with open(page) as fh:
        text = fh.read()
    assert "<script" not in text and "<svg onload" not in text and "&lt;script&gt;alert(1)" in text
    assert "odd: it sent no page&#x27;s facts of this avsm" in text, text
    assert "avsm --host evil approve 4" in text or "--host evil approve 4" in text


def test_contrib_runs_fleet_page_from_a_timer_and_the_readme_shows_one():
    """Issue 35 item 3: contrib/ holds a systemd service and timer (systemd-analyze verify passes where installed)
    and a launchd agent that run `avsm fleet page -o FILE`, each saying inside how to install it; the README
    shows a screenshot of a fleet's page, a PNG in contrib/."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    service, timer = (os.path.join(root, "contrib", f"avsm-page.{k}") for k in ("service", "timer"))
    assert re.search(r"^ExecStart=.*avsm fleet page -o \S+$", open(service).read(), re.M)
    assert re.search(r"^OnUnitActiveSec=", open(timer).read(), re.M) and "install" in open(service).read().lower()
    if shutil.which("systemd-analyze"):
        done = subprocess.run(["systemd-analyze", "verify", service, timer], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    path = os.path.join(root, "contrib", "io.aesv.avsm-page.plist")
    with open(path, "rb") as fh:
        plist = plistlib.load(fh)
    assert plist["ProgramArguments"][-4:-1] == ["fleet", "page", "-o"] and plist["StartInterval"] > 0
    assert "install" in open(path).read().lower()
    with open(os.path.join(root, "README.md")) as fh:
        assert "](contrib/fleet-page.png)" in fh.read()
    assert len(png_colours(os.path.join(root, "contrib", "fleet-page.png"))) > 20
