"""The ledger (section 5): schema, pragmas, the hash chain, the triggers, verification, the WAL move,
read-only readers, the README's re-verification recipe, and `avsm tail` over real ledger files.

Every test works on a real SQLite file in a temporary directory; nothing is mocked."""

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

import avsm
from ledger_checks import verify_chain

ZEROS = "0" * 64
AT0 = 1_700_000_000
HEX64 = re.compile(r"^[0-9a-f]{64}$")
TAIL_LINE = re.compile(r"^#\d+ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d \S+ (measured|declared|inferred) \S+ .*$")
README_RECIPE = ("""printf '%s' "$(sqlite3 -readonly ledger.db "SELECT prev || char(10) || seq || char(10) || at """
                 """|| char(10) || record FROM records WHERE seq = 2")" | sha256sum""")


def report(summary, **fields):
    return dict({"kind": "report", "claim": "measured", "venture": "v", "summary": summary, "metric": "m",
                 "status": "trusted", "plausible": True, "note": ""}, **fields)


def sha(prev, seq, at, text):
    """The hash recipe of DESIGN.md, written out independently of avsm.chain_hash."""
    return hashlib.sha256((prev + "\n" + str(seq) + "\n" + str(at) + "\n" + text).encode("utf-8")).hexdigest()


def build(path, n, summary="reading {i}"):
    """A ledger of n reports appended through avsm.Ledger, one second apart; return the path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ledger = avsm.Ledger(path)
    try:
        for i in range(1, n + 1):
            ledger.append(report(summary.format(i=i), value=i), AT0 + i)
    finally:
        ledger.close()
    return path


def build_fast(path, n):
    """A ledger of n chained reports written in one transaction of plain INSERTs (the triggers still check)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    avsm.Ledger(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    prev = ZEROS
    for seq in range(1, n + 1):
        text = avsm.canonical(report(f"reading {seq} of a long ledger", value=seq))
        h = avsm.chain_hash(prev, seq, AT0 + seq, text)
        db.execute("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, ?, 1, ?)",
                   (seq, AT0 + seq, prev, h, text))
        prev = h
    db.execute("COMMIT")
    db.close()
    return path


def rows(path):
    """Every row exactly as stored, with the storage class of each value and the record's bytes."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT seq, at, typeof(at), prev, hash, weight, typeof(weight), record, hex(record) "
                          "FROM records ORDER BY seq").fetchall()
    finally:
        db.close()


def verify(path):
    db = avsm.open_ledger_ro(path)
    try:
        return verify_chain(db)
    finally:
        db.close()


def header_versions(path):
    """Bytes 18 and 19 of the database header: (1, 1) for a rollback journal, (2, 2) for WAL."""
    with open(path, "rb") as fh:
        head = fh.read(20)
    return head[18], head[19]


def drop_triggers(path):
    """Open `path` with plain sqlite3 and drop every trigger, as someone bypassing the ledger would."""
    db = sqlite3.connect(path, isolation_level=None)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    return db


@pytest.fixture
def ledger_dir(workdir):
    return os.path.join(workdir, "l")


# ---------------------------------------------------------------------------
# schema and pragmas
# ---------------------------------------------------------------------------

def test_schema_is_one_table_records(ledger_dir):
    """LEDGER-01, LEDGER-06, LEDGER-07, LEDGER-10: ledger.db holds exactly one table, `records`, with the
    columns seq (the integer primary key), at, prev, hash, weight (default 1) and record, all NOT NULL."""
    path = build(os.path.join(ledger_dir, "ledger.db"), 1)
    db = sqlite3.connect(path)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                       "AND name NOT LIKE 'sqlite_%'")]
    assert tables == ["records"]
    cols = db.execute("PRAGMA table_info(records)").fetchall()   # cid, name, type, notnull, dflt, pk
    assert [c[1] for c in cols] == ["seq", "at", "prev", "hash", "weight", "record"]
    by_name = {c[1]: c for c in cols}
    assert by_name["seq"][2].upper() == "INTEGER" and by_name["seq"][5] == 1
    assert by_name["at"][2].upper() == "INTEGER"
    assert by_name["weight"][2].upper() == "INTEGER" and by_name["weight"][4] == "1"
    assert all(by_name[c][3] == 1 for c in ("at", "prev", "hash", "weight", "record"))
    views = db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'view'").fetchone()[0]
    assert views == 0
    db.close()


def test_writer_uses_rollback_journal_and_full_sync(ledger_dir):
    """LEDGER-02: the writer's connection runs journal_mode=delete and synchronous=FULL (2), and the file
    stays a rollback-journal database (no -wal file, header versions 1) for any later reader."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    ledger = avsm.Ledger(path)
    try:
        assert ledger.db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"
        assert ledger.db.execute("PRAGMA synchronous").fetchone()[0] == 2
        ledger.append(report("one"), AT0)
        assert ledger.db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"
        assert ledger.db.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert not os.path.exists(path + "-wal")
    finally:
        ledger.close()
    plain = sqlite3.connect(path)
    assert plain.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"
    plain.close()
    assert header_versions(path) == (1, 1)


# ---------------------------------------------------------------------------
# appends and the chain
# ---------------------------------------------------------------------------

def test_appends_form_the_documented_chain(ledger_dir):
    """LEDGER-07, LEDGER-08, LEDGER-09, LEDGER-10, LEDGER-11, open point 50: seq counts from 1, `at` is the
    given unix time stored as an integer, the first prev is 64 zeros, each prev is the last hash, and
    hash = sha256(prev \\n seq \\n at \\n record) in lowercase hex over the stored JSON text, which is
    compact with sorted keys (avsm.canonical) and carries kind, claim and venture."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    given = [report("first", value=1.5, plausible=True),
             {"venture": "self", "summary": "avsmd started", "kind": "start", "claim": "measured", "pid": 42},
             {"z": [3, {"b": 1, "a": None}], "kind": "mandate", "claim": "declared", "venture": "v",
              "summary": "adopted", "text": "purpose: x\n"}]
    ledger = avsm.Ledger(path)
    try:
        seqs = [ledger.append(r, AT0 + 10 * i) for i, r in enumerate(given)]
    finally:
        ledger.close()
    assert seqs == [1, 2, 3]
    stored = rows(path)
    assert [r[0] for r in stored] == [1, 2, 3]
    prev = ZEROS
    for (seq, at, at_type, p, h, weight, weight_type, text, _), record in zip(stored, given):
        assert (at, at_type) == (AT0 + 10 * (seq - 1), "integer")
        assert (weight, weight_type) == (1, "integer")
        assert p == prev
        assert HEX64.match(h), h
        assert h == sha(p, seq, at, text)
        assert h == avsm.chain_hash(p, seq, at, text)
        assert text == avsm.canonical(record)
        assert json.loads(text) == record
        assert text in (json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
                        json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True))
        assert {"kind", "claim", "venture"} <= set(json.loads(text))
        prev = h
    assert verify(path) == (3, None)


def test_canonical_is_compact_and_sorted():
    """LEDGER-11, open point 50: the stored text of a record is compact JSON with keys sorted at every depth,
    the same for the same record however its keys were ordered."""
    a = {"summary": "s", "kind": "report", "venture": "v", "claim": "measured", "x": {"b": 2, "a": [1, 2]}}
    b = dict(reversed(list(a.items())))
    assert avsm.canonical(a) == avsm.canonical(b)
    assert avsm.canonical(a) == '{"claim":"measured","kind":"report","summary":"s","venture":"v","x":{"a":[1,2],"b":2}}'


def test_append_refuses_a_record_without_kind_claim_venture(ledger_dir):
    """LEDGER-11: a record without kind, claim or venture (or with a claim that is not measured, declared or
    inferred) is refused by the append function and nothing is written."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    ledger = avsm.Ledger(path)
    try:
        ledger.append(report("ok"), AT0)
        for bad in ({"claim": "measured", "venture": "v", "summary": "s"},
                    {"kind": "report", "venture": "v", "summary": "s"},
                    {"kind": "report", "claim": "measured", "summary": "s"},
                    {"kind": "report", "claim": "guessed", "venture": "v", "summary": "s"}):
            with pytest.raises(ValueError):
                ledger.append(bad, AT0 + 1)
            assert not ledger.db.in_transaction
        assert ledger.append(report("still appends"), AT0 + 2) == 2
    finally:
        ledger.close()
    assert verify(path) == (2, None)


def test_append_checks_the_lock_inside_the_write_transaction(ledger_dir):
    """Open point 53, LEDGER-03: the still_ours check runs while the append holds the write lock (no other
    writer can get in), and a lost lock appends nothing and leaves the connection usable."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    seen = []

    def still_ours():
        other = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            seen.append("unlocked")
        except sqlite3.OperationalError as err:
            seen.append(str(err))
        finally:
            other.close()
        return ours[0]

    ours = [True]
    ledger = avsm.Ledger(path, still_ours=still_ours)
    try:
        assert ledger.append(report("mine"), AT0) == 1
        assert seen == ["database is locked"]
        ours[0] = False
        with pytest.raises(avsm.LockLost):
            ledger.append(report("not mine any more"), AT0 + 1)
        assert not ledger.db.in_transaction
        ours[0] = True
        assert ledger.append(report("mine again"), AT0 + 2) == 2
    finally:
        ledger.close()
    assert [json.loads(r[7])["summary"] for r in rows(path)] == ["mine", "mine again"]
    assert verify(path) == (2, None)


def test_append_never_writes_a_record_that_does_not_verify(ledger_dir):
    """LEDGER-08, LEDGER-09: `at` is unix seconds; an append given a float time either refuses it or stores a
    record whose hash verifies. It must never write a broken link."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    ledger = avsm.Ledger(path)
    try:
        try:
            ledger.append(report("float time"), float(AT0))
        except (TypeError, ValueError):
            pass
    finally:
        ledger.close()
    assert verify(path)[1] is None


# ---------------------------------------------------------------------------
# the triggers, from a plain sqlite3 connection
# ---------------------------------------------------------------------------

ATTACKS = {
    "update record": "UPDATE records SET record = '{\"kind\":\"x\"}' WHERE seq = 2",
    "update weight": "UPDATE records SET weight = 2 WHERE seq = 3",
    "update at of the last": "UPDATE records SET at = at + 1 WHERE seq = 3",
    "update all": "UPDATE records SET hash = hash",
    "delete the last": "DELETE FROM records WHERE seq = 3",
    "delete all": "DELETE FROM records",
    "insert skipping a seq": "INSERT INTO records(seq, at, prev, hash, weight, record) "
                             "VALUES (5, 1, (SELECT hash FROM records WHERE seq = 3), 'h', 1, '{}')",
    "insert an existing seq": "INSERT INTO records(seq, at, prev, hash, weight, record) "
                              "VALUES (3, 1, (SELECT hash FROM records WHERE seq = 3), 'h', 1, '{}')",
    "insert or replace": "INSERT OR REPLACE INTO records(seq, at, prev, hash, weight, record) "
                         "VALUES (2, 1, (SELECT hash FROM records WHERE seq = 1), 'h', 1, '{}')",
    "upsert": "INSERT INTO records(seq, at, prev, hash, weight, record) "
              "VALUES (2, 1, (SELECT hash FROM records WHERE seq = 1), 'h', 1, '{}') "
              "ON CONFLICT(seq) DO UPDATE SET record = excluded.record",
    "insert without seq": "INSERT INTO records(at, prev, hash, weight, record) "
                          "VALUES (1, (SELECT hash FROM records WHERE seq = 3), 'h', 1, '{}')",
    "insert with zero seq": "INSERT INTO records(seq, at, prev, hash, weight, record) "
                            "VALUES (0, 1, (SELECT hash FROM records WHERE seq = 3), 'h', 1, '{}')",
    "insert prev not the last hash": "INSERT INTO records(seq, at, prev, hash, weight, record) "
                                     "VALUES (4, 1, (SELECT hash FROM records WHERE seq = 2), 'h', 1, '{}')",
    "insert prev of zeros": f"INSERT INTO records(seq, at, prev, hash, weight, record) "
                            f"VALUES (4, 1, '{ZEROS}', 'h', 1, '{{}}')",
    "insert weight 2": "INSERT INTO records(seq, at, prev, hash, weight, record) "
                       "VALUES (4, 1, (SELECT hash FROM records WHERE seq = 3), 'h', 2, '{}')",
    "insert weight 0": "INSERT INTO records(seq, at, prev, hash, weight, record) "
                       "VALUES (4, 1, (SELECT hash FROM records WHERE seq = 3), 'h', 0, '{}')",
    "insert weight null": "INSERT INTO records(seq, at, prev, hash, weight, record) "
                          "VALUES (4, 1, (SELECT hash FROM records WHERE seq = 3), 'h', NULL, '{}')",
}


@pytest.mark.parametrize("sql", list(ATTACKS.values()), ids=list(ATTACKS))
def test_triggers_refuse_changes_and_unchained_inserts(ledger_dir, sql):
    """LEDGER-10, LEDGER-13, LEDGER-14, LEDGER-15, open point 50: a plain sqlite3 connection cannot update or
    delete a record, nor insert one whose seq is not last+1, whose prev is not the last hash, or whose weight
    is not 1; the refusal is an sqlite3 error and the ledger is unharmed afterwards."""
    path = build(os.path.join(ledger_dir, "ledger.db"), 3)
    before = rows(path)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.DatabaseError):
            db.execute(sql)
    finally:
        db.close()
    assert rows(path) == before
    assert verify(path) == (3, None)


