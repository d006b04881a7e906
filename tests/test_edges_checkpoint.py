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


# ---- checkpoints: a checkpoint names its home and its signer; --quick's cache grants nothing alone ----

needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                  reason="no ssh-keygen here: install openssh-client (.ci/run does) to sign checkpoints")


def keygen(path, comment):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], check=True)
    with open(path + ".pub") as fh:
        return fh.read().strip()


def fails(run):
    return [line for line in run.stdout.splitlines() if line.startswith("FAIL")]


def head_of(home):
    db = sqlite3.connect(f"file:{os.path.join(home, 'ledger.db')}?mode=ro", uri=True)
    try:
        return db.execute("SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1").fetchone()
    finally:
        db.close()


class Signed:
    """A home whose config names web1's key and principal, an allowed_signers naming web1 and web2 (another
    host's key, trusted for its own home), a stranger's key it does not name, and a ledger avsmd wrote."""

    def __init__(self, av, workdir):
        self.av, self.workdir = av, workdir
        self.keys = {who: os.path.join(workdir, who) for who in ("web1", "web2", "stranger")}
        pubs = {who: keygen(path, who) for who, path in self.keys.items()}
        self.allowed = write(os.path.join(workdir, "allowed_signers"), "".join(
            f'{who} namespaces="avsm-checkpoint" {pubs[who]}\n' for who in ("web1", "web2")))
        os.makedirs(av.home, mode=0o700)
        write(os.path.join(av.home, "config.yaml"), f"checkpoint: {{key: {self.keys['web1']}, principal: web1, "
                                                     f"allowed_signers: {self.allowed}}}\n")
        av.env["XDG_CACHE_HOME"] = os.path.join(workdir, "cache")
        av.start()
        self.kept = av.cli("checkpoint").stdout
        assert av.stop()[0] == 0
        self.origin = self.kept.split("\n")[0]
        self.seq, self.hash = int(self.kept.split("\n")[1]), self.kept.split("\n")[2]

    def checkpoint(self, origin=None, seq=None, digest=None, signer="web1"):
        """A checkpoint file of the given parts (this home's head by default), signed by `signer`'s key."""
        text = avsm.checkpoint_text(origin or self.origin, self.seq if seq is None else seq,
                                    digest or self.hash, 1796223600)
        data = text + ("\n" + avsm.sign_text(text, self.keys[signer], "avsm-checkpoint") + "\n" if signer else "")
        return write(os.path.join(self.workdir, "given.txt"), data)

    def newest_own(self):
        d = os.path.join(self.av.home, "checkpoints")
        return os.path.join(d, max(n for n in os.listdir(d) if n.endswith(".txt")))

    def cache(self):
        d = os.path.join(self.workdir, "cache", "avsm", "verified")
        return os.path.join(d, os.listdir(d)[0])


def kept(**parts):
    return lambda s: ["--checkpoint", s.checkpoint(**parts)]


def sig_by(who):
    """The home's newest own checkpoint's .sig replaced by one of `who`'s key."""
    def make(s):
        with open(s.newest_own()) as fh:
            text = fh.read()
        write(s.newest_own() + ".sig", avsm.sign_text(text, s.keys[who], "avsm-checkpoint") + "\n")
        return []
    return make


def own(origin, seq, digest):
    """An unsigned checkpoint of the given parts put among the home's own (sorted first: its name)."""
    def make(s):
        write(os.path.join(s.av.home, "checkpoints", "000000000000.txt"),
              avsm.checkpoint_text(origin, seq, digest, 1796223600))
        return []
    return make


def cached(line=None, mode=None, then=None):
    """--quick after a full doctor noted its checkpoint, the note then rewritten as `line`, chmod `mode`."""
    def make(s):
        full = s.av.cli("doctor")
        assert full.returncode == 69 and not fails(full)[1:], full.stdout       # no avsmd: all else holds
        path = s.cache()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.dirname(os.path.dirname(path))).st_mode) == 0o700
        if line:
            write(path, line(s) + "\n")
        if mode:
            os.chmod(path, mode)
        if then:
            then(s)
        return ["--quick"]
    return make


