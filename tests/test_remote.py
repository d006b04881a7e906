"""Many hosts over OpenSSH (issue 23): `avsm --host`, `avsm fleet` and the bridge, driven through a real sshd on
127.0.0.1 (a free high port, a host key and authorized_keys made here) and the real ssh client, against two avsmd
homes on this machine standing in for hosts. avsm itself listens on nothing but its socket (DESIGN, Reach).

sshd comes from the OS (Debian's openssh-server; .ci/run installs it when missing). Where there is no sshd and no
way to install it, every test here skips with one line saying so."""

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import avsm
from conftest import ROOT, Avsm, check_ledger_safety, installed_avsm, make_venture, write

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SLOW = """\
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
OK = "#!/bin/sh\nexit 0\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "avsm-test", "-f", path], check=True)
    with open(path + ".pub") as fh:
        return fh.read().strip()


class Fleet:
    """A real sshd and two avsmd homes; ssh aliases for each way in (see ssh_config below)."""

    def __init__(self, top):
        self.top = top
        self.port, self.dead, self.hang_port = free_port(), free_port(), free_port()
        host_pub = keygen(os.path.join(top, "hostkey"))
        keys = {name: keygen(os.path.join(top, name)) for name in ("full", "ro", "plain", "stranger")}
        self.bridge = write(os.path.join(top, "bridge"),
                            f"#!/bin/sh\nexec {sys.executable} -S {installed_avsm()} \"$@\"\n", 0o755)
        self.homes = [os.path.join(top, "h1"), os.path.join(top, "h2")]
        write(os.path.join(top, "authorized_keys"),
              f'restrict,command="{self.bridge} bridge" {keys["full"]}\n'
              f'restrict,command="{self.bridge} --home {self.homes[0]} bridge --read-only" {keys["ro"]}\n'
              f'{keys["plain"]}\n')
        write(os.path.join(top, "known_hosts"), f"avsmtest {' '.join(host_pub.split()[:2])}\n")
        user = os.environ.get("USER") or __import__("pwd").getpwuid(os.getuid()).pw_name
        write(os.path.join(top, "sshd_config"),
              f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {top}/hostkey\nAuthorizedKeysFile {top}/authorized_keys\n"
              f"UsePAM no\nStrictModes no\nPidFile {top}/sshd.pid\nPasswordAuthentication no\n"
              f"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nAllowUsers {user}\n"
              f"MaxStartups 100:30:200\n")      # one sshd stands in for many hosts, each asked at once
        self.user = user
        entries = {"host1": ("full", self.port), "host2": ("full", self.port), "ro": ("ro", self.port),
                   "plain": ("plain", self.port), "stranger": ("stranger", self.port), "dead": ("full", self.dead),
                   "hang": ("full", self.hang_port)}
        self.config = write(os.path.join(top, "ssh_config"), "".join(self.entry(a, k, p) for a, (k, p) in entries.items()))
        self.env = dict(os.environ, AVSM_SSH=f"ssh -F {self.config}")
        self.env.pop("AVSMD_HOME", None)
        self.env["XDG_CONFIG_HOME"] = os.path.join(top, "cfg")     # no fleet.yaml of the person running the tests
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)     # sshd's privilege separation directory
        self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", os.path.join(top, "sshd_config")],
                                     stderr=open(os.path.join(top, "sshd.log"), "w"), start_new_session=True)
        self.hanging = socket.socket()
        self.hanging.bind(("127.0.0.1", self.hang_port))
        self.hanging.listen(16)                          # accepts (the kernel does) and never says a word
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.sshd.poll() is not None:
                raise AssertionError(f"sshd exited {self.sshd.returncode}: {open(os.path.join(top, 'sshd.log')).read()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)

    def entry(self, alias, key, port):
        """An ssh_config entry: `alias` is this sshd, through `key`, its host key checked as avsmtest's."""
        return (f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {self.user}\n  IdentityFile {self.top}/{key}\n"
                f"  IdentitiesOnly yes\n  HostKeyAlias avsmtest\n  UserKnownHostsFile {self.top}/known_hosts\n"
                f"  StrictHostKeyChecking yes\n")

    def avsm(self, *args, input=None, timeout=60, env=None):
        """The real client, as the person on this side runs it."""
        return subprocess.run([sys.executable, "-S", installed_avsm(), *args], capture_output=True, text=True,
                              input=input, timeout=timeout, env=dict(self.env, **(env or {})))

    def ssh(self, alias, *args, input=None):
        return subprocess.run(["ssh", "-F", self.config, "-T", alias, *args], capture_output=True, text=True,
                              input=input, timeout=30, env=self.env)

    def close(self):
        os.killpg(self.sshd.pid, signal.SIGTERM)
        self.sshd.wait(10)
        self.hanging.close()


