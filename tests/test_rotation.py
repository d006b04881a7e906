"""Rotation (issue 33 item 4): `avsm rotate` and config.yaml's `ledger: {rotate, keep}` close ledger.db into
HOME/ledgers/FIRST-LAST.db and go on in a new ledger.db whose first record chains to the closed file's last and
carries the snapshot of the fold to it. The tests run the real avsmd and client on a short temp home."""

import json
import os
import re
import shutil
import sqlite3
import time

from conftest import Avsm, make_venture, write

import avsm

MANDATE = """purpose: keep m down
metric: m
cadence: 1s
controller: {kind: threshold, above: 50, action: up}
permitted:
  - {name: up, run: ./up, cap: 3/hour, reversible: true}
"""


def files(home):
    """[(first, last, path)] of the closed files, then ledger.db's own (first, last, path)."""
    closed = avsm.closed_files(home)
    path = os.path.join(home, "ledger.db")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        first, last = db.execute("SELECT min(seq), max(seq) FROM records").fetchone()
    return closed + [(first, last, path)]


def all_rows(home):
    """Every (seq, at, prev, hash, record) of every file, in file order, read with sqlite3 alone."""
    rows = []
    for _, _, path in files(home):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        rows += db.execute("SELECT seq, at, prev, hash, record FROM records ORDER BY seq").fetchall()
        db.close()
    return rows


def venture(tmp_path, name="v", value=80):
    return make_venture(str(tmp_path), name, MANDATE, {"report": f"#!/bin/sh\necho {value}\n", "up": "#!/bin/sh\n"})


def test_rotate_closes_the_file_and_the_chain_goes_on(av, tmp_path):
    """`avsm rotate`: the closed file is read-only, named by its seqs, and the new ledger.db's first record
    names it, chains to its last record (prev = its hash) and carries the snapshot of the fold to it; the chain
    re-verifies across the files with sqlite3 and sha256 alone, and seqs never restart."""
    directory = venture(tmp_path)
    av.start()
    assert av.cli("add", directory).returncode == 0
    av.wait_for(lambda rs: sum(r["kind"] == "outcome" for _, _, r in rs) >= 1, what="a run of up")
    r = av.cli("rotate")
    assert r.returncode == 0, r.stderr
    (first, last, closed), (new_first, _, _) = files(av.home)
    assert (first, os.path.basename(closed)) == (1, f"{1:012d}-{last:012d}.db")
    assert re.search(rf"#{last + 1}: ledger.db goes on from ledgers/{os.path.basename(closed)}", r.stdout)
    assert new_first == last + 1 and os.stat(closed).st_mode & 0o777 == 0o400
    rows = all_rows(av.home)
    assert [s for s, *_ in rows] == list(range(1, len(rows) + 1))
    prev = avsm.ZERO_HASH
    for seq, at, p, h, text in rows:
        assert p == prev and avsm.chain_hash(p, seq, at, text) == h, f"#{seq}"
        prev = h
    carried = json.loads(rows[last][4])
    assert carried["kind"] == "snapshot" and carried["seq"] == last and carried["hash"] == rows[last - 1][3]
    assert carried["file"] == os.path.basename(closed)
    with open(avsm.snapshot_path(av.home, last), "rb") as fh:
        assert avsm.text_sha256(fh.read().decode()) == carried["sha256"]
    # the warden goes on appending in the new file; a self record of avsmd's too
    av.wait_for(lambda rs: any(s > last + 1 and r["kind"] == "report" for s, _, r in rs), what="a report after")
    tail = av.cli("tail", "--since", "0")
    assert tail.returncode == 0 and tail.stdout.startswith("#1 ")
    assert len(tail.stdout.splitlines()) >= last + 2
    # a witness's `records` page reads across the files too: every row once, in order
    page = [line for m in avsm.records_answer(av.home, {"after": 0})[1:-1] for line in m["out"].split("\n")]
    assert [int(line.split()[0]) for line in page] == list(range(1, len(page) + 1)) and len(page) > last + 1


