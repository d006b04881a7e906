"""Print the ledger's vocabulary as RECORD_KINDS has it, one kind a line: kind, its claims (the first is the
default), the fields it always has, those it may have. tests/record_shapes.txt is this listing, so a changed
vocabulary is a visible diff: regenerate it with python3 tests/record_shapes.py > tests/record_shapes.txt and say so
in the commit. Run: python3 tests/record_shapes.py  (the avsm.py beside tests/)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import avsm  # noqa: E402


def listing():
    """Return the lines of the listing, in the table's order."""
    return [f"{kind:13} {'/'.join(claims):18} has: {' '.join(sorted(required)) or '-'}; may have: {' '.join(sorted(optional)) or '-'}"
            for kind, (claims, required, optional) in avsm.RECORD_KINDS.items()]


if __name__ == "__main__":
    print("\n".join(listing()))