def test_triggers_refuse_inside_a_transaction_and_on_the_writer_connection(ledger_dir):
    """LEDGER-13, LEDGER-14, LEDGER-15: the triggers hold on avsm's own writer connection too, and a
    transaction that tries leaves nothing behind after its rollback; the next append still chains."""
    path = build(os.path.join(ledger_dir, "ledger.db"), 3)
    before = rows(path)
    ledger = avsm.Ledger(path)
    try:
        for sql in ("DELETE FROM records WHERE seq = 3", "UPDATE records SET at = 0 WHERE seq = 1"):
            with pytest.raises(sqlite3.DatabaseError):
                ledger.db.execute(sql)
        ledger.db.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.DatabaseError):
            ledger.db.execute("DELETE FROM records")
        ledger.db.execute("ROLLBACK")
        assert rows(path) == before
        assert ledger.append(report("after the attempts"), AT0 + 100) == 4
    finally:
        ledger.close()
    assert verify(path) == (4, None)


def test_triggers_accept_the_next_chained_record_from_any_connection(ledger_dir):
    """LEDGER-15: the triggers refuse only what breaks the chain; a plain INSERT of the next record, chained
    to the last hash with weight 1 (given or by default), is accepted and verifies."""
    path = build(os.path.join(ledger_dir, "ledger.db"), 2)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for seq in (3, 4):
            prev = db.execute("SELECT hash FROM records WHERE seq = ?", (seq - 1,)).fetchone()[0]
            text = avsm.canonical(report(f"plain insert {seq}"))
            if seq == 3:
                db.execute("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, ?, 1, ?)",
                           (seq, AT0 + seq, prev, sha(prev, seq, AT0 + seq, text), text))
            else:
                db.execute("INSERT INTO records(seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)",
                           (seq, AT0 + seq, prev, sha(prev, seq, AT0 + seq, text), text))
    finally:
        db.close()
    assert verify(path) == (4, None)