@pytest.fixture(scope="module")
def fleet(bindir):
    if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        pytest.skip("no OpenSSH sshd, ssh and ssh-keygen here: install openssh-server and openssh-client "
                    "(.ci/run does with apt-get) to run the tests of avsm --host and avsm fleet")
    top = tempfile.mkdtemp(prefix="avs", dir="/tmp")
    f = Fleet(top)
    f.daemons = []
    venture = make_venture(top, "shop", SLOW, {"report": "#!/bin/sh\necho 5\n", "reset": OK, "note": OK})
    tank = make_venture(top, "tank", TANK, {"report": "#!/bin/sh\necho 50\n", "drain": OK})
    for home, d in zip(f.homes, (venture, tank)):
        av = Avsm(bindir, home)
        av.start()
        assert av.cli("add", d).returncode == 0
        av.wait_for(lambda rs: any(r["kind"] == "report" for _, _, r in rs), what="the first report")
        f.daemons.append(av)
    f.daemons[1].wait_for(lambda rs: any(r["kind"] == "ask" for _, _, r in rs), what="the tank's ask")
    yield f
    for av in f.daemons:
        if av.proc.poll() is None:
            assert av.stop()[0] == 0
        check_ledger_safety(av.home)
    f.close()
    shutil.rmtree(top, ignore_errors=True)


def same_form(text, fleet, home):
    """The output with the one thing that must differ made alike: how the person is told to run avsm again."""
    text = text.replace(f"avsm --host host1:{home} ", "avsm ")      # a far hint names its host (issue 32 item 4)
    text = text.replace(f" --home {home}", " --X").replace(" --host host1", " --X")
    text = re.sub(r"\b\d+(\.\d+)?(s|ms|m|h) ago\b", "N ago", text)         # an age, a second apart
    return re.sub(r"\S*python\S* -S \S+/avsm ", "AVSM ", text)


@pytest.mark.parametrize("args", [["status"], ["status", "-v"], ["status", "shop"], ["status", "nosuch"],
                                  ["tail", "--since", "1"], ["tail", "3"], ["why", "2"], ["why", "99999"],
                                  ["why", "x"], ["asks"], ["summary", "--since", "1"], ["chart", "shop"],
                                  ["deny", "99999"], ["approve", "99999"], ["pause", "nosuch"], ["tail", "--bogus"],
                                  ["propose", "shop", "rm"], ["decide", "shop"], ["doctor", "--since", "1:00"]])
def test_every_verb_remotely_equals_it_locally(fleet, args):
    """Issue 23 items 1-2, CLI-01: a verb through `avsm --host HOST:HOME` and the forced command prints what it
    prints here and exits the same; its error lines name the host."""
    home = fleet.homes[0]
    local = fleet.avsm("--home", home, *args)
    remote = fleet.avsm("--host", f"host1:{home}", *args)
    assert remote.returncode == local.returncode, (remote.stderr, local.stderr)
    assert same_form(remote.stdout, fleet, home) == same_form(local.stdout, fleet, home)
    assert [line.replace(f"avsm: host1:{home}: ", "avsm: ") for line in same_form(remote.stderr, fleet, home).splitlines()] \
        == same_form(local.stderr, fleet, home).replace(f" --host host1:{home}", " --X").splitlines()


