"""The file's shape, as issue 36 and the project's budget set it: one file a newcomer reads top to
bottom, in sections that read as the architecture, each part a size one sitting holds."""
import ast
import os
import re

AVSM = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "avsm.py")


def source():
    with open(AVSM, encoding="utf-8") as fh:
        return fh.read()


def test_the_file_is_within_its_budget_and_as_wide_as_a_page():
    """Issue 36 items 4 and 5: at most 620,000 bytes without each line's leading indentation (so
    wrapping costs nothing), and no line over 100 columns."""
    lines = source().splitlines()
    size = sum(len(line.lstrip().encode("utf-8")) + 1 for line in lines)
    assert size <= 620_000, f"avsm.py is {size} bytes without indentation, past 620,000"
    wide = [n for n, line in enumerate(lines, 1) if len(line) > 100]
    assert not wide, f"lines over 100 columns: {wide[:10]}"


def test_sections_and_classes_are_a_size_one_sitting_holds():
    """Issue 36: no section over 1,500 lines and no class over 500 (a class that owns one kind of
    state fits in about 400); the header's map names every section, in order."""
    src = source()
    lines = src.splitlines()
    banners = [(n, int(m[1])) for n, line in enumerate(lines)
               for m in [re.match(r"^# (\d+)\. ", line)] if m]
    assert [number for _, number in banners] == list(range(2, len(banners) + 2))
    ends = [n for n, _ in banners[1:]] + [len(lines)]
    long = [(number, end - n) for (n, number), end in zip(banners, ends) if end - n > 1500]
    assert not long, f"sections over 1,500 lines: {long}"
    classes = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.parse(src).body
               if isinstance(node, ast.ClassDef)]
    assert not [c for c in classes if c[1] > 500], [c for c in classes if c[1] > 500]
    header = ast.get_docstring(ast.parse(src)).split("Sections", 1)[1]
    mapped = {int(n) for n in re.findall(r"(?<![\d-])(\d+)\. ", header)}
    for a, b in re.findall(r"(\d+)-(\d+)\. ", header):
        mapped |= set(range(int(a), int(b) + 1))
    assert mapped == set(range(1, len(banners) + 2)), sorted(mapped)


def test_one_reports_path_jumps_about_the_file_at_most_30_times():
    """Issue 36 item 2: following one report from its program's end to its action, its outcome and
    `avsm why`, by tests/bench/flow_jumps.py's method (calls in reading order, from the call site to
    the callee's def), at most 30 steps of more than 300 lines."""
    import subprocess
    import sys
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench", "flow_jumps.py")
    out = subprocess.run([sys.executable, tool, AVSM, "--steps"], capture_output=True, text=True,
                         check=True).stdout
    total = int(re.search(r"total: steps \d+, jumps > 300 lines (\d+)", out)[1])
    assert total <= 30, out[out.index("jumps:"):out.index("all steps:")]