def test_triggers_guard_an_empty_ledger(ledger_dir):
    """LEDGER-15, open point 50: on an empty ledger only seq 1 with prev of 64 zeros may go in."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    avsm.Ledger(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        text = avsm.canonical(report("first"))
        for seq, prev in ((2, ZEROS), (1, "f" * 64), (0, ZEROS)):
            with pytest.raises(sqlite3.DatabaseError):
                db.execute("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, 'h', 1, ?)",
                           (seq, AT0, prev, text))
        db.execute("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (1, ?, ?, ?, 1, ?)",
                   (AT0, ZEROS, sha(ZEROS, 1, AT0, text), text))
    finally:
        db.close()
    assert verify(path) == (1, None)


# ---------------------------------------------------------------------------
# verify_chain
# ---------------------------------------------------------------------------

def test_verify_chain_counts_a_sound_ledger(ledger_dir):
    """LEDGER-09, open point 50: verify_chain walks the whole chain and returns the number checked; an empty
    ledger is sound; `upto` stops the walk there."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    avsm.Ledger(path).close()
    assert verify(path) == (0, None)
    build(path, 6)
    assert verify(path) == (6, None)
    db = avsm.open_ledger_ro(path)
    try:
        assert verify_chain(db, upto=4) == (4, None)
    finally:
        db.close()