def test_a_lever_proposed_with_a_local_payload_file_and_an_ask_answered_remotely(fleet, tmp_path):
    """Issue 23 items 2-3: a payload file is read on this side and sent; `fleet asks` names each open ask HOST:SEQ
    and `avsm --host HOST approve SEQ` answers it; no key of ssh reaches any ledger."""
    home, tank_home = fleet.homes
    payload = write(str(tmp_path / "words.txt"), "restock the shelf\n")
    done = fleet.avsm("--host", f"host1:{home}", "propose", "shop", "note", "--payload", payload)
    assert done.returncode == 0, done.stderr
    rec = [r for _, _, r in fleet.daemons[0].records() if r["kind"] == "proposal"][-1]
    assert rec["payload"] == "restock the shelf\n" and rec["claim"] == "declared"
    missing = fleet.avsm("--host", f"host1:{home}", "propose", "shop", "note", "--payload", str(tmp_path / "none"))
    assert missing.returncode == 66 and "cannot be read" in missing.stderr
    write(os.path.join(fleet.top, "cfg", "avsm", "fleet.yaml"),
          f"hosts:\n  - {{host: 'host1:{home}', name: web}}\n  - {{host: 'host2:{tank_home}', name: tank}}\n")
    asks = fleet.avsm("fleet", "asks")
    assert asks.returncode == 0, asks.stdout + asks.stderr
    seq = next(r for s, _, r in fleet.daemons[1].records() if r["kind"] == "ask")
    ask_seq = [s for s, _, r in fleet.daemons[1].records() if r["kind"] == "ask"][0]
    assert re.search(rf"^tank:{ask_seq}  tank  drain  ", asks.stdout, re.M), asks.stdout
    assert "web  no open asks" in asks.stdout or "no open asks" in asks.stdout
    approved = fleet.avsm("--host", "tank", "approve", str(ask_seq))
    assert approved.returncode == 0, approved.stderr
    fleet.daemons[1].wait_for(lambda rs: any(r["kind"] == "outcome" for _, _, r in rs), what="drain's outcome")
    assert seq["lever"] == "drain"
    after = fleet.avsm("fleet", "asks")
    assert f"tank:{ask_seq} " not in after.stdout
    for name in ("full", "ro", "plain"):
        with open(os.path.join(fleet.top, name + ".pub")) as fh:
            secret = fh.read().split()[1]
        for h in fleet.homes:
            with open(os.path.join(h, "ledger.db"), "rb") as fh:
                assert secret.encode() not in fh.read()


def test_the_forced_command_refuses_what_is_not_a_request_and_what_a_read_only_key_may_not(fleet):
    """Issue 23 item 1: the bridge is the whole of what a key can do: a shell command asked of ssh runs nothing,
    a line that is no request is refused (64), and a --read-only key reads but is refused each write (65, the
    verb named), leaving the ledger as it was."""
    home = fleet.homes[0]
    shell = fleet.ssh("host1", f"touch {fleet.top}/owned", input="")
    assert shell.returncode == 64 and not os.path.exists(os.path.join(fleet.top, "owned"))
    assert "this key runs only the avsm bridge" in shell.stderr           # issue 37 item 7
    garbage = fleet.ssh("host1", input="not json\n")
    assert garbage.returncode == 64 and "one JSON object a line" in garbage.stderr
    unknown = fleet.ssh("host1", input='{"v": 1, "cmd": "stop", "args": {}}\n')
    assert '"exit": 64' in unknown.stdout and "does not know the command" in unknown.stdout
    verb = fleet.ssh("host1", input='{"verb": "try", "argv": ["/tmp"]}\n')
    assert verb.returncode == 64 and "the bridge runs status" in verb.stderr
    relayed = fleet.ssh("host1", input=f'{{"v": 1, "cmd": "ping", "args": {{}}, "home": "{home}"}}\n')
    assert '"exit": 0' in relayed.stdout
    before = len(fleet.daemons[0].records())
    assert fleet.avsm("--host", "ro", "status").returncode == 0
    assert fleet.avsm("--host", "ro", "tail", "2").returncode == 0
    for args in (["pause", "shop"], ["propose", "shop", "reset"], ["doctor", "--cut", "2"], ["add", fleet.top],
                 ["checkpoint"]):           # a checkpoint is written when asked for: no read
        refused = fleet.avsm("--host", "ro", *args)
        assert refused.returncode == 65 and f"may only read (avsm bridge --read-only): {args[0]} is refused" in refused.stderr
        assert refused.stderr.startswith("avsm: ro: ")
    for cmd in ("pause", "checkpoint"):
        relay = fleet.ssh("ro", input=f'{{"v": 1, "cmd": "{cmd}", "args": {{"venture": "shop"}}}}\n'.replace(
            ', "args": {"venture": "shop"}' if cmd == "checkpoint" else "@", ', "args": {}'))
        assert '"exit": 65' in relay.stdout and f"{cmd} is refused" in relay.stdout, relay.stdout
    other = fleet.avsm("--host", f"ro:{fleet.homes[1]}", "status")
    assert other.returncode == 65 and f"serves {home}" in other.stderr
    assert len(fleet.daemons[0].records()) == before, "nothing was written"


