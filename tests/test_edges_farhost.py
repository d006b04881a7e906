"""What comes back from a far host is data (issue 32 items 3-5, issue 37 items 1 and 3): through `avsm --host` and
`avsm fleet`, a far host's bytes are shown escaped as local output is, every line it sends stays under its name,
every hint in it names that host, its output is capped, and a host that says nothing is 68 within its timeout.

The far host is faked by a program given as AVSM_SSH (FAKE below: it answers as told, per host, from a JSON file);
where the edge is ssh itself, the real sshd of tests/test_remote.py is used. The client is the real one."""

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from conftest import installed_avsm, write
from test_remote import fleet  # noqa: F401  (the real sshd and its two homes, for the rows where ssh is the edge)

FAKE = r'''#!PYTHON -S
"""A far host: reads the ping (or a relayed request), then says what FAKE_DIR/DEST.json tells it to."""
import json, os, sys, time
args = sys.argv[1:]
dest = args[args.index("--") + 1]
with open(os.path.join(os.environ["FAKE_DIR"], dest + ".json")) as fh:
    spec = json.load(fh)
first = sys.stdin.readline()
time.sleep(spec.get("silent", 0))
if spec.get("ping", True) and '"ping"' in first:
    sys.stdout.write('{"out": "avsmd 0.1.0", "exit": 0}\n')
if "relay" in spec and '"cmd"' in first and '"ping"' not in first:
    sys.stdout.write(spec["relay"])
sys.stdout.flush()
for text, times, pause in spec.get("out", []):
    for _ in range(times):
        sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass"))
    sys.stdout.flush()
    time.sleep(pause)
sys.stderr.write(spec.get("err", ""))
sys.exit(spec.get("code", 0))
'''
ESC_OUT = "title \x1b]0;owned\x07, clipboard \x1b]52;c;aGk=\x07, clear \x1b[2J\n"

def status_rows(*rows):
    """Status rows laid out as avsm lays them out on one host: NAME: STATE, the value, the rest, in columns."""
    head, value = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    return "".join(f"{h.ljust(head)}  {v.ljust(value)}  {rest}".rstrip() + "\n" for h, v, rest in rows)


ROWS = [("web: running", "5 (3s ago)", "▄  reset: 0 of 2 per 1h"),
        ("a: paused", "no trusted report", "▄  asks: 1 (#4)"), ("longername: running", "12345 (2m ago)", "▄▅")]
STATUS_ROWS = [status_rows(ROWS[0]), status_rows(*ROWS[1:])]
LINED_UP = "".join(f"{n.ljust(8)}  " + status_rows(*ROWS).splitlines()[i] + "\n"
                   for i, n in enumerate(["web1", "evil-two", "evil-two"]))


@pytest.fixture
def far(tmp_path):
    """A fake ssh (AVSM_SSH), a home for its per-host answers, and a fleet file; returns a runner."""
    d = str(tmp_path)
    fake = write(os.path.join(d, "fake-ssh"), FAKE.replace("PYTHON", sys.executable), 0o755)

    def run(args, hosts, fleet_text=None, timeout=30, env=None, **kw):
        for dest, spec in hosts.items():
            write(os.path.join(d, dest + ".json"), json.dumps(spec))
        environ = dict(os.environ, AVSM_SSH=fake, FAKE_DIR=d, XDG_CONFIG_HOME=os.path.join(d, "cfg"), **(env or {}))
        environ.pop("AVSMD_HOME", None)
        if fleet_text is not None:
            write(os.path.join(d, "cfg", "avsm", "fleet.yaml"), fleet_text.replace("FAKE", fake))
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-S", installed_avsm(), *args], capture_output=True, timeout=timeout,
                              env=environ, **kw)
        done.took = time.monotonic() - t0
        done.out, done.err = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
        return done
    run.dir, run.fake = d, fake
    return run


TWO = "hosts: [web1, evil]\n"

