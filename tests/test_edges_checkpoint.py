"""The edges of checkpoints, of `approve --edit` and of `link` (issue 32 items 7 to 10, issue 37 items 4
and 5): a checkpoint names its home and its signer, `doctor --quick`'s cache grants nothing by itself, an
editor quit without saving approves nothing, and a `link` wrapper runs only bytecode checked against the
file's hash. The hostile checkpoints are rows of one table. DOCTOR-01 DOCTOR-13 LEDGER-09 ASK-04 DIST-01"""

import os
import select
import shutil
import sqlite3
import stat
import subprocess
import sys

import pytest

import avsm
from conftest import ROOT, installed_avsm, make_venture, write

SAY = """\
purpose: Say what a person approved.
metric: dial
controller: {kind: model}
cadence: 1h
permitted:
  - {name: say, run: ./say, cap: 60/hour, reversible: true, takes: text}
"""
MODEL = "#!/bin/sh\ncat > /dev/null\ncat {reply}\n"
REPLY = '{"choice": "action", "action": "say", "payload": "hello\\n", "reason": "r"}\n'


def on_a_terminal(argv, env, timeout=30):
    """Run argv with a pty as its standard input and output (approve --edit needs a terminal); return
    (exit code, what it wrote to the terminal, its standard error)."""
    leader, follower = os.openpty()
    proc = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    shown = b""
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError(f"{argv} said nothing for {timeout} s")
        try:
            chunk = os.read(leader, 4096)
        except OSError:             # EIO: the other end closed
            chunk = b""
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return proc.wait(timeout), shown.decode("utf-8", "replace"), proc.stderr.read().decode()


def fake_ssh(workdir):
    """An AVSM_SSH that runs the bridge command it is given here, as sshd would run a forced command."""
    path = write(os.path.join(workdir, "fake-ssh"), '#!/bin/sh\nfor a; do last=$a; done\nexec /bin/sh -c "$last"\n')
    os.chmod(path, 0o755)
    return path


def test_an_editor_quit_without_saving_approves_nothing(av, workdir):
    """Issue 32 item 9: `approve N --edit` whose editor leaves the content as it was (EDITOR=true, `:q!`)
    approves nothing and exits 65, giving the command that approves the proposal as it is; through
    `avsm --host` (the editor on this side) the same; an edit that changes the content approves it.
    ASK-04 ASK-05"""
    d = make_venture(workdir, "talk", SAY, {"report": "#!/bin/sh\necho 1\n", "say": "#!/bin/sh\ncat > said\n"})
    reply = write(os.path.join(workdir, "reply"), REPLY)
    model = write(os.path.join(workdir, "model"), MODEL.format(reply=reply), 0o755)
    write(os.path.join(av.home, "config.yaml"),
          f"nightly: never\ndefault: mine\nbackends:\n  mine: {{kind: command, run: {model}}}\n")
    os.chmod(av.home, 0o700)
    av.start()
    assert av.cli("add", d).returncode == 0
    assert av.cli("decide", "talk").returncode == 0
    ask = av.wait_for(lambda rs: next((s for s, _, r in rs if r["kind"] == "ask"), None), what="the ask")
    env = dict(av.env, EDITOR="true", VISUAL="")
    ssh = fake_ssh(workdir)
    remote = dict(env, AVSM_SSH=ssh, AVSM_BRIDGE=f"{sys.executable} -S {installed_avsm()} --home {av.home} bridge")
    for argv, e, hint in ((av.client() + ["--home", av.home, "approve", str(ask), "--edit"], env,
                           f"--home {av.home} approve {ask}"),
                          (av.client() + ["--host", "web1", "approve", str(ask), "--edit"], remote,
                           f"avsm --host web1 approve {ask}")):
        code, shown, err = on_a_terminal(argv, e)
        assert code == 65, (code, shown, err)
        assert "left as it was" in err and "nothing approved" in err and hint in err, err
        assert not [r for _, _, r in av.records() if r["kind"] in ("approval", "action")]
    assert f"#{ask} " in av.cli("asks").stdout
    edit = write(os.path.join(workdir, "edit"), "#!/bin/sh\necho bye > \"$1\"\n", 0o755)
    code, shown, err = on_a_terminal(av.client() + ["--home", av.home, "approve", str(ask), "--edit"],
                                     dict(env, EDITOR=edit))
    assert code == 0, (shown, err)
    av.wait_for(lambda rs: any(r["kind"] == "outcome" for _, _, r in rs), what="say's outcome")
    with open(os.path.join(d, "said")) as fh:
        assert fh.read() == "bye\n"


def test_a_link_wrapper_runs_only_bytecode_of_the_files_contents_now(workdir):
    """Issue 32 item 10, issue 37 item 4: with the cache cleared, the first start through a `link` wrapper
    writes bytecode checked against the file's hash (PEP 552), in directories only this user can read, so a
    newer copy of the same size and mtime runs its own code; a copy that moved away is one line naming where
    it was and `link` again (66), not a traceback. DIST-01"""
    src, bin_, cache = (os.path.join(workdir, d) for d in ("copy", "bin", "cache"))
    os.makedirs(src)
    copy = os.path.join(src, "avsm.py")
    shutil.copy(os.path.join(ROOT, "avsm.py"), copy)
    env = dict(os.environ, XDG_CACHE_HOME=cache, PYTHONDONTWRITEBYTECODE="1")
    assert subprocess.run([sys.executable, copy, "link", bin_], env=env, capture_output=True).returncode == 0
    wrapper = os.path.join(bin_, "avsm")
    shutil.rmtree(cache)
    version = subprocess.run([wrapper, "--version"], env=env, capture_output=True, text=True)
    assert version.stdout.strip() == f"avsm {avsm.VERSION}", version.stderr
    pyc = os.path.join(cache, "avsm", "pycache", src.lstrip("/"), f"avsm.{sys.implementation.cache_tag}.pyc")
    with open(pyc, "rb") as fh:
        assert fh.read(8)[4:] == b"\3\0\0\0"            # hash-based, its source checked at each load
    assert stat.S_IMODE(os.stat(pyc).st_mode) & 0o077 == 0
    d = os.path.dirname(pyc)
    while d != cache:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
        d = os.path.dirname(d)

    st = os.stat(copy)
    with open(copy) as fh:
        text = fh.read()
    newer = text.replace(f'VERSION = "{avsm.VERSION}"', 'VERSION = "7.7.7"', 1)
    assert len(newer) == len(text) and newer != text
    with open(copy, "w") as fh:
        fh.write(newer)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert subprocess.run([wrapper, "--version"], env=env, capture_output=True, text=True).stdout == "avsm 7.7.7\n"

    os.rename(src, src + ".moved")
    gone = subprocess.run([wrapper, "status"], env=env, capture_output=True, text=True)
    assert gone.returncode == 66 and "Traceback" not in gone.stderr, gone.stderr
    assert gone.stderr.count("\n") == 1 and copy in gone.stderr and f"link {bin_}" in gone.stderr, gone.stderr