def test_a_dead_host_a_stranger_no_avsm_and_a_stopped_avsmd_are_one_line_each(fleet):
    """Issue 23 item 2: each failure to reach avsm on a host is one line naming the host and the fix, with its
    exit code: 68 not reached, 77 a key refused, 69 no avsm there, 69 no avsmd (as here)."""
    dead = fleet.avsm("--host", "dead", "status")
    assert dead.returncode == 68 and dead.stderr.count("\n") == 1 and dead.stderr.startswith("avsm: dead: ")
    assert "sshd running" in dead.stderr
    stranger = fleet.avsm("--host", "stranger", "status")
    assert stranger.returncode == 77 and "authorized_keys" in stranger.stderr and stranger.stderr.count("\n") == 1
    none = fleet.avsm("--host", "plain", "status", env={"AVSM_BRIDGE": "/nonexistent/avsm bridge"})
    assert none.returncode == 69 and "no avsm there" in none.stderr and none.stderr.count("\n") == 1
    empty = os.path.join(fleet.top, "empty")
    stopped = fleet.avsm("--host", f"host1:{empty}", "status")
    assert stopped.returncode == 69 and stopped.stderr.startswith(f"avsm: host1:{empty}: ") and "avsmd" in stopped.stderr
    both = fleet.avsm("--home", "/tmp", "--host", "host1", "status")
    assert both.returncode == 64


def test_fleet_status_answers_within_its_timeout_while_a_host_hangs(fleet):
    """Issue 23 item 3: `fleet status` asks every host at once; a host that accepts and never answers is one line
    once its timeout passes, the others answer as they do, and the exit code says a host did not answer."""
    home, tank_home = fleet.homes
    path = write(os.path.join(fleet.top, "hang.yaml"),
                 f"timeout: 3s\nhosts:\n  - host1:{home}\n  - {{host: hang, timeout: 2s}}\n  - dead\n"
                 f"  - {{host: 'host2:{tank_home}', name: tank}}\n")
    t0 = time.monotonic()
    done = fleet.avsm("fleet", "--fleet", path, "status")
    took = time.monotonic() - t0
    assert took < 6, f"fleet status took {took:.1f} s"
    lines = done.stdout.splitlines()
    assert any(line.startswith(f"host1:{home}  shop: ") for line in lines), done.stdout
    assert any(re.match("tank +tank: ", line) for line in lines), done.stdout     # names padded: columns line up
    assert any(re.match("hang +no answer within 2s", line) or line.startswith("hang  ") and "said nothing within "
               "its timeout" in line for line in lines), done.stdout        # ssh's own ConnectTimeout may end it first
    assert any(re.match("dead +ssh could not reach avsm there", line) for line in lines), done.stdout
    assert done.returncode == 68
    summary = fleet.avsm("fleet", "--fleet", path, "summary")
    assert f"== host1:{home}" in summary.stdout and "== tank" in summary.stdout
    good = write(os.path.join(fleet.top, "good.yaml"), f"hosts: ['host1:{home}', 'host2:{tank_home}']\n")
    assert fleet.avsm("fleet", "--fleet", good, "status").returncode == 0


@pytest.mark.parametrize("text, where", [
    ("hosts: []\n", "1:1"), ("hosts: [-oProxyCommand=x]\n", "1:9"), ("hosts: [web1]\nport: 22\n", "2:1"),
    ("hosts:\n  - {host: web1, timeout: soon}\n", "2:27"), ("hosts: ['web1:relative']\n", "1:9")])
def test_a_fleet_file_that_does_not_hold_is_refused_where_it_is_wrong(fleet, text, where):
    """Issue 23 item 3: a fleet file in the YAML subset; one that does not hold exits 78 at file:line:col, a
    missing one 66."""
    path = write(os.path.join(fleet.top, "bad.yaml"), text)
    done = fleet.avsm("fleet", "--fleet", path, "status")
    assert done.returncode == 78 and f"bad.yaml:{where}" in done.stderr, done.stderr
    assert fleet.avsm("fleet", "--fleet", os.path.join(fleet.top, "nofile"), "status").returncode == 66


