"""One vocabulary of records (issue 25 item 3; LEDGER-02): RECORD_KINDS names each kind's claims and fields, every
record avsm.py writes is built by new_record against it, and tests/record_shapes.txt is the table's listing
(tests/record_shapes.py), so a changed vocabulary is a visible diff. conftest's ledger check holds every record a
test's avsmd stored to the same table, the fields a caller adds after new_record included."""
import ast
import os

import pytest

import avsm
from record_shapes import listing

HERE = os.path.dirname(os.path.abspath(__file__))
# dict displays with a "kind" key that are no record: the mandate's parsed controller, a trusted report decoded on
# the readers' fast path (it is read, not written), the chart's marks of a new mandate, and the name of the
# notice a notify record tells of
NOT_RECORDS = {"parse_controller", "decode_record", "chart_spans", "judge_notify"}


def source_tree():
    with open(os.path.join(HERE, "..", "avsm.py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    return tree


def function_of(node):
    while hasattr(node, "parent"):
        node = node.parent
        if isinstance(node, ast.FunctionDef):
            return node.name
    return None


def test_the_listing_is_the_table():
    with open(os.path.join(HERE, "record_shapes.txt"), encoding="utf-8") as fh:
        assert fh.read().splitlines() == listing(), "regenerate: python3 tests/record_shapes.py > tests/record_shapes.txt"


def test_every_record_is_built_by_new_record_against_the_table():
    """No record is a dict display: each is a new_record call (or the daemon's append_self(kind, summary, ...),
    a self record, or the kernel's write(state, kind, ...), a venture's), whose constant kind the table names and
    whose constant field names it allows for that kind."""
    tree, calls = source_tree(), 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            assert "kind" not in keys or function_of(node) in NOT_RECORDS, \
                f"line {node.lineno}: a dict with a kind in {function_of(node)}: build a record with new_record"
        own = isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "append_self" and node.args
        kernel = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "write" and len(node.args) > 1
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "new_record" or own or kernel:
            calls += 1
            kind = node.args[1] if kernel else node.args[0]
            if isinstance(kind, ast.JoinedStr) and isinstance(kind.values[0], ast.Constant):
                kind = ast.Constant(kind.values[0].value.partition(".")[0] + ".")
            if not isinstance(kind, ast.Constant):
                continue
            venture = "self" if own else None if kernel else \
                node.args[1].value if isinstance(node.args[1], ast.Constant) else None
            shape = avsm.record_shape(kind.value, venture)
            assert shape is not None, f"line {node.lineno}: {kind.value!r} is not in RECORD_KINDS"
            claims, required, optional = shape
            names = {k.arg for k in node.keywords if k.arg} | {
                k.value for kw in node.keywords if kw.arg is None and isinstance(kw.value, ast.Dict)
                for k in kw.value.keys if isinstance(k, ast.Constant)}
            assert not names - required - optional - {"summary", "claim"}, \
                f"line {node.lineno}: a {kind.value} record may not have {sorted(names - required - optional - {'summary', 'claim'})}"
            spread = any(kw.arg is None and not isinstance(kw.value, ast.Dict) for kw in node.keywords)
            assert spread or required <= names, f"line {node.lineno}: a {kind.value} record needs {sorted(required - names)}"
            claim = next((kw.value for kw in node.keywords if kw.arg == "claim"), None)
            if isinstance(claim, ast.Constant):
                assert claim.value in claims, f"line {node.lineno}: a {kind.value} record is not {claim.value}"
    assert calls > 60


def test_new_record_refuses_what_the_table_does_not_allow():
    r = avsm.new_record("refusal", "v", lever="drain", why="cap", summary="drain refused: cap")
    assert r == {"kind": "refusal", "claim": "measured", "venture": "v", "lever": "drain", "why": "cap",
                 "summary": "drain refused: cap"}
    assert avsm.new_record("guard.errors", "v", value=7, status="trusted", plausible=True)["claim"] == "measured"
    assert avsm.new_record("start", "self", pid=12, summary="up")["pid"] == 12      # self's start is not a run's
    for kind, venture, fields, why in (
            ("refusel", "v", {"lever": "x", "why": "y"}, "not a kind of record"),
            ("refusal", "v", {"lever": "x"}, "has lever, why"),                        # a field it always has, missing
            ("refusal", "v", {"lever": "x", "why": "y", "colour": "red"}, "colour"),   # a field the table does not name
            ("refusal", "v", {"lever": "x", "why": "y", "claim": "declared"}, "not declared"),
            ("start", "self", {"command": "./run"}, "has pid")):
        with pytest.raises(ValueError, match=why):
            avsm.new_record(kind, venture, **fields)
    assert avsm.new_notice("ask", "v", 3, "?", "avsm approve 3", deny="avsm deny 3")["deny"] == "avsm deny 3"
