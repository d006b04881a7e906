"""A witness on another machine (issue 34): `avsm fleet witness` checks each host's ledger on this side, against
the checkpoint it kept for the host, and with --mirror keeps a copy of the ledger, over the same OpenSSH bridge
(tests/test_remote.py's real sshd on 127.0.0.1, its forced-command keys) and real avsmd homes standing in for the
hosts. DOCTOR-13 LEDGER-09 (a rewrite shows against a head kept elsewhere).

Where there is no sshd or ssh-keygen, every test here skips with one line saying so."""

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time

import pytest

from conftest import Avsm, make_venture, write
from test_checkpoints import keygen, rewrite
from test_proofs import write_ledger
from test_remote import OK, SLOW, SSHD, Fleet


@pytest.fixture(scope="module")
def fleet():
    if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        pytest.skip("no OpenSSH sshd, ssh and ssh-keygen here: install openssh-server and openssh-client "
                    "(.ci/run does with apt-get) to run the tests of avsm fleet witness")
    top = tempfile.mkdtemp(prefix="avx", dir="/tmp")
    f = Fleet(top)
    f.key = os.path.join(top, "ck")             # the hosts' own checkpoint key: on the host, as a forger finds it
    f.allowed = write(os.path.join(top, "allowed_signers"), f'web namespaces="avsm-checkpoint" {keygen(f.key)}\n')
    f.venture = make_venture(top, "shop", SLOW, {"report": "#!/bin/sh\necho 5\n", "reset": OK, "note": OK})
    f.liar_home = os.path.join(top, "fake")     # what a host serves the witness in place of its own ledger
    with open(os.path.join(top, "authorized_keys"), "a") as fh:
        fh.write(f'restrict,command="{f.bridge} --home {f.liar_home} bridge --read-only" '
                 f'{keygen(os.path.join(top, "liar"))}\n')
    with open(f.config, "a") as fh:
        fh.write(f.entry("liar", "liar", f.port))
    yield f
    f.close()
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def host(fleet, bindir):
    """A signed home on the fleet's host (the first home, which the read-only key serves), its avsmd running
    with the venture adopted; stopped at the end, exit 0."""
    home = fleet.homes[0]
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(fleet.liar_home, ignore_errors=True)
    os.makedirs(home, mode=0o700)
    write(os.path.join(home, "config.yaml"), f"checkpoint: {{key: {fleet.key}}}\n")
    av = Avsm(bindir, home).start()
    assert av.cli("add", fleet.venture).returncode == 0
    av.wait_for(lambda rs: any(r["kind"] == "report" for _, _, r in rs), what="the first report")
    yield av
    for a in (av, getattr(av, "liar", None)):
        if a is not None and a.proc.poll() is None:
            assert a.stop()[0] == 0


def witness(fleet, keep, host, *args, env=None, name="web", principal="web"):
    path = write(os.path.join(keep + ".yaml"), f"allowed_signers: {fleet.allowed}\n"
                 f"hosts:\n  - {{host: '{host}', name: {name}, principal: {principal}}}\n")
    return fleet.avsm("fleet", "--fleet", path, "witness", "--keep", keep, *args, env=env)


def rows(path, mode="ro"):
    db = sqlite3.connect(f"file:{path}?mode={mode}", uri=True)      # rw: a transaction killed is rolled back
    try:
        return db.execute("SELECT seq, at, prev, hash, record FROM records ORDER BY seq").fetchall()
    finally:
        db.close()


def test_a_witness_keeps_a_checkpoint_and_mirrors_the_records_with_a_read_only_key(fleet, host, tmp_path):
    """Issue 34 items 1-3: a run keeps the host's newest checkpoint, signed by the principal the fleet file
    names (one signed by another principal's key is refused, 65, and not kept), and copies every record; the
    next run reads only what is new (and the one it holds, again); a read-only key suffices, and a write key
    asks for a new checkpoint of the head."""
    keep = str(tmp_path / "w")
    for through in ("ro", f"host1:{host.home}"):
        run = witness(fleet, keep, through, "--mirror")
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.startswith("web  #") and "signed by web" in run.stdout, run.stdout
    kept = sorted(os.listdir(os.path.join(keep, "web", "checkpoints")))
    far = rows(os.path.join(host.home, "ledger.db"))
    mirror = rows(os.path.join(keep, "web", "ledger.db"))
    assert mirror == far[:len(mirror)] and len(mirror) >= int(kept[-2][:12])
    assert kept[-1].endswith(".sig") and os.path.exists(os.path.join(host.home, "checkpoints", kept[-2]))
    again = witness(fleet, keep, "ro", "--mirror")
    assert again.returncode == 0 and "1 record(s) read and checked, 0 copied" in again.stdout, again.stdout
    other = witness(fleet, str(tmp_path / "o"), "ro", principal="ops")
    assert other.returncode == 65 and "is refused: its signature is not ops's" in other.stdout, other.stdout
    assert not os.listdir(tmp_path / "o" / "web" / "checkpoints"), "a checkpoint refused is not kept"
    plain = witness(fleet, str(tmp_path / "p"), "ro")
    assert plain.returncode == 0 and "1 record(s) read" in plain.stdout, plain.stdout
    assert not os.path.exists(tmp_path / "p" / "web" / "ledger.db")