TAMPERING = {
    "record text": "UPDATE records SET record = replace(record, 'reading 3', 'reading 9') WHERE seq = 3",
    "record text, hash recomputed": None,          # done in Python: the link to #4 breaks instead
    "at": "UPDATE records SET at = at + 1 WHERE seq = 3",
    "seq": "UPDATE records SET seq = 30 WHERE seq = 3",
    "prev": "UPDATE records SET prev = '" + "a" * 64 + "' WHERE seq = 3",
    "hash": "UPDATE records SET hash = '" + "b" * 64 + "' WHERE seq = 3",
    "uppercase hash": "UPDATE records SET hash = upper(hash) WHERE seq = 3",
    "deleted": "DELETE FROM records WHERE seq = 3",
}


@pytest.mark.parametrize("how", list(TAMPERING))
def test_verify_chain_names_the_broken_link(ledger_dir, how):
    """LEDGER-09, LEDGER-16, open point 51: in a copy of a ledger altered with the triggers dropped,
    verify_chain reports the first record whose link does not hold, and says why."""
    source = build(os.path.join(ledger_dir, "ledger.db"), 5)
    copy = os.path.join(ledger_dir, "copy.db")
    shutil.copyfile(source, copy)
    db = drop_triggers(copy)
    try:
        if TAMPERING[how] is not None:
            db.execute(TAMPERING[how])
        else:
            prev, at = db.execute("SELECT prev, at FROM records WHERE seq = 3").fetchone()
            text = avsm.canonical(report("forged", value=3))
            db.execute("UPDATE records SET record = ?, hash = ? WHERE seq = 3", (text, sha(prev, 3, at, text)))
    finally:
        db.close()
    assert verify(source) == (5, None)
    seq, why = verify(copy)
    assert why, f"verify_chain missed the tampering ({how})"
    expected = {"record text, hash recomputed": 4, "seq": 4, "deleted": 4}.get(how, 3)
    assert seq == expected, (seq, why)
    if how in ("seq", "deleted"):
        assert "#3" in why


