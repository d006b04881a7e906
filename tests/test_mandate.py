"""parse_mandate as tables: the README's mandates parse to their values; each refusal the spec names
fails with 78 at `file:line:col` and says what to write instead."""

import os

import pytest

import avsm


# ---- the README's own mandates parse (MANDATE-*, LEVER-01, BAND-01, GUARD-01, AUDIT-01, READING-01) ----------

COUNTER = """\
purpose: Keep the counter below ten.
metric: count
controller:
  kind: threshold
  above: 10
  action: reset
cadence: 10s
permitted:
  - name: reset
    run: ./reset
    cap: 60/hour
    reversible: true
forbidden: [rm]
"""

BACKUP = """\
purpose: Back up every hour.
metric: age
controller: {kind: threshold, above: 3600, action: backup}
cadence: 1m
permitted:
  - {name: backup, run: ./backup && touch stamp, cap: 2/hour, reversible: true}
max_rise: 120
"""

GUARDS = """\
purpose: Trade within limits.
metric: equity
controller: {kind: model}
cadence: 5m
permitted:
  - {name: trade, run: ./trade, cap: 10/day, reversible: false, takes: json}
guards:
  - {name: spend, run: ./spend, above: 100}
  - {name: errors, adapter: http.status https://example.com/health, above: 299, then: ask}
  - {name: dd, drawdown: 15%, of: equity, unwind: {action: trade, payload: {side: sell, qty: 100000}}}
audits:
  - {name: refunds, run: ./refunds, worse: up, tolerance: 2}
range: [0, 100000]
max_step: 5000
"""

BAND = """\
purpose: Keep the room between 19 and 24.
metric: temperature
controller: {kind: band, low: 19, high: 24, below: heat, above: cool}
cadence: 1m
permitted:
  - {name: heat, run: ./heat, cap: 6/hour, reversible: true}
  - {name: cool, run: ./cool, cap: 6/hour, reversible: true}
"""

READINGS = """\
purpose: Answer the customers who wait.
metric: unread
controller: {kind: model}
cadence: 10m
permitted:
  - {name: reply, run: ./reply, cap: 20/day, reversible: false, takes: text}
audits:
  - {name: customers, run: ./customers, worse: up, better: down}
readings:
  - {name: waiting, run: ./waiting, lines: address, audit: customers}
"""

WATER = """\
purpose: Keep the soil moist.
metric: moisture
controller: {kind: band, low: 30, high: 60, below: water, above: vent}
cadence: 1h
permitted:
  - {name: water, run: ./water, cap: 4/day, reversible: true, expects: up 5 within 3}
  - {name: vent, run: ./vent, cap: 4/day, reversible: true, expects: down within 2}
"""

SCRIPT = "#!/bin/sh\necho 1\n"


def venture(tmp_path, mandate, programs):
    """Write a venture directory with mandate.yaml and executable programs; return (dir, mandate path)."""
    d = tmp_path / "v"
    d.mkdir()
    (d / "mandate.yaml").write_text(mandate)
    for name in programs:
        (d / name).write_text(SCRIPT)
        (d / name).chmod(0o755)
    return str(d), str(d / "mandate.yaml")


def parse_in_dir(tmp_path, mandate, programs):
    d, path = venture(tmp_path, mandate, programs)
    return avsm.parse_mandate(mandate, path, d)


def test_counter(tmp_path):
    """MANDATE-02, MANDATE-03 (its purpose), MANDATE-04..06, CTRL-02, LEVER-01, LEVER-03, LEVER-16, EXAMPLE-01:
    the README's counter mandate."""
    m = parse_in_dir(tmp_path, COUNTER, ["report", "reset"])
    assert m["purpose"] == "Keep the counter below ten."
    assert m["metric"] == "count"
    assert m["cadence"] == 10
    c = m["controller"]
    assert (c["kind"], c["side"], c["bound"], c["action"], c["deadband"], c["hold"]) == ("threshold", "above", 10, "reset", None, 1)
    reset = m["levers"]["reset"]
    assert (reset["run"], reset["cap"], reset["reversible"], reset["delegated"]) == ("./reset", (60, 3600), True, False)
    assert m["forbidden"] == ["rm"]