def test_a_mirror_answers_doctor_why_summary_and_chart_with_the_host_stopped(fleet, host, tmp_path):
    """Issue 34 items 2-3: with the far avsmd stopped, the mirror is a home whose ledger passes doctor (it
    says the ventures and the daemon are the host's), and why, summary and chart read it; the bridge serves
    the witness from the file with no avsmd; a host ssh cannot reach, or a key refused, is one line with
    fleet's code (68, 77), and the copy stays as it was."""
    keep = str(tmp_path / "w")
    assert witness(fleet, keep, "ro", "--mirror").returncode == 0
    assert host.stop()[0] == 0
    mirror = os.path.join(keep, "web")
    av = Avsm(host.bindir, mirror)
    doctor = av.cli("doctor")
    assert doctor.returncode == 0 and "FAIL" not in doctor.stdout, doctor.stdout
    assert "every proof in the ledger re-checks" in doctor.stdout and "still holds" in doctor.stdout
    assert "a witness's copy of web's ledger" in doctor.stdout
    assert av.cli("why", "1").returncode == 0 and av.cli("summary", "--since", "1").returncode == 0
    assert av.cli("chart", "shop").stdout.startswith("<svg")
    stopped = witness(fleet, keep, "ro", "--mirror")          # the bridge reads the file: no avsmd needed
    assert stopped.returncode == 0 and "1 copied" in stopped.stdout, stopped.stdout
    assert rows(os.path.join(keep, "web", "ledger.db")) == rows(os.path.join(host.home, "ledger.db"))
    for alias, code in (("dead", 68), ("stranger", 77)):
        down = witness(fleet, keep, alias, "--mirror")
        assert down.returncode == code and down.stdout.startswith(f"web  ssh could not reach avsm there"), \
            down.stdout
    assert av.cli("doctor").returncode == 0


def test_a_ledger_rewritten_whole_and_resigned_is_caught_while_its_own_doctor_says_all_is_well(fleet, host,
                                                                                              tmp_path):
    """Issue 34 item 1: the host's ledger rewritten from a record on (every later hash recomputed, through the
    triggers, as test_checkpoints forges) and its checkpoints written again and signed with the host's own key:
    the host's doctor passes, and the next witness run exits 65 naming the host, the first seq that differs
    (exactly, with the mirror; at or before the checkpoint kept, without) and both hashes, keeps both
    versions of the records, and tells this side's notify."""
    keep, plain = str(tmp_path / "w"), str(tmp_path / "p")
    assert witness(fleet, keep, "ro", "--mirror").returncode == 0
    assert witness(fleet, plain, f"host1:{host.home}").returncode == 0    # a checkpoint of the head
    before = rows(os.path.join(host.home, "ledger.db"))
    assert host.stop()[0] == 0
    target = 3
    rewrite(host.home, target)
    shutil.rmtree(os.path.join(host.home, "checkpoints"))
    host.start()                                # writes a checkpoint of the rewritten head, signed
    own = host.cli("doctor")
    assert own.returncode == 0, own.stdout
    here = str(tmp_path / "here")
    told = str(tmp_path / "told")
    write(os.path.join(here, "config.yaml"), f"notify: cat > {told}\n")
    caught = witness(fleet, keep, "ro", "--mirror", env={"AVSMD_HOME": here})
    assert caught.returncode == 65, caught.stdout + caught.stderr
    assert caught.stdout.startswith(f"web  its ledger no longer extends what this witness kept: #{target} is "
                                    f"not what was kept: it hashed to {before[target - 1][3][:16]} and the "
                                    f"host now has "), caught.stdout
    said = open(told).read()
    assert said.startswith("avsm: avsm fleet witness: web's ledger no longer extends what it kept"), said
    assert f"#{target} is not what was kept" in said
    kept = [json.loads(line) for line in open(os.path.join(keep, "web", f"fork-{target}-kept.jsonl"))]
    far = [json.loads(line) for line in open(os.path.join(keep, "web", f"fork-{target}-far.jsonl"))]
    assert kept[0]["seq"] == far[0]["seq"] == target and kept[0]["hash"] != far[0]["hash"]
    assert kept[0]["hash"] == before[target - 1][3] and far[0]["hash"] in caught.stdout.replace(" ", "") or \
        far[0]["hash"][:16] in caught.stdout
    assert "forger" in far[0]["record"] and "forger" not in kept[0]["record"]
    blind = witness(fleet, plain, "ro")
    assert blind.returncode == 65 and "differs at or before it" in blind.stdout, blind.stdout
    assert witness(fleet, keep, "ro", "--mirror").returncode == 65, "the next run goes on from what was kept"