@pytest.mark.parametrize("data, code, words", [
    (b"[" * 100000 + b"\n", 64, "one JSON object a line"),
    (b'{"verb": "status", "argv": []}', 69, "no avsmd is answering"),       # no newline, stdin closed at once
    (b'{"verb": "status", "argv": ["-v", "a", "b"]}\n', 64, "one venture at a time"),
    (b'{"verb": "status", "argv": "x"}\n', 65, "argv is a list"),
    (b'{"verb": "status", "argv": [], "home": "relative"}\n', 65, "this bridge serves"),
    (b'{"verb": "status", "argv": [], "v": 2}\n', 64, "version 1"),
    (b"a" * (17 * 1024 * 1024), 64, "a line longer than avsm reads"),
    (b'{"verb": "propose", "argv": ["shop", "note", "--payload", "/etc/shadow"]}\n', 65, "no file of this host is read"),
], ids=["deep", "no-newline", "usage", "argv-text", "home-relative", "version", "huge", "payload-path"])
def test_the_bridge_refuses_what_is_no_request_with_its_code(home, data, code, words):
    """Issue 23 item 1, hostile input: the bridge run as a forced command is handed anything; each is refused
    with its code and one line, never a traceback, and a verb keeps its own code even when the other end closes
    standard input at once."""
    done = subprocess.run([sys.executable, "-S", installed_avsm(), "--home", home, "bridge"], input=data,
                          capture_output=True, timeout=30)
    err = done.stderr.decode()
    assert done.returncode == code and words in err and "Traceback" not in err, (done.returncode, err[-400:])


def test_a_verb_run_for_the_far_end_leaves_nothing_for_the_next_in_the_process(home, monkeypatch):
    """Issue 36 item 2: whom a verb runs for is handed to it, never left in the module. Two runs in one
    process: the bridge's verb reads the request's stdin for - and names avsm as the person's `as`; the next,
    run here, reads this standard input and names avsm as it runs here."""
    seen = []
    monkeypatch.setattr(avsm, "ask_daemon", lambda h, cmd, args: seen.append(
        (args["payload"], avsm.client_command(h))) or 0)
    monkeypatch.setattr(sys, "stdin", io.StringIO("here\n"))
    argv = ["propose", "shop", "note", "--payload", "-"]
    request = {"v": 1, "verb": "propose", "argv": argv[1:], "stdin": "far\n", "as": "avsm --host far"}
    read, write = os.pipe()
    os.write(write, json.dumps(request).encode() + b"\n")
    os.close(write)
    kept = os.dup(0)
    os.dup2(read, 0)
    try:
        assert avsm.main(["--home", home, "bridge"]) == 0
    finally:
        os.dup2(kept, 0)
        os.close(kept)
        os.close(read)
    assert avsm.main(["--home", home, *argv]) == 0
    assert seen == [("far\n", "avsm --host far"), ("here\n", avsm.program_command("avsm", home))]


def test_a_checkpoint_kept_here_is_checked_against_the_far_ledger(fleet):
    """Issue 24 with issue 23: `avsm --host HOST doctor --checkpoint -` reads the checkpoint kept on this side
    from standard input and sends it along (it hung, the far doctor reading the ssh channel); it says what the
    same doctor says there."""
    home = fleet.homes[0]
    kept = fleet.avsm("--home", home, "checkpoint")
    assert kept.returncode == 0 and kept.stdout, kept.stderr
    local = fleet.avsm("--home", home, "doctor", "--checkpoint", "-", input=kept.stdout)
    remote = fleet.avsm("--host", f"host1:{home}", "doctor", "--checkpoint", "-", input=kept.stdout, timeout=30)
    assert remote.returncode == local.returncode and "checkpoint" in remote.stdout, (remote.stdout, remote.stderr)
    lines = kept.stdout.splitlines()
    forged = "\n".join(lines[:2] + ["f" * 64] + lines[3:]) + "\n"       # the head's hash, not the ledger's
    refused = fleet.avsm("--host", f"host1:{home}", "doctor", "--checkpoint", "-", input=forged, timeout=30)
    assert refused.returncode == 65, (refused.stdout, refused.stderr)