@pytest.mark.parametrize("written, kept", [
    ('"Keep the counter below ten: it\'s a toy, café, #1 of 3."', "Keep the counter below ten: it's a toy, café, #1 of 3."),
    (">\n  Keep the counter\n  below ten.", "Keep the counter below ten."),
])
def test_purpose_is_free_text(written, kept):
    """MANDATE-03: `purpose` holds a statement in free text, kept as written (a colon, an apostrophe, a comma,
    a `#`, letters past ASCII, a folded block); what is not text is refused (REFUSALS below)."""
    text = f"purpose: {written}\nmetric: count\n{CTL}cadence: 10s\npermitted:\n{RESET}"
    assert avsm.parse_mandate(text, "m.yaml")["purpose"] == kept


def test_counter_example_directory_parses():
    """EXAMPLE-01, MANDATE-01: examples/counter's own mandate holds against its own directory."""
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "counter")
    path = os.path.join(d, "mandate.yaml")
    with open(path) as fh:
        m = avsm.parse_mandate(fh.read(), path, d)
    assert m["controller"]["action"] == "reset" and m["levers"]["reset"]["cap"] == (60, 3600)


def test_backup(tmp_path):
    """EXAMPLE-04, LEVER-02, PLAUS-15: the every-hour backup: a shell line, 2/hour, only max_rise bounded."""
    m = parse_in_dir(tmp_path, BACKUP, ["report", "backup"])
    assert m["cadence"] == 60
    assert m["controller"]["bound"] == 3600 and m["controller"]["action"] == "backup"
    assert m["levers"]["backup"]["run"] == "./backup && touch stamp"
    assert m["levers"]["backup"]["cap"] == (2, 3600)
    assert (m["max_rise"], m["max_fall"], m["max_step"]) == (120, None, None)


def test_guards_and_audits(tmp_path):
    """GUARD-01, GUARD-03/04, GUARD-08, GUARD-09, AUDIT-01, AUDIT-03, PLAUS-01/02, open point 55: the README's
    guards, audits, range and max_step."""
    m = parse_in_dir(tmp_path, GUARDS, ["report", "trade", "spend", "refunds"])
    spend, errors, dd = m["guards"]
    assert (spend["name"], spend["run"], spend["side"], spend["bound"], spend["then"]) == ("spend", "./spend", "above", 100, "pause")
    assert (errors["adapter"], errors["bound"], errors["then"]) == ("http.status https://example.com/health", 299, "ask")
    assert dd["drawdown"] == 15
    assert dd["unwind"] == {"action": "trade", "payload": {"side": "sell", "qty": 100000}}
    (refunds,) = m["audits"]
    assert (refunds["run"], refunds["worse"], refunds["better"], refunds["tolerance"], refunds["window"]) == ("./refunds", "up", "up", 2, 5)
    assert m["range"] == (0, 100000)
    assert m["max_step"] == 5000


def test_band(tmp_path):
    """BAND-01: the README's band."""
    m = parse_in_dir(tmp_path, BAND, ["report", "heat", "cool"])
    c = m["controller"]
    assert (c["kind"], c["low"], c["high"], c["below"], c["above"]) == ("band", 19, 24, "heat", "cool")


def test_readings(tmp_path):
    """READING-01, AUDIT-01, AUDIT-04, open point 22: the README's readings example; `permitted` with a model."""
    m = parse_in_dir(tmp_path, READINGS, ["report", "reply", "customers", "waiting"])
    assert m["audits"][0]["better"] == "down" and m["audits"][0]["worse"] == "up"
    assert m["readings"] == [{"name": "waiting", "run": "./waiting", "lines": "address", "audit": "customers", "timeout": None}]
    assert m["levers"]["reply"]["takes"] == "text"


