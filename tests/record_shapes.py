"""List every record literal of avsm.py as (kind, claim, keys, summary's shape), one a line, sorted: a cheap proof the ledger's vocabulary
did not move when code moved (issue 10). A record literal is a dict display with a "kind" key; an f-string kind is
shown with {} where its values go, and so is the summary. Run: python3 tests/record_shapes.py [FILE]  (default: avsm.py beside tests/);
compare two listings with diff, e.g. against `git show b954de0:avsm.py`."""
import ast
import os
import sys


def kind_text(node):
    if isinstance(node, ast.Constant):
        return repr(node.value)
    if isinstance(node, ast.JoinedStr):
        return "f'" + "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values) + "'"
    return "<" + type(node).__name__ + ">"


def record_shapes(source):
    """Return the sorted (kind, claim, keys, summary) lines of every dict display with a constant "kind" key in `source`."""
    shapes = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Dict):
            continue
        keys = [k.value if isinstance(k, ast.Constant) else ("**" if k is None else "<expr>") for k in node.keys]
        if "kind" not in keys:
            continue
        shown = [kind_text(node.values[keys.index(k)]) if k in keys else "-" for k in ("kind", "claim", "summary")]
        shapes.append(" ".join(shown[:2] + sorted(str(k) for k in keys if k not in ("kind", "claim", "summary")))
                      + "  summary=" + shown[2])
    return sorted(shapes)


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "avsm.py")
    with open(path, encoding="utf-8") as fh:
        print("\n".join(record_shapes(fh.read())))