def test_a_cap_counted_across_the_boundary_holds_and_proofs_recheck(av, tmp_path):
    """The cap (3/hour) counts the run in the closed file: after a rotation and a restart (which folds from the
    snapshot the new file carries), two more runs and then a refusal for the cap; each run's proof cites the
    runs before it, across the boundary, and `why` re-checks it; summary and chart read both files; doctor
    passes over both, the carried snapshot the ledger's own fold. `up` sets the metric back to 10, so each run
    waits for the test to set 80."""
    directory = make_venture(str(tmp_path), "v", MANDATE, {"report": "#!/bin/sh\ncat value\n",
                                                           "up": "#!/bin/sh\necho 10 > value\n", "value": "80\n"})

    def runs():
        return [(s, json.loads(t)) for s, _, _, _, t in all_rows(av.home) if json.loads(t)["kind"] == "action"]
    av.start()
    assert av.cli("add", directory).returncode == 0
    av.wait_for(lambda rs: any(r["kind"] == "outcome" for _, _, r in rs)
                and sum(r.get("status") == "trusted" for _, _, r in rs) >= 3, what="a run and trusted reports")
    assert av.cli("rotate").returncode == 0
    last = files(av.home)[0][1]
    av.stop()
    av.start()
    deadline = time.monotonic() + 60
    while not any(json.loads(t)["kind"] == "refusal" for *_, t in all_rows(av.home)) and time.monotonic() < deadline:
        write(os.path.join(directory, "value"), "80\n")      # each run sets it back to 10
        time.sleep(0.5)
    refusals = [json.loads(t) for *_, t in all_rows(av.home) if json.loads(t)["kind"] == "refusal"]
    assert refusals and "cap" in refusals[0]["why"], refusals
    actions = runs()
    assert len(actions) == 3, actions
    (first, _), (second, _), (third, proof3) = actions
    assert first <= last < third
    assert {first, second} <= set(proof3["proof"]["premises"])
    for seq in (first, second, third):
        why = av.cli("why", str(seq))
        assert why.returncode == 0 and "re-checks: yes" in why.stdout, why.stdout + why.stderr
    summary = av.cli("summary", "--since", "0")
    assert summary.returncode == 0 and f"lever up: ran 3 time(s), 3 ok: #{first}, #{second}, #{third}" \
        in summary.stdout, summary.stdout
    chart = av.cli("chart", "v", "--since", "0")
    drawn = int(re.search(r"(\d+) trusted reports", chart.stdout)[1])
    here = [json.loads(t) for s, _, _, _, t in all_rows(av.home) if s > last]      # read after the chart
    assert drawn > sum(r["kind"] == "report" and r["status"] == "trusted" for r in here)
    doctor = av.cli("doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "every proof in the ledger re-checks" in doctor.stdout and "1 closed ledger file(s)" in doctor.stdout
    assert f"snapshot #{last} " in doctor.stdout and f"is the ledger's fold to #{last}" in doctor.stdout


def test_a_moved_closed_file_is_named_not_a_traceback(av, tmp_path):
    """A closed file moved away: tail, why and doctor name the seqs it held and its place, and avsmd still
    starts from the snapshot the new file carries; doctor says the chain across it is not checked."""
    directory = venture(tmp_path)
    av.start()
    assert av.cli("add", directory).returncode == 0
    av.wait_for(lambda rs: sum(r["kind"] == "outcome" for _, _, r in rs) >= 1, what="a run of up")
    assert av.cli("rotate").returncode == 0
    av.stop()
    first, last, closed = files(av.home)[0]
    shutil.move(closed, str(tmp_path / "away.db"))
    name = os.path.basename(closed)
    tail = av.cli("tail", "--since", "0")
    assert tail.returncode == 0 and f"records #1 to #{last}" in tail.stderr and "Traceback" not in tail.stderr
    assert tail.stdout.startswith(f"#{last + 1} ")
    why = av.cli("why", "1")
    assert why.returncode != 0 and f"#1 to #1" in why.stderr and "Traceback" not in why.stderr, why.stderr
    av.start()
    assert av.cli("status").returncode == 0
    doctor = av.cli("doctor")
    assert "Traceback" not in doctor.stderr and f"...-{name[13:]}" in doctor.stdout, doctor.stdout + doctor.stderr
    assert f"records #1 to #{last} are in a closed ledger file that is not in" in doctor.stdout
    assert doctor.returncode == 0, doctor.stdout
    av.stop()
    shutil.move(str(tmp_path / "away.db"), closed)      # back, for the safety check of the whole ledger


def test_config_rotates_by_size_and_keep_deletes_only_past_a_checkpoint(av, tmp_path):
    """ledger: {rotate: 64K, keep: 1s}: the warden closes ledger.db once it is 64 KiB, and deletes a closed
    file only once a checkpoint is past its last record, writing a self.ledger record that names it."""
    write(os.path.join(av.home, "config.yaml"), "ledger: {rotate: 64K, keep: 1s}\ncheckpoint: {every: 1h}\n")
    ventures = [venture(tmp_path / str(i), f"v{i}", value=10) for i in range(12)]
    av.start()
    for d in ventures:
        assert av.cli("add", d).returncode == 0
    deadline = time.monotonic() + 60
    while not avsm.closed_files(av.home) and time.monotonic() < deadline:
        time.sleep(0.5)
    closed = avsm.closed_files(av.home)
    assert closed, "no rotation within 60 s"
    assert not any(json.loads(t).get("deleted") for *_, t in all_rows(av.home))     # no checkpoint past it yet
    time.sleep(1.5)                 # older than keep: 1s
    assert av.cli("checkpoint").returncode == 0
    assert av.cli("rotate").returncode == 0
    rows = all_rows(av.home)
    deleted = [json.loads(t) for *_, t in rows if json.loads(t).get("deleted")]
    assert os.path.basename(closed[0][2]) in [d["deleted"] for d in deleted], av.stderr()
    assert not os.path.exists(closed[0][2])
    doctor = av.cli("doctor")
    assert doctor.returncode == 0, doctor.stdout


def test_the_config_refuses_what_it_cannot_rotate_by(av):
    """ledger: is checked at avsmd -t: a size too small, a word that is neither a duration nor a size, keep
    without rotate: 78 with the fix; a good one is said as it will be carried out."""
    for text, said in (("ledger: {rotate: 1K}", "rotate at 64K or more"),
                       ("ledger: {rotate: often}", "rotate is a duration (1d"),
                       ("ledger: {keep: 90d}", "ledger has no 'rotate'")):
        write(os.path.join(av.home, "config.yaml"), text + "\n")
        r = av.daemon_cmd("-t")
        assert r.returncode == 78 and said in r.stderr, (text, r.stderr)
    write(os.path.join(av.home, "config.yaml"), "ledger: {rotate: 2G, keep: 90d}\n")
    r = av.daemon_cmd("-t")
    assert r.returncode == 0, r.stderr
    assert "ledger: ledger.db is closed into HOME/ledgers once it is 2G; closed files are each deleted 90d" \
        in r.stdout, r.stdout


def test_hostile_homes_get_a_precise_error_and_leave_the_ledger_whole(av, tmp_path):
    """HOME/ledgers a file: `avsm rotate` is 75 naming why, nothing is closed, avsmd goes on appending; a usage
    error is 64; a closed file replaced by garbage: tail, why and doctor are 65 naming that file (and doctor
    says how to go on), never a traceback; moved out of the way, the rest reads again."""
    directory = venture(tmp_path)
    av.start()
    assert av.cli("add", directory).returncode == 0
    assert av.cli("rotate", "now").returncode == 64
    write(os.path.join(av.home, "ledgers"), "")
    r = av.cli("rotate")
    assert r.returncode == 75 and "File exists" in r.stderr and "ledgers" in r.stderr, r.stderr
    assert not avsm.closed_files(av.home) if os.path.isdir(os.path.join(av.home, "ledgers")) else True
    before = len(all_rows(av.home))
    av.wait_for(lambda rs: len(rs) > before + 2, what="records after the refused rotation")
    os.remove(os.path.join(av.home, "ledgers"))
    assert av.cli("rotate").returncode == 0
    (_, last, closed), _ = files(av.home)
    av.stop()
    os.chmod(closed, 0o600)
    with open(closed, "w") as fh:
        fh.write("not a ledger\n")
    for args in (("tail", "--since", "0"), ("why", "1"), ("doctor",)):
        r = av.cli(*args)
        said = r.stdout + r.stderr
        assert r.returncode == 65 and f"{closed}, a closed ledger file, cannot be read" in said, (args, said)
        assert "Traceback" not in said
    os.rename(closed, str(tmp_path / "garbage.db"))
    tail = av.cli("tail", "--since", "0")
    assert tail.returncode == 0 and tail.stdout.startswith(f"#{last + 1} ") and f"records #1 to #{last}" in tail.stderr
    os.rename(str(tmp_path / "garbage.db"), closed)     # the safety check reads every file: this one must go
    os.remove(closed)