def test_water_and_vent(tmp_path):
    """EFFECT-01, LEVER-03, BAND-08/09: the README's water and vent levers on the sides they may correct."""
    m = parse_in_dir(tmp_path, WATER, ["report", "water", "vent"])
    assert m["levers"]["water"]["expects"] == ("up", 5, 3)
    assert m["levers"]["vent"]["expects"] == ("down", None, 2)
    assert m["levers"]["water"]["cap"] == (4, 86400) == m["levers"]["vent"]["cap"]


def test_model_controller_needs_no_permitted():
    """Open point 22, CTRL-01: a model controller may have no levers at all."""
    m = avsm.parse_mandate("purpose: p\nmetric: m\ncontroller: {kind: model}\ncadence: 1d\n", "m.yaml")
    assert m["controller"]["kind"] == "model" and m["levers"] == {}


@pytest.mark.parametrize("extra, key, value", [
    ("controller: {kind: threshold, below: 5, action: reset}\n", "side", "below"),
    ("controller: {kind: threshold, above: 10, action: reset, deadband: 2, hold: 3}\n", "deadband", 2),
    ("controller: {kind: threshold, above: 10, action: reset, deadband: 2, hold: 3}\n", "hold", 3),
    ("controller: {kind: classifier}\n", "kind", "classifier"),
])
def test_controller_variants(extra, key, value):
    """CTRL-01, CTRL-05, CTRL-07, open point 25: below:, deadband and hold are keys of controller."""
    text = "purpose: p\nmetric: m\n" + extra + "cadence: 10s\npermitted:\n  - {name: reset, run: ./reset, cap: 1/hour, reversible: true}\n"
    assert avsm.parse_mandate(text, "m.yaml")["controller"][key] == value


# ---- refusals: 78, file:line:col, and the fix -------------------------------------------------------------

HEAD = "purpose: Keep the counter below ten.\nmetric: count\n"
CTL = "controller: {kind: threshold, above: 10, action: reset}\n"
RESET = "  - {name: reset, run: ./reset, cap: 60/hour, reversible: true}\n"
BAND_HEAD = "purpose: Keep the room comfortable.\nmetric: temperature\n"