# (id, argv, far hosts' answers, fleet file, exit code, patterns that must match the output, patterns that must not)
CASES = [
    # issue 32 item 3: escape sequences from far, on standard output and standard error, escaped as local output is
    ("escape-stdout", ["--host", "evil", "status"], {"evil": {"out": [[ESC_OUT, 1, 0]]}}, None, 0,
     [r"title \\x1b\]0;owned\\x07, clipboard \\x1b\]52;c;aGk=\\x07, clear \\x1b\[2J"], ["\x1b", "\x07"]),
    ("escape-stderr", ["--host", "evil", "status"],
     {"evil": {"err": "avsm: " + ESC_OUT + "a traceback \x1b[2J\n", "code": 65}}, None, 65,
     [r"avsm: evil: title \\x1b\]0;owned", r"evil: a traceback \\x1b\[2J"], ["\x1b", "\x07"]),
    ("escape-fleet", ["fleet", "status"], {"web1": {"out": [["web: running\n", 1, 0]]},
                                           "evil": {"out": [[ESC_OUT, 1, 0]], "err": "\x1b]0;x\x07\n"}}, TWO, 0,
     [r"evil  title \\x1b\]0;owned\\x07", r"evil  \\x1b\]0;x\\x07"], ["\x1b", "\x07"]),
    ("chart-to-a-file-as-sent", ["--host", "evil", "chart", "shop"],
     {"evil": {"out": [["<svg><title>avsm approve 4 \\x1b</title></svg>\n", 1, 0]]}}, None, 0,
     [r"^<svg><title>avsm approve 4 \\x1b</title></svg>\n$"], []),
    # issue 32 item 4: every line under its host's name, headers made here, hints naming the host, a cap
    ("asks-spoof", ["fleet", "asks"],
     {"web1": {"out": [["no open asks\n", 1, 0]]},
      "evil": {"out": [["#3  shop  drain  drain it?\nweb1:7  shop  drain  (really from evil)\n== web1\n", 1, 0]]}},
     TWO, 0, [r"(?m)^evil:3  shop  drain  drain it\?$", r"(?m)^evil  web1:7  shop", r"(?m)^web1  no open asks$",
              r"(?m)^evil  == web1$"], [r"(?m)^web1:7", r"(?m)^== web1"]),
    ("summary-spoof-and-hint", ["fleet", "summary"],
     {"web1": {"out": [["summary of the last 24h\n", 1, 0]]},
      "evil": {"out": [["== web1\n#4 ask: drain? -> avsm approve 4 or avsm deny 4\n"
                        "python3 /opt/avsm/avsm.py --home /srv approve 5; avsm --host web1 approve 6\n", 1, 0]]}},
     TWO, 0, [r"(?m)^== web1\n  summary of the last 24h\n== evil\n  == web1\n",
              r"-> avsm --host evil approve 4 or avsm --host evil deny 4",
              r"  avsm --host evil approve 5; avsm --host evil approve 6"],
     [r"(?m)^== web1\n  == web1", r"[^-]avsm approve", r"--host web1 approve"]),
    ("host-hint", ["--host", "evil", "status"],
     {"evil": {"out": [["shop: paused; avsm resume shop, then avsm --host web1 approve 3\n", 1, 0]]}}, None, 0,
     [r"avsm --host evil resume shop, then avsm --host evil approve 3"], [r"avsm resume", "web1"]),
    ("far-line-keeps-a-url", ["--host", "evil", "status"],
     {"evil": {"out": [["see https://example.com/avsm/status and the-avsm approve\n", 1, 0]]}}, None, 0,
     [r"see https://example.com/avsm/status and the-avsm approve"], [r"--host"]),
    # issue 32 item 5: the connection and the first reply within the fleet file's timeout; tail streams past it
    ("silent-host", ["--host", "evil", "status"], {"evil": {"silent": 60}},
     "hosts: [{host: evil, timeout: 2s}]\n", 68, [r"avsm: evil: no answer within 2s", r"`FAKE evil true`"], []),
    ("silent-host-top-timeout", ["--host", "evil", "tail"], {"evil": {"silent": 60}},
     "timeout: 2s\nhosts: [evil]\n", 68, [r"avsm: evil: no answer within 2s"], []),
    ("tail-streams-past-it", ["--host", "evil", "tail", "-f"],
     {"evil": {"out": [["#1 one\n", 1, 3], ["#2 two\n", 1, 0]]}}, "hosts: [{host: evil, timeout: 2s}]\n", 0,
     [r"^#1 one\n#2 two\n$"], []),
    # issue 37 item 3: the messages point at the right place
    ("says-nothing", ["--host", "plain", "status"], {"plain": {"ping": False}}, None, 69,
     [r"avsm: plain: 'avsm bridge' ran there and said nothing"], []),
    ("not-a-bridge", ["--host", "plain", "status"], {"plain": {"ping": False, "out": [["$ \x1b[2J\n", 1, 0]]}},
     None, 69, [r"avsm: plain: the bridge answered with no JSON object a line; is it avsm's\?"], ["\x1b"]),
    ("fleet-says-nothing", ["fleet", "status"], {"web1": {"ping": False}, "evil": {}}, TWO, 69,
     [r"(?m)^web1  'avsm bridge' ran there and said nothing"], []),
    ("no-open-asks-named", ["fleet", "asks"],
     {"web1": {"out": [["no open asks\n", 1, 0]]}, "evil": {"out": [["no open asks\n", 1, 0]]}}, TWO, 0,
     [r"(?m)^web1  no open asks\nevil  no open asks$"], [r"(?m)^no open asks"]),
    ("status-lines-up", ["fleet", "status"],
     {"web1": {"out": [[STATUS_ROWS[0], 1, 0]]}, "evil": {"out": [[STATUS_ROWS[1], 1, 0]]}},
     "hosts: [web1, {host: evil, name: evil-two}]\n", 0,
     ["^" + re.escape(LINED_UP) + "$"], []),
    ("fleet-before-the-verb", ["--fleet", "FLEETFILE", "fleet", "status"],
     {"web1": {"out": [["web: running\n", 1, 0]]}, "evil": {"out": [["evil: running\n", 1, 0]]}}, TWO, 0,
     [r"(?m)^web1  web: running$"], []),
    ("down-hint-runs-what-avsm-ran", ["--host", "web1", "status"],
     {"web1": {"ping": False, "err": "ssh: connect to host web1 port 2222: Connection refused\n", "code": 255}},
     "hosts: [{host: web1, ssh: FAKE -p 2222}]\n", 68, [r"`FAKE -p 2222 web1 true` tries by hand"],
     [r"`ssh web1 true`"]),
    ("typo-of-a-fleet-name", ["--host", "fra", "status"],
     {"fra": {"ping": False, "err": "ssh: Could not resolve hostname fra: Name or service not known\n",
              "code": 255}}, "hosts: [{host: web1, name: far}]\n", 68,
     [r"'fra' is no name in \S+fleet.yaml \(did you mean 'far'\?\)"], []),
    ("fleet-name-with-a-home", ["--host", "far:/srv/other", "status"],
     {"web1": {"out": [["shop: running\n", 1, 0]]}}, "hosts: [{host: web1, name: far}]\n", 0,
     [r"^shop: running\n$"], []),
]


