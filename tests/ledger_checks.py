"""The tests' own checks of a ledger, which no avsm command needs: the chain walked link by link, and a stored
record held to the vocabulary (RECORD_KINDS). doctor checks both in its one pass (scan_ledger)."""
import os
import sqlite3

import avsm


def verify_files(home):
    """verify_chain over the closed files of HOME/ledgers (avsm rotate), then ledger.db, as one chain: each
    file opened with sqlite3 alone."""
    prev, expected = avsm.ZERO_HASH, 1
    closed = sorted(os.path.join(home, "ledgers", n) for n in os.listdir(os.path.join(home, "ledgers"))) \
        if os.path.isdir(os.path.join(home, "ledgers")) else []
    for path in closed + [os.path.join(home, "ledger.db")]:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        first = db.execute("SELECT seq, prev FROM records ORDER BY seq LIMIT 1").fetchone()
        if first and first[0] > expected:   # a closed file keep: let go, or one moved away: on from its head
            expected, prev = first
        checked, problem = verify_chain(db, start=(prev, expected))
        prev = (db.execute("SELECT hash FROM records ORDER BY seq DESC LIMIT 1").fetchone() or (prev,))[0]
        db.close()
        if problem is not None:
            return checked, f"{path}: {problem}"
        expected = checked + 1
    return expected - 1, None


def verify_chain(db, upto=None, start=(avsm.ZERO_HASH, 1)):
    """Return (records checked, None) for a sound chain, or (seq, why) at the first broken link."""
    prev, expected = start
    sql = "SELECT seq, at, prev, hash, record FROM records" + (" WHERE seq <= ?" if upto else "") + " ORDER BY seq"
    for seq, at, p, h, text in db.execute(sql, (upto,) if upto else ()):
        if seq != expected:
            return seq, f"record #{expected} is missing"
        if p != prev:
            return seq, "its prev is not the hash of the record before it"
        if avsm.chain_hash(p, seq, at, text) != h:
            return seq, "its hash does not match its contents"
        prev, expected = h, seq + 1
    return expected - 1, None


def shape_problem(record):
    """Return why `record` is not one of the ledger's kinds as RECORD_KINDS has them, or None: for a record read
    back, the claim and the fields it always has (a field more is no harm)."""
    missing = [k for k in ("kind", "claim", "venture", "summary") if k not in record]
    if missing:
        return f"it has no {', '.join(missing)}"
    kind = record["kind"]
    if record["venture"] == "self":
        return None if record["claim"] == "measured" else "a record of self is measured"
    shape = avsm.record_shape(kind, None)
    if shape is None:
        return f"{kind!r} is not a kind of record"
    claims, fields, _ = shape
    if record["claim"] not in claims:
        return f"a {kind} record is {' or '.join(sorted(claims))}, not {record['claim']}"
    absent = sorted(fields - set(record))
    return f"a {kind} record has {', '.join(absent)}" if absent else None