# (id, mandate text, "line:col" of the fault, [words the message must hold], requirement IDs)
REFUSALS = [
    ("unknown-key",
     HEAD + CTL + "forbidden: [rm]\ncadance: 10s\npermitted:\n" + RESET,
     "5:1", ["unknown key 'cadance'", "did you mean 'cadence'"], "MANDATE-02, open point 22"),
    ("unknown-lever-key",
     HEAD + CTL + "cadence: 10s\npermitted:\n  - {name: reset, run: ./reset, cap: 60/hour, reversable: true}\n",
     "6:47", ["unknown key 'reversable'", "did you mean 'reversible'"], "LEVER-01, open point 22"),
    ("unknown-controller-key",
     HEAD + "controller: {kind: threshold, above: 10, action: reset, dead_band: 2}\ncadence: 10s\npermitted:\n" + RESET,
     "3:57", ["unknown key 'dead_band'", "did you mean 'deadband'"], "open points 22, 25"),
    ("missing-purpose",
     "metric: count\n" + CTL + "cadence: 10s\npermitted:\n" + RESET,
     "1:1", ["no 'purpose'"], "open point 22"),
    ("purpose-a-number",
     "purpose: 42\nmetric: count\n" + CTL + "cadence: 10s\npermitted:\n" + RESET,
     "1:1", ["purpose must be text"], "MANDATE-03"),
    ("purpose-a-list",
     "purpose: [keep, it, low]\nmetric: count\n" + CTL + "cadence: 10s\npermitted:\n" + RESET,
     "1:1", ["purpose must be text"], "MANDATE-03"),
    ("purpose-empty",
     'purpose: "  "\nmetric: count\n' + CTL + "cadence: 10s\npermitted:\n" + RESET,
     "1:1", ["purpose must be text"], "MANDATE-03"),
    ("action-not-permitted",
     HEAD + "controller: {kind: threshold, above: 10, action: rm}\ncadence: 10s\npermitted:\n" + RESET,
     "3:42", ["'rm' is not a permitted lever", "permit it under permitted:"], "CTRL-03"),
    ("threshold-without-permitted",
     HEAD + CTL + "cadence: 10s\n",
     "3:42", ["'reset' is not a permitted lever", "permit it under permitted:"], "CTRL-03, open point 22"),
    ("threshold-above-and-below",
     HEAD + "controller: {kind: threshold, above: 10, below: 2, action: reset}\ncadence: 10s\npermitted:\n" + RESET,
     "3:1", ["exactly one of above: or below:"], "open point 25"),
    ("permitted-and-forbidden",
     HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET + "forbidden: [reset]\n",
     "7:13", ["both permitted and forbidden", "keep it in one list"], "LEVER-16, open point 26"),
    ("unknown-controller-kind",
     HEAD + "controller: {kind: pid, above: 10, action: reset}\ncadence: 10s\npermitted:\n" + RESET,
     "3:14", ["controller kind", "threshold, band, model, classifier"], "CTRL-01"),
    ("band-deadband-equals-width",
     BAND_HEAD + "controller: {kind: band, low: 19, high: 24, below: heat, above: cool, deadband: 5}\ncadence: 1m\n"
     "permitted:\n  - {name: heat, run: ./heat, cap: 6/hour, reversible: true}\n"
     "  - {name: cool, run: ./cool, cap: 6/hour, reversible: true}\n",
     "3:71", ["not less than the band's width 5", "make it smaller"], "BAND-07"),
    ("band-deadband-wider",
     BAND_HEAD + "controller: {kind: band, low: 19, high: 24, below: heat, above: cool, deadband: 6}\ncadence: 1m\n"
     "permitted:\n  - {name: heat, run: ./heat, cap: 6/hour, reversible: true}\n"
     "  - {name: cool, run: ./cool, cap: 6/hour, reversible: true}\n",
     "3:71", ["not less than the band's width", "make it smaller"], "BAND-07"),
    ("band-low-side-expects-down",
     BAND_HEAD + "controller: {kind: band, low: 19, high: 24, below: heat, above: cool}\ncadence: 1m\n"
     "permitted:\n  - {name: heat, run: ./heat, cap: 6/hour, reversible: true, expects: down within 2}\n"
     "  - {name: cool, run: ./cool, cap: 6/hour, reversible: true}\n",
     "6:62", ["'heat'", "low side", "may only expect up ... within"], "BAND-08"),
    ("band-high-side-expects-up",
     BAND_HEAD + "controller: {kind: band, low: 19, high: 24, below: heat, above: cool}\ncadence: 1m\n"
     "permitted:\n  - {name: heat, run: ./heat, cap: 6/hour, reversible: true}\n"
     "  - {name: cool, run: ./cool, cap: 6/hour, reversible: true, expects: up 2 within 2}\n",
     "7:62", ["'cool'", "high side", "may only expect down ... within"], "BAND-09"),
    ("expects-without-within",
     HEAD + CTL + "cadence: 10s\npermitted:\n  - {name: reset, run: ./reset, cap: 60/hour, reversible: true, expects: up}\n",
     "6:65", ["'up' says no 'within'", "write up within 3"], "EFFECT-02, BAND-08"),
    ("expects-size-zero",
     HEAD + CTL + "cadence: 10s\npermitted:\n  - {name: reset, run: ./reset, cap: 60/hour, reversible: true, expects: up 0 within 3}\n",
     "6:65", ["not a size", "a number above 0"], "EFFECT-03"),
    ("max-rise-not-smaller",
     HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET + "max_step: 100\nmax_rise: 100\n",
     "8:1", ["max_rise 100 is not smaller than max_step 100", "tighter"], "PLAUS-14"),
    ("max-fall-not-smaller",
     HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET + "max_fall: 200\nmax_step: 100\n",
     "7:1", ["max_fall 200 is not smaller than max_step 100", "tighter"], "PLAUS-14"),
    ("guard-reads-lever-command",
     HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET + "guards: [{name: g, run: ./reset, above: 5}]\n",
     "7:20", ["guard 'g' reads a lever's or the metric's command", "a reading of its own"], "GUARD-07, open point 56"),
    ("guard-reads-lever-command-spaced",
     HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET + "guards: [{name: g, run: \"  ./reset \", above: 5}]\n",
     "7:20", ["guard 'g' reads a lever's or the metric's command"], "GUARD-07, open point 56"),
    ("guard-reads-report",
     HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET + "guards: [{name: g, run: ./report, above: 5}]\n",
     "7:20", ["guard 'g' reads a lever's or the metric's command", "a reading of its own"], "GUARD-07, open point 56"),
    ("guard-reads-metric-adapter",
     "purpose: p\nmetric: http.status https://example.com/\n" + CTL + "cadence: 10s\npermitted:\n" + RESET
     + "guards: [{name: g, adapter: http.status https://example.com/, above: 299}]\n",
     "7:20", ["reads the metric's adapter", "a reading of its own"], "GUARD-07, open point 56"),
    ("unwind-unpermitted-lever",
     HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET + "guards:\n"
     "  - {name: dd, drawdown: 15%, of: count, unwind: {action: trade, payload: {side: sell}}}\n",
     "8:51", ["'trade' is not a permitted lever", "permit it under permitted:"], "GUARD-09"),
    ("unwind-payload-not-json",
     HEAD + "controller: {kind: model}\ncadence: 10s\npermitted:\n"
     "  - {name: trade, run: ./trade, cap: 1/day, reversible: true, takes: json}\n"
     "guards: [{name: dd, drawdown: 15%, of: count, unwind: {action: trade, payload: sell all}}]\n",
     "7:71", ["takes json", "the unwind's payload is a mapping"], "GUARD-09, open point 55"),
    ("unwind-payload-not-text",
     HEAD + "controller: {kind: model}\ncadence: 10s\npermitted:\n"
     "  - {name: post, run: ./post, cap: 1/day, reversible: true, takes: text}\n"
     "guards: [{name: dd, drawdown: 15%, of: count, unwind: {action: post, payload: {text: hi}}}]\n",
     "7:70", ["takes text", "the unwind's payload is text"], "GUARD-09, open point 55"),
    ("lever-without-reversible",
     HEAD + CTL + "cadence: 10s\npermitted:\n  - {name: reset, run: ./reset, cap: 60/hour}\n",
     "6:3", ["lever 'reset' has no 'reversible'"], "LEVER-01, open point 23"),
    pytest.param(
        "takes-pdf",
        HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET
        + "  - {name: post, run: ./post, cap: 1/day, reversible: true, takes: pdf}\n",
        "7:61", ["takes", "text, json, diff", "pdf"], "LEVER-13"),
    pytest.param(
        "escalate-onbox",
        HEAD + "controller: {kind: model}\ncadence: 10s\nescalate: onbox\n",
        "5:1", ["escalate", "offbox", "onbox"], "MANDATE-02, ESC-08"),
    ("lines-phone",
     HEAD + "controller: {kind: model}\ncadence: 10s\naudits:\n"
     "  - {name: customers, run: ./customers, worse: up, better: down}\nreadings:\n"
     "  - {name: waiting, run: ./waiting, lines: phone, audit: customers}\n",
     "8:37", ["lines must be one of address", '"phone"'], "READING-02"),
    ("reading-names-missing-audit",
     HEAD + "controller: {kind: model}\ncadence: 10s\naudits:\n"
     "  - {name: customers, run: ./customers, worse: up, better: down}\nreadings:\n"
     "  - {name: waiting, run: ./waiting, lines: address, audit: customer}\n",
     "8:53", ["reading 'waiting' names audit 'customer'", "the mandate does not have"], "READING-03"),
    ("reading-named-twice",
     HEAD + "controller: {kind: model}\ncadence: 10s\nreadings:\n"
     "  - {name: waiting, run: ./waiting, lines: address}\n  - {name: waiting, run: ./other, lines: address}\n",
     "7:6", ["reading 'waiting' is named twice"], "READING-09"),
    ("forbidden-stop",
     HEAD + CTL + "cadence: 10s\npermitted:\n" + RESET + "forbidden: [rm, stop]\n",
     "7:17", ["stop is built in and always permitted"], "GUARD-05, open point 12"),
    ("cadence-past-a-century",
     HEAD + CTL + "cadence: 36501d\npermitted:\n" + RESET,
     "4:1", ["more than 100 years", "36500d"], "MANDATE-05"),
    ("bound-past-1e300",
     HEAD + "controller: {kind: threshold, above: 1" + "0" * 400 + ", action: reset}\ncadence: 10s\npermitted:\n"
     + RESET, "3:38", ["too large"], "CTRL-02"),    # the YAML layer points at the number itself
    ("permitted-a-mapping",
     HEAD + CTL + "cadence: 10s\npermitted: {}\n",
     "5:1", ["permitted must be a list"], "MANDATE-02"),
    ("cadence-1h30",
     HEAD + CTL + "cadence: 1h30\npermitted:\n" + RESET,
     "4:1", ["'1h30' is not a duration", "write 90m"], "MANDATE-05, MANDATE-07"),
    ("cap-fortnight",
     HEAD + CTL + "cadence: 10s\npermitted:\n  - {name: reset, run: ./reset, cap: 60/fortnight, reversible: true}\n",
     "6:33", ["not a cap", "minute, hour, day, week or a duration"], "LEVER-03, open point 20"),
    ("hold-zero",
     HEAD + "controller: {kind: threshold, above: 10, action: reset, hold: 0}\ncadence: 10s\npermitted:\n" + RESET,
     "3:57", ["hold must be a whole number of at least 1"], "CTRL-07"),
]