def test_stored_record_names_what_does_not_read():
    """LEDGER-11, LEDGER-16, open point 51: a stored record that does not parse, is not an object, lacks
    kind, claim or venture, or has an unknown claim does not read; nor does one whose fields are not what the
    fold reads (a trusted report with no number for its value); a sound one does."""
    assert avsm.stored_record(avsm.canonical(report("fine", value=1)))[1] is None
    for text in ('{"kind":"report"', "[1,2]", '{"claim":"measured","venture":"v"}',
                 '{"kind":"report","venture":"v"}', '{"kind":"report","claim":"measured"}',
                 '{"kind":"report","claim":"guessed","venture":"v"}', avsm.canonical(report("no value")),
                 avsm.canonical(report("text", value="1"))):
        assert avsm.stored_record(text)[1], text


def test_avsmd_stops_on_a_record_that_does_not_read(bindir, home):
    """LEDGER-16, open point 51: avsmd started on a ledger whose record #3 was altered (triggers bypassed)
    exits 65, names #3 and `avsm doctor --cut 3` on standard error, and appends nothing."""
    build(os.path.join(home, "ledger.db"), 5)
    db = drop_triggers(os.path.join(home, "ledger.db"))
    db.execute("UPDATE records SET record = replace(record, 'reading 3', 'reading 9') WHERE seq = 3")
    db.close()
    before = rows(os.path.join(home, "ledger.db"))
    env = dict(os.environ)
    env.pop("AVSMD_HOME", None)
    proc = subprocess.Popen([sys.executable, os.path.join(bindir, "avsmd"), "--home", home],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=10)
        finally:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
        pytest.fail("avsmd kept running on a ledger whose record #3 does not verify")
    assert proc.returncode == 65, err
    assert "3" in err and "avsm doctor --cut 3" in err, err
    assert rows(os.path.join(home, "ledger.db")) == before


# ---------------------------------------------------------------------------
# the move from WAL, the journal, readers
# ---------------------------------------------------------------------------

