"""Checkpoints: the ledger's head kept outside the file (issue 24). A real avsmd writes them to HOME/checkpoints,
signed with the host's own ssh-keygen -Y sign when config.yaml names a key; `avsm checkpoint` prints one; a ledger
rewritten whole (one record changed and every later hash recomputed, as the README's recipe allows) passes a plain
`avsm doctor` and fails `doctor --checkpoint` of a checkpoint kept from before, 65, naming where; a forged checkpoint
is refused; `doctor --quick` checks from the newest checkpoint a full doctor verified. DOCTOR-01 DOCTOR-13 LEDGER-09.

ssh-keygen comes from OpenSSH's client (.ci/run installs it with openssh-server); without it the tests of signing
skip, saying so."""

import json
import os
import shutil
import sqlite3
import subprocess

import pytest

import avsm
from conftest import make_venture, write
from test_proofs import write_ledger

DRAIN = """\
purpose: Keep the tank low.
metric: level
controller: {kind: threshold, above: 10, action: drain}
cadence: 2s
permitted:
  - {name: drain, run: ./drain, cap: 2/hour, reversible: false, delegated: true}
"""
needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                  reason="no ssh-keygen here: install openssh-client (.ci/run does) to sign checkpoints")


def keygen(path, comment="ops"):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], check=True)
    with open(path + ".pub") as fh:
        return fh.read().strip()


def rewrite(home, target):
    """Rewrite the ledger whole, as anyone who can write it can: record #target changed, every later hash
    recomputed, through a new file with the same schema and triggers."""
    path = os.path.join(home, "ledger.db")
    db = sqlite3.connect(path)
    rows = db.execute("SELECT seq, at, record FROM records ORDER BY seq").fetchall()
    db.close()
    os.unlink(path)
    db = sqlite3.connect(path)
    db.executescript(avsm.LEDGER_SCHEMA)
    db.close()
    records = [(seq, at, json.loads(text)) for seq, at, text in rows]
    for seq, at, record in records:
        if seq == target:
            record["summary"] += " (as the forger would have it)"
    write_ledger(home, records)


def fails(run):
    return [line for line in run.stdout.splitlines() if line.startswith("FAIL")]


@pytest.fixture
def signed(av, workdir):
    """A home whose config names a signing key, an allowed_signers file naming it, and a running avsmd."""
    key = os.path.join(workdir, "ck")
    pub = keygen(key)
    allowed = write(os.path.join(workdir, "allowed_signers"), f'ops namespaces="avsm-checkpoint" {pub}\n')
    write(os.path.join(av.home, "config.yaml"), f"checkpoint: {{key: {key}}}\n")
    os.chmod(av.home, 0o700)
    return key, allowed