@pytest.mark.parametrize("args, hosts, fleet_text, code, must, must_not",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_far_host_is_data(far, args, hosts, fleet_text, code, must, must_not):
    """Issue 32 items 3-5 and issue 37 item 3, CLI-01, CLI-12 (no colour, nor any escape sequence, from far):
    each hostile or broken far host of the table gives its exit code and one clear view: its bytes escaped,
    its lines under its name, its hints naming it, its silence 68 within its timeout (the fleet file's, here
    2 s), its saying nothing no success. Rows escape-fleet, chart-to-a-file-as-sent, far-line-keeps-a-url and
    tail-streams-past-it held before the change and keep holding."""
    fleet_file = os.path.join(far.dir, "cfg", "avsm", "fleet.yaml")
    done = far([fleet_file if a == "FLEETFILE" else a for a in args], hosts, fleet_text)
    text = (done.out + done.err).replace(far.fake, "FAKE")
    assert done.returncode == code, (done.returncode, text)
    assert done.took < 8, f"took {done.took:.1f} s"
    for pattern in must:
        assert re.search(pattern, done.out if pattern.startswith("^") else text), (pattern, text)
    for pattern in must_not:
        assert not re.search(pattern, text), (pattern, text)
    assert "Traceback" not in text


def test_one_host_output_is_capped(far):
    """Issue 32 item 4: 100 MB from one host is cut at 4 MiB and said so in one line under its name; the client's
    memory stays small (it took 544 MB)."""
    line = "x" * 63 + "\n"
    spec = {"evil": {"out": [[line * 1024, 1600, 0]]}, "web1": {"out": [["web: running\n", 1, 0]]}}
    for dest, s in spec.items():
        write(os.path.join(far.dir, dest + ".json"), json.dumps(s))
    write(os.path.join(far.dir, "cfg", "avsm", "fleet.yaml"), "hosts: [web1, {host: evil, timeout: 60s}]\n")
    measure = ("import resource, subprocess, sys\n"
               f"done = subprocess.run([sys.executable, '-S', {installed_avsm()!r}, 'fleet', 'status'], "
               "stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
               "sys.stderr.write(done.stderr.decode())\n"
               "sys.stdout.write(f'{done.returncode} {len(done.stdout)} '"
               " f'{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
               "sys.stdout.write(done.stdout.decode()[-300:])\n")
    env = dict(os.environ, AVSM_SSH=far.fake, FAKE_DIR=far.dir, XDG_CONFIG_HOME=os.path.join(far.dir, "cfg"))
    done = subprocess.run([sys.executable, "-S", "-c", measure], capture_output=True, text=True, timeout=120, env=env)
    code, size, rss = done.stdout.splitlines()[0].split()
    assert code == "0", done.stderr
    assert 4 * 1024 * 1024 <= int(size) < 5 * 1024 * 1024 + 100000, size
    assert int(rss) < 120 * 1024, f"{int(rss) // 1024} MB"
    assert re.search(r"evil  its output was cut after 4 MiB: \d+ bytes more were not kept\n$", done.stdout), \
        done.stdout[-300:]


def pty_run(args, env, timeout=20):
    """Run the client on a terminal (approve --edit needs one); return (exit code, what it wrote there, stderr)."""
    main, side = pty.openpty()
    proc = subprocess.Popen(args, stdin=side, stdout=side, stderr=subprocess.PIPE, env=env)
    os.close(side)
    said, deadline = b"", time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if select.select([main], [], [], 0.1)[0]:
            try:
                said += os.read(main, 65536)
            except OSError:
                break
    if proc.poll() is None:
        proc.kill()
    code = proc.wait()
    os.close(main)
    return code, said.decode("utf-8", "replace"), proc.stderr.read().decode("utf-8", "replace")


@pytest.mark.parametrize("spec, code, words", [
    ({"relay": '{"exit": "\\u001b]0;owned\\u0007"}\n'}, 69, "exit '\\x1b]0;owned\\x07', which is no exit code"),
    ({"relay": '{"out": {"no": "text"}, "exit": 0}\n'}, 69, "no JSON object a line"),
    ({"relay": ""}, 69, "no JSON object a line ending in an exit code"),
    ({"silent": 60}, 68, "no answer within 2s"),
], ids=["exit-text", "out-not-text", "no-exit", "silent"])
def test_approve_edit_fetch_through_a_hostile_host(far, spec, code, words):
    """Issue 32 items 3 and 5: `approve --edit` fetches the ask's content through the bridge's relay: an answer
    whose exit is text (it was printed raw by Python's exit, code 1), one not avsm's, and a host that says
    nothing (it held for ever) are each one escaped line with 69 or 68, before any editor starts."""
    write(os.path.join(far.dir, "evil.json"), json.dumps(spec))
    write(os.path.join(far.dir, "cfg", "avsm", "fleet.yaml"), "hosts: [{host: evil, timeout: 2s}]\n")
    env = dict(os.environ, AVSM_SSH=far.fake, FAKE_DIR=far.dir, XDG_CONFIG_HOME=os.path.join(far.dir, "cfg"),
               EDITOR="touch " + os.path.join(far.dir, "edited"))
    got, said, err = pty_run([sys.executable, "-S", installed_avsm(), "--host", "evil", "approve", "4", "--edit"], env)
    assert got == code, (got, said, err)
    assert words in err and "\x1b" not in err and "\x1b" not in said, (said, err)
    assert not os.path.exists(os.path.join(far.dir, "edited"))


@pytest.mark.parametrize("text, where, words", [
    ("timeout: 10\nhosts:\n  - web1\n", "1:10", "timeout is a duration, not the number 10; write 10s"),
    ("hosts:\n  - {host: web1, timeout: 30}\n", "2:27", "timeout is a duration, not the number 30; write 30s"),
    ("hosts:\n  - {host: web1, timeout: soon}\n", "2:27", "'soon' is not a duration"),
    ("ssh: 5\nhosts: [web1]\n", "1:1", "ssh must be text"),
    ("hosts:\n  - web1\n  - {host: db1}\n  - web1\n", "4:3", "web1 is in hosts twice (first at line 2)"),
    ("hosts:\n  - {host: db1, name: web}\n  - {host: db2, name: web}\n", "3:3", "web is in hosts twice"),
])
def test_a_fleet_file_points_at_where_it_is_wrong(far, text, where, words):
    """Issue 37 item 3, MANDATE-06 (a duration is a number and one unit): a top-level value is refused where
    it is written, a bare number as a timeout says the duration to write at the value's column, and a host
    named twice is refused at the second (it was taken silently), each 78."""
    done = far(["fleet", "status"], {}, text)
    assert done.returncode == 78 and f"fleet.yaml:{where}: {words}" in done.err, done.err


def test_a_fleet_file_not_in_utf8_is_refused_where_the_byte_is(far):
    """Bad input: a fleet file with a byte that is not UTF-8 (a Latin-1 é in a comment) is 78 at its line and
    column, saying to save it as UTF-8, for fleet and for --host (it was a traceback and 70)."""
    path = os.path.join(far.dir, "cfg", "avsm", "fleet.yaml")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as fh:
        fh.write(b"hosts: [web1]\n# caf\xe9\n")
    for args in (["fleet", "status"], ["--host", "web1", "status"]):
        done = far(args, {})
        assert done.returncode == 78, (args, done.returncode, done.err)
        assert done.err == f"avsm: {path}:2:6: not UTF-8; save the file as UTF-8\n", (args, done.err)


def test_a_host_with_two_bad_witness_keys_is_refused_the_same_way_every_run(far):
    """Bad input: a host whose principal and namespace are both not text is 78 naming the first of them in the
    fleet file's order of witness keys, whatever the run's string hashing (they were read from a set, so the
    key named could change from one run to the next)."""
    text = "hosts:\n  - {host: web1, principal: [1], namespace: [2]}\n"
    said = set()
    for seed in ("0", "1", "2", "3", "4", "5"):
        done = far(["fleet", "status"], {}, fleet_text=text, env={"PYTHONHASHSEED": seed})
        assert done.returncode == 78, done.err
        said.add(done.err)
    assert len(said) == 1 and "principal" in said.pop(), said


def test_a_fleet_file_that_is_a_fifo_is_refused_at_once(far):
    """Bad input: a fleet file that is a FIFO (its open would wait for ever) is 66 at once for fleet and
    --fleet, saying it is no regular file; --host NAME, which only looks for its name there, goes on without it
    (they hung)."""
    path = os.path.join(far.dir, "cfg", "avsm", "fleet.yaml")
    os.makedirs(os.path.dirname(path))
    os.mkfifo(path)
    for args in (["fleet", "status"], ["--fleet", path, "fleet", "status"]):
        done = far(args, {}, timeout=10)
        assert done.returncode == 66 and f"{path} cannot be read (it is a FIFO, not a regular file)" in done.err, \
            (args, done.err)
    done = far(["--host", "web1", "status"], {"web1": {"out": [["web1 ok\n", 1, 0]]}}, timeout=10)
    assert done.returncode == 0 and "web1 ok" in done.out and "FIFO" not in done.err, (done.out, done.err)


def test_fleet_given_to_a_command_that_takes_none_is_named(far):
    """Issue 37 item 3: --fleet before the verb works for fleet and --host; anywhere else it is 64 saying what it
    is for (before, the list of leading options left out --host)."""
    done = far(["--fleet", "x.yaml", "status"], {})
    assert done.returncode == 64 and "--fleet FILE names the fleet file of avsm fleet and of --host NAME" in done.err
    done = far(["--bogus", "status"], {})
    assert done.returncode == 64 and "--host HOST, --fleet FILE" in done.err, done.err


def test_through_a_real_sshd_a_silent_bridge_and_an_empty_one(fleet, tmp_path):  # noqa: F811
    """Issue 32 item 5, issue 37 item 3, through the real sshd: a key that authenticates and then runs a command
    that says nothing is 68 within the fleet file's timeout (it held for ever); one whose command says nothing
    and exits 0 (AVSM_BRIDGE=true) is 69, no success; a fleet name with a home (NAME:HOME) reaches that home
    with the fleet file's ssh options; a fleet summary's hint for a far ask names the host."""
    home, tank_home = fleet.homes
    path = write(str(tmp_path / "f.yaml"), f"hosts:\n  - {{host: plain, name: quiet, timeout: 2s}}\n"
                                           f"  - {{host: host1, name: far, ssh: ssh -F {fleet.config}}}\n"
                                           f"  - {{host: 'host2:{tank_home}', name: tank}}\n")
    t0 = time.monotonic()
    silent = fleet.avsm("--fleet", path, "--host", "quiet", "status", env={"AVSM_BRIDGE": "sleep 60"}, timeout=30)
    assert silent.returncode == 68 and "quiet: no answer within 2s" in silent.stderr, silent.stderr
    assert time.monotonic() - t0 < 8
    empty = fleet.avsm("--host", "plain", "status", env={"AVSM_BRIDGE": "true"})
    assert empty.returncode == 69 and "said nothing" in empty.stderr, (empty.stdout, empty.stderr)
    there = fleet.avsm("--fleet", path, "--host", f"far:{home}", "status", env={"AVSM_SSH": "ssh"})
    assert there.returncode == 0 and there.stdout.startswith("shop: "), there.stderr
    summary = fleet.avsm("--fleet", path, "fleet", "summary", env={"AVSM_BRIDGE": "sleep 60"})
    ask = [s for s, _, r in fleet.daemons[1].records() if r["kind"] == "ask"][0]
    assert f"-> avsm --host tank approve {ask} or avsm --host tank deny {ask}" in summary.stdout, summary.stdout
    assert not re.search(rf"(?<!--host tank )\bavsm (approve|deny) {ask}", summary.stdout), summary.stdout
