"""The far side of the ssh bridge, attacked (issue 32 items 1, 2, 11 and 12; issue 37 item 7): one table, a row
per hostile edge. Where the edge is ssh, the row goes through a real sshd on 127.0.0.1 with forced-command keys
(test_remote's way: a free port, a host key and authorized_keys made here); where it is the bridge's own standard
input, `avsm --home H bridge` is run directly and fed JSON lines; where it is this host alone, the real client
runs on the home. One real avsmd serves the home for the module; the ledger is read read-only.

The key lines: `full` (restrict, the bridge), `ro` (restrict, the bridge --read-only, this home pinned), `loose`
(the bridge without restrict, as a careless line is written). Every forced command runs a wrapper naming its own
cache directory and an $EDITOR that leaves a mark, so a row sees what the far host was made to write or run."""

import json
import os
import pty
import re
import resource
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

import pytest

from conftest import Avsm, check_ledger_safety, installed_avsm, make_venture, write
from test_remote import SSHD, free_port, keygen

SHOP = """\
purpose: Keep the count below ten.
metric: count
controller: {kind: threshold, above: 10, action: reset}
cadence: 1h
permitted:
  - {name: reset, run: ./reset, cap: 2/hour, reversible: true}
  - {name: note, run: ./note, cap: 5/hour, reversible: true, takes: text}
"""
TANK = """\
purpose: Keep the tank low.
metric: level
controller: {kind: threshold, above: 10, action: drain}
cadence: 1h
permitted:
  - {name: drain, run: ./drain, cap: 1/hour, reversible: false}
"""
EDGE = """\
purpose: Show what a chart does with markup.
metric: '<script>alert(1)</script> ]]> it''s'
controller: {kind: threshold, above: 10, action: poke}
cadence: 1h
permitted:
  - {name: poke, run: ./poke, cap: 1/hour, reversible: true}
"""
OK = "#!/bin/sh\nexit 0\n"
HOSTILE_REPORT = "#!/bin/sh\nprintf '\\033]0;owned\\007\\033[2J<script>alert(2)</script> ]]>\\n'\n"
NOTIFY = f"""#!{sys.executable}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "told.jsonl"), "a") as fh:
    fh.write(json.dumps({{"argv": sys.argv, "stdin": sys.stdin.read(), "event": os.environ.get("AVSM_EVENT")}}) + "\\n")
"""


class Edges:
    """A real sshd with three keys into this user, and one avsmd home with three ventures (an ask open)."""

    def __init__(self, top, bindir):
        self.top, self.port = top, free_port()
        self.home = os.path.join(top, "h")
        self.ssh_ok = os.path.exists(SSHD) and bool(shutil.which("ssh")) and bool(shutil.which("ssh-keygen"))
        write(os.path.join(top, "editor"), f"#!/bin/sh\ntouch {top}/edited\n", 0o755)
        self.fifo = os.path.join(top, "fifo")
        os.mkfifo(self.fifo)
        os.symlink("/dev/zero", os.path.join(top, "zero"))
        notify = write(os.path.join(top, "tell", "notify"), NOTIFY, 0o755)
        write(os.path.join(self.home, "config.yaml"), f"notify: {{run: {notify}, timeout: 5s}}\n")
        os.chmod(self.home, 0o700)
        self.av = Avsm(bindir, self.home)
        self.av.start()
        for name, mandate, files in (("shop", SHOP, {"report": "#!/bin/sh\necho 5\n", "reset": OK, "note": OK}),
                                     ("tank", TANK, {"report": "#!/bin/sh\necho 50\n", "drain": OK}),
                                     ("edge", EDGE, {"report": HOSTILE_REPORT, "poke": OK})):
            assert self.av.cli("add", make_venture(top, name, mandate, files)).returncode == 0
        self.av.wait_for(lambda rs: {r["venture"] for _, _, r in rs if r["kind"] == "report"}
                         >= {"shop", "tank", "edge"}, what="a report of each venture")
        self.ask = self.av.wait_for(lambda rs: [s for s, _, r in rs if r["kind"] == "ask"], what="the tank's ask")[0]
        if self.ssh_ok:
            self.start_sshd()

    def start_sshd(self):
        top = self.top
        host_pub = keygen(os.path.join(top, "hostkey"))
        keys = {name: keygen(os.path.join(top, name)) for name in ("full", "ro", "loose")}
        wrappers = {name: write(os.path.join(top, f"bridge-{name}"),
                                f"#!/bin/sh\nexport XDG_CACHE_HOME={top}/cache-{name} EDITOR={top}/editor "
                                f"VISUAL={top}/editor\nexec {sys.executable} -S {installed_avsm()} \"$@\"\n", 0o755)
                    for name in keys}
        write(os.path.join(top, "authorized_keys"),
              f'restrict,command="{wrappers["full"]} --home {self.home} bridge" {keys["full"]}\n'
              f'restrict,command="{wrappers["ro"]} --home {self.home} bridge --read-only" {keys["ro"]}\n'
              f'command="{wrappers["loose"]} --home {self.home} bridge" {keys["loose"]}\n')
        write(os.path.join(top, "known_hosts"), f"edgetest {' '.join(host_pub.split()[:2])}\n")
        user = __import__("pwd").getpwuid(os.getuid()).pw_name
        write(os.path.join(top, "sshd_config"),
              f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {top}/hostkey\n"
              f"AuthorizedKeysFile {top}/authorized_keys\nUsePAM no\nStrictModes no\nPidFile {top}/sshd.pid\n"
              f"PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
              f"PermitRootLogin prohibit-password\nAllowUsers {user}\n")
        self.config = write(os.path.join(top, "ssh_config"), "".join(
            f"Host {key}\n  HostName 127.0.0.1\n  Port {self.port}\n  User {user}\n  IdentityFile {top}/{key}\n"
            f"  IdentitiesOnly yes\n  HostKeyAlias edgetest\n  UserKnownHostsFile {top}/known_hosts\n"
            f"  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n" for key in keys))
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)
        self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", os.path.join(top, "sshd_config")],
                                     stderr=open(os.path.join(top, "sshd.log"), "w"), start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self.sshd.poll() is None, open(os.path.join(top, "sshd.log")).read()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)

    def close(self):
        if self.ssh_ok:
            self.sshd.terminate()
            self.sshd.wait(10)
        assert self.av.stop()[0] == 0
        check_ledger_safety(self.home)