def wal_ledger(path, n, leave_in_wal):
    """A ledger as an earlier avsmd in WAL mode wrote it, by plain sqlite3; return the rows as written.
    With leave_in_wal the records are still in ledger.db-wal (the copy of a ledger whose writer died)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    work = path + ".writing" if leave_in_wal else path
    db = sqlite3.connect(work, isolation_level=None)
    db.executescript(avsm.LEDGER_SCHEMA)
    assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    db.execute("PRAGMA wal_autocheckpoint=0")
    expected, prev = [], ZEROS
    for seq in range(1, n + 1):
        text = avsm.canonical(report(f"written under WAL {seq} ·é", value=seq / 3))
        h = sha(prev, seq, AT0 + seq, text)
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, ?, 1, ?)",
                   (seq, AT0 + seq, prev, h, text))
        db.execute("COMMIT")
        expected.append((seq, AT0 + seq, "integer", prev, h, 1, "integer", text, text.encode().hex().upper()))
        prev = h
    if leave_in_wal:
        shutil.copyfile(work, path)
        shutil.copyfile(work + "-wal", path + "-wal")
        assert os.path.getsize(path + "-wal") > 0
    db.close()
    assert header_versions(path) == (2, 2)
    return expected


@pytest.mark.parametrize("leave_in_wal", [False, True], ids=["checkpointed", "records-in-wal-file"])
def test_a_wal_ledger_moves_to_the_rollback_journal_unchanged(ledger_dir, leave_in_wal):
    """LEDGER-02, LEDGER-04: opening a ledger an earlier avsmd wrote in WAL mode moves it to
    journal_mode=delete (no -wal file left, header back to rollback) and every row, seq, at, prev, hash,
    weight and record, is byte-identical to what was written; the chain verifies and appends continue it."""
    path = os.path.join(ledger_dir, "ledger.db")
    expected = wal_ledger(path, 7, leave_in_wal)
    ledger = avsm.Ledger(path)
    try:
        assert ledger.db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"
        assert ledger.db.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert not os.path.exists(path + "-wal")
        assert rows(path) == expected
        assert ledger.append(report("first under the rollback journal"), AT0 + 100) == 8
    finally:
        ledger.close()
    assert header_versions(path) == (1, 1)
    assert not os.path.exists(path + "-wal")
    assert rows(path)[:7] == expected
    assert verify(path) == (8, None)
    plain = sqlite3.connect(path)
    assert plain.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"
    plain.close()


def test_the_move_from_wal_waits_for_a_reader(ledger_dir):
    """LEDGER-04, LEDGER-05, DESIGN ("writers wait for a reader's lock rather than failing a write"): a reader
    that has the old WAL ledger open for a moment does not make the move fail; it waits and then moves."""
    path = os.path.join(ledger_dir, "ledger.db")
    expected = wal_ledger(path, 3, False)
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    reader.execute("SELECT count(*) FROM records").fetchone()
    closer = threading.Timer(0.5, reader.close)
    closer.start()
    try:
        ledger = avsm.Ledger(path)
    finally:
        closer.join()
    try:
        assert ledger.db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"
    finally:
        ledger.close()
    assert rows(path) == expected


def test_deleting_the_journal_loses_nothing(ledger_dir, workdir):
    """LEDGER-02, LEDGER-03: once append returns, the record is in ledger.db itself: no -journal or -wal
    file holds it, a copy of ledger.db alone has every record, and deleting ledger.db-journal changes nothing."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    ledger = avsm.Ledger(path)
    try:
        for i in range(1, 21):
            ledger.append(report(f"r{i}"), AT0 + i)
            assert not os.path.exists(path + "-wal")
        before = rows(path)
        lone = os.path.join(workdir, "lone")
        os.makedirs(lone)
        shutil.copyfile(path, os.path.join(lone, "ledger.db"))    # the main file only, while the writer is open
        if os.path.exists(path + "-journal"):
            os.unlink(path + "-journal")
        assert rows(path) == before
        assert ledger.append(report("r21"), AT0 + 21) == 21
    finally:
        ledger.close()
    assert len(before) == 20
    assert rows(os.path.join(lone, "ledger.db")) == before
    assert verify(os.path.join(lone, "ledger.db")) == (20, None)
    for leftover in ("-journal", "-wal"):
        if os.path.exists(path + leftover):
            os.unlink(path + leftover)
    assert rows(path)[:20] == before
    assert verify(path) == (21, None)


def test_open_ledger_ro_refuses_writes(ledger_dir):
    """LEDGER-05: a reader's connection from open_ledger_ro reads but cannot insert, update, delete, create
    or switch the journal to WAL; the ledger is unchanged."""
    path = build(os.path.join(ledger_dir, "ledger.db"), 3)
    before = rows(path)
    db = avsm.open_ledger_ro(path)
    try:
        assert db.execute("SELECT count(*) FROM records").fetchone()[0] == 3
        prev = db.execute("SELECT hash FROM records WHERE seq = 3").fetchone()[0]
        text = avsm.canonical(report("sneaked in"))
        for sql, args in (("INSERT INTO records(seq, at, prev, hash, weight, record) VALUES (4, ?, ?, ?, 1, ?)",
                           (AT0 + 4, prev, sha(prev, 4, AT0 + 4, text), text)),
                          ("CREATE TABLE other(x)", ()),
                          ("DROP TRIGGER records_no_delete", ()),
                          ("UPDATE records SET at = 0", ())):
            with pytest.raises(sqlite3.DatabaseError):
                db.execute(sql, args)
        try:
            db.execute("PRAGMA journal_mode=WAL").fetchall()
        except sqlite3.DatabaseError:
            pass
    finally:
        db.close()
    assert rows(path) == before
    assert header_versions(path) == (1, 1)
    assert not os.path.exists(path + "-wal")


