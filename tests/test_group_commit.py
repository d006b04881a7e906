"""Group commit (issue 15 item 1): the records that arrive in one wake-up of the warden are appended in one
transaction, still chained one by one, and a SIGKILL of the warden mid-burst loses nothing acknowledged.

The burst is made for real: each venture's report blocks on one FIFO until the test opens it, so a dozen
reports end within a few milliseconds of each other. The transactions are counted from outside with
SQLite's file change counter (the database header's bytes 24-27, moved by every write transaction that
commits in rollback-journal mode)."""

import os
import random
import shutil
import signal
import sqlite3
import tempfile
import threading
import time

from conftest import Avsm, check_ledger_safety, make_venture
from ledger_checks import verify_chain

VENTURES = 12
MANDATE = """purpose: Report when let through.
metric: count
controller: {kind: threshold, above: 1000000000, action: noop}
cadence: 1m
permitted:
  - {name: noop, run: ./noop, cap: 1/hour, reversible: true}
"""


def change_counter(home):
    with open(os.path.join(home, "ledger.db"), "rb") as fh:
        fh.seek(24)
        return int.from_bytes(fh.read(4), "big")


def burst_ventures(root, gate):
    """VENTURES ventures whose report marks that it started, then waits on the FIFO `gate`, then prints its pid."""
    report = f"#!/bin/sh\ntouch started\nread x < {gate}\necho $$\n"
    return [make_venture(root, f"b{i:02d}", MANDATE, {"report": report, "noop": "#!/bin/sh\n"}) for i in range(VENTURES)]


def open_gate(gate):
    """Let every report blocked on the FIFO through at once: a writer opens it and closes it (EOF)."""
    fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    os.close(fd)


def reports(av, since=0):
    """The reports after `since`; a moment after a SIGKILL mid-transaction, until avsmd's next write rolls the
    journal back, a read-only reader cannot read (it may not roll a hot journal back itself): it reads again."""
    for _ in range(100):
        try:
            return [(s, r) for s, _, r in av.records(since) if r["kind"] == "report"]
        except sqlite3.OperationalError:
            time.sleep(0.05)
    return [(s, r) for s, _, r in av.records(since) if r["kind"] == "report"]


def self_records(av):
    try:
        return [r for _, _, r in av.records() if r["venture"] == "self"]
    except sqlite3.OperationalError:
        return []


def setup_burst(bindir):
    root = tempfile.mkdtemp(prefix="avg", dir="/tmp")
    gate = os.path.join(root, "gate")
    os.mkfifo(gate)
    av = Avsm(bindir, os.path.join(root, "h")).start()
    dirs = burst_ventures(root, gate)
    for d in dirs:
        assert av.cli("add", d).returncode == 0
    deadline = time.monotonic() + 20
    while not all(os.path.exists(os.path.join(d, "started")) for d in dirs):
        assert time.monotonic() < deadline, "the reports did not start"
        time.sleep(0.02)
    time.sleep(0.2)                     # from `touch started` to the open of the FIFO
    return root, gate, av, dirs


