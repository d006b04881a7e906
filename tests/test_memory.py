"""What a venture costs in memory (issue 15 item 2: avsmd + warden <= 60 MiB at 1,000 ventures): the warden's
venture states keep their fields in slots, and a scan of the whole ledger (avsmd's check at its start, the
warden's load and refold) runs with a small SQLite page cache. No requirement ID names a memory budget; the
issue's figure is checked by tests/bench/bench_scale.py."""

import sqlite3
import tracemalloc

import avsm

REPORT = {"kind": "report", "claim": "measured", "venture": "v", "metric": "count", "value": 1, "status": "trusted",
          "plausible": True, "note": "", "summary": "count = 1"}


def test_a_thousand_venture_states_take_under_2_5_kib_each():
    """Issue 15 item 2: a VentureState's forty-odd fields are slots (a __dict__ of over 30 keys shares none:
    3.3 KiB a state before), and a field added without a slot still works."""
    tracemalloc.start()
    try:
        states = [avsm.VentureState(f"v{i}") for i in range(1000)]
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert used / len(states) < 2500
    states[0].not_a_field = 1           # the __dict__ fallback
    assert states[0].not_a_field == 1 and not hasattr(states[1], "not_a_field")


def test_a_whole_ledger_scan_reads_every_record_with_a_small_page_cache(tmp_path):
    """Issue 15 item 2: scan_records yields what read_records does, with SCAN_CACHE_KIB of page cache while it
    runs, and gives the connection its cache size back after (also when the scan is left unfinished)."""
    ledger = avsm.Ledger(str(tmp_path / "ledger.db"))
    ledger.append_many([dict(REPORT, value=i) for i in range(50)], 1_700_000_000)
    db = ledger.db
    db.execute("PRAGMA cache_size=-3000")
    seen = []
    for seq, at, record in avsm.scan_records(db):
        seen.append((seq, at, record))
        assert db.execute("PRAGMA cache_size").fetchone()[0] == -avsm.SCAN_CACHE_KIB
    assert seen == list(avsm.read_records(db)) and len(seen) == 50
    assert db.execute("PRAGMA cache_size").fetchone()[0] == -3000
    scan = avsm.scan_records(db)
    next(scan)
    scan.close()
    assert db.execute("PRAGMA cache_size").fetchone()[0] == -3000
    assert avsm.ledger_problem(db) is None
    assert db.execute("PRAGMA cache_size").fetchone()[0] == -3000
    ledger.close()
