"""avsm's own YAML reader: the shared conformance cases, then avsm's table.

MANDATE-01: avsm reads mandate.yaml (and config.yaml) with its built-in reader.
MANDATE-08: a mandate that does not hold is refused; at the YAML layer that
means a YamlError naming line and column and the fix, never a guessed value.
Open point 24: the subset is the one ../shared/yaml-cases/README.md defines;
every case there either gives exactly its value or is refused.
"""

import json
import math
import os
import re

import pytest

import avsm

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES_PATH = os.path.join(REPO_ROOT, "..", "shared", "yaml-cases", "cases.json")


def load_cases():
    """Return the conformance cases, or None when shared/ is not beside the repository."""
    try:
        with open(CASES_PATH, encoding="utf-8") as fh:
            return json.load(fh)["cases"]
    except FileNotFoundError:
        return None


CASES = load_cases()


def same(a, b):
    """Strict YAML equality: 1, 1.0, True and "1" all differ; NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("case", CASES or [None], ids=[c["id"] for c in CASES] if CASES else ["no-cases"])
def test_conformance_case(case):
    if case is None:
        pytest.skip(f"no conformance cases: {os.path.normpath(CASES_PATH)} is missing "
                    f"(shared/yaml-cases is laid beside the repository)")
    if case["expect"] == "value":
        assert same(avsm.parse_yaml(case["yaml"]), case["value"])
    else:
        with pytest.raises(avsm.YamlError) as info:
            avsm.parse_yaml(case["yaml"])
        assert isinstance(info.value, ValueError)
        assert re.match(r"line [1-9]\d*, column [1-9]\d*: \S", str(info.value))


VALUES = [
    ("flow map, quoted key touching its value", 'unwind: {action: trade, payload: {"qty":100000}}\n',
     {"unwind": {"action": "trade", "payload": {"qty": 100000}}}),
    ("literal keeps one final break", "text: |\n  a\n   b\n\nnext: 1\n", {"text": "a\n b\n", "next": 1}),
    ("literal strip", "text: |-\n  a\n\n", {"text": "a"}),
    ("folded keep", "text: >+\n  a\n  b\n\n  c\n\n\nnext: 1\n", {"text": "a b\nc\n\n\n", "next": 1}),
    ("CRLF, block scalar too", "a: 1\r\nb: |\r\n  x\r\n  y\r\n", {"a": 1, "b": "x\ny\n"}),
    ("BOM", "\ufeffmetric: count\n", {"metric": "count"}),
    ("comments", "# head\na: 1 # one\n  # between\nb: 'x # y' # two\n", {"a": 1, "b": "x # y"}),
    ("# without a space before it", "a: b#c\n", {"a": "b#c"}),
    ("--- with a comment", "# mandate\n--- # c\na: 1\n", {"a": 1}),
    ("sequence at the key's indentation", "permitted:\n- name: reset\n  cap: 60/hour\nforbidden: [rm]\n",
     {"permitted": [{"name": "reset", "cap": "60/hour"}], "forbidden": ["rm"]}),
    ("durations and words stay strings", "a: 1h30\nb: 10s\nc: 03:00\nd: yes\ne: on\nf: 15%\n",
     {"a": "1h30", "b": "10s", "c": "03:00", "d": "yes", "e": "on", "f": "15%"}),
    ("numbers", "- 017\n- 0o17\n- 0x1F\n- 1e3\n- -.inf\n- 123456789012345678901234567890\n",
     [17, 15, 31, 1000.0, -math.inf, 123456789012345678901234567890]),
    ("empty document", "# nothing\n---\n", None),
]


@pytest.mark.parametrize("text, value", [v[1:] for v in VALUES], ids=[v[0] for v in VALUES])
def test_value(text, value):
    assert same(avsm.parse_yaml(text), value)


ERRORS = [
    ("tab in indentation", "a:\n\tb: 1\n", "line 2, column 1: tab in indentation; indent with spaces"),
    ("tab after ':'", "metric:\tcount\n", "line 1, column 8: tab after ':'; use a space"),
    ("alias", "base: &b 1\nother: *b\n",
     "line 1, column 7: anchors and aliases are not supported; write the value out"),
    ("tag", "max_step: !!str 5000\n",
     "line 1, column 11: tags are not supported; remove the tag (quote the value to keep it a string)"),
    ("duplicate key", "name: reset\nrun: ./reset\ncap: 60/hour\nreversible: true\ncap: 1/hour\n",
     "line 5, column 1: duplicate key 'cap' (first at line 3); each key once"),
    ("multi-line plain scalar", "purpose: Keep the counter\n  below ten.\n",
     "line 2, column 3: a scalar must fit on one line; use | or > for text over several lines"),
    ("unclosed quote", 'nightly: "03:00\n', "line 1, column 10: the quote opened here is not closed on its "
     "line; a scalar must fit on one line; use | or > for text over several lines"),
    ("key that is a number", "1: one\n", 'line 1, column 1: key 1 is not a string; quote it: "1":'),
    ("explicit key", "? metric\n: count\n",
     "line 1, column 1: explicit keys ('? ') are not supported; write 'key: value' on one line"),
    ("directive", "%YAML 1.2\n---\na: 1\n",
     "line 1, column 1: directives (%YAML, %TAG) are not supported; remove the line"),
    ("document end", "a: 1\n...\n", "line 2, column 1: '...' (document end) is not supported; remove it"),
    ("second ---", "a: 1\n---\nb: 2\n",
     "line 2, column 1: a second '---' starts another document; one document per file"),
    ("content on ---", "--- {a: 1}\n",
     "line 1, column 5: content on the '---' line; start the document on the next line"),
    ("multi-line flow", "controller: {kind: band,\n  low: 19}\n", "line 1, column 13: this '{' is not "
     "closed on its line; a flow collection must open and close on one line"),
    ("indentation indicator", "text: |2\n   x\n", "line 1, column 8: indentation indicators (|2) are not "
     "supported; remove the digit and indent the text"),
    ("bare CR", "a: 1\rb: 2\n",
     "line 1, column 5: carriage return without a line feed; end lines with \\n or \\r\\n"),
    ("comment touching a quote", 'a: "b"# c\n', "line 1, column 7: a comment needs a space before '#'"),
]


@pytest.mark.parametrize("text, message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_error(text, message):
    with pytest.raises(avsm.YamlError) as info:
        avsm.parse_yaml(text)
    assert str(info.value) == message


def test_error_names_its_source():
    with pytest.raises(avsm.YamlError) as info:
        avsm.parse_yaml("metric: count\ncadence: 10s\nmetric: age\n", source="mandate.yaml")
    err = info.value
    assert (err.line, err.col, err.source) == (3, 1, "mandate.yaml")
    assert err.reason == "duplicate key 'metric' (first at line 1); each key once"
    assert str(err) == "mandate.yaml:3:1: duplicate key 'metric' (first at line 1); each key once"


MANDATE = (
    "purpose: Keep the counter below ten.\n"
    "controller: {kind: threshold, above: 10, action: reset}\n"
    "cadence: 10s\n"
    "permitted:\n"
    "  - name: reset\n"
    "    run: ./reset\n"
    "    cap: 60/hour\n"
    "    reversible: true\n"
    "forbidden: [rm]\n"
)


def test_marks_of_a_nested_mandate():
    value, marks = avsm.parse_yaml_marked(MANDATE)
    assert value["permitted"] == [{"name": "reset", "run": "./reset", "cap": "60/hour", "reversible": True}]
    assert marks[()] == (1, 1)
    assert marks[("controller",)] == (2, 1)
    assert marks[("controller", "above")] == (2, 31)
    assert marks[("permitted",)] == (4, 1)
    assert marks[("permitted", 0)] == (5, 3)
    assert marks[("permitted", 0, "name")] == (5, 5)
    assert marks[("permitted", 0, "cap")] == (7, 5)
    assert marks[("forbidden", 0)] == (9, 13)


def test_marks_of_the_readme_example():
    _, marks = avsm.parse_yaml_marked("permitted:\n  - name: reset\n    cap: 60/hour\n")
    assert marks[("permitted",)] == (1, 1)
    assert marks[("permitted", 0)] == (2, 3)
    assert marks[("permitted", 0, "cap")] == (3, 5)