def test_a_burst_of_reports_from_many_ventures_lands_in_few_transactions(bindir):
    """Issue 15 item 1: twelve ventures' reports ending together are appended in a handful of transactions
    (one per wake-up of the warden), not one each; every report is written once and the chain re-verifies.
    LEDGER-02 LEDGER-03 LEDGER-09"""
    root, gate, av, dirs = setup_burst(bindir)
    try:
        before, c0 = len(reports(av)), change_counter(av.home)
        assert before == 0
        deadline = time.monotonic() + 15
        while len(reports(av)) < VENTURES:
            assert time.monotonic() < deadline, f"only {len(reports(av))} reports were written"
            try:
                open_gate(gate)         # a report not yet in open() of the FIFO is let through next time
            except OSError:
                pass                    # no reader right now
            time.sleep(0.05)
        transactions = change_counter(av.home) - c0
        got = reports(av)
        assert len(got) == VENTURES and len({r["venture"] for _, r in got}) == VENTURES, got
        assert transactions <= VENTURES // 3, f"{VENTURES} reports took {transactions} transactions"
        code, _ = av.stop()
        assert code == 0
        check_ledger_safety(av.home)
    finally:
        if av.proc.poll() is None:
            os.killpg(av.proc.pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def test_warden_sigkilled_mid_burst_keeps_every_acknowledged_record(bindir):
    """Issue 15 item 1: the warden SIGKILLed a random few milliseconds into a burst of reports held for one
    transaction: the chain re-verifies, every record a reader saw committed before the kill is still there
    unchanged, no report is written twice (each prints its own pid), and the warden started again writes
    the next burst in a few transactions again. LEDGER-03 LEDGER-09 RUN-13"""
    root, gate, av, dirs = setup_burst(bindir)
    seen, halt = {}, threading.Event()

    def watch():                        # a reader: what it sees is committed, so acknowledged
        db = sqlite3.connect(f"file:{av.home}/ledger.db?mode=ro", uri=True, timeout=10)
        while not halt.is_set():
            try:
                for seq, h in db.execute("SELECT seq, hash FROM records WHERE seq > ?", (max(seen, default=0),)):
                    seen[seq] = h
            except sqlite3.OperationalError:
                pass
            time.sleep(0.002)
        db.close()
    watcher = threading.Thread(target=watch, daemon=True)
    try:
        warden = av.wardens()
        assert len(warden) == 1
        watcher.start()
        time.sleep(0.05)
        open_gate(gate)
        time.sleep(random.uniform(0.0, 0.03))
        os.kill(warden[0], signal.SIGKILL)
        halt.set()
        watcher.join()
        deadline = time.monotonic() + 15
        while not any(r["kind"] == "restart" for r in self_records(av)):
            assert time.monotonic() < deadline, "avsmd did not start the warden again"
            time.sleep(0.05)
        c0 = change_counter(av.home)
        deadline = time.monotonic() + 15        # the new warden's rounds start at once: let them through
        while len({r["venture"] for s, r in reports(av) if s > max(seen)}) < VENTURES:
            assert time.monotonic() < deadline, "the restarted warden did not write every venture's report"
            try:
                open_gate(gate)
            except OSError:
                pass
            time.sleep(0.05)
        transactions = change_counter(av.home) - c0
        assert transactions <= VENTURES // 2, f"the restarted warden's {VENTURES} reports took {transactions} transactions"
        code, _ = av.stop()
        assert code == 0
        check_ledger_safety(av.home)
        db = sqlite3.connect(f"file:{av.home}/ledger.db?mode=ro", uri=True)
        now = dict(db.execute("SELECT seq, hash FROM records"))
        db.close()
        lost = [s for s, h in seen.items() if now.get(s) != h]
        assert not lost, f"records seen committed before the kill are gone or changed: {lost}"
        values = [(r["venture"], r["value"]) for _, r in reports(av)]
        assert len(values) == len(set(values)), f"a report was written twice: {values}"
    finally:
        halt.set()
        if av.proc.poll() is None:
            os.killpg(av.proc.pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def held_report(n):
    return {"kind": "report", "claim": "measured", "venture": "v", "metric": "count", "value": n, "status": "trusted",
            "plausible": True, "note": "", "summary": f"count = {n}"}


def test_held_appends_are_one_transaction_seen_only_once_committed(tmp_path):
    """Issue 15 item 1: appends with hold=True join one open transaction, chained one by one: a reader sees
    none of them until commit(), then all; the file change counter moves once; an append without hold
    commits what is held with it. LEDGER-02 LEDGER-03 LEDGER-09"""
    import avsm
    path = str(tmp_path / "ledger.db")
    ledger = avsm.Ledger(path)
    try:
        c0 = change_counter(str(tmp_path))
        seqs = [ledger.append_many([held_report(i)], 1000 + i, hold=True)[0] for i in range(5)]
        assert seqs == [1, 2, 3, 4, 5]
        reader = avsm.open_ledger_ro(path)
        assert reader.execute("SELECT count(*) FROM records").fetchone()[0] == 0
        assert ledger.commit() == 5
        assert reader.execute("SELECT count(*) FROM records").fetchone()[0] == 5
        assert change_counter(str(tmp_path)) - c0 == 1
        ledger.append_many([held_report(5)], 1005, hold=True)
        assert ledger.append(held_report(6), 1006) == 7          # commits the held one with it
        assert reader.execute("SELECT count(*) FROM records").fetchone()[0] == 7
        assert change_counter(str(tmp_path)) - c0 == 2
        assert verify_chain(reader) == (7, None)
        reader.close()
    finally:
        ledger.close()


def test_a_held_transaction_whose_lock_is_lost_commits_nothing_and_says_what_was_lost(tmp_path):
    """Issue 15 item 1: the lock is checked again just before a held transaction commits: lost by then, the
    whole group is rolled back, LockLost is raised, `lost` names the held records, and the ledger goes on
    from where it was. LEDGER-03, open point 53"""
    import pytest
    import avsm
    ours = [True]
    ledger = avsm.Ledger(str(tmp_path / "ledger.db"), still_ours=lambda: ours[0])
    try:
        assert ledger.append(held_report(0), 1000) == 1
        for i in (1, 2, 3):
            ledger.append_many([held_report(i)], 1000 + i, hold=True)
        ours[0] = False
        with pytest.raises(avsm.LockLost):
            ledger.commit()
        assert [s for s, _, _ in ledger.lost] == [2, 3, 4] and not ledger.db.in_transaction
        assert ledger.db.execute("SELECT max(seq) FROM records").fetchone()[0] == 1
        ours[0] = True
        assert ledger.append(held_report(9), 1009) == 2
        assert verify_chain(ledger.db) == (2, None)
    finally:
        ledger.close()