@needs_keygen
def test_a_rewritten_ledger_passes_doctor_alone_and_fails_a_checkpoint_kept_from_before(av, workdir, signed):
    """Issue 24 items 1, 2, 4: avsmd writes signed checkpoints; a full rewrite that also rewrites the home's own
    checkpoints passes a plain doctor, and a checkpoint kept elsewhere fails it with 65, naming the first seq that
    no longer matches and the last that still holds; the home's own checkpoints catch a forger who forgot them."""
    key, allowed = signed
    d = make_venture(workdir, "tank", DRAIN, {"report": "#!/bin/sh\necho 50\n", "drain": "#!/bin/sh\nexit 0\n"})
    av.start()
    early = av.cli("checkpoint")
    assert early.returncode == 0 and early.stdout.startswith("avsm/") and "-----BEGIN SSH SIGNATURE-----" in early.stdout
    kept_dir = os.path.join(workdir, "kept")
    os.makedirs(kept_dir)
    write(os.path.join(kept_dir, "early.txt"), early.stdout)
    assert av.cli("add", d).returncode == 0
    action = av.wait_for(lambda rs: next((s for s, _, r in rs if r["kind"] == "action"), None), what="drain's action")
    written = os.path.join(av.home, "checkpoints")
    av.wait_for(lambda rs: any(int(n[:12]) >= action for n in os.listdir(written) if n.endswith(".txt")),
                what="a checkpoint after the irreversible action")
    assert all(os.path.exists(os.path.join(written, n + ".sig")) for n in os.listdir(written) if n.endswith(".txt"))
    av.wait_for(lambda rs: any(r["kind"] == "outcome" for _, _, r in rs), what="drain's outcome")
    later = av.cli("checkpoint").stdout
    write(os.path.join(kept_dir, "later.txt"), later)
    code, _ = av.stop()
    assert code == 0
    early_seq, later_seq = int(early.stdout.split("\n")[1]), int(later.split("\n")[1])
    held = av.cli("doctor", "--checkpoint", kept_dir, "--allowed-signers", allowed)
    assert fails(held) == [f"FAIL  no avsmd is running on {av.home}"], held.stdout
    assert "signed by ops" in held.stdout

    rewrite(av.home, early_seq + 1)         # after the early checkpoint, before the later one
    forgot = av.cli("doctor")
    assert forgot.returncode == 65 and "the ledger was rewritten at or before" in forgot.stdout, forgot.stdout
    shutil.rmtree(written)                  # the forger rewrites what the home holds too
    plain = av.cli("doctor")
    assert fails(plain) == [f"FAIL  no avsmd is running on {av.home}"], plain.stdout
    assert "every proof in the ledger re-checks" in plain.stdout
    for given in (os.path.join(kept_dir, "later.txt"), kept_dir):
        caught = av.cli("doctor", "--checkpoint", given, "--allowed-signers", allowed)
        assert caught.returncode == 65, caught.stdout
        line = next(line for line in fails(caught) if "rewritten" in line)
        assert f"#{later_seq} should hash to" in line and f"the ledger was rewritten at or before #{later_seq}" in line
        if given == kept_dir:
            assert f"and after #{early_seq}, which it still holds" in line
    piped = av.cli("doctor", "--checkpoint", "-", "--allowed-signers", allowed, input=later)
    assert piped.returncode == 65 and "on standard input" in piped.stdout


@needs_keygen
def test_a_forged_checkpoint_is_refused(av, workdir, signed):
    """Issue 24 items 2, 4: a checkpoint whose hash was changed, one signed by a key allowed_signers does not name,
    and one signed for another namespace are refused (65); a missing checkpoint is 66; no ssh-keygen is 69 with
    the path it looked on; an unsigned checkpoint is said to be unsigned."""
    key, allowed = signed
    av.start()
    good = av.cli("checkpoint").stdout
    assert av.stop()[0] == 0
    text, _, signature = good.partition("\n\n")
    lines = text.split("\n")
    cases = {"changed": "\n".join(lines[:2] + ["0" * 64] + lines[3:]) + "\n\n" + signature}
    other = os.path.join(workdir, "other")
    keygen(other, "mallory")
    for name, k, ns in (("stranger", other, "avsm-checkpoint"), ("namespace", key, "something-else")):
        sig = avsm.sign_text(text + "\n", k, ns)
        cases[name] = text + "\n\n" + sig + "\n"
    for name, data in cases.items():
        path = write(os.path.join(workdir, f"{name}.txt"), data)
        run = av.cli("doctor", "--checkpoint", path, "--allowed-signers", allowed)
        assert run.returncode == 65, (name, run.stdout)
        said = next(line for line in fails(run) if line.startswith(f"FAIL  checkpoint {path}"))
        assert ("signed by a key" in said) if name == "stranger" else ("does not verify under namespace" in said), said
    unsigned = write(os.path.join(workdir, "unsigned.txt"), text + "\n")
    run = av.cli("doctor", "--checkpoint", unsigned)
    assert "is unsigned" in run.stdout and run.returncode == 69, run.stdout
    forged = write(os.path.join(workdir, "forged.txt"), "\n".join(lines[:2] + ["1" * 64] + lines[3:]) + "\n")
    run = av.cli("doctor", "--checkpoint", forged)
    assert run.returncode == 65 and "should hash to 1111111111111111" in run.stdout
    assert av.cli("doctor", "--checkpoint", os.path.join(workdir, "none.txt")).returncode == 66
    bare = os.path.join(workdir, "bin")
    os.makedirs(bare)
    run = subprocess.run(av.client() + ["--home", av.home, "doctor", "--checkpoint", cases["changed"] and
                                        os.path.join(workdir, "changed.txt"), "--allowed-signers", allowed],
                         capture_output=True, text=True, env=dict(av.env, PATH=bare))
    assert run.returncode == 69 and "needs OpenSSH's ssh-keygen" in run.stdout and bare in run.stdout, run.stdout