@pytest.fixture(scope="module")
def edges(bindir):
    top = tempfile.mkdtemp(prefix="ave", dir="/tmp")
    e = Edges(top, bindir)
    yield e
    e.close()
    shutil.rmtree(top, ignore_errors=True)


def line(**request):
    return (json.dumps(request) + "\n").encode()


class Edge(NamedTuple):
    """One hostile edge: how it is reached (`via`), what is sent, the exit code and the words expected (in
    standard output or error), and what else must hold afterwards (`also(edges, done)`)."""
    via: str            # bridge, bridge-ro (run directly), ssh:KEY, ssh-tt:KEY, local (avsm on the home), check
    send: object        # bytes for the bridge's standard input, (ssh's command, bytes), or the client's argv
    code: object        # the exit code, or None where `also` says all
    words: str = ""
    also: object = None


def fill(value, e):
    """`value` with {top}, {home}, {fifo}, {ask} made this run's."""
    names = {"top": e.top, "home": e.home, "fifo": e.fifo, "ask": str(e.ask)}
    if isinstance(value, bytes) and len(value) < 65536:
        for key, given in names.items():
            value = value.replace(b"{" + key.encode() + b"}", given.encode())
    elif isinstance(value, list):
        for key, given in names.items():
            value = [a.replace("{" + key + "}", given) for a in value]
    elif isinstance(value, tuple):
        return tuple(fill(v, e) for v in value)
    return value


def run_edge(e, edge):
    """Reach the edge as `edge.via` says; return (exit code, stdout + stderr as text)."""
    via, send = edge.via, fill(edge.send, e)
    if via.startswith("ssh"):
        if not e.ssh_ok:
            pytest.skip("no OpenSSH sshd, ssh and ssh-keygen here: install openssh-server to run the ssh rows")
        kind, key = via.split(":")
        args, data = send if isinstance(send, tuple) else ([], send)
        argv = ["ssh", "-F", e.config, "-tt" if kind == "ssh-tt" else "-T", key, *args]
    elif via.startswith("bridge"):
        argv, data = [sys.executable, "-S", installed_avsm(), "--home", e.home, "bridge"], send
        argv += ["--read-only"] if via == "bridge-ro" else []
    else:
        argv, data = e.av.client() + ["--home", e.home, *send], b""
    env = dict(e.av.env, XDG_CACHE_HOME=os.path.join(e.top, "cache-local"))
    done = subprocess.run(argv, input=data, capture_output=True, timeout=60, env=env)
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")


def nothing_edited(e, _):
    assert not os.path.exists(os.path.join(e.top, "edited")), "an editor ran on the far host"