def test_readers_see_appends_and_writers_wait_for_readers(ledger_dir):
    """LEDGER-05, DESIGN (writers wait for a reader's lock): a read-only reader open beside the writer sees each
    new record, and an append made while a reader holds its lock waits for it instead of failing."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    ledger = avsm.Ledger(path)
    reader = avsm.open_ledger_ro(path)
    holder = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    try:
        ledger.append(report("one"), AT0 + 1)
        assert [s for s, _, _ in avsm.read_records(reader)] == [1]
        holder.execute("BEGIN")
        holder.execute("SELECT count(*) FROM records").fetchone()      # holds a shared lock until COMMIT
        release = threading.Timer(0.4, lambda: holder.execute("COMMIT"))
        t0 = time.monotonic()
        release.start()
        try:
            assert ledger.append(report("two"), AT0 + 2) == 2
        finally:
            release.join()
        assert time.monotonic() - t0 >= 0.3
        assert [r["summary"] for _, _, r in avsm.read_records(reader)] == ["one", "two"]
        assert [s for s, _, _ in avsm.read_records(reader, since=1)] == [2]
    finally:
        holder.close()
        reader.close()
        ledger.close()
    assert verify(path) == (2, None)


# ---------------------------------------------------------------------------
# the README's recipe: sqlite3 and sha256sum alone
# ---------------------------------------------------------------------------

RECIPE_SUMMARIES = {
    "ascii": "count 11 is above 10",
    "non-ascii": "naïve café: 温度 ↑ 3 °C — ok ✓ 🎉",
    "quotes": "it's \"quoted\" and 'single' with `ticks`, $(not run) $HOME \\ and %s %d %%",
    "escapes": "line one\nline two\ttabbed\r and \\ backslash \\n literal",
    "leading dash": "-n -e looks like an option",
}


@pytest.mark.skipif(not (shutil.which("sqlite3") and shutil.which("sha256sum")),
                    reason="needs the sqlite3 CLI and sha256sum")
@pytest.mark.parametrize("summary", list(RECIPE_SUMMARIES.values()), ids=list(RECIPE_SUMMARIES))
def test_readme_recipe_reverifies_a_hash_with_sqlite3_and_sha256sum(ledger_dir, summary):
    """LEDGER-09, open point 50: the README's shell recipe, with the sqlite3 CLI and sha256sum alone,
    recomputes record #2's stored hash, also for records holding non-ASCII text, quotes and escapes."""
    path = os.path.join(ledger_dir, "ledger.db")
    os.makedirs(ledger_dir)
    ledger = avsm.Ledger(path)
    try:
        ledger.append(report("before"), AT0 + 1)
        ledger.append(report(summary, note=summary, value=-0.5, plausible=False, tags=["ä", "\"", None]), AT0 + 2)
        ledger.append(report("after"), AT0 + 3)
    finally:
        ledger.close()
    stored = dict((r[0], r[4]) for r in rows(path))
    res = subprocess.run(["sh", "-c", README_RECIPE], cwd=ledger_dir, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert res.stdout.split()[0] == stored[2]


# ---------------------------------------------------------------------------
# avsm tail, black-box with the real client (no daemon)
# ---------------------------------------------------------------------------

def home_ledger(home, n, **kw):
    os.makedirs(home, exist_ok=True)
    return build(os.path.join(home, "ledger.db"), n, **kw)


def seqs_of(stdout):
    return [int(line.split()[0][1:]) for line in stdout.splitlines()]


def test_tail_zero_exits_65(av):
    """CLI-10, open point 17: `avsm tail 0` exits 65 and writes nothing to standard output."""
    home_ledger(av.home, 3)
    res = av.cli("tail", "0")
    assert res.returncode == 65, res
    assert res.stdout == ""
    assert res.stderr.startswith("avsm: ")


def test_tail_since_prints_every_later_record_in_order(av):
    """CLI-08, CLI-09, open point 18: `avsm tail --since 1` prints records #2 onwards, in order, one per line,
    each `#SEQ TIME VENTURE CLAIM KIND SUMMARY`, and exits 0; a summary with a newline stays on one line."""
    path = home_ledger(av.home, 6)
    ledger = avsm.Ledger(path)
    try:
        ledger.append(report("two\nlines", value=7), AT0 + 7)
        ledger.append({"kind": "approval", "claim": "declared", "venture": "counter", "ask": 3,
                       "summary": "approved ask #3"}, AT0 + 8)
        ledger.append({"kind": "proposal", "claim": "inferred", "venture": "counter", "by": "model", "choice": "action",
                       "summary": "reset it"}, AT0 + 9)
    finally:
        ledger.close()
    res = av.cli("tail", "--since", "1", timeout=15)
    assert res.returncode == 0, res
    assert res.stderr == ""
    lines = res.stdout.splitlines()
    assert seqs_of(res.stdout) == list(range(2, 10))
    for line in lines:
        assert TAIL_LINE.match(line), line
    db = avsm.open_ledger_ro(path)
    try:
        assert lines == [avsm.format_record_line(s, a, r) for s, a, r in avsm.read_records(db, 1)]
    finally:
        db.close()
    assert lines[5].split(" ", 5)[2:] == ["v", "measured", "report", "two\\nlines"]
    assert lines[6].split(" ", 5)[2:] == ["counter", "declared", "approval", "approved ask #3"]
    assert lines[7].split(" ", 5)[2:] == ["counter", "inferred", "proposal", "reset it"]
    assert av.cli("tail", "--since", "9").stdout == ""
    assert seqs_of(av.cli("tail", "--since=7").stdout) == [8, 9]
    assert seqs_of(av.cli("tail", "--since", "0").stdout) == list(range(1, 10))
    assert seqs_of(av.cli("tail", "--since", "#8").stdout) == [9]


@pytest.mark.parametrize("args", [("--since", "x"), ("--since",), ("--since", "-1"), ("--since", "1.5"),
                                  ("--bogus",), ("five",)])
def test_tail_bad_usage_exits_64(av, args):
    """CLI-09, EXIT-02: a `--since` that is not a record number, or an unknown argument, is bad usage (64),
    before the client looks for the ledger."""
    home_ledger(av.home, 2)
    res = av.cli("tail", *args)
    assert res.returncode == 64, res
    assert res.stdout == ""
    shutil.rmtree(av.home)
    assert av.cli("tail", *args).returncode == 64


def test_tail_without_a_ledger_exits_66(av):
    """EXIT-04, CLI-08: `avsm tail` on a home with no ledger, or no home at all, exits 66 and creates
    nothing."""
    assert av.cli("tail").returncode == 66
    assert not os.path.exists(av.home)
    os.makedirs(av.home)
    res = av.cli("tail")
    assert res.returncode == 66, res
    assert res.stdout == ""
    assert os.listdir(av.home) == []
    assert av.cli("tail", "--since", "1").returncode == 66


def test_tail_n_prints_the_last_n_and_exits_without_a_terminal(av):
    """CLI-08, open point 17: `avsm tail 5` prints the last 5 records in order and, its standard output not
    being a terminal, exits 0 instead of following; plain `avsm tail` prints the last 10."""
    home_ledger(av.home, 12)
    res = av.cli("tail", "5", timeout=15)
    assert res.returncode == 0, res
    assert seqs_of(res.stdout) == [8, 9, 10, 11, 12]
    assert all(TAIL_LINE.match(line) for line in res.stdout.splitlines())
    assert seqs_of(av.cli("tail", timeout=15).stdout) == list(range(3, 13))
    assert seqs_of(av.cli("tail", "50", timeout=15).stdout) == list(range(1, 13))


def test_tail_of_an_empty_ledger_prints_nothing(av):
    """CLI-08, CLI-09: a ledger with no records yet gives no lines and exit 0."""
    os.makedirs(av.home)
    avsm.Ledger(os.path.join(av.home, "ledger.db")).close()
    for args in (("tail",), ("tail", "--since", "0"), ("tail", "3")):
        res = av.cli(*args, timeout=15)
        assert (res.returncode, res.stdout, res.stderr) == (0, "", ""), (args, res)


@pytest.mark.parametrize("args", ["tail", "tail 2000", "tail --since 0"])
def test_tail_into_head_ends_quietly(av, args):
    """CLI-14, open point 48: `avsm tail | head -1` over a ledger of 2000 records prints one line, avsm exits 0
    and writes nothing to standard error, even when the reader goes away mid-stream."""
    build_fast(os.path.join(av.home, "ledger.db"), 2000)
    avsm_cmd = f"'{sys.executable}' '{os.path.join(av.bindir, 'avsm')}' --home '{av.home}' {args}"
    script = f"set -o pipefail; {avsm_cmd} | head -1"
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, env=av.env)
    assert res.returncode == 0, res
    assert res.stderr == ""
    lines = res.stdout.splitlines()
    assert len(lines) == 1 and TAIL_LINE.match(lines[0]), res.stdout
    assert seqs_of(res.stdout) == [1991 if args == "tail" else 1]