def case_ids(rows):
    return [r.values[0] if hasattr(r, "values") else r[0] for r in rows]


def refuse(text):
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_mandate(text, "m.yaml")
    return err.value


@pytest.mark.parametrize("case, text, where, words, reqs", REFUSALS, ids=case_ids(REFUSALS))
def test_refusal_says_the_fix(case, text, where, words, reqs):
    """MANDATE-08, EXIT-10 and the requirement in `reqs`: the mandate does not hold (78), and the message says
    what is wrong and what to write instead."""
    err = refuse(text)
    assert err.code == avsm.EX_CONFIG == 78
    for word in words:
        assert word in str(err), f"{case}: {word!r} not in {str(err)!r}"


@pytest.mark.parametrize("case, text, where, words, reqs", REFUSALS, ids=case_ids(REFUSALS))
def test_refusal_names_file_line_col(case, text, where, words, reqs):
    """MANDATE-08, STYLE (errors point at file:line:col) and the requirement in `reqs`: the message starts
    `m.yaml:LINE:COL: ` at the key (or `-`) of the node at fault."""
    err = refuse(text)
    assert str(err).startswith(f"m.yaml:{where}: "), f"{case}: {str(err)!r}"


# ---- refusals that need the venture directory (VENTURE-05, REPORT-01, LEVER-02) ---------------------------

