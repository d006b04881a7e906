"""Section 3's small parsers as tables: durations, caps, percentages, report numbers and `expects`."""

import math

import pytest

import avsm


# ---- durations (MANDATE-05..07, open point 20) --------------------------------

@pytest.mark.parametrize("text, seconds", [
    ("10s", 10),
    ("5m", 300),
    ("2h", 7200),
    ("1d", 86400),
    ("90m", 5400),
    ("1m", 60),
])
def test_duration_is_a_number_and_one_unit(text, seconds):
    """MANDATE-05, MANDATE-06: a duration is a number and one unit of s, m, h or d (10s, 5m, 2h, 1d)."""
    assert avsm.parse_duration(text) == seconds


def test_compound_duration_is_refused_with_its_fix():
    """MANDATE-07: `1h30` is not a duration; the message says to write 90m."""
    with pytest.raises(ValueError) as err:
        avsm.parse_duration("1h30")
    assert "write 90m" in str(err.value)
    assert "1h30" in str(err.value)


@pytest.mark.parametrize("text", ["0s", "-1s", "1.5m", "10", "10 s", "", "s", "10x", "1w", "10S"])
def test_not_a_duration(text):
    """MANDATE-06, open point 20: positive whole numbers only, one unit from s, m, h, d, and nothing between."""
    with pytest.raises(ValueError) as err:
        avsm.parse_duration(text)
    assert "not a duration" in str(err.value)


def test_bare_number_from_yaml_is_refused():
    """MANDATE-06: `cadence: 10` reaches the parser as the int 10 and is no duration (no unit)."""
    with pytest.raises(ValueError):
        avsm.parse_duration(10)


# ---- caps (LEVER-03, open point 20) ---------------------------------------------

@pytest.mark.parametrize("text, cap", [
    ("60/hour", (60, 3600)),
    ("4/day", (4, 86400)),
    ("2/hour", (2, 3600)),
    ("3/90m", (3, 5400)),
    ("1/week", (1, 604800)),
    ("10/minute", (10, 60)),
    ("5/2h", (5, 7200)),
])
def test_cap_is_a_count_and_a_period(text, cap):
    """LEVER-03, open point 20: a cap is N/period, the period minute, hour, day, week or a duration."""
    assert avsm.parse_cap(text) == cap


@pytest.mark.parametrize("text", ["0/hour", "60/fortnight", "60", "-1/hour", "1.5/hour", "60/", "/hour",
                                  "60/1h30", "60/0s"])
def test_not_a_cap(text):
    """LEVER-03, open point 20: a count of at least 1 and a known period, or the cap does not hold."""
    with pytest.raises(ValueError) as err:
        avsm.parse_cap(text)
    assert "not a cap" in str(err.value)


# ---- percentages (GUARD-08) -----------------------------------------------------

def test_percent():
    """GUARD-08: a drawdown is a percentage such as 15%."""
    assert avsm.parse_percent("15%") == 15


@pytest.mark.parametrize("text", ["15", "0%", "-5%", "101%", "abc%", "%"])
def test_not_a_percent(text):
    """GUARD-08: a percentage is a number above 0 and at most 100, with %."""
    with pytest.raises(ValueError):
        avsm.parse_percent(text)


# ---- report numbers (REPORT-03, open point 19) ------------------------------------

@pytest.mark.parametrize("text, value", [
    ("5", 5.0),
    ("-3.5", -3.5),
    ("1e3", 1000.0),
    (" 7 ", 7.0),
    ("+2", 2.0),
    ("0.25", 0.25),
    (".5", 0.5),
    ("2E-2", 0.02),
])
def test_number(text, value):
    """REPORT-03, open point 19: an optional sign, digits, fraction and exponent; spaces around allowed."""
    assert avsm.parse_number(text) == value


@pytest.mark.parametrize("text", ["nan", "NaN", "NAN", " nan "])
def test_nan_parses_as_nan(text):
    """REPORT-03, open point 19, PLAUS-04: `nan` in any case is NaN (which is then implausible)."""
    assert math.isnan(avsm.parse_number(text))


@pytest.mark.parametrize("text", ["inf", "-inf", "Infinity", "1,000", "0x10", "1_000", "count: 5", "", "   ",
                                  "5 5", "5%", "five", "\u0661\u0662"])
def test_not_a_number(text):
    """REPORT-03, open point 19: inf, separators, hex, underscores and labelled numbers are failed reports."""
    assert avsm.parse_number(text) is None


# ---- expects (EFFECT-01..03) -----------------------------------------------------

@pytest.mark.parametrize("text, expects", [
    ("up 5 within 3", ("up", 5.0, 3)),
    ("down within 2", ("down", None, 2)),
    ("down 0.5 within 1", ("down", 0.5, 1)),
    ("up within 10", ("up", None, 10)),
])
def test_expects(text, expects):
    """EFFECT-01: up or down, an optional size, then within and a count."""
    assert avsm.parse_expects(text) == expects


def test_expects_without_within_is_refused():
    """EFFECT-02: `expects: up` alone is refused, and the message names `within`."""
    with pytest.raises(ValueError) as err:
        avsm.parse_expects("up")
    assert "within" in str(err.value)


@pytest.mark.parametrize("text", ["up 0 within 3", "up -1 within 2", "up nan within 2", "up inf within 2",
                                  "up lots within 2"])
def test_expects_size_must_be_above_zero(text):
    """EFFECT-03: a size that is not a number above 0 is refused."""
    with pytest.raises(ValueError) as err:
        avsm.parse_expects(text)
    assert "size" in str(err.value) or "number above 0" in str(err.value)


@pytest.mark.parametrize("text", ["sideways within 2", "up within 0", "up within", "up within -1", "up within 1.5",
                                  "down 5 within 3 reports", "", "within 3"])
def test_not_an_expectation(text):
    """EFFECT-01: any other shape is refused."""
    with pytest.raises(ValueError):
        avsm.parse_expects(text)


def test_overflowing_number_is_not_infinite():
    """REPORT-03, open point 19: no report line parses to an infinite number."""
    value = avsm.parse_number("1e400")
    assert value is None or not math.isinf(value)