HOSTILE = [
    # name, what is done to the home or given to doctor, the exit code, what the failure says
    ("foreign origin, its own host's key", kept(origin="avsm/web2:/srv/other", signer="web2"), 65,
     "is of avsm/web2:/srv/other, and this home is avsm/"),
    ("foreign origin, this home's key", kept(origin="avsm/web2:/srv/other"), 65,
     "a checkpoint vouches only for the home that wrote it"),
    ("foreign signer, in allowed_signers", kept(signer="web2"), 65,
     "signed by the key of web2, and this home's signer is web1"),
    ("a stranger's key", kept(signer="stranger"), 65, "does not name (a forged or foreign checkpoint)"),
    ("seq 0 with a made-up hash, signed", kept(seq=0, digest="ab" * 32), 65, "holds no record #0"),
    ("seq 0 with a made-up hash, unsigned", kept(seq=0, digest="ab" * 32, signer=None), 65, "holds no record #0"),
    ("a seq past the head", kept(seq=10 ** 6), 65, "and the ledger ends at"),
    ("a hash changed under its signature", lambda s: ["--checkpoint", write(
        os.path.join(s.workdir, "changed.txt"), s.kept.replace(s.hash, "0" * 64))], 65, "does not verify"),
    ("moved home, without --origin", kept(origin="avsm/old:/srv/old"), 65, "doctor --origin avsm/old:/srv/old"),
    ("moved home, with --origin", lambda s: kept(origin="avsm/old:/srv/old")(s) + ["--origin", "avsm/old:/srv/old"],
     69, None),
    ("--origin that is no origin", lambda s: ["--origin", "web1"], 64, "is not a checkpoint's origin"),
    ("the home's own .sig by another host's key", sig_by("web2"), 65, "this home's signer is web1"),
    ("the home's own .sig by a stranger", sig_by("stranger"), 65, "does not name"),
    ("the home's own of a home moved here, compared all the same", own("avsm/old:/srv/old", 1, "ab" * 32), 65,
     "#1 should hash to abababababababab"),
    ("--quick, the cache as a full doctor left it", cached(), 69, None),
    ("--quick, a forged cache line naming no checkpoint", cached(lambda s: f"{s.seq + 9} {'cd' * 32}"), 65,
     "is not there"),
    ("--quick, a cache line of another hash", cached(lambda s: f"{s.seq} {'cd' * 32}"), 65,
     f"holds "),
    ("--quick, a cache others can write", cached(mode=0o666), 65, "can be written by others than you"),
    ("--quick, the cached checkpoint's .sig replaced", cached(then=sig_by("web2")), 65,
     "this home's signer is web1"),
    ("--quick, the cached checkpoint's .sig removed", cached(then=lambda s: os.unlink(s.newest_own() + ".sig")),
     65, "is unsigned, though config.yaml names the key"),
]


@needs_keygen
@pytest.mark.parametrize("name, make, code, said", HOSTILE, ids=[row[0] for row in HOSTILE])
def test_a_hostile_checkpoint_is_refused(av, workdir, name, make, code, said):
    """Issue 32 items 7 and 8: a checkpoint vouches only for the home that wrote it (65 naming both origins;
    --origin for a home that moved), only when signed by the principal config.yaml names for this home
    (ssh-keygen -Y verify -I), and only for a record the ledger holds, seq 0 included; --quick's cache only
    names a checkpoint, which is checked again (its hash, origin, signature and record), 0600 in a 0700
    directory. DOCTOR-01 DOCTOR-13 LEDGER-09"""
    s = Signed(av, workdir)
    run = av.cli("doctor", *make(s))
    assert run.returncode == code, (run.returncode, run.stdout, run.stderr)
    if said is None:
        assert not fails(run)[1:] and fails(run)[0].startswith("FAIL  no avsmd is running"), run.stdout
    else:
        assert said in run.stdout + run.stderr, run.stdout + run.stderr