def test_a_host_serving_the_witness_another_history_than_its_own_is_caught(fleet, host, tmp_path):
    """Issue 34 item 1: the host answers the witness's key from a ledger of its own making (a copy rewritten,
    with a checkpoint of the same origin signed by the host's key), its own ledger and doctor untouched: the
    witness's next run is refused (65) at the first seq that differs."""
    keep = str(tmp_path / "w")
    assert witness(fleet, keep, f"host1:{host.home}", "--mirror").returncode == 0
    src = sqlite3.connect(os.path.join(host.home, "ledger.db"))
    os.makedirs(fleet.liar_home, mode=0o700)
    dst = sqlite3.connect(os.path.join(fleet.liar_home, "ledger.db"))
    src.backup(dst)
    src.close()
    dst.close()
    rewrite(fleet.liar_home, 4)
    write(os.path.join(fleet.liar_home, "config.yaml"), f"checkpoint: {{key: {fleet.key}}}\n")
    host.liar = Avsm(host.bindir, fleet.liar_home).start()
    assert host.liar.cli("checkpoint").returncode == 0
    cks = os.path.join(fleet.liar_home, "checkpoints")
    name = max(n for n in os.listdir(cks) if n.endswith(".txt"))
    lines = open(os.path.join(cks, name)).read().split("\n")
    origin = open(os.path.join(keep, "web", "checkpoints",
                               min(os.listdir(os.path.join(keep, "web", "checkpoints"))))).readline().strip()
    forged = "\n".join([origin] + lines[1:])
    write(os.path.join(cks, name), forged)
    signed = subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", fleet.key, "-n", "avsm-checkpoint"],
                            input=forged.encode(), capture_output=True, check=True)
    open(os.path.join(cks, name + ".sig"), "wb").write(signed.stdout)
    caught = witness(fleet, keep, "liar", "--mirror")
    assert caught.returncode == 65 and "#4 is not what was kept" in caught.stdout, caught.stdout
    assert host.cli("doctor").returncode == 0


def test_an_interrupted_copy_resumes_exactly(fleet, host, tmp_path):
    """Issue 34 item 2: a first copy killed (SIGKILL) part way leaves the mirror a ledger that holds, and the
    next run copies the rest: no record twice, none missing, the mirror equal to the host's ledger."""
    assert host.stop()[0] == 0
    last = rows(os.path.join(host.home, "ledger.db"))[-1]
    bulk = [(seq, last[1], {"kind": "ledger", "claim": "measured", "venture": "self", "summary": f"filler {seq}"})
            for seq in range(last[0] + 1, last[0] + 200001)]    # seconds of copying: the kill is mid-way
    write_ledger(host.home, bulk)
    host.start()
    keep = str(tmp_path / "w")
    path = write(os.path.join(keep + ".yaml"), f"hosts:\n  - {{host: ro, name: web}}\n")
    proc = subprocess.Popen([*host.client(), "fleet", "--fleet", path, "witness", "--keep", keep, "--mirror"],
                            env=fleet.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    mirror = os.path.join(keep, "web", "ledger.db")
    deadline, seen = time.monotonic() + 60, 0
    while time.monotonic() < deadline and proc.poll() is None:
        try:        # the newest seq, not every row: reading them all let the copy finish first
            with contextlib.closing(sqlite3.connect(f"file:{mirror}?mode=ro", uri=True)) as db:
                seen = db.execute("SELECT max(seq) FROM records").fetchone()[0] or 0
        except sqlite3.Error:
            seen = 0
        if seen > 0:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = rows(mirror, "rw")
    assert 0 < len(partial) < len(bulk), f"killed after {len(partial)} of {len(bulk)} rows"
    again = witness(fleet, keep, "ro", "--mirror")
    assert again.returncode == 0 and f"#{len(partial)} to" not in again.stdout, again.stdout
    far, copy = rows(os.path.join(host.home, "ledger.db")), rows(mirror)
    assert copy == far[:len(copy)] and len(copy) >= last[0] + len(bulk)
    assert [r[0] for r in copy] == list(range(1, len(copy) + 1))