def no_cache_written(e, _):
    assert not os.path.exists(os.path.join(e.top, "cache-ro")), os.listdir(os.path.join(e.top, "cache-ro"))


def nothing_owned(e, _):
    assert not [n for n in os.listdir(e.top) if n.startswith("owned")], "a command from the caller ran"


def quick_cpu(limit):
    """The row's check that the bridge refused within `limit` seconds of CPU (the run is timed by also's caller)."""
    def check(e, done):
        assert done["cpu"] < limit, f"{done['cpu']:.2f} s of CPU before the refusal"
    return check


RO_PAUSE = line(v=1, cmd="pause", args={"venture": "shop"})
STATUS = line(v=1, verb="status", argv=[])

EDGES = {
    # ---- issue 32 item 1: no shell, no editor, no program of the far host
    "tty-without-restrict": Edge("ssh-tt:loose", line(v=1, verb="approve", argv=["{ask}", "--edit"]), 64,
                                 "must begin with restrict", nothing_edited),
    "tty-on-the-bridge-itself": Edge("check", None, None, "", lambda e, _: bridge_on_a_terminal(e)),
    "approve-edit-on-the-far-host": Edge("ssh:full", line(v=1, verb="approve", argv=["{ask}", "--edit"], stdin="x"),
                                         65, "opens no editor on this host", nothing_edited),
    "doctor-warns-of-a-loose-key": Edge("check", None, None, "", lambda e, _: doctor_warns_of_loose_keys(e)),
    # ---- issue 37 item 7: a bridge key used as a login
    "login-runs-nothing": Edge("ssh:full", (["ls", "/"], b""), 64, "this key runs only the avsm bridge",
                               lambda e, d: nothing_owned(e, d)),
    # ---- issue 32 item 2: no argument names a file of the far host; a read-only key writes nothing
    "ro-doctor-dev-zero": Edge("ssh:ro", line(verb="doctor", argv=["--checkpoint", "/dev/zero"]), 65,
                               "doctor --checkpoint takes only -"),
    "ro-doctor-a-directory": Edge("ssh:ro", line(verb="doctor", argv=["--checkpoint", "/etc/ssh"]), 65,
                                  "no file of this host is read"),
    "doctor-a-fifo": Edge("bridge", line(verb="doctor", argv=["--checkpoint", "{fifo}"]), 65,
                          "doctor --checkpoint takes only -"),
    "doctor-allowed-signers": Edge("bridge", line(verb="doctor", argv=["--checkpoint", "-", "--allowed-signers",
                                                                       "/etc/passwd"], stdin=""), 65,
                                   "--allowed-signers names no file of this host"),
    "ro-doctor-writes-no-cache": Edge("ssh:ro", line(verb="doctor", argv=[]), None, "", no_cache_written),
    "payload-a-second-time": Edge("bridge", line(verb="propose", argv=["shop", "note", "--payload", "-", "--payload",
                                                                       "/etc/shadow"], stdin="x"), 65,
                                  "no file of this host is read"),
    "local-doctor-a-fifo": Edge("local", ["doctor", "--checkpoint", "{fifo}"], 65, "it is a FIFO, not a regular file"),
    "local-doctor-dev-zero-link": Edge("local", ["doctor", "--checkpoint", "{top}/zero"], 65,
                                       "it is a device, not a regular file"),
    "local-doctor-a-long-file": Edge("check", None, None, "", lambda e, _: long_checkpoint_refused(e)),
    "local-doctor-a-fifo-sig": Edge("check", None, None, "", lambda e, _: fifo_sig_refused(e)),
    # ---- issue 32 item 11: every oversized request ends in its 64; a long line costs linear time
    "long-line-no-newline": Edge("bridge", b"a" * (17 * 1024 * 1024), 64, "a line longer than avsm reads",
                                 quick_cpu(1.0)),        # 1.8 s before (a quadratic line reader); now 0.2
    "status-argv-10-mb": Edge("bridge", line(verb="status", argv=["x" * (10 * 1024 * 1024)]), 64,
                              "of at most 1 MiB"),
    "relayed-request-2-mb": Edge("bridge", line(v=1, cmd="propose", args={"venture": "shop", "lever": "note",
                                                                        "payload": "y" * (2 * 1024 * 1024)}),
                                 0, '"exit": 64', None),
    "local-payload-3-mb": Edge("check", None, None, "", lambda e, _: big_local_payload(e)),
    # a relayed request whose args are {} is a request all the same: answered, then 0 at the end
    "relayed-request-empty-args": Edge("bridge", line(v=1, cmd="status", args={}), 0, '"exit": 0'),
    # ---- issue 32 item 12: what held, kept held
    "ro-relay-refused": Edge("ssh:ro", RO_PAUSE, 0, "pause is refused"),
    "ro-verb-refused": Edge("ssh:ro", line(verb="propose", argv=["shop", "reset"]), 65,
                            "may only read (avsm bridge --read-only): propose is refused"),
    "pinned-home": Edge("ssh:ro", line(verb="status", argv=[], home="/tmp"), 65, "this bridge serves"),
    "ssh-original-command-ignored": Edge("ssh:full", (["touch", "{top}/owned"], STATUS), 0, "shop: ",
                                         nothing_owned),
    "payload-file-refused": Edge("bridge", line(verb="propose", argv=["shop", "note", "--payload", "/etc/shadow"]),
                                 65, "no file of this host is read"),
    "nesting-200000-deep": Edge("bridge", b"[" * 200000 + b"\n", 64, "one JSON object a line", quick_cpu(2.0)),
    "ssh-keygen-arguments-are-values": Edge("check", None, None, "", lambda e, _: keygen_arguments_are_values(e)),
    "chart-escapes-markup": Edge("local", ["chart", "edge"], 0, "", lambda e, d: chart_escaped(d)),
    "notify-text-not-in-argv": Edge("check", None, None, "", lambda e, _: notify_text_on_stdin(e)),
    "socket-0600": Edge("check", None, None, "",
                        lambda e, _: oct(stat.S_IMODE(os.stat(os.path.join(e.home, "sock")).st_mode)) == "0o600"
                        or pytest.fail("the socket is not 0600")),
    "roles-not-dumpable": Edge("check", None, None, "", lambda e, _: roles_not_dumpable(e)),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_a_hostile_edge_of_the_bridge_holds(edges, name):
    """Issue 32 items 1, 2, 11, 12 and issue 37 item 7: each hostile edge ends in its exit code and its one
    message, never a hang, a traceback or a shell; what it must not write or run, it did not. DOCTOR-02 (a
    read-only doctor writes no cache), DOCTOR-04 (a loose key line is named with its fix), open point 2 (one
    JSON line a request, the socket 0600)."""
    edge = EDGES[name]
    if edge.via == "check":
        edge.also(edges, None)
        return
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code, text = run_edge(edges, edge)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert "Traceback" not in text and "bug in avsm" not in text, text[-800:]
    if edge.code is not None:
        assert code == edge.code, (code, text[-800:])
    assert edge.words in text, text[-800:]
    if edge.also:
        edge.also(edges, {"code": code, "text": text, "cpu": cpu})


# ---- the rows that need more than one run -------------------------------------------------------------


def bridge_on_a_terminal(e):
    """A bridge whose standard input is a terminal (a key line without restrict) refuses at once (64)."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-S", installed_avsm(), "--home", e.home, "bridge"], stdin=follower,
                              capture_output=True, timeout=20, env=e.av.env)
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 64 and b"must begin with restrict" in done.stderr, done.stderr


def doctor_warns_of_loose_keys(e):
    """avsm doctor where it can read ~/.ssh/authorized_keys names each bridge key line without restrict."""
    fake = os.path.join(e.top, "fakehome")
    write(os.path.join(fake, ".ssh", "authorized_keys"),
          'restrict,command="avsm bridge" ssh-ed25519 AAAA good\n'
          'command="python3 /opt/avsm/avsm.py --home /srv bridge" ssh-ed25519 AAAA loose\n'
          'restrict,pty,command="/x/avsm bridge --read-only" ssh-ed25519 AAAA undone\n'
          'command="/usr/bin/backup" ssh-ed25519 AAAA other\n')
    done = subprocess.run(e.av.client() + ["--home", e.home, "doctor"], capture_output=True, text=True,
                          timeout=60, env=dict(e.av.env, HOME=fake, XDG_CACHE_HOME=os.path.join(fake, "c")))
    warned = [ln for ln in done.stdout.splitlines() if "authorized_keys:" in ln]
    assert len(warned) == 2, done.stdout
    assert ":2: this key forces avsm's bridge, and its line lacks restrict" in warned[0]
    assert ":3: " in warned[1] and "gives back pty after restrict" in warned[1]


def long_checkpoint_refused(e):
    """A kept checkpoint past 64 KiB is refused (65) before it is parsed, as a FIFO or a device is."""
    path = write(os.path.join(e.top, "long.txt"), "x" * (100 * 1024))
    done = e.av.cli("doctor", "--checkpoint", path)
    assert done.returncode == 65 and "longer than 64 KiB" in done.stdout, done.stdout


def fifo_sig_refused(e):
    """A checkpoint whose .sig is a FIFO is one refusal, not a doctor waiting for a writer."""
    kept = e.av.cli("checkpoint")
    assert kept.returncode == 0, kept.stderr
    d = os.path.join(e.top, "kept")
    path = write(os.path.join(d, "c.txt"), kept.stdout.split("\n\n")[0] + "\n")
    os.mkfifo(path + ".sig")
    done = e.av.cli("doctor", "--checkpoint", path, timeout=20)
    assert done.returncode == 65 and "it is a FIFO, not a regular file" in done.stdout, done.stdout


def big_local_payload(e):
    """propose --payload with a 3 MB file: its 64 and the message, and nothing recorded (it exited 0 silently)."""
    before = len(e.av.records())
    path = write(os.path.join(e.top, "big"), "z" * (3 * 1024 * 1024))
    done = e.av.cli("propose", "shop", "note", "--payload", path)
    assert done.returncode == 64 and "of at most 1 MiB" in done.stderr, (done.returncode, done.stderr)
    assert not [r for _, _, r in e.av.records(before) if r["kind"] == "proposal"]


def keygen_arguments_are_values(e):
    """What doctor hands ssh-keygen is values, never a shell's words: an allowed_signers file named with shell
    syntax is opened as that name, and nothing it spells runs."""
    key = os.path.join(e.top, "signer")
    if not os.path.exists(key):
        keygen(key)
    kept = e.av.cli("checkpoint")
    text = kept.stdout.split("\n\n")[0] + "\n"
    signed = subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", key, "-n", "avsm-checkpoint"], input=text.encode(),
                            capture_output=True, check=True).stdout.decode()
    with open(key + ".pub") as fh:
        pub = " ".join(fh.read().split()[:2])
    allowed = write(os.path.join(e.top, f"a;touch {e.top}/owned1;$(touch {e.top}/owned2)`touch owned3`"),
                    f'me namespaces="avsm-checkpoint" {pub}\n')
    done = subprocess.run(e.av.client() + ["--home", e.home, "doctor", "--checkpoint", "-", "--allowed-signers",
                                           allowed], input=text + "\n" + signed, capture_output=True, text=True,
                          timeout=60, env=e.av.env, cwd=e.top)
    assert "Traceback" not in done.stderr and "checkpoint on standard input" in done.stdout, done.stdout
    nothing_owned(e, None)


def chart_escaped(done):
    """The chart of a venture whose metric and report print markup, a CDATA end and ESC holds none of them raw."""
    svg = done["text"]
    assert "<script" not in svg and "]]>" not in svg and "\x1b" not in svg and "\x07" not in svg, svg[-600:]
    import xml.etree.ElementTree as ET
    ET.fromstring(svg.split("\n", 1)[1] if svg.startswith("<?xml") else svg)


def notify_text_on_stdin(e):
    """notify's command is run as written: the ask's text is on its standard input and in $AVSM_EVENT, never in
    its arguments."""
    log = os.path.join(e.top, "tell", "told.jsonl")
    deadline = time.monotonic() + 15
    while not os.path.exists(log) and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(log) as fh:
        entries = [json.loads(ln) for ln in fh if ln.strip()]
    asked = [x for x in entries if x["event"] and json.loads(x["event"]).get("seq") == e.ask]
    assert asked, entries
    assert asked[0]["argv"] == [os.path.join(e.top, "tell", "notify")] and "drain" in asked[0]["stdin"]


def roles_not_dumpable(e):
    """The roles process (nobody under root) is not dumpable: its /proc entry stays root's, so no other process
    of nobody's may read its memory or trace it (its files under /proc are root's)."""
    if os.geteuid() != 0:
        pytest.skip("the roles process drops to nobody only under root")
    import pwd
    nobody = pwd.getpwnam("nobody").pw_uid
    pids = [p for p in os.listdir("/proc") if p.isdigit() and os.path.exists(f"/proc/{p}/status")]
    roles = []
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as fh:
                status = fh.read()
        except OSError:
            continue
        uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
        ppid = int(re.search(r"^PPid:\s+(\d+)", status, re.M).group(1))
        if uid == nobody and ppid == e.av.proc.pid:
            roles.append(p)
    assert roles, "no roles process of nobody's under this avsmd"
    assert os.stat(f"/proc/{roles[0]}/environ").st_uid == 0, \
        "the roles process is dumpable: its files under /proc are nobody's"