def test_quick_compares_every_checkpoint_in_the_home(av, workdir):
    """Issue 32 item 8, the attack itself: a ledger rewritten whole, a checkpoint of the new head written
    into the home and `SEQ HASH` of it into the cache, made --quick vouch for the rewrite; the home's own
    earlier checkpoint, which proves it, was not compared. Now every checkpoint in the home is (one record
    lookup each), and --quick refuses (65). DOCTOR-13 LEDGER-09"""
    from test_checkpoints import rewrite
    av.env["XDG_CACHE_HOME"] = os.path.join(workdir, "cache")
    for _ in range(2):
        av.start()
        assert av.cli("checkpoint").returncode == 0
        assert av.stop()[0] == 0
    assert av.cli("doctor").returncode == 69
    own = sorted(n for n in os.listdir(os.path.join(av.home, "checkpoints")) if n.endswith(".txt"))
    assert len(own) == 2
    rewrite(av.home, 2)                     # between the two checkpoints
    seq, digest = head_of(av.home)
    origin = avsm.checkpoint_origin(av.home)
    write(os.path.join(av.home, "checkpoints", f"{seq:012d}.txt"), avsm.checkpoint_text(origin, seq, digest, 1))
    d = os.path.join(workdir, "cache", "avsm", "verified")
    write(os.path.join(d, os.listdir(d)[0]), f"{seq} {digest}\n")
    quick = av.cli("doctor", "--quick")
    assert quick.returncode == 65, quick.stdout
    caught = next(line for line in fails(quick) if "rewritten" in line)
    assert f"checkpoint {av.home}/checkpoints/{own[1]}" in caught and "rewritten at or before" in caught, caught


@needs_keygen
def test_a_start_signs_a_checkpoint_once_a_key_is_named(av, workdir):
    """Issue 37 item 5: a checkpoint: {key: ...} added to the config makes the next start write a signed
    checkpoint, though the last (unsigned) was written within `every`; so does a key changed since; a start
    within `every` of one signed by the key in force writes none. avsmd -t says how checkpoints are written
    and signed, and a key file that is not there is 78. DOCTOR-13"""
    ckdir = os.path.join(av.home, "checkpoints")

    def newest():
        names = sorted(n for n in os.listdir(ckdir) if n.endswith(".txt"))
        return names[-1], os.path.exists(os.path.join(ckdir, names[-1] + ".sig"))

    av.start()
    assert av.stop()[0] == 0
    first, signed = newest()
    assert not signed
    said = av.daemon_cmd("-t")
    assert said.returncode == 0 and "checkpoint: written" in said.stdout and "unsigned" in said.stdout
    config = os.path.join(av.home, "config.yaml")
    write(config, f"checkpoint: {{key: {os.path.join(workdir, 'none')}}}\n")
    missing = av.daemon_cmd("-t")
    assert missing.returncode == 78 and "key" in missing.stderr and "is not there" in missing.stderr, missing.stderr
    doctor = av.cli("doctor")
    assert doctor.returncode == 78 and "checkpoint: key" in doctor.stdout, doctor.stdout
    for key in ("k1", "k2"):
        keygen(os.path.join(workdir, key), "ops")
        write(config, f"checkpoint: {{key: {os.path.join(workdir, key)}, principal: ops}}\n")
        said = av.daemon_cmd("-t")
        assert said.returncode == 0 and f"signed with {os.path.join(workdir, key)}" in said.stdout, said
        av.start()
        assert av.stop()[0] == 0
        name, signed = newest()
        assert signed and name != first, (key, name, first)
        first = name
    av.start()
    assert av.stop()[0] == 0
    assert newest()[0] == first             # within `every` of one the key in force signed: none written


def test_a_cut_moves_the_checkpoints_of_the_records_it_cut_aside(av, workdir):
    """Every checkpoint in the home is compared now (issue 32 item 8), so `doctor --cut SEQ` moves those of
    the records it cut beside the backup, into HOME/checkpoints/before-cut-SEQ-TIME/: the doctor after the
    cut passes, and they are kept. DOCTOR-14"""
    for _ in range(2):
        av.start()
        assert av.cli("checkpoint").returncode == 0
        assert av.stop()[0] == 0
    ckdir = os.path.join(av.home, "checkpoints")
    seqs = sorted(int(n[:12]) for n in os.listdir(ckdir) if n.endswith(".txt"))
    cut = av.cli("doctor", "--cut", str(seqs[-1]))
    assert cut.returncode == 0 and "moved 1 checkpoint(s)" in cut.stdout, cut.stdout
    after = av.cli("doctor")
    assert after.returncode == 69 and not fails(after)[1:], after.stdout
    (aside,) = [n for n in os.listdir(ckdir) if n.startswith(f"before-cut-{seqs[-1]}-")]
    assert f"{seqs[-1]:012d}.txt" in os.listdir(os.path.join(ckdir, aside))