def test_missing_lever_program_is_refused(tmp_path):
    """MANDATE-08, VENTURE-05: with the directory given, a lever whose ./reset is missing does not hold; the
    message names the mandate file, its line and column, and the program."""
    d, path = venture(tmp_path, COUNTER, ["report"])
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_mandate(COUNTER, path, d)
    assert err.value.code == 78
    assert str(err.value).startswith(f"{path}:")
    assert "./reset is missing" in str(err.value)


def test_missing_lever_program_names_line_col(tmp_path):
    """MANDATE-08: the missing ./reset is reported at the lever's `run:` key, line 10 column 5."""
    d, path = venture(tmp_path, COUNTER, ["report"])
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_mandate(COUNTER, path, d)
    assert str(err.value).startswith(f"{path}:10:5: ")


def test_non_executable_lever_program_is_refused(tmp_path):
    """MANDATE-08, VENTURE-05: a ./reset that is not executable does not hold, and the fix is chmod +x."""
    d, path = venture(tmp_path, COUNTER, ["report", "reset"])
    os.chmod(os.path.join(d, "reset"), 0o644)
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_mandate(COUNTER, path, d)
    assert err.value.code == 78
    assert str(err.value).startswith(f"{path}:")
    assert "./reset is not executable" in str(err.value)
    assert f"run chmod +x {d}/reset" in str(err.value) and "/./" not in str(err.value)    # issue 22 item 9: a tidy path


