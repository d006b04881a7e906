"""The ledger's vocabulary did not move (issue 10, 'what must not change'): every record literal in avsm.py, as
(kind, claim, keys, the summary's shape), is the listing kept in tests/record_shapes.txt, taken at b954de0 before
the warden was split into rooms. A new kind or field is a change of the listing: regenerate it with
python3 tests/record_shapes.py > tests/record_shapes.txt and say so in the commit."""
import os

from record_shapes import record_shapes

HERE = os.path.dirname(os.path.abspath(__file__))


def test_record_literals_keep_their_shapes():
    with open(os.path.join(HERE, "..", "avsm.py"), encoding="utf-8") as fh:
        now = record_shapes(fh.read())
    with open(os.path.join(HERE, "record_shapes.txt"), encoding="utf-8") as fh:
        kept = fh.read().splitlines()
    assert now == kept