def test_quick_checks_from_the_newest_checkpoint_a_full_doctor_verified(av, workdir):
    """Issue 24 item 3: --quick before any full doctor is refused (66); after one, it checks from that checkpoint
    on and says the records before it were not re-read; after a rewrite before it, it is refused (65)."""
    env = {"XDG_CACHE_HOME": os.path.join(workdir, "cache")}
    av.env.update(env)
    av.start()
    assert av.cli("checkpoint").returncode == 0
    first = av.cli("doctor", "--quick")
    assert first.returncode == 66 and "no full doctor has verified a checkpoint" in first.stdout
    full = av.cli("doctor")
    assert full.returncode == 0, full.stdout
    assert "checkpoints are written unsigned" in full.stdout
    quick = av.cli("doctor", "--quick")
    assert quick.returncode == 0 and "which a full doctor verified" in quick.stdout and "were not re-read" in quick.stdout
    assert av.stop()[0] == 0
    ckpt = max(int(name.split(".")[0]) for name in os.listdir(os.path.join(av.home, "checkpoints")) if name.endswith(".txt"))
    db = sqlite3.connect(os.path.join(av.home, "ledger.db"))        # the checkpointed record's text edited, its hash
    db.executescript("DROP TRIGGER records_no_update;")            # column left: --quick hashes it again
    db.execute("UPDATE records SET record = record || ' ' WHERE seq = ?", (ckpt,))       # still JSON, other bytes
    db.commit()
    db.executescript(avsm.LEDGER_SCHEMA)
    db.close()
    edited = av.cli("doctor", "--quick")
    assert edited.returncode == 65 and f"--quick refused: checkpoint #{ckpt}" in edited.stdout, edited.stdout
    rewrite(av.home, 1)
    refused = av.cli("doctor", "--quick")
    assert refused.returncode == 65 and "--quick refused" in refused.stdout, refused.stdout


def test_a_checkpoint_is_due_once_the_head_moved_and_every_has_passed_or_one_is_wanted():
    """The kernel's part (checkpoint_due): never without a head or before the head moves past the newest kept;
    then once `every` seconds passed since it was written, or at once when one is wanted (a key named since the
    newest was written, which sign_again_at_start says)."""
    kept, every = (10, 1000), 86400
    assert not avsm.checkpoint_due(None, kept, True, every, 10**9)
    assert not avsm.checkpoint_due((10, "ab"), kept, True, every, 10**9), "the head did not move"
    assert not avsm.checkpoint_due((11, "ab"), kept, False, every, 1000 + every - 1)
    assert avsm.checkpoint_due((11, "ab"), kept, False, every, 1000 + every)
    assert avsm.checkpoint_due((11, "ab"), kept, True, every, 1001)
    spec = {"key": "~/.ssh/k"}
    assert avsm.sign_again_at_start(spec, None, "AAAA") and avsm.sign_again_at_start(spec, "BBBB", "AAAA")
    assert not avsm.sign_again_at_start(spec, "AAAA", "AAAA") and not avsm.sign_again_at_start({"key": None}, None, "A")