def test_a_cap_of_zero_says_its_count_must_be_at_least_one():
    """Issue 22 item 9, LEVER-03: `0/hour` is refused saying a cap's count is at least 1, and what to write for a
    lever that must never run; a cap that is no count and period still gets the general form."""
    with pytest.raises(ValueError) as err:
        avsm.parse_cap("0/hour")
    assert str(err.value).startswith("'0/hour' is not a cap: its count must be at least 1")
    with pytest.raises(ValueError) as err:
        avsm.parse_cap("often")
    assert "write a count and a period, such as 60/hour" in str(err.value)


def test_missing_report_is_refused(tmp_path):
    """REPORT-01, MANDATE-08: without a built-in adapter the metric is read by ./report, which must be there."""
    d, path = venture(tmp_path, COUNTER, ["reset"])
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_mandate(COUNTER, path, d)
    assert err.value.code == 78
    assert "./report" in str(err.value)


def test_missing_shell_lever_program_is_refused(tmp_path):
    """LEVER-02, MANDATE-08: the program of a shell line (`./backup && touch stamp`) must be there too."""
    d, path = venture(tmp_path, BACKUP, ["report"])
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_mandate(BACKUP, path, d)
    assert "./backup is missing" in str(err.value)


def test_adapter_metric_needs_no_report(tmp_path):
    """REPORT-01, open point 5: a metric that names a built-in adapter needs no ./report."""
    text = COUNTER.replace("metric: count", "metric: http.status https://example.com/health")
    d, path = venture(tmp_path, text, ["reset"])
    assert avsm.parse_mandate(text, path, d)["adapter"] == "http.status https://example.com/health"


def test_without_directory_programs_are_not_checked():
    """MANDATE-08: directory=None checks the text alone (used to re-check a stored mandate)."""
    assert avsm.parse_mandate(COUNTER, "m.yaml")["levers"]["reset"]["run"] == "./reset"


# ---- venture names (VENTURE-02, VENTURE-03, open point 6) -------------------------------------------------

@pytest.mark.parametrize("name", ["counter", "backup", "my_venture-2.0", "A1"])
def test_venture_name_accepted(name):
    """VENTURE-02, VENTURE-03: one word of letters, digits, _, - and . is a venture name."""
    assert avsm.check_venture_name(name) == name


@pytest.mark.parametrize("name", ["a b", "x/y", "self", "\u00fcn\u00ef", "", ".", "..", "tab\there", "semi;colon"])
def test_venture_name_refused(name):
    """VENTURE-03, open point 6: any other name, and the reserved `self`, is refused with 65 and a fix."""
    with pytest.raises(avsm.Fail) as err:
        avsm.check_venture_name(name)
    assert err.value.code == avsm.EX_DATAERR == 65
    assert "rename the directory" in str(err.value)


@pytest.mark.parametrize("run", ["./reset; sleep 30", "./reset>out", "./reset&&true", "./reset|cat", "(./reset)",
                                 "FOO=1 ./reset", "./reset 2>&1"])
def test_a_shell_line_names_its_program_before_the_first_operator(tmp_path, run):
    """LEVER-02: `run:` is a shell command line; its program is the first word up to the shell's first
    operator, so `./reset; sleep 30` or `./reset>out` hold when ./reset is there (a word the shell builds, as
    FOO=1 ./reset, is left to the shell)."""
    text = COUNTER.replace("run: ./reset", f"run: \"{run}\"")
    assert f'"{run}"' in text
    d, path = venture(tmp_path, text, ["report", "reset"])
    assert avsm.parse_mandate(text, path, d)["levers"]["reset"]["run"] == run
    os.unlink(os.path.join(d, "reset"))
    if not run.startswith(("FOO", "(")):
        with pytest.raises(avsm.Fail) as err:
            avsm.parse_mandate(text, path, d)
        assert "./reset is missing" in str(err.value)
