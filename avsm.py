#!/usr/bin/env python3
"""avsm: a supervisor that pursues goals within limits and keeps proof.

A venture is a directory holding `mandate.yaml`: what it is for, the number to
watch (its metric), what it may do (permitted levers, each with a cap), and
what it may not (forbidden). avsm keeps the venture's `run` program alive,
reads the metric by running `report` on a cadence, runs a lever when the
controller says so and the gate can prove it may, asks a person before
anything irreversible, and writes every reading, decision and outcome to an
append-only, hash-chained SQLite ledger.

Processes
    avsmd   holds avsmd.lock, serves `sock` (JSON lines, mode 0600), starts and
            restarts the warden, ends every process group the warden left
            behind, checks each second that lock and socket are still its own.
    warden  the only process that acts: ticks the ventures, runs every report,
            lever and `run` in a process group of its own, appends records.

The ledger
    ledger.db, one table `records`, rollback journal, synchronous=FULL; each
    row's hash = sha256(prev + "\\n" + seq + "\\n" + at + "\\n" + record).

Models propose, code proves: an `action` record carries a proof whose premises
are only measured or declared records; `avsm why SEQ` re-checks it.

Sections
    1. this header          2. constants, exit codes, Fail
    3. small pure parts: durations, numbers, the YAML subset
    4. the mandate, the config and the requests a client may send
    5. the ledger
    6-8. the kernel, a function per event yielding intents, what it calls beneath:
       6. read_ended: report_read, reading_read, round_settled (rules); next_round_at,
          round_started; fold, each kind's by its record
       7. the gate (check_proof, recheck_action, prove), gated; lever_proved, lever_outcome,
          check_rule, starts_kept, run_started, restart_rule, interrupted_rule, approval_rule,
          denial_rule, person_rule, proposal_rule, forecast_rule, ratchet_rule, world_rule
       8. VentureState; adoption_rule; a model's words: reply_parsed, reply_unusable,
          unanswered; summaries; written: a record's notice, a canary, a checkpoint
    9. effects: the ledger's writer, processes, process groups, their journal, the wire
    10. the warden: its loop, its requests, carry_out  11. its rooms, its files
    12. avsmd and the roles process     13. client commands
    14. other hosts over OpenSSH        15. avsmd -t, avsm try, avsm link
    16-18. from the ledger alone: chart, doctor, the status lines and the page
    19. main and the argv[0] dispatch
"""

import collections
import contextlib
import fcntl
import functools
import heapq
import io
import json
import math
import os
import re
import signal
import stat
import sys
import time

# =============================================================================
# 2. Constants, exit codes, Fail
# Every later section uses these; `grep EX_` shows the whole exit contract.
# =============================================================================

VERSION = "0.1.0"

EX_OK = 0            # done
EX_USAGE = 64        # bad usage: a command or option avsm does not know
EX_DATAERR = 65      # input refused: a mandate, an ask, a record number
EX_NOINPUT = 66      # a directory or home that is not there
EX_NOHOST = 68       # another host that ssh cannot reach (unknown, down, no answer in time)
EX_UNAVAILABLE = 69  # no avsmd is answering on the home (or no avsm on the host)
EX_SOFTWARE = 70     # a bug in avsm: reported whole on standard error
EX_CANTCREAT = 73    # a home that is not a directory
EX_IOERR = 74        # standard output cannot be written
EX_TEMPFAIL = 75     # another avsmd holds the home, or avsmd must be stopped first
EX_NOPERM = 77       # a permission missing
EX_CONFIG = 78       # a config or mandate that does not hold, or a Python older than 3.11
EXIT_MEANINGS = {0: "done", 64: "usage", 65: "refused", 66: "not there", 68: "host not reached",
                 69: "no avsmd answering", 70: "a bug in avsm", 73: "cannot create",
                 74: "output not writable", 75: "not now", 77: "permission missing",
                 78: "config does not hold"}

# At import, before anything 3.11-only runs, an older interpreter gets one line and EX_CONFIG (no
# bug in avsm; a service manager can be told not to restart on 78), not a traceback. So the file
# must parse on 3.6: no `match`, no `except*`, no parenthesized context managers (test_newcomer).
if sys.version_info < (3, 11):
    sys.stderr.write("avsm needs Python 3.11 or later; this is %d.%d.%d at %s\n"
                     % (sys.version_info[:3] + (sys.executable or "an unknown path",)))
    raise SystemExit(EX_CONFIG)

CLAIMS = ("measured", "declared", "inferred")
ZERO_HASH = "0" * 64
SOCKET_LIMIT = 103 if sys.platform == "darwin" else 107
LEVER_TIMEOUT = 600          # a lever run's time limit unless `timeout:` says otherwise
READING_TIMEOUT = 600        # a report's, guard's, audit's or reading's, likewise
KILL_GRACE = 7               # SIGTERM, then SIGKILL this many seconds later
NOTE_MAX = 2000              # characters of a note kept in a record
OUTPUT_KEEP = 64 * 1024      # bytes of a command's output kept while it runs
# bytes a command's output pipe holds before the command waits for the warden
PIPE_ROOM = 1024 * 1024
REPLY_MAX = 256 * 1024       # bytes of a model's reply read at most
BACKOFF_FIRST, BACKOFF_CEILING, BACKOFF_RESET = 1, 300, 600   # open point 31
QUICK_DEATH = 10             # a `run` that dies within this many seconds is restarted with back-off
WARDEN_STOP_GRACE = 9        # seconds avsmd waits for the warden at a stop
WARDEN_LATE = 21             # then for one still ending its levers (RUN-07); a hung one meets it


class Fail(Exception):
    """A refusal the user can act on: an exit code and a message naming the fix."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# =============================================================================
# 3. Small pure parts
# Durations, caps, numbers and the YAML subset.
# Reads no clock and runs nothing; errors point at file:line:col.
# =============================================================================

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
CAP_PERIODS = {"minute": 60, "hour": 3600, "day": 86400, "week": 604800}
DURATION_MAX = 36500 * 86400  # 100 years: past it a duration is a typo, and clocks overflow


def parse_duration(text):
    """Return the seconds in a duration: a positive whole number and a unit (10s, 5m, 2h, 1d)."""
    s = text.strip() if isinstance(text, str) else json.dumps(text)  # YAML's null reads null
    one = re.fullmatch(r"([0-9]+)([smhd])", s)
    if one:
        seconds = int(one[1]) * DURATION_UNITS[one[2]]
        if 0 < seconds <= DURATION_MAX:
            return seconds
        if seconds:
            raise ValueError(f"'{s}' is more than 100 years; "
                             f"write a duration of at most {format_duration(DURATION_MAX)}")
        raise ValueError(f"'{s}' is not a duration; a duration is more than zero, such as 10s")
    compound = re.fullmatch(r"((?:[0-9]+[dhms])+)([0-9]+)?", s)
    if compound:
        parts = re.findall(r"([0-9]+)([dhms])", compound[1])
        total = sum(int(n) * DURATION_UNITS[u] for n, u in parts)
        smaller = {"d": "h", "h": "m", "m": "s"}.get(parts[-1][1])
        if compound[2] and smaller:  # `1h30` reads as 1h30m
            total += int(compound[2]) * DURATION_UNITS[smaller]
        if total > 0 and (smaller or not compound[2]):
            raise ValueError(f"'{s}' is not a duration; write {format_duration(total)}")
    raise ValueError(f"'{s}' is not a duration; write a whole number and one unit of s, m, h or d, "
                     "such as 10s, 5m, 2h, 1d")


def format_duration(seconds):
    """Return the shortest exact duration text for a number of seconds."""
    for unit in "dhm":
        if seconds % DURATION_UNITS[unit] == 0:
            return f"{seconds // DURATION_UNITS[unit]}{unit}"
    return f"{seconds}s"


def next_nightly(hhmm, after=None):
    """Return the unix time of the next nightly decision at local HH:MM after `after`, or None.

    mktime with isdst=-1 follows the wall clock across a daylight-saving change (open point 47)."""
    if hhmm == "never":
        return None
    after = time.time() if after is None else after
    hour, minute = (int(x) for x in hhmm.split(":"))
    t = time.localtime(after)
    for day in range(3):
        target = time.mktime((t.tm_year, t.tm_mon, t.tm_mday + day, hour, minute, 0, 0, 0, -1))
        shown = time.localtime(target)
        if (shown.tm_hour, shown.tm_min) != (hour, minute):
            # a time the clock skipped: step back to the first minute after the gap
            while True:
                before = time.localtime(target - 60)
                if before.tm_mday != shown.tm_mday \
                        or before.tm_hour * 60 + before.tm_min <= hour * 60 + minute:
                    break
                target -= 60
        if target > after:
            return target
    return None


def parse_cap(text):
    """Return (count, period seconds) of a cap `N/period`: minute, hour, day, week or a duration."""
    s = str(text).strip()
    count, slash, period = s.partition("/")
    if not slash or not re.fullmatch("[0-9]+", count):
        raise ValueError(
            f"'{s}' is not a cap; write a count and a period, such as 60/hour or 4/day")
    if int(count) < 1:
        raise ValueError(f"'{s}' is not a cap: its count must be at least 1 "
                         "(a lever that may never run is forbidden:, or not permitted at all)")
    try:
        return int(count), CAP_PERIODS.get(period) or parse_duration(period)
    except ValueError:
        raise ValueError(f"'{s}' is not a cap; the period is minute, hour, day, week "
                         "or a duration such as 90m") from None


# Regular expressions stay text, compiled by `re` on first use: compiling them at import
# was 6 ms of every client command.
NUMBER = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?"


def parse_number(text):
    """Return the float a report line holds, NaN for `nan`, or None when it is not a number alone.
    number ::= [+-] (digits ['.' digits*] | '.' digits) [(e|E) [+-] digits]   (open point 19)"""
    s = text.strip()
    if s.lower() in ("nan", "+nan", "-nan"):
        return float("nan")
    if not re.fullmatch(NUMBER, s):
        return None
    value = float(s)
    return None if math.isinf(value) else value  # 1e400 overflows: no number


# README: "A number beyond 1e300 is refused, not rounded" (a report's is only kept finite)
NUMBER_MAX = 1e300
NUMBER_DIGITS = {10: 302, 8: 335, 16: 251}  # more significant digits is past NUMBER_MAX


class NumberError(ValueError):
    """A number past NUMBER_MAX, where YAML or JSON would have read one: the refusal quotes the
    text it is written as, cut to 24 characters."""

    def __init__(self, text):
        shown = repr(text) if len(text) <= 24 else f"{text[:24]!r}... ({len(text)} characters)"
        super().__init__(
            f"{shown} is too large: avsm takes no number beyond 1e300; write a smaller number")


def shown_value(value, keep=60):
    """Return a parsed value as JSON for a refusal, cut to `keep` characters (its length said)."""
    text = json.dumps(value)
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} characters)"


def format_local_time(at):
    """Return unix time `at` as local YYYY-MM-DDTHH:MM:SS+hh:mm (or @SECONDS past the C library,
    or as stored when a hand-edited ledger holds no number)."""
    try:
        t = time.localtime(at)
    except (OverflowError, OSError, ValueError, TypeError):
        return f"@{at}"
    text = time.strftime("%Y-%m-%dT%H:%M:%S%z", t)
    return text[:-2] + ":" + text[-2:]


def shown_text(text):
    """Return text safe for a terminal: newlines as \\n, no control character raw."""
    return escape_controls(
        CONTROL_CHARS, text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r"))


def escape_controls(pattern, text):
    """Return `text` with each character `pattern` matches written as \\x.. or \\u...., so nothing
    from outside reaches a terminal raw."""
    return re.sub(pattern, lambda m: ("\\x%02x" if ord(m[0]) < 256 else "\\u%04x") % ord(m[0]),
                  text)


CONTROL_CHARS = "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def shown(text):
    """Return `text` safe for a terminal: control characters but tab and newline as \\x.. or
    \\u...."""
    return escape_controls(CONTROL_CHARS.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"), text)


def bounded_int(text, base=10):
    """Return the integer `text` (0x or 0o before it in base 16 or 8) in `base`, or raise
    NumberError past NUMBER_MAX (digits counted first: int() refuses past 4300)."""
    if len(text.lstrip("+-0xo")) > NUMBER_DIGITS[base] or abs(int(text, base)) > NUMBER_MAX:
        raise NumberError(text)
    return int(text, base)


def bounded_float(text):
    """Return the float `text`, or raise NumberError past NUMBER_MAX (1e999 reads as infinity)."""
    value = float(text)
    if abs(value) > NUMBER_MAX:
        raise NumberError(text)
    return value


def read_json(text, object_pairs_hook=None):
    """Return the JSON value of `text`, every number within NUMBER_MAX (no NaN, no 1e999: the
    ledger's canonical JSON cannot write them), or raise ValueError."""
    return json.loads(text, object_pairs_hook=object_pairs_hook, parse_int=bounded_int,
                      parse_float=bounded_float, parse_constant=refuse_constant)


def refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def format_number(value):
    """Return a number as a person writes it: 12 rather than 12.0."""
    if value is None:
        return "-"
    if value != value:
        return "nan"
    if isinstance(value, int) and abs(value) >= 1e15:
        digits = str(abs(value))  # past a float's reach: no float() of it
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:6]}e+{len(digits) - 1}"
    if abs(value) < 1e15 and float(value).is_integer():
        return str(int(value))
    return f"{value:.6g}"


def nearest(word, known):
    """Return ' (did you mean X?)' for the known word closest to `word`, or ''."""
    import difflib
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


# ---- the YAML subset ----
# mandate.yaml and config.yaml as open point 24 settles it (../yaml-cases/README.md):
# the YAML 1.2 core-schema value, or a YamlError at line:col saying what to write; never a guess.


class YamlError(ValueError):
    """A YAML text avsm refuses: where, what, and what to write instead."""

    def __init__(self, line, col, reason, source):
        self.line, self.col, self.reason, self.source = line, col, reason, source
        where = f"{source}:{line}:{col}" if source is not None else f"line {line}, column {col}"
        super().__init__(f"{where}: {reason}")


YAML_MULTILINE = "a scalar must fit on one line; use | or > for text over several lines"
YAML_UNCLOSED = "the quote opened here is not closed on its line; " + YAML_MULTILINE
YAML_MAX_DEPTH = 100  # far beyond any mandate; keeps recursion clear of Python's limit

# What YAML 1.2 may hold (c-printable), less a bare \r, U+FEFF past the start, and
# U+0085, U+2028 and U+2029, which YAML 1.1 readers take for line breaks.
YAML_BAD_CHAR = (
    r'[^\t\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]')

YAML_ESCAPES = {'0': '\0', 'a': '\a', 'b': '\b', 't': '\t', '\t': '\t', 'n': '\n', 'v': '\v',
                'f': '\f', 'r': '\r', 'e': '\x1b', ' ': ' ', '"': '"', '/': '/', '\\': '\\',
                'N': '\x85', '_': '\xa0', 'L': '\u2028', 'P': '\u2029'}
YAML_HEX_ESCAPES = {'x': 2, 'u': 4, 'U': 8}


def parse_yaml(text, source=None):
    """Return the value of `text`, a YAML document in avsm's subset."""
    return parse_yaml_marked(text, source)[0]


def parse_yaml_marked(text, source=None):
    """Return (value, marks): marks maps a path of keys and indexes to the (line, col) where
    that node's key or entry ('-', or its first character inside [ ]) starts; () the root's.
    A character YAML does not allow is refused."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = text.decode('utf-8')
        except UnicodeDecodeError as err:
            line = text.count(b'\n', 0, err.start) + 1
            col = err.start - text.rfind(b'\n', 0, err.start)
            raise YamlError(line, col, "not UTF-8; save the file as UTF-8", source) from None
    text = text.removeprefix('\ufeff').replace('\r\n', '\n')
    bad = re.search(YAML_BAD_CHAR, text)
    if bad:
        at = bad.start()
        line = text.count('\n', 0, at) + 1
        col = at - text.rfind('\n', 0, at)
        if bad.group() == '\r':
            reason = "carriage return without a line feed; end lines with \\n or \\r\\n"
        else:
            reason = (f"character U+{ord(bad.group()):04X} is not allowed in YAML; remove it "
                      "or write it as an escape inside double quotes")
        raise YamlError(line, col, reason, source)
    lines = text.split('\n')
    unterminated = lines[-1] != ''
    if not unterminated:
        lines.pop()  # the final \n ends the last line; it starts none
    reader = YamlReader(lines, unterminated, source)
    return reader.document(), reader.marks


def resolve_plain(text):
    """Return the core-schema value of a plain scalar (YAML 1.2.2, 10.3.2: anything else plain is a
    string); past NUMBER_MAX raise NumberError."""
    if text in ('', '~', 'null', 'Null', 'NULL'):
        return None
    if text in ('true', 'True', 'TRUE', 'false', 'False', 'FALSE'):
        return text.lower() == 'true'
    for pattern, read in ((r'[-+]?[0-9]+', bounded_int),
                          (r'0o[0-7]+', lambda t: bounded_int(t, 8)),
                          (r'0x[0-9a-fA-F]+', lambda t: bounded_int(t, 16)),
                          (r'[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?', bounded_float),
                          (r'[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)',
                           lambda t: float(t.replace('.', '')))):
        if re.fullmatch(pattern, text):
            return read(text)
    return text


def plain_start_reason(line, i, flow):
    """Return why no plain scalar may start at line[i], or None when one may."""
    ch = line[i]
    nxt = line[i + 1:i + 2] or ' '
    spaced = nxt in ' \t' or (flow and nxt in ',[]{}')
    if ch in '&*':
        return "anchors and aliases are not supported; write the value out"
    if ch == '!':
        return "tags are not supported; remove the tag (quote the value to keep it a string)"
    if ch == '?' and spaced:
        return "explicit keys ('? ') are not supported; write 'key: value' on one line"
    if ch == ':' and spaced:
        return "empty key; write a key before the ':'"
    if ch == '-' and spaced:
        if flow:
            return "'-' alone cannot be a value inside [ ] or { }; quote it"
        return "a '- ' entry cannot start here; put it on a line of its own"
    if ch in '|>' and flow:
        return f"a block scalar ('{ch}') cannot be inside [ ] or {{ }}; quote the text"
    if ch in ',[]{}#|>%@`':
        return f"a plain scalar cannot start with '{ch}'; quote it"
    return None


def tab_reason(line, col):
    """Return the refusal of the tab at line[col], named by where it stands."""
    before, after = line[:col], line[col:].lstrip(' \t')
    if before.strip(' ') == '':
        if after == '':
            return "tab on a blank line; remove it"
        return "tab in indentation; indent with spaces"
    if after == '':
        return "trailing tab; remove it"
    if after.startswith('#'):
        return "tab before a comment; use spaces"
    last = before.rstrip(' ')[-1]
    if last in ':-,':
        return f"tab after '{last}'; use a space"
    return "tab outside quotes; use spaces, or write \\t inside double quotes"


def marker_reason(line):
    """Return the refusal of a line that starts with '%', '---' or '...' inside the document."""
    if line.startswith('%'):
        return "directives (%YAML, %TAG) are not supported; remove the line"
    if is_document_marker(line, '...'):
        return "'...' (document end) is not supported; remove it"
    if is_document_marker(line, '---'):
        return "a second '---' starts another document; one document per file"
    return f"a line may not start with '{line[:3]}'; quote the value"


def is_document_marker(line, marker):
    """True when `line` is the document marker, alone or before a space."""
    return line[:4] in (marker, marker + ' ', marker + '\t')


def leading_spaces(line):
    return len(line) - len(line.lstrip(' '))


def fold_lines(lines):
    """Return folded text (YAML 1.2, 8.1.3): a break between two text lines becomes a space,
    an empty line between them the break; breaks next to a more-indented line are kept."""
    out, prev, empties = [], None, 0
    for line in lines:
        if line is None:
            empties += 1
            continue
        if prev is None:
            out.append('\n' * empties)
        elif prev[0] in ' \t' or line[0] in ' \t':
            out.append('\n' * (empties + 1))
        else:
            out.append('\n' * empties if empties else ' ')
        out.append(line)
        prev, empties = line, 0
    return ''.join(out)


class YamlReader:
    """One pass over one document's lines, marking where each node starts; rows and columns
    are 0-based inside, 1-based in errors and marks."""

    def __init__(self, lines, unterminated, source):
        self.lines, self.unterminated, self.source, self.marks = lines, unterminated, source, {}

    def error(self, row, col, reason):
        return YamlError(row + 1, col + 1, reason, self.source)

    def mark(self, path, row, col):
        self.marks[path] = (row + 1, col + 1)

    def check_depth(self, row, i, path):
        if len(path) > YAML_MAX_DEPTH:
            raise self.error(row, i, f"nested deeper than {YAML_MAX_DEPTH} levels; flatten it")

    # --- lines ---

    def skip_spaces(self, row, i):
        """Return the index of the first non-space at or after i; a tab there is refused."""
        line = self.lines[row]
        while i < len(line) and line[i] == ' ':
            i += 1
        if line[i:i + 1] == '\t':
            raise self.error(row, i, tab_reason(line, i))
        return i

    def skip_blank(self, row):
        """Return the first row at or after `row` that is neither blank nor a comment."""
        while row < len(self.lines):
            i = self.skip_spaces(row, 0)
            if self.lines[row][i:i + 1] not in ('', '#'):
                return row
            row += 1
        return row

    def next_content(self, row):
        """Return the next content row, refusing directives and document markers."""
        row = self.skip_blank(row)
        if row < len(self.lines) and self.lines[row].startswith(('%', '---', '...')):
            raise self.error(row, 0, marker_reason(self.lines[row]))
        return row

    def indent(self, row):
        return leading_spaces(self.lines[row])

    def finish_line(self, row, i, reason):
        """rest ::= ' '* [' #' comment] EOL ; anything else is refused with `reason`."""
        line = self.lines[row]
        j = self.skip_spaces(row, i)
        if j == len(line) or line[j - 1:j + 1] == ' #':
            return
        raise self.error(row, j, "a comment needs a space before '#'" if line[j] == '#' else reason)

    def is_dash(self, row, i):
        """True when a block sequence entry ('-' then a space or the end) starts at i."""
        return self.lines[row][i:i + 2] in ('-', '- ', '-\t')

    # --- document and block collections ---

    def document(self):
        """document ::= comment* ['---' comment?] comment* [block_node] comment*"""
        row = self.skip_blank(0)
        if row < len(self.lines) and is_document_marker(self.lines[row], '---'):
            self.finish_line(row, 3,
                             "content on the '---' line; start the document on the next line")
            row += 1
        row = self.next_content(row)
        if row == len(self.lines):
            self.mark((), 0, 0)
            return None
        indent = self.indent(row)
        self.mark((), row, indent)
        value, end = self.block_node(row, indent, -1, ())
        end = self.next_content(end)
        if end < len(self.lines):
            if self.indent(end) < indent:
                reason = "this line is indented less than the document's first line; align them"
            elif isinstance(value, (dict, list)):
                reason = "unexpected content after the document's value"
            else:
                reason = YAML_MULTILINE
            raise self.error(end, self.indent(end), reason)
        return value

    def block_node(self, row, i, parent, path):
        """block_node ::= block_seq | block_map | inline_value, starting at column i of row"""
        self.check_depth(row, i, path)
        if self.is_dash(row, i) or self.block_key(row, i, path):
            return self.block_collection(row, i, path)
        return self.inline_value(row, i, parent, path)

    def block_collection(self, row, indent, path, under_key=False):
        """block_seq ::= ('-' (' '+ entry | EOL next_lines_node))+, every '-' at column `indent`
        block_map ::= (key ' '* ':' (' '+ value | EOL next_lines_node))+, every key at `indent`

        Under a key at its own indentation, a line there without '-' ends the sequence."""
        dashed, entries, first_row = self.is_dash(row, indent), [], {}
        while True:
            key, colon = len(entries), indent
            if not dashed:
                entry = self.block_key(row, indent, path)
                if entry is None:
                    raise self.error(row, indent, (
                        "a '- ' entry cannot follow keys at the same indentation; indent it under"
                        " its key") if self.is_dash(row, indent) else (
                        "expected 'key: value' here (is a ':' missing, or a scalar continued from"
                        " above?)"))
                key, colon = entry
                if key in first_row:
                    raise self.error(row, indent, f"duplicate key {key!r} (first at line "
                                                  f"{first_row[key]}); each key once")
                first_row[key] = row + 1
            self.mark(path + (key,), row, indent)
            value, row = self.entry_value(row, colon + 1, indent, path + (key,), dashed)
            entries.append((key, value))
            row = self.next_content(row)
            if row == len(self.lines) or self.indent(row) < indent:
                break
            deeper = self.indent(row)
            if deeper > indent:
                reason = YAML_MULTILINE
                if self.is_dash(row, deeper) or self.block_key(row, deeper, ()):
                    reason = ("bad indentation: this entry lines up with no block above it; "
                              "align it with its siblings")
                raise self.error(row, deeper, reason)
            if dashed and not self.is_dash(row, indent):
                if under_key:
                    break
                raise self.error(row, indent,
                                 "expected '- ' here, where the sequence above continues")
        return ([value for _, value in entries] if dashed else dict(entries)), row

    def entry_value(self, row, i, indent, path, dashed):
        """entry ::= '-' EOL next_lines_node | '-' ' '+ (compact_seq | compact_map | inline_value)
        value ::= EOL next_lines_node | ' '+ inline_value ; no block collection on the key's line"""
        line = self.lines[row]
        j = self.skip_spaces(row, i)
        if line[j:j + 1] in ('', '#'):
            return self.next_lines_node(row, indent, path, under_key=not dashed)
        if dashed:
            return self.block_node(row, j, indent, path)
        if self.is_dash(row, j):
            raise self.error(row, j, "a sequence cannot start on its key's line; "
                                     "put each '- ' entry on a line of its own below the key")
        if self.block_key(row, j, path):
            raise self.error(row, j, "a mapping cannot start on its key's line; "
                                     "put it on the next lines, indented")
        return self.inline_value(row, j, indent, path)

    def next_lines_node(self, row, indent, path, under_key):
        """next_lines_node ::= a block node indented deeper than `indent` | a '- ' sequence at
        `indent` when under a key | nothing (null)"""
        nxt = self.next_content(row + 1)
        if nxt < len(self.lines):
            deeper = self.indent(nxt)
            if deeper > indent:
                return self.block_node(nxt, deeper, indent, path)
            if under_key and deeper == indent and self.is_dash(nxt, deeper):
                return self.block_collection(nxt, deeper, path, under_key=True)
        return None, row + 1

    # --- keys and one-line values ---

    def block_key(self, row, i, path):
        """Return (key, index of ':') when a block mapping entry starts at i, else None.
        key ::= (plain | single | double) ' '* ':' (' ' | EOL)"""
        line = self.lines[row]
        if line[i] in '[{':
            _, end = self.flow_node(row, i, path)
            j = self.skip_spaces(row, end)
            if line.startswith(':', j):
                raise self.error(row, i, "a collection cannot be a key; use a string key")
            return None
        plain = line[i] not in '"\''
        if plain:
            if plain_start_reason(line, i, flow=False) and line[i] not in '?:&*!':
                return None  # '|', '>' or '- ' start a value, not a key; plain() refuses '?:&*!'
            key, end = self.plain(row, i, flow=False)
        else:
            key, end = self.quoted(row, i)
        j = self.skip_spaces(row, end)
        if line[j:j + 2] not in (':', ': ', ':\t'):
            return None
        if j - i > 1024:
            raise self.error(row, i, "a key longer than 1024 characters; shorten it")
        return (self.plain_key(row, i, key) if plain else key), j

    def plain_key(self, row, i, text):
        """Return a plain key, refused unless the core schema reads it as a string."""
        try:
            value = resolve_plain(text)
        except ValueError:
            value = None
        if not isinstance(value, str):
            raise self.error(row, i, f'key {text} is not a string; quote it: "{text}":')
        return text

    def inline_value(self, row, i, parent, path):
        """inline_value ::= block_scalar | (flow_seq | flow_map | single | double | plain) comment?
        EOL"""
        line = self.lines[row]
        if line[i] in '|>':
            return self.block_scalar(row, i, parent)
        if line[i] in '[{"\'':
            value, end = self.flow_node(row, i, path) if line[i] in '[{' else self.quoted(row, i)
            closing = "quote" if line[i] in '"\'' else f"'{line[end - 1]}'"
            self.finish_line(row, end, f"unexpected text after the closing {closing}")
            return value, row + 1
        value, end = self.plain_value(row, i, flow=False)
        if end < len(line) and line[end] == ':':
            raise self.error(row, end,
                             "a mapping cannot start here; put it on the next lines, indented")
        return value, row + 1

    # --- scalars ---

    def plain(self, row, i, flow):
        """Return (text, end) of the plain scalar at i, refused when none may start there.
        plain ::= first char*, ending before ': ', ':' EOL, ' #', EOL, and in flow before ,[]{}"""
        line = self.lines[row]
        reason = plain_start_reason(line, i, flow)
        if reason:
            raise self.error(row, i, reason)
        stops = ',[]{}' if flow else ''
        j = i
        while j < len(line):
            ch = line[j]
            if ch == ':' and line[j + 1:j + 2] in ' \t' + stops \
                    or line[j - 1:j + 1] == ' #' or ch in stops:
                break
            if ch == '\t':
                raise self.error(row, j, tab_reason(line, j))
            j += 1
        return line[i:j].rstrip(' '), j

    def plain_value(self, row, i, flow):
        """Return (value, end) of the plain scalar at i."""
        text, end = self.plain(row, i, flow)
        try:
            return resolve_plain(text), end
        except ValueError as err:
            raise self.error(row, i, f"{err} (or quote it to keep it text)") from None

    def quoted(self, row, i):
        """single ::= "'" (char | "''")* "'" on one line ; double: see double_quoted"""
        line = self.lines[row]
        if line[i] == '"':
            return self.double_quoted(row, i)
        j = i + 1
        while True:
            j = line.find("'", j)
            if j < 0:
                raise self.error(row, i, YAML_UNCLOSED)
            if not line.startswith("''", j):
                return line[i + 1:j].replace("''", "'"), j + 1
            j += 2

    def double_quoted(self, row, i):
        """double ::= '"' (char | '\\' escape)* '"' on one line, escapes as in YAML 1.2 5.7"""
        line = self.lines[row]
        out, j = [], i + 1
        while j < len(line):
            ch = line[j]
            if ch == '"':
                return ''.join(out), j + 1
            if ch != '\\':
                out.append(ch)
                j += 1
            elif j + 1 == len(line):
                raise self.error(row, j, "a '\\' at the end of the line continues the scalar; "
                                         + YAML_MULTILINE)
            elif line[j + 1] in YAML_ESCAPES:
                out.append(YAML_ESCAPES[line[j + 1]])
                j += 2
            elif line[j + 1] in YAML_HEX_ESCAPES:
                width = YAML_HEX_ESCAPES[line[j + 1]]
                digits = line[j + 2:j + 2 + width]
                if not re.fullmatch('[0-9a-fA-F]{%d}' % width, digits):
                    raise self.error(row, j, f"'\\{line[j + 1]}' needs {width} hex digits")
                code = int(digits, 16)
                if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
                    # YAML has no surrogate pairs to join: a lone half is no character
                    raise self.error(row, j, f"'\\{line[j + 1]}{digits}' is not a character; "
                                             "write \\U and the full code point")
                out.append(chr(code))
                j += 2 + width
            else:
                raise self.error(row, j, f"unknown escape '\\{line[j + 1]}'; write '\\\\' for a "
                                         "backslash, or use single quotes")
        raise self.error(row, i, YAML_UNCLOSED)

    def block_scalar(self, row, i, parent):
        """block_scalar ::= ('|' | '>') ['-' | '+'] [' '+ comment] EOL, lines deeper than parent;
        its value: its lines (None for empty) joined or folded, then chomped"""
        line = self.lines[row]
        style, j = line[i], i + 1
        chomp = line[j] if j < len(line) and line[j] in '+-' else ''
        j += len(chomp)
        if re.match('[0-9]', line[j:]):
            raise self.error(row, j, "indentation indicators (|2) are not supported; "
                                     "remove the digit and indent the text")
        self.finish_line(row, j,
                         f"text after '{line[i:j]}'; put the text on the next lines, indented")
        body, end = self.block_lines(row + 1, parent)
        if body and end == len(self.lines) and self.unterminated and chomp != '-' \
                and self.lines[-1].strip(' '):
            # YAML 1.2 readers disagree on a last line without its line break
            raise self.error(end - 1, len(self.lines[-1]), "the file ends inside a block scalar "
                                                           "without a final line break; add one")
        content = [k for k, x in enumerate(body) if x is not None]
        if not content:
            return ('\n' * len(body) if chomp == '+' else ''), end
        last = content[-1]
        kept = body[:last + 1]
        text = fold_lines(kept) if style == '>' else '\n'.join('' if x is None else x for x in kept)
        return text + '\n' * {'-': 0, '+': len(body) - last}.get(chomp, 1), end

    def block_lines(self, row, parent):
        """Return (lines, next row) of a block scalar's body, each less the first non-empty line's
        indentation (deeper than `parent`), None for an empty line."""
        lines = self.lines
        first = row
        while first < len(lines) and lines[first].strip(' ') == '':
            first += 1
        if first == len(lines) or leading_spaces(lines[first]) <= parent \
                or lines[first].startswith(('---', '...')):
            return [None] * (first - row), first
        n = leading_spaces(lines[first])
        if n == 0:
            # only a top-level scalar can get here; YAML readers disagree on unindented text
            raise self.error(first, 0, "indent the text of a block scalar")
        for r in range(row, first):
            if len(lines[r]) > n:
                raise self.error(r, n, "this empty line has more spaces than the block scalar's "
                                       "first line; remove them")
        body, r = [], row
        while r < len(lines):
            spaces = leading_spaces(lines[r])
            if spaces == len(lines[r]):
                body.append(lines[r][n:] if spaces > n else None)
            elif spaces >= n:
                body.append(lines[r][n:])
            else:
                break
            r += 1
        return body, r

    # --- flow collections ---

    def flow_node(self, row, i, path):
        """flow_node ::= flow_seq | flow_map | single | double | plain, all on this line"""
        self.check_depth(row, i, path)
        ch = self.lines[row][i]
        if ch in '[{':
            return self.flow_collection(row, i, path)
        if ch in '"\'':
            return self.quoted(row, i)
        return self.plain_value(row, i, flow=True)

    def flow_skip(self, row, i, start):
        """Return the next non-space index inside the collection opened at `start`."""
        line = self.lines[row]
        j = self.skip_spaces(row, i)
        if j == len(line) or line[j - 1:j + 1] == ' #':
            raise self.error(row, start, f"this '{line[start]}' is not closed on its line; "
                                         "a flow collection must open and close on one line")
        return j

    def flow_collection(self, row, start, path):
        """flow_seq ::= '[' [flow_node (',' flow_node)* [',']] ']' ; no 'key: value' entries
        flow_map ::= '{' [pair (',' pair)* [',']] '}' ; pair ::= flow_key ':' ' '* flow_node"""
        line = self.lines[row]
        close = ']' if line[start] == '[' else '}'
        entries, first_col = [], {}
        i = self.flow_skip(row, start + 1, start)
        while line[i] != close:
            if line[i] == ',':
                raise self.error(row, i, "an entry is missing before this ','")
            key, j = len(entries), i
            if close == '}':
                key, j = self.flow_key(row, i, start)
                if key in first_col:
                    raise self.error(row, i, f"duplicate key {key!r} (first at line {row + 1}, "
                                             f"column {first_col[key]}); each key once")
                first_col[key] = i + 1
                j = self.flow_skip(row, j, start)
                if line[j] in ',}':
                    raise self.error(row, j, f"key {key!r} has no value; write one, or null")
            self.mark(path + (key,), row, i)
            value, end = self.flow_node(row, j, path + (key,))
            entries.append((key, value))
            j = self.flow_skip(row, end, start)
            if line[j] == ':' and close == ']':
                raise self.error(row, i, "'key: value' inside [ ] is not supported; "
                                         "write it as a mapping: [{key: value}]")
            if line[j] not in (',', close):
                raise self.error(row, j, f"expected ',' or '{close}'")
            i = self.flow_skip(row, j + 1, start) if line[j] == ',' else j
        return (dict(entries) if close == '}' else [v for _, v in entries]), i + 1

    def flow_key(self, row, i, start):
        """Return (key, index after ':').
        flow_key ::= (single | double) ' '* ':' | plain ' '* ': '"""
        line = self.lines[row]
        if line[i] in '[{':
            raise self.error(row, i, "a collection cannot be a key; use a string key")
        plain = line[i] not in '"\''
        if plain:
            text, end = self.plain(row, i, flow=True)
            key = self.plain_key(row, i, text)
        else:
            key, end = self.quoted(row, i)
        j = self.flow_skip(row, end, start)
        if line[j] != ':':
            raise self.error(row, i, f"{{ }} holds 'key: value' pairs; give {key!r} a value, "
                                     "or use [ ] for a list")
        if plain and line[j + 1:j + 2] not in ' \t':
            # only a quoted key may touch its value: {"qty":1}, not {qty:[1]}
            raise self.error(row, j + 1, "put a space after ':'")
        return key, j + 1


# =============================================================================
# 4. The mandate, the config and the requests
# What a venture may do, how avsmd is set up, and what a client may ask on sock:
# each read into plain values or refused at file:line:col. Pure, as section 3.
# =============================================================================

# ---- the mandate ----

MANDATE_KEYS = {"purpose", "metric", "controller", "cadence", "permitted", "forbidden", "restart",
                "run", "guards", "audits", "readings", "range", "max_step", "max_rise", "max_fall",
                "confirm", "world", "calibration", "escalate", "timeout"}
LEVER_KEYS = {"name", "run", "cap", "reversible", "delegated", "timeout", "takes", "expects",
              "revoke_after", "budget", "check"}
GUARD_KEYS = {"name", "run", "adapter", "drawdown", "of", "above", "below", "then", "unwind",
              "confirm", "timeout"}
AUDIT_KEYS = {"name", "run", "worse", "better", "tolerance", "window", "confirm", "timeout"}
READING_KEYS = {"name", "run", "lines", "audit", "timeout"}
TAKES = ("text", "json", "diff", "file")
ADAPTERS = ("http.status", "stripe", "github")
BUILTIN_LEVERS = ("stop",)  # open point 12: always permitted, pauses the venture
RESTART_POLICIES = ("always", "on-failure", "never")


def checked_yaml(text, source):
    """Return (the YAML document `text`, its Checker); Fail(78) at file:line:col."""
    try:
        doc, marks = parse_yaml_marked(text, source)
    except YamlError as err:
        raise Fail(EX_CONFIG, str(err)) from None
    return doc, Checker(source, marks)


class Checker:
    """Checks a parsed YAML document, refusing at file:line:col with the fix. A value is named by
    `what`, or by its key (the path's last) when not told."""

    def __init__(self, source, marks):
        self.source, self.marks = source, marks

    def fail(self, path, message):
        line, col = self.where(path)
        raise Fail(EX_CONFIG, f"{self.source}:{line}:{col}: {message}")

    def where(self, path):
        while path and path not in self.marks:
            path = path[:-1]
        return self.marks.get(path, (1, 1))

    def mapping(self, value, path, known, what=None, needs=(), fix=None):
        what = what or path[-1]
        if not isinstance(value, dict):
            self.fail(path, f"{what} must be a mapping of keys to values")
        for key in value:
            if key not in known:
                self.fail(path + (key,),
                          f"unknown key '{key}' in {what}{nearest(key, known)}")
        self.require(value, path, needs, what, fix)
        return value

    def text(self, value, path, what=None, required=True):
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            self.fail(path, f"{what or path[-1]} must be text")
        return value.strip()

    def number(self, value, path, what=None, positive=False):
        what = what or path[-1]
        # past NUMBER_MAX parse_yaml refused it: only NaN and the infinities are left
        if not is_number(value) or not math.isfinite(value):
            self.fail(path, f"{what} must be a number, not {shown_value(value)}")
        if positive and value <= 0:
            self.fail(path, f"{what} must be above 0")
        return value

    def whole(self, value, path, least=1):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            self.fail(path, f"{path[-1]} must be a whole number of at least {least}")
        return value

    def boolean(self, value, path):
        if not isinstance(value, bool):
            self.fail(path, f"{path[-1]} must be true or false")
        return value

    def choice(self, value, path, choices, what=None):
        if value not in choices:
            named = ", ".join(filter(None, choices))
            self.fail(path, f"{what or path[-1]} must be one of {named}, not {shown_value(value)}")
        return value

    def require(self, value, path, keys, what, fix=None):
        """Fail at `path`: `what` has no KEY (then `; fix`), the first of `keys` `value` lacks."""
        for key in keys:
            if key not in value:
                self.fail(path, f"{what} has no '{key}'" + (f"; {fix}" if fix else ""))

    def url(self, value, path):
        if not value.startswith(("http://", "https://")):
            self.fail(path, f"'{value}' is not a URL; write http://... or https://...")

    def parsed(self, parse, value, path):
        try:
            return parse(value)
        except ValueError as err:
            self.fail(path, str(err))

    def duration(self, value, path):
        return self.parsed(parse_duration, value, path)

    def command(self, value, path, what, directory):
        run = self.text(value, path, what)
        if directory is not None:
            problem = command_problem(run, directory)
            if problem:
                self.fail(path, f"{what}: {problem}")
        return run


def command_problem(run, directory):
    """Return why a command line's program is missing or not executable in `directory`, or None."""
    # the program, up to the shell's first operator
    first = re.match(r"([^\s;&|<>()$`\\\"'*?\[#~=]+(?=[ \t\n;&|<>)]|\Z))?", run.lstrip())[0]
    if "/" not in first:    # a name found on PATH, or a word the shell builds: the shell judges it
        return None
    path = os.path.normpath(first if os.path.isabs(first) else os.path.join(directory, first))
    if not os.path.exists(path):
        return f"{first} is missing in {directory}; create it or fix the path"
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        return f"{first} is not executable; run chmod +x {path}"
    return None


def refuse(problem, code=EX_DATAERR):
    """Raise Fail(code, problem) when there is a problem (a check's answer: why not, or None)."""
    if problem:
        raise Fail(code, problem)


def check_venture_name(name):
    """Return the venture name of a directory, or raise Fail(65) for one avsm cannot name."""
    refuse((name in (".", "..") or not re.fullmatch(r"[A-Za-z0-9_.-]+", name))
           and f"'{name}' is not a venture name: a directory name is one word of letters, digits,"
               " _, - and .; rename the directory")
    refuse(name == "self" and "'self' is avsm's own venture; rename the directory")
    return name


def delegate_lever(text, lever, source):
    """Return mandate `text` with `delegated: true` on `lever`, checked by parsing it back
    (open point 41); Fail or ValueError says why it cannot be."""
    before = parse_mandate(text, source)
    if lever not in before["levers"]:
        raise ValueError(f"{lever} is not permitted in {source} now")
    doc, marks = parse_yaml_marked(text, source)
    index = next(i for i, item in enumerate(doc["permitted"]) if item.get("name") == lever)
    lines, said = text.split("\n"), "delegated" in doc["permitted"][index]
    line, col = marks[("permitted", index, "delegated" if said else "name")]
    row = lines[line - 1]
    if said:
        value_at = row.index(":", col - 1) + 1
        end = min([p for p in (row.find(",", value_at), row.find("}", value_at)) if p >= 0]
                  or [len(row)])
        lines[line - 1] = row[:value_at] + " true" + row[end:]
    else:
        brace = row.rfind("}")
        if row.lstrip().startswith(("- {", "{")) and brace > 0:  # a flow mapping on one line
            lines[line - 1] = row[:brace].rstrip() + ", delegated: true" + row[brace:]
        else:
            lines.insert(line, " " * (col - 1) + "delegated: true")
    new = "\n".join(lines)
    after = parse_mandate(new, source)
    before["levers"][lever]["delegated"] = True
    if after != before:
        raise ValueError("the change would touch more than delegated")
    return new


def named_items(c, doc, key, keys, what, listing):
    """Yield (path, item, name, at) of each item of a list key (permitted, guards, ...), each name
    once; at(KEY) is the path of the item's KEY."""
    items, names, noun = [] if doc.get(key) is None else doc[key], set(), what.split()[-1]
    if not isinstance(items, list):
        c.fail((key,), f"{key} must be a list{listing}")
    for i, item in enumerate(items):
        path = (key, i)
        c.mapping(item, path, keys, what)
        name = c.text(item.get("name"), path + ("name",), f"{what}'s name")
        if name in names:
            said = 'permitted' if key == 'permitted' else 'named'
            c.fail(path + ("name",), f"{noun} '{name}' is {said} twice; name each {noun} once")
        names.add(name)
        yield path, item, name, lambda field: path + (field,)


def parse_levers(c, doc, directory):
    """Return the permitted levers by name."""
    levers = {}
    for path, item, name, at in named_items(c, doc, "permitted", LEVER_KEYS, "a lever",
                                            " of levers, each with name, run, cap and reversible"):
        if name in BUILTIN_LEVERS:
            c.fail(at("name"),
                   f"'{name}' is built in (it pauses the venture); give the lever another name")
        c.require(item, path, ("cap", "reversible") + (() if name == "research" else ("run",)),
                  f"lever '{name}'", "a lever says name, run, cap and reversible")
        lever = {"name": name,
                 "run": c.command(item["run"], at("run"), f"lever '{name}'", directory)
                 if "run" in item else None,
                 "cap": c.parsed(parse_cap, item["cap"], at("cap")),
                 "cap_text": str(item["cap"]).strip(),
                 "reversible": c.boolean(item["reversible"], at("reversible")),
                 "delegated": c.boolean(item.get("delegated", False), at("delegated")),
                 "timeout": reading_timeout(c, item, path) or LEVER_TIMEOUT,
                 "takes": c.choice(item.get("takes"), at("takes"), (None,) + TAKES),
                 "expects": c.parsed(parse_expects, item["expects"], at("expects"))
                 if "expects" in item else None,
                 "revoke_after": c.whole(item["revoke_after"], at("revoke_after"))
                 if "revoke_after" in item else None,
                 "budget": parse_budget(c, item["budget"], at("budget"))
                 if "budget" in item else None,
                 "check": c.command(item["check"], at("check"), "check", directory)
                 if "check" in item else None}
        if lever["run"] == "mail.send":
            if lever["takes"] not in (None, "text"):
                c.fail(at("takes"), "mail.send takes text: the message, its headers, "
                                    "a blank line, then its body")
            lever["takes"] = "text"  # From: is set by avsm
        if name == "research":
            if lever["run"]:
                c.fail(at("run"), "research has no run: it asks the command named under research: "
                                  "in config.yaml")
            lever["takes"] = lever["takes"] or "text"  # the question
        if lever["revoke_after"] and not lever["delegated"]:
            c.fail(at("revoke_after"), "revoke_after applies to a delegated lever; "
                                       "add delegated: true or remove it")
        levers[name] = lever
    return levers


def parse_expects(text):
    """Return (way, size or None, within) of `up|down [size] within N`."""
    words = str(text).split()
    wrong = (f"'{text}' is not an expectation; write up or down, an optional size, then within and"
             " a count")
    if not words or words[0] not in ("up", "down"):
        raise ValueError(wrong + ": up 5 within 3")
    if "within" not in words:
        raise ValueError(
            f"'{text}' says no 'within'; write {words[0]} within 3, counting the reports that"
            " follow a run")
    at = words.index("within")
    size = None
    if at == 2:
        size = parse_number(words[1])
        if size is None or not size > 0:
            raise ValueError(
                f"'{words[1]}' is not a size; write a number above 0, as in up 5 within 3")
    elif at != 1:
        raise ValueError(wrong)
    if len(words) != at + 2 or not words[at + 1].isdigit() or int(words[at + 1]) < 1:
        raise ValueError(f"'{text}' needs a count of reports after within, such as within 3")
    return (words[0], size, int(words[at + 1]))


def parse_budget(c, value, path):
    """Return a lever's budget {field, max, per} (open point 27)."""
    c.mapping(value, path, {"field", "max", "per"}, "a budget", ("field", "max", "per"),
              "write {field: qty, max: 100000, per: 1d}")
    return {"field": c.text(value["field"], path + ("field",)),
            "max": c.number(value["max"], path + ("max",), positive=True),
            "per": c.duration(value["per"], path + ("per",))}


def parse_mandate(text, source="mandate.yaml", directory=None):
    """Return the mandate `text` as one validated dict; Fail(78) at file:line:col when it does not
    hold. In `directory`, when given, its programs must exist and be executable."""
    doc, c = checked_yaml(text, source)
    c.mapping(doc, (), MANDATE_KEYS, "the mandate", ("purpose", "metric", "controller", "cadence"),
              "every mandate says purpose, metric, controller and cadence")
    m = {key: c.text(doc[key], (key,)) for key in ("purpose", "metric")}
    m["cadence"] = c.duration(doc["cadence"], ("cadence",))
    m["adapter"] = m["metric"] if m["metric"].split()[0] in ADAPTERS else None
    m["timeout"] = reading_timeout(c, doc, ())
    if not m["adapter"]:
        c.command("./report", ("metric",), "the metric is read by ./report", directory)
    elif adapter_problem(m["adapter"]):
        c.fail(("metric",), adapter_problem(m["adapter"]))
    m["levers"] = parse_levers(c, doc, directory)
    m["forbidden"] = parse_forbidden(c, doc, m["levers"])
    m["controller"] = parse_controller(c, doc["controller"], m["levers"])
    m["restart"] = c.choice(doc.get("restart", "always"), ("restart",), RESTART_POLICIES)
    m["run"] = None
    if "run" in doc or directory is not None and os.path.isfile(os.path.join(directory, "run")):
        m["run"] = c.command(doc.get("run", "./run"), ("run",), "run", directory)
    m["range"] = None
    if "range" in doc:
        r = doc["range"]
        if not isinstance(r, list) or len(r) != 2:
            c.fail(("range",), "range must be [low, high], such as [0, 100000]")
        low, high = (c.number(v, ("range", i), "a range bound") for i, v in enumerate(r))
        if low > high:
            c.fail(("range",), "range must be [low, high] with low at most high")
        m["range"] = (low, high)
    for key in ("max_step", "max_rise", "max_fall"):
        m[key] = c.number(doc[key], (key,), positive=True) if key in doc else None
    for key in ("max_rise", "max_fall"):
        if None not in (m[key], m["max_step"]) and m[key] >= m["max_step"]:
            c.fail((key,), f"{key} {format_number(m[key])} is not smaller than max_step "
                           f"{format_number(m['max_step'])}; "
                           "beside max_step it must bound its way tighter")
    m["confirm"] = c.boolean(doc.get("confirm", True), ("confirm",))
    m["guards"] = parse_guards(c, doc, m, directory)
    m["audits"] = parse_audits(c, doc, directory)
    m["readings"] = parse_readings(c, doc, m, directory)
    m["world"] = c.command(doc["world"], ("world",), "world", directory) if "world" in doc else None
    m["calibration"] = (c.number(doc["calibration"], ("calibration",))
                        if "calibration" in doc else None)
    m["escalate"] = c.choice(doc.get("escalate"), ("escalate",), (None, "offbox"))
    return m


def adapter_problem(text):
    """Return why an adapter's reading does not hold, or None. adapter ::= 'http.status' URL
    | ('stripe' | 'github') PATH ['#' pointer]   pointer ::= ('/' token)* """
    words = text.split()
    if words[0] not in ADAPTERS:
        return f"'{words[0]}' is not a built-in adapter; use one of {', '.join(ADAPTERS)}"
    if len(words) != 2:
        return (f"'{text}' is not an adapter reading; write http.status URL, "
                "stripe PATH#/pointer or github PATH#/pointer")
    pointer = words[1].partition("#")[2]
    if words[0] == "http.status":
        if not words[1].startswith(("http://", "https://")):
            return f"http.status reads an http:// or https:// URL, not '{words[1]}'"
    elif "://" in words[1]:
        return (f"{words[0]} reads a path under the url of adapters: {words[0]}: in config.yaml; "
                f"write {words[0]} PATH#/pointer, not a URL")
    elif pointer[:1] not in ("", "/"):
        return f"'{pointer}' is not a JSON pointer; it begins with /, as in #/available/0/amount"
    return None


def reading_timeout(c, item, path):
    """Return a lever's or reading program's own `timeout:` in seconds (at the top level the
    report's), or None."""
    return c.duration(item["timeout"], path + ("timeout",)) if "timeout" in item else None


def parse_audits(c, doc, directory):
    """Return the audits: a command, which way is worse, and a tolerance."""
    audits = []
    for path, item, name, at in named_items(
            c, doc, "audits", AUDIT_KEYS, "an audit",
            ", such as - {name: refunds, run: ./refunds, worse: up, tolerance: 2}"):
        c.require(item, path, ("run", "worse"), f"audit '{name}'")
        audits.append({
            "name": name,
            "run": c.command(item["run"], at("run"), f"audit '{name}'", directory),
            "worse": c.choice(item["worse"], at("worse"), ("up", "down")),
            "better": c.choice(item.get("better", "up"), at("better"), ("up", "down")),
            "tolerance": c.number(item.get("tolerance", 0), at("tolerance")),
            "window": c.whole(item.get("window", 5), at("window"), least=2),
            "confirm": c.boolean(item.get("confirm", True), at("confirm")),
            "timeout": reading_timeout(c, item, path)})
    return audits


def parse_readings(c, doc, m, directory):
    """Return the readings: commands whose address fields a model may see."""
    readings = []
    for path, item, name, at in named_items(c, doc, "readings", READING_KEYS, "a reading",
                                            ", such as - {name: waiting, run: ./waiting, lines:"
                                            " address}"):
        c.require(item, path, ("run",), f"reading '{name}'")
        audit = item.get("audit")
        if audit is not None and not any(a["name"] == audit for a in m["audits"]):
            c.fail(at("audit"),
                   f"reading '{name}' names audit '{audit}', which the mandate does not have")
        readings.append({
            "name": name,
            "run": c.command(item["run"], at("run"), f"reading '{name}'", directory),
            "lines": c.choice(item.get("lines"), at("lines"), ("address",)),
            "audit": audit, "timeout": reading_timeout(c, item, path)})
    return readings


def parse_forbidden(c, doc, levers):
    """Return the forbidden lever names; none may also be permitted (open point 26)."""
    items = [] if doc.get("forbidden") is None else doc["forbidden"]
    if not isinstance(items, list):
        c.fail(("forbidden",), "forbidden must be a list of lever names, such as [rm]")
    names = []
    for i, name in enumerate(items):
        at = ("forbidden", i)
        name = c.text(name, at, "a forbidden lever")
        if name in levers:
            c.fail(at, f"lever '{name}' is both permitted and forbidden; keep it in one list")
        if name == "stop":
            c.fail(at, "stop is built in and always permitted (it pauses the venture); take it"
                       " out of forbidden")
        names.append(name)
    return names


def parse_controller(c, value, levers):
    """Return the controller: its kind from CONTROLLERS, deadband and hold."""
    path = ("controller",)
    if not isinstance(value, dict):
        c.fail(path,
               "controller must be a mapping with a kind: threshold, band, model or classifier")
    kind = c.choice(value.get("kind"), path + ("kind",), tuple(CONTROLLERS), "controller kind")
    c.mapping(value, path, CONTROLLERS[kind].keys, f"a {kind} controller")
    ctl = {"kind": kind,
           "deadband": c.number(value["deadband"], path + ("deadband",), positive=True)
           if "deadband" in value else None,
           "hold": c.whole(value.get("hold", 1), path + ("hold",))}
    CONTROLLERS[kind].parse(c, value, levers, path, ctl)
    return ctl


def parse_threshold(c, value, levers, path, ctl):
    sides = [k for k in ("above", "below") if k in value]
    if len(sides) != 1:
        c.fail(path, "a threshold takes exactly one of above: or below:")
    side = ctl["side"] = sides[0]
    ctl["bound"] = c.number(value[side], path + (side,))
    ctl["action"] = permitted_lever(c, value, path, "action", levers, "a threshold")


def parse_band(c, value, levers, path, ctl):
    c.require(value, path, ("low", "high", "below", "above"), "a band",
              "write {kind: band, low: 19, high: 24, below: heat, above: cool}")
    for key in ("low", "high"):
        ctl[key] = c.number(value[key], path + (key,))
    if ctl["low"] >= ctl["high"]:
        c.fail(path + ("high",), "a band's high must be above its low")
    for side in ("below", "above"):
        ctl[side] = permitted_lever(c, value, path, side, levers, "a band")
    width = ctl["high"] - ctl["low"]
    if ctl["deadband"] and ctl["deadband"] >= width:
        c.fail(path + ("deadband",), f"the deadband {format_number(ctl['deadband'])} "
                                     f"is not less than the band's width {format_number(width)}; "
                                     "make it smaller")
    for side, way, end in (("below", "up", "low"), ("above", "down", "high")):
        expects = levers[ctl[side]]["expects"]
        if expects and expects[0] != way:
            c.fail(("permitted", list(levers).index(ctl[side]), "expects"),
                   f"lever '{ctl[side]}' corrects the {end} side of the band, so it may only "
                   f"expect {way} ... within ...")


ControllerKind = collections.namedtuple("ControllerKind", "keys parse sides describe by_model")
ControllerKind.__doc__ = """A controller kind: its mandate keys, its parser, its sides
[(side name, way, bound, lever)] for the kernel, one line for a person, whether a model proposes."""
CONTROLLERS = {  # adding a controller kind is one entry here and its functions
    "threshold": ControllerKind(
        {"kind", "above", "below", "action", "deadband", "hold"}, parse_threshold,
        lambda ctl: [(ctl["side"], ctl["side"], ctl["bound"], ctl["action"])],
        lambda ctl: f"threshold {ctl['side']} {format_number(ctl['bound'])} runs {ctl['action']}"
                    + (f", deadband {format_number(ctl['deadband'])}" if ctl["deadband"] else "")
                    + (f", hold {ctl['hold']}" if ctl["hold"] > 1 else ""),
        False),
    "band": ControllerKind(
        {"kind", "low", "high", "below", "above", "deadband", "hold"}, parse_band,
        lambda ctl: [("below", "below", ctl["low"], ctl["below"]),
                     ("above", "above", ctl["high"], ctl["above"])],
        lambda ctl: f"band [{format_number(ctl['low'])}, {format_number(ctl['high'])}]: below runs"
                    f" {ctl['below']}, above runs {ctl['above']}",
        False),
    "model": ControllerKind(
        {"kind", "backend"},
        lambda c, value, levers, path, ctl: ctl.update(
            backend=c.text(value.get("backend"), path + ("backend",), required=False)),
        lambda ctl: [], lambda ctl: f"{ctl['kind']} (a backend proposes; the gate decides)", True)}
CONTROLLERS["classifier"] = CONTROLLERS["model"]    # the same kind to the gate: a model proposes


def decided_by_model(m):
    """Whether a model proposes for the mandate's controller (model, classifier)."""
    return CONTROLLERS[m["controller"]["kind"]].by_model


def permitted_lever(c, value, path, key, levers, what):
    if key not in value:
        c.fail(path, f"{what} names its lever with {key}:")
    path += (key,)
    name = c.text(value[key], path, "a lever")
    if name not in levers:
        c.fail(path, f"'{name}' is not a permitted lever; permit it under permitted: "
                     f"or name one of {', '.join(levers) or 'none'}")
    return name


def parse_guards(c, doc, m, directory):
    """Return the guards: a name, a source (run, adapter or drawdown) and a bound."""
    guards, lever_runs = [], {lever["run"] for lever in m["levers"].values() if lever["run"]}
    for path, item, name, at in named_items(c, doc, "guards", GUARD_KEYS, "a guard",
                                            ", such as - {name: spend, run: ./spend, above: 100}"):
        g = {
            "name": name, "run": None, "adapter": None, "drawdown": None,
            "then": c.choice(item.get("then", "pause"), at("then"), ("pause", "ask")),
            "confirm": c.boolean(item.get("confirm", m["confirm"]), at("confirm")),
            "unwind": None, "timeout": reading_timeout(c, item, path)}
        if "timeout" in item and "drawdown" in item:
            c.fail(at("timeout"), "a drawdown guard is read from the metric's report "
                                  "and runs nothing; remove timeout:")
        sources = [k for k in ("run", "adapter", "drawdown") if k in item]
        if len(sources) != 1:
            c.fail(path, f"guard '{name}' reads one source: run:, adapter: or drawdown:")
        if "run" in item:
            g["run"] = c.command(item["run"], at("run"), f"guard '{name}'", directory)
            if g["run"] in lever_runs | {"./report", "report"}:
                c.fail(at("run"), f"guard '{name}' reads a lever's or the metric's command; "
                                  "a guard reads a reading of its own")
        elif "adapter" in item:
            adapter = g["adapter"] = c.text(item["adapter"], at("adapter"))
            if adapter_problem(adapter):
                c.fail(at("adapter"), adapter_problem(adapter))
            if adapter == m["adapter"]:
                c.fail(at("adapter"), f"guard '{name}' reads the metric's adapter; "
                                      "a guard reads a reading of its own")
        else:
            g["drawdown"] = c.parsed(parse_percent, item["drawdown"], at("drawdown"))
            if item.get("of") != m["metric"]:
                c.fail(at("of"),
                       f"a drawdown guard says of: {m['metric']}, the venture's metric")
        if "of" in item and "drawdown" not in item:
            c.fail(at("of"), "of: belongs to a drawdown guard")
        bounds = [k for k in ("above", "below") if k in item]
        if not g["drawdown"]:
            if len(bounds) != 1:
                c.fail(path, f"guard '{name}' takes exactly one bound: above: or below:")
            g["side"], g["bound"] = bounds[0], c.number(item[bounds[0]], at(bounds[0]))
        elif bounds:
            c.fail(at(bounds[0]),
                   "a drawdown guard's bound is its percentage; remove above:/below:")
        else:   # trips when the fall from the peak passes P%
            g["side"], g["bound"] = "above", g["drawdown"]
        if "unwind" in item:
            g["unwind"] = parse_unwind(c, item["unwind"], at("unwind"), m["levers"])
        guards.append(g)
    return guards


def parse_unwind(c, value, path, levers):
    """Return a guard's unwind {action, payload}: a permitted lever and the payload it takes."""
    c.mapping(value, path, {"action", "payload"}, "an unwind")
    action = permitted_lever(c, value, path, "action", levers, "an unwind")
    payload, takes, at = value.get("payload"), levers[action]["takes"], path + ("payload",)
    if takes == "json" and not isinstance(payload, dict):
        c.fail(at, f"lever '{action}' takes json, so the unwind's payload is a mapping")
    if takes in ("text", "diff", "file") and not isinstance(payload, str):
        c.fail(at, f"lever '{action}' takes {takes}, so the unwind's payload is text")
    if takes is None and payload is not None:
        c.fail(at,
               f"lever '{action}' takes no content; remove the payload or add takes: to the lever")
    if levers[action]["run"] == "mail.send":
        try:
            write_mail(payload, "avsm")
        except ValueError as err:
            c.fail(at, f"lever '{action}' sends mail, and {err}")
    return {"action": action, "payload": payload}


def parse_percent(text):
    """Return the number in a percentage such as `15%`."""
    s = str(text).strip()
    if s.endswith("%"):
        try:
            value = float(s[:-1])
        except ValueError:
            value = float("nan")
        if 0 < value <= 100:
            return value
    raise ValueError(f"'{s}' is not a percentage; "
                     "write a number above 0 and at most 100 with %, such as 15%")


# ---- the config ----

CONFIG_KEYS = {"nightly", "default", "backends", "escalate", "ratchet", "forecast", "canary_asks",
               "checkpoint", "adapters", "research", "notify", "metrics", "page", "ledger"}
BACKEND_KEYS = {"anthropic": {"kind", "model", "key", "url", "effort", "version", "max_tokens"},
                "openai": {"kind", "url", "model", "key", "max_tokens", "api", "effort"},
                "command": {"kind", "run", "offbox"}}
# open point 44, as each provider lists them (openai: the official SDK's ReasoningEffort, 3.60)
EFFORTS = {"anthropic": ("low", "medium", "high", "xhigh", "max"),
           "openai": ("none", "minimal", "low", "medium", "high", "xhigh", "max")}
OPENAI_APIS = {"chat": "/chat/completions", "responses": "/responses"}  # the path its url ends in
ANTHROPIC_VERSION = "2026-10-21"   # the anthropic-version header unless a backend says version:
MAX_TOKENS = 16000  # room for effort: high to think and still answer, about what 120 s brings
FORECAST_DEFAULT = {"days": 30, "seeds": 16}
# Linux's limit on one environment string, less the name
CONFIG_ENV_MAX = 128 * 1024 - len("AVSM_CONFIG=") - 1
NOTIFY_TIMEOUT = 30  # seconds a notify command may take unless `notify: {timeout: ...}` says
NOTIFY_EXAMPLE = 'notify: "mail -s avsm you@example.com"'
METRICS_EVERY = 15                 # seconds between two writes of the metrics textfile, or every:
METRICS_EXAMPLE = "metrics: {textfile: /var/lib/prometheus/node-exporter/avsm.prom, every: 15s}"
PAGE_EVERY = 60                    # seconds between two writes of the page, or every:
PAGE_EXAMPLE = "page: {path: /var/www/html/avsm.html, every: 1m}"
PACKET_FORECAST = {"days": 7, "seeds": 8}  # a decision packet's, unless the config says


def parse_config(text, source="config.yaml"):
    """Return config.yaml as a dict with every key, defaults filled in; Fail(78) when it fails."""
    doc, c = checked_yaml(text, source)
    doc = {} if doc is None else doc
    if isinstance(doc, dict) and "port" in doc:
        c.fail(
            ("port",),
            "port: is gone: avsm opens no listener but its socket, and never will; reach this host "
            "over ssh instead (avsm --host HOST, avsm fleet; the README's Many hosts): remove"
            " port:")
    c.mapping(doc, (), CONFIG_KEYS, "the config")
    cfg = {"nightly": parse_nightly(c, doc.get("nightly", "03:00")), "backends": {},
           "default": None, "escalate": None,
           "ratchet": c.whole(doc.get("ratchet", 5), ("ratchet",), least=0),
           "forecast": None, "canary_asks": None, "adapters": {}}
    backends = {} if doc.get("backends") is None else doc["backends"]
    c.mapping(backends, ("backends",), set(backends) if isinstance(backends, dict) else ())
    for name, b in backends.items():
        path = ("backends", name)
        def at(key):
            return path + (key,)
        if not isinstance(b, dict) or b.get("kind") not in tuple(BACKEND_KEYS):
            c.fail(path, f"backend '{name}' needs kind: anthropic, openai or command")
        kind = b["kind"]
        c.mapping(b, path, BACKEND_KEYS[kind], f"a {kind} backend")
        needs = {"anthropic": ("model", "key"), "openai": ("url", "model"),
                 "command": ("run",)}[kind]
        c.require(b, path, needs, f"backend '{name}'",
                  f"a {kind} backend says {', '.join(needs)}")
        backend = {k: c.text(v, at(k)) for k, v in b.items() if k not in ("offbox", "max_tokens")}
        if "effort" in b:
            c.choice(b["effort"], at("effort"), EFFORTS[kind])
        if kind == "anthropic":
            backend.setdefault("version", ANTHROPIC_VERSION)
            if not re.fullmatch(r"\d{4}-\d\d-\d\d", backend["version"]):
                c.fail(at("version"),
                       f"version is the API's version date, as {ANTHROPIC_VERSION}, "
                       f"not {json.dumps(backend['version'])}")
            backend["max_tokens"] = c.whole(b.get("max_tokens", MAX_TOKENS), at("max_tokens"))
        elif kind == "openai":  # max_tokens is sent only when it says
            given = b.get("max_tokens")
            backend["max_tokens"] = None if given is None else c.whole(given, at("max_tokens"))
            api = backend["api"] = c.choice(b.get("api", "chat"), at("api"), tuple(OPENAI_APIS))
            other = next(a for a in OPENAI_APIS if a != api)
            if b["url"].rstrip("/").endswith(OPENAI_APIS[other]):
                c.fail(at("url"),
                       f"'{b['url']}' is the {other} endpoint, and this backend speaks api: {api}; "
                       f"end the url in {OPENAI_APIS[api]} or write api: {other}")
        if "url" in b:
            c.url(b["url"], at("url"))
        backend["offbox"] = kind != "command" or c.boolean(b.get("offbox", False), at("offbox"))
        cfg["backends"][name] = backend
    for key in ("default", "escalate"):
        if doc.get(key) is not None:
            name = c.text(doc[key], (key,))
            if name not in cfg["backends"]:
                c.fail((key,), f"{key}: '{name}' names no backend; name one under"
                               f" backends:{nearest(name, cfg['backends'])}")
            cfg[key] = name
    if doc.get("forecast") is not None:
        f = c.mapping(doc["forecast"], ("forecast",), {"days", "seeds"})
        cfg["forecast"] = {key: c.whole(f.get(key, n), ("forecast", key), least=int(key == "days"))
                           for key, n in FORECAST_DEFAULT.items()}
    if doc.get("canary_asks") is not None:
        ca = c.mapping(doc["canary_asks"], ("canary_asks",), {"every"})
        cfg["canary_asks"] = {"every": c.whole(ca.get("every"), ("canary_asks", "every"))}
    adapters = {} if doc.get("adapters") is None else doc["adapters"]
    c.mapping(adapters, ("adapters",), {"stripe", "github", "mail"})
    for name, a in adapters.items():
        keys, path = {"command", "from"} if name == "mail" else {"url"}, ("adapters", name)
        c.mapping(a, path, keys, f"the {name} adapter", sorted(keys))
        adapter = cfg["adapters"][name] = {k: c.text(a[k], path + (k,)) for k in sorted(keys)}
        if "url" in keys:
            c.url(adapter["url"], path + ("url",))
        if "from" in keys and re.search(r"[\r\n]", adapter["from"]):
            c.fail(path + ("from",), "from is one address on one line, as in ops@example.com")
    cfg["research"] = c.text(doc.get("research"), ("research",), required=False)
    cfg["notify"] = parse_notify(c, doc.get("notify"))
    cfg["metrics"] = parse_metrics(c, doc.get("metrics"))
    cfg["page"] = parse_written(
        c, doc.get("page"), "page", "path", PAGE_EXAMPLE, PAGE_EVERY,
        "a web server serves or a browser opens, as /var/www/html/avsm.html")
    cfg["ledger"] = parse_ledger(c, doc.get("ledger"))
    cfg["checkpoint"] = parse_checkpoint_config(c, doc.get("checkpoint"))
    size = len(json.dumps(cfg))
    if size > CONFIG_ENV_MAX:  # avsmd could not start its warden: the exec would fail (E2BIG)
        key = max(cfg, key=lambda k: len(json.dumps(cfg[k])))
        c.fail(
            (key,),
            f"the config is {size // 1024} KiB once read, most of it in {key}; avsmd hands it to"
            f" its warden in one environment variable, which holds at most {CONFIG_ENV_MAX // 1024}"
            f" KiB: shorten {key} (a long command goes in a script of its own)")
    return cfg


CHECKPOINT_NAMESPACE = "avsm-checkpoint"  # ssh-keygen -Y's, unless the config names another
CHECKPOINT_MAX = 64 * 1024      # bytes a kept checkpoint or its .sig may have (one is 300 or so)


def parse_checkpoint_config(c, value):
    """Return the checkpoints' settings, every key filled in.

    checkpoint ::= {key: PATH, namespace: NAME, every: DURATION, allowed_signers: PATH,
                    principal: NAME}   (each optional)
    principal is this home's signer in allowed_signers: a key of another principal is refused."""
    value = {} if value is None else value
    spec = {"key": None, "namespace": CHECKPOINT_NAMESPACE, "every": 86400, "allowed_signers": None,
            "principal": None}
    c.mapping(value, ("checkpoint",), set(spec))
    def at(key):
        return ("checkpoint", key)
    for key in ("key", "allowed_signers"):
        spec[key] = c.text(value.get(key), at(key), required=False)
        if spec[key] and not os.path.isabs(os.path.expanduser(spec[key])):
            c.fail(at(key),
                   f"{key} is a file's absolute path, as /home/ops/.ssh/avsm_checkpoint, not"
                   f" {spec[key]!r}")
    if "namespace" in value:
        spec["namespace"] = c.text(value["namespace"], at("namespace"))
        if not re.fullmatch(r"[A-Za-z0-9@._-]{1,64}", spec["namespace"]):
            c.fail(at("namespace"), "namespace is one word of letters, digits and @._-, as"
                                    " avsm-checkpoint@example.com")
    spec["principal"] = c.text(value.get("principal"), at("principal"), required=False)
    if spec["principal"] and not re.fullmatch(r"[A-Za-z0-9@._+][A-Za-z0-9@._+-]{0,127}",
                                              spec["principal"]):
        c.fail(at("principal"), "principal is one name of allowed_signers, of letters, digits and"
                                " @._+-, as ops@web1.example.com (its lines begin with it)")
    if "every" in value:
        spec["every"] = c.duration(value["every"], at("every"))
        if spec["every"] < 60:
            c.fail(at("every"), "every is at least 1m: a checkpoint a minute is plenty")
    return spec


def describe_checkpoint(spec):
    """Return the line avsmd -t says of checkpoints: when they are written, how they are signed."""
    every = format_duration(spec["every"])
    when = ("checkpoint: written to HOME/checkpoints at start, after each irreversible action "
            f"and every {every} the ledger moved (a start within {every} of the last writes "
            "none, unless the key changed or the last is unsigned)")
    if not spec["key"]:
        return when + "; unsigned: sign them with checkpoint: {key: /path/to/ssh/key}"
    who = (f", verified as {spec['principal']}" if spec["principal"] else
           "; no principal: doctor takes any key of allowed_signers (name this home's "
           "with principal:)")
    return when + f"; signed with {spec['key']} in namespace {spec['namespace']}" + who


def checkpoint_problem(spec):
    """Return why the checkpoint: settings cannot hold on this machine, or None."""
    for key in ("key", "allowed_signers"):
        path = spec[key] and os.path.expanduser(spec[key])
        if path and not os.path.isfile(path):
            return (f"checkpoint: {key} {path} is not there (or not a file): "
                    + ("make it with ssh-keygen -t ed25519 -f " + path if key == "key" else
                       f"write in it a line `PRINCIPAL namespaces=\"{spec['namespace']}\" KEY` "
                       "of each signing key")
                    + ", or name the file that is")
        if path and not os.access(path, os.R_OK):
            return (f"checkpoint: {key} {path} cannot be read by this user: chmod 600 {path}, "
                    "as its owner")
    return None


def parse_notify(c, value):
    """Return the notify command as {run, timeout}, or None when there is none.

    notify ::= COMMAND | {run: COMMAND, timeout: DURATION}"""
    path, run, timeout = ("notify",), value, NOTIFY_TIMEOUT
    if value is None:
        return None
    if isinstance(value, dict):
        c.mapping(value, path, {"run", "timeout"}, needs=("run",),
                  fix=f"write notify: {{run: COMMAND, timeout: 30s}}, or just {NOTIFY_EXAMPLE}")
        run, path = value["run"], path + ("run",)
        if "timeout" in value:
            timeout = c.duration(value["timeout"], ("notify", "timeout"))
    if not isinstance(run, str):
        c.fail(
            path, "notify must be a command avsm runs for each thing a person must see, as"
                  f" {NOTIFY_EXAMPLE} (or {{run: COMMAND, timeout: 30s}}), not {shown_value(run)}")
    if not run.strip():
        c.fail(path, f"notify is empty; name a command, as {NOTIFY_EXAMPLE}, or remove the key")
    if "\0" in run:
        c.fail(path, "notify holds a NUL character, which no command line can; remove it")
    return {"run": run.strip(), "timeout": timeout}


def parse_metrics(c, value):
    """metrics ::= {textfile: PATH, every: DURATION}      (PATH absolute, NAME.prom)"""
    spec = parse_written(c, value, "metrics", "textfile", METRICS_EXAMPLE, METRICS_EVERY,
                         "in the directory node_exporter's --collector.textfile.directory names, "
                         "as /var/lib/prometheus/node-exporter/avsm.prom")
    textfile = spec and spec["textfile"]
    if spec and (not textfile.endswith(".prom") or textfile.endswith("/.prom")):
        c.fail(("metrics", "textfile"),
               "node_exporter's textfile collector reads only files named NAME.prom; "
               f"name the textfile so, as {os.path.join(os.path.dirname(textfile), 'avsm.prom')}")
    return spec


LEDGER_EXAMPLE = "ledger: {rotate: 1d, keep: 90d}"
SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_ledger(c, value):
    """ledger ::= {rotate: DURATION|SIZE, keep: DURATION}: when avsmd closes ledger.db into
    HOME/ledgers (as avsm rotate does); how long a closed file stays once a checkpoint is past
    it."""
    if value is None:
        return None
    path = ("ledger", "rotate")
    c.mapping(value, path[:1], {"rotate", "keep"}, needs=("rotate",), fix=f"write {LEDGER_EXAMPLE}")
    rotate = str(value["rotate"]).strip()
    size = re.fullmatch(r"([0-9]+)([KMG])", rotate)
    spec = {"rotate": rotate, "size": size and int(size[1]) * SIZE_UNITS[size[2]], "every": None,
            "keep": value.get("keep") and c.duration(value["keep"], ("ledger", "keep"))}
    if size and spec["size"] < 64 << 10:    # an empty ledger.db with its indexes: about 20 KiB
        c.fail(path, f"rotate: {rotate} is smaller than an empty ledger grows to; rotate at 64K or"
                     " more, as 512M")
    if not size:
        try:
            spec["every"] = parse_duration(rotate)
        except ValueError as err:
            c.fail(path, "rotate is a duration (1d: a new file each day) or a size (512M, 2G: when"
                         f" ledger.db is that large): {err}")
    return spec


def describe_ledger(spec):
    if spec is None:
        return ("ledger: never rotated; ledger.db grows for as long as the home lives (set one in"
                f" config.yaml, as {LEDGER_EXAMPLE})")
    keep = f"each deleted {format_duration(spec['keep'])} after it was closed, once a checkpoint" \
        " is past it" if spec["keep"] else "kept (no keep:)"
    when = "once it is" if spec["size"] else "each"
    return (f"ledger: ledger.db is closed into HOME/ledgers {when} {spec['rotate']}; closed files"
            f" are {keep}")


def parse_written(c, value, key, name, example, every, where_to):
    """Return {NAME: PATH, every: SECONDS} of a file avsmd writes (metrics:, page:), or None."""
    path = (key,)
    if value is None:
        return None
    if not isinstance(value, dict):
        c.fail(path, f"{key} is a mapping, as {example}, not {shown_value(value)}")
    c.mapping(value, path, {name, "every"}, needs=(name,), fix=f"write {example}")
    where = path + (name,)
    text = c.text(value[name], where)
    if "\0" in text or not os.path.isabs(text):
        c.fail(where, f"{name} is a file's absolute path {where_to}, not {text!r}")
    if "every" in value:
        every = c.duration(value["every"], path + ("every",))
    return {name: os.path.normpath(text), "every": every}


def metrics_problem(spec):
    """Return why the file metrics: (or page:) names cannot be written, or None."""
    if spec is None:
        return None
    import shlex
    name = "textfile" if "textfile" in spec else "page"
    textfile = spec.get("textfile") or spec["path"]
    directory = os.path.dirname(textfile)
    quoted = shlex.quote(directory)     # the fix pastes as a command, spaces and quotes too
    if not os.path.isdir(directory):
        return (f"the {name}'s directory {directory} is not there; make it "
                f"(mkdir -p {quoted}) or name " + ("another" if name == "page" else
                                                   "the directory node_exporter's "
                                                   "--collector.textfile.directory reads"))
    if not os.access(directory, os.W_OK | os.X_OK):
        return (f"the {name}'s directory {directory} cannot be written by this user "
                f"(uid {os.getuid()}); give it write access (chgrp GROUP {quoted} && "
                f"chmod g+w {quoted}) or name another")
    if os.path.isdir(textfile):
        return (f"the {name} {textfile} is a directory; name a file in it, as "
                f"{textfile}/avsm.{'html' if name == 'page' else 'prom'}")
    return None


def written_problem(cfg):
    """Return `KEY: why` the file metrics: or page: names cannot be written, or None."""
    return next((f"{key}: {metrics_problem(cfg.get(key))}" for key in ("metrics", "page")
                 if metrics_problem(cfg.get(key))), None)


def describe_metrics(spec):
    """Return the line avsmd -t says of the metrics textfile."""
    if spec is None:
        return ("metrics: not set; no figures are written for Prometheus "
                f"(set one in config.yaml, as {METRICS_EXAMPLE})")
    return ("metrics: the figures of every venture and of the home are written to "
            f"{spec['textfile']} every {format_duration(spec['every'])}, in Prometheus's text "
            f"format, mode 0644, in whole (to {spec['textfile']}.PID.tmp beside it, then renamed), "
            "for node_exporter's textfile collector")


def describe_notify(notify):
    """Return the line avsmd -t says of the notify command: what runs it, or that nobody is told."""
    if notify is None:
        return (
            "notify: not set; a person learns of an ask, a pause or a stop only from avsm asks and"
            f" status (set one in config.yaml, as {NOTIFY_EXAMPLE})")
    return (
        f"notify: {notify['run']} runs for each new ask, guard pause, stuck or unrunnable venture,"
        f" unwritable ledger and stop of avsmd (time limit {format_duration(notify['timeout'])}, no"
        " key in its environment)")


def parse_nightly(c, value):
    """Return the nightly time `HH:MM` (the machine's local time), or 'never'."""
    text = str(value)
    if text == "never" or re.fullmatch(r"\d\d:\d\d", text) and int(text[:2]) < 24 \
            and int(text[3:]) < 60:
        return text
    c.fail(("nightly",),
           f"nightly: {shown_value(value)} is not a time; write \"HH:MM\" in local time, such as"
           " \"03:00\", or never")


def format_config(cfg):
    """Return the config in force as YAML, every key shown, the forecast default as a comment."""
    def flow(d):
        return ("{" + ", ".join(f"{k}: {yaml_scalar(v)}" for k, v in d.items()) + "}" if d
                else "null")
    lines = [f"nightly: {yaml_scalar(cfg['nightly'])}", f"default: {yaml_scalar(cfg['default'])}"]
    backends = [
        f"  {name}: {flow({k: v for k, v in b.items() if k != 'offbox' or b['kind'] == 'command'})}"
        for name, b in cfg["backends"].items()]
    lines += ["backends:"] + backends if backends else ["backends: {}"]
    lines += [f"escalate: {yaml_scalar(cfg['escalate'])}", f"ratchet: {cfg['ratchet']}"]
    if cfg["forecast"] is None:
        lines.append(
            f"# forecast: {flow(FORECAST_DEFAULT)}   (the default: 7 days by 8 seeds in a decision"
            " packet)")
    else:
        lines.append(f"forecast: {flow(cfg['forecast'])}")
    lines.append(f"canary_asks: {flow(cfg['canary_asks'])}")
    adapters = [f"  {name}: {flow(a)}" for name, a in cfg["adapters"].items()]
    lines += ["adapters:"] + adapters if adapters else ["adapters: {}"]
    lines.append(f"research: {yaml_scalar(cfg['research'])}")
    for key in ("notify", "metrics", "page", "checkpoint"):
        spec = cfg.get(key)
        lines.append(f"{key}: " + flow(spec and {k: format_duration(v) if k in ("every", "timeout")
                                                 else v for k, v in spec.items()}))
    spec = cfg.get("ledger")
    lines.append("ledger: " + flow(spec and {k: format_duration(spec[k]) if k == "keep" else spec[k]
                                             for k in ("rotate", "keep") if spec.get(k)}))
    return "\n".join(lines) + "\n"


def yaml_scalar(value):
    """Return a scalar as YAML that reads back to the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return format_number(value)
    return json.dumps(value, ensure_ascii=False)


# ---- the requests a client may send on sock ----
# One JSON object a line: {"v": 1, "cmd": CMD, "args": {...}} (open point 2). Only these pass the
# socket: avsmd's own word to the warden (stop) is not here, so no client can send it.
# Argument types: "name" and "path" are command-line text (a path absolute); "seq" a record number;
# "text" UTF-8; "json" any JSON value; "flag" true or false; a trailing "?": optional, null allowed.
REQUESTS = {
    "ping": {}, "health": {}, "asks": {"json": "flag?"}, "page": {},   # page: its facts, a line
    "status": {"venture": "name?", "verbose": "flag?", "ascii": "flag?", "json": "flag?"},
    "add": {"dir": "path"},
    "decide": {"venture": "name"}, "pause": {"venture": "name"}, "resume": {"venture": "name"},
    "propose": {"venture": "name", "lever": "name", "payload": "text?"},
    "approve": {"ask": "seq", "payload": "json?"},
    "deny": {"ask": "seq"}, "ask": {"ask": "seq"}, "checkpoint": {"json": "flag?"}, "rotate": {},
    "records": {"after": "seq", "limit": "seq?", "checkpoint": "flag?"},   # a witness's page
}
REQUEST_KEYS = ("v", "cmd", "args")
READ_REQUESTS = ("ping", "health", "status", "asks", "ask", "records", "page")  # a read-only key's
REQUEST_MAX = 1024 * 1024  # bytes of one request line avsmd reads; a longer one is refused (64)

# The bridge (avsm bridge, the forced command of an ssh key) relays the requests above, and runs
# these client verbs for `avsm --host`, exactly as there.
BRIDGE_VERBS = {"status": "read", "summary": "read", "tail": "read", "asks": "read", "why": "read",
                "chart": "read", "checkpoint": "write", "doctor": "read", "add": "write",
                "approve": "write", "deny": "write", "propose": "write", "decide": "write",
                "pause": "write", "resume": "write"}
BRIDGE_PATH_OPTIONS = {"propose": ("--payload",), "doctor": ("--checkpoint",)}
BRIDGE_KEYS = {"verb": "name", "argv": "list", "home": "path?", "stdin": "text?", "as": "text?",
               "tty": "flag?", "utf8": "flag?"}
JSON_DEPTH = 64  # nesting a payload may have: an edited payload is a page, not a tower


def check_request(request):
    """Return (cmd, args) of a request a client may send, or raise Fail: 64 for one avsm does not
    know, 65 for a wrong argument."""
    refuse(not isinstance(request, dict)
           and f"a request is one JSON object a line, not {json_kind(request)}", EX_USAGE)
    refuse((request.get("v", 1) != 1 or isinstance(request.get("v"), bool))
           and "this avsmd speaks version 1 of the socket's requests; use its own avsm", EX_USAGE)
    extra = sorted(set(request) - set(REQUEST_KEYS))
    refuse(extra and f"a request holds only {', '.join(REQUEST_KEYS)}, "
                     f"not {shown_text(extra[0])[:80]}", EX_USAGE)
    cmd = request.get("cmd")
    refuse(cmd not in tuple(REQUESTS)
           and f"avsmd does not know the command {shown_text(json.dumps(cmd))[:80]}; "
               "avsm --help lists them", EX_USAGE)
    args = request.get("args", {})
    refuse(not isinstance(args, dict) and f"{cmd}: args is a mapping, not {json_kind(args)}")
    return cmd, checked_arguments(cmd, args, REQUESTS[cmd])


def checked_arguments(cmd, args, types):
    """Return the arguments `args` of `cmd` as `types` has them, or Fail(65) saying which not."""
    extra = sorted(set(args) - set(types))
    refuse(extra and f"{cmd} takes {', '.join(types) or 'nothing'}, "
                     f"not {shown_text(extra[0])[:80]}")
    checked = {}
    for key, kind in types.items():
        optional, kind = kind.endswith("?"), kind.rstrip("?")
        if key not in args:
            refuse(not optional and f"{cmd} needs {key}")
            continue
        value = args[key]
        problem = None if optional and value is None else argument_problem(kind, value)
        refuse(problem and f"{cmd}: {key} {problem}")
        checked[key] = value
    return checked


def argument_problem(kind, value):
    """Return why `value` is not an argument of type `kind` (see REQUESTS), or None."""
    if kind == "seq":
        if not isinstance(value, int) or isinstance(value, bool):
            return f"is a record number, not {json_kind(value)}"
        return None if 0 <= value <= SEQ_MAX else "is past any record number"
    if kind == "json":
        return json_problem(value, JSON_DEPTH)
    if kind == "flag":
        return None if isinstance(value, bool) else f"is true or false, not {json_kind(value)}"
    if kind == "list":
        if not isinstance(value, list) or len(value) > 64:
            return f"is a list of at most 64 words, not {json_kind(value)}"
        problems = (argument_problem("name", v) for v in value)
        return next((f"word {i + 1} {p}" for i, p in enumerate(problems) if p), None)
    if not isinstance(value, str):
        return f"is text, not {json_kind(value)}"
    if kind == "text":
        return None if utf8_text(value) else "is not UTF-8 text"
    if "\0" in value:
        return "holds a NUL, which no command line can"
    try:
        os.fsencode(value)
    except UnicodeError:
        return "holds a character no file name can (a lone surrogate)"
    if kind == "path" and not os.path.isabs(value):
        return "is a directory's absolute path (avsm add resolves it)"
    return None


def json_problem(value, depth):
    """Return why a JSON value cannot be a payload, or None."""
    if depth < 0:
        return f"is nested deeper than {JSON_DEPTH} levels"
    if isinstance(value, float) and not math.isfinite(value):
        return "holds a number that is not finite"
    if isinstance(value, str):
        return None if utf8_text(value) else "holds text that is not UTF-8"
    if isinstance(value, dict):
        value = [x for pair in value.items() for x in pair]
    if isinstance(value, list):
        return next(filter(None, (json_problem(v, depth - 1) for v in value)), None)
    return None


def utf8_text(text):
    """Whether `text` can be written as UTF-8 (it holds no lone surrogate)."""
    return not re.search("[\ud800-\udfff]", text)


def json_kind(value):
    """Return a JSON value's type as a person names it."""
    for kind, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "text"),
                       (list, "a list"), (dict, "a mapping")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def check_not_adopted_elsewhere(name, directory, adopted_from, paused):
    """Refuse (65) adopting `directory` as `name` while a running `name` comes from elsewhere."""
    refuse(adopted_from != directory and not paused
           and f"venture '{name}' is already adopted from {adopted_from}; "
               f"pause it first (avsm pause {name}) or rename this directory")


# =============================================================================
# 5. The ledger
# Records are dicts; stored as canonical JSON in a hash chain. One class appends
# (the only writer), a read-only opener serves readers, a verifier re-walks it.
# =============================================================================

LEDGER_TABLE = """CREATE TABLE IF NOT EXISTS records(seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, \
prev TEXT NOT NULL,
                                   hash TEXT NOT NULL, weight INTEGER NOT NULL DEFAULT 1, record \
TEXT NOT NULL)"""
LEDGER_TRIGGERS = (
    *(f"""CREATE TRIGGER IF NOT EXISTS records_no_{op} BEFORE {op.upper()} ON records
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: no record is ever {op}d'); END"""
      for op in ("update", "delete")),
    f"""CREATE TRIGGER IF NOT EXISTS records_chain BEFORE INSERT ON records
WHEN NEW.seq IS NOT COALESCE((SELECT max(seq) FROM records), 0) + 1
  OR NEW.prev IS NOT COALESCE((SELECT hash FROM records ORDER BY seq DESC LIMIT 1), '{ZERO_HASH}')
  OR NEW.weight IS NOT 1
BEGIN SELECT RAISE(ABORT, 'only the next record, chained to the last, may be appended'); END""")
# Indexes find a window by time, a venture or a rare kind without reading the whole history
# (issue 33); the writer makes them as it opens a ledger. A record that does not parse indexes as
# null: json_extract would refuse it, and the ledger would not open to say which it is.
RECORD_KIND_SQL, RECORD_VENTURE_SQL = (
    f"(CASE WHEN json_valid(record) THEN json_extract(record, '$.{field}') END)"
    for field in ("kind", "venture"))
LEDGER_INDEXES = tuple(f"CREATE INDEX IF NOT EXISTS records_{name} ON records({column})"
                       for name, column in (("at", "at"), ("kind", RECORD_KIND_SQL),
                                            ("venture", RECORD_VENTURE_SQL)))
LEDGER_SCHEMA = ";\n".join((LEDGER_TABLE,) + LEDGER_TRIGGERS + LEDGER_INDEXES)
RECORD_FIELDS = ("kind", "claim", "venture", "summary")
RECORD_COLUMNS = "(seq, at, prev, hash, weight, record) VALUES (?, ?, ?, ?, ?, ?)"


class LockLost(Exception):
    """The home's lock is another avsmd's now: nothing more may be appended."""

    def __str__(self):
        return "the lock of this home is another avsmd's; appending nothing more"


class LedgerDown(Exception):
    """The ledger cannot be written (disk full, read-only): what would write must not run."""


# what already happened is written once the ledger takes writes again
BACKLOG_KINDS = ("outcome", "exit")
# Kinds (before any ".") that join the warden's group commit: readings and what follows from them,
# and what already happened. Any other record commits at once (an action before its lever).
GROUPED_KINDS = ("report", "guard", "audit", "reading", "prediction", "calibration", "world",
                 "outcome", "exit", "start")


# The ledger's vocabulary (DESIGN's table): each kind of record, the claims it may carry (the first
# unless the record says), the fields it always has beside kind, claim, venture and summary, and
# those it may have. A kind ending in "." is a family (guard.NAME). "self." kinds are the daemon's
# own life (venture self, measured).
RECORD_KINDS = {
    kind: (tuple(claims.split()), set(required.split()), set(optional.split()))
    for kind, claims, required, optional in (
        ("mandate", "declared", "directory sha256 text", "approval_of"),
        ("report", "measured", "metric value status plausible note", ""),
        ("guard.", "measured", "value status plausible", "past bound side note"),
        ("audit.", "measured", "value status plausible note", ""),
        ("reading.", "inferred measured", "value status plausible", "note fields"),
        ("proposal", "inferred declared", "by choice",
         "backend reason lever payload ranking escalation call"),
        ("unusable", "measured", "backend by why", "declined call"),
        ("look", "inferred", "backend by look answer", "call escalation"),
        ("fact", "inferred", "action fact source", ""),
        ("forecast", "inferred", "days seeds", "why lever note median p10 p90 world"),
        ("ask", "measured inferred", "about question",
         "action audit by canary clears_at episode forecast guard lever "
         "mandate payload proposal ranking reading reason reports side"),
        ("approval", "declared", "ask", "about edited lever payload"),
        ("denial", "declared", "ask", "lever"),
        ("resolved", "measured", "ask", "audit"),
        ("canary", "measured", "ask passed", ""),
        ("check", "measured", "lever ok status note", ""),
        ("begun", "measured", "lever what", ""),    # a check or a ratchet's forecast started
        ("action", "measured", "lever proof by",
         "basis approval check side guard payload proposal"),
        ("outcome", "measured", "lever action ok status duration note", "ended_by"),
        ("refusal", "measured", "lever why",
         "ask by check clears_at guard proposal reports side stuck"),
        ("effect", "measured", "lever action verdict why", ""),
        ("pause", "measured declared", "", "guard episode"),
        ("resume", "declared measured", "", ""),
        ("start", "measured", "", "pid command"),
        ("exit", "measured", "status", "pid uptime restart_in ended_by"),
        ("escalation", "measured", "from to why", ""),
        ("answer", "measured", "escalation cited", "note"),
        ("prediction", "inferred", "report median p10 p90",
         "value members source lever guards state"),
        ("calibration.", "measured", "prediction report crps skill coverage",
         "persistence brier rolling_skill rolling_coverage rolling"),
        ("world", "measured", "ok note", "report"),
        ("self.start", "measured", "pid", ""),
        ("self.stop", "measured", "pid", ""),
        ("self.ledger", "measured", "", "deleted"),     # deleted: a closed file, by keep:
        ("self.restart", "measured", "process restart_in", ""),
        ("self.sweep", "measured", "groups", ""),
        ("self.cut", "measured", "before backup", ""),
        # the notify command failed (once a stretch), or works again
        ("self.notify", "measured", "ok failed", "status note notice"),
        ("self.metrics", "measured", "ok failed textfile", "note"),  # its textfile failed, or works
        # the fold to seq, kept in a file; file and hash: the first record after a rotation
        ("self.snapshot", "measured", "seq sha256 code", "file hash"),
    )
}


def record_shape(kind, venture):
    """Return (claims, required, optional) of a kind of record as RECORD_KINDS has them, or None."""
    if not isinstance(kind, str):
        return None
    return (RECORD_KINDS.get("self." + kind if venture == "self" else kind)
            or RECORD_KINDS.get(kind.partition(".")[0] + "."))


def new_record(kind, venture, claim=None, **fields):
    """Return a record of `kind` for `venture`, the one way avsm builds one, checked against
    RECORD_KINDS; one it refuses is avsm's mistake."""
    shape = record_shape(kind, venture)
    if shape is None:
        raise ValueError(f"{kind!r} is not a kind of record")
    claims, required, optional = shape
    claim = claim or claims[0]
    if claim not in claims or required - fields.keys() \
            or fields.keys() - required - optional - {"summary"}:
        raise ValueError(
            f"a {kind} record is {' or '.join(claims)} and has"
            f" {', '.join(sorted(required)) or 'no field'} (and may have"
            f" {', '.join(sorted(optional)) or 'nothing more'}), not {claim} with {sorted(fields)}")
    return dict(kind=kind, claim=claim, venture=venture, **fields)


def canonical(record):
    """Return a record's stored text: compact JSON with keys sorted."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def chain_hash(prev, seq, at, text):
    """Return sha256(prev \\n seq \\n at \\n record) in lowercase hex: the link of the chain."""
    import hashlib
    return hashlib.sha256(f"{prev}\n{seq}\n{at}\n{text}".encode()).hexdigest()


def read_record(text, seq):
    """Return the record stored as `text`, or raise json.JSONDecodeError when it does not read."""
    record = load_record(text, seq)
    why = object_problem(record)
    if why:
        raise json.JSONDecodeError(f"record #{seq} does not read: {why}", text, 0)
    return record


def stored_record(text):
    """Return (the record stored as `text`, why it does not read (open point 51) or None)."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError, TypeError):
        return None, "its JSON does not parse"
    if not isinstance(record, dict):
        return record, "it is not a JSON object"
    return record, object_problem(record)


def object_problem(record):
    """Return why a stored record, parsed to an object, does not read (open point 51), or None."""
    missing = [k for k in ("kind", "claim", "venture") if k not in record]
    if missing:
        return f"it has no {', '.join(missing)}"
    if record["claim"] not in CLAIMS:
        return f"its claim '{record['claim']}' is not measured, declared or inferred"
    return fold_problem(record)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_seq(value):
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def is_name(value):
    return value is None or isinstance(value, str)


# field -> (test, what it must be) of the fields the fold reads (any other: text or null)
FOLD_TESTS = {
    **{name: (is_name, f"a {name}'s name") for name in ("lever", "guard", "side")},
    "proof": (lambda v: v is None or isinstance(v, dict), "an object"),
    **dict.fromkeys(("ask", "action", "report", "escalation"), (is_seq, "a record number")),
    **dict.fromkeys(("crps", "persistence"), (is_number, "a number"))}
# kind -> the fields the fold reads, in the order they are checked; "!": never null
FOLD_FIELDS = {
    "mandate": "directory text! sha256", "action": "lever! guard side proof",
    "outcome": "lever action", "refusal": "side", "ask": "about lever guard side",
    "proposal": "lever", "check": "lever", "approval": "lever ask", "denial": "lever ask",
    "resolved": "lever ask", "effect": "lever action", "pause": "guard", "prediction": "report",
    "answer": "escalation",
    "report": "status", "guard.": "status", "audit.": "status", "calibration.": "crps persistence"}


def fold_problem(record):
    """Return why a record's fields are not what the fold reads them as, or None. Such a record does
    not read, so no reader trips over it."""
    kind, venture = record["kind"], record["venture"]
    if not isinstance(kind, str) or not isinstance(venture, str):
        return "its kind or venture is not text"
    fields = FOLD_FIELDS.get(kind) or FOLD_FIELDS.get(kind[:kind.find(".") + 1]) or ""
    for key in fields.split():
        field = key.rstrip("!")
        test, what = FOLD_TESTS.get(field, (is_name, "text"))
        value = record.get(field)       # "!": there, and not null
        if field in record and not test(value) or field != key and value is None:
            shown = shown_value(value, 40) if field in record else "missing"
            return f"its {field} is {shown}, not {what}"
    if kind == "action" and isinstance(record.get("proof"), dict):
        premises = record["proof"].get("premises", [])
        if not isinstance(premises, list) or not all(is_seq(p) and p is not None for p in premises):
            return (f"its proof's premises are {shown_value(premises, 40)}, not a list of record"
                    " numbers")
    if (kind == "report" or kind.startswith("audit.")) \
            and record.get("status") in ("trusted", "unconfirmed") \
            and not is_number(record.get("value")):
        return (f"it is {record['status']} and its value is {shown_value(record.get('value'), 40)},"
                " not a number")
    return None


class Ledger:
    """The append-only, hash-chained ledger: the one writer's connection to ledger.db."""

    def __init__(self, path, still_ours=lambda: True):
        self.path, self.still_ours = path, still_ours
        self.held, self.last, self.lost = None, None, []  # held: the open transaction's records
        if os.path.exists(path + ".new"):   # a rotation was cut short: end it, or undo it
            if os.path.exists(path):
                os.remove(path + ".new")
            else:
                os.rename(path + ".new", path)
        self.open()

    def open(self):
        import sqlite3
        path = self.path
        if not os.path.exists(path):    # made 0600: sqlite would make it 0644, its journal alike
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        self.db = sqlite3.connect(path, isolation_level=None, timeout=10)
        self.inode = os.stat(path).st_ino
        if self.db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
            # a ledger from an earlier avsmd; the switch does not wait on the busy timeout
            deadline = time.monotonic() + 10
            while True:
                try:
                    self.db.execute("PRAGMA journal_mode=DELETE")
                    break
                except sqlite3.OperationalError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(";\n".join((LEDGER_TABLE,) + LEDGER_TRIGGERS))
        try:
            self.db.executescript(";\n".join(LEDGER_INDEXES))
        except sqlite3.OperationalError:
            pass    # a ledger that cannot take them now (read-only, full) is read more slowly

    def append(self, record, at):
        """Append `record` at unix time `at` as the next link of the chain; return its seq."""
        return self.append_many([record], at)[0]

    def append_many(self, records, at, hold=False):
        """Append `records` at unix time `at` in one transaction; return their seqs.

        Group commit: with `hold`, the transaction stays open for the next records until commit()
        or an append without `hold`: a burst costs one sync to disk."""
        for record in records:
            if set(RECORD_FIELDS) - set(record) or record["claim"] not in CLAIMS:
                raise ValueError(f"a record needs kind, claim, venture and summary: {record}")
        texts, at = [canonical(record) for record in records], int(at)
        db, seqs = self.db, []
        began = self.held is None
        try:
            if began:
                db = self.begin()
                if not self.still_ours():
                    raise LockLost()
                self.last, self.held = ledger_head(db) or (0, ZERO_HASH), []
            seq, prev = self.last
            for text in texts:
                seq += 1
                link = chain_hash(prev, seq, at, text)
                db.execute(f"INSERT INTO records{RECORD_COLUMNS}", (seq, at, prev, link, 1, text))
                seqs.append(seq)
                prev = link
            self.last = (seq, prev)
            if hold:
                self.held += [(s, at, r) for s, r in zip(seqs, records)]
            else:
                self.commit(check=not began)  # just checked, when this append began it
        except BaseException:
            self.rollback()
            raise
        return seqs

    def begin(self):
        """Begin a write; return the connection, on the new ledger.db once another process rotated
        this one's (under its lock: none can append to a closed file)."""
        self.db.execute("BEGIN IMMEDIATE")
        if os.stat(self.path).st_ino != self.inode:
            self.db.execute("ROLLBACK")
            self.close()
            self.open()
            self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def rotate(self, first_record, at):
        """Close this file into HOME/ledgers as NAME, read-only, and go on in a new ledger.db whose
        first record, first_record(NAME, head), chains to the last; return its seq."""
        import sqlite3
        self.commit()
        db, new, at = self.begin(), self.path + ".new", int(at)
        try:
            seq, prev = ledger_head(db)
            name = f"{db.execute('SELECT min(seq) FROM records').fetchone()[0]:012d}-{seq:012d}.db"
            closed = os.path.join(os.path.dirname(self.path), "ledgers", name)
            text = canonical(first_record(name, (seq, prev)))
            link = chain_hash(prev, seq + 1, at, text)
            os.close(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600))
            with contextlib.closing(sqlite3.connect(new, isolation_level=None)) as fresh:
                fresh.execute("PRAGMA synchronous=FULL")
                fresh.execute(LEDGER_TABLE)
                # before the triggers, which would admit only #1 in an empty file
                fresh.execute(f"INSERT INTO records{RECORD_COLUMNS}",
                              (seq + 1, at, prev, link, 1, text))
                fresh.executescript(LEDGER_SCHEMA)
            os.makedirs(os.path.dirname(closed), mode=0o700, exist_ok=True)
            os.chmod(self.path, 0o400)
            os.rename(self.path, closed)
            os.rename(new, self.path)
        finally:
            db.execute("ROLLBACK")      # nothing was written to the closed file: its lock ends
        self.close()
        self.open()
        self.last = (seq + 1, link)
        return seq + 1

    def commit(self, check=True):
        """Commit the records held open (group commit); return how many."""
        if self.held is None:
            return 0
        try:
            if check and not self.still_ours():
                raise LockLost()
            self.db.execute("COMMIT")
        except BaseException:
            self.rollback()
            raise
        count, self.held = len(self.held), None
        return count

    def rollback(self):
        """Roll back the open transaction, keeping its held records in `lost` for the caller."""
        if self.held is not None:
            self.lost, self.held = self.held, None
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def close(self):
        self.db.close()


def sqlite3_errors():
    """sqlite3.Error, imported only when a ledger is opened (the client's start stays light)."""
    import sqlite3
    return sqlite3.Error


ROLLBACK_WAIT = 3.0


def open_ledger_ro(path):
    """Return a read-only connection to the ledger at `path`.

    A writer killed in a transaction leaves a hot journal a read-only connection cannot roll back
    (SQLITE_READONLY_ROLLBACK): the next warden does, so this waits ROLLBACK_WAIT seconds for
    it."""
    import sqlite3
    quoted = path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    db = sqlite3.connect(f"file:{quoted}?mode=ro", uri=True, isolation_level=None, timeout=10)
    db.execute("PRAGMA query_only=1")
    deadline = time.monotonic() + ROLLBACK_WAIT
    while True:
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return db
        except sqlite3.OperationalError as err:
            if getattr(err, "sqlite_errorname", None) != "SQLITE_READONLY_ROLLBACK":
                return db
        if time.monotonic() > deadline:
            db.close()
            raise Fail(EX_DATAERR,
                       f"{path} holds a transaction its writer was killed in (its journal is beside"
                       " it), which only a writer can roll back; avsmd's warden does as it opens"
                       " the ledger: start avsmd, or if it runs, try again in a moment")
        time.sleep(0.1)


# ---- rotation: the closed files of HOME/ledgers, read with ledger.db as one ----


def closed_files(home):
    """Return [(first seq, last seq, path)] of the closed ledger files in HOME/ledgers, in order."""
    where = os.path.join(home, "ledgers")
    names = os.listdir(where) if os.path.isdir(where) else ()
    found = (re.fullmatch(r"([0-9]{12})-([0-9]{12})\.db", n) for n in names)
    return sorted((int(m[1]), int(m[2]), os.path.join(where, m[0])) for m in found if m)


def say_moved(first, last, home):
    sys.stderr.write(f"avsm: records #{first} to #{last} are in a closed ledger file that is not in"
                     f" {home}/ledgers: they are left out; put the file back there to read them\n")


def ledger_parts(db, since=0, upto=None, gap=say_moved):
    """Yield a connection to each ledger file with records after `since` (to `upto`), in order: the
    closed files of HOME/ledgers, then `db`; seqs of a file not there go to gap()."""
    first = db.execute("SELECT min(seq) FROM records").fetchone()[0]
    if first is None or since + 1 >= first:
        yield db
        return
    home = os.path.dirname(db.execute("PRAGMA database_list").fetchone()[2])
    want, end = since + 1, first - 1 if upto is None else min(upto, first - 1)
    for lo, hi, path in closed_files(home):
        if lo > end:
            break
        if hi >= want:
            if lo > want:
                gap(want, lo - 1, home)
            try:
                part = open_ledger_ro(path)
                part.execute("SELECT min(seq) FROM records").fetchone()
            except sqlite3_errors() as err:
                raise Fail(EX_DATAERR, f"{path}, a closed ledger file, cannot be read: {err}; put"
                                       " back the file avsm rotate closed, or move it out of that"
                                       " directory to read the rest") from None
            with contextlib.closing(part):
                yield part
            want = hi + 1
    if want <= end:
        gap(want, end, home)
    if upto is None or first <= upto:
        yield db


def read_records(db, since=0, upto=None, venture=None, checked=False):
    """Yield (seq, at, record dict) after `since` (and up to `upto`), in order; `checked`: each
    must read (read_record), else json.JSONDecodeError."""
    sql = "SELECT seq, at, record FROM records WHERE seq > ? AND seq <= ? ORDER BY seq"
    for seq, at, text in ledger_rows(
            db, sql, (since, SEQ_MAX if upto is None else upto), since, upto):
        record = (read_record if checked else load_record)(text, seq)
        if venture is None or record.get("venture") == venture:
            yield seq, at, record


def ledger_rows(db, sql, args=(), since=0, upto=None):
    """Yield the rows of `sql` (ordered by seq) from each ledger file with records after `since`."""
    for part in ledger_parts(db, since, upto):
        yield from part.execute(sql, args)


def first_seq_at(db, at, top):
    """Return the seq of the first record written at or after unix time `at`, or top + 1."""
    # min(seq + 0): SQLite answers min(seq) by walking the rowids from the first, past older records
    for part in ledger_parts(db):
        seq = part.execute("SELECT min(seq + 0) FROM records WHERE at >= ?", (at,)).fetchone()[0]
        if seq:
            return seq
    return top + 1


def load_record(text, seq):
    """Return the record stored as `text`, or raise json.JSONDecodeError when it is no JSON
    object (nested past Python's depth, past its digits, bytes not UTF-8: none is)."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as err:
        raise json.JSONDecodeError(
            f"record #{seq} does not read: {str(err)[:120]}", "", 0) from None
    if not isinstance(record, dict):
        raise json.JSONDecodeError(
            f"record #{seq} is {shown_value(record, 40)}, not a JSON object", text, 0)
    return record


def record_at(db, seq):
    """Return (at, record dict) of record #seq, or None when the ledger has none."""
    row = row_at(db, "at, record", seq)
    return row and (row[0], load_record(row[1], seq))


def row_at(db, columns, seq):
    """Return the row of `columns` of record #seq in whichever ledger file holds it, or None."""
    sql = f"SELECT {columns} FROM records WHERE seq = ?"
    return next(ledger_rows(db, sql, (seq,), seq - 1, seq), None)


def last_seq(db):
    return db.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0]


def ledger_head(db):
    """Return (seq, hash) of the last record, or None for an empty ledger."""
    return db.execute("SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1").fetchone()


def recent_records(db, venture, count):
    """Return the last `count` (seq, at, record dict) of `venture`, oldest first."""
    rows = db.execute("SELECT seq, at, record FROM records WHERE json_extract(record, '$.venture')"
                      " = ? ORDER BY seq DESC LIMIT ?", (venture, count)).fetchall()
    return [(seq, at, load_record(text, seq)) for seq, at, text in reversed(rows)]


# SQLite's page cache for a scan, and the warden's always: the default 2 MiB buys a scan, an
# append or a look-up by seq nothing, and would stay in peak memory (issue 15)
SCAN_CACHE_KIB = 128


def small_cache(db):
    """Shrink `db`'s page cache for a scan; return the cache_size to restore after it."""
    was = db.execute("PRAGMA cache_size").fetchone()[0]
    db.execute(f"PRAGMA cache_size=-{SCAN_CACHE_KIB}")
    return was


def scan_records(db, since=0, upto=None):
    """Yield what read_records does, with a small page cache."""
    was = small_cache(db)
    try:
        yield from read_records(db, since, upto)
    finally:
        db.execute(f"PRAGMA cache_size={was}")


SCAN_BATCH = 2000


def batched_rows(db, columns, since, gap):
    """Yield the rows of `columns` (seq first) of the records after `since`, SCAN_BATCH at a time,
    each batch its own read transaction: a commit waits for every reader's lock, and one read of a
    million records would hold the warden's commits for a minute."""
    for part in ledger_parts(db, since, gap=gap):
        while True:
            rows = part.execute(f"SELECT {columns} FROM records WHERE seq > ? ORDER BY seq LIMIT ?",
                                (since, SCAN_BATCH)).fetchall()
            yield from rows
            if len(rows) < SCAN_BATCH:
                break
            since = rows[-1][0]


def ledger_problem(db, after=None):
    """Return (seq, why) of the first record after `after` that does not read or chain (point
    51)."""
    return scan_ledger(db, recheck=False, after=after).broken


LedgerScan = collections.namedtuple("LedgerScan",
                                    "count head broken problems adopted hashes folds gaps")
LedgerScan.__doc__ = """What one read of the ledger found: records checked, the head (seq, hash),
the first broken record (seq, why) or None, the proof problems [(action seq, why)], the adopted
ventures {name: [name, directory, mandate seq, paused, text]} (None once one does not read), and
{seq: hash} and {seq: snapshot text} (the fold) at the seqs asked for, and [(first, last)] of the
seqs in closed files that are not there."""


def scan_ledger(db, recheck=True, wanted=(), after=None, fold_at=()):
    """Read the ledger once, in order, checking every link and record; with `recheck`, every
    action's proof re-checked by the gate as the ledger folds (the fold kept at the seqs `fold_at`).
    after: (seq, hash) of a checkpoint verified before."""
    found = {"count": 0, "head": after or (0, ZERO_HASH), "broken": None, "adopted": {},
             "hashes": {}, "folds": {}, "gaps": []}
    was, states, counted = small_cache(db), {}, {}

    def keep(seq):
        if seq in fold_at:      # the fold has taken every record up to seq, and none after
            found["folds"][seq] = snapshot_text(seq, states, counted)

    def rows():
        expected, prev = found["head"]
        for seq, at, link, digest, text in batched_rows(db, "seq, at, prev, hash, record", expected,
                                                        lambda *gap: found["gaps"].append(gap)):
            keep(expected)
            if found["gaps"] and found["gaps"][-1][1] == seq - 1 > expected:
                # the file before this one is not there: go on from the head this record names
                expected, prev = seq - 1, link
                fold_moved(states, counted, found, text)
            if seq != expected + 1:
                why = f"record #{expected + 1} is missing"
            elif link != prev:
                why = "its prev is not the hash of the record before it"
            elif chain_hash(link, seq, at, text) != digest:
                why = "its hash does not match its contents"
            else:
                record, why = stored_record(text)
            if not why and not (is_seq(at) and at is not None):
                why = f"its time is {shown_value(at, 40)}, not a whole number of seconds"
            if why:
                found.update(broken=(seq, why), adopted=None)
                return
            if seq in wanted:
                found["hashes"][seq] = digest
            expected, prev = seq, digest
            found["count"], found["head"] = found["count"] + 1, (seq, digest)
            name, kind, adopted = record["venture"], record["kind"], found["adopted"]
            if kind == "mandate":
                adopted[name] = [name, record.get("directory"), seq, False, record.get("text")]
            elif kind in ("pause", "resume") and name in adopted:
                adopted[name][3] = kind == "pause"
            count_self(counted, record)
            yield seq, at, record
        keep(expected)
    problems = []
    try:
        if recheck and after is None:
            problems = [(seq, problem) for seq, each in recheck_ledger(rows(), states=states)
                        for problem in each if not moved_premise(problem, found)]
        else:
            collections.deque(rows(), 0)
    finally:
        db.execute(f"PRAGMA cache_size={was}")
    found["gaps"] = [gap[:2] for gap in found["gaps"]]
    return LedgerScan(problems=[] if found["broken"] else problems, **found)


def moved_premise(problem, found):
    """A premise in a closed file that is not there is no problem: it cannot be read."""
    cited = re.fullmatch(r"premise #(\d+) is not in the ledger", problem)
    return bool(cited) and any(lo <= int(cited[1]) <= hi for lo, hi, _ in found["gaps"])


def fold_moved(states, counted, found, text):
    """After a closed file that is not there, fold on from the snapshot the next file carries."""
    home = found["gaps"][-1][2]
    with contextlib.suppress(Fail, LookupError, TypeError, ValueError):
        folded, was = states_of(read_snapshot(home, json.loads(text)))
        states.clear()
        states.update(folded)
        counted.clear()
        counted.update(was)
        found["adopted"] = {n: [n, s.directory, s.mandate_seq, s.paused, s.mandate_text]
                            for n, s in folded.items() if s.mandate_seq is not None}


# ---- checkpoints: the head kept outside the file ----
# The chain shows an edit, not a rewrite: a checkpoint is the head written down, kept elsewhere
# (signed with ssh-keygen -Y sign), which a ledger rewritten since no longer holds. C2SP's layout:
# checkpoint ::= "avsm/" HOST ":" HOME LF SEQ LF HASH LF UNIXTIME " " UTC-TIME LF [LF ARMOR]

Checkpoint = collections.namedtuple("Checkpoint", "origin seq hash at text signature")
SSHSIG_ARMOR = ("-----BEGIN SSH SIGNATURE-----", "-----END SSH SIGNATURE-----")


def checkpoint_origin(home):
    """Return a checkpoint's origin line: the host and the home whose ledger it is of."""
    import socket
    return f"avsm/{socket.gethostname()}:{home}"


def checkpoint_text(origin, seq, digest, at):
    """Return the text of a checkpoint of head (seq, digest) at unix time `at` (what is signed)."""
    return (
        f"{origin}\n{seq}\n{digest}\n{at} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(at))}\n")


def parse_checkpoint(data, where, signature=None):
    """Return the Checkpoint `data` holds, its signature after a blank line or in `signature`
    (FILE.sig's text); Fail(65)."""
    text, _, signed = data.partition("\n\n")
    lines = text.removesuffix("\n").split("\n")
    origin, seq, digest, when = (lines + [""] * 4)[:4]
    at = when.split(" ")[0]
    checks = (len(lines) == 4, origin.startswith("avsm/"), re.fullmatch("[0-9]+", seq),
              re.fullmatch(r"[0-9a-f]{64}", digest), re.fullmatch("[0-9]+", at),
              not signed or signed.strip().startswith(SSHSIG_ARMOR[0]))
    words = ("four lines: origin, seq, hash, time", "an origin avsm/HOST:HOME on line 1",
             "a record number on line 2", "64 hex digits of a hash on line 3",
             "a unix time on line 4", "an SSH signature after its blank line")
    bad = next((w for ok, w in zip(checks, words) if not ok), None)
    refuse(bad and f"{where} is not an avsm checkpoint: it needs {bad}")
    return Checkpoint(origin, int(seq), digest, int(at), text.rstrip("\n") + "\n",
                      signed.strip() or signature)


# ---- raw rows for a witness: does a far history extend what was kept? ----
# avsm fleet witness reads a host's rows raw, in pages, and checks them with the chain's recipe.
#     row ::= SEQ " " AT " " PREV " " HASH " " RECORD     (RECORD: the stored JSON text, as is)
#     line ::= row ("\n" row)*                           (a line of the answer: RECORDS_LINE rows)

RECORDS_PAGE = 2048             # rows of one `records` answer at most: the far side holds one page
RECORDS_PAGE_BYTES = 2 << 20    # ... and about this many bytes of them (large records: fewer rows)
RECORDS_LINE = 256

Row = collections.namedtuple("Row", "seq at prev hash record")


def records_answer(home, args):
    """Return the answer to a `records` request on `home` as the socket's lines: the head (and the
    newest checkpoint), then the rows after args["after"]; or Fail(66)."""
    import sqlite3
    path, rows, size = os.path.join(home, "ledger.db"), [], 0
    limit = RECORDS_PAGE if args.get("limit") is None else min(args["limit"], RECORDS_PAGE)
    try:
        if not os.path.isfile(path):
            raise sqlite3.OperationalError("no such file")
        with contextlib.closing(open_ledger_ro(path)) as db:
            head = ledger_head(db)
            newest = newest_checkpoint(os.path.join(home, "checkpoints")) \
                if args.get("checkpoint") else None
            for seq, at, prev, digest, text in ledger_rows(
                    db, "SELECT seq, at, prev, hash, record FROM records WHERE seq > ? ORDER BY seq"
                        " LIMIT ?", (args["after"], limit), args["after"]):
                if len(rows) == limit:      # LIMIT holds in each file
                    break
                rows.append(f"{seq} {at} {prev} {digest} {text}")
                size += len(text) + 160
                if size > RECORDS_PAGE_BYTES:
                    break
    except sqlite3.Error as err:
        raise Fail(EX_NOINPUT, f"{path} cannot be read ({err}): is {home} avsm's home? "
                               "name the home in the fleet file as HOST:HOME") from None
    first = json.dumps({"head": head and list(head), "checkpoint": newest and newest.text,
                        "signature": newest and newest.signature})
    lines = [first] + ["\n".join(rows[i:i + RECORDS_LINE])
                       for i in range(0, len(rows), RECORDS_LINE)]
    return [{"out": line} for line in lines] + [{"exit": EX_OK}]


def parse_rows(lines):
    """Return the Rows of a `records` answer's lines after its first, or ValueError."""
    return [parse_row(text) for line in lines for text in line.split("\n")]


def parse_row(line):
    seq, at, prev, digest, text = line.split(" ", 4)
    if not re.match("[0-9]+ [0-9]+ ", line):
        raise ValueError(f"a row begins with its seq and time, not {shown_text(line[:40])}")
    return Row(int(seq), int(at), prev, digest, text)


def row_problem(row, before):
    """Return why `row` is not the link after `before` ((seq, hash) or None), or None."""
    if before is not None:
        if row.seq != before[0] + 1:
            return f"record #{before[0] + 1} is missing (the next row is #{row.seq})"
        if row.prev != before[1]:
            return f"its prev is not the hash of #{before[0]}"
    if chain_hash(row.prev, row.seq, row.at, row.record) != row.hash:
        return "its hash does not match its contents"
    return None


def check_far_rows(held, before, rows):
    """Return (the last (seq, hash) checked, None or ("differs", SEQ, KEPT, FAR) or ("broken",
    SEQ, WHY)) of far `rows` after `before`; `held` is {seq: hash kept}."""
    for row in rows:
        why = row_problem(row, before)
        if why:
            return before, ("broken", row.seq, why)
        if row.seq in held and held[row.seq] != row.hash:
            return before, ("differs", row.seq, held[row.seq], row.hash)
        before = (row.seq, row.hash)
    return before, None


def first_differing(lo, hi, differs):
    """Return the first seq of lo..hi where `differs(seq)`, which holds at hi and after any seq
    where it holds (a record changed changes every hash after it)."""
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if differs(mid) else (mid + 1, hi)
    return lo


def kept_checkpoint_problem(kept, new, far_hash):
    """Return why a host's checkpoint `new` may not be kept after `kept`, or None."""
    if kept and new.origin != kept.origin:
        return (f"its origin is {shown_text(new.origin)[:120]}, not "
                f"{shown_text(kept.origin)[:120]} as the one kept")
    if far_hash != new.hash:
        return (f"it says #{new.seq} hashes to {new.hash[:16]}, and the host's ledger has "
                f"{str(far_hash)[:16]} there")
    return None


def sshsig_public_key(armor):
    """Return the public key (base64) an SSH signature names as its signer, or None (read, not
    checked)."""
    import base64
    try:
        body = base64.b64decode("".join(armor.strip().splitlines()[1:-1]), validate=True)
        size = int.from_bytes(body[10:14], "big")
        if body[:6] != b"SSHSIG" or not size:
            return None
        return base64.b64encode(body[14:14 + size]).decode()
    except ValueError:
        return None


def format_record_line(seq, at, record):
    """Return a record as one line: #SEQ TIME VENTURE CLAIM KIND SUMMARY (open point 18)."""
    fields = [str(record.get(k, "")) for k in ("venture", "claim", "kind", "summary")]
    return f"#{seq} {format_local_time(at)} " + " ".join(shown_text(f) for f in fields)


class LockCheck:
    """Whether avsmd.lock still names the avsmd that started this warden."""

    def __init__(self, lock_path, avsmd_pid):
        self.lock_path, self.avsmd_pid = lock_path, avsmd_pid
        # the lock file's stat when last read, and what it said
        self.lock_seen, self.lock_ours = None, False

    def lock_is_ours(self):
        """The lock is ours unless another avsmd's pid stands in it (a deleted one avsmd makes
        again); read again only when its stat changed (or fails)."""
        try:
            st = os.stat(self.lock_path)
            seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except FileNotFoundError:
            return True
        except OSError:
            seen = None
        if seen is None or seen != self.lock_seen:
            self.lock_ours = read_lock_pid(self.lock_path) in (self.avsmd_pid, None)
            self.lock_seen = seen
        return self.lock_ours


# =============================================================================
# 6. The kernel: a report read, folded, and the round it settles
# Decides from records. Reads no clock, runs nothing, opens no socket: it takes
# records and `now`, and returns records to append and levers to run.
# =============================================================================

# ---- intents: what an event's function yields ----
# Each is a generator yielding intents in order; the warden carries out each (folding its
# record into the state) before the function goes on, answering a Write with its seq and a Gate
# with the Verdict.
Write = collections.namedtuple("Write", "record at", defaults=(None,))
Write.__doc__ = "Append this record (at `at`, when given)."
Pause = collections.namedtuple("Pause", "record at", defaults=(None,))
Pause.__doc__ = "Append this pause record, and end what the venture runs."
Gate = collections.namedtuple("Gate",
                              "lever basis payload trigger approval by side extra summary check",
                              defaults=(None, None, None, None, None, None, "", None))
Gate.__doc__ = ("Ask the gate to prove `lever` now and run it if it can; the rule is sent back the "
                "Verdict. `check`: the seq of the lever's passed check (it runs unchecked then).")
Forecast = collections.namedtuple("Forecast", "lever why", defaults=("ratchet",))
Forecast.__doc__ = ("Forecast the venture, before a ratchet ask or on an add (`why`); the rule is "
                    "sent whether it began.")
ReadMandate = collections.namedtuple("ReadMandate", "")
ReadMandate.__doc__ = ("Read the venture's mandate.yaml; the rule is sent (its path, its text or "
                       "None, why it cannot be read).")
Content = collections.namedtuple("Content", "takes payload")
Content.__doc__ = ("Look where a payload a lever `takes` would write in the venture directory; the "
                   "rule is sent content_problem's answer (None: inside it).")
Owners = collections.namedtuple("Owners", "programs")
Owners.__doc__ = ("Look who could change these programs of the venture directory; the rule is sent "
                  "owner_problem's answer (None: only avsmd's user or root).")
World = collections.namedtuple("World", "report lever")
World.__doc__ = "Step the world command's ensemble from report #`report`, `lever` run."
Launch = collections.namedtuple("Launch", "lever action run data more file checked timeout")
Launch.__doc__ = """A lever's program for the warden to start once its action #`action` is written:
`run` in a shell with `data` (bytes or None) on its stdin, `more` spawn's other arguments, `file`
the text a takes: file lever writes first, `checked` whether lever_programs(spec) covered it. The
rule is sent why it could not start, or None."""
Adopt = collections.namedtuple("Adopt", "mandate end_run start problem", defaults=(None,))
Adopt.__doc__ = ("Put `mandate`, parsed against its directory, in force (None: it cannot run, the "
                 "`problem` why); end the kept `run` program (`end_run`), and start the venture "
                 "(`start`).")
WriteFile = collections.namedtuple("WriteFile", "path text")
WriteFile.__doc__ = ("Replace the venture's file at `path` with `text`, whole; the rule is sent "
                     "why it could not, or None.")
Check = collections.namedtuple("Check", "gate verdict data run timeout")
Check.__doc__ = ("A lever's check: `run` in a shell before the lever, which the gate proves again "
                 "after it, `data` on its stdin, ended past `timeout` s. The rule is sent why it "
                 "could not start, or None.")


def write(state, kind, claim=None, **fields):
    """Return the Write of a new `kind` record of `state`'s venture (new_record)."""
    return Write(new_record(kind, state.name, claim, **fields))


def some(**fields):
    """Return the fields given a value (not None, empty or false): a record's optional fields."""
    return {k: v for k, v in fields.items() if v}


def describe_status(status):
    """Return how a program ended, in words: 'exit 0', 'exit 2', 'signal 9'."""
    if status is None:
        return "still running"
    return f"exit {status}" if status >= 0 else f"signal {-status}"


# ---- the event of a reading program ended: the report, a guard, audit or reading ----
Read = collections.namedtuple("Read", "what name status out cut note round ended_by limit")
Read.__doc__ = """What a reading program ended with: `what` report, guard, audit or reading, its
`name` (None for the report), its exit `status` (None: it could not start, the `note` says why),
its standard `out`put kept (`cut`: only the last OUTPUT_KEEP bytes), the `note` of what it wrote,
the `round` it was started in, what ended it early (`ended_by`: pause, stop, timeout) and its
time `limit`."""


def read_ended(state, round_, read, now, stopping):
    """The event of a reading program ended (a Read): yield its record (the report's with its
    drawdown guards'), then what the round in flight (`round_`, or None) settles once its metric is
    in and the rest read or its deadline past at `now`; return the round still in flight, or None.
    One cut short by a pause or a stop is no reading."""
    if read.ended_by in ("pause", "stop"):
        return round_
    value, failure, text = read_output(read)
    if read.what == "report":
        yield from report_read(state, value, failure)
        if round_ is not None:
            round_ = dict(round_, metric=state.last_report[0])
    else:
        late = read_late(read.round, round_)
        yield from reading_read(state, read.what, read.name, value, failure, text, late)
        if late:
            return round_
        round_ = dict(round_, pending=round_["pending"] - {(read.what, read.name)})
    return (yield from round_due(state, round_, now, stopping))


def round_due(state, round_, now, stopping):
    """Yield what the round in flight settles (round_settled) once its metric is in and the rest
    read or its deadline past at `now` (monotonic); return the round still in flight, or None."""
    unread = round_unread(round_, now)
    if unread is None:
        return round_
    yield from round_settled(state, round_["metric"], unread, stopping)
    return None


def read_late(child_round, round_):
    """Whether a reading that just ended comes after its round settled without it (`round_`: the
    round in flight, or None)."""
    return round_ is None or child_round != round_["number"]


def round_unread(round_, now):
    """Return what a round in flight settles without, sorted [(what, name)], once its metric is in
    and the rest read or its deadline past at `now` (monotonic); None while it waits."""
    if round_ is None or round_["metric"] is None:
        return None
    if round_["pending"] and now < round_["deadline"]:
        return None
    return sorted(round_["pending"])


def read_output(read):
    """Return (value, failure, text) of a reading program ended (a Read): its last non-empty line
    must be the number alone (GUARD-14); `text` is its lines (a report's are not kept), and a
    guard's failure is told without what it wrote."""
    lines, cut = output_lines(read.out, read.cut)
    text = "" if read.what == "report" else "\n".join(lines)
    if read.ended_by:
        why = f"ended: {read.ended_by}"
        if read.ended_by == "timeout":
            why = f"took longer than its time limit of {format_duration(read.limit)} and was ended"
        return None, why, text
    if read.status is None:
        return None, read.note, text
    if read.status != 0:
        tail = read.note[-300:] if read.what != "guard" else ""
        return None, describe_status(read.status) + (f": {tail}" if tail else ""), text
    if cut:
        return None, (f"the last line is longer than {OUTPUT_KEEP // 1024} KiB and was cut: not a"
                      " number read whole"), text
    if not lines:
        return None, "printed no number", text
    last = lines[-1]
    value = parse_number(last)
    if value is None:
        shown = last.strip()[:80]
        if re.fullmatch(NUMBER, last.strip()):
            return None, f"{shown[:40]} is past the largest number a report may hold", text
        return None, f"the last line is not a number alone: {json.dumps(shown)}", text
    return value, None, text


def output_lines(data, cut):
    """Return (the non-empty lines of a program's standard output, whether its last one was cut).
    Lines end at \\n (a \\r before it dropped) and nowhere else: `9\\x0c1` is one line. With `cut`
    (only the last OUTPUT_KEEP bytes kept), the bytes before the first \\n are no line."""
    pieces = bytes(data).split(b"\n")[1 if cut else 0:]
    lines = [piece.decode("utf-8", "replace").removesuffix("\r") for piece in pieces]
    lines = [line for line in lines if line.strip()]
    return lines, cut and not lines


def report_read(state, value, failure):
    """Yield the report of `value` (or `failure`), then each drawdown guard's reading of it: the
    fall from the metric's peak, in percent."""
    report = report_record(state, value, failure)
    yield Write(report)
    for guard in state.mandate["guards"]:
        if guard["drawdown"] is None:
            continue
        peak, dd, why = state.peak, None, f"the {report['status']} metric report gives no drawdown"
        if report["status"] == "trusted":
            dd, why = 0.0, None
            if peak is not None and peak > 0:
                dd = round(max(0.0, (peak - value) / peak * 100), 6)
        yield Write(guard_record(state, guard, dd, why, "%"))


def report_record(state, value, failure):
    """Return the metric's report record for `value` (or `failure`), judged by judge_report."""
    m = state.mandate
    status, note = judge_report(m, state, value, failure)
    said = "" if status == "trusted" else f" {status}: {note}"
    return new_record("report", state.name, metric=m["metric"],
                      value=value if value == value else None, status=status,
                      plausible=status in ("trusted", "unconfirmed"), note=note,
                      summary=m["metric"] + (
                          said if status == "failed" else f" = {format_number(value)}{said}"))


# ---- plausibility ----
def judge_report(mandate, state, value, failure=None):
    """Return (status, note) of a new metric report: trusted, unconfirmed, implausible or failed."""
    if failure is not None:
        return "failed", failure
    if value != value:
        return "implausible", "the report is NaN"
    low_high = mandate["range"]
    if low_high and not low_high[0] <= value <= low_high[1]:
        return ("implausible", f"{format_number(value)} is outside range"
                               f" [{format_number(low_high[0])}, {format_number(low_high[1])}]")
    # the bound on a rise, on a fall; None where that way is unbounded
    up, down = (mandate[k] if mandate[k] is not None else mandate["max_step"]
                for k in ("max_rise", "max_fall"))
    if up is None and down is None:
        return "trusted", ""
    if state.pending is not None:
        base, what = state.pending[1], "the unconfirmed report before it"
    elif state.previous_implausible or state.level is None:
        if state.level is None and not state.previous_implausible:
            return "trusted", ""        # the first report has nothing to step from
        if not mandate["confirm"]:
            return "trusted", "confirm: false acts on the report after an implausible one"
        return ("unconfirmed",
                "follows an implausible report; waits for the next to agree within the step bound")
    else:
        base, what = state.level[1], "the last plausible report"
    step = value - base
    bound, key = (up, "max_rise") if step > 0 else (down, "max_fall")
    if step and bound is not None and abs(step) > bound:
        key = key if mandate[key] is not None else "max_step"
        if state.pending is not None:
            return ("unconfirmed",
                    f"moved {format_number(step)} from {what}, past {key} {format_number(bound)};"
                    " waits for the next to agree")
        return ("implausible",
                f"{'rose' if step > 0 else 'fell'} by {format_number(abs(step))} from"
                f" {format_number(base)}, past {key} {format_number(bound)}")
    if state.pending is None and state.last_step is not None and not state.ran_since:
        previous = state.last_step
        half_prev = up if previous > 0 else down
        if (previous * step < 0 and half_prev is not None and bound is not None
                and abs(previous) > half_prev / 2 and abs(step) > bound / 2):
            return ("implausible", f"a flap: moved {format_number(previous)} then"
                                   f" {format_number(step)}, each past half its step bound")
    return "trusted", ""


# ---- guards, audits, readings: their records ----
def guard_record(state, guard, value, failure, suffix=""):
    """Return a guard's reading record for `value` (or `failure`); `suffix` follows the number in
    the summary (% for a drawdown)."""
    status, past, note = judge_guard(guard, state, value, failure)
    record = new_record(f"guard.{guard['name']}", state.name,
                        value=value if value == value else None,
                        status=status, plausible=status in ("trusted", "unconfirmed"),
                        past=past if status != "failed" else None, bound=guard["bound"],
                        side=guard["side"])
    if status != "trusted":
        record["note"] = note or status
    way = ">" if guard["side"] == "above" else "<"
    record["summary"] = (
        f"guard {guard['name']} = {format_number(value)}{suffix}"
        + (f" past its bound ({way} {format_number(guard['bound'])}{suffix})" if past else "")
        if status == "trusted"
        else f"guard {guard['name']} {status}: {note}"
    )
    return record


def judge_guard(guard, state, value, failure):
    """Return (status, past, note) of a guard's new reading; past means something only when
    trusted."""
    if failure is not None:
        return "failed", False, failure
    if value != value:
        return "implausible", False, "the reading is NaN"
    past = crossed(guard["side"], guard["bound"], value)
    info = state.guards.get(guard["name"])
    if info and info["pending"] is not None:
        if info["pending"] == past:
            return "trusted", past, "agrees with the unconfirmed reading before it"
        return ("unconfirmed", past,
                "disagrees with the unconfirmed reading before it; waits for the next")
    if info and info["previous_bad"] and guard["confirm"]:
        return ("unconfirmed", past,
                "follows a failed or implausible reading; waits for the next to agree")
    return "trusted", past, ""


def crossed(way, bound, value):
    """Return whether `value` is past `bound` on side `way` (strict: > above, < below)."""
    return value > bound if way == "above" else value < bound


def reading_read(state, what, name, value, failure, text, late):
    """A guard, audit or reading program ended, or could not start: yield its record; the guard
    rules run on a `late` guard reading alone."""
    item = next(i for i in state.mandate[what + "s"] if i["name"] == name)
    if what == "guard":
        yield Write(guard_record(state, item, value, failure))
        if late:
            yield from guard_rules(state)
    elif what == "audit":
        yield Write(audit_record(state, name, value, failure, text))
    else:
        yield Write(reading_record(state, item, value, failure, text))


def guard_rules(state):
    """A guard past its bound pauses or asks once per episode, and runs its unwind until it has run
    ok; back inside, its ask is settled."""
    for guard in state.mandate["guards"]:
        name = guard["name"]
        info = state.guards.get(name)
        open_ask = state.open_ask(guard=name)
        if info is None or not info["past"]:
            if open_ask is not None:
                yield Write(resolved_record(state, open_ask,
                                            f"guard {name} reads inside its bound again"))
            continue
        episode = info["episode"]
        fresh = info.get("acted") != episode or info.get("repause")
        if fresh and guard["then"] == "pause" and not state.paused:
            yield Pause(new_record(
                "pause", state.name,
                summary=f"guard {name} reads past its bound (#{episode}): paused {state.name}",
                guard=name, episode=episode))
        if fresh and guard["then"] == "ask" and open_ask is None:
            yield write(
                state, "ask", about="guard", guard=name, episode=episode,
                question=f"guard {name} reads past its bound; no lever but stop "
                         f"runs until it is back inside. Look at {state.name}?",
                summary=f"guard {name} past its bound (#{episode}); asking once for this episode")
        reading = info["last"][0]
        if guard["unwind"] and not info["unwind_ok"] \
                and guard["unwind"]["action"] not in state.running \
                and info.get("unwind_tried") != reading:
            info["unwind_tried"] = reading          # once per reading past the bound (not folded)
            lever, payload = guard["unwind"]["action"], guard["unwind"]["payload"]
            verdict = yield Gate(lever, unwind_basis(name, reading), payload=payload, by="guard",
                                 extra={"guard": name, "payload": payload},
                                 summary=f"{lever} runs: the unwind of guard {name}")
            if not verdict.ok:
                yield from refusal(state, lever, verdict.why,
                                   f"unwind {lever} refused: {verdict.why}", by="guard", guard=name)


def unwind_basis(guard, reading):
    return ("unwind", [reading], [f"guard {guard} reading #{reading} is past its bound"])


def resolved_record(state, ask_seq, why):
    """Return the record settling ask #ask_seq (an audit's is no model's to see: AUDIT-05)."""
    return new_record("resolved", state.name, ask=ask_seq, summary=f"ask #{ask_seq} settled: {why}",
                      **some(audit=state.open_asks.get(ask_seq, {}).get("audit")))


def refusal(state, lever, why, summary=None, **fields):
    """Yield the refusal of `lever`: why (its summary "LEVER refused: WHY" unless given)."""
    yield write(state, "refusal", lever=lever, why=why,
                summary=summary or f"{lever} refused: {why}", **fields)


def audit_record(state, name, value, failure, text):
    """Return audit `name`'s reading record; its note, the lines its program printed above the
    number, is never shown to a model (AUDIT-05)."""
    lines = [line for line in text.split("\n") if line.strip()]
    note = "\n".join(lines[:-1])[-NOTE_MAX:] if failure is None else failure
    status = "failed" if failure else ("implausible" if value != value else "trusted")
    return new_record(
        f"audit.{name}", state.name, value=value if value == value else None, status=status,
        plausible=status == "trusted", note=note or ("" if status == "trusted" else "NaN"),
        summary=f"audit {name} = {format_number(value)}" if status == "trusted"
        else f"audit {name} {status}: {note[:200]}")


ADDRESS = r"[^\s<>,;:@]+@[^\s<>,;:@]+"


def reading_record(state, reading, value, failure, text):
    """Return a reading's record: read, keeping its fields (those its audit's note names), or failed
    with no note at all (READING-08)."""
    name = reading["name"]
    record = new_record(f"reading.{name}", state.name, value=value if value == value else None,
                        status="failed" if failure else "read", plausible=failure is None)
    if failure is None:
        # at most 50 address lines above the number; with an audit, only those its note names
        named = None
        if reading["audit"]:
            note = state.audits.get(reading["audit"], {}).get("note", "")
            named = set(re.findall(r"[^\s<>,;:]+", note))
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        fields = [line for line in lines[:-1] if len(line) <= 254 and re.fullmatch(ADDRESS, line)
                  and (named is None or line in named)][:50]
        record.update(fields=" ".join(fields),
                      summary=f"reading {name} = {format_number(value)}: {len(fields)} field(s)")
    else:
        record.update(summary=f"reading {name} failed")
    return record


def drift_and_noise(steps):
    """The mean one-step change of lever-free steps, and its standard deviation (open point 36)."""
    drift = sum(steps) / len(steps)
    return drift, (sum((s - drift) ** 2 for s in steps) / len(steps)) ** 0.5


# ---- the rules of a settled round ----
def round_settled(state, report_seq, unread, stopping):
    """A round settles (metric in, the rest read or late): yield what it settles without, what its
    rules call for, then the score of the prediction its report resolves and the next (WORLD-05)."""
    yield from unread_rule(state, unread, "slower than half a second; written when it is done")
    scores = list(calibration_rule(state))      # written with the next prediction
    yield from settle_round(state, report_seq)
    for score in scores:
        yield score
    if not prediction_due(state, report_seq, stopping):
        return
    lever = state.ran_since[0] if state.ran_since else None
    if state.mandate["world"] is not None:
        yield World(report_seq, lever)
        return
    members = baseline_members(state, lever)
    if members:
        yield Write(prediction_record(state, report_seq, members, lever))


def unread_rule(state, unread, why):
    """Yield the record of each guard, audit or reading `unread` [(what, name)] not read: why."""
    for what, name in unread:
        yield Write(unread_record(state, what, name, why))


def unread_record(state, what, name, why):
    """Return the record of guard, audit or reading `name` not read this round (`why`)."""
    record = new_record(f"{what}.{name}", state.name,
                        claim="inferred" if what == "reading" else "measured", value=None,
                        status="not read", plausible=False, note=why,
                        summary=f"{what} {name} not read: {why}")
    if what == "guard":
        record["past"] = None             # not read: it neither trips nor clears
    return record


def reading_limit(item):
    """Return the seconds a reading program may run: its `timeout:`, else 10 minutes; one still
    running when next due runs on to this limit (DESIGN)."""
    return item.get("timeout") or READING_TIMEOUT


def next_round_at(due, cadence, now):
    """When the round after one due at `due` is due: on the venture's cadence grid, but a round
    missed whole is not made up in a burst."""
    return due + cadence if due + cadence > now else now + cadence


def first_round_wait(state, now, i, count):
    """Seconds a warden's start waits before the first round of the i-th of `count` ventures: a
    cadence after its last report, so no start reads the metric twice in one cadence (MANDATE-05),
    then 2 ms apart, or closer to fit in one cadence, so a thousand ventures do not all come due
    in one tick for ever after."""
    cadence, last = state.mandate["cadence"], state.last_report
    wait = 0 if last is None else min(cadence, max(0, last[1] + cadence - now))
    return wait + i / count * min(cadence, count * 0.002)


def round_started(state, running, number, now):
    """The event of round `number` due at `now`: of each guard (a drawdown guard is read from the
    metric's report), audit and reading, yield as not read one whose last read is still `running`
    (left to run: RUN-18); return the round in flight, which settles once all are in or half a
    second has passed, and [(what, item)] of the rest, to start. No round while the metric's report
    is still `running`: it goes on to its time limit (open point 54)."""
    if ("report", None) in running:
        return None, []
    plan = [(what, item) for what in ("guard", "audit", "reading")
            for item in state.mandate[what + "s"] if what != "guard" or item["drawdown"] is None]
    yield from unread_rule(state, [(what, item["name"]) for what, item in plan
                                   if (what, item["name"]) in running],
                           "its last read is still running")
    return ({"deadline": now + 0.5, "metric": None, "pending": set(), "number": number},
            [(what, item) for what, item in plan if (what, item["name"]) not in running])


# ---- world models ----
# With `world:` or `calibration:` (WORLD-05), each trusted report brings an inferred prediction of
# the next, from the world command (open point 38) or the built-in baseline. A trusted next report
# scores it in a measured `calibration.<metric>` record (WORLD-06, WORLD-07); any other, or a gap,
# drops it. Predictions and scores never authorize (WORLD-09); the scores only hold a ranking back
# (WORLD-08).
def calibration_rule(state):
    """Yield the score of the prediction the round's report resolves (WORLD-06, WORLD-07)."""
    if state.prediction is None or not state.prediction[1].get("resolves") or state.mandate is None:
        return
    pseq, pred = state.prediction
    report_seq = pred["resolves"]
    if state.last_report is None or state.last_report[0] != report_seq:
        return
    y = state.last_report[2]["value"]
    crps = crps_ensemble(pred["members"], y)
    base = abs(y - pred["value"])
    skill = None if base == 0 else 1 - crps / base
    covered = pred["p10"] <= y <= pred["p90"]
    events = []
    for name, chance in (pred.get("guards") or {}).items():
        info = state.guards.get(name)
        if info and info["last"] and info["last"][0] > pred["report"] \
                and info["last"][2] == "trusted":
            events.append((chance - info["past"]) ** 2)
    brier = sum(events) / len(events) if events else None
    rolling = state.scores[-(ROLLING - 1):] + [(crps, base, covered)]
    r_skill, r_coverage = rolling_scores(rolling)
    r = lambda v: None if v is None else round(v, 6) + 0.0  # noqa: E731  six places: a person reads
    # a metric read by an adapter (words and a URL) is named `metric`
    metric = state.mandate["metric"]
    kind = "calibration." + (metric if re.fullmatch(r"[A-Za-z0-9_.-]+", metric) else "metric")
    yield write(
        state, kind, prediction=pseq, report=report_seq, crps=r(crps), persistence=r(base),
        skill=r(skill), brier=r(brier), coverage=covered, rolling_skill=r(r_skill),
        rolling_coverage=r(r_coverage), rolling=len(rolling),
        summary=f"prediction #{pseq} scored on report #{report_seq}: "
                f"crps {format_number(r(crps))}, skill {shown_skill(skill)}, "
                f"{'inside' if covered else 'outside'} its 80% interval"
                + (f", brier {format_number(round(brier, 3))}" if brier is not None else "")
                + f"; last {len(rolling)}: {describe_rolling(r_skill, r_coverage)}")


def crps_ensemble(members, y):
    """The ensemble CRPS: E|X - y| - E|X - X'| / 2, X and X' drawn from the members."""
    xs = sorted(members)
    n = len(xs)
    near = sum(abs(x - y) for x in xs) / n
    apart = 2 * sum((2 * i - n + 1) * x for i, x in enumerate(xs)) / (n * n)  # E|X - X'|, sorted
    return near - apart / 2


def rolling_scores(scores):
    """(skill, coverage) over `scores` [(crps, persistence crps, covered)]: skill against
    persistence (None when it never missed), and the share inside the 80% interval."""
    if not scores:
        return None, None
    base = sum(b for _, b, _ in scores)
    skill = None if base == 0 else 1 - sum(c for c, _, _ in scores) / base
    return skill, sum(1 for _, _, covered in scores if covered) / len(scores)


def shown_skill(skill):
    return "-" if skill is None else format_number(round(skill, 3))


def describe_rolling(skill, coverage):
    """`skill 0.42, coverage 80%`."""
    return (f"skill {shown_skill(skill)}, "
            f"coverage {'-' if coverage is None else format_number(round(100 * coverage))}%")


def prediction_due(state, report_seq, stopping):
    """Whether report #report_seq, the last and trusted, brings a prediction (WORLD-05)."""
    report = state.last_report
    return predicts(state.mandate) and not state.paused and not stopping and report is not None \
        and report[0] == report_seq and report[2].get("status") == "trusted"


def predicts(mandate):
    """Whether a venture's reports bring predictions: a world or a calibration bar (WORLD-05)."""
    return mandate is not None and (
        mandate["world"] is not None or mandate["calibration"] is not None)


def baseline_members(state, lever=None):
    """The baseline's one-step ensemble from the last trusted report (WORLD-04), or None."""
    steps = state.free_steps
    if len(steps) < 3 or state.level is None:
        return None
    value, shift = state.level[1], 0.0
    if lever is not None:
        facts = forecast_facts(state, 1, 1)["levers"]
        effect = lever_effects(facts, drift_and_noise(steps)[0]).get(lever)
        shift = sum(effect) / len(effect) if effect else 0.0
    return [value + s + shift for s in steps]


def forecast_facts(state, days, seeds):
    """Return what a forecast of `state`'s venture starts from: the forecast program's input."""
    m = state.mandate
    levers = {}
    for lever, spec in m["levers"].items():
        expects = spec["expects"]
        levers[lever] = {"steps": state.lever_steps.get(lever, [])[-HISTORY:],
                         "cap": list(spec["cap"]),
                         "expects": list(expects[:2])
                         if expects and expects[1] is not None else None}
    return {"cadence": m["cadence"], "range": list(m["range"]) if m["range"] else None,
            "sides": [[way, bound, lever] for _, way, bound, lever in controller_sides(m)
                      if lever in levers],
            "levers": levers, "free_steps": list(state.free_steps),
            "history": [v for _, v in state.trusted], "days": days, "seeds": seeds}


def lever_effects(levers, drift):
    """Each lever's effects per run, net of the drift: its measured steps once it has three,
    else its `expects` size (EFFECT-17)."""
    effects = {}
    for name, lever in levers.items():
        if len(lever["steps"]) >= 3:
            effects[name] = [x - drift for x in lever["steps"]]
        elif lever["expects"]:
            way, size = lever["expects"]
            effects[name] = [size if way == "up" else -size]
    return effects


# ensemble members a prediction record keeps (quantiles of a larger ensemble)
PREDICTION_MEMBERS = 20


def prediction_record(state, report_seq, members, lever=None, guards=None, world=False):
    """The inferred `prediction` record of the report after #report_seq (WORLD-05)."""
    xs = sorted(members)
    if len(xs) > PREDICTION_MEMBERS:    # kept: the ensemble's evenly spaced quantiles
        xs = [quantile(xs, (i + 0.5) / PREDICTION_MEMBERS) for i in range(PREDICTION_MEMBERS)]
    xs = [round(x, 9) + 0.0 for x in xs]
    median, p10, p90 = spread(xs)
    shown = shown_spread((median, p10, p90), decimals_of([v for _, v in state.trusted[-20:]]))
    record = new_record("prediction", state.name, report=report_seq,
                        value=state.level[1] if state.level else None, members=xs,
                        median=round(median, 9) + 0.0, p10=round(p10, 9) + 0.0,
                        p90=round(p90, 9) + 0.0, source="world" if world else "baseline",
                        lever=lever,
                        summary=f"next {state.mandate['metric']}: {shown[0]} "
                                f"(80%: {shown[1]} to {shown[2]}) from report "
                                f"#{report_seq}, by the {'world command' if world else 'baseline'}"
                                + (f" with {lever} run" if lever else ""))
    if guards:
        record["guards"] = guards
        record["summary"] += "; " + ", ".join(f"guard {g} past its bound {round(100 * p)}%"
                                              for g, p in sorted(guards.items()))
    return record


def quantile(sorted_values, q):
    """The q-quantile of sorted values, linearly interpolated."""
    at = q * (len(sorted_values) - 1)
    low = int(at)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (at - low)


def spread(sorted_values):
    """(median, p10, p90) of sorted values."""
    return tuple(quantile(sorted_values, q) for q in (0.5, 0.1, 0.9))


def shown_spread(values, decimals):
    """Return values (median, p10, p90) as text to `decimals` places."""
    return [f"{round(v, decimals) + 0.0:.{decimals}f}" for v in values]


def decimals_of(values):
    """The decimals a person would write the readings with, at most two."""
    texts = [format_number(v) for v in values]
    return min(max((len(t.split(".")[1]) for t in texts if "e" not in t and "." in t), default=0),
               2)


def settle_round(state, report_seq):
    """Yield what a settled round calls for, the controller's call last."""
    yield from guard_rules(state)
    yield from audit_rules(state)
    yield from effect_rules(state)
    yield from implausible_rule(state, held_by(state), report_seq)
    report = state.last_report
    for side_name, _, _, _ in controller_sides(state.mandate):
        if state.side(side_name).get("stuck") is None:
            yield from unstick_rule(state, side_name, "the metric is back inside its bound")
    if report and report[0] == report_seq:
        for side, lever, reports, why in controller_calls(state):
            yield from controller_rule(state, side, lever, reports, why)


def audit_rules(state):
    """An audit that worsens while the metric improves asks once, settled when it no longer does."""
    for audit in state.mandate["audits"]:
        name, why = audit["name"], audit_worsening(audit, state)
        open_ask = state.open_ask(about="audit", audit=name)
        if why and open_ask is None:
            yield write(state, "ask", about="audit", audit=name,
                        question=f"{why}. Is the gain real?",
                        summary=f"audit {name} asks: {why}")
        elif not why and open_ask is not None:
            yield Write(resolved_record(
                state, open_ask, f"audit {name} no longer worsens while the metric improves"))


def audit_worsening(audit, state):
    """Return why the audit asks, or None: the metric improved over its window while the audit,
    against its value `window` readings earlier, got worse past its tolerance (open point 33)."""
    w = audit["window"]
    values = state.audits.get(audit["name"], {}).get("values", [])
    if len(values) <= w or len(state.trusted) <= w:
        return None
    metric_then, metric_now = state.trusted[-1 - w][1], state.trusted[-1][1]
    audit_then, audit_now = values[-1 - w][1], values[-1][1]
    improved = metric_now > metric_then if audit["better"] == "up" else metric_now < metric_then
    worse = (audit_now - audit_then) if audit["worse"] == "up" else (audit_then - audit_now)
    if improved and worse > audit["tolerance"]:
        return (
            f"{state.mandate['metric']} improved from"
            f" {format_number(metric_then)} to {format_number(metric_now)} over {w} readings while"
            f" audit {audit['name']} got worse by {format_number(worse)}, past its tolerance"
            f" {format_number(audit['tolerance'])}"
        )
    return None


def effect_rules(state):
    """Write each settled effect verdict; n misses in a row suspend a delegation (revoke_after)."""
    for seq, effect in sorted(state.effects.items()):
        if effect["verdict"] is None:
            continue
        verdict, why = effect["verdict"]
        lever = effect["lever"]
        yield write(state, "effect", lever=lever, action=seq, verdict=verdict,
                    why=why, summary=f"{lever} (action #{seq}) {verdict}: {why}")
        spec, misses = state.mandate["levers"].get(lever), state.misses.get(lever, 0)
        if (spec and spec["delegated"] and spec["revoke_after"] and lever not in state.suspended
                and misses >= spec["revoke_after"]):
            yield write(
                state, "ask", about="revoke", lever=lever,
                question=f"{lever} missed its expected effect {misses} times in a row; its "
                         "delegation is suspended. Approve to restore it",
                summary=f"{lever}'s delegation suspended after {misses} misses in a row "
                        f"(revoke_after)")


def implausible_rule(state, held, report_seq):
    """A reading that holds the venture implausible asks once, settled when a plausible one
    comes."""
    if held and state.implausible_ask is None and not state.implausible_answered:
        what, seq, note = held
        yield write(
            state, "ask", about="implausible", reading=seq,
            question=f"{what} (#{seq}) is not plausible: {note}; is the sensor sound? "
                     "approve (it is sound) and deny (it is not) each only record your answer: "
                     f"neither runs a lever nor lifts the hold, and {state.name} acts again "
                     "on the first plausible reading (fix the reading, or its bounds in "
                     "mandate.yaml and avsm add)",
            summary=f"{what} #{seq} holds {state.name} implausible; asking once until a plausible"
                    " reading comes",
            # hidden from every model, as the audit is (AUDIT-05)
            **some(audit=what[len("audit "):] if what.startswith("audit ") else None))
    elif not held and state.implausible_ask is not None:
        yield Write(resolved_record(state, state.implausible_ask,
                                    f"readings are plausible again (#{report_seq})"))


def unstick_rule(state, side, why):
    """The stuck ask of `side` is settled: its lever ran again, the excursion ended, or a new
    mandate started the venture's sides afresh."""
    for seq, ask in list(state.open_asks.items()):
        if ask.get("about") == "stuck" and ask.get("side") == side:
            yield Write(resolved_record(
                state, seq, why if seq > state.mandate_seq
                else f"mandate #{state.mandate_seq} replaced the one it was asked under"))


# ---- controllers ----
def controller_calls(state):
    """Return the controller's intents (decide) on the venture's latest report, as a settled round
    acts on them; the re-check of a controller's action asks this same function."""
    report = state.last_report
    if held_by(state) or state.paused or not report or report[2].get("status") != "trusted":
        return []
    return decide(state, report[0], report[2]["value"])


def decide(state, report_seq, value):
    """Return the controller's intents for a trusted report: [(side, lever, [report seqs], why)]."""
    intents = []
    hold = state.mandate["controller"]["hold"] if state.mandate else 1
    for side_name, way, bound, lever in controller_sides(state.mandate):
        side = state.sides.get(side_name) or {"armed": True, "streak": []}     # read, not made
        if side["armed"] and side["streak"][-1:] == [report_seq] and len(side["streak"]) >= hold:
            why = (
                f"{state.mandate['metric']} {format_number(value)} {'>' if way == 'above' else '<'}"
                f" {format_number(bound)}")
            if hold > 1:
                why += f" for {hold} reports in a row"
            intents.append((side_name, lever, side["streak"][-hold:], why))
    return intents


def controller_sides(mandate):
    """Return the controller's sides as (side name, way, bound, lever)."""
    if mandate is None:
        return []
    return CONTROLLERS[mandate["controller"]["kind"]].sides(mandate["controller"])


def held_by(state):
    """Return (what, seq, note) of the failed or implausible report, guard reading or audit reading
    that holds the venture implausible until a plausible one comes, or None."""
    if state.last_report and state.last_report[2].get("status") in ("implausible", "failed"):
        seq, at, record = state.last_report
        return f"the {record.get('metric', 'metric')} report", seq, record.get("note")
    for kind, table in (("guard", state.guards), ("audit", state.audits)):
        for name, info in sorted(table.items()):
            last = info["last"]
            if last and last[-1] in ("failed", "implausible"):
                return f"{kind} {name}", last[0], f"its reading #{last[0]} is {last[-1]}"
    return None


def controller_rule(state, side, lever, reports, why):
    """The controller wants `lever`: the gate runs it if it can prove it; else ask once in the
    excursion (an irreversible lever), or write the refusal. A refusal that will not clear within
    the round (the cap, the budget, an ask answered in this excursion) makes the venture stuck."""
    if lever in state.checking:
        return                      # its check, still running, decides: the gate again after it
    verdict = yield Gate(lever, controller_basis(state, reports, why), by="controller", side=side,
                         summary=f"{lever} runs: {why}")
    if verdict.ok:
        yield from unstick_rule(state, side, f"{lever} ran again")
        return
    asked_open = state.open_ask(lever=lever, about="lever") is not None
    if verdict.needs_ask and not state.side(side).get("asked") and not asked_open:
        yield write(
            state, "ask", about="lever", lever=lever, by="controller", side=side,
            reports=reports, question=f"run {lever}? {why}; {lever} is irreversible",
            summary=f"run {lever}? {why}; {lever} is irreversible, so a person decides")
    elif verdict.needs_ask and asked_open:
        return                      # the ask of this excursion still waits for its answer
    elif verdict.needs_ask:
        yield from stuck_rule(
            state, side, lever, reports, "asked", None,
            f"{lever} was asked about once in this excursion and the answer is in; the controller "
            "asks again after a report back inside")
    elif verdict.stuck:
        yield from stuck_rule(
            state, side, lever, reports, verdict.stuck[0], verdict.stuck[1], verdict.why)
    else:
        yield from refusal(state, lever, verdict.why, by="controller", side=side, reports=reports)


def controller_basis(state, reports, why):
    cited = ", ".join("#" + str(r) for r in reports)
    return (state.mandate["controller"]["kind"], reports,
            [f"report{'s' if len(reports) > 1 else ''} {cited}: {why}"])


STUCK_WAY_OUT = {
    "cap": "raise the cap in mandate.yaml and avsm add it, or avsm propose {venture} {lever}",
    "budget": "raise the budget in mandate.yaml and avsm add it, or wait",
    "asked": "avsm propose {venture} {lever} runs it now, through the gate"}


def stuck_rule(state, side, lever, reports, reason, clears_at, why):
    """The controller's lever cannot run for `reason` until `clears_at`: once per excursion and
    reason, a refusal saying so and the way out, and one ask so a person is told (none when a person
    has just answered)."""
    if state.side(side).get("stuck") == reason:
        return
    way_out = STUCK_WAY_OUT[reason].format(venture=state.name, lever=lever)
    when = f"; the next run is possible at {format_local_time(clears_at)}" if clears_at else ""
    name = state.name
    yield from refusal(state, lever, why + when,
                       f"{lever} refused, {name} is stuck: {why}{when}; {way_out}", by="controller",
                       side=side, reports=reports, stuck=reason, clears_at=clears_at)
    if reason != "asked" and not state.side(side)["seen"] \
            and state.open_ask(about="stuck", side=side) is None:
        yield write(
            state, "ask", about="stuck", by="self", lever=lever, side=side, reason=reason,
            clears_at=clears_at,
            question=f"{name} is stuck past its bound: {why}{when}; the way out: {way_out}. "
                     "Approve or deny to say you have seen it; nothing runs on the answer",
            summary=f"{name} is stuck: {lever} cannot run ({reason}){when}")


# ---- a record folded into its venture's state; each kind's fold beside its record ----
def fold(state, seq, at, record):
    """Update `state` with one record of its venture; return the state."""
    kind, lever = record["kind"], record.get("lever")
    if kind == "mandate":
        if record.get("directory") != state.directory:
            state.paused = False      # a moved directory is a new venture (VENTURE-04)
        state.directory = record.get("directory")
        state.mandate_seq, state.mandate_sha, state.mandate_text = (seq, record.get("sha256"),
                                                                    record.get("text"))
        state.sides = {}              # the old permissions end with the old mandate
        state.guards, state.audits, state.peak, state.approvals = {}, {}, None, {}
        state.ratchet_forecasts, state.backoff = {}, None
        return state
    if kind == "report":
        state.counted["reports"] += 1
        if record.get("status") in ("failed", "implausible"):
            state.counted[record["status"]] += 1
        previous = state.last_report
        fold_report(state, seq, at, record)
        fold_world(state, seq, at, record, previous)
    elif kind in ("prediction", "world") or kind.startswith("calibration."):
        fold_world(state, seq, at, record, None)
    elif kind.startswith("guard."):
        fold_guard(state, seq, record)
    elif kind.startswith("audit."):
        info = state.audits.setdefault(kind[len("audit."):],
                                       {"values": [], "last": None, "note": ""})
        # one still running: the reading before it still holds, or not
        if record.get("status") != "not read":
            info["last"] = (seq, record.get("status"))
        if record.get("status") == "trusted":
            info["values"].append((seq, record.get("value")))
            del info["values"][:-HISTORY]
            info["note"] = record.get("note", "")
    elif kind.startswith("reading."):
        state.read[kind[len("reading."):]] = (seq, record)
    elif kind == "action":
        proof = record.get("proof", {})
        for premise in proof.get("premises", []):
            # an approval lets one run (PROOF-02), a check one start
            state.grants.pop(premise, None)
            state.checks.pop(premise, None)
        state.actions.setdefault(record["lever"], []).append((seq, at, record.get("payload")))
        state.running[lever] = seq
        if lever not in state.ran_since:
            state.ran_since.append(lever)
        if proof.get("rule") == "unwind":
            state.unwinds[seq] = record.get("guard")
            # one unwind per reading past the bound (guard_rules)
            if record.get("guard") in state.guards:
                state.guards[record["guard"]]["unwound"] = (
                    (record.get("basis") or {}).get("premises") or [None])[0]
        # a proposal is gated once
        state.proposals.pop(proof.get("trigger"), None)
    elif kind == "outcome":
        if state.running.get(lever) == record.get("action"):
            del state.running[lever]
        spec = state.mandate["levers"].get(lever) if state.mandate else None
        if record.get("ok") and spec and spec["expects"] and state.level is not None:
            state.effects[record["action"]] = {"lever": lever, "expects": spec["expects"],
                                               "r0": state.level[1], "after": [],
                                               "steps": list(state.free_steps), "verdict": None}
        guard = state.unwinds.pop(record.get("action"), None)
        if guard in state.guards and record.get("ok"):
            state.guards[guard]["unwind_ok"] = True
    elif kind == "refusal":
        by_lever = state.counted["by_lever"]
        state.counted["refusals"] += 1
        by_lever[lever] = by_lever.get(lever, 0) + 1
        state.proposals.pop(record.get("proposal"), None)
    elif kind == "ask":
        state.open_asks[seq] = record
        state.asks_made += not record.get("canary")
        state.proposals.pop(record.get("proposal"), None)
        about = record.get("about")
        if about == "revoke":
            state.suspended[lever] = seq
        if about == "implausible":
            state.implausible_ask = seq
        if about == "ratchet":
            state.ratchet_forecasts.pop(lever, None)
    elif kind == "proposal" and record.get("choice") == "action":
        if record.get("claim") == "declared" and record.get("by") == "person":
            state.grants[seq] = {"lever": lever, "payload": record.get("payload"), "ask": None}
        elif record.get("claim") == "inferred":
            state.proposals[seq] = lever
            # one a check still holds may wait; no more are kept
            if len(state.proposals) > HISTORY:
                del state.proposals[next(iter(state.proposals))]
    elif kind == "escalation":
        state.escalating[seq] = record.get("to")
    elif kind == "answer":
        state.escalating.pop(record.get("escalation"), None)
    elif kind == "begun":
        waits = state.checking if record.get("what") == "check" else state.ratchet_forecasts
        waits[lever] = seq
    elif kind == "check":
        state.checking.pop(lever, None)
        if record.get("ok"):
            state.checks[seq] = lever
    elif kind == "forecast" and record.get("why") == "ratchet":
        state.ratchet_forecasts.pop(lever, None)
    elif kind in ("approval", "denial", "resolved"):
        if kind == "approval" and "lever" in record:
            state.grants[seq] = {"lever": lever, "payload": record.get("payload"),
                                 "ask": record.get("ask")}
        asked = state.open_asks.pop(record.get("ask"), None) or {}
        lever, about = lever or asked.get("lever"), asked.get("about")
        if kind == "approval" and lever and about in ("lever", "model"):
            # the ratchet counts these
            state.approvals[lever] = state.approvals.get(lever, 0) + 1
        if kind == "approval" and about == "revoke":
            state.suspended.pop(asked.get("lever"), None)
            state.misses[asked.get("lever")] = 0
        elif kind == "denial" and lever and about != "interrupted":
            state.approvals[lever] = 0          # "it did not happen" denies no lever
            state.ratchet_forecasts.pop(lever, None)        # no ratchet ask is due
        # settled (it ran), or seen: no ask again in it
        if about == "stuck" and asked.get("side"):
            state.side(asked["side"]).update(
                {"stuck": None} if kind == "resolved" else {"seen": True})
        if state.implausible_ask == record.get("ask"):
            state.implausible_ask = None
            # asked once in this stretch, answered or not
            state.implausible_answered = kind != "resolved"
    elif kind == "effect":
        state.effects.pop(record.get("action"), None)
        state.misses[lever] = (
            state.misses.get(lever, 0) + 1 if record.get("verdict") == "miss" else 0)
    elif kind == "exit" and is_number(record.get("uptime")):
        # the back-off (open point 31): a quick death's wait; a long run resets it
        wait = record.get("restart_in")
        state.run_ended = wait is None and not record.get("ended_by")
        if wait is None:
            state.backoff = None
        elif is_number(wait) and wait > 0:
            state.backoff = min(wait, BACKOFF_CEILING)
        elif record["uptime"] >= BACKOFF_RESET or state.backoff is None:
            state.backoff = 0
    elif kind == "start":
        state.run_ended = False
        state.restarts += state.backoff is not None
    elif kind == "pause":
        state.paused = True
        for info in state.guards.values():
            info["repause"] = False
    elif kind == "resume":
        state.paused, state.backoff = False, None
        for info in state.guards.values():
            # a guard still past its bound pauses it again at its next reading
            info["repause"] = info["past"]
    if (kind == "pause" or kind == "ask" and record.get("about") == "guard") \
            and record.get("guard") in state.guards:
        state.guards[record["guard"]]["acted"] = record.get("episode")
    if kind in ("action", "ask", "refusal") and record.get("by") == "controller" \
            and "side" in record and state.mandate is not None:
        # a controller's decision spends its excursion: deadband disarms, hold counts again
        side = state.side(record["side"])
        side["streak"] = []
        if state.mandate["controller"].get("deadband") is not None:
            side["armed"] = False
        if kind in ("action", "ask"):
            side["stuck"] = None            # it ran, or a person is asked: stuck no longer
        if kind == "ask":
            side["asked"] = True            # one ask per excursion, answered or not (DESIGN)
        if kind == "refusal" and record.get("stuck"):
            side["stuck"] = record["stuck"]     # written once per excursion and reason
    if state.implausible_answered and (kind == "report" or kind.startswith(("guard.", "audit."))) \
            and held_by(state) is None:
        # a plausible reading ends the stretch: the next one may ask
        state.implausible_answered = False
    return state


def fold_report(state, seq, at, record):
    state.last_report = (seq, at, record)
    status, value = record.get("status"), record.get("value")
    if status == "trusted":
        state.peak = value if state.peak is None else max(state.peak, value)
        base = state.pending or state.level
        state.last_step = value - base[1] if base is not None else None
        if state.level is not None and state.pending is None and len(state.ran_since) < 2:
            # a lever-free step, or the step of the one lever run since
            steps = state.lever_steps.setdefault(state.ran_since[0], []) if state.ran_since \
                else state.free_steps
            steps.append(value - state.level[1])
            del steps[:-HISTORY]
        # counted toward every run awaiting its verdict; a hit settles silently
        for run, effect in list(state.effects.items()):
            if effect["verdict"] is not None:
                continue
            effect["after"].append(value)
            verdict, why = judge_effect(
                effect["expects"], effect["r0"], effect["after"], effect["steps"])
            effect["stale"] = verdict == "waiting" and "refreshed" in why
            if verdict in ("hit", "not judged"):
                del state.effects[run]
                if verdict == "hit":
                    state.misses[effect["lever"]] = 0
            elif verdict != "waiting":
                effect["verdict"] = (verdict, why)  # the warden writes it as an `effect` record
        state.level, state.pending, state.ran_since = (seq, value), None, []
        state.trusted.append((seq, value))
        del state.trusted[:-HISTORY]
        state.trusted_at = at
    elif status == "unconfirmed":
        state.pending = (seq, value)
    else:
        # only the very next report can confirm an unconfirmed one (PLAUS-10)
        state.pending = None
    state.previous_implausible = status in ("implausible", "failed")
    for side_name, way, bound, lever in controller_sides(state.mandate):
        side = state.side(side_name)
        if status != "trusted":
            side["streak"] = []          # a report not trusted breaks "in a row"
            continue
        deadband = state.mandate["controller"].get("deadband")
        if not side["armed"] and (
            deadband is None
            or (value <= bound - deadband if way == "above" else value >= bound + deadband)
        ):
            # back past the bound by the deadband: the next excursion may act
            side["armed"] = True
        if crossed(way, bound, value):
            side["streak"].append(seq)
        else:
            # back inside: the excursion is over
            side.update(streak=[], asked=False, stuck=None, seen=False)


def judge_effect(expects, r0, after, steps):
    """Return (verdict, why) for a run that expected `expects` (way, size, within), open point 36;
    r0 is the last trusted reading before the run, `after` the trusted reports since."""
    way, size, within = expects
    if len(steps) < 3:
        return "not judged", "fewer than 3 steps of history: the metric's drift is not known"
    if all(step == 0 for step in steps):
        return "not judged", "the metric has never changed: no evidence either way"
    drift, noise = drift_and_noise(steps)
    zero_share = sum(1 for s in steps if s == 0) / len(steps)
    repeats = next((i for i, value in enumerate(after) if value != r0), len(after))
    if repeats == len(after) and zero_share ** repeats >= 0.01:
        return "waiting", (f"{repeats} exact repeat(s) of the reading before the run: "
                           f"the sensor may not have refreshed")
    sign = 1 if way == "up" else -1

    def outcome(n):
        moved = sign * (after[n - 1] - (r0 + n * drift))
        bar = 2 * noise * n ** 0.5
        if moved <= bar:
            return "none", moved
        if size is not None and abs(moved - size) > max(bar, size / 2):
            return "wrong size", moved
        return "hit", moved

    if len(after) < within:
        return "waiting", f"{len(after)} of {within} reports since the run"
    verdict, moved = outcome(within)
    if verdict == "hit":
        return "hit", f"moved {format_number(moved)} net of drift within {within} reports"
    if verdict == "wrong size":
        return "wrong size", (f"moved {format_number(moved)} net of drift, "
                              f"far off the expected {format_number(size)}")
    for n in range(within + 1, min(len(after), 2 * within) + 1):
        if outcome(n)[0] == "hit":
            return "late", f"showed its effect after {n} reports, later than within {within}"
    if len(after) < 2 * within:
        return "waiting", f"no effect within {within} reports yet; watching until {2 * within}"
    return "miss", (f"no {way} move beyond the metric's noise in {2 * within} reports "
                    f"(net {format_number(moved)})")


def fold_guard(state, seq, record):
    """A guard's reading: a trusted one past its bound starts (or goes on with) an episode; the
    first plausible one back inside ends it (open point 32). A failed, implausible or unread reading
    neither trips nor clears it (GUARD-06), nor does an unconfirmed one past the bound."""
    name = record["kind"][len("guard."):]
    info = state.guards.setdefault(name, {"last": None, "past": False, "episode": None,
                                          "unwind_ok": False, "previous_bad": False,
                                          "pending": None})
    status = record.get("status")
    if status == "not read":
        # a reading still running hides neither a failed one before it nor its own end
        return
    info["last"] = (seq, record.get("value"), status)
    if settles_guard(record):
        past = bool(record.get("past"))
        if past and not info["past"]:
            info["episode"], info["unwind_ok"] = seq, False
        elif not past:
            info["episode"] = None
        info["past"] = past
    info["previous_bad"] = status in ("failed", "implausible")
    info["pending"] = record.get("past") if status == "unconfirmed" else None


def settles_guard(record):
    """Whether a guard reading trips or clears its guard: a trusted one, or a plausible one back
    inside (open point 32); the fold and the proof's re-check both ask this."""
    return record.get("status") == "trusted" or (
        record.get("status") == "unconfirmed" and not record.get("past"))


# ---- a world's fold ----
# scores the rolling skill and coverage are taken over (open point 37)
ROLLING = 20


def fold_world(state, seq, at, record, previous):
    """Fold a report (the world's input, resolving or dropping the prediction) or a world record."""
    kind = record["kind"]
    if kind == "report":
        if record.get("status") == "trusted" and state.mandate and state.mandate["world"]:
            # kept only under a world command, their only reader (1,000 ventures: 18 MiB)
            state.world_reports.append((seq, at, record["value"]))
            del state.world_reports[:-HISTORY]
        p = state.prediction
        if p is not None and not p[1].get("resolves"):
            cadence = state.mandate["cadence"] if state.mandate else None
            gap = previous is None or previous[0] != p[1].get("report") or \
                (cadence is not None and at - previous[1] > 2 * cadence + 1)
            if gap or record.get("status") != "trusted":
                state.prediction = None  # dropped
            else:
                state.prediction = (p[0], dict(p[1], resolves=seq))
        elif p is not None:
            state.prediction = None  # its resolving report came and went unscored
    elif kind == "prediction":
        state.prediction = (seq, record)
        state.world_failing = False
        if "state" in record:           # written when the world's state changed
            state.world_state = record["state"]
    elif kind == "world":
        state.world_failing = not record.get("ok")
    elif kind.startswith("calibration."):
        state.scores.append((record.get("crps"), record.get("persistence"), record.get("coverage")))
        del state.scores[:-ROLLING]
        state.scored += 1
        state.prediction = None


# =============================================================================
# 7. The kernel: the gate and its re-check, a lever's run and end, the other events
# =============================================================================

# ---- the gate: a stored proof re-checked, then prove ----
Verdict = collections.namedtuple("Verdict", "ok proof why needs_ask asked stuck action",
                                 defaults=(None, "", False, None, None, None))
Verdict.__doc__ = """The gate's answer: ok with a proof, or why not (and whether a person may
approve it). asked: what the gate was asked, kept by the action so its proof re-checks from the
ledger alone. stuck: (reason, when) of a refusal that will not clear within the round. action:
the seq of the action written on it, as the warden sends it back to a rule."""


def check_proof(action_seq, action_at, action, records, since=(0, None)):
    """Return the problems found re-checking one stored action's proof against the ledger; [] when
    it holds. records: {seq: (at, record)} holding at least every record of the action's venture up
    to it after since[0], the seq of a snapshot whose states (since[1]) the fold starts from."""
    states, venture = dict(since[1] or {}), action.get("venture")
    for s in sorted(records):
        if s >= action_seq:
            break
        if s > since[0] and records[s][1].get("venture") == venture:
            fold_ledger(states, s, records[s][0], records[s][1])
    return recheck_action(states.get(venture), action_seq, action_at, action, records)


def fold_ledger(states, seq, at, record, parse=None):
    """Fold one record into its venture's state in `states`; return the state or None."""
    name = record.get("venture")
    if name == "self" or not isinstance(name, str) or not isinstance(at, int) \
            or fold_problem(record) is not None:
        # a record that does not read, or at no time, counts for nothing (avsmd stops on it)
        return None
    state = states.get(name) or states.setdefault(name, VentureState(name))
    fold(state, seq, at, record)
    if record.get("kind") == "mandate":
        state.mandate = parsed_or_none(parse or parse_mandate, record, seq)
    return state


def refolded(old, records):
    """Return the states `records` fold to, each keeping the mandate's parse (against its
    directory) and its problem from `old`, and the states of `old` they hold no record of."""
    states = {}
    known = {was.mandate_text: was.mandate for was in old.values() if was.mandate is not None}
    def parse(text, where):
        return known[text] if text in known else parse_mandate(text, where)
    for seq, at, record in records:
        fold_ledger(states, seq, at, record, parse)
    for name, was in old.items():
        state = states.setdefault(name, was)
        if state is not was:        # what is not folded from the ledger: the mandate's parse
            state.mandate, state.problem = was.mandate, was.problem
    return states


def recheck_action(state, seq, at, action, records):
    """Return the problems re-checking stored action #seq ([] when it holds): `prove`, at its `at`,
    on `state` folded from every earlier record of the venture, must give back its proof. Not a
    window: the gate reads what any earlier record left (an unanswered ask, an unspent approval, a
    deadband not re-armed), which no mandate resets."""
    proof = action.get("proof") if isinstance(action.get("proof"), dict) else {}
    problems, lever = [], action.get("lever")
    premises = proof.get("premises") if isinstance(proof.get("premises"), list) else []
    for p in premises:
        if p not in records:
            problems.append(f"premise #{p} is not in the ledger")
        elif records[p][1].get("claim") not in ("measured", "declared"):
            problems.append(f"premise #{p} is {records[p][1].get('claim')}: only measured and"
                            " declared records may be premises")
        elif records[p][1].get("kind") == "snapshot":
            problems.append(f"premise #{p} is a snapshot: a proof cites records, not their fold")
        elif p >= seq:
            problems.append(f"premise #{p} comes after the action")
    if proof.get("trigger") is not None and proof.get("trigger") in premises:
        problems.append("the trigger is cited as a premise")
    if state is None or state.mandate_seq is None:
        return problems + ["no mandate of the venture precedes the action"]
    basis, approval, check, exact = stored_basis(action, records)
    if not exact and basis[0] in ("approval", "proposal") and approval is None:
        problems.append(f"{lever} ran on an approval, and no approval of exactly this lever and "
                        f"payload is a premise")
        return problems
    why = basis_problem(state, action, basis, records)
    if why:
        problems.append(f"its basis does not hold: {why}")
    try:
        verdict = prove(state, lever, at, basis, trigger=proof.get("trigger"), approval=approval,
                        payload=action.get("payload"), check=check)
    except (KeyError, TypeError, ValueError) as err:
        return problems + [f"the gate cannot read it: {type(err).__name__} {err}"]
    if not verdict.ok:
        return problems + [f"the gate refuses it: {verdict.why}"]
    gave = verdict.proof
    if gave["rule"] != proof.get("rule"):
        problems.append(f"the gate's rule is {gave['rule']}, the proof says {proof.get('rule')}")
    what = {state.mandate_seq: "the mandate in force", approval: "the approval", check: "the check"}
    what.update({s: f"a run counted against the cap {state.mandate['levers'][lever]['cap_text']}"
                 for s, _, _ in state.actions.get(lever, []) if lever in state.mandate["levers"]})
    for p in gave["premises"]:
        if p not in premises:
            problems.append(
                f"#{p} ({what.get(p, 'a premise of the gate')}) is missing from the premises")
    for p in premises:
        if p not in gave["premises"] and p in records:
            problems.append(f"#{p} is cited, but the gate does not rest on it")
    if not problems and gave["premises"] != premises:
        problems.append("the premises are not in the gate's order")
    if exact and gave["steps"] != proof.get("steps"):
        differ = next((s for s in gave["steps"] if s not in (proof.get("steps") or [])), None)
        problems.append(
            "the steps are not the gate's" + (f": it says {differ!r}" if differ else ""))
    return problems


def stored_basis(action, records):
    """Return (basis, approval, check, exact): what the gate was asked of a stored action; one
    stored without a basis has them read back from its proof, and exact is False (no steps)."""
    proof = action.get("proof") or {}
    if isinstance(action.get("basis"), dict):
        b = action["basis"]
        return ((b.get("rule"), list(b.get("premises") or []), list(b.get("steps") or [])),
                action.get("approval"), action.get("check"), True)
    kinds = {p: records[p][1].get("kind") for p in proof.get("premises") or [] if p in records}
    reports = [p for p, k in kinds.items() if k == "report" or str(k).startswith("guard.")]
    approval = next((p for p, k in kinds.items() if k in ("approval", "proposal")), None)
    check = next((p for p, k in kinds.items() if k == "check"), None)
    rule = proof.get("rule")
    if rule == "stop":
        # the built-in stop, proposed by a model (a person's stop says proposal)
        rule = "permitted"
    return (rule, reports, []), approval, check, False


def basis_problem(state, action, basis, records):
    """Return why the basis a stored action names does not call for its lever now, or None: the
    function that made the basis is asked again, on the state folded to the action."""
    rule, premises, _ = basis
    lever, trigger, m = action.get("lever"), action.get("proof", {}).get("trigger"), state.mandate
    payload = action.get("payload")
    if m is None:
        return None                     # the gate says so
    trig = records.get(trigger, (None, {}))[1]
    if rule in CONTROLLERS and not CONTROLLERS[rule].by_model:
        if m["controller"]["kind"] != rule:
            return f"the mandate's controller is {m['controller']['kind']}, not {rule}"
        return controller_call_problem(state, lever, premises)
    if rule == "unwind":
        guard = unwind_guard(state, lever, payload)
        if guard is None:
            return f"no guard reading past its bound has {lever} with this payload as its unwind"
        info = state.guards[guard]
        if premises != [info["last"][0]]:
            return f"an unwind rests on guard {guard}'s last reading, #{info['last'][0]}"
        if info["unwind_ok"] or info.get("unwound") == premises[0]:
            return f"guard {guard}'s unwind already ran " + (
                "ok in this episode" if info["unwind_ok"] else f"on reading #{premises[0]}")
        return None
    if rule == "permitted":
        if [trig.get(k) for k in ("kind", "claim", "lever", "payload")] \
                != ["proposal", "inferred", lever, payload]:
            return f"its trigger #{trigger} is not a model's proposal of {lever} with this payload"
        if premises:
            return "a model's proposal is a trigger, never a premise"
        if trigger not in state.proposals:
            return f"proposal #{trigger} was answered already: a proposal is gated once"
        bar_ok, bar_why = calibration_bar(state) if trig.get("ranking") else (True, "")
        choice = {"choice": trig.get("choice"), "action": lever, "payload": trig.get("payload")}
        called = next(proposal_rule(state, trigger, choice, trig.get("by"), trig.get("backend"),
                                    held=None if bar_ok else bar_why), None)
        if isinstance(called, Gate):
            return None
        return f"proposal #{trigger} calls for no run: " + (
            called.record.get("why") or called.record["summary"] if called else "it is no action")
    if rule == "approval":
        if trig.get("kind") != "ask" or trig.get("lever") != lever:
            return f"its trigger #{trigger} is not an ask about {lever} that a person answered"
        grant = state.grants.get(action.get("approval"))
        return None if grant is None or grant.get("ask") == trigger else \
            f"approval #{action.get('approval')} answers ask #{grant.get('ask')}, not #{trigger}"
    if rule == "proposal":
        return None if trigger is None and not premises \
            else "a person's own proposal is its own approval, with no trigger"
    return f"{rule!r} is not a rule the gate knows"


def controller_call_problem(state, lever, premises):
    """Return why the controller does not call for `lever` on the reports `premises`, or None."""
    sides = [s for s in controller_sides(state.mandate) if s[3] == lever]
    if not sides:
        return f"the controller of the mandate does not run {lever}"
    if any(called == lever and reports == premises
           for _, called, reports, _ in controller_calls(state)):
        return None
    last, held, ctl = state.last_report, held_by(state), state.mandate["controller"]
    hold = ctl["hold"]
    if last is None or last[2].get("status") != "trusted":
        return f"the latest report (#{last[0]}) is not trusted" if last else "no report precedes it"
    if held:
        return f"{held[0]} (#{held[1]}) holds the venture implausible"
    if premises[-1:] != [last[0]]:
        return (f"the latest report is #{last[0]}, not #{premises[-1] if premises else '-'}: the"
                " controller acts on the latest report")
    value = last[2]["value"]
    name, way, bound, _ = next((s for s in sides if crossed(s[1], s[2], value)), sides[0])
    side = state.sides.get(name) or {"armed": True, "streak": []}
    if not crossed(way, bound, value):
        return (f"report #{last[0]} reads {format_number(value)}, not past {lever}'s bound"
                f" {format_number(bound)}")
    if not side["armed"]:
        back = bound - ctl["deadband"] if way == "above" else bound + ctl["deadband"]
        return (
            f"the deadband has not re-armed since {lever} last ran in this excursion: no trusted"
            f" report {'<=' if way == 'above' else '>='} {format_number(back)} since")
    streak = side["streak"]
    if len(streak) < hold:
        return (f"hold {hold} wants {hold} trusted reports past the bound in a row; "
                f"the run is {len(streak)}")
    cited = ", ".join("#" + str(r) for r in streak[-hold:])
    return f"the controller cites reports {cited}, not these"


BAR_LEAST = 5                   # scores needed before a ranking may run (WORLD-08)


def calibration_bar(state):
    """Return (whether a ranking may go to the gate, why) under the `calibration:` bar (WORLD-08,
    open point 37)."""
    bar = state.mandate["calibration"]
    if bar is None:
        return True, "the mandate sets no calibration: bar"
    skill, _ = rolling_scores(state.scores)
    n = len(state.scores)
    if n < BAR_LEAST:
        return False, (f"only {n} prediction(s) scored, {BAR_LEAST} needed "
                       f"(calibration: {format_number(bar)})")
    held = skill is None or skill < bar
    return not held, (f"rolling skill {shown_skill(skill)} over the last {n} "
                      f"{'is below' if held else 'meets'} the calibration bar {format_number(bar)}")


TEXT_MAX = 2000


def proposal_rule(state, seq, choice, by, backend, content_why=None, held=None):
    """A model's choice, written as proposal #seq, goes to the gate with the proposal as its
    trigger, never a premise; a lever that waits for a person is asked about once. content_why:
    what the file system said of a diff or file payload; held: why a ranking's top choice waits for
    a person (WORLD-08)."""
    m, lever, payload = state.mandate, choice.get("action"), choice.get("payload")
    named = lever in m["levers"] or lever == "stop"
    forbidden = lever in m["forbidden"]
    unnamed = (f"{lever} is {'forbidden' if forbidden else 'not permitted'} "
               f"by mandate #{state.mandate_seq}")

    def lever_ask(question, summary, **ranking):
        return write(state, "ask", about="lever", lever=lever, payload=payload,
                     proposal=seq, by=by, **ranking, question=question, summary=summary)
    if choice["choice"] == "action" and held and not forbidden and named:
        yield lever_ask(f"run {lever}? {backend} ranked it first (#{seq}), but {held}",
                        f"{lever} waits for a person: ranked first by {backend} (#{seq}); {held}",
                        ranking=True)
        return
    if choice["choice"] == "ask":
        if lever is not None and (forbidden or lever not in m["levers"]):
            yield from refusal(state, lever, unnamed,
                               f"the model's ask about {lever} refused: {unnamed}",
                               proposal=seq, by="model")
        else:
            yield write(state, "ask", claim="inferred", about="model", lever=lever,
                        proposal=seq, question=choice["question"][:TEXT_MAX],
                        summary=f"the model asks: {choice['question'][:200]}")
        return
    if choice["choice"] != "action":
        return
    spec = m["levers"].get(lever)
    why = None
    if forbidden or not named:
        why = unnamed
    elif spec is not None:
        why = payload_problem(spec, payload) or content_why
    waits = (why is None and spec is not None and not spec["delegated"]
             and (payload is not None or not spec["reversible"]))
    if why is None and not waits:
        verdict = yield Gate(
            lever, ("permitted", [], [f"proposal #{seq} (inferred) prompted this"]),
            payload=payload, trigger=seq, by="model",
            summary=f"{lever} runs: proposed by {backend} (#{seq})",
            extra={"payload": payload, "proposal": seq} if payload is not None
            else {"proposal": seq})
        if verdict.ok:
            return
        # asks, as the controller does
        why, waits = (None, verdict.why) if verdict.needs_ask else (verdict.why, False)
    if waits:
        if state.open_ask(lever=lever, payload=payload, about="lever") is None:
            yield lever_ask(
                f"run {lever}" + (" with the content below" if payload is not None else "")
                + f"? {backend} proposed it (#{seq})",
                f"{lever} waits for a person: proposed by {backend} (#{seq})"
                + (f"; {waits}" if isinstance(waits, str)
                   else " with content a model wrote" if payload is not None else ", irreversible"))
        return
    yield from refusal(state, lever, why, proposal=seq, by="model")


def unwind_guard(state, lever, payload):
    """Return the guard past its bound whose unwind is exactly `lever` with `payload`, or None."""
    for guard in state.mandate["guards"]:
        info = state.guards.get(guard["name"])
        if guard["unwind"] and info and info["past"] and guard["unwind"]["action"] == lever \
                and guard["unwind"]["payload"] == payload:
            return guard["name"]
    return None


RECHECK_KEPT = 1000     # records a re-check keeps whole behind the one it folds
# cited by seq from any distance
PREMISE_KINDS = ("mandate", "action", "approval", "proposal", "ask", "check")


def recheck_ledger(rows, states=None):
    """Yield (seq, problems) for every action in `rows` (seq, at, record), folding the ledger once
    (into `states`); memory stays bounded: a record RECHECK_KEPT behind keeps only what a premise's
    check reads."""
    states, records, recent, stubs = {} if states is None else states, {}, collections.deque(), {}
    for seq, at, record in rows:
        records[seq] = (at, record)
        if record.get("kind") not in PREMISE_KINDS:
            recent.append(seq)
            if len(recent) > RECHECK_KEPT:
                old = recent.popleft()
                at_old, r = records[old]
                key = (r.get("kind"), r.get("claim"), r.get("venture"))
                records[old] = (at_old, stubs.get(key) or stubs.setdefault(
                    key, dict(zip(("kind", "claim", "venture"), key))))
        if record.get("kind") == "action" and record.get("venture") != "self":
            yield seq, recheck_action(states.get(record.get("venture")), seq, at, record, records)
        fold_ledger(states, seq, at, record)


APPROVAL_TO_WRITE = 0   # do_approve asks: would the approval it is about to write let it run?


def prove(state, lever, now, basis, trigger=None, approval=None, payload=None, check=None):
    """Return the Verdict on running `lever` now: a proof from measured and declared premises, or
    why not. basis: (rule, premise seqs, steps), what calls for the run. approval: the seq of an
    unspent declared approval (or a person's proposal) of exactly this lever and payload. check: the
    seq of the lever's passed check, cited last. recheck_action re-checks with this same function:
    there is no second list of rules."""
    rule, basis_premises, basis_steps = basis
    m = state.mandate
    if m is None:
        return Verdict(False, why=f"venture {state.name} has no mandate that can run")
    steps = [f"mandate #{state.mandate_seq} is in force for {state.name}"]
    unwind = unwind_guard(state, lever, payload) if rule == "unwind" else None
    if state.paused and lever != "stop" and unwind is None:
        return Verdict(False, why=f"{state.name} is paused; resume it first")
    if lever in m["forbidden"]:
        return Verdict(False, why=f"{lever} is forbidden by mandate #{state.mandate_seq}")
    # built in, it takes no content: refused as any such lever is
    if lever == "stop" and payload is not None:
        return Verdict(False, why=payload_problem({"name": "stop", "takes": None}, payload))
    premises = [state.mandate_seq] + basis_premises
    if lever == "stop":
        steps += basis_steps + ["stop is built in: it pauses the venture"]
        return Verdict(True, {"rule": "proposal" if rule == "proposal" else "stop",
                              "premises": premises, "steps": steps, "trigger": trigger},
                       asked=gate_question(basis, None, None, now))
    if lever not in m["levers"]:
        return Verdict(False, why=f"{lever} is not permitted by mandate #{state.mandate_seq}")
    blocking = guards_past(state)
    if blocking and unwind is None:
        name, episode = blocking[0]
        return Verdict(False, why=f"guard {name} reads past its bound (since #{episode}); only stop"
                                  " and its unwind run")
    spec = m["levers"][lever]
    steps.append(f"{lever} is permitted: cap {spec['cap_text']},"
                 f" {'reversible' if spec['reversible'] else 'irreversible'}")
    if lever in state.running:
        return Verdict(False, why=f"{lever} is still running (action #{state.running[lever]})")
    if lever in state.checking:     # its check decides; no second check of one lever starts
        return Verdict(False, why=f"{lever}'s check is still running; it runs if that check passes")
    unknown = state.open_ask(about="interrupted", lever=lever)
    if unknown is not None:
        return Verdict(False, why=f"whether {lever}'s interrupted run (action"
                                  f" #{state.open_asks[unknown].get('action')}) happened is not"
                                  f" known; answer ask #{unknown} first (avsm approve or deny"
                                  f" {unknown})")
    stale = [s for s, e in state.effects.items() if e["lever"] == lever and e.get("stale")]
    if stale:
        return Verdict(False, why=f"the effect of action #{stale[0]} waits on a sensor that may"
                                  f" not have refreshed; {lever} waits with it")
    used = cap_window(state, lever, now)
    if len(used) >= spec["cap"][0]:
        frees = min(at for seq, at, _ in state.actions[lever] if seq in used) + spec["cap"][1]
        return Verdict(False, why=f"{lever} reached its cap {spec['cap_text']}: {len(used)} runs"
                                  " in the window", stuck=("cap", frees))
    steps.append(
        f"{len(used)} of {spec['cap'][0]} runs used in the last {format_duration(spec['cap'][1])}")
    problem = payload_problem(spec, payload)
    if problem:
        return Verdict(False, why=problem)
    budget, spent = spec["budget"], []
    if budget:
        spent = [run for run in state.actions.get(lever, []) if run[1] > now - budget["per"]]
        total = sum(p[budget["field"]] for _, _, p in spent) + payload[budget["field"]]
        if total > budget["max"]:
            frees, left = None, total
            for seq, at, p in sorted(spent):
                left -= p[budget["field"]]
                if left <= budget["max"]:
                    # the spend that slides out of the window then makes room
                    frees = at + budget["per"]
                    break
            return Verdict(False, why=f"{lever} would spend {format_number(total)}"
                                      f" {budget['field']} in {format_duration(budget['per'])},"
                                      f" past its budget {format_number(budget['max'])}",
                           stuck=("budget", frees))
        steps.append(
            f"{format_number(total)} of {format_number(budget['max'])} {budget['field']} spent in"
            f" the last {format_duration(budget['per'])}")
    if spec["run"] == "mail.send":
        dropped = write_mail(payload, "avsm").dropped
        steps.append("From: is set by avsm (adapters.mail.from in config.yaml)"
                     + (f"; the message's own {', '.join(h + ':' for h in dropped)} dropped"
                        if dropped else ""))
    if spec["takes"] in ("diff", "file"):
        steps.append(
            f"its {spec['takes']} stays inside the venture directory: checked on the file system"
            " when it was proposed, which the ledger alone cannot re-check")
    if unwind is not None:
        steps.append(
            f"guard {unwind} reads past its bound, and this is its declared unwind with its exact"
            " payload")
    elif approval is not None:
        grant = ({"lever": lever, "payload": payload, "ask": trigger}
                 if approval == APPROVAL_TO_WRITE else state.grants.get(approval))
        if grant is None:
            return Verdict(False, why=f"#{approval} is no unspent approval: a person's approval"
                                      " lets exactly one run")
        if grant["lever"] != lever or grant["payload"] != payload:
            return Verdict(False, why=f"approval #{approval} is for {grant['lever']}"
                           + (" with other content" if grant["lever"] == lever else "")
                           + f", not this {lever}")
        if rule != "proposal":
            rule = "approval"
        premises.append(approval)
        steps.append(
            f"approval #{approval} is a person's answer for exactly this lever and payload")
    elif rule == "permitted" and payload is not None and not spec["delegated"]:
        return Verdict(False, why=f"{lever} would run content a model wrote and is not delegated;"
                                  " a person must approve it", needs_ask=True)
    elif not spec["reversible"] and (not spec["delegated"] or lever in state.suspended):
        suspended = (
            f" (its delegation is suspended until ask #{state.suspended[lever]} is approved)"
            if lever in state.suspended else "")
        return Verdict(False, why=f"{lever} is irreversible and not delegated{suspended}; a person"
                                  " must approve it", needs_ask=True)
    elif not spec["reversible"]:
        steps.append(
            f"{lever} is delegated by the mandate: it runs unasked, intent before, outcome after")
    steps = steps[:1] + basis_steps + steps[1:]
    cited = sorted(set(used) | {seq for seq, _, _ in spent})
    premises += cited
    if check is not None:
        if state.checks.get(check) != lever:
            return Verdict(
                False, why=f"#{check} is no passed check of {lever} that is not yet spent")
        premises.append(check)
        steps.append(f"check #{check} passed")
    return Verdict(True, {"rule": rule, "premises": premises, "steps": steps, "trigger": trigger},
                   asked=gate_question(basis, approval, check, now))


def payload_problem(spec, payload):
    """Return why `payload` does not fit what the lever takes, or None."""
    takes, name = spec["takes"], spec["name"]
    if takes is None:
        return None if payload is None else f"{name} takes no content, and a payload was given"
    if takes == "json" and not isinstance(payload, dict):
        return f"{name} takes json: its payload must be an object"
    if takes != "json" and not isinstance(payload, str):
        return f"{name} takes {takes}: its payload must be text"
    if spec["run"] == "mail.send":
        try:
            write_mail(payload, "avsm")
        except ValueError as err:
            return f"{name} sends mail, and {err}"
    budget = spec["budget"]
    if budget:
        value = payload.get(budget["field"]) if isinstance(payload, dict) else None
        if not is_number(value):
            return (
                f"{name} has a budget on {budget['field']}, and the payload gives no number for it")
    return None


# ---- mail.send: the sender is avsm's to set ----
MAIL_SENDER_HEADERS = ("from", "sender", "return-path")
MAIL_HEADER_NAME = r"[!-9;-~]+"      # RFC 5322 field-name
Mail = collections.namedtuple("Mail", "text dropped")
Mail.__doc__ = "The message mail.send pipes, and the sender headers of its own it dropped."


def write_mail(message, sender):
    """Return the Mail mail.send pipes: `From: sender`, then the message less its own
    MAIL_SENDER_HEADERS; ValueError says why it cannot be sent as it stands.
    message ::= header+ blank-line body      header ::= name ':' text (WSP text)*
    lines end LF or CRLF"""
    # a bare CR is refused: a mail program may take it as a line end
    if "\r" in message.replace("\r\n", ""):
        raise ValueError("the message has a bare CR; end its lines with LF or CRLF")
    lines = message.split("\n")
    blank = next((i for i, line in enumerate(lines[:-1]) if line in ("", "\r")), None)
    if blank is None:
        raise ValueError(
            "the message has no blank line; write its headers (To:, Subject:), a blank line, then"
            " the body")
    if blank == 0:
        raise ValueError(
            "the message has no headers before its blank line; write To: and Subject: first")
    kept, dropped, dropping = [], [], False
    for number, line in enumerate(lines[:blank], 1):
        if line[:1] in (" ", "\t"):
            if number == 1:
                raise ValueError(
                    "the message begins with a folded line; its first line must be a header (Name:"
                    " value)")
        else:
            name, colon, _ = line.partition(":")
            if not colon or not re.fullmatch(MAIL_HEADER_NAME, name):
                raise ValueError(f"line {number} of the message is not a header (Name: value):"
                                 f" {json.dumps(line[:60])}")
            dropping = name.lower() in MAIL_SENDER_HEADERS
            if dropping:
                dropped.append(name)
        if not dropping:
            kept.append(line)
    end = "\r\n" if lines[0].endswith("\r") else "\n"
    text = f"From: {sender}{end}" + "".join(line + "\n" for line in kept) + "\n".join(lines[blank:])
    return Mail(text, dropped)


def mail_to_send(spec, cfg, payload):
    """Return (mail, why not) a mail.send lever pipes for `payload` (CONFIG-07: it needs adapters:
    mail: in config.yaml)."""
    mail, problem = None, "mail.send needs adapters: mail: in config.yaml and a text payload"
    sender = (cfg["adapters"].get("mail") or {}).get("from")
    if spec is not None and spec["run"] == "mail.send" and sender and isinstance(payload, str):
        try:
            mail = write_mail(payload, sender)
        except ValueError as err:
            problem = f"mail.send refused the message: {err}"
    return mail, problem


def gate_question(basis, approval, check, now):
    """Return what an action record keeps of the gate's question (Verdict.asked)."""
    rule, premises, steps = basis
    asked = {"basis": {"rule": rule, "premises": list(premises), "steps": list(steps)}, "at": now}
    if approval is not None:
        asked["approval"] = approval
    if check is not None:
        asked["check"] = check
    return asked


def guards_past(state):
    """Return [(guard, seq of its episode's first reading)] for guards reading past their bound."""
    return [(name, info["episode"]) for name, info in state.guards.items() if info["past"]]


def cap_window(state, lever, now):
    """Return the seqs of `lever`'s runs inside its cap's sliding window at `now`."""
    period = state.mandate["levers"][lever]["cap"][1]
    return [seq for seq, at, _ in state.actions.get(lever, []) if at > now - period]


# ---- a lever the gate proved: its action, then its program started apart ----
def lever_programs(spec):
    """Return the programs in the venture directory a lever of `spec` runs (none for stop,
    research, mail.send): their owners are checked before its action is written."""
    return [spec["run"]] if spec is not None and spec["run"] not in (None, "mail.send") else []


def gated(state, gate, now, cfg):
    """The event of a Gate: return the gate's Verdict on its lever at `now`, and what running one
    it proved calls for (lever_proved; nothing for a refusal, which the rule writes)."""
    verdict = prove(state, gate.lever, now, gate.basis, trigger=gate.trigger,
                    approval=gate.approval, payload=gate.payload, check=gate.check)
    return verdict, lever_proved(state, gate, verdict, cfg) if verdict.ok else ()


def lever_proved(state, gate, verdict, cfg):
    """The event of a lever the gate proved (`verdict`): yield a Check of one with `check:` not yet
    checked (open point 27), then its start or its refusal; else its action, then a Launch of its
    program and the outcome of one that cannot start. One that another user could change (Owners)
    is refused before any action."""
    lever, by, side, extra = gate.lever, gate.by, gate.side, gate.extra or {}
    spec = state.mandate["levers"].get(lever)
    if spec is not None and spec["check"] and gate.check is None:
        # the payload and each audit's latest note (AUDIT-07), never a reading (READING-11)
        audits = {name: info.get("note", "") for name, info in state.audits.items()}
        unstarted = yield Check(gate, verdict, {"venture": state.name, "lever": lever,
                                                "payload": extra.get("payload"), "audits": audits},
                                spec["check"], CHECK_TIMEOUT)
        if unstarted:
            yield from refusal(state, lever, f"its check could not start: {unstarted}",
                               f"{lever} refused: its check could not start", by=by)
        else:
            yield from begun(state, "check", lever)     # the gate refuses it until its check ends
        return
    payload, proposal = extra.get("payload"), extra.get("proposal")
    unsafe = yield Owners(lever_programs(spec))
    if unsafe and lever != "stop":      # before its action: a lever others could change never runs
        yield from refusal(state, lever, f"{unsafe.why}; {unsafe.fix}",
                           f"{lever} refused: another user could change what it runs; "
                           f"{unsafe.fix}", by=by, **some(side=side, proposal=proposal))
        return
    mail, mail_problem = mail_to_send(spec, cfg, payload)
    seq = yield from lever_ran(state, lever, verdict, gate.summary, by, side, gate.extra)
    if lever == "stop":
        return
    data = (None if payload is None
            else (payload if isinstance(payload, str) else json.dumps(payload)).encode())
    run, more = spec["run"], {}
    if lever == "research":     # a question out to the config's command, inferred facts back
        run, more = cfg.get("research"), {"cwd": state.directory, "head": REPLY_MAX}
        data = json.dumps({"venture": state.name, "question": payload}).encode()
        if not run:
            why = "config.yaml names no research: command"
            yield from unstarted_outcome(state, lever, seq, why, why + " (no provider is built in)")
            return
    elif run == "mail.send":
        if mail is None:
            yield from unstarted_outcome(state, lever, seq, "", mail_problem)
            return
        run, data = cfg["adapters"]["mail"]["command"], mail.text.encode()
    file = payload if spec["takes"] == "file" and isinstance(payload, str) and not more else None
    unstarted = yield Launch(lever, seq, run, data, more, file, lever_programs(spec) == [run],
                             spec["timeout"])
    if unstarted:
        yield from unstarted_outcome(state, lever, seq, unstarted)


# ---- what came of a program: the record its end writes ----
def lever_ran(state, lever, verdict, summary, by, side=None, extra=None):
    """Yield the action the gate proved; stop's meaning follows it: a pause and an ok outcome."""
    seq = yield Write(action_record(state, lever, verdict, summary, by, side, extra),
                      verdict.asked["at"])
    if lever == "stop":
        yield Pause(new_record("pause", state.name,
                               summary=f"the stop lever (action #{seq}) paused {state.name}"))
        yield write(state, "outcome", lever=lever, action=seq, ok=True, status="exit 0", duration=0,
                    note="", summary=f"stop ok: {state.name} is paused")
    return seq


def action_record(state, lever, verdict, summary, by, side=None, extra=None):
    """Return the action record of a lever the gate proved (`verdict`)."""
    asked = verdict.asked
    return new_record("action", state.name, lever=lever, proof=verdict.proof, by=by,
                      summary=summary, basis=asked["basis"],
                      **{k: asked[k] for k in ("approval", "check") if k in asked},
                      **some(side=side), **(extra or {}))


def lever_outcome(state, lever, seq, status, ended_by, duration, timeout, note, lines):
    """Yield the outcome of `lever` (action #seq), after research's facts from its output `lines`:
    ok only when it exited 0 and nothing (not even an oversized output) ended it."""
    ok, how = status == 0 and ended_by is None, describe_status(status)
    if ok and lever == "research":
        yield from fact_records(state, seq, lines)
    if ended_by == "pause":
        summary = f"{lever} stopped by the pause of {state.name} ({how})"
    elif ended_by == "timeout":
        summary = f"{lever} failed: past its time limit {format_duration(timeout)}, ended ({how})"
    elif ended_by == "stop":
        summary = f"{lever} stopped: avsmd is stopping ({how})"
    else:
        summary = f"{lever} {'ok' if ok else 'failed: ' + how} in {duration:g}s"
    yield write(state, "outcome", lever=lever, action=seq, ok=ok, status=how,
                ended_by=ended_by, duration=duration, note=note, summary=summary)


def fact_records(state, seq, lines):
    """Yield the inferred fact records of the research lever's action #seq, from its output."""
    for line in lines:
        try:
            item = read_json(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(item, dict) and isinstance(item.get("fact"), str) \
                and isinstance(item.get("source"), str):
            fact, source = item["fact"], item["source"]
            yield write(state, "fact", action=seq, fact=fact[:TEXT_MAX], source=source[:TEXT_MAX],
                        summary=f"fact from {source[:80]}: {fact[:160]}")


def unstarted_outcome(state, lever, action, note, why=None):
    """Yield the outcome of a lever that did not start (`why`, or error `note`): not ok, no time."""
    yield write(state, "outcome", lever=lever, action=action, ok=False,
                status="not started", duration=0, note=note[:NOTE_MAX],
                summary=f"{lever} failed: {why}" if why else f"{lever} failed to start: {note}")


def begun(state, what, lever):
    """Yield the record of a check or a ratchet's forecast started: folded, it holds the lever until
    its check or forecast record, or the ask, is written."""
    yield write(state, "begun", what=what, lever=lever,
                summary=f"{lever}'s check started" if what == "check"
                else f"a forecast started, for the ask to delegate {lever}")


CHECK_TIMEOUT = 60      # seconds a lever's check may take; a check cut off did not pass


def check_rule(state, gate, verdict, status, ended_by, note):
    """A lever's check ended (open point 27) with exit `status`, or `ended_by` early: once it
    passed, the gate proves the lever again with the check among its premises, and only then does
    it run."""
    lever, by, side, extra = gate.lever, gate.by, gate.side, gate.extra
    ok = status == 0 and not ended_by
    said = "passed" if ok else "refused it: " + (ended_by or describe_status(status))
    seq = yield write(state, "check", lever=lever, ok=ok, status=describe_status(status),
                      note="" if ok else note[-NOTE_MAX:], summary=f"{lever}'s check {said}")
    if not ok:
        yield from refusal(state, lever, f"its check refused it (#{seq})",
                           f"{lever} refused by its check (#{seq})", by=by, check=seq)
        return
    asked = verdict.asked
    basis = tuple(asked["basis"][k] for k in ("rule", "premises", "steps"))
    # reports came in while it ran: the action rests on what calls for it now, or on nothing
    if basis[0] == "unwind":
        guard = (extra or {}).get("guard")
        info = state.guards.get(guard)
        basis = unwind_basis(guard, info["last"][0]) if info and info["past"] else None
    elif basis[0] in CONTROLLERS:
        call = next(((reports, why) for _, called, reports, why in controller_calls(state)
                     if called == lever), None)
        basis = controller_basis(state, *call) if call else None
    why = f"what called for it no longer does: the latest reading does not call for {lever}"
    if basis is not None:
        verdict = yield Gate(lever, basis, payload=(extra or {}).get("payload"),
                             trigger=verdict.proof["trigger"], approval=asked.get("approval"),
                             by=by, side=side, extra=extra, summary=gate.summary, check=seq)
        why = None if verdict.ok else verdict.why
    if why is not None:
        yield from refusal(state, lever, why, f"{lever} refused after its check passed: {why}",
                           by=by, check=seq)


def starts_kept(state, again):
    """Whether the warden's start starts the kept `run` program: avsmd's own start does, as a
    service manager's boot does; a warden started `again` after it died leaves one ended whose
    last exit its `restart:` did not restart (VENTURE-17)."""
    return not (again and state.run_ended)


def run_started(state, pid, err=None):
    """Yield the record of the kept `run` program started as `pid` (a restart when its last exit
    said so), or not (`err`): its start, or its exit."""
    if err is not None:
        yield write(state, "exit", status="not started", summary=f"run could not start: {err}")
        return
    yield write(state, "start", pid=pid, command=state.mandate["run"],
                summary=f"run {'' if state.backoff is None else 're'}started (pid {pid})")


def restart_rule(state, pid, status, ended_by, uptime, active):
    """Yield the records of the kept `run` program's end; return (again, delay): a quick death
    after a restart doubles the folded back-off (open point 31); one a new mandate ended
    starts its new command at once (VENTURE-07), as does one a pause ended after a resume."""
    policy = state.mandate["restart"] if state.mandate else "never"
    renewed = ended_by in ("a new mandate", "pause") and active and bool(state.mandate["run"])
    again = renewed or (ended_by is None and active
                        and (policy == "always" or (policy == "on-failure" and status != 0)))
    quick = again and not renewed and uptime < QUICK_DEATH and state.backoff is not None
    delay = next_backoff(state.backoff) if quick else 0
    how = describe_status(status)
    why = f"stopped by {'the pause' if ended_by == 'pause' else ended_by}" if ended_by else how
    next_words = ((f"; restarting in {delay}s" if delay else "; restarting now") if again
                  else "; not restarted")
    yield write(state, "exit", pid=pid, status=how, uptime=round(uptime, 3),
                restart_in=delay if again else None, **some(ended_by=ended_by),
                summary=f"run (pid {pid}) ended: {why} after {uptime:.1f}s{next_words}")
    if again and delay >= BACKOFF_CEILING and state.open_ask(about="backoff") is None:
        yield write(state, "ask", about="backoff",
                    question=f"run keeps dying within {QUICK_DEATH}s; it now waits {delay}s between"
                             " starts. Look at it?",
                    summary=f"run keeps dying; back-off reached its ceiling of {BACKOFF_CEILING}s")
    return again, delay


def next_backoff(previous):
    """Return the next wait of a back-off (open point 31)."""
    return min(BACKOFF_CEILING, previous * 2 or BACKOFF_FIRST)


def interrupted_rule(state, now, n):
    """RUN-10: a lever a dead warden left running is never run again blindly: its outcome is not
    known, so an ask holds it until a person says whether it happened. A check it left did not
    pass (its lever did not run); a ratchet's forecast it left is made again (`n`: the config's
    ratchet)."""
    for lever, seq in list(state.checking.items()):
        yield write(
            state, "check", lever=lever, ok=False, status="unknown",
            note="the warden ended while it ran",
            summary=f"{lever}'s check (#{seq}) was cut off: the warden ended while it ran; "
                    f"{lever} did not run")
    for lever in list(state.ratchet_forecasts):
        yield from ratchet_rule(state, lever, n, again=True)
    for lever, seq in list(state.running.items()):
        began = next((at for s, at, _ in state.actions.get(lever, []) if s == seq), None)
        at_most = max(0, round(now - began)) if began is not None else None
        yield write(
            state, "outcome", lever=lever, action=seq, ok=False, status="unknown",
            duration=at_most,
            note="the warden ended while it ran; whether it finished is not known"
                 + (f"; it ran at most {at_most} s" if at_most is not None else ""),
            summary=f"{lever} (action #{seq}) was cut off: the warden ended while it ran")
        yield write(
            state, "ask", about="interrupted", lever=lever, action=seq,
            question=f"did {lever} happen?",
            summary=f"did {lever} happen? action #{seq} was running when the warden ended; "
                    f"{lever} waits for the answer (approve: it did, deny: it did not)")
    yield from unanswered(state, "the warden ended before the answer came")


def ratchet_rule(state, lever, n, forecast=None, again=False):
    """Yield what an approval of `lever` (or its forecast in: (seq, line), (None, None) when cut
    short) calls for: the forecast, its start written, then the ask once it is in (FORECAST-01).
    again: the forecast a dead warden left is made again."""
    waits = forecast is None and not again and lever in state.ratchet_forecasts
    if not ratchet_due(state, lever, n) or waits:
        return
    if forecast is None and (yield Forecast(lever)):
        yield from begun(state, "forecast", lever)
        return
    path, text, why = yield ReadMandate()
    yield Write(ratchet_ask(state, lever, path, text, why, *(forecast or (None, None))))


def ratchet_ask(state, lever, path, text, why, forecast_seq=None, forecast_line=None):
    """Return the ratchet ask: delegate `lever`, carrying the mandate file's `text` changed to say
    so (delegate_lever), or `why` it cannot."""
    new = None
    if text is not None:
        try:
            new = delegate_lever(text, lever, path)
        except (Fail, ValueError) as err:
            why = str(err)
    question = (
        f"delegate {lever}? You approved it {state.approvals[lever]} times; approving this writes "
        f"delegated: true on {lever} in {path} and adopts it"
        + (f" ({forecast_line}, #{forecast_seq})" if forecast_seq else ""))
    return new_record(
        "ask", state.name, about="ratchet", lever=lever, by="self", mandate=new,
        question=question if new else f"{question} (edit it by hand: {why})",
        forecast=forecast_seq,
        summary=f"self proposes delegating {lever} after {state.approvals[lever]} approvals")


# ---- forecasts ----
# A forecast (open point 39): a Monte Carlo of `seeds` paths over `days`, resampling lever-free
# steps, and a lever's own where the controller would run it within its cap. It never authorizes.
TOO_LITTLE = "too little history to forecast"


def forecast(facts, seed=0):
    """Return the forecast of `facts` (see forecast_paths), or why there is none."""
    try:
        result = forecast_paths(facts, seed)
        finite = all(abs(result.get(k, 0)) < float("inf") for k in ("median", "p10", "p90"))
    except OverflowError:
        finite = False
    return (
        result if finite else {"too_little": f"{TOO_LITTLE}: its numbers are too large to add up"})


FORECAST_BLOCKS = 2000  # a path is stepped in at most this many blocks of report steps


def forecast_paths(facts, seed=0):
    """Return {"median", "p10", "p90", "days", "seeds", "decimals"} at the horizon, or
    {"too_little": why}; each path starts with one run of `facts["first"]` when it names a lever.
    A block of k report steps moves by k resampled lever-free steps (normal past 8)."""
    import random
    steps, history = facts["free_steps"], facts["history"]
    if len(steps) < 3:
        return {"too_little": f"{TOO_LITTLE}: {len(steps)} lever-free step(s) of history, 3 needed"}
    total = forecast_steps(facts)
    if not total:
        return {"too_little": "forecasts are off (seeds: 0)"}
    drift, noise = drift_and_noise(steps)
    blocks = min(total, FORECAST_BLOCKS)
    k = total / blocks
    seconds = k * facts["cadence"]
    effects = lever_effects(facts["levers"], drift)
    low, high = facts["range"] or (None, None)
    rng = random.Random(seed)
    ends, spreads = [], []  # each path's end, held to the range; and where it would be if not held
    for _ in range(facts["seeds"]):
        value = history[-1] if history else 0.0
        if facts.get("first") in effects:
            value += rng.choice(effects[facts["first"]])
        unheld = value
        allowance = {name: 0.0 for name in effects}
        for block in range(blocks):
            n = int((block + 1) * k) - int(block * k)  # adding up to the horizon exactly
            if n <= 8:
                move = sum(rng.choice(steps) for _ in range(n))
            else:
                move = rng.gauss(n * drift, noise * n ** 0.5)
            value, unheld = value + move, unheld + move
            for way, bound, lever in facts["sides"]:
                if lever not in effects:
                    continue
                allowance[lever] = cap_allowance(facts, lever, allowance[lever], seconds)
                while allowance[lever] >= 1 and crossed(way, bound, value):
                    effect = rng.choice(effects[lever])
                    if (effect >= 0) == (way == "above"):
                        break  # this lever does not bring the metric back: it is not run
                    value, unheld = value + effect, unheld + effect
                    allowance[lever] -= 1
            if low is not None:
                value = min(max(value, low), high)
        ends.append(value)
        spreads.append(unheld)
    ends.sort()
    spreads.sort()
    width = quantile(spreads, 0.9) - quantile(spreads, 0.1)
    span = (high - low) if low is not None else 10 * (max(history) - min(history) if history else 0)
    if width > span:
        return {"too_little": f"{TOO_LITTLE}: its 80% interval "
                              f"({format_number(round(width, 2))} wide) is wider than "
                              + ("the metric's range" if low is not None
                                 else "ten times the span of the history")}
    idle = sorted({lever for _, _, lever in facts["sides"] if lever not in effects})
    return dict(forecast_result(facts, ends, facts["days"]), assumes_idle=idle)


def forecast_steps(facts):
    """Return the report steps to a forecast's horizon, or 0 when forecasts are off."""
    if facts["seeds"] < 1 or facts["days"] <= 0:
        return 0
    return max(1, int(facts["days"] * 86400 / facts["cadence"]))


def cap_allowance(facts, lever, allowance, seconds):
    """Return a lever's runs allowed after `seconds` more of its cap, at most its count."""
    count, period = facts["levers"][lever]["cap"]
    return min(count, allowance + count * seconds / period)


def forecast_result(facts, ends, days):
    """Return a forecast's figures from its paths' sorted ends."""
    median, p10, p90 = spread(ends)
    return {"median": median, "p10": p10, "p90": p90, "days": days, "seeds": facts["seeds"],
            "decimals": decimals_of(facts["history"])}


def ratchet_due(state, lever, n):
    """Whether self should propose delegating `lever` (SELF-02): `ratchet: n` approvals since the
    mandate (a denial resets the count)."""
    spec = state.mandate["levers"].get(lever) if state.mandate else None
    if not n or spec is None or spec["delegated"] or (spec["reversible"] and not spec["takes"]):
        return False
    return state.approvals.get(lever, 0) >= n \
        and state.open_ask(about="ratchet", lever=lever) is None


def approval_rule(state, seq, ask, args, now, ratchet=None, mandate=None):
    """A person's yes to ask #seq (`args`: their request; its `payload`, content they edited): a
    canary's is its canary record; a ratchet ask's, the change it carries (parsed as `mandate`)
    adopted. Else the gate first proves the lever as if the approval were written, so a refusal
    leaves the ask open and no approval spent (nor does a payload the venture's files refuse);
    once it runs, ratchet_rule. Raises Fail (65) once the refusal is written."""
    if ask.get("canary"):
        yield Write(canary_result(state, seq, ask, True)[0])
        return
    if ask.get("about") == "ratchet":
        yield from ratchet_approved_rule(state, seq, ask, mandate,
                                         os.path.join(state.directory, "mandate.yaml"))
        return
    lever, edited = ask.get("lever"), "payload" in args
    payload = args["payload"] if edited else ask.get("payload")
    if lever is None or ask.get("about") not in ("lever", "model"):
        yield write(state, "approval", ask=seq, summary=f"a person answered ask #{seq}: yes")
        return
    problem = yield from payload_measured(state, lever, payload)
    basis = ("approval", [], [f"ask #{seq}: {ask.get('question')}"])
    verdict = prove(
        state, lever, now, basis, trigger=seq, approval=APPROVAL_TO_WRITE, payload=payload)
    stays = f"; ask #{seq} stays open"
    if not problem and verdict.ok:
        approval = yield write(
            state, "approval", ask=seq, lever=lever, payload=payload, edited=edited,
            summary=f"a person approved {lever} (ask #{seq})"
            + (" with content they edited" if edited else ""))
        verdict = yield Gate(lever, basis, payload=payload, trigger=seq, approval=approval,
                             by="person",
                             summary=f"{lever} runs: approved by a person (#{approval})",
                             extra={"payload": payload} if payload is not None else None)
        if verdict.ok:
            yield from unstick_rule(state, ask.get("side"),
                                    f"{lever} ran again, approved in #{approval}")
            yield from ratchet_rule(state, lever, ratchet)
            return
        # the approval just written is the only change since the gate said yes
        stays = ""
    why = problem or verdict.why
    yield from refusal(state, lever, why, f"{lever} refused on approval of #{seq}: {why}", ask=seq)
    raise Fail(EX_DATAERR, f"{lever} refused: {why}{stays}")


def payload_measured(state, lever, payload):
    """Yield the Content of `payload` for `lever`; return what the venture's files say of it (None:
    inside it, or a lever the mandate in force does not name)."""
    spec = state.mandate and state.mandate["levers"].get(lever)
    return (yield Content(spec["takes"], payload)) if spec else None


def person_proposal_rule(state, lever, payload):
    """A person's own proposal (open point 15), declared, so its own approval: refused as the
    mandate or the venture's files refuse it, else gated; Fail (65) once refused, or a payload a
    json lever cannot take refused before anything is written."""
    refuse(cannot_run(state))
    m = state.mandate
    spec = m["levers"].get(lever)
    if spec is not None and spec["takes"] == "json" and isinstance(payload, str):
        try:
            payload = read_json(payload)
        except (ValueError, RecursionError) as bad:
            raise Fail(EX_DATAERR,
                       f"{lever} takes json, and the payload is not JSON: {bad}") from None
    seq = yield write(state, "proposal", claim="declared", by="person",
                      choice="action", lever=lever, payload=payload,
                      summary=f"a person proposes {lever}")
    why = None
    if lever in m["forbidden"] or (spec is None and lever != "stop"):
        why = (
            f"{lever} is {'forbidden' if lever in m['forbidden'] else 'not permitted'} by mandate"
            f" #{state.mandate_seq}")
    else:
        why = yield from payload_measured(state, lever, payload)
    if why is None:
        verdict = yield Gate(lever, ("proposal", [], [f"proposal #{seq} is a person's own"]),
                             payload=payload, approval=seq, by="person",
                             summary=f"{lever} runs: a person's proposal (#{seq})",
                             extra={"payload": payload} if payload is not None else None)
        why = None if verdict.ok else verdict.why
    if why is not None:
        yield from refusal(state, lever, why, proposal=seq, by="person")
        raise Fail(EX_DATAERR, f"{lever} refused: {why}")


def denial_rule(state, seq, ask):
    """A person denied ask #seq: yield the denial naming its lever; a canary's names none, and its
    canary record says what the answer showed."""
    lever = None if ask.get("canary") else ask.get("lever")
    yield write(state, "denial", ask=seq, **some(lever=lever),
                summary=f"a person denied ask #{seq}" + (f" ({lever})" if lever else ""))
    if ask.get("canary"):
        yield Write(canary_result(state, seq, ask, False)[0])


def canary_result(state, seq, ask, approved):
    """Return (the canary record, the line for the person) for an answer to canary ask #seq."""
    if approved:
        summary = (f"ask #{seq} was a canary: {ask['lever']} is not permitted, and it was approved"
                   " without reading")
        line = (f"#{seq} was a canary ask: {ask['lever']} is not permitted by the mandate. Nothing"
                " ran. Read each ask before approving it.")
    else:
        summary = f"ask #{seq} was a canary, and it was denied: the asks are being read"
        line = f"#{seq} denied (it was a canary ask: thank you for reading)"
    return new_record("canary", state.name, ask=seq, passed=not approved, summary=summary), line


def person_rule(state, verb, measured=(None, None)):
    """A person paused or resumed the venture (`verb`): yield its declared record, or nothing when
    it already is so. A resume then puts the mandate in force as `measured` against its directory
    (mandate, problem) and starts the venture afresh, as avsmd's own start does."""
    if state.paused != (verb == "pause"):
        record = new_record(verb, state.name, "declared", summary=f"a person {verb}d {state.name}")
        yield Pause(record) if verb == "pause" else Write(record)
        if verb == "resume":
            mandate, problem = measured
            yield Adopt(mandate, False, mandate is not None, problem)


def may_run(state, stopping):
    """Whether anything of the venture may start: its mandate holds, no person paused it, and
    avsmd is not stopping."""
    return state.mandate is not None and not state.paused and not stopping


def forecast_rule(state, extra, output, status, ended_by, n):
    """A forecast program ended: yield its inferred record, which never authorizes (none when a
    pause or a stop cut it short), then a ratchet ask waiting on it."""
    seq = line = None
    if ended_by not in ("pause", "stop"):
        record = forecast_record(state, extra, output, status, ended_by)
        seq, line = (yield Write(record)), record["summary"]
    if extra["why"] == "ratchet":
        yield from ratchet_rule(state, extra["lever"], n, (seq, line))


def forecast_record(state, extra, output, status, ended_by):
    """Return the forecast record of what the forecast program printed, asked for with `extra`."""
    try:
        result = json.loads(output) if status == 0 else None
    except ValueError:
        result = None
    record = new_record("forecast", state.name, days=extra["days"], seeds=extra["seeds"],
                        why=extra["why"], **some(lever=extra["lever"]))
    checked = checked_forecast(result)
    if checked is None:
        why = ("it was ended" if ended_by
               else f"the forecast program ended {describe_status(status)}")
        record.update(note=why, summary=f"forecast not made: {why}")
        return record
    summary = describe_forecast(state.mandate["metric"], result, extra["days"], extra["seeds"])
    if "too_little" in checked:
        record.update(note=checked["too_little"], summary=summary)
    else:
        record.update(
            {k: round(result[k], result["decimals"]) + 0.0 for k in ("median", "p10", "p90")},
            summary=summary)
        if "cut" in checked:  # through the world, its calls capped
            record.update(note=checked["cut"], world=True,
                          summary=summary + f" ({checked['cut'][:200]})")
    return record


def checked_forecast(result):
    """Return a forecast program's result when it holds, else None: nothing unchecked goes on."""
    if not isinstance(result, dict):
        return None
    if isinstance(result.get("too_little"), str):
        return {"too_little": result["too_little"][:NOTE_MAX]}
    if result.get("decimals") in (0, 1, 2) and \
            all(is_number(result.get(k)) and abs(result[k]) < float("inf")
                for k in ("median", "p10", "p90")):
        kept = {k: result[k] for k in ("median", "p10", "p90", "decimals", "days", "seeds")
                if k in result}
        if isinstance(result.get("cut"), str):
            kept["cut"] = result["cut"][:NOTE_MAX]
        return kept
    return None


def describe_forecast(metric, result, days, seeds):
    """One line for a person: `forecast 30 days x 16 seeds: count 5 (80%: 2 to 9)`, or why there is
    none."""
    made = "" if "too_little" in result else f" {format_number(days)} days x {seeds} seeds"
    return f"forecast{made}: {forecast_text(metric, result)}"


def forecast_text(metric, result):
    """`count 5 (80%: 2 to 9)`, to the readings' precision; or why there is no forecast."""
    if "too_little" in result:
        return result["too_little"]
    shown = shown_spread([result[k] for k in ("median", "p10", "p90")], result["decimals"])
    idle = result.get("assumes_idle")
    alike = ": every seeded path ends alike" if shown[1] == shown[2] else ""
    return f"{metric} {shown[0]} (80%: {shown[1]} to {shown[2]}{alike})" + \
        (f"; assumes {' and '.join(idle)} does nothing (fewer than 3 runs, "
         f"and no expects: in the mandate)" if idle else "")


def world_rule(state, report_seq, lever, outputs, failure):
    """Yield the prediction of world steps from report #report_seq, or a failed step recorded
    once per stretch; nothing once the venture's mandate no longer holds."""
    if state.mandate is None:
        return
    if failure is not None:
        if not state.world_failing:
            yield write(state, "world", ok=False, report=report_seq, note=failure[:NOTE_MAX],
                        summary=f"world step failed: {failure[:200]}; no prediction "
                                f"(recorded once until a step succeeds)")
        return
    if state.last_report is None or state.last_report[0] != report_seq or not outputs:
        return  # a report no longer the last could never resolve it
    chances = {}
    for guard in state.mandate["guards"]:
        name = guard["name"]
        seen = [o["guards"][name] for o in outputs if name in o["guards"]]
        if seen and guard.get("bound") is not None:
            past = sum(1 for v in seen if crossed(guard["side"], guard["bound"], v))
            chances[name] = round(past / len(seen), 6)
    record = prediction_record(state, report_seq, [o["metric"] for o in outputs], lever, chances,
                               world=True)
    if outputs[0]["state"] != state.world_state:    # the first seed's state: the world's next input
        record["state"] = outputs[0]["state"]
    yield Write(record)


WORLD_TIMEOUT = 10              # seconds a world step may take (open point 38)
WORLD_OUTPUT_MAX = 64 * 1024    # bytes a world step may print (WORLD-02)
WORLD_SEEDS = 8                 # world steps, each with its own seed, in one prediction's ensemble
FORECAST_TIMEOUT = 600          # seconds a forecast, its world steps included, may take


def world_step_result(mandate, oversized, ended_by, status, out, err):
    """Return (its output, None) of one world step that ended, (None, why it failed), or None when
    a pause, a stop or a new mandate cut it short: its ensemble brings nothing."""
    if ended_by in ("pause", "stop", "a new mandate"):
        return None
    if oversized:
        return None, f"it printed more than {WORLD_OUTPUT_MAX // 1024} KiB"
    if ended_by == "timeout":
        return None, f"it took longer than {WORLD_TIMEOUT} s and was ended"
    if ended_by or status != 0:
        tail = err.decode("utf-8", "replace").strip()[-200:]
        return None, f"it ended {ended_by or describe_status(status)}" + (
            f": {tail}" if tail else "")
    return read_world_output(out.decode("utf-8", "replace"), mandate)


def read_world_output(text, mandate):
    """Return ({"state", "metric", "guards"}, None) from a world step's standard output, or
    (None, why) (open point 38); a guard the mandate does not name is dropped (WORLD-03)."""
    try:
        out = json.loads(text, parse_constant=refuse_constant)
    except (ValueError, RecursionError) as err:
        return None, f"its output is not one JSON object: {str(err)[:120]}"
    if not isinstance(out, dict):
        return None, "its output is not a JSON object"
    metric = out.get("metric")
    if not is_number(metric) or not abs(metric) < float("inf"):
        return None, f"its metric is not a finite number: {json.dumps(metric)[:60]}"
    named = {g["name"] for g in mandate["guards"]}
    guards = out.get("guards") if isinstance(out.get("guards"), dict) else {}
    kept = {k: v for k, v in guards.items()
            if k in named and is_number(v) and abs(v) < float("inf")}
    return {"state": out.get("state"), "metric": float(metric), "guards": kept}, None


def forecast_wanted(state, forecast, packet, stopping, now):
    """Return the forecast program's input by the config's `forecast` or the default, with what
    stepping the world starts from (open point 39); None: no seeds, a stop under way, or a
    decision's `packet` forecast (FORECAST-06) with no world."""
    f = forecast or (PACKET_FORECAST if packet else FORECAST_DEFAULT)
    if not f["seeds"] or stopping or packet and not state.mandate["world"]:
        return None
    facts = forecast_facts(state, f["days"], f["seeds"])
    if state.mandate["world"]:
        given = world_input(state, None, 0, 0, now)
        facts.update(reports=given["reports"], time=given["time"], world=state.mandate["world"],
                     world_state=state.world_state,
                     guards=[g["name"] for g in state.mandate["guards"]])
    return dict(facts, **some(packet=packet))


def world_input(state, lever, report, i, now):
    """The world command's standard input (open point 38), stepping from the measured report: step
    i of report #`report`'s ensemble, with a seed of its own."""
    seed = report * WORLD_SEEDS + i
    return {"state": state.world_state, "lever": lever, "seed": seed, "time": int(now),
            "reports": [{"seq": s, "at": a, "value": v} for s, a, v in state.world_reports],
            "imagined": []}


PACKET_WORLD_CALLS = 160  # world steps a decision packet's forecasts make in all: a decision waits


def packet_world_forecast(facts, step):
    """Return the decision packet's forecasts through the world: one run now of each lever and no
    controller."""
    calls = max(1, PACKET_WORLD_CALLS // (1 + len(facts["levers"])))
    free = dict(facts, sides=[])
    return {"nothing": forecast_world_paths(free, step, calls),
            "levers": {name: forecast_world_paths(dict(free, first=name), step, calls)
                       for name in facts["levers"]}}


WORLD_FORECAST_CALLS = 400  # world steps (seeds x steps) a forecast makes; then the horizon is cut


def forecast_world_paths(facts, step, calls=WORLD_FORECAST_CALLS):
    """Return the forecast of `facts` through the world command (open point 39), as forecast_paths
    does; `step(input)` returns (output, None) or (None, why). A path's own values stand apart in
    `imagined`, so a world tells measured history from its simulation. Past `calls` steps in all
    the horizon is cut, and `cut` says so."""
    cadence, seeds = facts["cadence"], facts["seeds"]
    total = forecast_steps(facts)
    if not total:
        return {"too_little": "forecasts are off (seeds: 0)"}
    steps = min(total, max(1, calls // seeds))
    ends = []
    for s in range(seeds):
        state, reports, imagined = facts["world_state"], facts["reports"][-HISTORY:], []
        at = facts["time"]
        value = reports[-1]["value"] if reports else 0.0
        allowance = {lever: 0.0 for _, _, lever in facts["sides"]}
        lever = facts.get("first")
        for i in range(steps):
            at += cadence
            out, why = step({"state": state, "lever": lever, "seed": s * steps + i, "time": int(at),
                             "reports": reports, "imagined": imagined[-HISTORY:]})
            if why:
                return {"too_little": f"the world failed a step of the forecast: {why}"}
            state, value, lever = out["state"], out["metric"], None
            imagined.append({"at": int(at), "value": value})
            for way, bound, name in facts["sides"]:
                allowance[name] = cap_allowance(facts, name, allowance[name], cadence)
                if lever is None and crossed(way, bound, value) and allowance[name] >= 1:
                    lever, allowance[name] = name, allowance[name] - 1
        ends.append(value)
    ends.sort()
    days = steps * cadence / 86400
    result = forecast_result(facts, ends, days if steps < total else facts["days"])
    if steps < total:
        result["cut"] = (
            f"cut short at {seeds * steps} world steps ({calls} at most): "
            f"{format_number(float(f'{days:.3g}'))} of {format_number(facts['days'])} days"
        )
    return result


def packet_world_made(output, status, ended_by):
    """Return the packet forecast's `made` from what packet_world_forecast printed (it exited
    `status`, or was `ended_by`), or why none."""
    result, why_not = None, None
    if ended_by or status != 0:
        why_not = (f"it was ended ({ended_by})" if ended_by
                   else f"the forecast program ended {describe_status(status)}")
    else:
        try:
            result = json.loads(output)
        except ValueError:
            why_not = "its output is not JSON"
    if why_not is None and isinstance(result, dict) and isinstance(result.get("levers"), dict):
        nothing = checked_forecast(result.get("nothing"))
        levers = {name: checked_forecast(r) for name, r in result["levers"].items()}
        if nothing is not None and None not in levers.values():
            return {"nothing": nothing, "levers": levers}
    why_not = why_not or "its output does not hold"
    return {"nothing": {"too_little": f"the forecast through the world was not made: {why_not}"},
            "levers": {}}


def capacity_check(state, days):
    """Return (enough, short or not known; short per day; why): can the levers, within their caps,
    hold the metric inside its bounds over `days` against its drift (open point 9)?"""
    m = state.mandate
    sides = controller_sides(m)
    if not sides:
        return "not known", None, "the controller holds no bound: a model chooses"
    steps = state.free_steps
    if len(steps) < 3:
        return ("not known", None,
                f"no drift yet: {len(steps)} lever-free step(s) of history, 3 needed")
    drift = drift_and_noise(steps)[0]
    per_day = 86400 / m["cadence"]
    effects = lever_effects(forecast_facts(state, days, 1)["levers"], drift)
    level = state.level[1] if state.level else 0.0
    short = 0.0
    for _, way, bound, lever in sides:
        sign = 1 if way == "above" else -1
        push, room = sign * drift * per_day, sign * (bound - level)     # toward the bound
        if push <= 0 or push * days < room:
            continue
        effect = effects.get(lever)
        if not effect:
            return "not known", None, (f"{lever} has no effect yet: "
                                       f"no three measured runs, no expects size")
        pull = -sign * sum(effect) / len(effect)
        if pull <= 0:
            return "not known", None, f"{lever} has no effect that brings the metric back"
        count, period = m["levers"][lever]["cap"]
        short = max(short, push - count * 86400 / period * pull)
    return ("enough", None, "") if short <= 0 else ("short", short, "")


# =============================================================================
# 8. The kernel: a venture's state, a model's words, summaries, notices
# =============================================================================

HISTORY = 200      # trusted reports a venture keeps in memory (drift, noise, peaks)


class History:
    """A list of (seq, value) pairs, the seqs in an array of machine integers (8 bytes each, not a
    tuple and an int object: 96): a thousand ventures' HISTORY reports take 3 MiB, not 19."""

    __slots__ = ("seqs", "values")

    def __init__(self, pairs=()):
        import array
        self.seqs, self.values = array.array("q"), []
        for pair in pairs:
            self.append(pair)

    def append(self, pair):
        self.seqs.append(pair[0])
        self.values.append(pair[1])

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(zip(self.seqs[i], self.values[i]))
        return self.seqs[i], self.values[i]

    def __delitem__(self, i):
        del self.seqs[i]
        del self.values[i]

    def __iter__(self):
        return zip(self.seqs, self.values)

    def __eq__(self, other):
        return list(self) == list(other)


# ---- snapshots: the fold kept at a seq (section 11 writes them) ----
# Each field of a VentureState but its parsed mandate, as JSON whose objects are each one tag:
# {":": [[key, value], ...]} a dict, {"tuple": [...]}, {"set": [...]}, {"History": [...]}, ...
SNAPSHOT_TYPES = {":": dict, **{t.__name__: t for t in (tuple, set, frozenset, History)}}


def snapshot_record(seq, text, path):
    """The record that ties the snapshot `text`, the fold to #seq kept at `path`, to the chain."""
    return new_record("snapshot", "self", seq=seq, sha256=text_sha256(text), code=code_sha256(),
                      summary=f"the fold to #{seq} is kept in {path} ({len(text) // 1024} KiB):"
                              " a start folds only the records after it")


# A VentureState's fields but its name, in slot (so snapshot) order, each with how it starts: a
# type or a lambda gives each venture a new one.
VENTURE_FIELDS = {
    "directory": None,
    "mandate": None,            # the parsed mandate in force, or None
    "mandate_seq": None, "mandate_sha": None, "mandate_text": None,
    "problem": None,            # why the adopted mandate cannot run, or None
    "paused": False,
    "last_report": None,        # (seq, at, record)
    "level": None,              # (seq, value) of the last report that was not implausible
    "pending": None,            # (seq, value) of an unconfirmed report
    "last_step": None,          # the step between the last two trusted reports
    "previous_implausible": False,
    "trusted": History,         # [(seq, value)] of the last HISTORY trusted reports
    "trusted_at": None,         # when the last of them was written (status shows its age)
    "sides": dict,              # controller side -> {"armed": bool, "streak": [report seqs]}
    "actions": dict,            # lever -> [(seq, at)] of its runs, for caps
    "open_asks": dict,          # ask seq -> ask record
    "implausible_ask": None,    # seq of the open ask raised for an implausible stretch
    # its ask was answered: no new one until a plausible reading comes
    "implausible_answered": False,
    "running": dict,            # lever -> action seq of a run in flight (from action/outcome)
    # guard name -> {"last": (seq, value, status), "past", "episode", "unwind_ok"}
    "guards": dict,
    # audit name -> {"values": [(seq, value)], "last": (seq, status), "note"}
    "audits": dict,
    "read": dict,               # reading name -> (seq, record)
    "peak": None,               # the highest trusted report since the mandate: a drawdown's peak
    "unwinds": dict,            # action seq -> the guard whose unwind it runs
    # lever -> approvals since the mandate (a denial resets it): the ratchet
    "approvals": dict,
    "free_steps": list,         # one-step changes between trusted reports with no lever run between
    "lever_steps": dict,        # lever -> steps between trusted reports across which it alone ran
    # levers run since the last trusted report (none: the next step is lever-free)
    "ran_since": list,
    "effects": dict,            # action seq -> a run whose expected effect is not yet judged
    "misses": dict,             # lever -> misses in a row (revoke_after)
    "suspended": dict,          # lever -> the ask whose approval restores its delegation
    "ratchet_forecasts": dict,  # lever -> seq of the `begun` forecast its ratchet ask waits on
    "escalating": dict,         # escalation seq -> its backend, until answered
    # the kept `run` program's back-off in seconds; None: its next start is a first start
    "backoff": None,
    "run_ended": False,         # its last exit was its own, and its `restart:` did not restart it
    "restarts": 0,              # starts of the kept `run` program its `restart:` made
    # seq of an unspent approval (or a person's own proposal) -> {"lever", "payload", "ask"}
    "grants": dict,
    "checks": dict,             # seq of a passed lever check no action has cited yet -> lever
    # [(seq, at, value)] of the last HISTORY trusted reports folded under a world: its input
    "world_reports": list,
    "prediction": None,         # (seq, record) of the prediction the next report may resolve
    "scores": list,             # [(crps, persistence's crps, covered)] of the last ROLLING scores
    "scored": 0,                # calibration scores in the ledger
    # the last world record is a failed step: the next failure writes nothing
    "world_failing": False,
    "world_state": None,        # the state the world command returned last (a prediction's)
    "checking": dict,           # lever -> seq of the `begun` check its run waits on
    # seq of a model's proposal of an action no action, ask or refusal answered yet -> lever
    "proposals": dict,
    # its asks, canaries aside: canary_asks counts them over every venture
    "asks_made": 0,
    # the metrics' counters, over every record (a _total never goes back at a restart)
    "counted": lambda: {"reports": 0, "failed": 0, "implausible": 0, "refusals": 0, "by_lever": {}},
}


class VentureState:
    """What the ledger says of one venture, folded record by record (so a restart forgets
    nothing)."""

    # Slots: with over 30 fields an instance's __dict__ would not share its keys (1.6 KiB a
    # venture, not 0.4). "__dict__" last: a field added without its slot still works.
    __slots__ = ("name", *VENTURE_FIELDS, "__dict__")

    def __init__(self, name):
        self.name = name
        for field, start in VENTURE_FIELDS.items():
            setattr(self, field, start() if callable(start) else start)

    def side(self, name):
        """A controller side: armed (deadband), its streak of crossed reports (hold), asked."""
        return self.sides.setdefault(
            name, {"armed": True, "streak": [], "asked": False, "stuck": None, "seen": False})

    def open_ask(self, **fields):
        """Return the seq of the first open ask with these `fields`, or None."""
        return next((s for s, a in self.open_asks.items()
                     if all(a.get(k) == v for k, v in fields.items())), None)


def states_of(text):
    """Return ({name: VentureState}, counted) of a snapshot, each mandate parsed as fold_ledger
    does."""
    snapshot, states = json.loads(text, object_hook=snapshot_hook), {}
    for name, fields in snapshot["ventures"].items():
        state = states[name] = VentureState(name)
        for field, value in fields.items():
            setattr(state, field, value)
        if state.mandate_seq is not None:
            state.mandate = parsed_or_none(parse_mandate, {"text": state.mandate_text},
                                           state.mandate_seq)
    return states, snapshot["counted"]


def snapshot_hook(tagged):
    (tag, held), = tagged.items()
    return SNAPSHOT_TYPES[tag](held)


def parsed_or_none(parse, record, seq):
    """Return the mandate a mandate record adopts, or None when it does not hold."""
    try:
        return parse(record.get("text") or "", f"mandate #{seq}")
    except Fail:
        return None


def text_sha256(text):
    """Return the sha256 of `text` as UTF-8 in lowercase hex, as `sha256sum` prints it."""
    import hashlib
    return hashlib.sha256(text.encode()).hexdigest()


def adoption_rule(state, mandate, text, directory, ask=None, approval_of=None):
    """The event of a mandate adopted: a person's `avsm add` of `directory`, or the change ratchet
    `ask` carried, approved in #approval_of. Yield its record, then its Adopt: the kept `run`
    program ends when the mandate in force ran another, and the venture starts unless paused; an
    add then forecasts (FORECAST-01). The mandate in force added again from its directory writes
    nothing; it is put in force again when it could not run (VENTURE-14), its directory now holding
    it. Refused (65) while a running venture of its name comes from another directory."""
    if state.mandate_seq is not None:
        check_not_adopted_elsewhere(state.name, directory, state.directory, state.paused)
    end_run, sha = run_replaced(state, mandate), text_sha256(text)
    if state.mandate_seq is not None and (state.directory, state.mandate_sha) == (directory, sha):
        if state.mandate is None:
            yield Adopt(mandate, False, not state.paused)
        return
    how = (f"with {ask['lever']} delegated, as approved in #{approval_of}" if ask
           else f"from {directory}")
    yield write(state, "mandate", directory=directory, sha256=sha, text=text,
                summary=f"adopted {state.name} {how} (sha256 {sha[:16]})",
                **some(approval_of=approval_of))
    yield Adopt(mandate, end_run, not state.paused)
    if ask is None:
        yield Forecast(None, "add")


def run_replaced(state, mandate):
    """Whether adopting `mandate` ends the kept `run` program: the mandate in force runs another."""
    old = state.mandate["run"] if state.mandate else None
    return bool(old) and old != mandate["run"]


def still_past_lines(state):
    """Return the lines `avsm resume` adds for each guard whose last reading was past its bound
    (PAUSE-03); only that reading is known: its cause may be cleared since."""
    then = {g["name"]: g["then"] for g in state.mandate["guards"]} if state.mandate else {}
    return [f"guard {name}: its last reading was past its bound (since #{episode}); "
            + (f"if it still is at its next reading, it pauses {state.name} again"
               if then.get(name, "pause") == "pause"
               else "no lever but stop and its unwind runs until a reading is back inside")
            for name, episode in guards_past(state)]


# ---- rotation: when ledger.db is closed, and which closed files keep: lets go ----
def rotation_due(spec, size, first_at, now):
    """Is ledger.db (`size` bytes, its first record written at `first_at`) due to be closed?"""
    return size >= spec["size"] if spec["size"] else now >= first_at + spec["every"]


def rotated_record(record, name, head):
    """The first record of a new ledger.db: the snapshot `record` of the fold to the closed file's
    last record, naming the file and that record's hash."""
    return dict(record, file=name, hash=head[1], summary=(
        f"ledger.db goes on from ledgers/{name}, its last record #{head[0]} ({head[1][:16]}); the"
        f" fold to it: snapshots/{head[0]:012d}.json"))


def files_let_go(spec, closed, checkpoint, now):
    """Yield (path, record) of each closed file (first, last, path, mtime) older than keep: with a
    checkpoint past it, a head kept outside the file vouches for what it held."""
    for first, last, path, mtime in closed:
        if spec and spec["keep"] and last < checkpoint and mtime + spec["keep"] <= now:
            yield path, new_record("ledger", "self", deleted=os.path.basename(path), summary=(
                f"ledgers/{os.path.basename(path)} (#{first} to #{last}) is deleted: it is older"
                f" than keep: {format_duration(spec['keep'])}, and checkpoint #{checkpoint} is"
                " past it"))


# ---- what a model is shown, and what it may say ----
# Pure: a decision packet (built by the warden from records, never an audit) in,
# the request texts out; a reply's bytes in, choices or the reason it is unusable out.
MODEL_SYSTEM = """You advise avsm, a supervisor that acts only within a mandate a person wrote.
You choose between doing nothing, taking one action the mandate permits, and asking the person.
Code, not you, decides whether anything runs: a proposal that breaks the mandate is refused and \
recorded.
Reply with exactly one JSON object on one line and nothing else, one of:
{"choice": "nothing", "reason": "..."}
{"choice": "action", "action": "LEVER", "reason": "..."}   (add "payload" for a lever that takes \
content:
    a string for text, diff or file; an object for json)
{"choice": "ask", "question": "...", "action": "LEVER"}
{"choices": [ ...up to five of the above, each judged alone... ]}
Before choosing you may look things up, three times at most, one per reply:
{"choice": "know", "topic": "..."}  or  {"choice": "why", "record": SEQ}"""
CLASSIFIER_SYSTEM = """You classify for avsm, a supervisor that acts only within a mandate a \
person wrote.
Answer with one word alone: nothing, ask, or the name of one permitted lever."""


LOOKS_MAX = 3


def build_request(packet):
    """Return (system, user): the texts a backend is shown for one decision packet."""
    lines = [f"venture: {packet['venture']}", f"purpose: {packet['purpose']}",
             f"metric: {packet['metric']}", f"controller: {packet['controller']}",
             "permitted levers:"]
    lines += [f"  - {lever['name']}: cap {lever['cap']} ({lever['used']} used), "
              f"{'reversible' if lever['reversible'] else 'irreversible: a person approves it'}"
              + (", delegated" if lever.get("delegated") else "")
              + (f", takes {lever['takes']}" if lever.get("takes") else "")
              for lever in packet["levers"]] or ["  none"]
    lines.append(f"forbidden levers: {', '.join(packet['forbidden']) or 'none'}")
    for title, items in (
            ("children", [f"  - {c['name']}: {c['state']}"
                          + "".join(f"\n      {r}" for r in c["records"])
                          for c in packet["children"]]),
            ("readings", [f"  - {r['name']} = {r['value']}: {r['fields'] or '(no fields)'}"
                          for r in packet["readings"]]),
            ("recent records", [f"  {r}" for r in packet["records"]]),
            ("open asks", [f"  {a}" for a in packet["asks"]])):
        lines += [f"{title}:", *items] if items else [f"{title}: none"]
    lines += packet_forecast_lines(packet)
    for look in packet.get("looks", []):
        lines.append(f"you looked up {json.dumps(look['look'])}:")
        lines += [f"  {line}" for line in look["answer"].splitlines()]
    if packet.get("looks"):
        lines.append(f"looks left: {LOOKS_MAX - len(packet['looks'])}")
    system = CLASSIFIER_SYSTEM if packet.get("classifier") else MODEL_SYSTEM
    return system, "\n".join(lines) + "\n"


def packet_forecast_lines(packet):
    """The packet's forecast for doing nothing and for one run now of each permitted lever (open
    point 40); one made through the world command says where its capped calls cut the horizon
    short."""
    facts, metric = packet.get("forecast"), packet["metric"]
    if not facts:
        return []
    made = facts.get("made")
    nothing = made["nothing"] if made else forecast(dict(facts, sides=[]))
    lines = [f"forecast{' through the world command' if made else ''} ("
             f"{format_number(facts['days'])} days x {facts['seeds']} seeds, at the horizon):"]
    if "too_little" in nothing:
        return lines + [f"  {nothing['too_little']}"]
    if nothing.get("cut"):
        lines.append(f"  {nothing['cut']}")
    lines.append(f"  doing nothing: {forecast_text(metric, nothing)}")
    for name, lever in (made or facts)["levers"].items():
        if made:
            shown = forecast_text(metric, lever)
        elif len(lever["steps"]) >= 3 or lever["expects"]:
            shown = forecast_text(metric, forecast(dict(facts, sides=[], first=name)))
        else:
            shown = "its effect is not measured yet"
        lines.append(f"  {name} once now: {shown}")
    return lines


CHOICES_MAX = 5


def parse_reply(data, packet):
    """Return {"choices": [...]} or {"look": {...}} from a reply, or {"unusable": why}: anything but
    one JSON object on one line (a classifier: one word) is unusable."""
    if len(data) > REPLY_MAX:
        return {"unusable": f"the reply is bigger than {REPLY_MAX // 1024} KiB"}
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        return {"unusable": "the reply is not UTF-8"}
    text = text.strip()
    if not text:
        return {"unusable": "the reply is empty"}
    if "\n" in text or "\r" in text:
        return {"unusable": "the reply is more than one line"}
    if packet.get("classifier"):
        said = {"nothing": {"choice": "nothing"},
                "ask": {"choice": "ask", "question": "the classifier asks"}}.get(text)
        if said or text in {lever["name"] for lever in packet["levers"]}:
            return {"choices": [said or {"choice": "action", "action": text}]}
        return {"unusable": ("a classifier answers one word: nothing, ask or a permitted lever, not"
                             f" {text[:60]!r}")}
    try:
        reply = read_json(text, object_pairs_hook=unique_pairs)
    except NumberError as err:
        return {"unusable": f"the reply holds a number avsm does not take: {err}"}
    except (ValueError, RecursionError) as err:
        return {"unusable": f"the reply is not one JSON object: {str(err)[:120]}"}
    if not isinstance(reply, dict):
        return {"unusable": "the reply is not a JSON object"}
    if set(reply) == {"choices"}:
        items = reply["choices"]
        if not isinstance(items, list) or not 1 <= len(items) <= CHOICES_MAX:
            return {"unusable": f"choices must be a list of one to {CHOICES_MAX}"}
        for item in items:
            why = check_choice(item)
            if why or item["choice"] in ("know", "why"):
                return {"unusable": why or "a look-up stands alone, not among choices"}
        return {"choices": items}
    why = check_choice(reply)
    if why:
        return {"unusable": why}
    if reply["choice"] in ("know", "why"):
        if len(packet.get("looks", [])) >= LOOKS_MAX:
            return {"unusable": f"more than {LOOKS_MAX} look-ups"}
        return {"look": reply}
    return {"choices": [reply]}


def unique_pairs(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("a key appears twice")
    return dict(pairs)


CHOICE_KEYS = {"nothing": {"choice", "reason"},
               "action": {"choice", "action", "reason", "payload"},
               "ask": {"choice", "question", "action", "reason"},
               "know": {"choice", "topic"},
               "why": {"choice", "record"}}


PAYLOAD_DEPTH = 32
SURROGATE = "[\ud800-\udfff]"


def check_choice(choice):
    """Return why a choice has not exactly the shape its kind allows, or None."""
    if not isinstance(choice, dict) or choice.get("choice") not in CHOICE_KEYS:
        return "a choice is nothing, action, ask, know or why"
    kind = choice["choice"]
    extra = set(choice) - CHOICE_KEYS[kind]
    if extra:
        return f"a {kind} choice has no {', '.join(sorted(extra))}"
    for key in ("reason", "question", "topic"):
        if key in choice and (not isinstance(choice[key], str) or len(choice[key]) > TEXT_MAX):
            return f"{key} must be text of at most {TEXT_MAX} characters"
    if kind == "action" and not isinstance(choice.get("action"), str):
        return "an action choice names its lever in action"
    if kind == "ask" and ("question" not in choice
                          or ("action" in choice and not isinstance(choice["action"], str))):
        return "an ask choice carries a question (and may name a lever)"
    if kind == "know" and not isinstance(choice.get("topic"), str):
        return "a know choice carries a topic"
    record = choice.get("record")
    if kind == "why" and (isinstance(record, bool) or not isinstance(record, int)
                          or not 1 <= record < 2**63):
        return "a why choice carries a record number"
    if "payload" in choice and not isinstance(choice["payload"], (str, dict)):
        return "a payload is a string or an object"
    if depth(choice) > PAYLOAD_DEPTH:
        return f"the choice nests deeper than {PAYLOAD_DEPTH} levels"
    if re.search(SURROGATE, json.dumps(choice, ensure_ascii=False)):
        return "the reply holds a lone surrogate: not text"
    return None


def depth(value, level=0):
    """Return how deep lists and objects nest in `value`, stopping past PAYLOAD_DEPTH."""
    if level > PAYLOAD_DEPTH or not isinstance(value, (list, dict)):
        return level
    items = value.values() if isinstance(value, dict) else value
    return max((depth(item, level + 1) for item in items), default=level + 1)


# ---- who may change what a venture runs (sshd's StrictModes, cron) ----
Writable = collections.namedtuple("Writable", "why fix")   # who could change a path, and the fix


def venture_commands(m):
    """Return every program mandate `m` runs, as command lines."""
    commands = ([] if m["adapter"] else ["./report"]) + [m["run"], m["world"]]
    for lever in m["levers"].values():
        commands += [lever["run"] if lever["run"] != "mail.send" else None, lever["check"]]
    commands += [item.get("run") for key in ("guards", "audits", "readings") for item in m[key]]
    return [c for c in commands if c]


def is_ranking(choices):
    """A ranking is a `choices` reply naming more than one action, best first (open point 37)."""
    return sum(1 for c in choices if c.get("choice") == "action") > 1


def describe_capacity(result):
    """`capacity: enough`, `capacity: short by 12/day` or `capacity: not known (why)`."""
    verdict, short, why = result
    if verdict == "short":
        shown = round(short, 2) if abs(short) >= 1 else float(f'{short:.3g}')
        return f"capacity: short by {format_number(shown)}/day"
    return "capacity: enough" if verdict == "enough" else f"capacity: not known ({why})"


def count_self(counted, record):
    """Count avsmd's start or its warden's or roles process's restart into `counted`; return it."""
    if record.get("venture") != "self":
        return counted
    if record.get("kind") == "start":
        counted["starts"] = counted.get("starts", 0) + 1
    elif record.get("kind") == "restart":
        restarts, process = counted.setdefault("restarts", {}), str(record.get("process"))
        restarts[process] = restarts.get(process, 0) + 1
    return counted


def snapshot_value(value):
    """Return `value` as JSON that snapshot_hook reads back as it is."""
    kind = type(value)
    if value is None or kind in (str, int, float, bool):
        return value
    if kind is list:
        return [snapshot_value(v) for v in value]
    tag = ":" if kind is dict else kind.__name__
    if SNAPSHOT_TYPES.get(tag) is not kind:
        raise TypeError(f"a snapshot cannot hold a {kind.__name__}")
    items = [[snapshot_value(k), snapshot_value(v)] for k, v in value.items()] if kind is dict \
        else [snapshot_value(v) for v in value]
    return {tag: sorted(items, key=json.dumps) if kind in (set, frozenset) else items}


def snapshot_text(seq, states, counted):
    """Return the snapshot of the fold `states` and the metrics' `counted` to record #seq."""
    ventures = {}
    for name, state in states.items():
        fields = {f: getattr(state, f) for f in VentureState.__slots__ if hasattr(state, f)}
        fields.update(vars(state))
        ventures[name] = {f: v for f, v in fields.items() if f not in ("mandate", "__dict__")}
    return json.dumps(snapshot_value({"seq": seq, "counted": counted, "ventures": ventures}),
                      separators=(",", ":"))


def ranked_choices(state, choices):
    """Return [(choice, held, not proposed)] for a reply's choices (WORLD-08, open point 37): below
    the calibration bar a ranking's top action asks a person, and the rest are not proposed."""
    ok, why = calibration_bar(state) if is_ranking(choices) else (True, None)
    held = None if ok else why
    top = next((c for c in choices if c["choice"] == "action"), None)
    return [(choice, None, f"{choice['action']} not proposed: the ranking is held back ({held})")
            if held and choice["choice"] == "action" and choice is not top
            else (choice, held if choice is top else None, None) for choice in choices]


def venture_named(ventures, name):
    state = ventures.get(name)
    if state is None or state.mandate_seq is None:
        raise Fail(EX_DATAERR, f"no venture is named '{name}'; avsm status lists them")
    return state


def open_ask(ventures, seq, citing):
    """Return (state, seq, ask) of open ask #seq, or Fail(65) saying how it was answered (from
    `citing`, the records that cite it) or that it is none."""
    for state in ventures.values():
        if seq in state.open_asks:
            return state, seq, state.open_asks[seq]
    answer = (
        next((a for a in citing if a[2]["kind"] in ANSWER_WORDS), None) if type(seq) is int
        else None
    )
    raise Fail(
        EX_DATAERR,
        (f"ask #{seq} is answered already: {ANSWER_WORDS[answer[2]['kind']]} "
         f"(#{answer[0]}: {answer[2]['summary']}); avsm asks lists the open asks" if answer
         else f"#{seq} is not an open ask; avsm asks lists them"),
    )


def approve_problem(state, seq):
    """Return why `avsm approve` of ask #seq is refused before anything is written (65), or None
    (ASK-09)."""
    if state.paused:
        return (f"{state.name} is paused, so approving #{seq} would spend it without running; "
                f"resume it first (avsm resume {state.name})")
    return None


def ask_content(seq, ask):
    """Return the content open ask #seq carries, as JSON, for `approve --edit`; Fail (65) when it
    carries none."""
    refuse(ask.get("payload") is None
           and f"ask #{seq} carries no content to edit; approve it without --edit")
    return json.dumps(ask["payload"])


def ratchet_change_problem(state, mandate):
    """Return why the mandate change a ratchet ask carries may not be adopted, or None (SELF-03,
    ESC-09)."""
    if mandate["escalate"] == "offbox" and state.mandate["escalate"] != "offbox":
        return ("a change proposed by self may not add escalate: offbox; only you can, by editing"
                " the mandate")
    return None


def ratchet_approved_rule(state, seq, ask, mandate, path):
    """A person approved ratchet ask #seq, its change parsed as `mandate`: yield the change written
    to `path`, then the approval delegating its lever, then its adoption; Fail (65) with nothing
    written when it carries no change or one a person must make (SELF-03), 73 when mandate.yaml
    cannot be written (its ask stays open)."""
    if not mandate:
        raise Fail(EX_DATAERR, f"ask #{seq} carries no mandate change; edit {path} by hand"
                               " and run avsm add")
    refuse(ratchet_change_problem(state, mandate))
    why = yield WriteFile(path, ask["mandate"])
    refuse(why and f"{path} cannot be written ({why}); ask #{seq} stays open: approve it again once"
                   " it can be, or edit the mandate by hand and run avsm add", EX_CANTCREAT)
    yield write(state, "approval", ask=seq, about="ratchet",
                summary=f"a person approved delegating {ask['lever']} (ask #{seq})")
    yield from adoption_rule(state, mandate, ask["mandate"], state.directory, ask, seq)


def child_restart_wait(previous, uptime):
    """Return (the back-off to keep, the wait before avsmd restarts its warden or roles process):
    doubling while it keeps dying within QUICK_DEATH."""
    if uptime >= QUICK_DEATH:
        return None, 0
    backoff = 0 if previous is None else next_backoff(previous)
    return backoff, backoff


def cannot_run(state):
    """Return why nothing of the venture can run, or None: its adopted mandate does not hold
    (VENTURE-14). `avsm propose` and `avsm decide` are refused (65) for it."""
    return None if state.mandate else f"{state.name} cannot run: {state.problem}"


def decide_problem(state):
    """Return why `avsm decide` may not run a venture's model decision now (65), or None."""
    if state.mandate is None:
        return cannot_run(state)
    if not decided_by_model(state.mandate):
        return (f"{state.name}'s controller is {state.mandate['controller']['kind']}: no model"
                " decides for it")
    if state.paused:
        return f"{state.name} is paused; resume it first"
    return None


def backend_for(state, cfg):
    """Return (name, backend) a venture's model decisions go to, or raise Fail (65)."""
    name = state.mandate["controller"].get("backend") or cfg.get("default")
    if not name or name not in cfg["backends"]:
        raise Fail(EX_DATAERR,
                   f"{state.name} names no backend: set default: in config.yaml or backend: in its"
                   " controller")
    backend = cfg["backends"][name]
    if backend["offbox"] and state.mandate["escalate"] != "offbox":
        raise Fail(EX_DATAERR, f"backend {name} leaves the machine, and {state.name}'s mandate"
                               " does not say escalate: offbox; no call is made")
    return name, backend


PACKET_RECORDS = 40     # the newest records of the venture a decision packet holds


def model_packet(state, recent, now, looks, forecast, world=None):
    """Return a venture's decision packet: never an audit reading, note or ask, nor a record that
    cites one (AUDIT-05); the forecast stepped through the `world`, else the facts of the config's
    `forecast` (or PACKET_FORECAST), which the roles process makes, apart from the warden
    (FORECAST-03)."""
    m, f = state.mandate, forecast or PACKET_FORECAST
    kind = m["controller"]["kind"]
    hidden = {s for s, a in state.open_asks.items() if a.get("about") == "audit" or a.get("audit")}
    records = [f"#{seq} {format_local_time(at)} {r['claim']} {r['kind']} {r['summary']}"
               for seq, at, r in recent
               if not (r["kind"].startswith("audit.") or r.get("about") == "audit"
                       or r.get("ask") in hidden or r.get("audit"))]
    return {
        "venture": state.name,
        "purpose": m["purpose"],
        "metric": m["metric"],
        "controller": kind,
        "classifier": kind == "classifier",
        "levers": [{"name": n, "cap": l["cap_text"], "used": len(cap_window(state, n, now)),
                    "reversible": l["reversible"], "delegated": l["delegated"], "takes": l["takes"]}
                   for n, l in m["levers"].items()],
        "forbidden": m["forbidden"],
        "children": [],
        "readings": [{"name": name, "value": format_number(rec.get("value")),
                      "fields": rec.get("fields", "")}
                     for name, (seq, rec) in sorted(state.read.items())
                     if rec.get("status") == "read"],
        "records": records,
        "asks": [f"#{s} {a.get('lever') or '-'}: {a.get('question', a['summary'])}"
                 for s, a in sorted(state.open_asks.items()) if s not in hidden],
        "forecast": world or (forecast_facts(state, f["days"], f["seeds"]) if f["seeds"] else None),
        "looks": looks,
    }


def reply_failure(run, oversized, ended_by, status):
    """Return why a `command` backend's reply cannot be used, or None."""
    if oversized:
        return f"the reply is bigger than {REPLY_MAX // 1024} KiB"
    if ended_by or status != 0:
        return f"{run} ended: {ended_by or describe_status(status)}"
    return None


def unusable_record(state, backend, by, why, call):
    """Return the record of `backend`'s unusable reply (it changes nothing, ESC-06)."""
    call = dict(call or {})         # a refusal keeps its text and the provider's category: declined
    return new_record("unusable", state.name, backend=backend, by=by, why=why[:NOTE_MAX],
                      summary=f"the reply of {backend} is unusable: {why[:200]}",
                      **some(declined=call.pop("declined", None), call=call))


def look_answer(db, state, look):
    """Answer a model's look-up from the ledger: never an audit."""
    if look["choice"] == "why":
        seq = look["record"]
        if not 1 <= seq < 2 ** 63:
            return f"#{seq} is not a record number"
        found = record_at(db, seq)
        if found is None:
            return f"#{seq} is not in the ledger"
        at, record = found
        if record.get("venture") != state.name:
            return f"#{seq} is not a record of {state.name}"
        if (record["kind"].startswith("audit.") or record.get("about") == "audit"
                or record.get("audit")):
            return "not shown: an audit is never shown to a model"
        lines = [format_record_line(seq, at, record)]
        for p in (record.get("proof") or {}).get("premises", []):
            _, r = record_at(db, p) or (None, None)
            if r:
                lines.append(f"  premise #{p} {r['claim']} {r['kind']} {r['summary']}")
        return "\n".join(lines)
    topic = look["topic"].lower()
    found = [f"#{s} {r['claim']} {r['kind']} {r['summary']}"
             for s, at, r in recent_records(db, state.name, 500)
             if r["claim"] == "declared" or r["kind"] == "fact"]
    found = [line for line in found if topic and topic in line.lower()][-10:]
    return "\n".join(found) or f"nothing declared about {look['topic']}"


def look_record(state, d, look, answer):
    """Return the record of decision d's model looking `look` up, and the `answer` it was shown."""
    return new_record("look", state.name, by=d.by, look=look, backend=d.backend,
                      answer=answer[:NOTE_MAX],
                      summary=f"the model looked up {json.dumps(look)[:120]}",
                      # ESC-03: what an escalation brought cites it
                      **some(call=d.call, escalation=d.escalation))


def proposal_record(state, choice, d, ranking):
    """Return decision d's model's `choice` as an inferred proposal."""
    lever, reason = choice.get("action"), choice.get("reason", "")
    return new_record(
        "proposal", state.name, by=d.by, choice=choice["choice"], backend=d.backend,
        reason=reason[:TEXT_MAX],
        summary=f"{d.backend} proposes {choice['choice']}" + (f" {lever}" if lever else "")
        + (f": {reason[:120]}" if reason else ""),
        **({"lever": lever} if lever is not None else {}),
        **{k: choice[k] for k in ("payload",) if k in choice},
        **some(ranking=ranking and choice["choice"] == "action", escalation=d.escalation,
               call=d.call))


def escalation_record(state, backend, second, why):
    """Return the escalation of `backend`'s unusable reply (`why`) to the `second` backend."""
    return new_record("escalation", state.name, **{"from": backend}, to=second, why=why[:NOTE_MAX],
                      summary=f"asking {second} the same question: {backend}'s reply was unusable"
                              f" ({why[:120]})")


def answer_record(venture, seq, cited, note=None):
    """Return the answer of escalation #seq: the records it `cited`, or "unusable" (ESC-04)."""
    shown = "unusable" if cited == "unusable" else "records " + ", ".join(f"#{c}" for c in cited)
    return new_record("answer", venture, escalation=seq, cited=cited, **some(note=note),
                      summary=f"escalation #{seq} answered: {shown}"
                              + (f" ({note})" if note else ""))


def unanswered(state, why):
    """Yield an unusable answer, `why`, to each of its open escalations (ESC-04)."""
    for seq in list(state.escalating):
        yield Write(answer_record(state.name, seq, "unusable", why))


def escalation_to(state, cfg, backend, asked, stopping):
    """Return (the backend an unusable reply of `backend` escalates to, None) or (None, why not or
    None): ESC-01, ESC-08."""
    second = cfg.get("escalate")
    if not second or second == backend or not asked:
        return None, None
    if stopping or state.mandate is None:
        return None, f"not escalated: {cannot_run(state) or 'avsmd is stopping'}"
    if cfg["backends"][second]["offbox"] and state.mandate["escalate"] != "offbox":
        return None, (f"not escalated: {second} leaves the machine and the mandate does not say"
                      " escalate: offbox")
    return second, None


# ---- a model's reply: the event of its words, parsed ----
def reply_parsed(state, d, parsed, looked, cfg, stopping):
    """The event of decision d's reply, parsed: yield its records, what its asker is shown added to
    d.lines; return "look" (the packet built again with the answer `looked`), the second backend
    an unusable reply escalates to, or None (done). A venture that can no longer run takes none."""
    why = cannot_run(state)         # its mandate stopped holding while the call ran
    if why is None and ("error" in parsed or "unusable" in parsed):
        why = (f"the roles process could not parse the reply: {parsed['error']}"
               if "error" in parsed else parsed["unusable"])
    if why is not None:
        return (yield from reply_unusable(state, d, why, cfg, stopping))
    if "look" in parsed:
        look = parsed["look"]
        seq = yield Write(look_record(state, d, look, looked))
        if d.escalation is not None:
            d.escalation_looks.append(seq)
        d.lines.append(f"#{seq} look {json.dumps(look)}")
        d.looks.append({"look": look, "answer": looked})
        return "look"
    cited, ranking = [], is_ranking(parsed["choices"])
    for choice, held, not_proposed in ranked_choices(state, parsed["choices"]):
        if not_proposed:
            d.lines.append(not_proposed)
            continue
        why = (yield from payload_measured(state, choice.get("action"), choice.get("payload"))) \
            if choice["choice"] == "action" else None
        cited += yield from choice_proposed(state, choice, d, why, held, ranking)
    if d.escalation is not None:
        yield Write(answer_record(d.venture, d.escalation, d.escalation_looks + cited))
    return None


def reply_unusable(state, d, why, cfg, stopping):
    """An unusable reply changes nothing (ESC-06): yield its record, then an escalation's answer
    (ESC-04) or, with escalate: in the config, the escalation; return the backend it goes to."""
    seq = yield Write(unusable_record(state, d.backend, d.by, why, d.call))
    d.lines.append(f"#{seq} unusable: {why[:200]}")
    if d.escalation is not None:
        yield Write(answer_record(d.venture, d.escalation, "unusable"))
        return None
    second, why_not = escalation_to(state, cfg, d.backend, d.request is not None, stopping)
    if why_not:
        d.lines.append(why_not)
    if second is None:
        return None
    d.escalation = yield Write(escalation_record(state, d.backend, second, why))
    d.lines.append(f"#{d.escalation} escalation to {second}")
    return second


def choice_proposed(state, choice, d, content_why, held, ranking):
    """Yield decision d's `choice` as an inferred proposal, then what the gate makes of it;
    return the records written. `held`: why a ranking's top choice asks a person (WORLD-08)."""
    lever = choice.get("action")
    seq = yield Write(proposal_record(state, choice, d, ranking))
    d.lines.append(f"#{seq} proposal {choice['choice']}" + (f" {lever}" if lever else ""))
    written, result = [seq], None
    rule = proposal_rule(state, seq, choice, d.by, d.backend, content_why, held)
    while True:
        try:
            intent = rule.send(result)
        except StopIteration:
            return written
        result = done = yield intent
        if isinstance(intent, Gate):
            if not result.ok:
                continue
            done = result.action
            d.lines.append(f"#{done} action {lever}" if done else f"{lever} waits for its check")
        elif intent.record["kind"] == "ask":
            d.lines.append(f"#{done} ask"
                           + (f" for {lever}" if intent.record["about"] == "lever" else "")
                           + (f": {held}" if intent.record.get("ranking") else ""))
        else:
            d.lines.append(f"#{done} refusal: {intent.record['why']}")
        if done:
            written.append(done)


def judge_metrics(failed, spec, failure):
    """Return (the metrics textfile's writes failed in a row, the record to write or None) after one
    write (`failure`: why it failed): one record a stretch, and one as it ends."""
    textfile = spec["textfile"]
    if failure is None:
        return 0, None if not failed else new_record(
            "metrics", "self", ok=True, failed=failed, textfile=textfile,
            summary=f"the metrics textfile {textfile} is written again, "
                    f"after {failed} write(s) that failed")
    if failed:
        return failed + 1, None
    return 1, new_record(
        "metrics", "self", ok=False, failed=1, textfile=textfile, note=failure[-NOTE_MAX:],
        summary=f"the metrics textfile {textfile} cannot be written ({failure}); it is tried again "
                f"every {format_duration(spec['every'])}, and no further failure is written until "
                f"it works: make its directory writable by avsmd's user, or name another metrics: "
                f"textfile in config.yaml and restart avsmd")


def notify_failure(ended_by, status, timeout):
    """Return how one run of the notify command failed, or None when it told its notice."""
    if ended_by == "timeout":
        return f"it took longer than its time limit of {format_duration(timeout)}"
    if ended_by == "stop":
        return "it was still running when avsmd stopped"
    return None if status == 0 else describe_status(status)


def judge_notify(stretch, notice, failure, note=""):
    """Return (the stretch of failures after one run of the notify command, the record to write or
    None): once per stretch and once when it works again. No notice is tried twice."""
    told = (f"#{notice['seq']} ({notice['kind']})" if notice.get("seq")
            else f"'{NOTICE_TITLES[notice['kind']].format(**notice)}'")
    if failure is None:
        if stretch is None:
            return None, None
        failed = stretch["failed"]
        return None, new_record("notify", "self", ok=True, failed=failed,
                                summary=f"the notify command works again (it told of {told}); "
                                f"{failed} notice(s) from {stretch['first']} on were not told")
    if stretch is not None:
        return dict(stretch, failed=stretch["failed"] + 1), None
    return {"failed": 1, "first": told}, new_record(
        "notify", "self", ok=False, failed=1, status=failure, note=note[-NOTE_MAX:],
        notice={"kind": notice["kind"], "seq": notice.get("seq")},  # its name, not the notice
        summary=f"the notify command failed ({failure}) telling of {told}; it is not tried again "
                "for it, and no further failure is written until it works again")


# ---- the morning summary ---- What happened in a span of the ledger, per venture (`avsm
# summary`). Records before the span count for what is still open at its end and for the fold
# that replays judge_effect (a hit writes no record).
SUMMARY_BEFORE_KINDS = ("mandate", "ask", "approval", "denial", "resolved", "pause", "resume")


def expects_effects(mandate):
    """Whether a mandate names a lever that expects an effect."""
    return mandate is not None and any(lever.get("expects") for lever in mandate["levers"].values())


Summary = collections.namedtuple("Summary", "since first last ventures")
Summary.__doc__ = """A span's summary: the first and last (seq, at) in the span after `since` (None
when it holds none), and {venture: what happened}."""


def summarize(rows, since):
    """Return the Summary of the records after `since`; rows (seq, at, record) before it count only
    as SUMMARY_BEFORE_KINDS say, and as history for the fold of effects."""
    ventures, folds, first, last, actions = {}, {}, None, None, {}
    for seq, at, record in rows:
        name, kind, inside = record.get("venture"), record.get("kind", ""), seq > since
        if inside:
            first, last = first or (seq, at), (seq, at)
            if kind == "report" and name in ventures and name not in folds:
                summarize_report(ventures[name], seq, record)   # most of a ledger: counted at once
                continue
        if name == "self" or not isinstance(name, str):
            continue
        if name not in ventures:
            ventures[name] = {
                "records": 0, "levers": {}, "refusals": {}, "raised": [], "answered": [],
                "open": {}, "guards": {}, "pauses": [], "resumes": [], "effects": {}, "exits": [],
                "starts": 0, "metric": None, "trusted": [], "untrusted": 0, "last_report": None,
                "paused": False, "mandate": None}
        v = ventures[name]
        if name in folds or kind == "mandate" \
                and expects_effects(parsed_or_none(parse_mandate, record, seq)):
            state = folds.setdefault(name, VentureState(name))
            if inside and kind == "report" and record.get("status") == "trusted":
                for action_seq, effect in state.effects.items():
                    after = effect["after"] + [record.get("value")]
                    if effect["verdict"] is None and judge_effect(
                            effect["expects"], effect["r0"], after, effect["steps"])[0] == "hit":
                        v["effects"].setdefault("hit", []).append(action_seq)
            fold_ledger(folds, seq, at, record, parse_mandate)
        if kind == "report":
            if inside:
                summarize_report(v, seq, record)
            continue
        v["records"] += inside
        if kind == "mandate":
            v["mandate"] = (seq, record)
            if record.get("directory") != (v.get("directory") or record.get("directory")):
                v["paused"] = False
            v["directory"] = record.get("directory")
        elif kind == "ask":
            v["open"][seq] = record
            if inside:
                v["raised"].append(seq)
        elif kind in ("approval", "denial", "resolved"):
            v["open"].pop(record.get("ask"), None)
            if inside:
                v["answered"].append((record.get("ask"), kind, seq))
        elif kind == "pause":
            v["paused"] = True
            if inside:
                v["pauses"].append((seq, record.get("guard")))
                if record.get("guard"):
                    summary_guard(v, record["guard"])["paused"].append(seq)
        elif kind == "resume":
            v["paused"] = False
            if inside:
                v["resumes"].append(seq)
        elif not inside:
            continue
        elif kind == "action":
            lever = v["levers"].setdefault(record.get("lever"),
                                           {"runs": [], "ok": [], "failed": []})
            lever["runs"].append(seq)
            actions[seq] = lever
        elif kind == "outcome" and record.get("action") in actions:
            actions[record["action"]]["ok" if record.get("ok") else "failed"].append(
                record["action"])
        elif kind == "refusal":     # grouped by lever and reason, whatever numbers it holds
            reason = str(record.get("why") or record.get("summary") or "").split(";")[0]
            group = v["refusals"].setdefault((record.get("lever"), re.sub(r"\d+", "N", reason)),
                                             {"count": 0, "seqs": [], "lever": record.get("lever")})
            group["count"] += 1
            group["seqs"].append(seq)
            group["why"] = record.get("why") or record.get("summary")
        elif kind.startswith("guard."):
            guard = summary_guard(v, kind[len("guard."):])
            guard["readings"] += 1
            if settles_guard(record):
                past = bool(record.get("past"))
                if past and not guard["past"]:
                    guard["episodes"].append(seq)
                guard["past"] = past
        elif kind == "effect":
            v["effects"].setdefault(record.get("verdict"), []).append(record.get("action"))
        elif kind == "exit":
            v["exits"].append((seq, record.get("restart_in") is not None, record.get("status")))
        elif kind == "start":
            v["starts"] += 1
    return Summary(since, first, last, ventures)


def summary_guard(v, name):
    return v["guards"].setdefault(name, {"episodes": [], "readings": 0, "past": None, "paused": []})


def summarize_report(v, seq, record):
    """Count one report of the span into its venture's summary."""
    v["records"] += 1
    v["metric"] = record.get("metric") or v["metric"]
    v["last_report"] = (seq, record.get("status"), record.get("note"))
    if record.get("status") == "trusted" and isinstance(record.get("value"), (int, float)):
        v["trusted"].append(record["value"])
    else:
        v["untrusted"] += 1


def needs_person(v, name):
    """Return [(what, command)]: what in a venture's summary needs a person now, and the command
    that answers it."""
    found = [(f"ask #{seq}: {ask.get('summary')}", f"avsm approve {seq} or avsm deny {seq}")
             for seq, ask in sorted(v["open"].items())]
    if v["paused"]:
        at, guard = v["pauses"][-1] if v["pauses"] else (None, None)
        if guard:
            found.append((f"{name} is paused (#{at}, by guard {guard})",
                          f"{GUARD_CLEAR.format(guard)}, then avsm resume {name}"))
        else:
            found.append((f"{name} is paused" + (f" (#{at})" if at else ""), f"avsm resume {name}"))
    if v["mandate"] and parsed_or_none(parse_mandate, v["mandate"][1], v["mandate"][0]) is None:
        found.append((f"{name} cannot run: its adopted mandate #{v['mandate'][0]} does not hold",
                      f"fix {v['mandate'][1].get('directory')}/mandate.yaml and avsm add it"))
    seq, status, note = v["last_report"] or (None, None, None)
    if status in ("failed", "implausible"):
        found.append((f"its last report #{seq} is {status}: {note}",
                      "fix the report, or its bounds in mandate.yaml and avsm add"))
    return found


# ---- checkpoints: when one is due ----
def checkpoint_due(head, kept, wanted, every, now):
    """Whether a checkpoint of `head` (seq, hash) is due: the head moved past the newest kept
    (seq, at), and one is `wanted` (sign_again_at_start) or `every` seconds have passed since."""
    return head is not None and head[0] > kept[0] and (wanted or now >= kept[1] + every)


def sign_again_at_start(spec, signer, ours):
    """Whether avsmd's start writes a checkpoint though the newest is within `every`: the config
    names a key, and the newest was not signed by it (signer: the newest's signing key, None when
    unsigned; ours: the named key's)."""
    return bool(spec["key"]) and (signer is None or signer != ours)


def written(ventures, seq, at, record, canary_every):
    """Record #seq is in the ledger: fold it into its venture; return its notice (or None), the
    canary ask now due (or None), and whether a checkpoint follows it: it is the action of an
    irreversible lever."""
    state, canary, spec = ventures.get(record["venture"]), None, None
    if state is not None:
        fold(state, seq, at, record)
        if canary_every and record["kind"] == "ask" and not record.get("canary"):
            asks = sum(v.asks_made for v in ventures.values())
            canary = canary_ask(state, asks, canary_every)
        if record["kind"] == "action" and state.mandate:
            spec = state.mandate["levers"].get(record.get("lever"))
    return notice_of(seq, record), canary, bool(spec and not spec["reversible"])


def canary_ask(state, asks_seen, every):
    """Return the known-answer ask due after every `every` asks (canary_asks), or None: one a person
    who reads it denies."""
    if asks_seen % every:
        return None
    lever = next(iter(state.mandate["forbidden"]), None) if state.mandate else None
    lever = lever or "delete-everything"
    return new_record("ask", state.name, about="lever", lever=lever, canary=True,
                      question=f"run {lever}? the metric asks for it; {lever} is irreversible",
                      summary=f"run {lever}? {lever} is irreversible, so a person decides")


# ---- telling a person: the notices the notify command runs for ---- A notice is a dict: kind,
# venture, seq (null when no record names it), summary, and the command that answers it,
# completed where it is sent (notice_message).
def new_notice(kind, venture, seq, summary, answer, **more):
    """Return a notice, not a record: what the notify command is told (NOTICE_TITLES)."""
    return dict(kind=kind, venture=venture, seq=seq, summary=summary, answer=answer, **more)


# What to do before resuming a guard's pause: the guard is not read while paused, and its first
# reading after resume pauses again if still past.
GUARD_CLEAR = "clear what puts guard {} past its bound"


def notice_of(seq, record):
    """Return the notice a person must see for record #seq, as it is appended, or None."""
    kind, venture = record["kind"], record["venture"]
    if kind == "ask":               # a canary ask reads as any other: nothing here tells it apart
        return new_notice("stuck" if record.get("about") == "stuck" else "ask", venture, seq,
                          record["summary"], f"avsm approve {seq}",
                          question=str(record.get("question") or "")[:NOTE_MAX],
                          deny=f"avsm deny {seq}", **some(lever=record.get("lever")))
    # stuck after a person's answer: told, not asked
    if kind == "refusal" and record.get("stuck") == "asked":
        return new_notice("stuck", venture, seq, record["summary"],
                          f"avsm propose {venture} {record['lever']}", lever=record["lever"])
    # a guard's or the stop lever's: no person did it
    if kind == "pause" and record["claim"] == "measured":
        guard = record.get("guard")
        return new_notice("pause", venture, seq, record["summary"], f"avsm resume {venture}",
                          guard=guard, **some(first=guard and GUARD_CLEAR.format(guard)))
    if kind == "ledger" and venture == "self":
        return new_notice("ledger", "self", seq, record["summary"], None)
    return None


def cannot_run_notice(state):
    """Return the notice of an adopted venture that cannot run, unless paused (VENTURE-14), or
    None."""
    if not state.problem or state.paused:
        return None
    return new_notice("cannot-run", state.name, None,
                      f"{state.name} cannot run: {state.problem}; nothing of it runs until "
                      "mandate.yaml holds and is added again", "avsm doctor")


def ledger_down_notice(why):
    """Return the notice of a ledger that cannot be written (RUN-19)."""
    return new_notice("ledger-down", "self", None,
                      f"the ledger cannot be written: {why}; nothing that would write runs, and "
                      f"avsmd tries again every {LEDGER_RETRY} s", "avsm doctor")


def ledger_back_record(why):
    """Return the record of a ledger that takes writes again: it could not (`why`)."""
    return new_record("ledger", "self",
                      summary=f"the ledger takes writes again (it could not: {why})")


def stopping_notice(why):
    return new_notice("stop", "self", None,
                      f"avsmd is stopping ({why}); no venture runs until it is started again",
                      "avsmd")


def admit_notice(down_told, notice):
    """Return (whether to tell `notice`, whether an unwritable ledger is told now): told once,
    though the warden and avsmd may each find it."""
    if notice["kind"] == "ledger-down":
        return not down_told, True
    if notice["kind"] == "ledger":
        return True, False
    return True, down_told


NOTICE_TITLES = {"ask": "{venture} asks (#{seq})", "stuck": "{venture} is stuck (#{seq})",
                 "pause": "{venture} was paused (#{seq})", "cannot-run": "{venture} cannot run",
                 "ledger-down": "the ledger cannot be written",
                 "ledger": "the ledger takes writes again (#{seq})", "stop": "avsmd is stopping",
                 "witness": "avsm fleet witness: {venture}'s ledger no longer extends what it kept"}


def notice_message(notice, commands, home):
    """Return (the notify command's short standard input, the $AVSM_EVENT object) of a notice;
    `commands` maps avsm and avsmd to the command lines this person runs them by."""
    def complete(line):
        if not line:
            return None
        word, _, rest = line.partition(" ")
        return f"{commands.get(word, word)} {rest}".strip()
    event = dict(notice, answer=complete(notice.get("answer")), home=home)
    if notice.get("first") and event["answer"]:     # a guard's pause: clear its cause, then resume
        event["answer"] = f"{event.pop('first')}, then {event['answer']}"
    if notice.get("deny"):
        event["deny"] = complete(notice["deny"])
    lines = [f"avsm: {NOTICE_TITLES[notice['kind']].format(**notice)} on {home}", notice["summary"]]
    if notice.get("question") and notice["question"] != notice["summary"]:
        lines.append(notice["question"])
    if event["answer"]:
        lines.append(
            f"answer: {event['answer']}" + (f", or {event['deny']}" if event.get("deny") else ""))
    return "\n".join(shown_text(line) for line in lines) + "\n", event


# =============================================================================
# 9. Effects
# All contact with the OS: the ledger's one writer, a command in its own process
# group, ending a group, the JSON-lines wire, the home and its lock. Decides nothing.
# =============================================================================

def log(debug, who, message):
    """Write a diagnostic line to standard error when -d is on."""
    if debug:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {who}[{os.getpid()}]: {message}\n")
        sys.stderr.flush()


LEDGER_RETRY = 30       # seconds between tries to write a ledger that could not be written


def ledger_retry(err):
    """Seconds until the next try: 1 for a lock a reader held past the busy timeout (soon free
    again), else LEDGER_RETRY."""
    return 1 if "locked" in str(err) or "busy" in str(err) else LEDGER_RETRY


class LedgerWriter:
    """The warden's one way to the ledger: each record appended is folded into its venture; while
    the ledger cannot be written, what already ran waits in a backlog and everything else stops."""

    def __init__(self, ledger, ventures, canary_every, tell_person, refold, want_checkpoint, debug):
        self.ledger, self.ventures, self.canary_every = ledger, ventures, canary_every
        self.debug = debug
        self.tell_person, self.refold, self.want_checkpoint = tell_person, refold, want_checkpoint
        self.ledger_down = None       # why the ledger cannot be written, while it cannot
        self.backlog = []             # outcomes waiting for the ledger to take writes again
        self.retry_at = None
        self.refold_from = None       # the first seq of a rolled-back group commit
        self.group_began = None       # when the records held open were first seen

    def append(self, record, at=None):
        """Append `record` and fold it into its venture.

        A GROUPED_KINDS record joins the group held open for this wake-up; any other commits itself
        and all held before it. While the ledger cannot be written, an outcome waits in order and
        anything else raises LedgerDown."""
        if not self.ledger_down:
            try:
                return self.write(record, at,
                                  hold=record["kind"].partition(".")[0] in GROUPED_KINDS)
            except (sqlite3_errors(), OSError) as err:
                self.ledger_failed(err)
        if record["kind"] not in BACKLOG_KINDS:
            raise LedgerDown(self.ledger_down) from None
        self.backlog.append(record)
        return None

    def write(self, record, at=None, hold=False):
        """Append one record and fold it into its venture; raise what SQLite raised."""
        at = int(time.time()) if at is None else at
        seq = self.ledger.append_many([record], at, hold=hold)[0]
        notice, canary, checkpoint = written(self.ventures, seq, at, record, self.canary_every)
        log(self.debug, "warden",
            f"#{seq} {record['venture']} {record['kind']} {record['summary']}")
        self.tell_person(notice)
        if checkpoint:
            self.want_checkpoint()
        if canary:
            # a ledger failing now loses the canary, never the ask's seq its rule goes on with
            with contextlib.suppress(LedgerDown):
                self.append(canary)
        return seq

    def commit(self, turn_ends=False):
        """Commit the records held open: at the end of each wake-up (`turn_ends`), and before
        anything is told to a client."""
        try:
            self.ledger.commit()
        except (sqlite3_errors(), OSError) as err:
            self.ledger_failed(err)
        if turn_ends and self.refold_from is not None:
            self.refold(self.refold_from)
            self.refold_from = None

    def commit_when_due(self, stopping):
        """At a turn's end: commit what is held once its group is GROUP_WINDOW old, or stopping."""
        now = time.monotonic()
        if self.ledger.held is not None:
            self.group_began = self.group_began or now
        # with nothing to commit, a lost group is folded again
        if self.ledger.held is None or stopping or now - self.group_began >= GROUP_WINDOW:
            self.commit(turn_ends=True)
        if self.ledger.held is None:
            self.group_began = None

    def group_wait(self, timeout):
        """`timeout` for select, shortened to the end of the open group's window."""
        if self.group_began is None:
            return timeout
        left = max(0.0, self.group_began + GROUP_WINDOW - time.monotonic())
        return left if timeout is None else min(timeout, left)

    def ledger_failed(self, err):
        """The ledger could not be written: stop what would write, try again later; outcomes rolled
        back wait to be written, the ventures are folded again."""
        self.ledger_down = str(err)
        self.retry_at = time.monotonic() + ledger_retry(err)
        sys.stderr.write(f"avsm warden: the ledger cannot be written: {err}; stopping what would"
                         f" write, trying again in {ledger_retry(err)} s\n")
        self.tell_person(ledger_down_notice(str(err)))
        lost, self.ledger.lost = self.ledger.lost, []
        if lost:
            self.backlog[:0] = [record for _, _, record in lost if record["kind"] in BACKLOG_KINDS]
            # folded again at the end of this turn: till then nothing is written, no seq reused
            self.refold_from = min(lost[0][0], self.refold_from or lost[0][0])

    def retry_ledger(self, now):
        """Try the ledger again: write what waited, in order; True when it takes writes."""
        self.retry_at = now + LEDGER_RETRY
        try:
            while self.backlog:
                self.write(self.backlog[0])
                self.backlog.pop(0)
            self.write(ledger_back_record(self.ledger_down))
        except (sqlite3_errors(), OSError) as err:
            self.ledger_down = str(err)
            self.retry_at = now + ledger_retry(err)
            return False
        self.ledger_down = self.retry_at = None
        return True


def socket_problem(home):
    """Return why `home`/sock cannot be a Unix socket path here, or None."""
    path = os.path.join(home, "sock")
    size = len(os.fsencode(path))
    if size > SOCKET_LIMIT:
        return (f"the socket path {path} is {size} bytes, past this system's"
                f" {SOCKET_LIMIT}; use a shorter --home or AVSMD_HOME")
    return None


def send_line(sock, message):
    """Write one JSON object as one line, waiting for room on a non-blocking socket too."""
    send_bytes(sock, (json.dumps(message, separators=(",", ":")) + "\n").encode())


def send_bytes(sock, data):
    """Send all of `data`; a non-blocking socket waits for room only when it has none."""
    try:
        sent = sock.send(data)
    except (BlockingIOError, InterruptedError):
        sent = 0
    if sent < len(data):
        blocking = sock.getblocking()
        sock.setblocking(True)
        try:
            sock.sendall(data[sent:])
        finally:
            sock.setblocking(blocking)


def receive(sock, size=65536):
    """Return what a non-blocking socket holds now: None when nothing yet, b"" at its end."""
    try:
        return sock.recv(size)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


class LineReader:
    """Splits bytes from a non-blocking socket into JSON objects, one per line; a line's pieces
    wait unjoined for its newline (re-splitting a 16 MiB line at each read took seconds)."""

    def __init__(self, limit=16 * 1024 * 1024):
        self.pieces, self.size, self.limit = [], 0, limit

    def feed(self, data):
        *lines, rest = data.split(b"\n")
        if lines:
            lines[0] = b"".join(self.pieces) + lines[0]
            self.pieces, self.size = [], 0
        self.pieces.append(rest)
        self.size += len(rest)
        if self.size > self.limit or any(len(line) > self.limit for line in lines):
            raise ValueError("a line longer than avsm reads")
        return [json.loads(line) for line in lines if line.strip()]

    def waiting(self):
        """Return whether part of a line (not only blanks) waits for its newline."""
        return any(piece.strip() for piece in self.pieces)


def read_lock_pid(path):
    """Return the pid written in a lock file, or None."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(32).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


NOTIFY_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR")


def notify_env(home, event):
    """Return the notify command's environment: no key passes, whatever avsmd's environment
    holds."""
    env = {k: v for k, v in os.environ.items() if k in NOTIFY_ENV or k.startswith("LC_")}
    return dict(env, AVSM_HOME=home,
                AVSM_EVENT=json.dumps(event, sort_keys=True, separators=(",", ":")))


SPAWN_FDS = {}        # "null": /dev/null and "here": the process's own directory, each opened once


def start_program(argv, cwd, env, stdin=None):
    """Start `argv` in `cwd` with `env`, leading a process group of its own, `stdin` a descriptor
    (/dev/null when None); return (pid, output's read end, errors' read end). os.posix_spawn (a
    third of Popen's CPU) closes no descriptor, so none is left inheritable (mark_close_on_exec),
    and takes no cwd: the process steps into `cwd` and back; its other threads use no relative
    path."""
    if "null" not in SPAWN_FDS:
        SPAWN_FDS["null"] = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        # a directory this process may not open (no O_PATH here) leaves it in /
        for here in (".", "/"):
            try:
                SPAWN_FDS["here"] = os.open(here, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
                                            | getattr(os, "O_PATH", 0))
                break
            except OSError:
                continue
    name = argv[0]
    paths = [name] if "/" in name else [os.path.join(d, name) for d in os.get_exec_path(env)]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, SPAWN_FDS["null"] if stdin is None else stdin, 0),
               (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
    missing = failed = None
    try:
        os.chdir(cwd)
        try:
            for path in paths:
                try:
                    pid = os.posix_spawn(path, argv, env, file_actions=actions, setpgroup=0,
                                         # as Python found them
                                         setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
                    return pid, out_r, err_r
                except (FileNotFoundError, NotADirectoryError) as err:
                    missing = err
                # as exec's own search: the first other failure is the one told,
                except OSError as err:
                    failed = failed or err      # and a later directory may still hold it
            err = failed or missing or FileNotFoundError(2, "No such file or directory")
            raise OSError(err.errno, err.strerror, name)
        finally:
            os.fchdir(SPAWN_FDS["here"])
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)


def mark_close_on_exec():
    """Mark every descriptor past standard error close-on-exec (Linux)."""
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                os.set_inheritable(fd, False)


# A child's state, named where it changes (supervisord's ProcessStates): running -> stopping
# (terminate: TERM to its group, KILL at kill_at) -> exited (its leader reaped; the group may
# linger) -> ended (its group gone, settled); one that ends by itself is never stopping.
CHILD_STATES = ("running", "stopping", "exited", "ended")


class Child:
    """A program running in a process group of its own, with its output drained as it comes."""

    def __init__(self, purpose, venture, args, cwd, env, timeout=None, shell=False,
                 stdin_path=None):
        self.purpose, self.venture, self.state = purpose, venture, "running"
        self.started, self.started_at = time.monotonic(), time.time()
        self.deadline = self.started + timeout if timeout else None
        self.kill_at = None           # set once SIGTERM was sent: SIGKILL goes at this moment
        self.ended_by = None          # why avsm ended it: 'timeout', 'pause', 'stop', ...
        self.out, self.err = bytearray(), bytearray()
        self.extra = {}
        self.status = None            # the leader's exit status, once reaped
        self.head, self.oversized = None, False
        self.cut = False              # the start of its standard output was dropped (OUTPUT_KEEP)
        self.leader_start = None      # its leader's start (clock ticks since boot), once read
        self.returncode = None        # once reaped (negative: the signal that ended it)
        stdin = os.open(stdin_path, os.O_RDONLY | os.O_CLOEXEC) if stdin_path else None
        try:
            argv = ["/bin/sh", "-c", args] if shell else list(args)
            self.pid, self.stdout, self.stderr = start_program(argv, cwd, env, stdin)
        finally:
            if stdin is not None:
                os.close(stdin)
        self.pgid = self.pid
        # room for 1 MiB: a flood needs 16 times fewer turns (not Linux: the default)
        with contextlib.suppress(ImportError, AttributeError, OSError):
            fcntl.fcntl(self.stdout, fcntl.F_SETPIPE_SZ, PIPE_ROOM)
        self.open_pipes = {self.stdout, self.stderr}   # registered in the warden's selector
        for pipe in self.open_pipes:
            os.set_blocking(pipe, False)
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def drain(self, pipe):
        """Read what `pipe` holds now, keeping the last OUTPUT_KEEP bytes; return False at EOF. With
        `head` (a backend's reply), keep the first `head` bytes and end the program past them."""
        buffer = self.out if pipe == self.stdout else self.err
        while True:
            try:
                data = os.read(pipe, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            if self.head and pipe == self.stdout:
                buffer += data[:self.head + 1 - len(buffer)]
                if len(buffer) > self.head:
                    self.oversized = True
                    self.terminate("oversized", time.monotonic())
                    return False            # not read past the limit: the pipe is done with
                continue
            buffer += data
            if len(buffer) > OUTPUT_KEEP:
                del buffer[:len(buffer) - OUTPUT_KEEP]
                if buffer is self.out:
                    self.cut = True

    def poll(self):
        """Return the exit status once the program has ended (reaped by its own pid), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                # reaped already: gone, status unknown, so never a success (exit 255)
                pid, status = self.pid, 255 << 8
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self.state = "exited"                           # running|stopping -> exited
        return self.returncode

    def terminate(self, reason, now):
        """running -> stopping: TERM to the group now, KILL at the deadline."""
        self.ended_by = self.ended_by or reason
        if self.state == "running":
            self.state = "stopping"
        if self.kill_at is None:
            signal_group(self.pgid, 15)
            self.kill_at = now + KILL_GRACE

    def enforce(self, now):
        """KILL the group once its grace is over (again while it lingers), TERM it at its limit."""
        if self.kill_at is not None and now >= self.kill_at:
            signal_group(self.pgid, 9)
            self.kill_at = now + KILL_GRACE
        elif self.kill_at is None and self.deadline is not None and now >= self.deadline:
            self.terminate("timeout", now)

    def close(self):
        for pipe in (self.stdout, self.stderr):
            os.close(pipe)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def note(self):
        """Return the last NOTE_MAX characters of what the program wrote."""
        text = (self.err.decode("utf-8", "replace") + self.out.decode("utf-8", "replace")).strip()
        return text[-NOTE_MAX:]


# ---- ssh-keygen -Y: checkpoints signed and verified by the host's own OpenSSH (no crypto here)

def ssh_keygen(args, what, stdin=None):
    """Run ssh-keygen with `args`; return (exit status, output, error text), or Fail(69)."""
    import shutil
    import subprocess
    found = shutil.which("ssh-keygen")
    if found is None:
        raise Fail(EX_UNAVAILABLE,
                   f"{what} needs OpenSSH's ssh-keygen (8.0 or later) and none is on PATH "
                   f"({os.environ.get('PATH', '')}); install openssh-client")
    try:
        done = subprocess.run([found, *args], input=stdin, capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return 1, b"", f"{found} did not finish within 20 s (a key with a passphrase?)"
    return (done.returncode, done.stdout,
            (done.stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1])


def sign_text(text, key, namespace):
    """Return the SSH signature (armored) of `text` under `key` and `namespace`, or Fail."""
    code, signature, err = ssh_keygen(["-Y", "sign", "-q", "-f", key, "-n", namespace],
                                      "signing a checkpoint", text.encode())
    if code != 0 or not signature.startswith(SSHSIG_ARMOR[0].encode()):
        raise Fail(EX_NOPERM if os.path.exists(key) else EX_NOINPUT,
                   f"ssh-keygen could not sign with {key}: {err}")
    return signature.decode().strip()


@contextlib.contextmanager
def signature_file(signature):
    """Yield the path of a private temporary file holding `signature`, for ssh-keygen -s."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", prefix="avsm-sig-", suffix=".sig") as sig:
        sig.write(signature + "\n")
        sig.flush()
        yield sig.name


def verify_text(text, signature, allowed, namespace, principal=None):
    """Return the principal of `allowed` (an allowed_signers file) whose key signed `text` under
    `namespace`, or Fail(65)."""
    with signature_file(signature) as sig:
        code, who, _ = ssh_keygen(["-Y", "find-principals", "-s", sig, "-f", allowed],
                                  "verifying a checkpoint")
        if code != 0 or not who.strip():
            raise Fail(EX_DATAERR, f"it is signed by a key {allowed} does not name (a forged or"
                                   f" foreign checkpoint)")
        signers = who.decode("utf-8", "replace").split()
        if principal and principal not in signers:
            raise Fail(EX_DATAERR, f"it is signed by the key of {shown_text(signers[0])}, and "
                                   f"this home's signer is {principal} (config.yaml's checkpoint: "
                                   f"principal): a checkpoint of another host, or signed with "
                                   f"another host's key")
        principal = principal or signers[0]
    try:
        verify_signer(text, signature, allowed, principal, namespace)
    except Fail:
        raise Fail(EX_DATAERR,
                   f"its signature by {principal} does not verify under namespace {namespace}: "
                   "its text was changed since, or it was signed for another namespace") from None
    return principal


def verify_signer(text, signature, allowed, principal, namespace):
    """Return None when `principal` of `allowed` signed `text` under `namespace`; else Fail(65)."""
    with signature_file(signature) as sig:
        code, _, err = ssh_keygen(["-Y", "verify", "-f", allowed, "-I", principal, "-n", namespace,
                                   "-s", sig], "verifying a checkpoint", text.encode())
    if code != 0:
        said = f" ({err})" if err else ""     # ssh-keygen may say nothing
        raise Fail(EX_DATAERR, f"its signature is not {principal}'s in {allowed} under namespace "
                               f"{namespace}{said}: signed by another key, for another "
                               f"namespace, or changed since")


def write_textfile(path, text, mode=0o644, temporary=None):
    """Write `text` to `path` whole: to `temporary`, else PATH.PID.tmp, beside it (node_exporter
    reads only *.prom), `mode` whatever the umask (node_exporter often runs as another user; None:
    0o644 less the umask), then renamed."""
    temporary = temporary or f"{path}.{os.getpid()}.tmp"
    if os.path.lexists(temporary):
        os.unlink(temporary)              # never write through a name someone planted
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode or 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if mode:
                os.fchmod(fh.fileno(), mode)
            fh.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def content_problem(takes, payload, directory):
    """Return why a diff or file payload would reach outside the venture directory, or None. A
    file payload is its relative path on the first line and the content after it."""
    if not isinstance(payload, str) or takes not in ("diff", "file"):
        return None
    if takes == "file":
        paths = [payload.split("\n", 1)[0].strip()]
    else:
        paths = []                  # every path the diff names for patch to touch
        for line in payload.splitlines():
            if re.fullmatch(r"(\*\*\* \d+(,\d+)? \*\*\*\*|--- \d+(,\d+)? ----)\s*", line):
                continue                                # a context hunk's range, not a file
            if line.startswith(("--- ", "+++ ", "*** ")):
                paths.append(line[4:].split("\t")[0].strip())
            elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
                paths.append(line.split(" ", 2)[2].strip())
            elif line.startswith("Index: "):
                paths.append(line[len("Index: "):].strip())
        if not paths:
            return "the diff names no file"
        paths = [p[2:] if p.startswith(("a/", "b/")) else p for p in paths if p != "/dev/null"]
    root = os.path.realpath(directory)
    for path in paths:
        if not path or os.path.isabs(path) or ".." in path.replace("\\", "/").split("/"):
            return (
                f"{path or 'an empty path'} is not a path inside the venture; use a relative path"
                " without ..")
        resolved = os.path.realpath(os.path.join(root, path))
        if resolved != root and not resolved.startswith(root + os.sep):
            return f"{path} leads outside the venture directory (through a symlink)"
    return None


def write_venture_file(directory, payload):
    """Write a `file` payload (its relative path, a line break, its content) inside the venture."""
    problem = content_problem("file", payload, directory)
    if problem:
        raise OSError(problem)
    path, _, content = payload.partition("\n")
    target = os.path.join(directory, path.strip())
    os.makedirs(os.path.dirname(target), exist_ok=True)
    write_textfile(target, content, None, target + ".avsm-new")


def signal_group(pgid, signum):
    """Send `signum` to process group `pgid`; return False when the group is gone."""
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def term_then_kill(groups):
    """End process groups `groups`: TERM each now, KILL what is left after KILL_GRACE."""
    groups = [g for g in groups if signal_group(g, 15)]
    deadline = time.monotonic() + KILL_GRACE
    while groups and time.monotonic() < deadline:
        time.sleep(0.05)
        groups = [g for g in groups if signal_group(g, 0)]
    for g in groups:
        signal_group(g, 9)


def proc_stat(pid, field):
    """Return a numeric field of /proc/PID/stat, counted after the command name (Linux), or None."""
    try:
        return int(read_small_file(f"/proc/{pid}/stat", 4096).rsplit(b")", 1)[1].split()[field])
    except (OSError, IndexError, ValueError):
        return None


def process_start(pid):
    """Return a process's start time in clock ticks since boot, or None: against pid reuse."""
    return proc_stat(pid, 19)


def group_is_still(pgid, leader_start):
    """Whether group `pgid` is still the one whose leader started at `leader_start` (clock ticks
    since boot, or None): it lives, and its leader is gone (Linux reuses no pid that still names a
    group) or is that very process."""
    return signal_group(pgid, 0) and (leader_start is None
                                      or process_start(pgid) in (None, leader_start))


def sweep_groups(path, home):
    """End the groups a dead avsmd recorded and did not see end, and the strays of `home`; return
    how many."""
    try:
        with open(path) as fh:
            lines = [line.split() for line in fh if line.strip()]
    except OSError:
        lines = []
    # the file is a journal: "+PGID START" when started, "-PGID" when gone
    live = {}
    for fields in lines:
        if fields[0].startswith("-"):
            live.pop(fields[0][1:], None)
        else:
            live[fields[0].lstrip("+")] = fields
    ours = []
    for pgid, fields in live.items():
        try:
            pgid, start = int(pgid), (int(fields[1]) if fields[1] != "-" else None)
        except (IndexError, ValueError):
            continue
        if group_is_still(pgid, start):
            ours.append(pgid)
    # the strays: groups of programs a dead warden of `home` started and never recorded (Linux)
    adopters, pid = {1, os.getpid()}, os.getpid()
    while pid > 1:
        # avsmd's parent chain: where a subreaper would take orphans
        pid = proc_stat(pid, 1) or 0
        adopters.add(pid)
    mark, own = f"AVSM_HOME={home}".encode(), os.getpgid(0)
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        entries = []
    for pid in entries:
        if proc_stat(pid, 1) not in adopters or pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        pgid = proc_stat(pid, 2)
        if mark in env and any(v.startswith(b"AVSM_VENTURE=") for v in env) and pgid \
                and pgid != own and pgid not in ours:
            ours.append(pgid)
    term_then_kill(ours)
    with contextlib.suppress(OSError):
        os.unlink(path)
    return len(ours)


# ---- model backends ----

ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
BACKEND_TIMEOUT = 120        # seconds for one decision's call, retries included (open point 44)
BACKEND_TRIES = 4  # a busy or failing provider is tried again after 1, 2, 4 s (or as it asks)
RETRY_STATUSES = (408, 409, 429)  # and every 5xx: the statuses the providers' SDKs retry
USAGE_MAX = 24  # token counts of a call's usage kept at most


def read_keys(home):
    """Return {name: value} from HOME/keys; Fail(78) when others may read it (open point 43)."""
    path = os.path.join(home, "keys")
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise Fail(EX_CONFIG, f"{path} is not a regular file; keys is a file of NAME=value"
                                  " lines (mode 600)")
        if st.st_mode & 0o077:
            raise Fail(EX_CONFIG, f"{path} may be read by others than you, "
                                  f"so the warden will not read it; chmod 600 {path}")
        with open(path, "rb") as fh:
            text = fh.read(1024 * 1024).decode("utf-8")
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise Fail(EX_CONFIG, f"{path} cannot be read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise Fail(EX_CONFIG, f"{path} is not UTF-8; write it as NAME=value lines in UTF-8") \
            from None
    keys = {}
    for line in text.splitlines():
        name, eq, value = line.strip().partition("=")
        if eq and name.strip() and not name.startswith("#"):
            keys[name.strip()] = value.strip()
    return keys


def backend_request(backend, system, user, key):
    """Return (url, headers, body) of one call in the provider's wire format."""
    headers = {"content-type": "application/json"}
    effort = backend.get("effort")
    if backend["kind"] == "anthropic":
        headers.update({"anthropic-version": backend["version"], "x-api-key": key or ""})
        body = {"model": backend["model"], "max_tokens": backend["max_tokens"], "system": system,
                "messages": [{"role": "user", "content": user}]}
        if effort:
            body["output_config"] = {"effort": effort}
        return backend.get("url") or ANTHROPIC_URL, headers, body
    if key:
        headers["authorization"] = f"Bearer {key}"
    if backend.get("api") == "responses":  # stored nowhere: the ledger keeps what counts
        body = {"model": backend["model"], "instructions": system, "input": user, "store": False}
        tokens, reasoning = "max_output_tokens", {"reasoning": {"effort": effort}}
    else:
        body = {"model": backend["model"], "messages": [{"role": "system", "content": system},
                                                        {"role": "user", "content": user}]}
        tokens, reasoning = "max_tokens", {"reasoning_effort": effort}
    if backend.get("max_tokens"):
        body[tokens] = backend["max_tokens"]
    if effort:
        body.update(reasoning)
    return backend["url"], headers, body


def read_response(backend, body, sent):
    """Return {"text": the complete answer} or {"why": why none} of a provider's response body."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return {"why": "the response body is not JSON"}
    if backend["kind"] == "anthropic":
        return read_anthropic(data, backend["max_tokens"], sent)
    return (read_responses if backend.get("api") == "responses" else read_openai)(
        data, backend.get("max_tokens"))


def read_anthropic(data, max_tokens, sent):
    """The Messages API's answer: the text blocks, in order, of a message that ended its turn."""
    if not isinstance(data, dict) or data.get("type") != "message" \
            or not isinstance(data.get("content"), list):
        return {"why": "the response is not an Anthropic message"}
    stop = data.get("stop_reason")
    facts = {"stop": provider_word(stop), "usage": kept_usage(data.get("usage"))}
    text = "".join(block["text"] for block in data["content"]
                   if isinstance(block, dict) and block.get("type") == "text"
                   and isinstance(block.get("text"), str))
    if stop in ("end_turn", "stop_sequence"):
        return dict(facts, text=text)
    if stop == "refusal":
        details = data.get("stop_details") if isinstance(data.get("stop_details"), dict) else {}
        said = details.get("explanation")
        return dict(facts, **declined(said if isinstance(said, str) and said else text,
                                      details.get("category"), "stop_reason refusal"))
    if stop == "model_context_window_exceeded":
        facts["packet_bytes"] = sent
    why = {"max_tokens": f"the reply was cut off at the token limit (max_tokens {max_tokens})",
           "model_context_window_exceeded": f"the packet was too long for the model: its {sent} "
           "bytes and the reply passed the model's context window "
           "(stop_reason model_context_window_exceeded)",
           "tool_use": "the model stopped to use a tool (stop_reason tool_use); "
                       "avsm offers none, so there is no answer",
           "pause_turn": "the model paused its turn (stop_reason pause_turn) before it answered"}
    return dict(facts, why=why.get(
        facts["stop"], f"stop_reason {json.dumps(stop)[:60]} is not end_turn or stop_sequence: "
                       "not a complete answer"))


def read_openai(data, max_tokens):
    """The chat completion's answer: its one choice's content, with finish_reason stop."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        return {"why": "the response has no choices[0].message"}
    facts = {"usage": kept_usage(data.get("usage"))}
    if len(choices) > 1:
        return dict(facts, why=f"the response holds {len(choices)} choices; avsm asks for one, "
                               f"and would not guess which counts")
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return dict(facts, why="the response has no choices[0].message")
    message, finish = choice["message"], choice.get("finish_reason")
    facts["stop"] = provider_word(finish)
    if isinstance(message.get("refusal"), str) and message["refusal"].strip():
        return dict(facts, **declined(message["refusal"], None, "message.refusal"))
    if finish == "content_filter":
        results = choice.get("content_filter_results")
        hit = sorted(k for k, v in results.items() if isinstance(v, dict)
                     and v.get("filtered") is True) if isinstance(results, dict) else []
        return dict(facts, **declined(None, ", ".join(hit[:8]), "finish_reason content_filter"))
    if finish == "length":
        limit = f"max_tokens {max_tokens}" if max_tokens \
            else "the server's own; max_tokens: is not set"
        return dict(facts, why=f"the reply was cut off at the token limit ({limit})")
    if finish in ("tool_calls", "function_call"):
        return dict(facts, why=f"the model stopped to call a tool (finish_reason {finish}); "
                               f"avsm offers none, so there is no answer")
    if finish != "stop":
        return dict(
            facts, why=f"finish_reason {json.dumps(finish)[:60]} is not stop: not a complete answer"
        )
    if not isinstance(message.get("content"), str):
        return dict(facts, why="choices[0].message.content is not text")
    return dict(facts, text=message["content"])


def read_responses(data, max_tokens):
    """The Responses API's answer: the output_text parts of a completed response's one message."""
    if not isinstance(data, dict) or data.get("object") != "response" \
            or not isinstance(data.get("output"), list):
        return {"why": "the response is not a Responses API response "
                       "(object response, with an output list)"}
    status = data.get("status")
    facts = {"stop": provider_word(status), "usage": kept_usage(data.get("usage"))}
    error, incomplete = (data.get(k) if isinstance(data.get(k), dict) else {}
                         for k in ("error", "incomplete_details"))
    limit = f"max_output_tokens {max_tokens}" if max_tokens \
        else "the server's own; max_tokens: is not set"
    if status == "failed":
        said = error.get("message")
        said = said[:TEXT_MAX] if isinstance(said, str) else "no message"
        return dict(facts, why=f"the response failed: "
                               f"{provider_word(error.get('code')) or 'no code'}: " + said)
    if status == "incomplete":
        reason = provider_word(incomplete.get("reason"))
        if reason == "content_filter":      # declined, as Chat Completions' content_filter is
            return dict(facts, **declined(None, None, "incomplete_details.reason content_filter"))
        if reason == "max_output_tokens":
            return dict(facts, why=f"the reply was cut off at the token limit ({limit})")
        return dict(facts, why=f"the response is incomplete "
                               f"(incomplete_details.reason {reason or 'not given'})")
    if status != "completed":
        return dict(facts,
                    why=f"status {json.dumps(status)[:60]} is not completed: not a complete answer")
    items = [item for item in data["output"]
             if not (isinstance(item, dict) and item.get("type") == "reasoning")]
    kinds = [item.get("type") if isinstance(item, dict) else None for item in items]
    if kinds != ["message"]:
        named = ", ".join(json.dumps(k)[:40] for k in kinds[:4]) or "empty"
        return dict(facts, why=f"the output is {named} (reasoning aside), not one message: "
                               "avsm offers no tools and would not guess which counts, "
                               "so there is no answer")
    message, parts = items[0], items[0].get("content")
    if message.get("status") not in (None, "completed"):
        cut = f": cut off at the token limit ({limit})" if message["status"] == "incomplete" else ""
        return dict(facts, why=f"the response says completed but its message is "
                               f"{json.dumps(message['status'])[:40]}" + cut)
    if not isinstance(parts, list):
        return dict(facts, why="the message has no content list")
    for part in parts:
        if isinstance(part, dict) and part.get("type") == "refusal":
            return dict(facts, **declined(part.get("refusal"), None, "a refusal content part"))
    if not all(isinstance(p, dict) and p.get("type") == "output_text"
               and isinstance(p.get("text"), str) for p in parts):
        return dict(facts, why="the message holds content that is not output_text, "
                               "so there is no answer")
    return dict(facts, text="".join(p["text"] for p in parts))


def declined(text, category, where):
    """Return the facts of a model's refusal: its text and category, and what a person reads."""
    def kept(value, most):
        if not isinstance(value, str) or not value.strip():
            return None
        return re.sub(SURROGATE, "\ufffd", value.strip())[:most]
    text, category = kept(text, TEXT_MAX), kept(category, 80)
    if text:
        said = text + (f" (category {category})" if category else "")
    else:
        said = "no reason given" + (f", category {category}" if category else "") + f" ({where})"
    return {"why": f"the model declined: {said}", "declined": {"text": text, "category": category}}


def provider_word(value):
    """Return a provider's short code word (a stop reason, a request id), or None."""
    return value if isinstance(value, str) and re.fullmatch(r"[\x21-\x7e]{1,200}", value) else None


def kept_usage(usage):
    """Return the token counts a response reports (one level of nesting at most), or None."""
    def counts(d):
        return {k: v for k, v in list(d.items())[:USAGE_MAX]
                if re.fullmatch(r"[a-z0-9_]{1,64}", k) and type(v) is int and 0 <= v < 2 ** 53}
    if not isinstance(usage, dict):
        return None
    kept = counts(usage)
    for k, v in list(usage.items())[:USAGE_MAX]:
        if isinstance(v, dict) and re.fullmatch(r"[a-z0-9_]{1,64}", k) and counts(v):
            kept[k] = counts(v)
    return kept or None


def error_text(body):
    """Return the message of a provider's error body ({"error": {"message": ...}})."""
    try:
        error = json.loads(body).get("error", {})
        return f"{error.get('type', '')}: {error.get('message', '')}".strip(": ")
    except (ValueError, AttributeError, RecursionError):
        return body[:200].decode("utf-8", "replace")


def retry_wait(headers, now, default):
    """Return the seconds a provider asks to wait before the next try, or `default`."""
    import email.utils
    after = headers.get("retry-after", "")
    for text, scale in ((headers.get("retry-after-ms", ""), 1000), (after, 1)):
        try:
            seconds = float(text) / scale
        except ValueError:
            continue
        if 0 <= seconds < math.inf:
            return seconds
    try:
        when = email.utils.parsedate_to_datetime(after)
    except (TypeError, ValueError, IndexError):
        return default
    return max(0.0, when.timestamp() - now) if when.tzinfo is not None else default


def call_http_backend(backend, system, user, key):
    """Return (reply bytes, None, call) or (None, why, call) of one decision's HTTP call."""
    import http.client
    import urllib.error
    import urllib.request
    url, headers, body = backend_request(backend, system, user, key)
    body = json.dumps(body).encode()
    deadline = time.monotonic() + BACKEND_TIMEOUT
    why, call = "not tried", {"tries": 0}
    for attempt in range(BACKEND_TRIES):
        left = deadline - time.monotonic()
        if left <= 0:
            return None, f"no answer within {BACKEND_TIMEOUT} s ({why})", call
        request = urllib.request.Request(url, data=body, headers=headers)
        call["tries"] = attempt + 1
        wait = 2 ** attempt
        try:
            with urllib.request.urlopen(request, timeout=left) as response:
                call["request_id"] = request_id(response.headers)
                raw = response.read(REPLY_MAX + 1)
            if len(raw) > REPLY_MAX:
                return None, f"the response is bigger than {REPLY_MAX // 1024} KiB", call
            reply = read_response(backend, raw, len(body))
            call.update((k, reply[k]) for k in ("stop", "usage", "declined", "packet_bytes")
                        if reply.get(k))
            if "text" not in reply:
                return None, reply["why"], call
            return reply["text"].encode(), None, call
        except urllib.error.HTTPError as err:
            answered = err.headers or {}
            call["request_id"] = request_id(answered)
            why = f"HTTP {err.code}: {error_text(err.read(REPLY_MAX + 1))}"
            if err.code not in RETRY_STATUSES and err.code < 500:
                return None, why, call
            wait = retry_wait(answered, time.time(), wait)
        except ValueError as err:
            return None, str(err), call
        except (OSError, http.client.HTTPException) as err:
            why = f"{getattr(err, 'reason', err)}" or type(err).__name__
        if attempt + 1 < BACKEND_TRIES:
            if wait >= deadline - time.monotonic():
                return None, (f"{why}; a wait of {wait:g} s would pass the call's "
                              f"{BACKEND_TIMEOUT} s limit"), call
            time.sleep(wait)
    return None, why, call


def request_id(headers):
    return provider_word(headers.get("request-id") or headers.get("x-request-id"))


ADAPTER_TIMEOUT = 30  # seconds an adapter's GET may take in all: the name, the connection, TLS


def adapter_get(url, key=None, limit=ADAPTER_TIMEOUT):
    """Return (status, body) of one GET of `url` within `limit` seconds in all; OSError says why
    not. With a key (a bearer token) no redirect is followed, so the key goes to the configured url
    alone; without one (http.status), redirects to http:// and https:// are."""
    import ssl
    import threading
    import urllib.error
    import urllib.request
    if not url.startswith(("http://", "https://")):
        raise OSError(f"'{url}' is not an http:// or https:// URL")
    redirects = urllib.request.HTTPRedirectHandler()
    follow = redirects.redirect_request
    redirects.redirect_request = lambda *redirect: (
        None if key or not redirect[-1].startswith(("http://", "https://"))     # its new url
        else follow(*redirect))
    opener = urllib.request.build_opener(
        redirects, urllib.request.HTTPSHandler(context=ssl.create_default_context()))
    request = urllib.request.Request(url)
    if key:
        request.add_unredirected_header("Authorization", f"Bearer {key}")
    answer = {}

    def get():
        try:
            with opener.open(request, timeout=limit) as response:
                answer["got"] = response.status, response.read(REPLY_MAX + 1)
        except urllib.error.HTTPError as err:
            answer["got"] = err.code, err.read(REPLY_MAX + 1)
        except (OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            if not isinstance(reason, TimeoutError):
                answer["error"] = OSError(str(reason))
    worker = threading.Thread(target=get, daemon=True)      # the name lookup too keeps to the limit
    worker.start()
    worker.join(limit)
    if "got" in answer:
        return answer["got"]
    raise answer.get("error") or OSError(f"no answer within {limit} s")


def run_world_step(command, data, mandate):
    """Run one world step in the venture directory, `data` on standard input; return (output,
    None) or (None, why) (open point 38)."""
    import subprocess
    import tempfile
    unsafe = owner_problem(".", [command])     # looked at again at each step, as at each start
    if unsafe:
        return None, f"it was not started: {unsafe.why}; {unsafe.fix}"
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout:
        stdin.write(json.dumps(data).encode())
        stdin.seek(0)
        proc = subprocess.Popen(command, shell=True, process_group=0, stdin=stdin, stdout=stdout,
                                stderr=subprocess.DEVNULL)
        try:
            status = proc.wait(WORLD_TIMEOUT)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, f"it took longer than {WORLD_TIMEOUT} s and was ended"
        finally:
            signal_group(proc.pid, signal.SIGKILL)  # what it left in its group goes with it
        if status != 0:
            return None, f"it ended {describe_status(status)}"
        if stdout.tell() > WORLD_OUTPUT_MAX:
            return None, f"it printed more than {WORLD_OUTPUT_MAX // 1024} KiB"
        stdout.seek(0)
        return read_world_output(stdout.read().decode("utf-8", "replace"), mandate)


AVSM_PATH = os.path.realpath(__file__)


def read_small_file(path, limit):
    """Return the bytes of the regular file at `path`, at most `limit`, or OSError (a FIFO too)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)     # a FIFO's open would wait
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
                    stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "a device")
            raise OSError(0, f"it is {what}, not a regular file")
        data = read_upto(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(0, f"it is longer than {limit // 1024} KiB")
    return data


def read_upto(fd, size):
    """Return the first `size` bytes `fd` reads (fewer at its end)."""
    pieces = []
    while size > 0:
        piece = os.read(fd, size)
        if not piece:
            break
        pieces.append(piece)
        size -= len(piece)
    return b"".join(pieces)


def check_venture_dir(directory):
    """Refuse a path that is not a venture directory: 66 when missing, 65 with the fix otherwise."""
    if not os.path.exists(directory):
        raise Fail(EX_NOINPUT, f"{directory} is not there; pass the venture's directory")
    if not os.path.isdir(directory):
        raise Fail(EX_DATAERR, f"{directory} is a file; pass the directory that holds mandate.yaml "
                               f"(avsm add {os.path.dirname(directory) or '.'})")
    mandate, yml = (os.path.join(directory, name) for name in ("mandate.yaml", "mandate.yml"))
    if not os.path.exists(mandate):
        if os.path.exists(yml):
            raise Fail(EX_DATAERR, f"{directory} holds mandate.yml; rename it to mandate.yaml (mv"
                                   f" {yml} {mandate})")
        raise Fail(EX_DATAERR,
                   f"{directory} holds no mandate.yaml; write one (see examples/counter)")
    refuse(mandate_file_problem(mandate, os.stat(mandate)))


def user_name(uid):
    """Return the name of the user `uid`, or the number when the system knows no name for it."""
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def owner_problem(directory, commands, uid=None):
    """Return the Writable of the first path a venture's program rests on that a user but `uid`
    (avsmd's own) or root could change, or None. Nothing is cached: each start sees a new mode."""
    uid = os.geteuid() if uid is None else uid
    directory = os.path.realpath(directory)
    seen = set()

    def walk(path, st=None):
        while path not in seen:
            seen.add(path)
            try:
                st = st or os.stat(path)
            except OSError:
                return None             # gone: what starts it says so
            problem = write_problem(path, st, uid, user_name)
            if problem:
                return problem
            path, st = os.path.dirname(path), None
        return None

    found = walk(os.path.realpath(os.path.join(directory, "mandate.yaml"))) or walk(directory)
    for word in (w for c in commands for w in command_words(c)):
        if found:
            break
        try:
            path = os.path.realpath(os.path.join(directory, word))
            st = None if path in seen else os.stat(path)
        except (OSError, ValueError):
            continue                    # a word that names no file: an option, an operator, text
        if st is not None and stat.S_ISREG(st.st_mode):
            found = walk(path, st)
    return found


def write_problem(path, st, uid, name):
    """Return the Writable that says who but `uid` or root could change `path` (stat `st`), or None.
    As sshd's StrictModes: owned by `uid` or root, no group or other write bit, but for a sticky
    directory owned by one of them (/tmp, 1777), where no one may replace what another owns."""
    if st.st_uid not in (uid, 0):
        return Writable(f"{path} is owned by {name(st.st_uid)}, not by {name(uid)} or root, "
                        "so that user can change what avsmd runs",
                        f"chown {name(uid)} {path}")
    bits = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if bits and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        who = {stat.S_IWGRP: "its group", stat.S_IWOTH: "others"}.get(bits, "its group and others")
        return Writable(f"{path} can be written by {who} (mode {stat.S_IMODE(st.st_mode):04o}), "
                        "so they can change what avsmd runs",
                        f"chmod go-w {path}")
    return None


def command_words(command):
    """Return the words of `command` (a shell line, or an argv list) that may name a file it runs or
    reads."""
    if not isinstance(command, str):
        return list(command)
    import shlex
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:              # an unclosed quote: the shell refuses it when it runs
        return command.split()


def runnable_mandate(state, home):
    """Return (the venture's adopted mandate parsed against its directory, None), or (None, why it
    cannot run): its directory is gone, or another user could change what it runs."""
    try:
        if not os.path.isdir(state.directory or ""):
            raise Fail(EX_NOINPUT, f"its directory {state.directory} is not there")
        mandate = parse_mandate(
            state.mandate_text, os.path.join(state.directory, "mandate.yaml"), state.directory
        )
        unsafe = owner_problem(state.directory, venture_commands(mandate))
        if unsafe:
            raise Fail(EX_CONFIG, f"{unsafe.why}; {unsafe.fix}, "
                                  f"then {client_command(home)} add {state.directory}")
    except Fail as err:
        return None, str(err)
    return mandate, None


def read_venture(directory):
    """Return (name, path of mandate.yaml, its text, the mandate) of the venture in `directory`, as
    `avsm add` adopts it, or Fail: 66 when the directory is not there, 65 with the fix otherwise."""
    check_venture_dir(directory)
    name = check_venture_name(os.path.basename(directory))
    path = os.path.join(directory, "mandate.yaml")
    try:
        text = read_mandate_file(path)
        mandate = parse_mandate(text, path, directory)
    except OSError as err:
        raise Fail(EX_DATAERR, f"{path} cannot be read: {err.strerror}") from None
    except Fail as fail:
        raise Fail(EX_DATAERR, str(fail)) from None
    unsafe = owner_problem(directory, venture_commands(mandate))
    if unsafe:
        raise Fail(EX_DATAERR, f"{name} cannot be adopted: {unsafe.why}; "
                               f"{unsafe.fix}, then add it again")
    return name, path, text, mandate


MANDATE_MAX = 256 * 1024  # bytes: a mandate is a page of text; past this it is a mistake
CONFIG_MAX = 4 * MANDATE_MAX  # bytes of a config or a fleet file read (a config checks its own)


def mandate_file_problem(path, st):
    """Return why the file at `path` with stat `st` cannot be a mandate, or None."""
    if stat.S_ISDIR(st.st_mode):
        return (f"{path} is a directory; a mandate is a file of text (move the directory away and"
                " write mandate.yaml)")
    if not stat.S_ISREG(st.st_mode):
        return (
            f"{path} is not a regular file (a FIFO, device or socket); a mandate is a file of text")
    if st.st_size > MANDATE_MAX:
        return f"{path} is {st.st_size} bytes; a mandate may be at most {MANDATE_MAX // 1024} KiB"
    return None


def read_mandate_file(path):
    """Return the text of mandate.yaml at `path`, exactly as written; OSError when it cannot be
    opened, Fail(78) for anything but a regular file of at most MANDATE_MAX bytes in UTF-8."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        refuse(mandate_file_problem(path, os.fstat(fd)), EX_CONFIG)
        data = read_upto(fd, MANDATE_MAX + 1)
    finally:
        os.close(fd)
    if len(data) > MANDATE_MAX:
        raise Fail(EX_CONFIG,
                   f"{path} is over {MANDATE_MAX // 1024} KiB; a mandate may be at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise Fail(EX_CONFIG, f"{path}:{line}: byte 0x{data[err.start]:02x} is not UTF-8; save the"
                              f" mandate as UTF-8") from None


class GroupsJournal:
    """HOME/groups: each process group the warden started and did not see end, for avsmd."""

    def __init__(self, home, lock_is_ours):
        self.home, self.lock_is_ours = home, lock_is_ours
        self.groups_fd = None         # HOME/groups, open for appending while it is that file
        self.journaled = {}           # pgid -> its line in HOME/groups, while the group runs

    def journal_group(self, line):
        """Append a group's start (+PGID START VENTURE PURPOSE) or end (-PGID) to HOME/groups before
        anything can orphan it (RUN-14)."""
        path = os.path.join(self.home, "groups")
        pgid = line[1:].split()[0]
        if line.startswith("+"):
            self.journaled[pgid] = line
        else:
            self.journaled.pop(pgid, None)
        # a full disk: avsmd still ends the groups it was told of
        with contextlib.suppress(OSError):
            if line.startswith("+") and self.groups_fd is not None:
                st = os.fstat(self.groups_fd)
                if st.st_nlink == 0 or st.st_size > 64 * 1024:
                    os.close(self.groups_fd)
                    self.groups_fd = None
                    line = "\n".join(self.journaled.values())
                    # never replace another avsmd's journal
                    if st.st_nlink and self.lock_is_ours():
                        write_textfile(path, line + "\n", 0o600, path + ".new")
                        line = None
            if self.groups_fd is None:
                self.groups_fd = os.open(
                    path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            if line:
                os.write(self.groups_fd, (line + "\n").encode())


BASE_ENV = {}      # the warden's environment, copied once


class Channel:
    """The warden's end of its socketpair with avsmd: JSON lines both ways."""

    def __init__(self, channel, commit):
        self.channel, self.commit = channel, commit
        self.reader = LineReader()
        self.outbox = []              # lines for avsmd, sent once per turn of the loop
        self.outbox_due = False       # whether a line in it must go this turn
        self.acks_waiting = False     # whether one is more than a group's start or end

    def tell(self, message, later=False):
        """Queue one line for avsmd. A group's end can wait (`later`) for the next urgent line when
        its leader's start time is known: avsmd checks the group is still that one before ending
        it."""
        self.outbox.append(json.dumps(message, separators=(",", ":")))
        self.outbox_due = self.outbox_due or not later
        self.acks_waiting = self.acks_waiting or not ("group" in message or "ended" in message)

    def flush(self, everything=False):
        if not self.outbox or not (self.outbox_due or everything):
            return
        if self.acks_waiting:           # nothing is told to a client before it is committed
            self.commit()
            self.acks_waiting = False
        self.outbox_due = False
        data, self.outbox = ("\n".join(self.outbox) + "\n").encode(), []
        with contextlib.suppress(OSError):
            send_bytes(self.channel, data)

    def read(self):
        data = receive(self.channel)  # a reset (avsmd died, our lines unread) reads as its end
        if data is None:
            return []
        return self.reader.feed(data) if data else None


class RolesCalls:
    """The requests the warden made of the roles process (through avsmd), awaiting answers."""

    def __init__(self, tell):
        self.tell = tell
        self.roles_rid, self.roles_calls = 0, {}     # requests to the roles process, by id

    def to_roles(self, message, callback):
        """Ask the roles process (through avsmd) to build a request or parse a reply."""
        self.roles_rid += 1
        self.roles_calls[self.roles_rid] = callback
        self.tell(dict(message, to="roles", rid=self.roles_rid))

    def from_roles(self, message):
        callback = self.roles_calls.pop(message.get("rid"), None)
        return callback(message) if callback else None


def read_json_adapter(name, reading, url, key):
    """Return the number (as text) a GET of url/PATH holds at the JSON pointer, or Fail."""
    path, _, pointer = reading.partition("#")
    try:
        status, body = adapter_get(url.rstrip("/") + "/" + path.lstrip("/"), key=key)
    except OSError as err:
        raise Fail(EX_UNAVAILABLE, f"{name} {path}: {err}") from None
    if not 200 <= status < 300:
        try:
            said = json.loads(body)     # stripe's and github's error bodies
            said = said.get("error", said) if isinstance(said, dict) else {}
            said = str(said.get("message", "") if isinstance(said, dict) else said)
        except (ValueError, RecursionError):
            said = ""
        # an echoed key stays out of the record
        said = (said.replace(key, "[key]") if key else said)[:200]
        if 300 <= status < 400:
            said = ("a redirect, which a GET with a key does not follow: name the final url in"
                    " config.yaml")
        raise Fail(EX_UNAVAILABLE, f"{name} {path}: HTTP {status}" + (f": {said}" if said else ""))
    if len(body) > REPLY_MAX:
        raise Fail(EX_DATAERR, f"{name} {path}: the answer is bigger than {REPLY_MAX // 1024} KiB")
    try:
        value = json.loads(body, parse_constant=lambda word: None)  # NaN and Infinity: no reading
    except (ValueError, RecursionError):
        raise Fail(EX_DATAERR, f"{name} {path}: the answer is not JSON") from None
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        value = value[int(part)] \
            if isinstance(value, list) and part.isdigit() and int(part) < len(value) \
            else value.get(part) if isinstance(value, dict) else None
    if not is_number(value) or math.isinf(value):
        found = {bool: "true or false", str: "text", dict: "an object", list: "a list",
                 type(None): "nothing"}.get(type(value), "no finite number")
        raise Fail(EX_DATAERR, f"{name} {reading}: no number at that pointer; it holds {found}")
    return str(value) if isinstance(value, int) else repr(value)  # exactly the number it holds


# =============================================================================
# 10. The warden: its loop, the requests it answers, carry_out
# The only process that acts. The kernel's rules decide; carry_out, last, does
# what they return through the rooms beneath.
# =============================================================================

# seconds a group commit stays open across wake-ups: at 500 reports a second, 25 a sync
GROUP_WINDOW = 0.05
# seconds of starting rounds in one tick before the warden looks at its clients again
TICK_BUDGET = 0.05
# seconds early a round may start, with one due as the warden wakes: fewer wake-ups
START_AHEAD = 0.01


def run_warden(home, fd, debug, again=False):
    """The warden's entry: take the channel avsmd handed over and run until told to stop."""
    import selectors
    import socket
    # the channel avsmd handed over (inheritable to reach us) goes no further
    mark_close_on_exec()
    channel = socket.socket(fileno=fd)
    cfg = json.loads(os.environ.pop("AVSM_CONFIG", "null")) or parse_config("")
    warden = Warden(home, channel, cfg, debug)
    wake_r, wake_w = socket.socketpair()
    for end in (wake_r, wake_w):
        end.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    # a terminal's Ctrl-C is avsmd's to handle
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)   # seen through the wake-up fd
    warden.sel.register(wake_r, selectors.EVENT_READ, ("signal", wake_r))
    try:
        return warden.run(again)
    except LockLost as lost:
        sys.stderr.write(f"avsm warden: {lost}\n")
        for child in warden.children:
            signal_group(child.pgid, 9)
        return EX_TEMPFAIL


def request_answer(message, do):
    """Answer a client's request with do(cmd, args, err): the answer avsmd relays (its lines, its
    errors and exit code), or None when do answers it later."""
    out, err, code = [], [], EX_OK
    try:
        # checked by avsmd already; checked again here, where a request is acted on
        cmd, args = check_request({"cmd": message.get("cmd"), "args": message.get("args", {})})
        out = do(cmd, dict(args, __id=message.get("id")), err)
        if out is None:
            return None
    except Fail as fail:
        err.append(str(fail))
        code = fail.code
    except (LockLost, LedgerDown) as lost:
        err.append(f"the ledger cannot be written: {lost}; nothing was done, try again later"
                   if isinstance(lost, LedgerDown) else str(lost))
        code = EX_TEMPFAIL
    # a bug: reported once, this request refused, the warden keeps serving
    except Exception as bug:
        import traceback
        sys.stderr.write(f"avsm warden: a bug in avsm, doing {message.get('cmd')} (the warden"
                         f" goes on):\n{traceback.format_exc()}")
        err.append(f"a bug in avsm refused this request ({type(bug).__name__}); it is reported"
                   " on avsmd's standard error")
        code = EX_SOFTWARE
    return {"id": message.get("id"), "out": out, "err": err, "exit": code}


class Warden:
    """The only process that acts: ticks ventures, runs their programs, and carries out the
    kernel's intents (carry_out, the one append)."""

    def __init__(self, home, channel, cfg, debug=False):
        import selectors
        BASE_ENV.update(os.environ)
        self.home, self.cfg, self.debug = home, cfg, debug
        self.lock = LockCheck(os.path.join(home, "avsmd.lock"), os.getppid())
        self.ledger = Ledger(os.path.join(home, "ledger.db"), still_ours=self.lock.lock_is_ours)
        # it appends at the end and reads single records: a small cache holds those
        small_cache(self.ledger.db)
        self.ventures = {}            # name -> VentureState
        self.writer = LedgerWriter(self.ledger, self.ventures,
                                   (cfg.get("canary_asks") or {}).get("every"), self.tell_person,
                                   self.refold, self.want_checkpoint, debug)
        self.next_nightly = next_nightly(cfg["nightly"])
        self.stopping = False
        self.sel = selectors.DefaultSelector()
        self.avsmd = Channel(channel, self.writer.commit)
        self.journal = GroupsJournal(home, self.lock.lock_is_ours)
        self.children = Children(home, self.sel, self.avsmd.tell, self.avsmd.flush,
                                 self.journal.journal_group, self.settle_child, debug)
        self.spawn = self.children.spawn
        self.levers = Levers(self.spawn)
        self.keeper = Keeper(self.ventures, self.spawn, self.active)
        self.files = HomeFiles(home, cfg, self.ledger, self.ventures, self.keeper.keep, debug)
        self.worlds = Worlds(cfg, self.spawn, lambda: self.stopping)
        self.roles = RolesCalls(self.avsmd.tell)
        self.decisions = Decisions(home, cfg, self.ledger, self.ventures, self.spawn,
                                   self.avsmd.tell, self.roles.to_roles,
                                   self.worlds.start_forecast, lambda: self.stopping)
        self.rounds = Rounds(cfg, home, self.ventures, self.children, self.spawn,
                             lambda: self.stopping, self.active, debug)
        channel.setblocking(False)
        self.sel.register(channel, selectors.EVENT_READ, ("channel", None))
        self.sel.register(self.decisions.wake_r, selectors.EVENT_READ,
                          ("results", self.decisions.wake_r))

    # ---- the ventures, replayed from the ledger ----
    def load(self):
        """Replay the ledger into venture states, from the newest good snapshot on; settle runs a
        dead warden left without an outcome."""
        seq, states, counted, folded = self.files.snapshots.fold(self.ledger.db)
        self.ventures.update(states)
        self.files.metrics.counted, self.files.metrics.seen = counted, seq
        if folded >= SNAPSHOT_MIN:
            self.snapshot(SNAPSHOT_MIN, (seq, states, counted))
        for state in self.ventures.values():
            self.check_runnable(state)
            self.carry_out(state, interrupted_rule(state, time.time(), self.cfg["ratchet"]))

    def refold(self, first_lost):
        """Fold every venture again from the ledger, forgetting records from seq `first_lost` on
        that a rolled-back group commit held: nothing in memory may rest on a record the ledger does
        not hold."""
        states = refolded(self.ventures, scan_records(self.ledger.db))
        self.ventures.clear()
        self.ventures.update(states)
        self.rounds.forget_from(first_lost)
        self.worlds.forget_from(first_lost)

    def check_runnable(self, state):
        """Parse the adopted mandate against its directory (VENTURE-14)."""
        if state.mandate_text is None:
            return
        state.mandate, state.problem = runnable_mandate(state, self.home)
        self.tell_cannot_run(state)

    def tell_cannot_run(self, state):
        notice = cannot_run_notice(state)
        if notice:
            sys.stderr.write(f"avsmd: venture {state.name} cannot run: {state.problem}\n")
            self.tell_person(notice)

    def tell_person(self, notice):
        """Hand a notice to avsmd, which runs the notify command: it outlives this warden, and tells
        of its own stop and of a ledger it cannot write even when no warden runs."""
        if notice is not None and self.cfg.get("notify"):
            self.avsmd.tell({"notice": notice})

    # ---- the loop ----
    def run(self, again):
        """`again`: avsmd started this warden after the last one died."""
        self.load()
        now, wall = time.monotonic(), time.time()
        for i, state in enumerate(self.ventures.values()):
            if self.active(state):
                wait = first_round_wait(state, wall, i, len(self.ventures))
                self.start_venture(state, now + wait, starts_kept(state, again))
        self.writer.commit_when_due(self.stopping)      # the start's records: their window begins
        while True:
            timeout = self.writer.group_wait(self.next_wakeup(time.monotonic()))
            for key, _ in self.sel.select(timeout):
                what, child = key.data
                # the step that needed a record did not happen
                with contextlib.suppress(LedgerDown):
                    if what == "channel":
                        self.read_channel()
                    elif what == "results":
                        for state, intents in self.decisions.results_ready():
                            self.carry_out(state, intents)
                    elif what == "signal":
                        self.signalled(child)
                    elif child.status is not None:
                        continue            # settled earlier in this same batch
                    elif what == "pidfd":
                        self.children.child_event(child)
                    elif not child.drain(key.fileobj):
                        # at EOF: a pipe left registered would wake us forever
                        self.sel.unregister(key.fileobj)
                        child.open_pipes.discard(key.fileobj)
            with contextlib.suppress(LedgerDown):
                self.tick(time.monotonic())
            # this wake-up's records, and the next ones' for up to GROUP_WINDOW
            self.writer.commit_when_due(self.stopping)
            self.write_checkpoint(due=True)
            self.snapshot(SNAPSHOT_EVERY)
            self.keep(self.files.rotate(self.writer.ledger_down, due=True)[1])
            self.keep(self.files.write_metrics())
            self.files.write_page()
            self.avsmd.flush()
            if self.stopping and not self.children:
                for state in self.ventures.values():
                    self.carry_out(state, unanswered(state, "avsmd stopped before the answer came"))
                self.children.end_lingering(final=True)
                self.writer.commit(turn_ends=True)
                self.snapshot(SNAPSHOT_MIN)
                self.avsmd.flush(everything=True)
                return EX_OK

    def active(self, state):
        return may_run(state, self.stopping)

    def write_checkpoint(self, due=False):
        """Write a checkpoint (when due), then a snapshot once SNAPSHOT_MIN records came since."""
        written = self.files.checkpoint(self.writer.ledger_down, due)
        if written:
            self.snapshot(SNAPSHOT_MIN)
        return written

    def snapshot(self, least, fold=None):
        self.keep(self.files.snapshot(self.writer.ledger_down, least, fold))

    def keep(self, records):
        """Append what a file step wrote; a ledger that cannot take it now loses no file."""
        with contextlib.suppress(LedgerDown):
            self.carry_out(None, [Write(record) for record in records])

    def do_rotate(self, args, err):
        self.writer.commit()
        seq, gone = self.files.rotate(self.writer.ledger_down)
        self.keep(gone)
        if seq is None:
            raise Fail(EX_TEMPFAIL, f"ledger.db cannot be rotated now: {self.files.rotate_failed};"
                                    " try again once that is mended")
        return [f"#{seq}: {record_at(self.ledger.db, seq)[1]['summary']}"]

    def do_checkpoint(self, args, err):
        self.writer.commit()
        written = self.write_checkpoint()
        if written is None:
            raise Fail(EX_TEMPFAIL, "no checkpoint can be written now: the ledger holds no record"
                                    " yet, or cannot be written")
        facts = parse_checkpoint(written[0], "the checkpoint", written[1])._asdict()
        return [json.dumps(facts)] if args.get("json") else checkpoint_lines(facts)

    def do_records(self, args, err):
        return [m["out"] for m in records_answer(self.home, args)[:-1]]

    def next_wakeup(self, now):
        """Return seconds until the next due report, deadline or restart, or None."""
        soonest = self.rounds.schedule.soonest()
        times = self.children.wakeups(now) + self.keeper.wakeups() + self.rounds.deadlines() \
            + self.files.wakeups()
        if soonest is not None and not self.writer.ledger_down:
            times.append(soonest)
        if self.writer.ledger_down:
            times.append(self.writer.retry_at)
        elif self.next_nightly is not None:
            times.append(now + max(0.0, self.next_nightly - time.time()))
        return max(0.0, min(times) - now) if times else None

    def tick(self, now):
        """Start what is due, end what is past its deadline, reap what has ended."""
        # 1. a ledger that could not be written is tried again; once it takes writes, rounds are due
        if (self.writer.ledger_down and now >= self.writer.retry_at
                and self.writer.retry_ledger(now)):
            self.rounds.schedule.resume(time.monotonic())
        # 2. reap what ended, KILL what outlived its grace, TERM what is past its deadline
        self.children.enforce(now)
        if self.stopping or self.writer.ledger_down:
            # a ledger that cannot be written stops everything that would write
            return
        # 3. the nightly model decisions
        if self.next_nightly is not None and time.time() >= self.next_nightly:
            self.next_nightly = next_nightly(self.cfg["nightly"], time.time() + 1)
            for state in self.ventures.values():
                if decide_problem(state) is None:
                    try:
                        self.decisions.start_decision(state, "nightly")
                    except Fail as fail:
                        log(True, "warden", f"{state.name}: no nightly decision: {fail}")
        # 4. the rounds that are due start; those in flight settle once read or late; a `run`
        # program whose back-off is over starts again
        for due in (self.rounds.start_due, self.rounds.settle_all, self.keeper.start_due):
            for state, intents in due(now):
                self.carry_out(state, intents)

    # ---- requests from avsmd ----
    def read_channel(self):
        messages = self.avsmd.read()
        if messages is None:
            self.begin_stop()         # avsmd is gone: stop as at a SIGTERM
            return
        for message in messages:
            if message.get("cmd") == "stop" and "id" not in message:
                self.begin_stop()       # avsmd's own word: a client's request always carries an id
                continue
            if message.get("from") == "roles":
                self.carry_out(*(self.roles.from_roles(message) or (None, ())))
                continue
            answer = request_answer(message, lambda cmd, args, err: getattr(self, "do_" + cmd)(
                args, err))
            if answer is not None:          # else answered later (a decision in flight)
                self.avsmd.tell(answer)

    def signalled(self, wake):
        """SIGTERM reached the warden itself: stop as avsmd would ask."""
        try:
            data = wake.recv(512)
        except OSError:
            data = b""
        if signal.SIGTERM in data:
            self.begin_stop()

    def begin_stop(self):
        """Stop: no new work; TERM every group now, KILL after the grace."""
        if self.stopping:
            return
        self.stopping = True
        self.children.terminate("stop")

    def do_add(self, args, err):
        directory = os.path.realpath(args.get("dir", ""))
        name, path, text, mandate = read_venture(directory)
        state = self.ventures.setdefault(name, VentureState(name))
        done = self.carry_out(state, adoption_rule(state, mandate, text, directory))
        written = [seq for _, seq in done if seq]
        if not written:     # an Adopt alone: the mandate in force, which could not run, holds again
            return [f"{name}: mandate unchanged (#{state.mandate_seq}); nothing written"
                    + ("; it holds again, so the venture can run" if done else "")]
        forecasting = any(c.venture == name and c.purpose == "forecast" for c in self.children)
        return (
            [f"{name}: adopted as mandate #{written[0]}"]
            + allowed_lines(state, self.cfg)
            + ([f"{name} is paused; avsm resume {name} starts it"] if state.paused else [])
            + ([f"{name}: a forecast is being made; it is written to the ledger when done"]
               if forecasting else [])
        )

    def do_health(self, args, err):
        """What avsm doctor asks the running daemon."""
        if self.writer.ledger_down:
            err.append(f"the ledger cannot be written: {self.writer.ledger_down}; nothing that"
                       " would write runs, and avsmd tries again every 30 s")
        return [f"avsmd {VERSION}, {sum(1 for s in self.ventures.values() if s.mandate_seq)}"
                " venture(s)"]

    def do_status(self, args, err):
        facts = status_facts(self.ventures, time.time(), self.keeper.keep, self.cfg,
                             args.get("venture"), bool(args.get("verbose")),
                             bool(args.get("ascii")))
        facts["ledger_down"] = self.writer.ledger_down
        return [json.dumps(facts)] if args.get("json") else status_lines(facts)

    def do_asks(self, args, err):
        facts = asks_facts(self.ventures)
        return [json.dumps(facts)] if args.get("json") else asks_lines(facts)

    def do_page(self, args, err):
        return [json.dumps(self.files.page_facts())]

    def venture(self, args):
        return venture_named(self.ventures, args.get("venture"))

    def find_ask(self, args):
        seq = args.get("ask")
        return open_ask(self.ventures, seq, records_citing(self.ledger.db, "ask", seq))

    def do_approve(self, args, err):
        state, seq, ask = self.find_ask(args)
        refuse(approve_problem(state, seq))
        path = os.path.join(state.directory, "mandate.yaml")
        # the change a ratchet ask carries, parsed against the venture's files as they stand
        mandate = ask.get("mandate") and parse_mandate(ask["mandate"], path, state.directory)
        done = self.carry_out(state, approval_rule(state, seq, ask, args, int(time.time()),
                                                   self.cfg["ratchet"], mandate))
        gated = [action for intent, action in done if isinstance(intent, Gate)]
        if ask.get("about") == "ratchet":
            return [f"#{seq} approved: {ask['lever']} is delegated in {path}, adopted as mandate"
                    f" #{state.mandate_seq}"]
        if ask.get("canary"):
            return [canary_result(state, seq, ask, True)[1]]
        if not gated:
            return [f"#{seq} answered; nothing runs on it"]
        action = gated[-1]
        return [f"#{seq} approved; {ask['lever']} "
                + (f"runs as action #{action}" if action else "runs once its check passes")]

    def do_decide(self, args, err):
        state = self.venture(args)
        refuse(decide_problem(state))
        self.decisions.start_decision(state, "person", reply_id=args["__id"])
        return None                 # answered when the decision is done

    def do_ask(self, args, err):
        return [ask_content(*self.find_ask(args)[1:])]

    def do_propose(self, args, err):
        """A person's own proposal (open point 15): see person_proposal_rule."""
        state, lever = self.venture(args), args.get("lever")
        done = self.carry_out(state, person_proposal_rule(state, lever, args.get("payload")))
        seq, action = done[0][1], done[-1][1]
        return [f"proposal #{seq} accepted; {lever} "
                + (f"runs as action #{action}" if action else "runs once its check passes")]

    def do_deny(self, args, err):
        state, seq, ask = self.find_ask(args)
        self.carry_out(state, denial_rule(state, seq, ask))
        return [canary_result(state, seq, ask, False)[1] if ask.get("canary") else f"#{seq} denied"]

    def do_pause(self, args, err):
        state = self.venture(args)
        if not self.carry_out(state, person_rule(state, "pause")):
            return [f"{state.name} is already paused"]
        return [f"{state.name} paused; nothing of it runs until avsm resume {state.name}"]

    def do_resume(self, args, err):
        state = self.venture(args)
        resumed = person_rule(state, "resume", runnable_mandate(state, self.home))
        if not self.carry_out(state, resumed):
            return [f"{state.name} is not paused"]
        self.tell_cannot_run(state)
        if state.mandate is None:
            return [f"{state.name} resumed, but it cannot run: {state.problem}"]
        return [f"{state.name} resumed"] + still_past_lines(state)

    # ---- what a room returns, carried out ----
    def settle_child(self, child):
        """A child ended and its group is gone: carry out what the room that started it returns."""
        state = self.ventures[child.venture]
        # the report, a guard, an audit or a reading: its round's
        handler = {"lever": self.levers.lever_done, "run": self.keeper.run_done,
                   "backend": self.decisions.backend_done, "check": self.levers.check_done,
                   "forecast": self.worlds.forecast_done, "world": self.worlds.world_done,
                   }.get(child.purpose, self.rounds.reading_done)
        if child.purpose == "forecast" and child.extra.get("why") == "packet":
            handler = self.decisions.packet_forecast_done         # a decision's packet waits on it
        self.carry_out(state, handler(state, child, child.status) or ())

    def carry_out(self, state, intents):
        """Carry out a rule's intents in order: append, pause, start what it asks for and answer
        its questions, or ask the gate (gated) and carry out what it proves. Return [(intent, seq
        written)]: a Gate's seq is its action's (None when refused or waiting on its check)."""
        result, done = None, []
        if not hasattr(intents, "send"):
            intents = (intent for intent in intents)
        while True:
            try:
                intent = intents.send(result)
            except StopIteration:
                return done
            result, seq = None, None
            if isinstance(intent, (Write, Pause)):
                seq = result = self.writer.append(intent.record, intent.at)
                if isinstance(intent, Pause):
                    self.halt(state)
            elif isinstance(intent, Forecast):
                result = self.worlds.start_forecast(state, intent.why, intent.lever)
            elif isinstance(intent, ReadMandate):
                path = os.path.join(state.directory, "mandate.yaml")
                try:
                    result = path, read_mandate_file(path), None
                except (OSError, Fail) as err:
                    result = path, None, str(err)
            elif isinstance(intent, Owners):
                result = owner_problem(state.directory, intent.programs)
            elif isinstance(intent, Adopt):     # parsed against its directory: not the fold's
                state.mandate, state.problem = intent.mandate, intent.problem
                if intent.end_run:
                    self.children.terminate("a new mandate", state.name, "run")
                if intent.start:
                    self.start_venture(state)
            elif isinstance(intent, World):
                self.carry_out(state, self.worlds.step(state, intent.report, intent.lever))
            elif isinstance(intent, Launch):
                result = self.levers.launch(state, intent)
            elif isinstance(intent, Content):
                result = content_problem(intent.takes, intent.payload, state.directory)
            elif isinstance(intent, WriteFile):
                try:
                    write_textfile(intent.path, intent.text, None, intent.path + ".avsm-new")
                except OSError as err:
                    result = err.strerror or str(err)
            elif isinstance(intent, Check):
                result = self.levers.start_check(state, *intent)
            else:
                result, runs = gated(state, intent, int(time.time()), self.cfg)
                if not result.ok:
                    continue            # the rule writes what a refusal calls for
                ran = self.carry_out(state, runs)
                # Launch and Check are started apart, their seq None
                written = [(i.record["kind"], s) for i, s in ran if isinstance(i, Write)]
                seq = dict(written).get("action")
                result = result._replace(action=seq)
            done.append((intent, seq))

    def want_checkpoint(self):
        """A checkpoint follows the record just written (an irreversible action): at this turn's
        end."""
        self.files.checkpoints.wanted = True

    def halt(self, state):
        """End what a paused venture runs; its kept program waits for the resume."""
        self.children.terminate("pause", state.name)
        self.keeper.hold(state.name)
        self.children.end_lingering(state.name)

    def start_venture(self, state, at=None, kept=True):
        """Its next round due `at` (now by default), and its kept program started (`kept`)."""
        self.rounds.schedule.enter(state.name, time.monotonic() if at is None else at)
        if kept:
            self.carry_out(state, self.keeper.start_keep(state))


# =============================================================================
# 11. The warden's rooms, and the files it keeps beside the ledger
# Each room owns one kind of state, is handed only what it uses, and returns
# the kernel's intents; none writes.
# =============================================================================


class Levers:
    """Runs the levers the gate proved (one with `check:` once its check exits 0 and the gate
    agrees again); its methods say why what it starts could not start, and return the intents of
    what ended."""

    def __init__(self, spawn):
        self.spawn = spawn

    def launch(self, state, launch):
        """Start the program of a lever whose action is written (a Launch), apart; return why it
        could not start, or None."""
        payload_file = None
        try:
            if launch.file is not None:
                write_venture_file(state.directory, launch.file)
            if launch.data is not None:
                payload_file = write_payload(launch.data)
            child = self.spawn("lever", state, launch.run, timeout=launch.timeout, shell=True,
                               lever=launch.lever, payload_file=payload_file,
                               checked=launch.checked, **launch.more)
            child.extra = {"launch": launch, "payload_file": payload_file}
        except OSError as err:
            if payload_file:
                os.unlink(payload_file)         # no program holds the content: it goes now
            return str(err)
        return None

    def start_check(self, state, gate, verdict, data, run, timeout):
        """Start a lever's check (a Check), apart; return why it could not start, or None."""
        lever, path = gate.lever, write_payload(data)
        try:
            child = self.spawn("check", state, run, timeout=timeout, shell=True, lever=lever,
                               payload_file=path)
        except OSError as err:
            os.unlink(path)
            return str(err)
        child.extra = {"lever": lever, "run": (gate, verdict), "payload_file": path}
        return None

    def check_done(self, state, child, status):
        """A lever's check ended: 0 lets the lever run."""
        with contextlib.suppress(OSError):      # a /tmp cleaner may have taken it: no matter
            os.unlink(child.extra["payload_file"])
        gate, verdict = child.extra["run"]
        return check_rule(state, gate, verdict, status, child.ended_by, child.note())

    def lever_done(self, state, child, status):
        launch, payload_file = child.extra["launch"], child.extra["payload_file"]
        if payload_file:
            with contextlib.suppress(OSError):
                os.unlink(payload_file)
        return lever_outcome(state, launch.lever, launch.action, status, child.ended_by,
                             round(time.monotonic() - child.started, 3), launch.timeout,
                             child.note(), output_lines(child.out, child.cut)[0])


class Worlds:
    """Forecasts and world-model predictions, made apart from the loop in groups of their own; its
    methods return the intents of what came of them."""

    def __init__(self, cfg, spawn, stopping):
        self.cfg, self.spawn, self.stopping = cfg, spawn, stopping
        # venture -> the ensemble of world steps in flight for its last report
        self.worlds = {}

    def forget_from(self, seq):
        self.worlds = {name: job for name, job in self.worlds.items() if job["report"] < seq}

    def start_forecast(self, state, why, lever=None, decision=None):
        """Forecast the venture apart from the loop, as forecast_wanted says; return whether one
        started."""
        facts = forecast_wanted(state, self.cfg["forecast"], bool(decision), self.stopping(),
                                time.time())
        if facts is None:
            return False
        payload = write_payload(facts)
        try:
            child = self.spawn("forecast", state, cached_command("forecast", []),
                               timeout=FORECAST_TIMEOUT, payload_file=payload,
                               runs=[state.mandate["world"]])     # the forecast steps it
            child.extra = {"days": facts["days"], "seeds": facts["seeds"], "why": why,
                           "lever": lever, "decision": decision}
        except OSError as err:
            log(True, "warden", f"{state.name}: no forecast: {err}")
            return False
        finally:
            os.unlink(payload)              # the child holds it open
        return True

    def forecast_done(self, state, child, status):
        return forecast_rule(state, child.extra, bytes(child.out), status, child.ended_by,
                             self.cfg["ratchet"])

    def step(self, state, report_seq, lever):
        """A trusted report's one-step prediction through the world (WORLD-05): an ensemble of
        world steps, its record written when all are done."""
        if self.worlds.get(state.name):
            # one ensemble per venture at a time, a capacity as a program's time limit is: still
            # stepping from an earlier report, this one brings no prediction
            return ()
        job = {"report": report_seq, "lever": lever, "left": WORLD_SEEDS, "outputs": {},
               "failure": None}
        self.worlds[state.name] = job
        for i in range(WORLD_SEEDS):
            path = write_payload(world_input(state, lever, report_seq, i, time.time()))
            try:
                child = self.spawn("world", state, state.mandate["world"], timeout=WORLD_TIMEOUT,
                                   shell=True, payload_file=path, head=WORLD_OUTPUT_MAX)
                child.extra = {"job": job, "index": i}
            except OSError as err:
                job["left"] -= 1
                job["failure"] = job["failure"] or f"could not start: {err}"
            finally:
                os.unlink(path)             # the child holds it open
        return self.world_settle(state, job) if job["left"] == 0 else ()

    def world_done(self, state, child, status):
        """One world step ended (open point 38); its last settles the ensemble."""
        job = child.extra.get("job")
        if job is None or self.worlds.get(state.name) is not job:
            return None
        result = world_step_result(state.mandate, child.oversized, child.ended_by, status,
                                   bytes(child.out), bytes(child.err))
        if result is None:
            del self.worlds[state.name]
            return None
        out, failure = result
        if failure:
            job["failure"] = job["failure"] or failure
        else:
            job["outputs"][child.extra["index"]] = out
        job["left"] -= 1
        return self.world_settle(state, job) if job["left"] == 0 else None

    def world_settle(self, state, job):
        """All steps of an ensemble are in: the kernel says what to write."""
        self.worlds.pop(state.name, None)
        outputs = [job["outputs"][i] for i in sorted(job["outputs"])]
        return world_rule(state, job["report"], job["lever"], outputs, job["failure"])


class Keeper:
    """Keeps each venture's `run` program alive as restart_rule says; its methods return the
    intents of what it started or what ended."""

    def __init__(self, ventures, spawn, active):
        self.ventures, self.spawn, self.active = ventures, spawn, active
        self.keep = {}                # venture -> its `run` child and next start

    def start_keep(self, state):
        keep = self.keep.setdefault(state.name, {"child": None, "next_start": None})
        keep["next_start"] = None       # a start asked for now ends a back-off's wait
        return self.start_run(state) if keep["child"] is None else []

    def start_run(self, state):
        keep = self.keep[state.name]
        if not self.active(state) or not state.mandate["run"]:
            return []
        try:
            keep["child"] = self.spawn("run", state, state.mandate["run"], shell=True)
        except OSError as err:
            keep["child"] = None
            return run_started(state, None, err)
        return run_started(state, keep["child"].pid)

    def run_done(self, state, child, status):
        """The kept program ended: its exit, then a restart as `restart:` says (open point 31)."""
        keep = self.keep[state.name]
        keep["child"] = None
        again, delay = yield from restart_rule(
            state, child.pid, status, child.ended_by, time.monotonic() - child.started,
            self.active(state))
        if again:
            if delay:
                keep["next_start"] = time.monotonic() + delay
            else:
                yield from self.start_run(state)

    def start_due(self, now):
        for name, keep in self.keep.items():
            if keep["next_start"] is not None and now >= keep["next_start"]:
                keep["next_start"] = None
                yield self.ventures[name], self.start_run(self.ventures[name])

    def wakeups(self):
        return [k["next_start"] for k in self.keep.values() if k["next_start"] is not None]

    def hold(self, name):
        if name in self.keep:
            self.keep[name]["next_start"] = None


class Schedule:
    """When each venture's next round is due, in monotonic time, soonest first (a heap)."""

    def __init__(self, active):
        self.active = active
        self.due = {}                 # venture -> monotonic time its next round is due
        # (time, venture), soonest first; entries the dict no longer holds are stale
        self.due_heap = []

    def enter(self, name, at):
        self.due[name] = at
        heapq.heappush(self.due_heap, (at, name))

    def soonest(self):
        heap = self.due_heap
        while heap and (self.due.get(heap[0][1]) != heap[0][0] or not self.active(heap[0][1])):
            # superseded, or its venture no longer runs: resume and add schedule again
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now):
        while self.soonest() is not None and self.soonest() <= now:
            yield heapq.heappop(self.due_heap)

    def resume(self, now):
        for name in list(self.due):
            self.enter(name, min(self.due[name], now))


class Children:
    """The programs the warden runs now, each in its own process group, and the groups left
    behind."""

    def __init__(self, home, sel, tell, flush, journal_group, settle, debug=False):
        self.home, self.sel, self.tell, self.flush, self.debug = home, sel, tell, flush, debug
        self.journal_group, self.settle = journal_group, settle
        self.children = []            # Child objects running now
        self.lingering = {}           # pgid -> venture: groups whose leader exited, members not

    def __iter__(self):
        return iter(self.children)

    def __len__(self):
        return len(self.children)

    def terminate(self, why, venture=None, purpose=None):
        """TERM each group (of `venture`, started for `purpose`) now, KILL it after its grace."""
        now = time.monotonic()
        for child in self.children:
            if venture in (None, child.venture) and purpose in (None, child.purpose):
                child.terminate(why, now)

    def end_lingering(self, venture=None, final=False):
        """End the groups left behind (all, or one venture's): TERM, then KILL after the grace."""
        groups = [g for g, v in self.lingering.items() if venture is None or v == venture]
        if final:
            term_then_kill(groups)
        else:
            for pgid in groups:
                signal_group(pgid, 15)
        for pgid in groups:
            if final or not signal_group(pgid, 0):
                del self.lingering[pgid]
                self.tell({"ended": pgid})
                self.journal_group(f"-{pgid}")

    def spawn(self, purpose, state, args, timeout=None, shell=False, lever=None, payload_file=None,
              cwd=None, head=None, checked=False, runs=()):
        """Start a program of `state`'s venture in its own group; tell avsmd of the group (RUN-12).
        Raise PermissionError, starting nothing, when another user could change what it runs."""
        import selectors
        commands = [args] + [r for r in runs if r]
        cwd = cwd or state.directory
        unsafe = not checked and owner_problem(cwd, commands)
        if unsafe:
            raise PermissionError(f"{unsafe.why}; {unsafe.fix}")
        env = dict(BASE_ENV or os.environ, AVSM_HOME=self.home, AVSM_VENTURE=state.name,
                   **some(AVSM_LEVER=lever, AVSM_PAYLOAD=payload_file))
        child = Child(purpose, state.name, args, cwd, env, timeout=timeout, shell=shell,
                      stdin_path=payload_file)
        child.head = head
        self.children.append(child)
        child.leader_start = process_start(child.pgid)
        self.journal_group(f"+{child.pgid} {child.leader_start or '-'} {state.name} {purpose}")
        self.tell({"group": child.pgid, "venture": state.name, "purpose": purpose,
                   "start": child.started_at, "leader_start": child.leader_start})
        for pipe in child.open_pipes:
            self.sel.register(pipe, selectors.EVENT_READ, ("pipe", child))
        if child.pidfd is not None:
            self.sel.register(child.pidfd, selectors.EVENT_READ, ("pidfd", child))
        # avsmd hears of a group at once: a warden killed next leaves no stranger behind
        self.flush()
        if self.debug:          # formatted only when asked: a thousand children start a minute
            log(self.debug, "warden",
                f"{state.name}: started {purpose} {args!r} pid {child.pid} group {child.pgid}")
        return child

    def enforce(self, now):
        for child in list(self.children):
            # a dying group gone: settle it
            if (not signal_group(child.pgid, 0) if child.status is not None
                    else child.pidfd is None and child.poll() is not None):
                self.child_event(child)
            else:
                child.enforce(now)

    def wakeups(self, now):
        times = []
        for child in self.children:
            times += [t for t in (child.deadline, child.kill_at) if t is not None]
            if child.pidfd is None or child.status is not None:
                times.append(now + 0.05)        # no pidfd here, or a dying group: look again soon
        return times

    def child_event(self, child):
        """A child's leader ended: drain its output, reap it by pid, and settle what it was for."""
        if child.status is None:
            status = child.poll()
            if status is None:
                return
            child.status = status
            for pipe in (child.stdout, child.stderr):
                child.drain(pipe)
                if pipe in child.open_pipes:
                    self.sel.unregister(pipe)
            child.open_pipes.clear()
            if child.pidfd is not None:
                self.sel.unregister(child.pidfd)
            child.close()
        if child.ended_by and signal_group(child.pgid, 0):
            return                      # dying: tick() looks again until the group is gone
        self.children.remove(child)
        child.state = "ended"                                       # exited -> ended
        if signal_group(child.pgid, 0):
            self.lingering[child.pgid] = child.venture
            if child.purpose == "run":
                # the old run's stragglers must not meet the new one
                signal_group(child.pgid, 15)
        else:
            self.tell({"ended": child.pgid}, later=child.leader_start is not None)
            self.journal_group(f"-{child.pgid}")
        if self.debug:
            log(self.debug, "warden", f"{child.venture}: {child.purpose} pid {child.pid} ended:"
                                      f" {describe_status(child.status)}")
        self.settle(child)


# ---- what a room's programs are handed: a payload file, avsm's own code to run ----
def write_payload(data, prefix="avsm-payload-"):
    """Write a lever's content (bytes, else as JSON) to a private temporary file; return its path
    (open point 28)."""
    import tempfile
    fd, path = tempfile.mkstemp(prefix=prefix)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data if isinstance(data, bytes) else json.dumps(data).encode())
    return path


# How avsmd starts itself and its warden: through the import system, so its cached bytecode serves
# (a script is compiled afresh at every start, and the compiler's memory stays with it).
LOAD_AVSM = (
    "import importlib.util as u, sys; s = u.spec_from_file_location('avsm', sys.argv[1]); m ="
    " u.module_from_spec(s); sys.modules['avsm'] = m; s.loader.exec_module(m);"
    " sys.exit(m.main(sys.argv[2:]))")


def cached_command(program, args):
    """Return the argv that runs `program` of this file from its cached, hash-checked bytecode."""
    import importlib.util
    import py_compile
    with contextlib.suppress(OSError, ValueError, py_compile.PyCompileError):
        cache = importlib.util.cache_from_source(AVSM_PATH)
        st = os.stat(AVSM_PATH)
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        # read again once avsm.py changed, not at each adapter's start
        if BYTECODE_CHECKED.get(cache) != seen:
            try:
                with open(cache, "rb") as fh:
                    head = fh.read(16)
            except OSError:
                head = b""
            with open(AVSM_PATH, "rb") as fh:
                source = importlib.util.source_hash(fh.read())
            # a stale one (avsm.py replaced in place) is compiled at every start: 0.4 s, 60 MB
            if head[4:8] != PYC_CHECKED_HASH or head[8:16] != source:
                cache_bytecode(cache)
            BYTECODE_CHECKED[cache] = seen
    # -P: nothing before the standard library on sys.path (`-c` alone would put the venture's
    # directory first, and its json.py would be imported). -S: no `site`, so no .pth file runs.
    prefix = [f"-Xpycache_prefix={sys.pycache_prefix}"] if sys.pycache_prefix else []
    return [sys.executable, "-S", "-P", *prefix, "-c", LOAD_AVSM, AVSM_PATH, program] + list(args)


PYC_CHECKED_HASH = b"\3\0\0\0"      # PEP 552's flags: hash-based, its source checked at each load
BYTECODE_CHECKED = {}   # cache -> avsm.py's (inode, size, mtime) when it was checked


def cache_bytecode(cache):
    """Write this file's bytecode to `cache`, readable only by this user and checked against the
    file's hash at each load (a timestamp-checked one runs old code from a copy of the same size
    and time)."""
    import py_compile
    was = os.umask(0o077)
    try:
        py_compile.compile(AVSM_PATH, cfile=cache, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    finally:
        os.umask(was)


class Rounds:
    """The rounds in flight: a venture's metric, every guard, audit and reading read beside it. Its
    methods return the intents of what was read."""

    def __init__(self, cfg, home, ventures, children, spawn, stopping, active, debug=False):
        self.cfg, self.home, self.ventures, self.children = cfg, home, ventures, children
        self.spawn, self.stopping, self.debug = spawn, stopping, debug
        self.schedule = Schedule(lambda name: active(ventures[name]))
        # venture -> the round in flight: metric seq, guards pending, deadline
        self.rounds = {}
        self.round_number = 0

    def start_due(self, now):
        """Yield (state, intents) of each round due, then when its next is (next_round_at), for at
        most TICK_BUDGET. A round due within START_AHEAD starts now too: at a thousand ventures
        the warden wakes a quarter as often."""
        began = time.monotonic()
        for at, name in self.schedule.pop_due(now + START_AHEAD):
            if time.monotonic() - began > TICK_BUDGET:
                # behind: due next turn, once a waiting client is served
                self.schedule.enter(name, at)
                break
            state = self.ventures[name]
            self.schedule.enter(name, next_round_at(at, state.mandate["cadence"], now))
            yield state, self.start_round(state, now)

    def start_round(self, state, now):
        """Start the metric's report and each guard, audit and reading command round_started
        returns, each in its own group."""
        m = state.mandate
        self.round_number += 1
        running = {(c.purpose, c.extra.get("name")) for c in self.children
                   if c.venture == state.name}
        round_, starts = yield from round_started(state, running, self.round_number, now)
        if round_ is None:
            return
        if self.debug:
            log(self.debug, "warden",
                f"{state.name}: tick {self.round_number}: the metric, {len(m['guards'])} guard(s), "
                f"{len(m['audits'])} audit(s), {len(m['readings'])} reading(s)")
        self.rounds[state.name] = round_
        for what, item in starts:
            yield from self.start_reading(state, what, item["name"], item)
        # the report last: one that cannot start settles the round at once, the rest in it by then
        yield from self.start_reading(state, "report", None, m)

    def start_reading(self, state, what, name, item):
        """Start one reading program, or a built-in adapter (stripe and github get their url and key
        in a private file); yield what one that could not start calls for."""
        args, shell, secret = ["./report"], False, None
        if item.get("adapter"):
            words = item["adapter"].split()
            args = cached_command("adapter", words)
            if words[0] in ("stripe", "github"):
                where, problem = self.cfg["adapters"].get(words[0]), None
                try:
                    key = read_keys(self.home).get(words[0])
                except Fail as fail:
                    # the adapter fails saying so: no call without its key
                    key, problem = None, str(fail)
                secret = write_payload({"url": (where or {}).get("url"), "key": key,
                                        "problem": problem})
        elif what != "report":
            args, shell = item["run"], True
        timeout, number = reading_limit(item), self.rounds[state.name]["number"]
        try:
            child = self.spawn(what, state, args, timeout=timeout, shell=shell, payload_file=secret)
            child.extra = {"name": name, "round": number, "limit": timeout}
            if what != "report":
                self.rounds[state.name]["pending"].add((what, name))
        except OSError as err:
            read = Read(what, name, None, b"", False, f"could not start: {err}", number, None,
                        timeout)
            yield from self.ended(state, read_ended, read, time.monotonic())
        finally:
            if secret:
                os.unlink(secret)               # the child holds it open; the name goes now

    def reading_done(self, state, child, status):
        """The report, a guard, audit or reading program ended: the event the kernel reads."""
        extra = child.extra
        # the note is read only of a program that failed: not made for every reading
        read = Read(child.purpose, extra["name"], status, child.out, child.cut,
                    child.note() if status else "", extra.get("round"), child.ended_by,
                    extra["limit"])
        return self.ended(state, read_ended, read, time.monotonic())

    def ended(self, state, event, *args):
        """Carry out kernel `event` (read_ended, round_due) on the round in flight, out of the
        rounds while it runs; keep the round it returns."""
        round_ = yield from event(state, self.rounds.pop(state.name, None), *args, self.stopping())
        if round_ is not None:
            self.rounds[state.name] = round_

    def settle_all(self, now):
        for name in list(self.rounds):
            yield self.ventures[name], self.ended(self.ventures[name], round_due, now)

    def deadlines(self):
        return [r["deadline"] for r in self.rounds.values()
                if r["metric"] is not None and r["pending"]]

    def forget_from(self, seq):
        # a round's report may be among the lost; the next round starts afresh
        self.rounds.clear()


class Decision:
    """One model decision in flight, from its packet to the lines its asker is shown."""

    def __init__(self, venture, by, backend, reply_id):
        self.venture, self.by, self.backend, self.reply_id = venture, by, backend, reply_id
        # the model's look-ups and their answers, shown in the next packet
        self.looks = []
        self.lines = []               # what `avsm decide` prints when the decision is done
        # the escalation's seq, once an unusable reply sent it to the second backend
        self.escalation = None
        self.escalation_looks = []    # the look records written since, which its answer cites
        self.packet = None            # what the model is shown
        self.request = None           # its system and user texts, as the roles process built them
        # what the provider said of this call, for the records its reply writes
        self.call = None
        # the packet's forecast through the world: False until asked, None if none
        self.world_forecast = False


class Decisions:
    """Letting a model choose: packet -> roles -> backend -> roles -> proposals -> gate. Grants
    nothing; the steps that write yield intents."""

    def __init__(self, home, cfg, ledger, ventures, spawn, tell, to_roles, forecast, stopping):
        import socket
        self.home, self.cfg, self.ledger, self.ventures = home, cfg, ledger, ventures
        self.spawn = spawn
        self.tell, self.to_roles, self.forecast, self.stopping = tell, to_roles, forecast, stopping
        self.results = []             # HTTP replies handed back by call threads
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)

    def start_decision(self, state, by, reply_id=None):
        """Begin one model decision for a venture: it grants nothing."""
        self.build(Decision(state.name, by, backend_for(state, self.cfg)[0], reply_id))

    def ask_roles(self, d, message, then):
        """Send the roles process `message`; its answer goes to then(d, answer)."""
        self.to_roles(message, lambda answer: (self.ventures[d.venture], then(d, answer)))

    def build(self, d):
        """Build the packet and have the roles process make the request; with `world:`, the packet's
        forecast is stepped through the world command first."""
        state = self.ventures[d.venture]
        if d.world_forecast is False:
            d.world_forecast = None
            if self.forecast(state, "packet", decision=d):
                return
        d.packet = model_packet(state, recent_records(self.ledger.db, state.name, PACKET_RECORDS),
                                int(time.time()), d.looks, self.cfg["forecast"], d.world_forecast)
        self.ask_roles(d, {"op": "build", "packet": d.packet}, self.call_backend)

    def packet_forecast_done(self, state, child, status):
        """The packet's forecast through the world is in, or why not: build the packet with it."""
        d = child.extra["decision"]
        d.world_forecast = {"days": child.extra["days"], "seeds": child.extra["seeds"],
                            "made": packet_world_made(bytes(child.out), status, child.ended_by)}
        self.build(d)

    def call_backend(self, d, answer):
        """Yield what the roles process's request for the backend comes to: a `command` backend
        runs apart; an HTTP call runs in a thread; none built is an unusable reply."""
        import threading
        if "error" in answer:
            yield from self.got_reply(
                d, None, f"the roles process could not build the request: {answer['error']}")
            return
        state, backend = self.ventures[d.venture], self.cfg["backends"][d.backend]
        d.request, d.call = answer, None
        if backend["kind"] == "command":
            path = write_payload({"backend": d.backend, "system": answer["system"],
                                  "user": answer["user"]}, "avsm-request-")
            try:
                child = self.spawn("backend", state, backend["run"], timeout=BACKEND_TIMEOUT,
                                   shell=True, payload_file=path, cwd=self.home, head=REPLY_MAX)
                child.extra = {"decision": d, "request_file": path}
            except OSError as err:
                os.unlink(path)
                yield from self.got_reply(d, None, f"could not start {backend['run']}: {err}")
            return
        try:
            key = read_keys(self.home).get(backend["key"]) if backend.get("key") else None
            if backend.get("key") and key is None:
                raise Fail(EX_CONFIG, f"HOME/keys has no {backend['key']}=...; add it (chmod 600)")
        except Fail as fail:
            yield from self.got_reply(d, None, str(fail))
            return

        def call():
            try:
                data, why, facts = call_http_backend(backend, answer["system"], answer["user"], key)
            # the call's thread is a job's boundary: the decision still ends, saying why
            except Exception as err:
                data, why, facts = None, f"the call failed: {type(err).__name__}: {err}", None
            self.results.append((d, data, why, facts))
            with contextlib.suppress(OSError):
                self.wake_w.send(b"r")
        threading.Thread(target=call, daemon=True).start()

    def backend_done(self, state, child, status):
        d = child.extra["decision"]
        with contextlib.suppress(OSError):
            os.unlink(child.extra["request_file"])
        why = reply_failure(self.cfg["backends"][d.backend]["run"], child.oversized, child.ended_by,
                            status)
        return self.got_reply(d, None if why else bytes(child.out), why)

    def results_ready(self):
        """Yield (state, intents) of each reply an HTTP call's thread handed back."""
        with contextlib.suppress(OSError):
            self.wake_r.recv(4096)
        while self.results:
            d, data, why, facts = self.results.pop(0)
            d.call = facts
            yield self.ventures[d.venture], self.got_reply(d, data, why)

    def got_reply(self, d, data, why):
        import base64
        if why is not None:
            state = self.ventures[d.venture]
            return self.replied(d, reply_unusable(state, d, why, self.cfg, self.stopping()))
        self.ask_roles(d, {"op": "parse", "data": base64.b64encode(data).decode(),
                           "packet": d.packet}, self.parsed)
        return ()

    def parsed(self, d, parsed):
        """The reply parsed: reply_parsed, told a look's answer (from the ledger)."""
        state = self.ventures[d.venture]
        looked = look_answer(self.ledger.db, state, parsed["look"]) if "look" in parsed else None
        return self.replied(d, reply_parsed(state, d, parsed, looked, self.cfg, self.stopping()))

    def replied(self, d, event):
        """Carry out the kernel's reading of a reply, then what comes next: the packet built
        again, the second backend asked, or the decision done."""
        then = yield from event
        if then == "look":
            self.build(d)
        elif then is not None:
            d.backend = then
            yield from self.call_backend(d, d.request)
        else:
            self.finish_decision(d)

    def finish_decision(self, d):
        if d.reply_id is not None:
            self.tell({"id": d.reply_id, "out": d.lines or ["the decision wrote nothing"],
                       "exit": EX_OK})


class HomeFiles:
    """The files the warden keeps beside the ledger, each when due: checkpoints, snapshots, the
    closed ledger files, metrics.textfile and the page. A step returns the records that say what it
    wrote, for the warden to carry out; `down` is why the ledger cannot be written, or None."""

    def __init__(self, home, cfg, ledger, ventures, keep, debug=False):
        self.home, self.cfg, self.ledger, self.ventures = home, cfg, ledger, ventures
        self.keep = keep                # Keeper.keep, read by the status lines
        self.checkpoints = Checkpoints(home, cfg["checkpoint"], debug)
        self.snapshots = Snapshots(home)
        self.rotate_at = 0      # no rotation before (after one that failed)
        self.metrics = Metrics(cfg.get("metrics"), debug)
        self.page_at, self.page_failed = time.monotonic(), None

    def checkpoint(self, down, due=False):
        """Write a checkpoint of the committed head (when one is due); return (text, signature)."""
        if self.ledger.held is not None or down:
            return None                 # only a head the ledger holds is written down
        head = self.ledger.last or ledger_head(self.ledger.db)
        if due and not self.checkpoints.due(head, time.time()):
            return None
        try:
            return self.checkpoints.write(head, time.time()) if head else None
        except OSError as err:
            # tried again after `every`, or the next irreversible action
            self.checkpoints.at = time.time()
            sys.stderr.write(f"avsmd: no checkpoint could be written to {self.checkpoints.dir}:"
                             f" {err}\n")
            return None

    def snapshot(self, down, least, fold=None):
        """Write a snapshot to the committed head once `least` records came since the last."""
        head = self.ledger.last or ledger_head(self.ledger.db)
        if self.ledger.held is not None or down or not head or \
                not fold and head[0] - self.snapshots.seq < least:
            return []
        try:
            fold = fold or self.snapshots.fold(self.ledger.db, head[0])[:3]
            return [self.snapshots.write(*fold)]
        except (OSError, TypeError) as err:
            self.snapshots.seq = head[0]      # tried again after `least` more records
            sys.stderr.write(f"avsmd: no snapshot could be written to {self.home}/snapshots:"
                             f" {err}\n")
            return []

    def rotate(self, down, due=False):
        """Close ledger.db into HOME/ledgers and go on in a new one (due: when ledger: says), then
        delete what keep: lets go; return the new file's first seq or None, and the records of
        the files deleted."""
        spec, db, seq, gone = self.cfg.get("ledger"), self.ledger.db, None, []
        self.rotate_failed = "the ledger cannot be written"
        if self.ledger.held is not None or down \
                or due and (not spec or time.time() < self.rotate_at):
            return seq, gone
        try:
            if due and not rotation_due(spec, os.stat(self.ledger.path).st_size, db.execute(
                    "SELECT at FROM records ORDER BY seq LIMIT 1").fetchone()[0], time.time()):
                return seq, gone
            seq = self.ledger.rotate(lambda name, head: rotated_record(self.snapshots.write(
                *self.snapshots.fold(db, head[0])[:3]), name, head), time.time())
            closed = [c + (os.stat(c[2]).st_mtime,) for c in closed_files(self.home)]
            for path, record in files_let_go(spec, closed, self.checkpoints.seq, time.time()):
                os.remove(path)
                gone.append(record)
        except (OSError, TypeError, sqlite3_errors()) as err:
            self.rotate_at, self.rotate_failed, seq = time.time() + LEDGER_RETRY, err, None
            sys.stderr.write(f"avsmd: ledger.db could not be rotated into {self.home}/ledgers:"
                             f" {err}; tried again in {LEDGER_RETRY} s\n")
        return seq, gone

    def write_metrics(self):
        """Write the figures to metrics.textfile when due and the head is committed."""
        due = self.metrics.spec is not None and time.monotonic() >= self.metrics.next_at
        if not due or self.ledger.held is not None:
            return []
        try:
            head = self.metrics.count(self.ledger.db)
        except sqlite3_errors():
            head = (self.ledger.last or (0,))[0]      # a ledger that cannot be read: the last head
        try:
            size = os.stat(self.ledger.path).st_size
        except OSError:
            size = None
        kept = (self.checkpoints.seq, self.checkpoints.at) if self.checkpoints.seq else None
        facts = HomeFacts(self.home, head, size, kept, self.metrics.counted)
        record = self.metrics.write(self.ventures, facts, time.time())
        return [record] if record else []

    def page_facts(self):
        return page_facts(self.home, self.ventures, time.time(), self.ledger.db, self.keep,
                          self.cfg)

    def write_page(self):
        """Write the page to page.path when due, in whole (a web server serves it at once)."""
        spec, now = self.cfg.get("page"), time.monotonic()
        if spec is None or now < self.page_at or self.ledger.held is not None:
            return
        self.page_at, failure = now + spec["every"], None
        try:
            write_textfile(spec["path"], page_html(
                [(None, self.page_facts(), None, program_command("avsm", self.home))], time.time()))
        except (OSError, sqlite3_errors()) as err:
            failure = f"cannot be written ({err}); tried again every {spec['every']} s"
        if failure != self.page_failed:     # once when it fails, once when it works again
            sys.stderr.write(f"avsmd: the page {spec['path']} {failure or 'is written again'}\n")
        self.page_failed = failure

    def wakeups(self):
        """When the metrics and the page are next due (held: once the group commits)."""
        if self.ledger.held is not None:
            return []
        return [self.metrics.next_at] * (self.metrics.spec is not None) \
            + [self.page_at] * bool(self.cfg.get("page"))


class Checkpoints:
    """Writes a checkpoint of the ledger's committed head to HOME/checkpoints/SEQ.txt (signed when
    the config names a key) and to syslog: every `every` once the head has moved, after each
    irreversible action, and when a client asks."""

    def __init__(self, home, spec, debug=False):
        self.dir, self.spec, self.debug = os.path.join(home, "checkpoints"), spec, debug
        self.origin, self.wanted = checkpoint_origin(home), False
        newest = newest_checkpoint(self.dir)
        self.seq, self.at = (newest.seq, newest.at) if newest else (0, 0)
        if newest and spec["key"]:      # a key named since the newest was written: sign one now
            signer, ours = sshsig_public_key(newest.signature or ""), None
            with contextlib.suppress(OSError, UnicodeDecodeError, IndexError):
                with open(os.path.expanduser(spec["key"]) + ".pub") as fh:
                    ours = fh.read(CHECKPOINT_MAX).split()[1]
            self.wanted = sign_again_at_start(spec, signer, ours)

    def due(self, head, now):
        return checkpoint_due(head, (self.seq, self.at), self.wanted, self.spec["every"], now)

    def write(self, head, now):
        """Write the checkpoint of `head` at `now`; return (text, signature or None)."""
        import syslog
        at, signature = int(now), None
        text = checkpoint_text(self.origin, head[0], head[1], at)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        path = os.path.join(self.dir, f"{head[0]:012d}.txt")
        if self.spec["key"]:
            try:
                signature = sign_text(text, os.path.expanduser(self.spec["key"]),
                                      self.spec["namespace"])
            except Fail as fail:
                sys.stderr.write(f"avsmd: checkpoint #{head[0]} is written unsigned: {fail}\n")
        for name, data in ((path + ".sig", signature), (path, text)):
            if data:
                write_textfile(name, data if data.endswith("\n") else data + "\n", 0o600)
        syslog.openlog("avsm", 0, syslog.LOG_USER)
        syslog.syslog(syslog.LOG_NOTICE, f"checkpoint {self.origin} {head[0]} {head[1]}"
                      + (" signed" if signature else ""))
        log(self.debug, "warden", f"checkpoint #{head[0]} written to {path}")
        self.seq, self.at, self.wanted = head[0], at, False
        return text, signature


def newest_checkpoint(directory):
    """Return the Checkpoint of the newest SEQ.txt in `directory` that reads as one, or None."""
    names = os.listdir(directory) if os.path.isdir(directory) else ()
    for name in sorted((n for n in names if re.fullmatch(r"\d+\.txt", n)), reverse=True):
        path = os.path.join(directory, name)
        try:
            with open(path) as fh:
                checkpoint = parse_checkpoint(fh.read(), name)
        except (OSError, UnicodeDecodeError, Fail):
            continue
        return with_signature(path, checkpoint)
    return None


SNAPSHOT_MIN = 1000     # new records before a checkpoint, a stop or a start writes a snapshot
SNAPSHOT_EVERY = 20000  # ... before one is written at once (what a start folds at most)
SNAPSHOTS_KEPT = 5      # files kept; a start tries these, newest first
SNAPSHOT_MAX = 1 << 30  # bytes of a snapshot read (2.5 MB at a million records)


def snapshot_path(home, seq):
    return os.path.join(home, "snapshots", f"{seq:012d}.json")


@functools.cache
def code_sha256():
    """Return the sha256 of avsm.py as this process first read it (Snapshots primes it): the code
    that folded a snapshot, not one replaced since, reads it."""
    import hashlib
    with open(AVSM_PATH, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def snapshot_records(db):
    """Return [(seq, record)] of the snapshot records in the ledger, newest first."""
    rows = db.execute(f"SELECT seq, record FROM records WHERE {RECORD_KIND_SQL} = 'snapshot' "
                      "ORDER BY seq DESC").fetchall()
    return [(seq, r) for seq, r in ((s, load_record(t, s)) for s, t in rows)
            if r.get("venture") == "self" and type(r.get("seq")) is int and 0 < r["seq"] < seq]


def tried_snapshots(db):
    """The snapshot records a start tries: the newest, and a rotated file's first."""
    records = snapshot_records(db)
    return records[:SNAPSHOTS_KEPT] + records[SNAPSHOTS_KEPT:][-1:]


def read_snapshot(home, record):
    """Return the bytes of the snapshot `record` names; Fail(66) when another avsm.py folded it or
    it cannot be read, 65 when they do not hash to the record's sha256."""
    import hashlib
    path = snapshot_path(home, record["seq"])
    if record.get("code") != code_sha256():
        raise Fail(EX_NOINPUT, f"another avsm.py folded {path}")
    try:
        data = read_small_file(path, SNAPSHOT_MAX)      # a FIFO, /dev/zero: refused, not read
    except OSError as err:
        raise Fail(EX_NOINPUT, f"{path} cannot be read: {err.strerror or err}") from None
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        raise Fail(EX_DATAERR, f"{path} does not hash to the sha256 its record holds: it was"
                               " changed after it was written")
    return data


def snapshot_before(home, db, seq):
    """Return (its seq, its states) of the newest good snapshot before #seq, else (0, None): the
    fold `avsm why` re-checks an action from."""
    for _, record in snapshot_records(db):
        with contextlib.suppress(Fail, ValueError):
            if record["seq"] < seq:
                return record["seq"], states_of(read_snapshot(home, record))[0]
    return 0, None


def chain_anchor(home, db):
    """Return (seq, hash) of the record the newest good snapshot is folded to, or None."""
    for _, record in tried_snapshots(db):
        with contextlib.suppress(Fail):
            read_snapshot(home, record)
            # a rotation's snapshot is of the closed file's last record, which it names
            return (record["seq"], record["hash"]) if "hash" in record else \
                row_at(db, "seq, hash", record["seq"])
    return None


class Snapshots:
    """Keeps the fold to a seq in HOME/snapshots/SEQ.json, tied to the chain by a snapshot record:
    from the ledger, not from memory."""

    def __init__(self, home):
        self.home, self.seq = home, 0
        code_sha256()

    def fold(self, db, upto=None):
        """Return (seq, states, counted, records folded): the newest good snapshot (up to `upto`)
        and the records after it folded."""
        seq, states, counted = 0, {}, {}
        for at, record in tried_snapshots(db):
            try:
                if record["seq"] <= (upto or record["seq"]):
                    states, counted = states_of(read_snapshot(self.home, record))
                    seq = record["seq"]
                    break
            except (Fail, LookupError, TypeError, ValueError) as err:
                sys.stderr.write(f"avsm: snapshot #{record['seq']} (record #{at}) is ignored:"
                                 f" {err}; the fold starts from an older one or the first record\n")
        self.seq, folded = max(self.seq, seq), 0
        for folded, (seq, at, record) in enumerate(scan_records(db, seq, upto), 1):
            fold_ledger(states, seq, at, record)
            count_self(counted, record)
        return seq, states, counted, folded

    def write(self, seq, states, counted):
        """Write the snapshot of `states` and `counted`, folded to #seq; return its record."""
        text = snapshot_text(seq, states, counted)
        path = snapshot_path(self.home, seq)
        where = os.path.dirname(path)
        os.makedirs(where, mode=0o700, exist_ok=True)
        write_textfile(path, text, 0o600)
        self.seq = seq
        # those a rotated file starts from stay
        bounds = {f"{seq:012d}.json" for c in closed_files(self.home) for seq in (c[0] - 1, c[1])}
        for name in sorted(n for n in os.listdir(where) if re.fullmatch(r"\d+\.json", n))[
                :-SNAPSHOTS_KEPT]:
            with contextlib.suppress(OSError):
                if name not in bounds:
                    os.remove(os.path.join(where, name))
        return snapshot_record(seq, text, path)


class Metrics:
    """Writes the figures (metrics_text) to metrics.textfile every `every`; holds the counters."""

    def __init__(self, spec, debug=False):
        self.spec, self.debug = spec, debug
        self.next_at = time.monotonic()     # the first at the warden's first turn, once folded
        self.counted, self.seen, self.failed = {}, 0, 0

    def count(self, db):
        """Count avsmd's starts and restarts since the last count; return the head."""
        head = (ledger_head(db) or (0,))[0]     # first: what avsmd appends after it waits its turn
        rows = db.execute("SELECT seq, record FROM records WHERE seq > ? AND seq <= ? "
                          "AND (record LIKE ? OR record LIKE ?) ORDER BY seq",
                          (self.seen, head, '%"kind":"start"%', '%"kind":"restart"%')).fetchall()
        for seq, text in rows:
            count_self(self.counted, load_record(text, seq))
        self.seen = max(self.seen, head)
        return head

    def write(self, states, home, now):
        self.next_at = time.monotonic() + self.spec["every"]
        failure = None
        try:
            write_textfile(self.spec["textfile"], metrics_text(states, home, now))
        except OSError as err:
            failure = f"{err.strerror or err}" + (f": {err.filename}" if err.filename else "")
        self.failed, record = judge_metrics(self.failed, self.spec, failure)
        if record is not None:
            sys.stderr.write(f"avsmd: {record['summary']}\n")
        log(self.debug, "warden", f"metrics: {failure or 'written to ' + self.spec['textfile']}")
        return record


# =============================================================================
# 12. avsmd and the roles process
# avsmd holds the lock and the socket, starts and restarts the warden and the
# roles process, and ends every group the warden reported; it never acts.
# =============================================================================

NOTIFY_QUEUE = 100      # notices waiting at most; one past it is dropped, as a failure
NOTIFY_STOP_GRACE = 0.5  # at a stop, seconds between TERM and KILL of a notify past the deadline
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Notifier:
    """avsmd's notify command: run for each notice, one at a time, in a process group of its own;
    avsmd's loop waits for it only at a stop."""

    def __init__(self, home, spec, write, debug):
        self.home, self.spec, self.write, self.debug = home, spec, write, debug
        self.queue = []
        self.running = []             # (Child, notice)
        self.stretch = None           # judge_notify's
        self.down_told = False        # admit_notice's
        # avsm and avsmd as this person runs them
        self.commands = {"avsm": client_command(home), "avsmd": program_command("avsmd", home)}
        self.stopping = False         # then every notice starts at once: no time to take turns

    def tell(self, notice):
        """Queue a notice for the notify command."""
        admit, self.down_told = admit_notice(self.down_told, notice)
        if self.spec is None or not admit:
            return
        if len(self.queue) >= NOTIFY_QUEUE:
            self.settle(notice, f"dropped: {NOTIFY_QUEUE} notices were waiting for the command")
            return
        self.queue.append(notice)
        log(self.debug, "avsmd",
            f"notice {notice['kind']} of {notice['venture']}: {notice['summary']}")

    def poll(self):
        """Drain each run, end one past its time limit, settle one that ended, start the next."""
        now = time.monotonic()
        for run in list(self.running):
            child, notice = run
            status = child.poll()   # drained after: what it wrote before it ended is read
            child.open_pipes = {pipe for pipe in child.open_pipes if child.drain(pipe)}
            # what it started (`sleep 300 &`) may run on in its group, within the same limit
            behind = status is not None and signal_group(child.pgid, 0)
            if status is None or behind:
                killed = child.kill_at is not None and now >= child.kill_at
                child.enforce(now)
                if status is None or not killed:    # only a zombie outlives KILL
                    continue
            self.running.remove(run)
            child.close()
            self.settle(notice, notify_failure(child.ended_by, status, self.spec["timeout"]),
                        child.note())
        while self.queue and (self.stopping or not self.running):
            notice = self.queue.pop(0)
            text, event = notice_message(notice, self.commands, self.home)
            path = write_payload(text.encode("utf-8", "replace"))
            try:
                child = Child("notify", notice["venture"], self.spec["run"], self.home,
                              notify_env(self.home, event), timeout=self.spec["timeout"],
                              shell=True, stdin_path=path)
            except (OSError, ValueError) as err:
                self.settle(notice, f"it could not start: {getattr(err, 'strerror', None) or err}")
                continue
            finally:
                os.unlink(path)     # held open as its standard input
            self.running.append((child, notice))

    def settle(self, notice, failure, note=""):
        """One notice told, or not: write what judge_notify says to write."""
        self.stretch, record = judge_notify(self.stretch, notice, failure, note)
        log(self.debug, "avsmd",
            f"notify of {notice['kind']}: {failure or 'told'}" + (f": {note}" if note else ""))
        if record:
            self.write(record)

    def finish(self, deadline):
        """At a stop: wait for the runs in flight until `deadline`, then end what still runs."""
        while (self.running or self.queue) and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.02)
        now = time.monotonic()
        for child, _ in self.running:
            child.terminate("stop", now)
            child.kill_at = now + NOTIFY_STOP_GRACE
        while self.running and time.monotonic() < now + NOTIFY_STOP_GRACE + 1:
            self.poll()
            time.sleep(0.02)
        for notice in self.queue:
            self.settle(notice, "avsmd stopped before it could be told")
        self.queue = []


class HomeLock:
    """avsmd.lock, held for life; `lost` once another avsmd took it: then nothing here is ours."""

    def __init__(self, home):
        self.home, self.path = home, os.path.join(home, "avsmd.lock")
        self.fd, self.lost = None, False

    def take(self):
        """Hold avsmd.lock; exit 75 naming the pid when another avsmd has it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise Fail(EX_TEMPFAIL, f"another avsmd (pid {read_lock_pid(self.path) or 'unknown'})"
                                    f" is running on {self.home}; stop it first, or give this one"
                                    " another --home") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            os.fsync(fd)
        except OSError as err:
            os.close(fd)
            raise Fail(EX_CANTCREAT, f"{self.path} cannot be written: {err.strerror}; free space on"
                                     " its file system or fix its permissions, then start avsmd"
                                     " again") from None
        if self.fd is not None:
            os.close(self.fd)
        self.fd = fd

    def ours(self):
        """Whether the lock file is the one we hold, or is gone (check makes it again)."""
        if self.lost:
            return False
        try:
            st, mine = os.stat(self.path), os.fstat(self.fd)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return os.path.samestat(st, mine) or \
            (read_lock_pid(self.path) in (os.getpid(), None) and not lock_holder(self.home))

    def check(self, debug):
        """Each second: make the lock file again when it was deleted or replaced by one no one
        holds; return the pid of another avsmd that took it."""
        try:
            st = os.stat(self.path)
            if os.path.samestat(st, os.fstat(self.fd)):
                return None
        except FileNotFoundError:
            st = None
        try:
            if st is None or not lock_holder(self.home):
                self.take()
                log(debug, "avsmd", "made the lock file again")
                return None
        except OSError as err:            # a full disk: try again next second
            sys.stderr.write(f"avsmd: cannot make {self.path} again yet: {err.strerror}\n")
            return None
        except Fail:
            pass
        self.lost = True
        return read_lock_pid(self.path)


class Clients:
    """HOME/sock and the clients on it: each connection's one request, held while the warden
    restarts, and the reply owed to it."""

    def __init__(self, daemon):
        self.daemon, self.path = daemon, os.path.join(daemon.home, "sock")
        self.listener = self.sock_id = None
        self.clients, self.waiting, self.queue, self.next_id = {}, {}, [], 0

    def bind(self):
        import selectors
        import socket
        if self.listener is not None:
            self.daemon.sel.unregister(self.listener)
            self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)      # we hold the lock: a socket left here is a dead avsmd's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        listener.listen(64)
        listener.setblocking(False)
        self.listener, self.sock_id = listener, os.stat(self.path).st_ino
        self.daemon.sel.register(listener, selectors.EVENT_READ, self.accept)

    def check(self):
        """Each second: the socket must still be ours; make it again when deleted or replaced."""
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self.sock_id:
                return
        self.bind()
        log(self.daemon.debug, "avsmd", "made the socket again")

    def accept(self):
        import selectors
        import socket
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with contextlib.suppress(OSError, AttributeError):
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            if int.from_bytes(creds[4:8], sys.byteorder) not in (os.getuid(), 0):
                conn.close()
                return
        conn.setblocking(False)
        self.clients[conn] = {"reader": LineReader(REQUEST_MAX)}
        self.daemon.sel.register(conn, selectors.EVENT_READ, lambda: self.data(conn))

    def data(self, conn):
        """Read what a client sent: its one request; whatever the bytes, avsmd goes on serving."""
        data = receive(conn)
        if data is None:
            return
        if not data:
            self.drop(conn)
            return
        if "cmd" in self.clients[conn]:
            return                  # one request a connection: what follows it is not read
        try:
            messages = self.clients[conn]["reader"].feed(data)
            if messages:
                self.request(conn, *check_request(messages[0]))
        except Fail as fail:
            self.reply(conn, [str(fail)], fail.code)
        except (ValueError, RecursionError):    # not JSON, not UTF-8, too deep, too long
            self.reply(conn, ["a request avsmd cannot read: one JSON object a line, in UTF-8,"
                                  " of at most 1 MiB"], EX_USAGE)
        except Exception as err:                # a bug: this request refused, avsmd serves on
            import traceback
            sys.stderr.write("avsmd: a bug in avsm, reading a request (avsmd goes on"
                             f" serving):\n{traceback.format_exc()}")
            self.reply(conn, [f"a bug in avsm refused this request ({type(err).__name__}); "
                                  "it is reported on avsmd's standard error"], EX_SOFTWARE)

    def request(self, conn, cmd, args):
        """Pass a checked request on to the warden."""
        if self.daemon.stopping:
            self.reply(conn, ["avsmd is stopping and takes no new commands"], EX_UNAVAILABLE)
            return
        if cmd == "ping":
            self.reply(conn, [], EX_OK,
                       [f"avsmd {VERSION} (pid {os.getpid()}) on {self.daemon.home}"])
            return
        self.next_id += 1
        self.waiting[self.next_id] = conn
        self.clients[conn]["cmd"] = cmd
        self.queue.append({"id": self.next_id, "cmd": cmd, "args": args})
        self.daemon.pass_on()

    def answer(self, message):
        """The warden answered request `id`: reply to its client."""
        self.reply(self.waiting.pop(message["id"], None), message.get("err", []),
                   message.get("exit", EX_SOFTWARE), message.get("out", []))

    def fail_waiting(self, why):
        """Every request the warden was answering fails with `why` (69)."""
        for rid in list(self.waiting):
            self.reply(self.waiting.pop(rid, None), [why], EX_UNAVAILABLE)

    def reply(self, conn, err, code, out=()):
        if conn not in self.clients:
            return
        lines = [{"out": line} for line in out] + [{"err": line} for line in err]
        if self.clients[conn].get("cmd") == "add" and self.daemon.config_changed():
            lines.append({"err": "config.yaml changed on disk; restart avsmd to apply it"})
        lines.append({"exit": code})
        with contextlib.suppress(OSError):
            conn.settimeout(5)
            conn.sendall("".join(json.dumps(line) + "\n" for line in lines).encode())
        self.drop(conn)

    def drop(self, conn):
        if conn in self.clients:
            self.daemon.sel.unregister(conn)
            del self.clients[conn]
            conn.close()
        self.waiting = {rid: c for rid, c in self.waiting.items() if c is not conn}

    def close(self, remove):
        """avsmd stops: tell each client still connected; remove the socket when `remove`."""
        for conn in list(self.clients):
            self.reply(conn, ["avsmd stopped"], EX_UNAVAILABLE)
        with contextlib.suppress(OSError):
            if remove and os.stat(self.path).st_ino == self.sock_id:
                os.unlink(self.path)


class Kept:
    """One process avsmd keeps (the warden, the roles process), and what avsmd calls when it speaks
    and when it ends."""

    def __init__(self, name, what, sel, read, ended):
        self.name, self.what, self.sel, self.read, self.ended = name, what, sel, read, ended
        self.pid = self.proc = self.chan = self.pidfd = self.restart_at = self.backoff = None

    def attach(self, pid, chan, debug):
        import selectors
        chan.setblocking(False)
        self.pid, self.chan, self.reader, self.started = pid, chan, LineReader(), time.monotonic()
        self.sel.register(chan, selectors.EVENT_READ, self.read)
        try:
            self.pidfd = os.pidfd_open(pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ, lambda: self.ended(self))
        except (AttributeError, OSError):
            self.pidfd = None
        log(debug, "avsmd", f"started {self.what}, pid {pid}")

    def detach(self):
        """It ended: close its pidfd and channel."""
        if self.pidfd is not None:
            self.sel.unregister(self.pidfd)
            os.close(self.pidfd)
        self.sel.unregister(self.chan)
        self.chan.close()
        self.chan = self.pidfd = None


class Daemon:
    """avsmd: holds the home, serves its socket, keeps the warden and the roles process, ends what
    they leave. Its notifier is its own: it runs while the warden restarts."""

    def __init__(self, home, cfg, cfg_path, cfg_text, debug):
        import selectors
        self.home, self.cfg, self.cfg_path, self.cfg_text = home, cfg, cfg_path, cfg_text
        self.debug = debug
        self.sel, self.ledger = selectors.DefaultSelector(), None
        self.lock, self.clients = HomeLock(home), Clients(self)
        self.warden = Kept("warden", "the warden", self.sel, self.from_warden, self.ended)
        self.roles = Kept("roles", "the roles process", self.sel, self.from_roles, self.ended)
        self.roles_waiting = {}
        self.groups = {}    # the groups the warden said it started and has not seen end (RUN-13)
        self.stopping, self.stop_deadline, self.exit_code, self.signals = False, None, EX_OK, []
        self.notifier = Notifier(home, cfg.get("notify"), self.append, debug)

    # ---- the warden and the roles process ----
    def start_warden(self):
        import socket
        import subprocess
        ours, theirs = socket.socketpair()
        args = cached_command("warden", ["--home", self.home, "--fd", str(theirs.fileno())]) \
            + (["-d"] if self.debug else []) + (["--again"] if self.warden.pid else [])
        self.warden.proc = subprocess.Popen(args, pass_fds=[theirs.fileno()],
                                            env=dict(os.environ, AVSM_CONFIG=json.dumps(self.cfg)),
                                            stdin=subprocess.DEVNULL)
        theirs.close()
        self.warden.attach(self.warden.proc.pid, ours, self.debug)
        self.pass_on()

    def start_roles(self):
        """Fork the roles process: it holds no key, and is `nobody` under root."""
        # loaded before the fork, for nobody may not read the standard library
        import base64       # noqa: F401
        import random       # noqa: F401
        import socket
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:                       # the roles process
            code = EX_SOFTWARE
            try:
                keep = theirs.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 65536)
                if os.getuid() == 0:          # under root, the user nobody (KEYS-06)
                    import pwd
                    nobody = pwd.getpwnam("nobody")
                    os.setgroups([])
                    os.setgid(nobody.pw_gid)
                    os.setuid(nobody.pw_uid)
                code = run_roles(theirs)
            finally:
                os._exit(code)
        theirs.close()
        self.roles.attach(pid, ours, self.debug)

    def pass_on(self):
        """Send the warden the requests its clients wait on."""
        if self.warden.chan is not None:
            queue, self.clients.queue = self.clients.queue, []
            for message in queue:
                send_line(self.warden.chan, message)

    def from_warden(self):
        """Route what the warden sent."""
        while self.warden.chan is not None:
            data = receive(self.warden.chan)
            if not data:
                return
            for message in self.warden.reader.feed(data):
                if message.get("to") == "roles":
                    self.to_roles(message)
                elif "notice" in message:
                    self.notifier.tell(message["notice"])
                elif "group" in message:
                    self.groups[message["group"]] = message
                elif "ended" in message:
                    self.groups.pop(message["ended"], None)
                elif "id" in message:
                    self.clients.answer(message)

    def to_roles(self, message):
        del message["to"]
        rid = message.get("rid")
        if self.roles.chan is None:
            return self.roles_error(rid, "the roles process is not running")
        self.roles_waiting[rid] = True
        try:
            send_line(self.roles.chan, message)
        except OSError:
            self.roles_waiting.pop(rid, None)
            self.roles_error(rid, "the roles process is not answering")

    def roles_error(self, rid, why):
        self.to_warden({"from": "roles", "rid": rid, "error": why})

    def to_warden(self, message):
        if self.warden.chan is not None:
            send_line(self.warden.chan, message)

    def from_roles(self):
        data = receive(self.roles.chan, 1 << 20)
        for message in self.roles.reader.feed(data) if data else []:
            self.roles_waiting.pop(message.get("rid"), None)
            message["from"] = "roles"
            self.to_warden(message)

    def ended(self, kept):
        """The warden or the roles process ended: settle what it leaves, say so, start it again."""
        if kept is self.warden:
            status = self.warden.proc.poll()
            if status is None or self.warden.chan is None:
                return                    # still running, or its end was already settled
            self.from_warden()
            self.warden.detach()
            self.end_groups()
        else:
            try:
                pid, status = os.waitpid(self.roles.pid, os.WNOHANG)    # by its own pid only
            except ChildProcessError:
                pid, status = self.roles.pid, 0
            if pid == 0 or self.roles.chan is None:
                return
            self.roles.detach()
            for rid in self.roles_waiting:
                self.roles_error(rid, "the roles process ended while it worked")
            self.roles_waiting = {}
            status = os.waitstatus_to_exitcode(status)
        if self.stopping:
            return
        kept.backoff, delay = child_restart_wait(kept.backoff, time.monotonic() - kept.started)
        kept.restart_at = time.monotonic() + delay     # the loop in run starts it then
        self.append_self("restart", f"{kept.what} (pid {kept.pid}) ended"
                         f" ({describe_status(status)}); starting it again"
                         + (f" in {delay} s" if delay else ""), process=kept.name, restart_in=delay)
        if kept is self.warden:
            self.clients.fail_waiting("the warden ended while answering; try again")

    def end_groups(self):
        term_then_kill([g for g, told in self.groups.items()
                        if group_is_still(g, told.get("leader_start"))])
        self.groups = {}
        if self.lock.ours():          # another avsmd's journal, or groups, are not ours to touch
            sweep_groups(os.path.join(self.home, "groups"), self.home)    # and removes the journal

    # ---- the config, records of self, stopping ----
    def config_changed(self):
        try:
            return read_small_file(self.cfg_path, CONFIG_MAX) != self.cfg_text.encode()
        except OSError:
            return self.cfg_text != ""

    def append_self(self, kind, summary, **fields):
        return self.append(new_record(kind, "self", summary=summary, **fields))

    def append(self, record):
        if self.lock.lost:
            return None
        try:
            return self.ledger.append(record, int(time.time()))
        except LockLost:
            self.lock.lost = True
        except Exception as err:          # an unwritable ledger must not take avsmd down
            sys.stderr.write(f"avsmd: could not append to the ledger: {err}\n")
            self.notifier.tell(ledger_down_notice(str(err)))

    def begin_stop(self, why):
        if self.stopping:
            return
        self.stopping, self.stop_deadline = True, time.monotonic() + WARDEN_STOP_GRACE
        self.notifier.stopping = True
        self.notifier.tell(stopping_notice(why))
        with contextlib.suppress(OSError):
            self.to_warden({"cmd": "stop"})

    # ---- life ----
    def open_home(self):
        """Make the home, take its lock, end the groups an earlier avsmd left, open the ledger."""
        refuse(socket_problem(self.home), EX_CONFIG)
        refuse(written_problem(self.cfg) and f"{self.cfg_path}: {written_problem(self.cfg)}",
               EX_CONFIG)
        if os.path.lexists(os.path.join(self.home, MIRROR_MARK)):
            raise Fail(EX_CANTCREAT, f"{self.home} is a witness's copy of another host's ledger "
                                     "(avsm fleet witness --mirror): avsmd runs nothing of it and "
                                     "writes nothing to it, or the next witness run would find it "
                                     f"forked; read it with avsm --home {self.home} doctor, "
                                     "summary, why or chart, or give --home another directory")
        os.makedirs(self.home, mode=0o700, exist_ok=True)
        self.lock.take()
        swept = sweep_groups(os.path.join(self.home, "groups"), self.home)    # before anything else
        try:
            self.ledger = Ledger(os.path.join(self.home, "ledger.db"), still_ours=self.lock.ours)
            broken = ledger_problem(self.ledger.db, chain_anchor(self.home, self.ledger.db))
        except sqlite3_errors() as err:
            raise Fail(EX_DATAERR, f"{self.home}/ledger.db is not a ledger avsmd can open: {err};"
                                   f" nothing was written. See avsm --home {self.home} doctor") \
                from None
        if broken is not None:
            seq, why = broken
            refuse(f"record #{seq} of {self.home}/ledger.db does not read: {why}; nothing was"
                   f" appended. See avsm doctor, and avsm doctor --cut {seq} with avsmd stopped")
        return swept

    def run(self):
        """avsmd's life, in steps; return its exit status:
        1. open the home; take signals through a wakeup socket; bind HOME/sock;
        2. write the start records; start the roles and the warden;
        3. loop: serve, act on the signals, restart a child, check the lock and socket each second;
        4. once stopping, leave the loop when the warden has ended or its grace is over."""
        import selectors
        import socket
        swept = self.open_home()                                                     # 1
        wake_r, wake_w = socket.socketpair()
        for end in (wake_r, wake_w):
            end.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda signum, frame: self.signals.append(signum))
        self.sel.register(wake_r, selectors.EVENT_READ, lambda: receive(wake_r, 512))
        self.clients.bind()
        pid = os.getpid()
        self.append_self("start", f"avsmd {VERSION} started (pid {pid}) on {self.home}",  # 2
                         pid=pid)
        if swept:
            self.append_self("sweep",
                             f"ended {swept} process group(s) an earlier avsmd left running",
                             groups=swept)
        cut_marker = os.path.join(self.home, "cut")
        if os.path.exists(cut_marker):
            with open(cut_marker) as fh:
                seq, _, backup = fh.read().strip().partition(" ")
            if self.append_self("cut", f"the ledger was cut just before #{seq} by avsm doctor; the"
                                       f" whole ledger before it is {backup}",
                                before=int(seq) if seq.isdigit() else None, backup=backup):
                os.unlink(cut_marker)
        self.start_roles()
        self.start_warden()
        print(f"avsmd: serving {self.home} (pid {pid})", file=sys.stderr, flush=True)
        next_check = time.monotonic() + 1
        while True:                                                                  # 3
            now = time.monotonic()
            # stopping: the warden looked at 10 times a second (next_check no longer moves)
            timeout = 0.1 if self.stopping else max(0.0, next_check - now)
            if self.notifier.running or self.notifier.queue:
                timeout = min(timeout, 0.05)
            for key, _ in self.sel.select(timeout):
                # a call before it in this batch may have closed its file (the roles ended)
                if self.sel.get_map().get(key.fd) is key:
                    key.data()          # the call it was registered with
            for signum in self.signals:
                if signum == signal.SIGHUP:
                    sys.stderr.write("avsmd: SIGHUP ignored: config.yaml is read once, at start;"
                                     " restart avsmd to apply changes\n")
                else:
                    log(self.debug, "avsmd", f"signal {signum}: stopping")
                    self.begin_stop(signal.Signals(signum).name)
            self.signals = []
            self.notifier.poll()
            if self.warden.pidfd is None:     # no pidfd to wake the loop: poll
                self.ended(self.warden)
            now = time.monotonic()
            for kept, start in ((self.warden, self.start_warden), (self.roles, self.start_roles)):
                if kept.restart_at is not None and now >= kept.restart_at and not self.stopping:
                    kept.restart_at = None
                    start()
            if now >= next_check and not self.stopping:
                taken = self.lock.check(self.debug)
                if self.lock.lost:
                    sys.stderr.write(f"avsmd: another avsmd (pid {taken}) took the lock of"
                                     f" {self.home}; stopping without appending anything more\n")
                    self.exit_code = EX_TEMPFAIL
                    self.begin_stop(f"another avsmd (pid {taken}) took the lock of its home")
                else:
                    self.clients.check()
                next_check = now + 1
            if self.stopping and (self.warden.proc.poll() is not None
                                  or now >= self.stop_deadline + WARDEN_LATE):   # 4
                break
        return self.finish()

    def finish(self):
        self.warden.proc.kill()
        self.warden.proc.wait()
        if self.roles.chan is not None:
            self.roles.chan.close()          # the roles process ends at the end of its channel
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(self.roles.pid, 15)
                os.waitpid(self.roles.pid, 0)
        self.from_warden()
        self.end_groups()
        self.clients.close(remove=False)
        # the stop's notice told, and any failure written, before `stop`
        self.notifier.finish(self.stop_deadline)
        if not self.lock.lost:
            pid = os.getpid()
            last = self.append_self("stop", f"avsmd stopped (pid {pid})", pid=pid)
            sys.stderr.write(f"avsmd: stopped {self.home} (pid {pid})"
                             + (f"; its ledger ends at #{last}\n" if last else "\n"))
            self.clients.close(remove=True)
        self.ledger.close()
        return self.exit_code


def run_roles(channel):
    """The roles process: request texts built from packets, replies parsed into choices."""
    import base64
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    channel.setblocking(True)
    reader = LineReader(64 * 1024 * 1024)
    while True:
        data = channel.recv(1 << 20)
        if not data:
            return EX_OK
        for message in reader.feed(data):
            try:
                if message.get("op") == "build":
                    system, user = build_request(message["packet"])
                    answer = {"system": system, "user": user}
                else:
                    answer = parse_reply(base64.b64decode(message.get("data", "")),
                                         message["packet"])
            except Exception as err:    # a process boundary: the warden hears of it
                answer = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
            answer["rid"] = message.get("rid")
            send_line(channel, answer)


# =============================================================================
# 13. Client commands
# One function per `avsm` verb. They talk to avsmd over `sock`, or read the
# ledger read-only; only main() exits.
# =============================================================================

HOME_USAGE = ("--home DIR, else $AVSMD_HOME, else ~/.local/state/avsmd (macOS: ~/Library/"
              "Application Support/avsmd).")

CLIENT_USAGE = f"""usage: avsm [--home DIR | --host [USER@]HOST[:HOME]] COMMAND [ARGS]

commands:
  add DIR            adopt the venture in DIR under DIR/mandate.yaml (again after an edit)
  status [-v] [VENTURE]
                     one line per venture: state, last trusted value and its age, a sparkline of the
                     last trusted reports, lever runs against caps, open asks, and what holds it;
                     VENTURE or -v: the detail (last report, controller, guards, levers, asks, run)
  summary [--since DURATION|SEQ]
                     what happened, per venture, in the last 24h (or DURATION, such as 7d, or after
                     record SEQ), from the ledger alone: levers run, refusals, asks, guards, \
effects,
                     restarts, the metric, and what needs a person now
  tail [N|-N] [-f]   the last N records (10), following while output is a terminal or with -f
  tail --since SEQ   every record after SEQ, then exit (for scripts)
  asks               the open asks, with any proposed content under its question
  approve ASK [--edit]
                     approve ask ASK: its lever runs through the gate (--edit: with what you save
                     in $VISUAL, $EDITOR or vi, in a terminal)
  deny ASK           deny ask ASK
  propose VENTURE LEVER [--payload FILE|-]
                     file a proposal of your own; the gate judges it at once
  decide VENTURE     run the venture's model decision now (it grants nothing)
  pause VENTURE      stop a venture and everything it runs, until resumed
  resume VENTURE     start a paused venture again
  why SEQ            print record SEQ and, for an action, its proof and whether it re-checks
  chart VENTURE [--since DURATION|SEQ]
                     an SVG of the venture's metric over time, its bound or band, lever runs and \
asks
                     (avsm chart V > v.svg; from the ledger, so avsmd may be stopped)
  doctor [--since SEQ:HASH] [--checkpoint FILE|DIR|- [--allowed-signers FILE]] [--quick]
                     check the home, config, ledger, mandates and daemon; change nothing; print \
the head;
                     --since, --checkpoint: it still holds those (--origin avsm/HOST:HOME: theirs
                     too, a home that moved); --quick: only from a verified checkpoint on
  doctor --cut SEQ   with avsmd stopped: back up the ledger, then cut it just before #SEQ
  checkpoint         print a checkpoint of the ledger's head (written by avsmd into \
HOME/checkpoints,
                     signed when config.yaml names a key): keep it elsewhere
  rotate             close ledger.db into HOME/ledgers/FIRST-LAST.db (read-only, named by its
                     seqs) and go on in a new one chained to it (config.yaml's ledger: does it too)
  try DIR            run avsmd with DIR adopted, following the ledger until Ctrl-C, on a temporary \
home
                     (or on the --home given); its first lines say how to answer its asks from \
elsewhere
  page -o FILE       write this home's page: one HTML file of what needs a person, then each venture
  link DIR           write DIR/avsm and DIR/avsmd: this avsm.py, started from cached bytecode (fast)
  fleet [--fleet FILE] status|asks|summary
                     that view of every host in the fleet file (~/.config/avsm/fleet.yaml), the \
hosts
                     asked at once over ssh; an ask shows as HOST:SEQ (avsm --host HOST approve SEQ)
  fleet [--fleet FILE] page -o FILE
                     the page of every host in the fleet file
  fleet [--fleet FILE] witness [--keep DIR] [--mirror] [--allowed-signers FILE]
                     check each host's ledger here against the checkpoint kept for it in DIR/HOST
                     (~/.local/state/avsm/witness); --mirror: and keep a copy, DIR/HOST/ledger.db
  bridge [--read-only]
                     the forced command of an ssh key, serving avsm --host from elsewhere
                     (--read-only: status, summary, tail, asks, why, chart, doctor, page;
                     nothing that writes)

The client talks to avsmd, the daemon, over HOME/sock: start one with `avsmd` (or `python3 avsm.py \
avsmd`);
avsmd --help lists its options, and `avsm CMD --help` says one command.
{HOME_USAGE}
--host runs the command on that host's avsm through ssh ($AVSM_SSH) and its bridge ($AVSM_BRIDGE).
--json: status, asks, summary, tail, why, doctor, checkpoint and fleet print JSON (README: --json).
avsm --version prints the version.
Exit codes: 64 usage, 65 refused, 66 not there, 69 no avsmd answering, 73 a directory link cannot \
write,
74 output not writable, 75 not now (the ledger cannot be written yet; doctor --cut while avsmd \
runs);
over ssh also 68 a host not reached or silent past its timeout, 69 no avsm there, 77 a key refused;
doctor also 73 a home that is no directory, 77 a permission missing, 78 a config or mandate that \
does not hold;
either program exits 78 at once on a Python older than 3.11."""

DAEMON_USAGE = f"""usage: avsmd [--home DIR] [-f CONFIG] [-d] [-t [DIR...] | -T]

  (no option)  run in the foreground, serving HOME/sock
  -t           test the config and every adopted mandate; say what each allows,
               and where a mandate.yaml on disk differs from the mandate in force
  -t DIR...    check each venture directory as avsm add would (no daemon needed)
  -T           print the config in force
  -f FILE      read FILE as the config in place of HOME/config.yaml
  -d           verbose diagnostics on standard error

{HOME_USAGE}
Exit codes: 64 usage, 65 a venture (-t DIR) or a ledger that does not read, 66 a directory that is \
not there,
73 a home that is no directory or cannot be written, 75 another avsmd runs on the home, 78 a \
config or mandate
that does not hold, or a Python older than 3.11 (one line names the version and the interpreter)."""


def flush_out(text=None):
    """Write `text` to standard output, else flush it; OutputError when it cannot be written."""
    if sys.stdout is None:
        raise OutputError(9, "standard output is closed")
    try:
        if text is None:
            sys.stdout.flush()
        else:
            try:
                sys.stdout.write(text)
            except UnicodeEncodeError:
                # an ASCII or Latin-1 terminal: what it cannot show is written as \u escapes
                encoding = sys.stdout.encoding or "ascii"
                sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))
    except BrokenPipeError:
        raise
    except OSError as err:
        raise OutputError(
            err.errno or 9, err.strerror or "standard output cannot be written") from None


def out(*lines):
    """Write lines of records to standard output (an empty line when given none)."""
    flush_out("".join(shown(line) + "\n" for line in lines or ("",)))


class OutputError(OSError):
    """Standard output cannot be written (closed, a full device): exit 74."""


def ask_daemon(home, cmd, args=None):
    """Send one request to avsmd (or a host's bridge) and relay its answer; return its exit code."""
    request = {"v": 1, "cmd": cmd, "args": args or {}}
    if CALLER.get().via:
        return ask_bridge(CALLER.get().via, request)
    with send_request(home, request) as conn:
        # a decision may wait on a backend (120 s, escalation twice that); all else answers at once
        conn.settimeout(3 * BACKEND_TIMEOUT if cmd == "decide" else 60)
        try:
            for message in daemon_answer(conn):
                code = show_answer(message, cmd, home)
                if code is not None:
                    return code
        except TimeoutError:
            raise Fail(EX_UNAVAILABLE, "avsmd took the request but gave no answer in time; see "
                                       "avsm doctor") from None


def daemon_answer(conn):
    """Yield each message avsmd answers on `conn`; Fail(69) when it ends the connection first."""
    reader = LineReader()
    while True:
        data = conn.recv(65536)
        if not data:
            raise Fail(EX_UNAVAILABLE,
                       "avsmd ended the connection before answering; see avsm doctor")
        yield from reader.feed(data)


def show_answer(message, cmd, home):
    """Print one line of avsmd's answer; return its exit code when it is the last."""
    if "out" in message and JSON:
        JSON.update(json.loads(message["out"]))     # status, asks: their facts, one line
    elif "out" in message:
        out(message["out"] if cmd in ("status", "asks") else as_user_runs(message["out"], home))
    elif "err" in message:
        said = as_user_runs(str(message["err"]), home)
        sys.stderr.write(f"avsm: {shown(said)}\n")
        if JSON:
            JSON["error"] = "; ".join(filter(None, (JSON.get("error"), said)))
    return message.get("exit")


def send_request(home, message):
    """Return a socket to avsmd with `message` sent, or Fail: 64 past REQUEST_MAX (avsmd would
    refuse it half sent; the client would hear only a broken pipe), 69 saying why none answers."""
    import socket
    data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
    if len(data) > REQUEST_MAX:
        raise Fail(EX_USAGE, f"this {message['cmd']} request is {len(data) / 2**20:.1f} MiB, and "
                             "avsmd reads one JSON object a line, in UTF-8, of at most 1 MiB: send"
                             " less (a smaller payload, a shorter name)")
    path = os.path.join(home, "sock")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as err:
        conn.close()
        start = program_command("avsmd", home)
        if isinstance(err, ConnectionRefusedError):
            why = f"no avsmd is running on {home} (its socket was left behind); start it with " \
                f"{start}"
        elif not isinstance(err, FileNotFoundError):
            refuse(socket_problem(home), EX_CONFIG)
            why = f"cannot reach avsmd at {path}: {err.strerror}"
        elif os.path.exists(home) and not os.path.isdir(home):
            why = f"no avsmd is answering: {home} is a file, not a home directory"
        elif not os.path.isdir(home):
            why = f"no avsmd is answering: {home} does not exist; start one with {start}"
        elif lock_holder(home):
            why = (f"avsmd (pid {lock_holder(home)}) is running on {home} but its socket is "
                   "missing; it makes it again within a second: try again, or run avsm doctor")
        else:
            why = f"no avsmd is running on {home}; start it with {start}"
        raise Fail(EX_UNAVAILABLE, why) from None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        send_bytes(conn, data)      # cut short: avsmd refused it half read; its answer says why
    return conn


def as_user_runs(line, home):
    """Return avsmd's answer line with each `avsm VERB` fix named as this user runs the client."""
    command = client_command(home)
    if os.path.basename(command.split()[0]) == "avsm":
        # the user types avsm (on the PATH, or a symlink of that name)
        return line
    return re.sub(r"\bavsm (?=(add|status|summary|tail|asks|approve|deny|propose|decide|pause|"
                  r"resume|why|doctor|try)\b)", lambda _: command + " ", line)


def lock_holder(home):
    """Return the pid of the avsmd holding the home's lock, or None when none holds it."""
    path = os.path.join(home, "avsmd.lock")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)     # a FIFO's open would wait
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except OSError:
        return read_lock_pid(path) or -1
    finally:
        os.close(fd)


def resolve_home(given):
    """Return the home: --home, else $AVSMD_HOME, else the platform default (open point 13):
    XDG_STATE_HOME/avsmd, ~/.local/state/avsmd or macOS's."""
    home = given or os.environ.get("AVSMD_HOME")
    if not home and sys.platform == "darwin":
        home = "~/Library/Application Support/avsmd"
    state = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return os.path.abspath(os.path.expanduser(home or os.path.join(state, "avsmd")))


def program_command(program, home=None):
    """`avsm` or `avsmd` the way this user runs it, for the fix lines a person copies, with
    `--home HOME` when `home` is not the one the program finds by itself."""
    import shutil
    started = sys.argv[0] if sys.argv else ""
    folder, name = os.path.split(started)
    beside = os.path.join(folder, program)
    on_path, command = shutil.which(program), None
    if name.split(".")[0] in ("avsm", "avsmd") and not name.endswith(".py"):
        if folder and os.path.exists(beside) and not (
                on_path and os.path.realpath(on_path) == os.path.realpath(beside)):
            command = beside
        elif on_path:
            command = program
    if not command:
        python = sys.executable or "python3"
        found = shutil.which("python3")
        if found and os.path.realpath(found) == os.path.realpath(python):
            python = "python3"
        script = started if name.endswith(".py") and os.path.exists(started) else AVSM_PATH
        command = f"{python} {script}" + (" avsmd" if program == "avsmd" else "")
    if home is not None and os.path.realpath(home) != os.path.realpath(resolve_home(None)):
        command += f" --home {home}"
    return command


def ledger_path(home):
    """Return the ledger's path, or Fail: 73 a home no directory, 66 no ledger, 65 no file."""
    refuse(os.path.exists(home) and not os.path.isdir(home)
           and f"{home} is not a directory, so it holds no ledger; move it aside or pass another"
               " --home", EX_CANTCREAT)
    start = f"start {program_command('avsmd', home)} to make it"
    refuse(not os.path.isdir(home) and f"{home} does not exist; {start}", EX_NOINPUT)
    path = os.path.join(home, "ledger.db")
    refuse(not os.path.exists(path) and f"{home} has no ledger yet; {start}", EX_NOINPUT)
    if not os.path.isfile(path):        # a FIFO's open would wait for ever
        what = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
                stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(os.stat(path).st_mode), "a device")
        refuse(f"{path} is {what}, not a ledger; move it aside (avsmd then starts a new ledger), "
               f"and {client_command(home)} doctor says more")
    return path


def decode_record(text, fullmatch=None, seq=None, checked=False):
    """Return the record stored as `text`: a trusted report by TRUSTED_REPORT, else json.loads
    (refused as read_record refuses). fullmatch: TRUSTED_REPORT's, compiled once by the caller."""
    slow = read_record if checked else load_record
    m = isinstance(text, str) and (fullmatch or re.compile(TRUSTED_REPORT).fullmatch)(text)
    if not m:                       # bytes too: slow says they do not read
        return slow(text, seq)
    try:
        value = int(m[2]) if m[2].lstrip("-").isdigit() else float(m[2])
    except ValueError:
        # no number JSON reads (a hand-edited `"value":1-2`): say so as json would
        return slow(text, seq)
    return {"kind": "report", "claim": "measured", "venture": m[3], "metric": m[1],
            "note": "", "plausible": True, "status": "trusted", "value": value}


def need_int(text, what):
    """Return a record number given on the command line (#17 or 17), or Fail(64)."""
    t = text.lstrip("#")
    refuse(not re.fullmatch("[0-9]+", t)
           and f"'{text}' is not {what}; write a record number such as 17", EX_USAGE)
    refuse(int(t) > SEQ_MAX
           and f"#{t} is past any record the ledger can hold; avsm tail shows the last")
    return int(t)


SEQ_MAX = 2 ** 63 - 1               # SQLite's largest integer: no record is numbered past it


def since_option(arg, rest, missing):
    """The X of `--since X` (from `rest`) or `--since=X`, else None; Fail(64, `missing`)."""
    if arg == "--since":
        return rest.pop(0) if rest else refuse(missing, EX_USAGE)
    return arg.split("=", 1)[1] if arg.startswith("--since=") else None


# --json (issue 35): the verb's facts main prints with the exit code; empty: text
JSON = {}
JSON_VERBS = ("status", "asks", "summary", "tail", "why", "doctor", "checkpoint")


def take_json(args):
    """Return `args` (VERB ...) without --json before any --; with it, turn JSON on, or Fail(64)."""
    end = args.index("--") if "--" in args else len(args)
    if "--json" in args[:end]:
        JSON["schema"] = 1
        args = [a for a in args[:end] if a != "--json"] + args[end:]
        if not set(args[1:2] if args[:1] == ["fleet"] else args[:1]) & set(JSON_VERBS):
            raise Fail(EX_USAGE, f"--json is for avsm {', '.join(JSON_VERBS)} and fleet "
                                 "status|asks|summary; avsm --help says what each does")
    return args


def show_facts(facts, lines_of):
    """Print a verb's facts: into the --json document, else as the text `lines_of` makes."""
    if JSON:
        JSON.update(facts)
    else:
        out(*lines_of(facts))


def exit_facts(facts, code):
    """Return `facts` with the exit code and its meaning: a --json document."""
    return dict(facts, exit=code, meaning=EXIT_MEANINGS.get(code, "failed"))


ANSWER_WORDS = {"approval": "approved", "denial": "denied", "resolved": "settled by avsm"}


def cmd_why(home, args):
    """why SEQ: the record, what it cites or its proof's steps and premises, whether the proof
    re-checks now, and what followed."""
    seq = need_int(args[0], "a record number")
    db = open_ledger_ro(ledger_path(home))
    at, record = record_at(db, seq) or refuse(
        f"#{seq} is not in the ledger; avsm tail shows the record numbers")
    facts = {"seq": seq, "at": at, "record": record}
    broken = object_problem(record)
    if broken:
        show_facts(facts, lambda f: [format_record_line(seq, at, record)])
        refuse(f"record #{seq} does not read: {broken}; avsm doctor says more, and avsm doctor"
               f" --cut {seq} with avsmd stopped cuts the ledger just before it")
    proof, facts["followed"] = record.get("proof"), what_followed(db, seq, record, home)
    if record["kind"] != "action" or not proof:
        cited = [record[k] for k in ("action", "ask", "report", "proposal", "prediction")
                 if isinstance(record.get(k), int)]
        facts["cites"] = [{"seq": c, "at": r[0], "record": r[1]}
                          for c in cited for r in [record_at(db, c)] if r]
    else:
        # a proof that reads is an object, its premises numbers; the fold the gate saw
        # (recheck_action): the newest good snapshot before it and the venture's records since
        since = snapshot_before(home, db, seq)
        records = {s: (a, decode_record(t, seq=s)) for s, a, t in ledger_rows(
            db, "SELECT seq, at, record FROM records WHERE "
            f"{RECORD_VENTURE_SQL} = ? AND seq > ? AND seq <= ? ORDER BY seq",
            (record["venture"], since[0], seq), since[0], seq)}
        premises = proof.get("premises", [])
        for p in premises:
            whole = record_at(db, p) if 0 < p <= seq else None
            if whole:
                records[p] = whole
        t = isinstance(proof.get("trigger"), int) and record_at(db, proof["trigger"])
        facts["proof"] = {
            "rule": proof.get("rule"),
            "steps": proof.get("steps") if isinstance(proof.get("steps"), list) else [],
            "trigger": {"seq": proof["trigger"], "record": t[1]} if t else None,
            "premises": [{"seq": p, "record": records.get(p, (0, None))[1]} for p in premises]}
        facts["problems"] = check_proof(seq, at, record, records, since=since)
        facts["rechecks"] = not facts["problems"]
    show_facts(facts, why_lines)
    return EX_DATAERR if facts.get("problems") else EX_OK


def why_lines(facts):
    record, proof = facts["record"], facts.get("proof")
    lines = [format_record_line(facts["seq"], facts["at"], record)]

    def cited(line, r, indent="    "):
        lines.append(line)
        if isinstance(r.get("call"), dict):
            lines.append(f"{indent}call: {describe_call(r)}")
    if not proof:
        cited(f"a {record.get('claim')} {record.get('kind')} record: it authorizes nothing and"
              " carries no proof", record, "  ")
        for c in facts["cites"]:
            cited("  cites " + format_record_line(c["seq"], c["at"], c["record"]), c["record"])
        if record["kind"] == "outcome":
            lines += printed_lines(record, "  ")
        return lines + facts["followed"]
    lines.append(f"rule: {shown_text(str(proof['rule']))}")
    lines += [f"  step: {shown_text(str(step))}" for step in proof["steps"]]
    t = proof["trigger"]
    if t:
        r = t["record"]
        cited(f"  trigger (not a premise): #{t['seq']} {r.get('claim')} {r.get('kind')}"
              f" {r.get('summary')}", r)
    for p in proof["premises"]:
        r = p["record"]
        lines.append(f"  premise #{p['seq']} {r.get('claim')} {r.get('kind')} {r.get('summary')}"
                     if r else f"  premise #{p['seq']} is not in the ledger")
    return lines + facts["followed"] + ([f"re-checks: no: {p}" for p in facts["problems"]] or [
        "re-checks: yes, from measured and declared records under the mandate in force"])


def records_citing(db, key, seq):
    """Yield (seq, at, record) after #seq whose field `key` is seq."""
    # canonical JSON is compact; the exact field is checked below
    for s, at, text in db.execute(
            "SELECT seq, at, record FROM records WHERE seq > ? AND record LIKE ? ORDER BY seq",
            (seq, f'%"{key}":{seq}%')):
        record = load_record(text, s)
        if record.get(key) == seq:
            yield s, at, record


def printed_lines(outcome, indent):
    """Return the lines saying what a lever printed, as its outcome keeps it."""
    note = str(outcome.get("note") or "")
    if not note:
        return [f"{indent}printed nothing"]
    head = f"{indent}printed" + (
        f" (the last {NOTE_MAX} characters):" if len(note) >= NOTE_MAX else ":")
    return [head] + [f"{indent}  {line}" for line in note.splitlines()]


def what_followed(db, seq, record, home):
    """Return the lines of what came of record #seq: an ask's answer, a run, an outcome."""
    lines = []

    def ended(action_seq, indent):
        outcomes = [
            o for o in records_citing(db, "action", action_seq) if o[2].get("kind") == "outcome"]
        for o_seq, o_at, outcome in outcomes:
            lines.append(f"{indent}ended " + format_record_line(o_seq, o_at, outcome))
            lines.extend(printed_lines(outcome, indent + "  "))
        if not outcomes:
            lines.append(
                f"{indent}no outcome yet: the lever is running, or avsmd stopped before it ended")

    def runs(key, number, indent):
        for a_seq, a_at, action in records_citing(db, key, number):
            if action.get("kind") == "action":
                lines.append(f"{indent}ran as " + format_record_line(a_seq, a_at, action))
                ended(a_seq, indent)

    kind = record["kind"]
    if kind == "ask":
        answers = [a
                   for a in records_citing(db, "ask", seq)
                   if a[2].get("kind") in ("refusal", *ANSWER_WORDS)]
        for a_seq, a_at, answer in answers:
            lines.append(("  settled by " if answer["kind"] == "resolved" else "  answered by ")
                         + format_record_line(a_seq, a_at, answer))
            if answer["kind"] == "approval":
                runs("approval", a_seq, "    ")
        if not any(a[2].get("kind") in ANSWER_WORDS for a in answers):
            lines.append(f"  not answered yet: {client_command(home)} approve {seq} "
                         f"or {client_command(home)} deny {seq}")
    elif kind == "approval":
        runs("approval", seq, "  ")
    elif kind == "action":
        ended(seq, "  ")
    return lines


def describe_call(record):
    """Return what a record keeps of the HTTP call its reply came in (for the provider's logs)."""
    call = record["call"]
    words = [f"{record.get('backend')}, request id {call.get('request_id') or 'not given'}"]
    usage = call.get("usage") or {}
    first = ("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens", "total_tokens")
    flat = sorted(((k, v) for k, v in usage.items() if not isinstance(v, dict)),
                  key=lambda kv: (first.index(kv[0]) if kv[0] in first else len(first), kv[0])) + [
        (f"{k}.{k2}", v2)
        for k, v in sorted(usage.items())
        if isinstance(v, dict)
        for k2, v2 in sorted(v.items())]
    words.append("usage " + ", ".join(f"{k} {v}" for k, v in flat) if flat else "no usage reported")
    if call.get("stop"):
        words.append(f"stop {call['stop']}")
    if call.get("tries", 1) > 1:
        words.append(f"{call['tries']} tries")
    return "; ".join(words)


def cmd_add(home, args):
    refuse((len(args) != 1 or not args[0]) and "usage: avsm add DIR", EX_USAGE)
    directory = os.path.realpath(args[0])
    # what the client can check itself comes first (65, 66), then the daemon (69)
    read_venture(directory)
    return ask_daemon(home, "add", {"dir": directory})


def cmd_simple(verb, argument):
    """Return the command `avsm VERB ASK` or `avsm VERB VENTURE`: its one argument, to avsmd."""
    return lambda home, args: ask_daemon(home, verb, {
        argument: need_int(args[0], "an ask") if argument == "ask" else args[0]})


def cmd_status(home, options, names):
    """status [-v] [VENTURE]: with avsmd stopped, what the ledger holds, and still exit 69."""
    verbose = False
    for arg in options:
        if arg in ("-v", "--verbose"):
            verbose = True
        elif arg.startswith("-") and arg != "-":
            raise Fail(
                EX_USAGE, f"avsm status takes no option '{arg}'; usage: avsm status [-v] [VENTURE]")
        else:
            names = [arg] + names
    refuse(len(names) > 1 and "usage: avsm status [-v] [VENTURE]: one venture at a time, or -v for"
                              " every one", EX_USAGE)
    args = {"verbose": verbose, "ascii": not utf8_output(), "json": bool(JSON)}
    if names:
        args["venture"] = names[0]
    return cmd_offline(home, "status", args)


def cmd_offline(home, verb, args):
    """Ask avsmd for `verb`; with no avsmd answering, print what the ledger holds; exit 69."""
    try:
        code = ask_daemon(home, verb, args)
    except Fail as fail:
        if fail.code == EX_UNAVAILABLE:
            show_ledger_view(home, verb, args)
        raise
    if code == EX_UNAVAILABLE:          # avsmd answered that it is stopping
        show_ledger_view(home, verb, args)
    return code


def show_ledger_view(home, verb, args):
    """With no avsmd answering, print the status or open asks the ledger holds, saying so first;
    return the page's facts it holds."""
    path = os.path.join(home, "ledger.db")
    if not os.path.isfile(path):
        return None
    try:
        with contextlib.closing(open_ledger_ro(path)) as db:
            seq, states = Snapshots(home).fold(db)[:2]
            at = (record_at(db, seq) or (0,))[0]
            if verb == "page":
                return page_facts(home, states, time.time(), db, stopped=True)
    except (sqlite3_errors(), ValueError, KeyError, TypeError, Fail) as err:
        # not readable either: say so, keep the 69
        sys.stderr.write(f"avsm: and the ledger cannot be read for its {verb}: {shown(str(err))};"
                         " avsm doctor says more\n")
        return None
    if not any(s.mandate_seq for s in states.values()):
        return None
    facts = asks_facts(states) if verb == "asks" else \
        status_facts(states, time.time(), None, None, args.get("venture"), args["verbose"],
                     args["ascii"], stopped=True)
    if JSON:
        JSON.update(facts, ledger={"seq": seq, "at": at})
        return None
    try:
        out(f"avsmd is not running: nothing runs; this is what the ledger holds, to #{seq} at"
            f" {format_local_time(at)}",
            *(asks_lines if verb == "asks" else status_lines)(facts))
        flush_out()
    except BrokenPipeError:
        # the reader went away (status | head -1): the 69 still says no avsmd answers
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def utf8_output():
    """Whether standard output takes UTF-8: its encoding, and the locale LC_ALL, LC_CTYPE or LANG
    names (the C.UTF-8 Python puts in LC_CTYPE for a C locale, PEP 538, is read as C)."""
    if CALLER.get().utf8 is not None:
        return CALLER.get().utf8        # the bridge writes for a terminal at the other end of ssh
    encoding = getattr(sys.stdout, "encoding", None) or ""
    if encoding.lower().replace("-", "").replace("_", "") != "utf8":
        return False
    lc_all, lc_ctype, lang = (os.environ.get(k) or None for k in ("LC_ALL", "LC_CTYPE", "LANG"))
    if lc_all is None and lc_ctype == "C.UTF-8" and lang in (None, "C", "POSIX"):
        lc_ctype = None
    return "utf8" in (lc_all or lc_ctype or lang or "C").lower().replace("-", "")


def cmd_propose(home, args):
    """propose VENTURE LEVER [--payload FILE|-]: a proposal the gate judges (65 when it refuses)."""
    rest, payload = list(args), None
    if "--payload" in rest:
        at = rest.index("--payload")
        refuse(at + 1 >= len(rest) and "--payload needs a file, or - for standard input", EX_USAGE)
        payload = read_payload(rest[at + 1])
        del rest[at:at + 2]
    refuse(len(rest) != 2 and "usage: avsm propose VENTURE LEVER [--payload FILE|-]", EX_USAGE)
    return ask_daemon(home, "propose", {"venture": rest[0], "lever": rest[1], "payload": payload})


def read_payload(source):
    """Return the text of a payload file, or of standard input for -; Fail(66) when unreadable."""
    try:
        if source == "-":
            return (CALLER.get().stdin or sys.stdin).read()
        with open(source, encoding="utf-8") as fh:
            return fh.read()
    except OSError as err:
        raise Fail(EX_NOINPUT, f"{source} cannot be read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise Fail(EX_DATAERR, f"{source} is not UTF-8 text; a payload is text") from None


def cmd_checkpoint(home, args):
    """checkpoint: print a checkpoint avsmd writes now; with avsmd stopped, the newest it wrote."""
    try:
        return ask_daemon(home, "checkpoint", {"json": bool(JSON)})
    except Fail as fail:
        newest, why = newest_checkpoint(os.path.join(home, "checkpoints")), str(fail)
        if fail.code != EX_UNAVAILABLE or not newest:
            raise
    why += "; this is the newest checkpoint it wrote"
    sys.stderr.write(f"avsm: {why}\n")
    show_facts(dict(newest._asdict(), error=why), checkpoint_lines)
    return EX_OK


def checkpoint_lines(facts):
    """Return the lines of a checkpoint: its text, then any signature after a blank line."""
    return facts["text"].rstrip("\n").split("\n") + (
        ["", *facts["signature"].split("\n")] if facts["signature"] else [])


def cmd_approve(home, args):
    """approve ASK [--edit]: with --edit, what you save in the editor runs."""
    rest = [a for a in args if a != "--edit"]
    refuse(len(rest) != 1 and "usage: avsm approve ASK [--edit]", EX_USAGE)
    ask = need_int(rest[0], "an ask")
    if "--edit" not in args:
        return ask_daemon(home, "approve", {"ask": ask})
    refuse(not (sys.stdin.isatty() and sys.stdout.isatty())
           and "approve --edit opens an editor and needs a terminal; run it in one, or approve"
               " without --edit", EX_USAGE)
    import subprocess
    with contextlib.redirect_stdout(io.StringIO()) as asked:    # the content the open ask carries
        code = ask_daemon(home, "ask", {"ask": ask})
    refuse(code != EX_OK and f"#{ask} is not an open ask with content", code)
    payload = json.loads(asked.getvalue())
    text = payload if isinstance(payload, str) else json.dumps(payload, indent=2) + "\n"
    path = write_payload(text.encode(), f"avsm-ask-{ask}-")
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    kept_open = f"nothing approved, ask #{ask} stays open"
    try:
        if subprocess.call(["/bin/sh", "-c", f'{editor} "$1"', "editor", path]) != 0:
            refuse(f"the editor ({editor}) failed; {kept_open}")
        with open(path, encoding="utf-8") as fh:
            edited = fh.read()
    finally:
        os.unlink(path)
    if not edited.strip():
        refuse(f"the content was emptied: nothing approved; ask #{ask} stays open")
    if not isinstance(payload, str):
        try:
            edited = read_json(edited)
        except (ValueError, RecursionError) as err:
            raise Fail(EX_DATAERR, f"what you saved is not JSON ({err}); {kept_open}") from None
    if edited == payload:       # what you save runs: an editor quit without saving saved nothing
        refuse(f"the content was left as it was (the editor quit without saving?): {kept_open};"
               f" to approve it as proposed: {client_command(home)} approve {ask}")
    return ask_daemon(home, "approve", {"ask": ask, "payload": edited})


def cmd_tail(home, args):
    """tail [N] [-f] | tail --since SEQ: records one per line, straight from the ledger."""
    since, count, follow, rest = None, 10, None, list(args)
    while rest:
        arg = rest.pop(0)
        value = since_option(arg, rest, "usage: avsm tail --since SEQ")
        if value is not None:
            since = need_int(value, "a record number")
        elif arg in ("-f", "--follow"):
            follow = True
        elif arg == "-n" and rest and re.fullmatch("[0-9]+", rest[0]):
            count = int(rest.pop(0))
        elif re.fullmatch("-?[0-9]+", arg):
            count = abs(int(arg))           # tail -5, as Unix tail: the last five
        else:
            raise Fail(EX_USAGE,
                       f"avsm tail does not take '{arg}'; usage: avsm tail [N] [-f] | avsm tail"
                       " --since SEQ")
    if count < 1:
        refuse("there is no record before #1; give avsm tail a count of at least 1")
    path = ledger_path(home)
    db = open_ledger_ro(path)
    if since is None:
        since = max(0, last_seq(db) - count)
        if follow is None:
            follow = CALLER.get().tty
        if follow is None:
            follow = sys.stdout is not None and sys.stdout.isatty()
    while True:
        for seq, at, record in read_records(db, since):
            out(json.dumps({"schema": 1, "seq": seq, "at": at, "record": record}) if JSON
                else format_record_line(seq, at, record))
            since = seq
        flush_out()
        if not follow:
            return EX_OK
        time.sleep(0.5)
        db.close()
        db = open_ledger_ro(path)       # avsm rotate puts a new ledger.db in its place


def cmd_summary(home, args):
    """summary [--since DURATION|SEQ]: what happened per venture, from the ledger alone."""
    since_text, rest = "24h", list(args)
    while rest:
        arg = rest.pop(0)
        since_text = since_option(arg, rest, "avsm summary --since needs a duration or a record "
                                  "number, such as 24h, 7d or 1200")
        if since_text is None:
            raise Fail(EX_USAGE, f"avsm summary does not take '{arg}'; usage: avsm summary [--since"
                                 " DURATION|SEQ], such as --since 24h, --since 7d or --since 1200")
    # bad usage (64) is found before the ledger (66)
    since, seconds = since_arg(since_text, "summary")
    span = f"the last {since_text.strip()}" if seconds else f"the records after #{since}"
    db = open_ledger_ro(ledger_path(home))
    top = last_seq(db)
    if seconds is not None:
        since = first_seq_at(db, time.time() - seconds, top) - 1
    elif since > top:
        refuse(f"#{since} is past the last record (#{top}); avsm summary --since {top} is the"
               " empty span")
    summary = summarize(summary_rows(db, since), since)
    db.close()
    show_facts(summary_facts(summary, span, home), format_summary)
    return EX_OK


def summary_rows(db, since):
    """Yield the rows summarize needs, in order: before the span only SUMMARY_BEFORE_KINDS and the
    whole history of a venture whose mandate expects effects; then every record of the span."""
    folded = set()
    for seq, text in ledger_rows(
        db, f"SELECT seq, record FROM records WHERE {RECORD_KIND_SQL} = 'mandate'"):
        record = read_record(text, seq)
        if record["kind"] == "mandate" and expects_effects(
            parsed_or_none(parse_mandate, record, 0)):
            folded.add(record["venture"])
    kinds, names = ", ".join("?" * len(SUMMARY_BEFORE_KINDS)), ", ".join("?" * len(folded))
    clause = f"{RECORD_KIND_SQL} IN ({kinds})"
    if folded:
        clause += f" OR {RECORD_VENTURE_SQL} IN ({names})"
    for seq, at, text in ledger_rows(
        db, f"SELECT seq, at, record FROM records WHERE seq <= ? AND ({clause}) ORDER BY seq",
        [since, *SUMMARY_BEFORE_KINDS, *sorted(folded)], upto=since):
        yield seq, at, read_record(text, seq)
    fullmatch = re.compile(TRUSTED_REPORT).fullmatch
    for seq, at, text in ledger_rows(
        db, "SELECT seq, at, record FROM records WHERE seq > ? ORDER BY seq", (since,), since):
        yield seq, at, decode_record(text, fullmatch, seq, checked=True)


# A trusted report as the warden writes it, in canonical JSON: most of a ledger, decoded here
# several times faster than by json.loads. Only that whole shape with no escape in its strings
# matches; any other text goes to json.loads. summary is left out: nothing that summarizes reads it.
TRUSTED_REPORT = (
    r'\{"claim":"measured","kind":"report","metric":"([^"\\]*)","note":"","plausible":true,'
    r'"status":"trusted","summary":"[^"\\]*","value":(-?[0-9][0-9.eE+-]*),'
    r'"venture":"([A-Za-z0-9_.-]+)"\}')


def seq_list(seqs, most=8):
    """Return record numbers as #1, #2 ..., the first `most` of them and how many more."""
    return ", ".join(f"#{s}" for s in seqs[:most]) + (
        f" and {len(seqs) - most} more" if len(seqs) > most else "")


def summary_facts(summary, span, home):
    """Return the facts of `avsm summary`: the span, whether avsmd runs, each adopted venture's."""
    holder, ventures = lock_holder(home), []
    for name, v in sorted(summary.ventures.items()):
        t = v["trusted"]
        if v["mandate"]:        # a venture never adopted (a refused add) is left out
            ventures.append(dict(
                v, name=name, mandate=v["mandate"][0], open=sorted(v["open"]),
                trusted={"count": len(t), "first": t[0], "last": t[-1], "min": min(t),
                         "max": max(t)} if t else None,
                refusals=sorted(v["refusals"].values(), key=lambda g: -g["count"]),
                needs=[(what, as_user_runs(command, home)) for what, command in
                       needs_person(v, name)]))
    first, last = ({"seq": p[0], "at": p[1]} if p else None for p in (summary.first, summary.last))
    return {"span": span, "first": first, "last": last,
            "avsmd": {"running": bool(holder), "pid": holder if holder and holder > 0 else None,
                      "start": None if holder else program_command("avsmd", home)},
            "ventures": ventures}


def format_summary(facts):
    first, last, avsmd = facts["first"], facts["last"], facts["avsmd"]
    lines = [f"summary of {facts['span']}: " + (
        f"#{first['seq']}..#{last['seq']}, {format_local_time(first['at'])} to "
        f"{format_local_time(last['at'])}" if first else "no records")]
    lines.append(f"avsmd: running (pid {avsmd['pid']})" if avsmd["pid"] else "avsmd: running"
                 if avsmd["running"] else "avsmd: not running; nothing runs until "
                                          f"{avsmd['start']} starts it")
    for v in facts["ventures"]:
        lines += [""] + venture_summary_lines(v)
    return lines if facts["ventures"] else lines + ["no ventures yet; adopt one with avsm add DIR"]


def venture_summary_lines(v):
    """Return one venture's paragraph of the summary, from its facts."""
    lines = [v["name"] + ("" if v["records"] else ": nothing recorded in this span")]
    if v["trusted"]:
        t = {k: format_number(n) for k, n in v["trusted"].items()}
        lines.append(
            f"  metric {v['metric']}: {t['count']} trusted report(s): first {t['first']}, last"
            f" {t['last']}, min {t['min']}, max {t['max']}"
            + (f"; {v['untrusted']} not trusted" if v["untrusted"] else ""))
    elif v["untrusted"]:
        lines.append(f"  metric {v['metric']}: no trusted report; {v['untrusted']} not trusted")
    for lever, runs in sorted(v["levers"].items()):
        pending = [s for s in runs["runs"] if s not in runs["ok"] and s not in runs["failed"]]
        words = [f"{len(runs['ok'])} ok"] + [
            f"{len(seqs)} {what} ({seq_list(seqs)})"
            for seqs, what in ((runs["failed"], "failed"), (pending, "with no outcome yet"))
            if seqs]
        lines.append(f"  lever {lever}: ran {len(runs['runs'])} time(s), {', '.join(words)}:"
                     f" {seq_list(runs['runs'])}")
    if v["refusals"]:
        lines.append(f"  refusals: {sum(g['count'] for g in v['refusals'])}, by reason:")
        for group in v["refusals"]:
            lines.append(f"    {group['count']} x {group['lever']}: {group['why']}"
                         f" ({seq_list(group['seqs'], 4)})")
    if v["raised"] or v["answered"] or v["open"]:
        answered = [f"{len(asks)} {ANSWER_WORDS[kind]} ({seq_list(asks)})" for kind in ANSWER_WORDS
                    for asks in [[ask for ask, k, _ in v["answered"] if k == kind]] if asks]
        lines.append(f"  asks: {len(v['raised'])} raised"
                     + (f" ({seq_list(v['raised'])})" if v["raised"] else "")
                     + f", {len(v['answered'])} answered"
                     + (f": {', '.join(answered)}" if answered else "")
                     + f", {len(v['open'])} still open")
    for guard, g in sorted(v["guards"].items()):
        lines.append(
            f"  guard {guard}: {g['readings']} reading(s), {len(g['episodes'])} episode(s) past its"
            " bound"
            + (f" ({seq_list(g['episodes'])})" if g["episodes"] else "")
            + (f", paused it ({seq_list(g['paused'])})" if g["paused"] else ""))
    person_pauses = [s for s, guard in v["pauses"] if not guard]
    if person_pauses or v["resumes"]:
        lines.append(
            f"  paused by a person {len(person_pauses)} time(s), resumed {len(v['resumes'])}"
            " time(s)")
    if v["effects"]:
        lines.append("  effects judged: "
                     + ", ".join(f"{len(seqs)} {verdict} ({seq_list(seqs, 4)})"
                                 for verdict, seqs in sorted(v["effects"].items())))
    if v["exits"]:
        restarts = [s for s, again, _ in v["exits"] if again]
        lines.append(f"  run: ended {len(v['exits'])} time(s), restarted {len(restarts)}"
                     + (f" ({seq_list(restarts)})" if restarts else "")
                     + f"; last ended {v['exits'][-1][2]}")
    return lines + ([f"  needs a person: {what} -> {command}" for what, command in v["needs"]]
                    or ["  needs a person: nothing"])


# =============================================================================
# 14. Other hosts, over OpenSSH: the bridge, avsm --host, avsm fleet, the witness
# =============================================================================
# avsm listens on nothing but its socket (DESIGN: no listener): `avsm --host H VERB` runs VERB
# through ssh and the bridge there, which an ssh key names as its forced command.

# Whom avsm runs for, set at most once a run (main gives each its context); None: the person here
Caller = collections.namedtuple("Caller", "via command tty utf8 read_only stdin",
                                defaults=(None,) * 6)
import contextvars     # noqa: E402 (here, past the version check: Python 3.6 has none)
CALLER = contextvars.ContextVar("caller", default=Caller())
SSH_FAILURES = (
    ("Could not resolve hostname", EX_NOHOST, "check its name, or its Host entry in ~/.ssh/config"),
    ("Permission denied", EX_NOPERM, "the key was refused: put your public key in the host's "
     "authorized_keys, as the README's Many hosts shows"),
    ("timed out", EX_NOHOST, "it said nothing within its timeout: the host or its sshd hangs; "
     "`ssh HOST true` tries by hand"),
    ("Host key verification failed", EX_NOPERM,
     "its host key is not the one known_hosts holds: check it, then ssh to it once by hand"),
    ("", EX_NOHOST, "is it up, with sshd running? `ssh HOST true` tries by hand"))
# what fleet witness checks a host's checkpoints with, in the fleet file or one of its hosts
WITNESS_KEYS = ("principal", "allowed_signers", "namespace")


def cmd_bridge(home, args, pinned):
    """bridge [--read-only]: relay each request line on standard input to avsmd, or run its verb.
    pinned: the home was given (--home, AVSMD_HOME), so a request may name no other."""
    if args not in ([], ["--read-only"]):
        raise Fail(EX_USAGE, "usage: avsm [--home DIR] bridge [--read-only]")
    if os.isatty(0):            # sshd gave the key a pty (its line lacks restrict): a shell's reach
        raise Fail(EX_USAGE, "the bridge's standard input is a terminal: it reads the JSON lines "
                             "avsm --host sends, never a person; the key's line in authorized_keys "
                             "must begin with restrict (restrict,command=\"... bridge\" "
                             "ssh-ed25519 ...), so that ssh gives it no pty")
    reader, asked = LineReader(), False
    while True:
        data = os.read(0, 65536)
        if not data and not reader.waiting():
            if not asked:       # ssh HOST CMD with this key: CMD is not run, nor read
                raise Fail(EX_USAGE, "this key runs only the avsm bridge, which reads one JSON "
                                     "request a line on standard input: no shell, no command; "
                                     "run avsm --host HOST VERB on your side")
            return EX_OK
        try:
            messages = reader.feed(data or b"\n")     # a last line with no newline is a line too
        except (ValueError, RecursionError) as err:
            raise Fail(
                EX_USAGE, f"the bridge reads one JSON object a line: {str(err)[:200]}") from None
        for message in messages:
            asked = True
            if not isinstance(message, dict):
                raise Fail(
                    EX_USAGE, f"the bridge reads one JSON object a line, not {json_kind(message)}")
            where = message.pop("home", None)
            if where is not None and (argument_problem("path", where)
                                      or pinned
                                      and os.path.realpath(where) != os.path.realpath(home)):
                refuse(f"this bridge serves {home}, not {shown_text(json.dumps(where))[:120]}")
            if "verb" in message:
                return bridge_verb(where or home, message, bool(args))
            try:
                cmd, request_args = check_request(message)
                if args and cmd not in READ_REQUESTS:
                    refuse(f"this key may only read (avsm bridge --read-only): {cmd} is refused")
                if cmd == "records":        # read here, from the file: a witness needs no avsmd
                    send_out(*records_answer(where or home, request_args))
                    continue
                with send_request(where or home, message) as conn:
                    conn.settimeout(3 * BACKEND_TIMEOUT)
                    for line in daemon_answer(conn):
                        if "exit" in send_out(line):
                            break
            except (Fail, ValueError, OSError) as err:
                send_out({"err": str(err)}, {"exit": getattr(err, "code", EX_UNAVAILABLE)})


def send_out(*messages):
    """Write JSON lines to standard output at once; return the last."""
    sys.stdout.write("".join(json.dumps(m) + "\n" for m in messages))
    sys.stdout.flush()
    return messages[-1]


def bridge_verb(home, message, read_only):
    """Run one client verb here for the person at the other end of ssh; return its exit code."""
    if message.pop("v", 1) != 1:
        raise Fail(EX_USAGE,
                   "this bridge speaks version 1 of its requests; use an avsm of the same version")
    m = checked_arguments("a bridge's verb", message, BRIDGE_KEYS)
    verb, argv = m["verb"], take_json([m["verb"]] + m["argv"])[1:]
    if verb not in BRIDGE_VERBS:
        raise Fail(
            EX_USAGE, f"the bridge runs {', '.join(BRIDGE_VERBS)}, not {shown_text(verb)[:80]}")
    if read_only and (BRIDGE_VERBS[verb] != "read" or verb == "doctor" and "--cut" in argv):
        refuse(f"this key may only read (avsm bridge --read-only): {verb} is refused; "
               "it needs a key whose bridge may write")
    for i, arg in enumerate(argv):      # no file of this host is read for the far side, no editor
        if arg == "--allowed-signers" and verb == "doctor":
            refuse("through the bridge doctor --allowed-signers names no file of this host: a "
                   "signed checkpoint is verified with this host's own (its config's checkpoint: "
                   "allowed_signers, else ~/.ssh/allowed_signers); leave the option out")
        if arg in BRIDGE_PATH_OPTIONS.get(verb, ()) and argv[i + 1:i + 2] != ["-"]:
            refuse(f"through the bridge {verb} {arg} takes only - (what avsm --host sends from "
                   "your side's standard input): no file of this host is read for it")
    if verb == "approve" and "--edit" in argv:
        refuse("through the bridge approve --edit opens no editor on this host: avsm --host HOST"
               " approve ASK --edit edits on your side and sends what you saved in its request")
    # - reads the request's stdin, not the channel
    CALLER.set(Caller(command=m.get("as"), tty=m.get("tty"), utf8=m.get("utf8"),
                      read_only=read_only, stdin=io.StringIO(m.get("stdin") or "")))
    if verb == "tail":                  # the one verb that may not end by itself (tail -f)
        import threading
        threading.Thread(target=end_with_stdin, daemon=True).start()
    return run_verb(home, [verb] + argv)


def end_with_stdin():
    """The person at the other end went away (ssh closed standard input): a tail ends here too."""
    while os.read(0, 65536):
        pass
    os._exit(EX_OK)


def remote_host(spec, ssh=None, bridge=None, timeout=None, name=None):
    """Return the host [user@]HOST[:HOME] names, with its ssh command, bridge and timeout."""
    dest, _, home = spec.partition(":")
    if not re.fullmatch(r"(?!-)([^@\s]+@)?[\w.\[\]-]+", dest) or home and not os.path.isabs(home):
        raise Fail(EX_USAGE,
                   f"{shown_text(spec)[:80]!r} is not [user@]HOST[:HOME] (HOME absolute, as"
                   " web1:/srv/avsm)")
    return {"name": name or spec, "dest": dest, "home": home or None, "timeout": timeout or 10,
            "ssh": ssh or os.environ.get("AVSM_SSH") or "ssh",
            "bridge": bridge or os.environ.get("AVSM_BRIDGE") or "avsm bridge"}


def fleet_path(given):
    return given or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "avsm", "fleet.yaml")


def read_fleet(path, must=True):
    """Return the hosts of a fleet file (none when there is none and `must` is False), or Fail: 66
    none, 78 a file that does not hold. fleet ::= {hosts: [SPEC | {host: SPEC, name, ssh, bridge,
    timeout}], ssh, bridge, timeout}"""
    try:
        data = read_small_file(path, CONFIG_MAX)
    except OSError as err:
        if not must:
            return []
        raise Fail(
            EX_NOINPUT,
            f"{path} cannot be read ({err.strerror}): write the hosts there, as the README's "
            "Many hosts shows, or name a file with --fleet FILE") from None
    doc, c = checked_yaml(data, path)       # 78 at the line and column of a byte not UTF-8
    text = data.decode()
    keys = {"ssh", "bridge", "timeout", *WITNESS_KEYS}
    c.mapping(doc, (), keys | {"hosts"}, "a fleet file")
    if not isinstance(doc.get("hosts"), list) or not doc["hosts"]:
        c.fail(("hosts",),
               "hosts: is a list of [user@]HOST[:HOME], as hosts: [web1, ops@db1:/srv/avsm]")
    for k in sorted(keys & set(doc)):   # what every host takes is checked where it is written
        if k == "timeout":
            fleet_timeout(c, doc[k], (k,), text)
        else:
            c.text(doc[k], (k,))
    hosts, named = [], {}
    for i, item in enumerate(doc["hosts"]):
        entry = c.mapping({"host": item} if isinstance(item, str) else item, ("hosts", i),
                          keys | {"host", "name"}, "a host")
        where = {k: ("hosts", i, k) if k in entry else (k,) for k in keys | {"host", "name"}}
        given = {k: c.text(entry.get(k, doc.get(k)), where[k], required=False)
                 for k in ("ssh", "bridge", "host", "name", *WITNESS_KEYS)}
        timeout = entry.get("timeout", doc.get("timeout"))
        timeout = fleet_timeout(c, timeout, where["timeout"], text) if timeout is not None else None
        try:
            hosts.append(remote_host(given["host"] or "", given["ssh"], given["bridge"], timeout,
                                     given["name"]))
            hosts[-1].update((k, given[k]) for k in WITNESS_KEYS)
        except Fail as fail:
            c.fail(("hosts", i), str(fail))
        name = hosts[-1]["name"]
        if name in named:
            first = c.where(("hosts", named[name]))[0]
            c.fail(("hosts", i), f"{name} is in hosts twice (first at line {first}): "
                                 "list a host once, or give each its own name, as "
                                 f"{{host: {given['host']}, name: {name}-2}}")
        named[name] = i
    return hosts


def fleet_timeout(c, value, path, text):
    """Return the seconds of a fleet file's timeout, or Fail(78) at the value's line and column."""
    try:
        if is_number(value) and value > 0:
            raise ValueError(f"timeout is a duration, not the number {shown_value(value)}; "
                             f"write {max(1, round(value))}s")
        return parse_duration(value)
    except ValueError as err:
        line, col = c.where(path)
        if path in c.marks:      # the key's place: its value follows on the same line
            key = re.match(r"timeout:[ \t]*", text.splitlines()[line - 1][col - 1:])
            col += key.end() if key else 0
        raise Fail(EX_CONFIG, f"{c.source}:{line}:{col}: {err}") from None


def run_remote(target, verb, argv, path):
    """avsm --host TARGET VERB ...: run VERB on the host TARGET names, NAME[:HOME] of the fleet
    file, else [user@]HOST[:HOME]; return its exit code."""
    byname = {h["name"]: h for h in read_fleet(fleet_path(path), must=path is not None)}
    name, _, home = target.partition(":")
    if target in byname:
        host = byname[target]
    elif name in byname and home:
        if not os.path.isabs(home):
            raise Fail(EX_USAGE, f"{shown_text(target)[:80]!r}: the home after {name}: "
                                 f"is an absolute path, as {name}:/srv/avsm")
        host = dict(byname[name], name=target, home=home)
    else:
        guess = nearest(target, byname) or nearest(name, byname)
        host = dict(remote_host(target),
                    guess=guess and f"; {target!r} is no name in {fleet_path(path)}{guess}")
    if verb not in BRIDGE_VERBS:
        raise Fail(
            EX_USAGE,
            f"avsm {verb} runs only where you are; avsm --host runs {', '.join(BRIDGE_VERBS)}")
    CALLER.set(Caller(via=host, command=f"{client_command()} --host {target}"))
    if verb == "approve" and "--edit" in argv:
        # the editor is here; the ask and the answer go through the bridge
        return cmd_approve(None, argv)
    stdin = None
    if verb == "propose" and "--payload" in argv[:-1]:
        at = argv.index("--payload")
        stdin, argv = read_payload(argv[at + 1]), argv[:at + 1] + ["-"] + argv[at + 2:]
    elif verb == "doctor" and "--checkpoint" in argv \
            and argv[argv.index("--checkpoint") + 1:][:1] == ["-"]:
        # doctor --checkpoint -: what - reads is here, sent along
        stdin = sys.stdin.read()
    return ssh_bridge(host, {"v": 1, "verb": verb, "argv": argv + ["--json"] * bool(JSON),
                             "home": host["home"], "stdin": stdin, "as": CALLER.get().command,
                             "tty": bool(sys.stdout and sys.stdout.isatty()),
                             "utf8": utf8_output()})[0]


def ask_bridge(host, request):
    """ask_daemon through a host's bridge: return the exit code; an answer not avsm's is 69."""
    code, data, errors = ssh_bridge(host, dict(request, home=host["home"]), capture=True)
    name = host["name"]
    if errors and errors[-1].startswith(FAR_CUT):
        raise Fail(EX_UNAVAILABLE, f"{name}: the bridge answered with more than "
                                   f"{FAR_KEEP // 2**20} MiB, which no answer of avsmd's "
                                   "is; is it avsm's?")
    try:
        messages = LineReader().feed(data + b"\n")
    except (ValueError, RecursionError):
        messages = [None]
    if not data and code != EX_OK and errors:   # the bridge itself refused it: its own words
        sys.stderr.writelines(f"avsm: {shown(line)}\n" for line in errors)
        return code
    if not any(isinstance(m, dict) and "exit" in m for m in messages):
        messages.append(None)
    command = far_command(name)
    for message in messages:
        if not isinstance(message, dict) or not all(isinstance(message.get(k, ""), str)
                                                    for k in ("out", "err")):
            raise Fail(EX_UNAVAILABLE, f"{name}: the bridge answered with no JSON object a line "
                                       f"ending in an exit code (it exited {code}); is it avsm's?")
        exit_code = message.get("exit")
        if exit_code is not None and (type(exit_code) is not int or not 0 <= exit_code <= 255):
            said = exit_code if isinstance(exit_code, str) else json.dumps(exit_code)
            raise Fail(EX_UNAVAILABLE, f"{name}: the bridge answered exit '{shown_text(said)[:80]}'"
                                       ", which is no exit code; is it avsm's?")
        if request["cmd"] != "ask":     # an ask's content is data, kept as sent
            message = {k: far_text(v, command) if k in ("out", "err") else v
                       for k, v in message.items()}
        answered = show_answer(message, request["cmd"], None)
        code = code if answered is None else answered
    return code


FAR_KEEP = 4 * 1024 * 1024      # bytes of one host's answer kept (fleet, a relayed one), then cut
FAR_LINE = 64 * 1024            # a longer line from another host is shown in pieces of this size
FAR_ERRORS_KEEP = 64 * 1024     # bytes of a host's standard error kept
FAR_CUT = "its output was cut"
# avsm as another host's lines name it: its program there, any --home or --host, a bridge verb
FAR_COMMAND = (r"(?<![\w/.-])(?:\S*python\S* (?:-\S+ )*)?(?:\S*/)?avsm(?:\.py)?"
               rf"(?: --(?:home|host)[ =]\S+)* (?=(?:{'|'.join(BRIDGE_VERBS)})\b)")


def far_command(name):
    """Return avsm --host NAME as this user runs avsm, for a hint in what host NAME says."""
    command = program_command("avsm")
    return f"{'avsm' if os.path.basename(command.split()[0]) == 'avsm' else command} --host {name}"


def far_text(text, command):
    """Return a line another host sent with each avsm command in it written `command`."""
    if command is None:
        return text
    return command.join(re.sub(FAR_COMMAND, lambda _: command + " ", piece)
                        for piece in text.split(command))


def ssh_bridge(host, request, capture=False, timeout=None):
    """Run the bridge on `host` through ssh with `request` on its standard input; return (exit
    code, its output when captured, its error lines)."""
    import codecs
    import select
    import threading
    name, relay, chart = host["name"], "verb" not in request, request.get("verb") == "chart"
    command = None if chart else far_command(name)
    raw = chart and not capture and not sys.stdout.isatty()     # an SVG for a file, as sent
    proc = start_ssh(host)
    got, ours, theirs, ended = [], [], [], []
    heard, finished = threading.Event(), threading.Event()
    lines = [request] if relay else [
        {"v": 1, "cmd": "ping", "args": {}, "home": request.get("home")}, request]

    def send():
        with contextlib.suppress(OSError):
            proc.stdin.write("".join(json.dumps(line) + "\n" for line in lines).encode())
            proc.stdin.flush()
            if relay:
                proc.stdin.close()      # the bridge ends once the relayed request is answered

    def read_errors():
        kept = 0
        for line in iter(functools.partial(proc.stderr.readline, FAR_LINE), b""):
            kept += len(line)
            if kept > FAR_ERRORS_KEEP:
                continue                # read on, so the far side never waits on a full pipe
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text.startswith("avsm: "):
                ours.append(f"{name}: {far_text(text[6:], command)}")
                if not capture:
                    sys.stderr.write(f"avsm: {shown(ours[-1])}\n")
            else:
                theirs.append(text)
        if kept > FAR_ERRORS_KEEP:
            theirs.append(f"(its standard error was cut after {FAR_ERRORS_KEEP // 1024} KiB)")

    def end(seconds, silent):
        """Past its time: ssh and all it started end (a silent host: only while it says nothing)."""
        if not finished.is_set() and not (silent and heard.is_set()):
            ended.append(seconds)
            signal_group(proc.pid, signal.SIGKILL)
    threads = [threading.Thread(target=send), threading.Thread(target=read_errors),
               threading.Timer(host["timeout"], end, (host["timeout"], True))]
    if timeout:
        threads.append(threading.Timer(timeout, end, (timeout, False)))
    for thread in threads:
        thread.daemon = True
        thread.start()
    decoder, pinged, size, held = codecs.getincrementaldecoder("utf-8")("replace"), relay, 0, b""
    try:
        for piece in iter(functools.partial(proc.stdout.readline, FAR_LINE), b""):
            if not pinged:              # the ping's answer: avsm's bridge is there
                pinged = "exit" in bridge_message(piece, name)
                if pinged:
                    heard.set()
                continue
            heard.set()
            size += len(piece)
            if capture:
                if size > FAR_KEEP:     # the rest is read and counted, never kept
                    size += sum(map(len, iter(functools.partial(proc.stdout.read1, 65536), b"")))
                    break
                got.append(piece)
            elif raw:
                flush_out()
                sys.stdout.buffer.write(piece)
                sys.stdout.buffer.flush()
            elif JSON:                  # parsed and made here, never printed as it came
                held += piece
                if held.endswith(b"\n") or len(held) > FAR_KEEP:
                    doc, held = far_json(held, name, command), b""
                    if "exit" in doc:   # the document: its facts with this side's exit code
                        JSON.update(doc)
                    else:               # a record of tail
                        out(json.dumps(doc))
                        flush_out()
            else:
                out(far_text(decoder.decode(piece).removesuffix("\n"), command))
                if not select.select([proc.stdout], [], [], 0)[0]:
                    flush_out()         # all that came is shown (tail -f); what waits comes first
        finished.set()
        code = proc.wait()
    finally:
        finished.set()
        for thread in threads[2:]:
            thread.cancel()
        if proc.returncode is None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(OSError):
            proc.stdin.close()
    threads[1].join(5)
    far_failure(host, code, ours, theirs, ended, pinged)
    if size > FAR_KEEP:
        theirs.append(f"{FAR_CUT} after {FAR_KEEP // 2**20} MiB: "
                      f"{size - sum(map(len, got))} bytes more were not kept")
    if not capture:
        sys.stderr.writelines(shown(f"{name}: {t}") + "\n" for t in theirs)
    return code, b"".join(got), ours + theirs


def start_ssh(host):
    """Return ssh to `host` running its bridge, in a process group a timeout ends."""
    import shlex
    import subprocess
    argv = shlex.split(host["ssh"]) + ["-T", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o",
                                       f"ConnectTimeout={max(1, round(host['timeout']))}", "--",
                                       host["dest"], host["bridge"]]
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdout=subprocess.PIPE, process_group=0)
    except OSError as err:
        raise Fail(EX_UNAVAILABLE, f"{host['name']}: {argv[0]} cannot run ({err.strerror}); "
                                   "install OpenSSH's client, or name the ssh command in AVSM_SSH "
                                   "or the fleet file's ssh:") from None


def far_failure(host, code, ours, theirs, ended=(), pinged=True, by_hand=None):
    """Fail saying why the bridge on `host` did not answer, or return ssh's last word."""
    name, by_hand = host["name"], by_hand or f"`{host['ssh']} {host['dest']} true`"
    if ended:
        raise Fail(EX_NOHOST, f"{name}: no answer within {format_duration(ended[0])}: the host, "
                              f"its sshd or its bridge hangs; {by_hand} tries by hand")
    said = next((t.removeprefix("ssh: ") for t in reversed(theirs) if t.strip()),
                "no word from ssh")
    if code == 255 and not ours:
        code, fix = next((c, f) for s, c, f in SSH_FAILURES if s in " ".join(theirs))
        fix = fix.replace("`ssh HOST true`", by_hand).replace("HOST", host["dest"])
        raise Fail(code, f"{name}: ssh could not reach avsm there ({said}); "
                         f"{fix}{host.get('guess', '')}")
    if code == 127 and not ours:
        raise Fail(
            EX_UNAVAILABLE,
            f"{name}: no avsm there ({host['bridge']!r} was not found); copy avsm.py to it and name"
            " the command: bridge: python3 /opt/avsm/avsm.py bridge in the fleet file, or"
            " AVSM_BRIDGE")
    if not pinged and code == EX_OK:
        raise Fail(EX_UNAVAILABLE, f"{name}: {host['bridge']!r} ran there and said nothing, which "
                                   "avsm's bridge never does; name avsm's (bridge: python3 "
                                   "/opt/avsm/avsm.py bridge) in the fleet file, or in "
                                   "AVSM_BRIDGE, or check the key's forced command")
    return said


def far_json(data, name, command):
    """Return the JSON object a host's avsm sent for --json, each avsm command in it written
    `command`; Fail(69) when it sent anything else."""
    try:
        doc = json.loads(far_text(data.decode("utf-8", "replace"), json.dumps(command)[1:-1]))
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or doc.get("schema") != 1:
        raise Fail(EX_UNAVAILABLE, f"{name}: its avsm answered --json with no JSON object of "
                                   "schema 1; is it avsm's, and as new as this one?")
    return doc


def bridge_message(piece, name, most=FAR_LINE):
    """Return the JSON object a line of the bridge holds (shorter than `most`, None: any length);
    Fail(69) when it is not avsm's."""
    try:
        message = json.loads(piece)
    except (ValueError, RecursionError):
        message = None
    if not isinstance(message, dict) or most and len(piece) >= most:
        raise Fail(EX_UNAVAILABLE, f"{name}: the bridge answered with no JSON object a line; "
                                   "is it avsm's?")
    return message


def cmd_fleet(args, given, home):
    """fleet [--fleet FILE] status|asks|summary|page [ARGS]: every host's view, asked at once."""
    path, rest = take_option(args, "--fleet")
    path = fleet_path(path or given)
    if rest and rest[0] == "witness":
        return cmd_witness(home, path, rest[1:])
    if not rest or rest[0] not in ("status", "asks", "summary", "page"):
        raise Fail(EX_USAGE, "usage: avsm fleet [--fleet FILE] status|asks|summary|page [ARGS]")
    view, argv, hosts = rest[0], rest[1:], read_fleet(path)
    target = view == "page" and page_target(argv, "fleet [--fleet FILE] page -o FILE")

    def ask(host):
        name = host["name"]
        command = far_command(name)
        request = {"v": 1, "verb": view, "argv": argv + ["--json"] * bool(JSON),
                   "home": host["home"], "utf8": utf8_output(),
                   "as": f"{client_command()} --host {name}"}
        if target:                      # its facts, made into the page here
            request = {"v": 1, "cmd": "page", "args": {}, "home": host["home"]}
        try:
            code, data, errors = ssh_bridge(host, request, capture=True, timeout=host["timeout"])
        except Fail as fail:
            code, data, errors = fail.code, b"", [str(fail)]
        if target:
            facts, problem, code = page_answer(code, data, errors)
            return code, (name, facts, problem and problem.removeprefix(name + ": "), command)
        if JSON:                        # its document, or its exit code and why it has none
            try:
                doc = far_json(data, name, command) if data else {"error": "; ".join(errors)}
            except Fail as fail:
                code, doc = fail.code, {"error": str(fail)}
            return code, (name, exit_facts(doc, code))
        lines = far_text(data.decode("utf-8", "replace"), command).split("\n")
        return code, (name, lines[:-1] if lines[-1:] == [""] else lines,
                      [line.removeprefix(name + ": ") for line in errors])
    codes, said = zip(*on_each_host(hosts, ask))    # each host's exit code; (name, what it said...)
    if target:
        write_page(target, said)
    elif JSON:
        JSON["hosts"] = dict(said)
    else:
        out(*fleet_lines(view, said))
    return next(filter(None, codes), EX_OK)


def cmd_page(home, args):
    """page -o FILE: this home's page; with no avsmd answering, what its ledger holds, and 69."""
    target = page_target(args, "page -o FILE")
    try:
        with send_request(home, {"v": 1, "cmd": "page", "args": {}}) as conn:
            conn.settimeout(60)
            facts, problem, code = page_answer(0, b"".join(iter(lambda: conn.recv(65536), b"")))
    except (Fail, OSError) as err:
        facts, problem, code = None, str(err), getattr(err, "code", EX_UNAVAILABLE)
    if code == EX_UNAVAILABLE:
        facts = show_ledger_view(home, "page", None)
    write_page(target, [(None, facts, problem, client_command(home))])
    return code


def page_target(args, usage):
    """Return the absolute FILE of `-o FILE`, whose directory can be written, or Fail."""
    if len(args) != 2 or args[0] != "-o" or not args[1]:
        raise Fail(EX_USAGE, f"usage: avsm {usage}")
    target = os.path.abspath(args[1])
    refuse(metrics_problem({"path": target}), EX_CANTCREAT)
    return target


def write_page(target, hosts):
    try:
        write_textfile(target, page_html(hosts, time.time()))
    except OSError as err:
        raise Fail(EX_CANTCREAT, f"{target} cannot be written ({err.strerror or err}); name a "
                                 "file in a directory you may write") from None


def on_each_host(hosts, work):
    """Return [work(host) for host in hosts], run for every host at once, in threads."""
    import threading
    results = [None] * len(hosts)

    def run(i):
        results[i] = work(hosts[i])
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(hosts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


STATUS_ROW = r"(\S+: \S(?:\S| (?! ))*)  +(\S(?:\S| (?! ))*)"     # NAME: STATE, then the value


def fleet_lines(view, said):
    """Return what avsm fleet prints of [(host, lines, error lines)], each under its host's name
    (made here, so no host's line passes for another's); status rows in columns across hosts."""
    wide, rows = max(len(name) for name, _, _ in said), {}
    for name, got, _ in said if view == "status" else ():
        found = {i: m for i, m in enumerate(re.match(STATUS_ROW, line) for line in got) if m}
        head, value = (max((len(m[k]) for m in found.values()), default=0) for k in (1, 2))
        if all(m.start(2) == head + 2 for m in found.values()):
            # (host, line index) -> (NAME: STATE, value, the rest)
            rows.update({(name, i): (m[1], m[2], got[i][head + value + 4:])
                         for i, m in found.items()})
    head, value = (max((len(cell[k]) for cell in rows.values()), default=0) for k in (0, 1))
    lines = []
    for name, got, errors in said:
        if view == "summary":
            lines += [f"== {name}"] + [f"  {line}" if line else "" for line in got + errors]
            continue
        got = [f"{rows[name, i][0].ljust(head)}  {rows[name, i][1].ljust(value)}  "
               f"{rows[name, i][2]}".rstrip() if (name, i) in rows else line
               for i, line in enumerate(got)]
        for line, ask in [(g, view == "asks" and re.match(r"#(\d+) ", g)) for g in got] + \
                [(e, None) for e in errors]:
            lines.append(f"{name}:{ask[1]} {line[ask.end():]}" if ask else
                         f"{name.ljust(wide)}  {line}".rstrip())
    return lines


# ---- fleet witness: each host's ledger checked, and copied, where its writer cannot reach ----
# A host checking itself reads its own allowed_signers, which whoever rewrote its ledger could
# change too. The witness checks each host's newest checkpoint against the one kept in
# DIR/HOST/checkpoints, every link between them, and its signature with this machine's keys.

WITNESS_USAGE = ("usage: avsm fleet [--fleet FILE] witness [--keep DIR] [--mirror] "
                 "[--allowed-signers FILE]")
EVIDENCE_ROWS = 200     # rows of each version a witness keeps from the first seq that differs
MIRROR_MARK = "witnessed-host"      # in DIR/HOST of a --mirror: the host it copies (doctor_mirror)
MIRROR_COMMIT = 32768   # rows a mirror takes in one transaction: one sync to disk for each so many


class BridgeSession:
    """One ssh session to a host's bridge, kept open for many requests (a witness's pages)."""

    def __init__(self, host):
        import threading
        self.host, self.buffer, self.errors, self.pending = host, b"", [], 0
        self.proc = start_ssh(host)
        self.reader = threading.Thread(target=self.read_errors, daemon=True)
        self.reader.start()

    def read_errors(self):
        for line in self.proc.stderr:
            self.errors.append(line.decode("utf-8", "replace").rstrip("\r\n"))

    def ask(self, cmd, **args):
        self.pending += 1
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write((json.dumps({"v": 1, "cmd": cmd, "args": args,
                                               "home": self.host["home"]}) + "\n").encode())
            self.proc.stdin.flush()

    def answer(self):
        """Return (out lines, err lines, exit code) of the oldest request not yet answered."""
        out, err = [], []
        while True:
            message = bridge_message(self.line(), self.host["name"], None)
            if "exit" in message:
                self.pending -= 1
                return out, err, message["exit"]
            (out if "out" in message else err).append(str(message.get("out", message.get("err"))))

    def line(self):
        import select
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            if not select.select([fd], [], [], self.host["timeout"])[0]:
                self.close()
                raise Fail(EX_NOHOST, f"{self.host['name']}: no answer within "
                                      f"{format_duration(self.host['timeout'])}: the host or its "
                                      f"sshd hangs; `ssh {self.host['dest']} true` tries by hand")
            data = os.read(fd, 1 << 20)
            if not data:
                raise self.ended()
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def ended(self):
        """Return the Fail that says why the session ended before an answer, as fleet says it."""
        try:
            code = self.proc.wait(self.host["timeout"])
        except Exception:
            self.close()
            code = None
        self.reader.join(2)
        name, ours = self.host["name"], [t[6:] for t in self.errors if t.startswith("avsm: ")]
        if ours:
            return Fail(code or EX_UNAVAILABLE, f"{name}: {ours[-1]}")
        said = far_failure(self.host, code, ours, self.errors, by_hand="`ssh HOST true`")
        return Fail(EX_UNAVAILABLE, f"{name}: the bridge ended (exit {code}) before it answered "
                                    f"({said}); see avsm --host {name} doctor")

    def close(self):
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(2)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def cmd_witness(home, fleet, args):
    """fleet witness: each host checked here against what was kept for it; return the exit code."""
    keep, args = witness_option(args, "--keep")
    allowed, args = witness_option(args, "--allowed-signers")
    if args not in ([], ["--mirror"]):
        raise Fail(EX_USAGE, WITNESS_USAGE)
    keep = keep or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "avsm", "witness")
    hosts = read_fleet(fleet)
    home = resolve_home(home)
    try:
        notify = read_config(home)[0].get("notify")
    except Fail:
        notify = None

    def witness(host):
        name = host["name"]
        where = os.path.join(keep, re.sub(r"[^\w.@-]+", "_", name))
        try:
            os.makedirs(os.path.join(where, "checkpoints"), mode=0o700, exist_ok=True)
            with open(os.path.join(where, "witness.lock"), "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise Fail(EX_TEMPFAIL, f"{name}: another avsm fleet witness keeps {where} "
                                            "now; let it finish, then run this again") from None
                session = BridgeSession(host)
                try:
                    said = witness_session(host, where, session, bool(args), allowed)
                finally:
                    session.close()
            return EX_OK, f"{name}  {said}"
        except Fail as fail:
            if fail.code == EX_DATAERR and notify:
                tell_witness(notify, home, name, str(fail))
            return fail.code, f"{name}  {str(fail).removeprefix(name + ': ')}"
    umask = os.umask(0o077)     # what is kept (a mirror is a home) is this user's alone, as avsmd's
    try:
        codes, lines = zip(*on_each_host(hosts, witness))
    finally:
        os.umask(umask)
    out(*lines)
    return next(filter(None, codes), EX_OK)


def witness_option(args, option):
    """Return (the value of `option`, the other arguments) of fleet witness's arguments."""
    if option not in args:
        return None, args
    at = args.index(option)
    if at + 1 >= len(args) or not args[at + 1]:
        raise Fail(EX_USAGE, f"{option} needs a directory or file; {WITNESS_USAGE}")
    return os.path.abspath(os.path.expanduser(args[at + 1])), args[:at] + args[at + 2:]


def witness_session(host, where, session, mirror, allowed):
    """Return what fleet witness says of one host, checked (and kept) over one ssh session."""
    import sqlite3
    name, kept = host["name"], newest_checkpoint(os.path.join(where, "checkpoints"))
    # 1. the host's newest checkpoint: a new one where the key may write
    session.ask("checkpoint")
    session.ask("records", after=0, limit=0, checkpoint=True)
    session.answer()
    first = json.loads(far_page(session)[0])
    if not first.get("checkpoint"):
        raise Fail(EX_UNAVAILABLE, f"{name}: its avsmd has written no checkpoint yet, and this "
                                   "key may not ask for one: let avsmd run there (it writes one "
                                   "at its start), or use a key whose bridge may write")
    new = parse_checkpoint(first["checkpoint"], f"{name}'s newest checkpoint",
                           first.get("signature"))
    db = sqlite3.connect(os.path.join(where, "ledger.db"), isolation_level=None, timeout=10) \
        if mirror else None
    try:
        # 2. what this side holds (the mirror's head, the checkpoint kept), and what to read: from
        # the first of them (again, to compare it) to the host's head (--mirror) or checkpoint
        base = None
        if mirror:
            write_textfile(os.path.join(where, MIRROR_MARK), name + "\n", None)
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(LEDGER_SCHEMA)
            base = ledger_head(db)
        held = dict([base] if base else [])
        if kept and kept.seq > (base or (0,))[0]:
            held[kept.seq] = kept.hash
        if mirror:
            lo, hi = (base or (1,))[0], max([(first["head"] or [0])[0], *held])
        else:
            lo, hi = min([new.seq, *held]), max([new.seq, *held])
        # 3. every row read, checked, and (--mirror) appended; one that differs kept as evidence
        last, count, at_new, verdict = copy_far_rows(session, db, held, lo, hi, new.seq)
        if not verdict and (last or (0,))[0] < max(held, default=0):
            verdict = ("differs", max(held), held[max(held)], None)     # the host's ends before
        if verdict:
            raise witness_fork(session, db, where, name, verdict, kept)
        if at_new is None:
            at_new = mirror_hash(db, new.seq)
    except sqlite3.Error as err:
        raise Fail(EX_DATAERR, f"{name}: {where}/ledger.db cannot be written: {err}; move it "
                               "away, and the next run copies the ledger afresh") from None
    finally:
        if mirror:
            db.close()
    # 4. the new checkpoint checked, and kept when newer
    said = keep_checkpoint(host, where, kept, new, at_new, allowed)
    copied = f", {count - bool(base)} copied to {where}/ledger.db" if mirror else ""
    return f"#{new.seq} witnessed{said}: {count} record(s) read and checked{copied}"


def mirror_hash(db, seq):
    """Return the hash the mirror `db` holds at `seq`, or None (none there, or no mirror)."""
    row = db and row_at(db, "hash", seq)
    return row and row[0]


def far_page(session):
    """Return the out lines of the session's next answer, or Fail with the host's word."""
    lines, err, code = session.answer()
    name = session.host["name"]
    if code == EX_USAGE:            # a bridge that knows no `records`
        raise Fail(code, f"{name}: {err[-1] if err else 'refused'}; the host's avsm is older than "
                         "the witness's: copy this avsm.py there")
    if code != EX_OK:
        raise Fail(code, f"{name}: {err[-1] if err else 'the bridge refused, saying nothing'}")
    return lines


def copy_far_rows(session, db, held, lo, hi, want):
    """Return (the last (seq, hash) read, how many, the hash at `want`, the verdict) of lo..hi."""
    before, count, at_want, verdict = (0, ZERO_HASH) if lo == 1 else None, 0, None, None
    copy_after = (ledger_head(db) or (0,))[0] if db else None
    session.ask("records", after=lo - 1, limit=RECORDS_PAGE)
    try:
        while not verdict:
            try:
                rows = parse_rows(far_page(session)[1:])
            except ValueError as err:
                verdict = ("broken", (before or (lo - 1,))[0] + 1, str(err))
                break
            if not rows:
                break
            if rows[-1].seq < hi:
                session.ask("records", after=rows[-1].seq, limit=RECORDS_PAGE)
            last, verdict = check_far_rows(held, before, rows)
            if verdict:
                break
            if rows[0].seq <= want <= rows[-1].seq:
                at_want = rows[want - rows[0].seq].hash
            new = [row for row in rows if row.seq > copy_after] if db else []
            if new:
                if not db.in_transaction:
                    db.execute("BEGIN IMMEDIATE")
                db.executemany("INSERT INTO records(seq, at, prev, hash, weight, record) "
                               "VALUES (?, ?, ?, ?, 1, ?)", new)
                since = (new[0].seq - 1 - copy_after, new[-1].seq - copy_after)
                if since[1] // MIRROR_COMMIT > since[0] // MIRROR_COMMIT:
                    db.execute("COMMIT")
            before, count = last, count + len(rows)
            if last[0] >= hi:
                break
    finally:
        if db and db.in_transaction:
            db.execute("COMMIT")            # what was checked is kept: the next run goes on
    return before, count, at_want, verdict


def witness_fork(session, db, where, name, verdict, kept):
    """Return the Fail (65) of a far history that no longer extends what was kept."""
    kind, seq, kept_hash, far_hash = (verdict + (None,))[:4]
    while session.pending:
        session.answer()                # a page asked for before the fork was seen

    def far_rows(after, limit):
        session.ask("records", after=after, limit=limit)
        return parse_rows(far_page(session)[1:])

    def differs(s):
        got = far_rows(s - 1, 1)
        return not got or got[0].seq != s or row_problem(got[0], None) \
            or got[0].hash != mirror_hash(db, s)
    exact = kind == "broken" or mirror_hash(db, seq) is not None
    if kind == "differs" and exact:
        seq = first_differing(1, seq, differs)
        got = far_rows(seq - 1, 1)
        kept_hash = mirror_hash(db, seq)
        far_hash = got[0].hash if got and got[0].seq == seq else None
    start = seq if exact else max(1, seq - EVIDENCE_ROWS + 1)
    mine = [{"checkpoint": kept.text, "signature": kept.signature}] if db is None else [
        Row(*row)._asdict() for row in db.execute(
            "SELECT seq, at, prev, hash, record FROM records WHERE seq >= ? ORDER BY seq LIMIT ?",
            (start, EVIDENCE_ROWS))]
    theirs = [row._asdict() for row in far_rows(start - 1, EVIDENCE_ROWS)]
    files = [os.path.join(where, f"fork-{seq}-{side}.jsonl") for side in ("kept", "far")]
    for path, lines in zip(files, (mine, theirs)):
        write_textfile(path, "".join(json.dumps(line) + "\n" for line in lines), None)
    far_said = str(far_hash or "no such record")[:16]
    if kind == "broken":
        what = f"the host's record #{seq} does not chain: {far_hash or kept_hash}"
    elif exact:
        what = (f"#{seq} is not what was kept: it hashed to {kept_hash[:16]} and the host now "
                f"has {far_said}")
    else:
        what = (f"#{seq}, of the checkpoint kept, hashed to {kept_hash[:16]} and the host now has "
                f"{far_said}: the ledger differs at or before it (with --mirror the witness names "
                "the first record)")
    return Fail(EX_DATAERR, f"{name}: its ledger no longer extends what this witness kept: {what}; "
                            f"both versions, from #{start}, are in {files[0]} and {files[-1]}: "
                            "compare them, and keep this side's copy (the host's ledger was "
                            "rewritten, cut or forked)")


def keep_checkpoint(host, where, kept, new, far_hash, allowed):
    """Return what to say of the host's newest checkpoint's signature, once checked and kept."""
    name, principal = host["name"], host["principal"]
    newest = f"{name}: its newest checkpoint, of #{new.seq}, is"
    refused = f"{newest} refused: "
    problem = kept_checkpoint_problem(kept, new, far_hash)
    if problem:
        refuse(f"{refused}{problem}; compare it with avsm --host {name} doctor, "
               "and keep what this witness holds")
    said = ", unsigned" if new.signature is None else \
        ", its signature not checked (the fleet file names no principal: for it)"
    if principal:
        allowed = os.path.expanduser(allowed or host["allowed_signers"] or "~/.ssh/allowed_signers")
        if new.signature is None:
            refuse(f"{newest} unsigned, and the fleet file names {principal} as its signer: name a"
                   " key in checkpoint: of its config.yaml (the README's Checkpoints)")
        if not os.path.isfile(allowed):
            raise Fail(EX_NOINPUT, f"{name}: {allowed} is not there to verify its checkpoint with: "
                                   f"write {principal}'s key there, or name the file with "
                                   "--allowed-signers or the fleet file's allowed_signers:")
        try:
            verify_signer(new.text, new.signature, allowed, principal,
                          host["namespace"] or CHECKPOINT_NAMESPACE)
        except Fail as fail:
            raise Fail(fail.code, f"{refused}{fail}") from None
        said = f", signed by {principal}"
    if kept and new.seq < kept.seq:
        return said + f" (older than #{kept.seq}, the one kept, which the host still holds)"
    path = os.path.join(where, "checkpoints", f"{new.seq:012d}.txt")
    for name_, data in ((path + ".sig", new.signature), (path, new.text)):
        if data:
            write_textfile(name_, data.rstrip("\n") + "\n", None, name_ + ".new")
    return said


def tell_witness(notify, home, name, message):
    """Run this side's notify command once with what the witness found on its standard input."""
    import subprocess
    notice = new_notice("witness", name, None, message, f"avsm --host {name} doctor")
    text, event = notice_message(notice, {"avsm": client_command()}, home)
    try:
        done = subprocess.run(notify["run"], shell=True, input=text.encode(),
                              env=notify_env(home, event), timeout=notify["timeout"],
                              capture_output=True, start_new_session=True)
        failure = done.returncode and f"exited {done.returncode}"
    except (OSError, subprocess.TimeoutExpired) as err:
        failure = str(err)
    if failure:
        sys.stderr.write(f"avsm: {name}: notify ({notify['run']}) could not tell it: {failure}\n")


def read_config(home, path=None):
    """Return (config, its path, its text) from -f FILE or HOME/config.yaml (none: all defaults)."""
    given = path is not None
    path = path or os.path.join(home, "config.yaml")
    try:
        data = read_small_file(path, CONFIG_MAX)       # a FIFO or /dev/zero is refused, not read
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - data.rfind(b"\n", 0, err.start)
        raise Fail(
            EX_CONFIG,
            f"{path}:{line}:{col}: byte 0x{data[err.start]:02x} is not UTF-8; save the config as"
            " UTF-8") from None
    except FileNotFoundError:
        if given:
            raise Fail(
                EX_CONFIG, f"{path} is not there; pass an existing config file to -f") from None
        text = ""
    except OSError as err:
        raise Fail(EX_CONFIG, f"{path} cannot be read: {err.strerror}") from None
    return parse_config(text, path), path, text


def adopted_mandates(home):
    """Return [(name, directory, mandate seq, paused, mandate text)] of every adopted venture."""
    path = os.path.join(home, "ledger.db")
    if not os.path.exists(path):
        return []
    if not os.path.isfile(path):         # a FIFO's open would wait for ever
        raise ValueError("it is not a regular file (a directory, a FIFO or a device)")
    ventures = {}
    db = open_ledger_ro(path)
    for seq, at, record in read_records(db, checked=True):
        name = record["venture"]
        if record["kind"] == "mandate":
            ventures[name] = [name, record.get("directory"), seq, False, record.get("text")]
        elif record["kind"] in ("pause", "resume") and name in ventures:
            ventures[name][3] = record["kind"] == "pause"
    db.close()
    return [tuple(v) for v in ventures.values()]


# =============================================================================
# 15. avsmd -t: the config and the ventures, tested; avsm try and avsm link
# =============================================================================

def test_config(home, cfg, path):
    """avsmd -t: the config and every adopted mandate, re-read; 78 when one does not hold."""
    problems = []

    def problem(text, where=""):
        if text:
            sys.stderr.write(f"avsmd: {where}{text}\n")
            problems.append(text)
    problem(socket_problem(home))
    out(f"config {path}: holds" + ("" if os.path.exists(path) else " (not there: every default)"),
        describe_notify(cfg["notify"]), describe_checkpoint(cfg["checkpoint"]))
    problem(checkpoint_problem(cfg["checkpoint"]), f"{path}: ")
    # it runs in the home
    problem(cfg["notify"] and command_problem(cfg["notify"]["run"], home), f"{path}: notify: ")
    page = cfg["page"] or {"path": f"nowhere (as {PAGE_EXAMPLE} would)", "every": 0}
    out(describe_metrics(cfg["metrics"]),
        f"page: written to {page['path']} every {format_duration(page['every'])}, whole",
        describe_ledger(cfg["ledger"]))
    problem(written_problem(cfg), f"{path}: ")
    try:
        adopted = adopted_mandates(home)
    except (sqlite3_errors(), ValueError, Fail) as err:
        problem(f"{home}/ledger.db does not read ({err}), so no adopted mandate can be listed; "
                f"see {client_command(home)} doctor")
        return EX_DATAERR
    for name, directory, seq, paused, in_force in adopted:
        if not os.path.isdir(directory or ""):
            if paused:
                out(f"venture {name} (mandate #{seq}): paused, and its directory has gone")
            else:
                problem(f"{name}: {directory} is not there")
            continue
        mandate_path = os.path.join(directory, "mandate.yaml")
        add = f"{client_command(home)} add {directory}"
        try:
            text = read_mandate_file(mandate_path)
            m = parse_mandate(text, mandate_path, directory)
            unsafe = owner_problem(directory, venture_commands(m))
            if unsafe:
                raise Fail(EX_CONFIG, f"{unsafe.why}; {unsafe.fix}, then {add}")
        except OSError as err:
            problem(f"{name}: {mandate_path} cannot be read: {err.strerror}")
        except Fail as fail:
            problem(f"{name}: {fail} (mandate #{seq} stays in force)")
        else:
            drift = mandate_drift(in_force, text, seq, mandate_path)
            state = ": paused" if paused else ""
            if drift:
                out(f"venture {name} ({directory}){state}: {mandate_path} differs from mandate"
                    f" #{seq} in force; {add} applies it", *drift,
                    "  as on disk, once added, it allows:")
            else:
                out(f"venture {name} (mandate #{seq}, {directory}){state}:")
            print_allowed(home, cfg, name, m)
    return EX_CONFIG if problems else EX_OK


def test_ventures(home, cfg, dirs):
    """avsmd -t DIR...: check each venture directory exactly as `avsm add` would, with no daemon."""
    try:
        adopted = {held[0]: held[1:] for held in adopted_mandates(home)}
    except (sqlite3_errors(), ValueError, Fail):
        # a ledger that does not read: avsmd -t alone says so; each directory is still checked
        adopted = {}
    code = EX_OK
    for directory in map(os.path.realpath, dirs):
        try:
            name, path, text, m = read_venture(directory)
            held = adopted.get(name)
            if held:
                check_not_adopted_elsewhere(name, directory, held[0], held[2])
        except Fail as fail:
            sys.stderr.write(f"avsmd: {shown(str(fail))}\n")
            code = code or fail.code
            continue
        holds = f"venture {name} ({directory}): holds"
        add = f"{client_command(home)} add {directory}"
        if not held or held[0] != directory:
            out(f"{holds}; {add} adopts it")
        elif held[3] == text:
            out(f"{holds}, the same as mandate #{held[1]} in force (avsm add writes nothing)")
        else:
            out(f"{holds}, and differs from mandate #{held[1]} in force; {add} applies it",
                *mandate_drift(held[3], text, held[1], path),
                "  as on disk, once added, it allows:")
        print_allowed(home, cfg, name, m)
    return code


def allowed_lines(state, cfg):
    """Return lines saying what the venture's mandate allows: each lever, its cap, and what needs
    asking; then whether its levers can hold it."""
    m, lines = state.mandate, []
    ctl = m["controller"]
    if decided_by_model(m):
        lines.append("  " + backend_note(m, cfg))
    lines.append(f"  controller: {CONTROLLERS[ctl['kind']].describe(ctl)}")
    for lever in m["levers"].values():
        how = "runs unasked" if lever["reversible"] else \
            "delegated: runs unasked, intent before and outcome after" if lever["delegated"] else \
            "irreversible: asks a person first"
        lines.append(f"  may run {lever['name']}: cap {lever['cap_text']}, {how}" + (
            f", takes {lever['takes']}" + (" (a model's content runs unasked: delegated)"
                                           if lever["delegated"]
                                           else " (model content waits for a person)")
            if lever["takes"] else ""))
    if not m["levers"]:
        lines.append("  may run no lever")
    if m["forbidden"]:
        lines.append(f"  never runs: {', '.join(m['forbidden'])}")
    if m["run"]:
        lines.append(f"  keeps {m['run']} running (restart: {m['restart']})")
    for g in m["guards"]:
        source = g["run"] or g["adapter"] or f"drawdown of {g['drawdown']:g}% from the peak"
        bound = (f"past {g['drawdown']:g}%"
                 if g["drawdown"] is not None
                 else f"{g['side']} {format_number(g['bound'])}")
        lines.append(f"  guard {g['name']} ({source}): {bound}"
                     f" {'pauses' if g['then'] == 'pause' else 'asks'}; then only stop"
                     + (f" and unwind {g['unwind']['action']}" if g["unwind"] else "")
                     + " run")
    for a in m["audits"]:
        lines.append(
            f"  audit {a['name']} ({a['run']}): asks when the metric improves while it worsens"
            f" ({a['worse']}) past {format_number(a['tolerance'])}")
    days = (cfg["forecast"] or FORECAST_DEFAULT)["days"]
    return lines + ["  " + describe_capacity(capacity_check(state, days))]


def backend_note(m, cfg):
    """Say which backend a model venture's decisions go to, and whether it may be asked."""
    name = m["controller"].get("backend") or cfg.get("default")
    if name and name not in cfg["backends"]:
        return f"backend: {name} is not among config.yaml's backends: no decision is made"
    if not name:
        return "backend: none named (set default: in config.yaml): no decision is made"
    if cfg["backends"][name]["offbox"] and m["escalate"] != "offbox":
        return f"backend: {name} leaves the machine, and the mandate does not say escalate:" \
            " offbox: no call is made"
    second = cfg.get("escalate")
    if not second or second == name:
        escalation = ""
    elif cfg["backends"][second]["offbox"] and m["escalate"] != "offbox":
        escalation = f", not escalating to {second} (it leaves the machine; the mandate does" \
            " not say escalate: offbox)"
    else:
        escalation = f", escalating to {second}"
    nightly = "no nightly decision" if cfg["nightly"] == "never" else f"nightly at {cfg['nightly']}"
    return f"backend: {name}, {nightly}" + escalation


def print_allowed(home, cfg, name, m):
    """Print what mandate `m` of venture `name` allows, and whether its levers can hold it (open
    point 9), judged from its history: none with no ledger yet (avsmd -t DIR on a new home)."""
    states = {}
    try:
        with contextlib.closing(open_ledger_ro(os.path.join(home, "ledger.db"))) as db:
            states = refolded({}, read_records(db, venture=name))
    except (sqlite3_errors(), ValueError):
        pass        # none, or one that does not read (avsmd -t says so): capacity from no history
    state = states.get(name) or VentureState(name)
    state.mandate = m
    out(*allowed_lines(state, cfg))


# ---- avsm try and avsm link, and how this user runs avsm ----

def cmd_try(home, args):
    """try DIR: run avsmd on a temporary home, adopt DIR, and follow the ledger until a signal."""
    import subprocess
    import tempfile
    if len(args) != 1:
        raise Fail(
            EX_USAGE, "usage: avsm try DIR   (for example: python3 avsm.py try examples/counter)")
    directory = os.path.realpath(args[0])
    check_venture_dir(directory)
    check_venture_name(os.path.basename(directory))
    stopped_by, daemon, started, spawning = [], None, False, []

    def stop(signum, frame):
        stopped_by.append(signum)
        # while avsmd is spawned only noted: it is not ours to stop until then
        if not spawning:
            raise KeyboardInterrupt
    try:        # an interrupt from here on ends as a late one does: avsmd stopped, the home named
        for signum in STOP_SIGNALS:
            signal.signal(signum, stop)
        home = home or tempfile.mkdtemp(prefix="av", dir="/tmp")
        spawning.append(True)
        daemon = subprocess.Popen([sys.executable, AVSM_PATH, "avsmd", "--home", home],
                                  stdin=subprocess.DEVNULL, process_group=0)
        spawning.clear()
        if stopped_by:
            raise KeyboardInterrupt
        # ours once it holds the lock and serves: never another avsmd's socket
        for _ in range(300):
            if daemon.poll() is not None:
                break
            if os.path.exists(os.path.join(home, "sock")) and lock_holder(home) == daemon.pid:
                started = True
                break
            time.sleep(0.05)
        if not started:
            code = daemon.poll()
            raise Fail(code if code in (EX_TEMPFAIL, EX_CONFIG, EX_CANTCREAT, EX_NOPERM)
                       else EX_UNAVAILABLE, f"avsmd did not start on {home} (exit {code}); try"
                                            " adopts nothing into another avsmd")
        code = ask_daemon(home, "add", {"dir": directory})
        if code != EX_OK:
            return code
        out(f"# {when_it_acts(home, directory)}",
            f"# the home is {home}; in another terminal: {client_command(home)} asks (approve N,"
            " deny N, status)",
            f"# following {home}/ledger.db; Ctrl-C stops avsmd")
        sys.stdout.flush()
        cmd_tail(home, ["1000000", "-f"])
    except KeyboardInterrupt:
        return 128 + (stopped_by or [signal.SIGINT])[0]
    finally:
        for signum in STOP_SIGNALS:
            # stopping: a second signal does not cut it short
            signal.signal(signum, signal.SIG_IGN)
        if daemon and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                daemon.kill()
        if home and (started or stopped_by):
            # the terminal has gone (SIGHUP): avsmd is stopped all the same
            with contextlib.suppress(OSError):
                status = daemon and daemon.wait()       # None: avsmd was not started
                ended = (f"avsmd stopped ({describe_status(status)})" if started else
                         "avsmd was not started" if status is None else
                         f"avsmd stopped before it served ({describe_status(status)})")
                again = f"look again with: {client_command(home)} tail 50" if os.path.exists(
                    os.path.join(home, "ledger.db")) else "nothing was written there"
                sys.stderr.write(f"\navsm: {ended}; the home is kept at {home}\navsm: {again}\n")
    return EX_OK


def when_it_acts(home, directory):
    """Say when the venture just adopted in `directory` first acts (the first report: up to 3 s)."""
    name, _, _, m = read_venture(directory)
    every = format_duration(m["cadence"])
    if decided_by_model(m):
        return (
            f"{name}: a model proposes at the nightly decision, or now with avsm decide {name}; a"
            f" report every {every}")
    asked = {n for n, spec in m["levers"].items() if not (spec["reversible"] or spec["delegated"])}
    sides = [f"{m['metric']} {'>' if way == 'above' else '<'} {format_number(bound)} (then "
             + (f"a person is asked before {lever} runs: it is irreversible" if lever in asked
                else f"{lever} runs") + ")"
             for _, way, bound, lever in controller_sides(m)]
    last, deadline = None, time.monotonic() + 3
    while last is None and time.monotonic() < deadline:
        with contextlib.suppress(Fail, sqlite3_errors()):
            db = open_ledger_ro(ledger_path(home))
            row = db.execute(
                "SELECT record FROM records WHERE record LIKE '%\"kind\":\"report\"%' AND "
                "record LIKE ? ORDER BY seq DESC LIMIT 1",
                (f'%"venture":"{name}"%',)).fetchone()
            db.close()
            last = json.loads(row[0]) if row else None
        if last is None:
            time.sleep(0.1)
    now = (f"; the first report says {format_number(last['value'])}"
           if last and last.get("value") is not None
           else "; no report yet")
    return f"{name} acts when {' or '.join(sides)}{now}, and a report comes every {every}"


def client_command(home=None):
    """The client as this user runs it, with --home where needed (across ssh: avsm --host HOST)."""
    return CALLER.get().command or program_command("avsm", home)


def user_cache():
    """The client's own cache: $XDG_CACHE_HOME/avsm, else ~/.cache/avsm."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "avsm")


LINK_MARK = "# written by `avsm link`"
LINK_WRAPPER = """#!{python} -SP
{mark}: {program} from {path}, its bytecode cached under $XDG_CACHE_HOME/avsm
# (else ~/.cache/avsm), in directories only you can read, even where PYTHONDONTWRITEBYTECODE is
# set; the bytecode runs only while it is of the file's contents now (PEP 552's source hash)
import importlib.util as u, marshal, os, sys
p = {path!r}
try:
    with open(p, "rb") as f:
        src = f.read()
except OSError as e:
    sys.stderr.write(f"avsm: {{p}}, which {{sys.argv[0]}} runs, cannot be read "
                     f"({{e.strerror}}): moved or removed? run link again from where "
                     f"it is now: python3 NEW/avsm.py link {target}\\n")
    sys.exit(77 if isinstance(e, PermissionError) else 66)
cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
sys.pycache_prefix = os.path.join(cache, "avsm", "pycache")
c, head = u.cache_from_source(p), u.MAGIC_NUMBER + b"\\3\\0\\0\\0" + u.source_hash(src)
try:
    with open(c, "rb") as f:
        code = f.read()
    code = marshal.loads(code[16:]) if code[:16] == head else None
except (OSError, ValueError, EOFError, TypeError):
    code = None
if code is None:
    code, was = compile(src, p, "exec"), os.umask(0o077)
    try:
        os.makedirs(os.path.dirname(c), exist_ok=True)
        with open(f"{{c}}.{{os.getpid()}}", "wb") as f:
            f.write(head + marshal.dumps(code))
        os.replace(f"{{c}}.{{os.getpid()}}", c)
    except OSError:
        pass                # not cached: compiled again at the next start
    finally:
        os.umask(was)
s = u.spec_from_file_location("avsm", p); m = u.module_from_spec(s); sys.modules["avsm"] = m
exec(code, m.__dict__); sys.exit(m.main())
"""


def cmd_link(home, args):
    """avsm link DIR: write DIR/avsm and DIR/avsmd, which start this file from cached bytecode
    (a script is compiled afresh at every run). A file there not written by link stays."""
    import importlib.util
    import py_compile
    if len(args) != 1 or args[0].startswith("-"):
        raise Fail(
            EX_USAGE,
            "usage: avsm link DIR (such as avsm link ~/bin): it writes DIR/avsm and DIR/avsmd")
    target = os.path.abspath(os.path.expanduser(args[0]))
    try:
        os.makedirs(target, exist_ok=True)
        paths = {program: os.path.join(target, program) for program in ("avsm", "avsmd")}
        for path in paths.values():
            if os.path.lexists(path):
                with open(path, "rb") as fh:
                    if LINK_MARK.encode() not in fh.read(512):
                        raise Fail(
                            EX_CANTCREAT,
                            f"{path} is there and avsm link did not write it (an installed avsm?): "
                            "remove it, or link into another directory")
        for program, path in paths.items():
            write_textfile(path, LINK_WRAPPER.format(python=sys.executable, mark=LINK_MARK,
                                                     program=program, path=AVSM_PATH,
                                                     target=target), 0o755, path + ".new")
    except OSError as err:
        raise Fail(EX_CANTCREAT, f"{err.filename or target} cannot be written: {err.strerror}; "
                                 f"link into a directory of yours, such as ~/bin") from None
    saved, sys.pycache_prefix = sys.pycache_prefix, os.path.join(user_cache(), "pycache")
    try:
        # the source's hash is checked at each start: a newer copy of like size and time is seen
        cache_bytecode(importlib.util.cache_from_source(AVSM_PATH))
        os.chmod(user_cache(), 0o700)     # made before: what is under it is this user's alone
    except (OSError, py_compile.PyCompileError):
        pass                          # the first start writes it
    finally:
        sys.pycache_prefix = saved
    on_path = target in [os.path.abspath(os.path.expanduser(d))
                         for d in os.environ.get("PATH", "").split(os.pathsep)
                         if d]
    out(f"wrote {target}/avsm and {target}/avsmd: they run {AVSM_PATH}, started from cached"
        " bytecode" + ("" if on_path else f"\n{target} is not on your PATH: add it "
                                          f"(PATH={target}:$PATH), or run {target}/avsm"))
    return EX_OK


# =============================================================================
# 16. Read from the ledger alone: avsm chart
# =============================================================================

CHART_USAGE = "usage: avsm chart VENTURE [--since DURATION|SEQ]"
CHART_KINDS = ("report", "action", "outcome", "ask", "approval", "denial", "resolved", "pause",
               "resume", "refusal")
CHART_WIDTH, CHART_HEIGHT = 960, 450
# the plot's edges, in pixels
CHART_LEFT, CHART_TOP, CHART_RIGHT, CHART_BOTTOM = 76, 104, 930, 366
CHART_PLOT_RECT = (f'x="{CHART_LEFT}" y="{CHART_TOP}" width="{CHART_RIGHT - CHART_LEFT}"'
                   f' height="{CHART_BOTTOM - CHART_TOP}"')
CHART_NOTE_MAX = 240          # characters of a record's summary a tooltip shows
CHART_MARKS = 120       # markers of one kind at most: more in the span are drawn as named groups
CHART_VALUE_MAX = sys.float_info.max / 4
CHART_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
                    43200, 86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 91 * 86400,
                    365 * 86400)
CHART_COLOURS = {"trusted": "#1f5fa8", "implausible": "#c0392b", "unconfirmed": "#d35400",
                 "failed": "#7f7f7f", "band": "#2e8b57", "bound": "#444444", "ok": "#2e7d32",
                 "not ok": "#c62828", "running": "#7f7f7f", "ask": "#7b3fa0", "grid": "#e4e4e4",
                 "text": "#222222", "paused": "#8a8a8a", "stuck": "#e0a000", "guard": "#b03060",
                 "mandate": "#555555"}
# one a lever, in order of first run
LEVER_COLOURS = ("#2e7d32", "#ef6c00", "#00838f", "#6d4c41", "#ad1457", "#827717")
# XML 1.0 cannot hold these even as &#..; (control characters, lone surrogates, U+FFFE/U+FFFF), and
# a bidi override in a tooltip would turn what a person reads around: each is written as \x.. or
# \u.... instead
XML_UNSAFE_CHARS = ("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e"
                    "\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def cmd_chart(home, args):
    """chart VENTURE [--since DURATION|SEQ]: an SVG of the metric, from the ledger alone."""
    name, since, rest = None, None, list(args)
    while rest:
        arg = rest.pop(0)
        value = since_option(arg, rest, "--since needs a duration or a record number (--since "
                             f"24h, --since 17); {CHART_USAGE}")
        if value is not None:
            since = value
        elif arg.startswith("-") and arg not in ("-", "--"):
            raise Fail(EX_USAGE, f"avsm chart does not take '{arg}'; {CHART_USAGE}")
        else:
            # what follows -- is a name, even one that begins with -
            names, rest = (rest, []) if arg == "--" else ([arg], rest)
            if len(names) > 1 or names and name is not None:
                raise Fail(EX_USAGE, f"avsm chart charts one venture at a time; {CHART_USAGE}")
            name = (names or [name])[0]
    if not name:
        raise Fail(EX_USAGE, CHART_USAGE)
    after, seconds = since_arg(since, "chart") if since is not None else (0, 86400)
    after, start = after or 0, time.time() - seconds if seconds else 0
    span = "in the last 24h (the default span; --since 0 charts the whole history)" \
        if since is None else f"in the last {format_duration(seconds)}" if seconds else \
        f"after #{after}" if after else "in the ledger"
    with contextlib.closing(open_ledger_ro(ledger_path(home))) as db:
        mandates, records, untimed = read_chart_records(db, name, after, start)
    if untimed:
        span += f" ({plural(untimed, 'record')} at a time no clock wrote left out)"
    if not mandates:
        refuse(f"no venture is named '{name}'; {client_command(home)} status lists them")
    if not any(r["kind"] == "report" for _, _, r in records):
        refuse(f"venture {name} has no reports {span}" +
               ("; give --since an earlier record or a longer duration, or --since 0 for the "
                "whole history" if since is not None
                else "; its first report comes at its first cadence once avsmd runs"))
    out(chart_svg(name, mandates, records, span))
    return EX_OK


def since_arg(text, command):
    """Return (the seq after which, or the seconds back from now) of `--since SEQ|DURATION`."""
    t = text.strip()
    if t.lstrip("#").isdigit() and t.isascii() and t.count("#") <= 1:
        return need_int(t, "a record number"), None
    try:
        return None, parse_duration(t)
    except ValueError as err:
        if re.fullmatch(r"[0-9]+[a-zA-Z0-9]*", t):
            raise Fail(EX_USAGE, f"avsm {command} --since {err}") from None
        raise Fail(EX_USAGE, f"avsm {command} --since takes a duration such as 10s, 24h or 7d, or a"
                             f" record number such as 17, not '{text}': --since 24h is the last 24"
                             " hours, --since 17 the records after #17") from None


def read_chart_records(db, name, after, start):
    """Return (the mandate records of venture `name`, its records after seq `after` and from
    `start`, how many were left out for a time no clock wrote)."""
    mandates = [(s, a, read_record(t, s)) for s, a, t in ledger_rows(
        db, f"SELECT seq, at, record FROM records WHERE {RECORD_KIND_SQL} = 'mandate' "
        "AND instr(record, ?) > 0 ORDER BY seq", (f'"venture":{json.dumps(name)}',))]
    if start > 0:
        after = max(after, first_seq_at(db, start, last_seq(db)) - 1)
    records, untimed, fullmatch, texts = [], 0, re.compile(TRUSTED_REPORT).fullmatch, {}
    for s, a, t in ledger_rows(db, "SELECT seq, at, record FROM records WHERE seq > ? AND at >= ?"
                               f" AND {RECORD_VENTURE_SQL} = ? ORDER BY seq", (after, start, name),
                               after):
        record = decode_record(t, fullmatch, s)
        if "summary" not in record:
            texts[s] = t                # a trusted report read fast, without its summary
        if record.get("venture") == name and record.get("kind") in CHART_KINDS:
            # to 9999-12-31T23:59:59Z: past it (or at no number) no clock wrote
            if isinstance(a, int) and 0 <= a <= 253402300799:
                records.append((s, a, record))
            else:
                untimed += 1
    if len(texts) <= CHART_RIGHT - CHART_LEFT:      # drawn one by one, each tooltip its summary
        records = [(s, a, json.loads(texts[s]) if s in texts else r) for s, a, r in records]
    return ([m for m in mandates if m[2].get("venture") == name and m[2].get("kind") == "mandate"],
            records, untimed)


def plural(n, noun):
    """Return `n noun`, the noun with an s unless n is 1."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def xml_text(value):
    """Return text from the ledger fit for SVG: past ASCII as a character reference (the output's
    encoding is then never in question)."""
    text = str(value).replace("\\", "\\\\")
    # the common case, plain ASCII, needs no pass of the pattern
    if not (text.isascii() and text.isprintable()):
        text = escape_controls(XML_UNSAFE_CHARS, text.replace("\n", "\\n").replace("\r", "\\r"))
    from html import escape
    text = escape(text).replace("&#x27;", "&#39;")
    return text.encode("ascii", "xmlcharrefreplace").decode("ascii")


def nice_step(span, most):
    """Return the least of 1, 2, 5 times a power of ten cutting `span` in at most `most` steps."""
    if not span > 0 or not math.isfinite(span):
        return 1.0
    base = 10.0 ** math.floor(math.log10(span / most))
    return next((base * k for k in (1, 2, 5, 10) if span / (base * k) <= most), base * 10)


def value_ticks(low, high):
    """Return (bottom, top, [(value, label)]) of the value axis, never padded past zero."""
    # the axis spans at most ±CHART_VALUE_MAX, whose span a float still holds; a report past it is
    # off the scale
    low, high = (min(max(v, -CHART_VALUE_MAX), CHART_VALUE_MAX) for v in (low, high))
    floor, ceiling = (0.0 if low >= 0 else -math.inf), (0.0 if high <= 0 > low else math.inf)
    if high - low <= 0:
        pad = max(abs(high) * 0.1, 1.0)
        low, high = low - pad, high + pad
    pad = (high - low) * 0.06
    low, high = low - pad, high + pad
    step = nice_step(high - low, 6)
    bottom, top = max(math.floor(low / step) * step, floor), min(
        math.ceil(high / step) * step, ceiling)
    decimals = max(0, -math.floor(math.log10(step)))
    ticks, k = [], 0
    while bottom + k * step <= top + step * 1e-9:
        v = bottom + k * step
        label = f"{v:.{decimals}f}" if abs(v) < 1e7 else f"{v:.3g}"
        ticks.append((v, "0" if float(label) == 0 and "e" not in label else label))
        k += 1
    return bottom, top, ticks


def time_ticks(t0, t1, most=8):
    """Return [(unix time, time label, date label or "")] at round local times from t0 to t1."""
    step = next((s for s in CHART_TIME_STEPS if (t1 - t0) / s <= most), None) or \
        365 * 86400 * nice_step((t1 - t0) / (365 * 86400), most)
    ticks, t, day = [], t0, None
    while t <= t1 and len(ticks) <= most + 2:
        # local time, so 12:00 is noon where the chart is read
        off = time.localtime(t).tm_gmtoff or 0
        at = math.ceil((t + off) / step) * step - off
        if at > t1:
            break
        local = time.localtime(at)
        date = time.strftime("%Y-%m-%d", local)
        if step >= 86400:
            ticks.append((at, date, ""))
        else:
            ticks.append((at, time.strftime("%H:%M:%S" if step < 60 else "%H:%M", local),
                          date if date != day else ""))
            day = date
        t = at + step
    return ticks


def svg_title(text):
    """Return `text` as an SVG <title>, escaped."""
    return f"<title>{xml_text(text)}</title>"


def svg_at(*values):
    """Return each coordinate as the chart writes it: a float to 0.1 px, an int as it is."""
    return [f"{v:.1f}" if isinstance(v, float) else v for v in values]


def svg_text(x, y, text, more=""):
    """Return an SVG <text> of `text`, escaped, at (x, y); `more`: its other attributes."""
    x, y = svg_at(x, y)
    return f'<text x="{x}" y="{y}"{more}>{xml_text(text)}</text>'


def svg_line(x1, x2, y1, y2, more):
    """Return an SVG <line> from (x1, y1) to (x2, y2); `more`: its other attributes."""
    x1, x2, y1, y2 = svg_at(x1, x2, y1, y2)
    return f'<line x1="{x1}" x2="{x2}" y1="{y1}" y2="{y2}"{more}/>'


def chart_tooltip(seq, at, record, more=""):
    """Return a marker's <title>: the record's seq, time, kind, summary and what came of it."""
    summary = str(record.get("summary", ""))
    if len(summary) > CHART_NOTE_MAX:
        summary = summary[:CHART_NOTE_MAX] + "..."
    return svg_title(f"#{seq} {chart_time(at)} {record.get('kind')}: {summary}{more}")


def chart_time(at):
    """Return unix time `at` as format_local_time does, the minute's text kept from one report to
    the next (a zone's offset changes only on a whole minute)."""
    head, tail = chart_minute(int(at) // 60)
    return f"{head}{int(at) % 60:02d}{tail}"


@functools.lru_cache(maxsize=4096)
def chart_minute(minute):
    """Return (YYYY-MM-DDTHH:MM:, +hh:mm) of the local minute `minute` (unix time / 60)."""
    text = format_local_time(minute * 60)
    return text[:17], text[19:]


def chart_number(value):
    """Return a report's value as a float to plot, or None (no reading, or not a finite number)."""
    if not is_number(value):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def on_line(record):
    """Whether a report is drawn on the chart's line: trusted, its value a finite number."""
    return report_status(record) == "trusted" and chart_number(record.get("value")) is not None


def report_status(record):
    """Return a report's status: trusted, unconfirmed, implausible or failed."""
    return record.get("status") or ("trusted" if record.get("plausible") else "implausible")


def chart_svg(name, mandates, records, span="in the ledger"):
    """Return the SVG text of venture `name`'s chart from its mandate records and its records in the
    span. Pure but for local time, which labels the axis."""
    reports, actions, asks = ([e for e in records if e[2]["kind"] == kind]
                              for kind in ("report", "action", "ask"))
    trusted = [e for e in reports if on_line(e[2])]
    apart = [e for e in reports if not on_line(e[2])]
    times = [a for _, a, _ in reports + actions + asks]
    first, last = min(times), max(times)
    # ten seconds at least: one report sits mid-chart
    middle, half = (first + last) / 2, max((last - first) / 2, 5) * 1.03
    t0, t1 = middle - half, middle + half
    # (from at, mandate seq, the parsed mandate or None: no bound)
    eras = [(at, seq, parsed_or_none(parse_mandate, r, seq)) for seq, at, r in mandates]
    ends = [e[0] for e in eras[1:]] + [math.inf]
    shown = [(max(at, t0), min(end, t1), seq, m)
             for (at, seq, m), end in zip(eras, ends) if at <= t1 and end > t0]
    values = [chart_number(r["value"]) for _, _, r in trusted] or \
        [v for v in (chart_number(r.get("value")) for _, _, r in apart) if v is not None] or [0.0]
    # not a re-arm level
    values += [bound for _, _, _, m in shown for _, _, bound, _ in controller_sides(m)]
    bottom, top, ticks = value_ticks(min(values), max(values))

    def x(at):
        return CHART_LEFT + (at - t0) / (t1 - t0) * (CHART_RIGHT - CHART_LEFT)

    # in halves: a report may hold up to ±1.8e308, and its distance to the axis overflows
    def y(value):
        return CHART_BOTTOM - (value / 2 - bottom / 2) / (top / 2 - bottom / 2) * (
            CHART_BOTTOM - CHART_TOP)

    metric = next((m["metric"] for _, _, _, m in reversed(shown) if m), None) or \
        reports[-1][2].get("metric") or "metric"
    # in local time, the day of the last left out when it is the first's
    start, end = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) for t in (first, last))
    counts = (f"{plural(len(trusted), 'trusted report')}, {len(apart)} marked apart, "
              f"{plural(len(actions), 'lever run')}, {plural(len(asks), 'ask')} {span}, "
              f"from {start} to {end[11:] if end[:10] == start[:10] else end}")
    spans = chart_spans(records, mandates, eras, t0, t1)
    # (at, what, label, seq, record) of each guard trip and each replaced mandate
    marks = sorted([(a, "guard", f"guard {r['guard']}", s, r) for s, a, r in records
                    if r["kind"] in ("pause", "ask") and r.get("guard")]
                   + [(a, "mandate", f"mandate #{s}", s, r) for s, a, r in mandates[1:]
                      if t0 <= a <= t1])
    levers = {lever: LEVER_COLOURS[i % len(LEVER_COLOURS)]
              for i, lever in enumerate(dict.fromkeys(str(r.get("lever")) for _, _, r in actions))}
    ended = {r.get("action"): (s, r) for s, _, r in records if r["kind"] == "outcome"}
    legend, height = chart_legend(trusted, apart, actions, asks, ended, shown, bottom, top, levers,
                                  spans, marks)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" height="{height}"'
        f' viewBox="0 0 {CHART_WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial,'
        f' sans-serif" font-size="12" fill="{CHART_COLOURS["text"]}">',
        svg_title(f"{name}: {metric}, {counts}"),
        f'<rect width="{CHART_WIDTH}" height="{height}" fill="#ffffff"/>',
        svg_text(CHART_LEFT, 24, f"{name}: {metric}", ' font-size="16" font-weight="bold"'),
        svg_text(CHART_LEFT, 44, counts),
        svg_text(CHART_LEFT, 62, chart_controller_words(shown)),
        f'<clipPath id="plot"><rect {CHART_PLOT_RECT}/></clipPath>']
    parts += chart_axes(metric, ticks, time_ticks(t0, t1), x, y, last)
    controller, labels = chart_controller(shown, x, y)
    parts += chart_stretches(spans, marks, x) + controller
    parts += chart_reports(trusted, apart, x, y, bottom, top, chart_breaks(reports, eras)) + labels
    parts += chart_markers(actions, asks, records, ended, levers, x) + legend
    return "\n".join(parts + ["</svg>"])


def chart_controller_words(shown):
    """Return the line naming the controller in force over the chart."""
    if not shown:
        return "no mandate in force over this span"
    _, _, seq, m = shown[-1]
    earlier = f" ({plural(len(shown) - 1, 'earlier mandate')} in the span)" if shown[1:] else ""
    if m is None:
        return f"mandate #{seq} does not read, so no bound is drawn{earlier}"
    ctl = m["controller"]
    drawn = "" if controller_sides(m) else ": no bound to draw"
    return f"controller (mandate #{seq}): {CONTROLLERS[ctl['kind']].describe(ctl)}{drawn}{earlier}"


def chart_axes(metric, ticks, times, x, y, last):
    """Return the SVG of the plot's frame, its value and time grid with labels, and the captions."""
    c = CHART_COLOURS
    parts = ['<g class="axes" font-size="11">']
    for value, label in ticks:
        parts += [svg_line(CHART_LEFT, CHART_RIGHT, y(value), y(value), f' stroke="{c["grid"]}"'),
                  svg_text(CHART_LEFT - 6, y(value) + 4, label, ' text-anchor="end"')]
    for at, label, date in times:
        parts += [svg_line(x(at), x(at), CHART_TOP, CHART_BOTTOM, f' stroke="{c["grid"]}"'),
                  svg_text(x(at), CHART_BOTTOM + 16, label, ' text-anchor="middle"')]
        if date:
            parts.append(svg_text(x(at), CHART_BOTTOM + 30, date, ' text-anchor="middle"'))
    middle, zone = (CHART_TOP + CHART_BOTTOM) // 2, time.localtime(last).tm_zone
    zone = f"UTC{format_local_time(last)[-6:]}" + (f", {zone}" if zone else "")
    return parts + [
        f'<rect {CHART_PLOT_RECT} fill="none" stroke="#999999"/>',
        svg_text(18, middle, metric,
                 f' text-anchor="middle" transform="rotate(-90 18 {middle})" font-size="12"'),
        svg_text((CHART_LEFT + CHART_RIGHT) // 2, CHART_BOTTOM + 48, f"local time ({zone})",
                 ' text-anchor="middle" font-size="12"'),
        svg_text(CHART_LEFT - 6, CHART_TOP - 26, "asks", ' text-anchor="end"'),
        svg_text(CHART_LEFT - 6, CHART_TOP - 8, "lever runs", ' text-anchor="end"'),
        "</g>"]


def chart_controller(shown, x, y):
    """Return (the SVG of each mandate's bound or band, the SVG of their labels on a white halo
    (a stroked copy drawn first: no renderer is relied on for paint-order))."""
    c, parts, labels = CHART_COLOURS, ['<g class="controller" clip-path="url(#plot)">'], []
    for start, end, seq, m in [e for e in shown if controller_sides(e[3])]:
        ctl = m["controller"]
        x1, x2 = x(start), x(end)
        title = svg_title(f"mandate #{seq}: " + CONTROLLERS[ctl["kind"]].describe(ctl))
        if ctl["kind"] == "band":
            parts += [f'<g class="band" stroke="{c["band"]}">{title}',
                      f'<rect x="{x1:.1f}" y="{y(ctl["high"]):.1f}" width="{x2 - x1:.1f}"'
                      f' height="{y(ctl["low"]) - y(ctl["high"]):.1f}" fill="{c["band"]}"'
                      ' fill-opacity="0.12" stroke="none"/>']
        else:
            parts.append(f'<g class="bound" stroke="{c["bound"]}">{title}')
        for _, way, bound, lever in controller_sides(m):
            parts.append(svg_line(x1, x2, y(bound), y(bound),
                                  ' stroke-width="1.5" stroke-dasharray="6 4"'))
            ly = y(bound) - 5 if way == "above" else y(bound) + 14
            labels.append(svg_text(x2 - 4, ly, f"{way} {format_number(bound)}: {lever}",
                                   ' text-anchor="end"'))
            if ctl.get("deadband"):
                rearm = bound - ctl["deadband"] if way == "above" else bound + ctl["deadband"]
                parts.append(svg_line(x1, x2, y(rearm), y(rearm),
                                      ' stroke-dasharray="2 3" stroke-opacity="0.7"'))
        parts.append("</g>")
    return parts + ["</g>"], [
        '<g class="controller-halo" font-size="11" fill="#ffffff" stroke="#ffffff" stroke-width="3"'
        ' stroke-linejoin="round">', *labels, "</g>",
        f'<g class="controller-labels" font-size="11" fill="{c["bound"]}">', *labels, "</g>"]


def chart_columns(trusted, x):
    """Return the trusted reports a chart draws, [(seq, at, record, column)]: past the plot's pixel
    columns, in each column its lowest, highest and last, so a spike keeps its shape."""
    if len(trusted) <= CHART_RIGHT - CHART_LEFT:
        return [(s, a, rec, None) for s, a, rec in trusted]
    drawn = []
    for held in chart_groups(trusted, x, most=math.inf):
        # trusted: a finite number each
        low, high = (pick(held, key=lambda e: e[2]["value"]) for pick in (min, max))
        for _, e in sorted({low[0]: low, high[0]: high}.items()):
            if e is not held[-1]:
                drawn.append((*e, False))
        info = (len(held), held[0][0], (low[0], low[2]["value"]), (high[0], high[2]["value"]))
        drawn.append((*held[-1], info))
    return drawn


def chart_breaks(reports, eras):
    """Return the seqs of the trusted reports before which the line breaks (two cadences unread)."""
    breaks, last, gap, era = set(), None, False, 0
    for s, a, rec in reports:
        while era + 1 < len(eras) and eras[era + 1][0] <= a:
            era += 1
        m = eras[era][2] if eras and eras[0][0] <= a else None
        gap = gap or last is not None and m and a - last > 2 * m["cadence"]
        if on_line(rec):
            if gap:
                breaks.add(s)
            gap = False
        last = a
    return breaks


def chart_reports(trusted, apart, x, y, bottom, top, breaks):
    """Return the SVG of the trusted reports and of the reports marked apart."""
    c = CHART_COLOURS
    drawn = chart_columns(trusted, x)
    points = [e for e in drawn if e[3] is not False]
    r = 3 if len(points) <= 300 else 2 if len(points) <= 1500 else 1.2
    xy = {s: svg_at(x(a), y(chart_number(rec["value"]))) for s, a, rec, _ in drawn}
    from bisect import bisect_right
    lines, breaks = [[]], sorted(breaks)
    for s, _, _, _ in drawn:
        if lines[-1] and bisect_right(breaks, s) > bisect_right(breaks, lines[-1][-1]):
            lines.append([])
        lines[-1].append(s)
    parts = [f'<g class="trusted-line" fill="none" stroke="{c["trusted"]}" '
             f'stroke-width="{1.5 if len(trusted) <= 1500 else 1}" stroke-linejoin="round" '
             'clip-path="url(#plot)">']
    parts += [f'<polyline points="{" ".join(",".join(xy[s]) for s in line)}"/>' for line in lines]
    parts += ["</g>", f'<g class="reports trusted" fill="{c["trusted"]}">']
    for s, a, rec, column in points:
        if column is None:
            title = chart_tooltip(s, a, rec)
        else:
            n, first, (lo_seq, lo), (hi_seq, hi) = column
            title = svg_title(
                f"#{s} {chart_time(a)}: {format_number(rec['value'])}; {n} reports here, "
                f"#{first} to #{s}: lowest {format_number(lo)} (#{lo_seq}), "
                f"highest {format_number(hi)} (#{hi_seq})")
        px, py = xy[s]
        parts.append(f'<circle class="report trusted" cx="{px}" cy="{py}" r="{r}">{title}</circle>')
    parts += ["</g>", '<g class="reports apart" stroke-width="1.8" fill="none">']
    for group in chart_groups(apart, x, lambda e: report_status(e[2])):
        s, a, rec = group[-1]
        status, value, px = report_status(rec), chart_number(rec.get("value")), x(a)
        colour = c.get(status, c["implausible"])
        if value is None or not bottom <= value <= top:
            w, edge, tip = (4, CHART_BOTTOM + 8, CHART_BOTTOM + 1) if value is None else \
                (5, CHART_TOP + 8, CHART_TOP + 1) if value > top else \
                (5, CHART_BOTTOM - 8, CHART_BOTTOM - 1)
            d = f"M{px - w:.1f},{edge} L{px:.1f},{tip} L{px + w:.1f},{edge} Z"
            status, colour = ("failed", c["failed"]) if value is None else \
                (status + " off-scale", colour)
        elif status == "unconfirmed":
            d = f"M{px - 4:.1f},{y(value):.1f} a4,4 0 1,0 8,0 a4,4 0 1,0 -8,0"
        else:
            py = y(value)
            d = (f"M{px - 4:.1f},{py - 4:.1f} L{px + 4:.1f},{py + 4:.1f} M{px - 4:.1f},{py + 4:.1f}"
                 f" L{px + 4:.1f},{py - 4:.1f}")
        title = group_title(group, f"{status} reports")
        parts.append(f'<path class="report {status}" d="{d}" stroke="{colour}">{title}</path>')
    return parts + ["</g>"]


def chart_spans(records, mandates, eras, t0, t1):
    """Return [(from, to, what, seq, record, the seq that ended it or None)] of the stretches a
    chart shades, as the fold ends them; one still open runs to t1."""
    spans, opened, m, directory = [], {}, None, None
    adopted = [(seq, at, {"kind": "mandate", "m": p, "directory": r.get("directory")})
               for (seq, at, r), (_, _, p) in zip(mandates, eras)]
    for s, a, r in sorted(records + adopted, key=lambda e: e[0]):
        kind, ended = r["kind"], []
        if kind == "mandate":
            ended = [k for k in opened if k[0] == "stuck" or r["directory"] != directory]
            m, directory = r["m"], r["directory"]
        elif kind == "pause" or kind == "refusal" and r.get("stuck"):
            opened.setdefault(
                ("paused", None) if kind == "pause" else ("stuck", r.get("side")), (a, s, r))
        elif kind == "resume":
            ended = [("paused", None)]
        elif kind == "report" and opened and on_line(r):      # only an open stretch can end
            ended = [("stuck", side)
                     for side, way, bound, _ in controller_sides(m)
                     if not crossed(way, bound, r["value"])]
        for key in [k for k in ended if k in opened]:
            start, seq, record = opened.pop(key)
            spans.append((start, a, key[0], seq, record, s))
    spans += [
        (start, t1, key[0], seq, record, None) for key, (start, seq, record) in opened.items()]
    return sorted(span for span in spans if span[1] >= t0)


def chart_groups(items, x, key=None, most=CHART_MARKS):
    """Return `items` [(seq, at, record)] as the groups a chart draws one marker each for; with a
    `key`, those of each key apart, in the order of their first seq."""
    if key:
        return sorted((g for k in dict.fromkeys(map(key, items))
                       for g in chart_groups([e for e in items if key(e) == k], x)),
                      key=lambda g: g[0][0])
    from itertools import groupby
    width = 1
    while True:
        groups = [list(g) for _, g in groupby(items, lambda e: int(x(e[1]) / width))]
        if len(groups) <= most:
            return groups
        width *= 2


def group_title(group, what, more=""):
    """Return the tooltip of a marker: its one record's, `more` after it, or for several records
    their seqs and times, how many."""
    if len(group) == 1:
        return chart_tooltip(*group[0][:3], more)
    (s1, a1), (s2, a2) = group[0][:2], group[-1][:2]
    return svg_title(f"#{s1}..#{s2}: {len(group)} {what} from {chart_time(a1)} to "
                     f"{chart_time(a2)}; avsm tail --since {s1 - 1} lists them")


def chart_stretches(spans, marks, x):
    """Return the SVG of the shaded stretches and of the labelled marks, drawn under the reports."""
    c, parts = CHART_COLOURS, ['<g class="stretches" font-size="10" clip-path="url(#plot)">']
    for start, end, what, seq, rec, until in spans:
        x1, x2 = x(start), x(end)
        label = "paused" if what == "paused" else f"stuck ({rec.get('stuck')})"
        label = label if x2 - x1 >= max(40, len(label) * 6 + 6) else ""  # inside it
        parts.append(
            '<g class="span'
            f' {what}">{chart_tooltip(seq, start, rec, f"; until #{until}" if until else "")}<rect'
            f' x="{x1:.1f}" y="{CHART_TOP}" width="{max(x2 - x1, 1):.1f}"'
            f' height="{CHART_BOTTOM - CHART_TOP}" fill="{c[what]}" fill-opacity="0.2"/>'
            + svg_text(x1 + 3, CHART_BOTTOM - (5 if what == "paused" else 17), label,
                       f' fill="{c[what]}"') + "</g>")
    for group in chart_groups([(m[3], m[0], m[4], m) for m in marks], x, lambda e: e[3][1]):
        at, what, label, seq, rec = group[-1][3]
        px, title = x(at), group_title(group, f"{what} marks")
        label = label if len(group) == 1 else f"{label} (+{len(group) - 1})"
        left = px + 3 + len(label) * 10 * 0.6 > CHART_RIGHT     # kept inside the plot
        parts.append(
            f'<g class="mark {what}" fill="{c[what]}">{title}'
            + svg_line(px, px, CHART_TOP, CHART_BOTTOM, f' stroke="{c[what]}" stroke-width="1.5"')
            + svg_text(px - 3 if left else px + 3, CHART_TOP + 12, label,
                       ' text-anchor="end"' if left else "") + "</g>")
    return parts + ["</g>"]


def chart_markers(actions, asks, records, ended, levers, x):
    """Return the SVG of each lever run and each ask, with its seq and what came of it (`ended`:
    {action seq: (seq, outcome record)})."""
    c = CHART_COLOURS
    answered = {r.get("ask"): (s, r) for s, _, r in records
                if r["kind"] in ("approval", "denial", "resolved")}
    parts = ['<g class="actions">']
    for group in chart_groups(actions, x, lambda e: str(e[2].get("lever"))):
        states = []
        for s, a, rec in group:
            o_seq, outcome = ended.get(s, (None, None))
            states.append("running" if outcome is None else "ok" if outcome.get("ok") else "failed")
            more = ("; no outcome in the ledger yet" if outcome is None else
                    f"; ended #{o_seq}: {'ok' if outcome.get('ok') else 'not ok'} "
                    f"({outcome.get('status')})")
        state = next(k for k in ("failed", "running", "ok") if k in states)
        colour, px, x1 = levers[str(rec.get("lever"))], x(a), x(group[0][1])
        edge = {"running": ' fill-opacity="0.4"',
                "ok": "",
                "failed": f' stroke="{c["not ok"]}" stroke-width="2.5"'}[state]
        title = group_title(group, f"runs of {rec.get('lever')}, {states.count('failed')} not ok, "
                                   f"{states.count('running')} with no outcome yet,", more)
        line = svg_line(px, px, CHART_TOP, CHART_BOTTOM, ' stroke-opacity="0.45"'
                        ' stroke-dasharray="3 3"') if px - x1 < 2 else ""
        parts.append(f'<g class="action {state}" stroke="{colour}" fill="{colour}">{title}{line}'
                     f'<path d="M{x1 - 6:.1f},{CHART_TOP - 16} L{px + 6:.1f},{CHART_TOP - 16} '
                     f'L{px:.1f},{CHART_TOP - 4} L{x1:.1f},{CHART_TOP - 4} Z"{edge}/></g>')
    parts += ["</g>", f'<g class="asks" fill="{c["ask"]}" stroke="{c["ask"]}">']
    for group in chart_groups(asks, x):
        s, a, rec = group[-1]
        a_seq, answer = answered.get(s, (None, None))
        more = (f"; still open: avsm approve {s} or avsm deny {s}" if answer is None else
                f"; answered by #{a_seq} {answer.get('kind')}")
        opened = sum(answered.get(e[0]) is None for e in group)
        px, py, x1 = x(a), CHART_TOP - 30, x(group[0][1])
        state, pale = ("open", "") if opened else ("answered", ' fill-opacity="0.35"')
        title = group_title(group, f"asks, {opened} still open (avsm asks lists them),", more)
        parts.append(f'<g class="ask {state}">{title}<path d="M{x1:.1f},{py - 7} '
                     f'L{px:.1f},{py - 7} L{px + 6:.1f},{py} L{px:.1f},{py + 7} L{x1:.1f},{py + 7} '
                     f'L{x1 - 6:.1f},{py} Z"{pale}/></g>')
    return parts + ["</g>"]


def chart_legend(trusted, apart, actions, asks, ended, shown, bottom, top, levers, spans, marks):
    """Return (the SVG of the legend under the time axis, the chart's height)."""
    c, thick, run = CHART_COLOURS, ' stroke-width="1.8"/>', '<path d="M0,-9 L12,-9 L6,0 Z" fill='
    box = '<rect x="0" y="-9" width="12" height="10" fill='
    values = [(chart_number(r.get("value")), r) for _, _, r in apart]
    statuses = {"failed" if v is None else report_status(r) if bottom <= v <= top
                else "off the scale" for v, r in values}
    kinds = {m["controller"]["kind"] for _, _, _, m in shown if controller_sides(m)}
    # True: ok, False: not ok, None: still running
    states = {bool(ended[s][1].get("ok")) if s in ended else None for s, _, _ in actions}
    items = [
        (trusted, f'<circle cx="6" cy="-4" r="3" fill="{c["trusted"]}"/>'
         + svg_line(-2, 14, -4, -4, f' stroke="{c["trusted"]}"'), "trusted report"),
        ("implausible" in statuses,
         f'<path d="M2,-8 L10,0 M2,0 L10,-8" stroke="{c["implausible"]}"{thick}', "implausible"),
        ("unconfirmed" in statuses,
         f'<circle cx="6" cy="-4" r="4" fill="none" stroke="{c["unconfirmed"]}"{thick}',
         "unconfirmed"),
        ("failed" in statuses,
         f'<path d="M2,0 L6,-7 L10,0 Z" fill="none" stroke="{c["failed"]}"{thick}',
         "failed (no value)"),
        ("off the scale" in statuses,
         f'<path d="M1,-1 L6,-8 L11,-1 Z" fill="none" stroke="{c["implausible"]}"{thick}',
         "off the scale"),
        ("band" in kinds, f'{box}"{c["band"]}" fill-opacity="0.25"/>', "band"),
        (kinds - {"band"}, svg_line(0, 12, -4, -4, f' stroke="{c["bound"]}" stroke-width="1.5"'
                                                   ' stroke-dasharray="4 2"'), "bound")]
    items += [(True, f'{run}"{colour}"/>', f"{lever} run") for lever, colour in levers.items()]
    items += [(False in states, f'{run}"#ffffff" stroke="{c["not ok"]}" stroke-width="2"/>',
               "not ok"),
              (None in states, f'{run}"#999999" fill-opacity="0.4"/>', "running"),
              (asks, f'<path d="M6,-10 L12,-4 L6,2 L0,-4 Z" fill="{c["ask"]}"/>',
               "ask (pale: answered)")]
    items += [(any(span[2] == what for span in spans),
               f'{box}"{c[what]}" fill-opacity="0.35"/>', what) for what in ("paused", "stuck")]
    items += [(any(k[1] == what for k in marks),
               svg_line(6, 6, -10, 2, f' stroke="{c[what]}" stroke-width="2"'), words)
              for what, words in (("guard", "guard trip"), ("mandate", "new mandate"))]
    parts, at, row = ['<g class="legend" font-size="11">'], CHART_LEFT, 0
    for glyph, words in [item[1:] for item in items if item[0]]:
        width = 36 + int(len(words) * 6.3)
        if at + width > CHART_WIDTH and at > CHART_LEFT:
            at, row = CHART_LEFT, row + 1
        parts.append(f'<g transform="translate({at} {CHART_HEIGHT - 14 + 18 * row})">{glyph}'
                     + svg_text(18, 0, words) + "</g>")
        at += width
    return parts + ["</g>"], CHART_HEIGHT + 18 * row


# =============================================================================
# 17. Read from the ledger alone: avsm doctor
# =============================================================================

DRIFT_LINES = 12         # lines of a mandate's diff shown at most by avsmd -t and doctor


def mandate_drift(in_force, on_disk, seq, path):
    """Return a short unified diff from mandate #seq's text to the file at `path`, or []."""
    if in_force == on_disk or in_force is None:
        return []
    import difflib
    lines = list(difflib.unified_diff(in_force.splitlines(), on_disk.splitlines(),
                                      f"mandate #{seq} (in force)", path, n=0, lineterm=""))
    shown_lines = [f"    {line}" for line in lines[:DRIFT_LINES]]
    if len(lines) > DRIFT_LINES:
        shown_lines.append(f"    ... {len(lines) - DRIFT_LINES} more lines of difference")
    return shown_lines or ["    (the two differ only in line endings or a last newline)"]


class Findings:
    """What doctor found, each check a fact shown as it is found (warn: the exit code stays)."""

    def __init__(self):
        # scan: doctor_ledger's one read of the ledger (LedgerScan)
        self.scan, self.found = None, []

    def add(self, level, text, fix=None, code=None, lines=()):
        self.found.append({"level": level, "text": text, "fix": fix, "code": code,
                           "lines": list(lines)})
        if not JSON:
            out(f"{'FAIL' if level == 'fail' else level:<5} {text}",
                *[f"      fix: {fix}"] * bool(fix), *[f"  {line}" for line in lines])

    def ok(self, text):
        self.add("ok", text)

    def note(self, text, lines=()):
        self.add("note", text, lines=lines)

    def fail(self, code, text, fix):
        self.add("fail", text, fix, code)

    def worst(self):
        codes = [f["code"] for f in self.found]
        return next((code for code in (EX_DATAERR, EX_CONFIG, EX_NOPERM, EX_CANTCREAT, EX_NOINPUT,
                                       EX_UNAVAILABLE) if code in codes), EX_OK)


def cmd_doctor(home, args):
    """doctor [--since SEQ:HASH] [--checkpoint ...] [--quick] | doctor --cut SEQ: change nothing
    (but the note of what a full check verified, in the client's cache, for --quick)."""
    since = cut = None
    rest = list(args)
    given = {"--checkpoint": None, "--allowed-signers": None, "--quick": False, "--origin": None}
    while rest:
        arg = rest.pop(0)
        if arg in ("--checkpoint", "--allowed-signers", "--origin") and rest:
            given[arg] = rest.pop(0)
            if arg == "--origin" and not re.fullmatch(r"avsm/[^\s:]+:/\S*", given[arg]):
                raise Fail(EX_USAGE, f"--origin {shown_text(given[arg])} is not a checkpoint's "
                                     "origin; write avsm/HOST:HOME as line 1 of the checkpoint "
                                     "says it, such as avsm/web1:/srv/avsm (the home this one "
                                     "moved from)")
        elif arg == "--quick":
            given[arg] = True
        elif arg == "--since" and rest:
            since = rest.pop(0)
            if not re.fullmatch(r"#?[0-9]+:[0-9a-fA-F]{16,64}", since):
                raise Fail(EX_USAGE, f"'{since}' is not an anchor; write SEQ:HASH with 16 to 64 hex"
                                     " digits of the hash, as avsm doctor prints it"
                                     " (1234:0123456789abcdef)")
            since = since.lstrip("#").lower()
            need_int(since.split(":")[0], "a record number")
        elif arg == "--cut" and rest:
            cut = rest.pop(0)
            if not cut.isdigit() or not cut.isascii() or int(cut) < 1:
                raise Fail(EX_USAGE, f"'{cut}' is not a record number; write avsm doctor --cut"
                                     " 1234")
            cut = need_int(cut, "a record number")
        elif arg == "--remote" or arg.startswith("--remote="):
            raise Fail(EX_USAGE, "avsm doctor has no --remote: avsmd opens no listener but its"
                                 " socket; run doctor on its machine")
        else:
            raise Fail(EX_USAGE, f"avsm doctor does not take '{arg}'; usage: avsm doctor [--since "
                                 "SEQ:HASH] [--checkpoint FILE|DIR|- [--allowed-signers FILE]] "
                                 "[--quick] [--origin avsm/HOST:HOME] | avsm doctor --cut SEQ")
    if cut:
        refuse(JSON and "avsm doctor --cut has no --json: it cuts the ledger and says so in words",
               EX_USAGE)
        return doctor_cut(home, cut)
    found = Findings()
    trust = checkpoint_trust(home, given["--allowed-signers"], given["--origin"])
    kept = read_kept_checkpoints(found, given["--checkpoint"], trust) \
        if given["--checkpoint"] else []
    if doctor_home(home, found):
        doctor_config(home, found)
        doctor_ledger(home, found, since, kept, given["--quick"], trust)
        if not doctor_mirror(home, found):
            doctor_mandates(home, found)
            doctor_daemon(home, found)
        doctor_bridge_keys(found)
    code = found.worst()
    show_facts({"findings": found.found},
               lambda _: ["all checks pass" if code == EX_OK else f"doctor exits {code}"])
    return code


def doctor_home(home, found):
    """The home: short enough for its socket, there, a directory, ours to read and write."""
    problem, start = socket_problem(home), program_command("avsmd", home)
    if problem:
        found.fail(EX_CONFIG, problem, "avsmd --home /a/shorter/path   (or set AVSMD_HOME)")
    if not os.path.lexists(home):
        found.fail(EX_NOINPUT, f"the home {home} is not there", f"{start}   (avsmd makes it)")
        return False
    if not os.path.isdir(home):
        found.fail(EX_CANTCREAT, f"the home {home} is not a directory",
                   f"mv {home} {home}.old && {start}")
        return False
    if not os.access(home, os.R_OK | os.W_OK | os.X_OK):
        found.fail(
            EX_NOPERM, f"the home {home} is not readable and writable by you", f"chmod 700 {home}")
        # what can be read is still checked (DOCTOR-01)
        return os.access(home, os.R_OK | os.X_OK)
    if not problem:
        found.ok(f"home {home}")
    # the home and each entry in it avsmd writes that others than its owner may read
    try:
        names = sorted(n for n in os.listdir(home) if n not in ("config.yaml", "keys"))
    except OSError:
        names = []                      # not ours to list: said above
    readable = []
    for path in [home] + [os.path.join(home, n) for n in names]:
        with contextlib.suppress(OSError):      # gone since listed
            mode = os.lstat(path).st_mode
            if mode & 0o077 and not stat.S_ISLNK(mode):     # a symlink's own mode means nothing
                readable.append(path)
    if readable:
        found.add("warn", f"others than you can read {', '.join(readable)} "
                  "(avsmd makes what it writes 0600 and 0700)",
                  f"chmod go-rwx {' '.join(readable)}")
    return True


def doctor_config(home, found):
    path = os.path.join(home, "config.yaml")
    try:
        cfg = read_config(home)[0]
        refuse(written_problem(cfg) and f"{path}: {written_problem(cfg)}")
        found.ok(f"config {path}" + ("" if os.path.exists(path) else " (not there: every default)"))
        refuse(checkpoint_problem(cfg["checkpoint"])
               and f"{path}: {checkpoint_problem(cfg['checkpoint'])}")
    except Fail as fail:
        found.fail(EX_CONFIG, str(fail), f"edit {path}, then {program_command('avsmd', home)} -t")
    keys = os.path.join(home, "keys")
    # looked at, never read: only the warden reads keys (KEYS-04)
    if os.path.exists(keys):
        st = os.stat(keys)
        if not stat.S_ISREG(st.st_mode):
            found.fail(EX_CONFIG,
                       f"{keys} is not a regular file; the warden cannot read keys from it",
                       f"rm -r {keys}, then write it again as NAME=value lines, mode 600")
        elif st.st_mode & 0o077:
            found.fail(EX_CONFIG,
                       f"{keys} is readable by others than you; the warden refuses to read it",
                       f"chmod 600 {keys}")
        else:
            found.ok(f"keys {keys} readable by you alone")


def doctor_ledger(home, found, since, kept, quick, trust):
    """The ledger: a database, every link of the chain, the triggers, every proof, checkpoints."""
    path, command = os.path.join(home, "ledger.db"), client_command(home)
    start = program_command("avsmd", home)
    aside = f"mv {path} {path}.broken   (avsmd then starts a new ledger"
    if not os.path.exists(path):
        found.note(f"no ledger yet at {path}; avsmd makes it at its first start")
        return
    if not os.path.isfile(path):         # a FIFO's open would wait for ever
        found.fail(
            EX_DATAERR,
            f"{path} is not a regular file (a directory, a FIFO or a device), so not a ledger",
            aside + ")")
        return
    if not os.access(path, os.R_OK | os.W_OK):
        found.fail(EX_NOPERM, f"{path} is not readable and writable by you", f"chmod 600 {path}")
    try:
        db = open_ledger_ro(path)
        triggers = {
            row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        count, first_at, last_at = db.execute(
            "SELECT count(*), min(at), max(at) FROM records").fetchone()
    except Fail as fail:
        # a transaction its writer was killed in: avsmd rolls it back
        found.fail(EX_DATAERR, str(fail), f"{start}   (its warden rolls the transaction back)")
        return
    except sqlite3_errors() as err:
        found.fail(
            EX_DATAERR,
            f"{path} is not a ledger avsm can read: {err}",
            f"{aside}; keep the old one for the record)")
        return
    missing = {"records_no_update", "records_no_delete", "records_chain"} - triggers
    if missing:
        found.fail(EX_DATAERR,
                   f"the ledger's triggers {', '.join(sorted(missing))} are gone: it is no longer"
                   " append-only",
                   f"{start}   (avsmd makes the triggers again at start)")
    own = home_checkpoints(home, found)
    after = verified_checkpoint(home, db, found, trust) if quick else None
    if quick and after is None:
        db.close()
        return
    snapshots = {} if quick else read_snapshots(home, found, db)
    try:
        scan = scan_ledger(db, wanted={c.seq for _, c in list(kept) + own}, after=after,
                           fold_at=snapshots)
    except Fail as fail:        # a closed file that is no ledger
        found.fail(fail.code, str(fail), f"{command} doctor once it is mended")
        return
    found.scan = scan
    if scan.broken:
        seq, why = scan.broken
        found.fail(EX_DATAERR, f"record #{seq} does not read: {why}", f"{command} doctor --cut "
                   f"{seq}   (with avsmd stopped; the whole ledger is backed up first)")
    else:
        span, size = (last_at or 0) - (first_at or 0), os.path.getsize(path)
        # its age in its largest whole unit (3 days, 5 hours); none under a minute
        age = next((plural(int(span // s), unit)
                    for unit, s in (("day", 86400), ("hour", 3600), ("minute", 60)) if span >= s),
                   None)
        growth = (f"about {size / (span / 86400) / 1e6:.2f} MB a day over its {age}"
                  " (the README's Sizing a host says what to expect)" if age
                  else "too young to say how fast it grows")
        if after:
            found.ok(f"ledger {path}: #{after[0] + 1} to #{scan.head[0]} chained and read, from"
                     f" checkpoint #{after[0]}, which a full doctor verified; the {after[0]}"
                     " records before it and every proof were not re-read (--quick): a full"
                     f" {command} doctor checks them")
        else:
            found.ok(f"ledger {path}: {count} records chained, {size / 1e6:.1f} MB, {growth}")
        doctor_closed(home, found, scan)
        head = ledger_head(db)
        if head:
            found.note(f"the ledger's head now is {head[0]}:{head[1][:16]}; keep it somewhere else"
                       f" (a note, another machine): {command} doctor --since"
                       f" {head[0]}:{head[1][:16]} later shows the ledger still holds it")
        problems = scan.problems
        if problems:
            seq, problem = problems[0]
            found.fail(EX_DATAERR,
                       f"{len(problems)} proof problem(s); first: action #{seq}: {problem}",
                       f"{command} why {seq}")
        elif not after:
            found.ok("every proof in the ledger re-checks")
        compare_snapshots(home, found, snapshots, scan.folds)
        held = doctor_checkpoints(home, found, kept, own, scan, db, trust)
        if held and not after and found.worst() != EX_DATAERR:
            remember_verified(home, held)
    if since:
        seq, prefix = since.split(":")
        row = row_at(db, "hash", int(seq))
        if row is None or not row[0].startswith(prefix):
            found.fail(EX_DATAERR, f"the ledger no longer holds the head {since}: " + (
                f"#{seq} now hashes to {row[0][:16]}" if row else "there is no such record"),
                f"compare with the backup you took the anchor from; {command} tail --since"
                f" {max(0, int(seq) - 1)}")
        else:
            found.ok(f"the ledger still holds {since}")
    db.close()


def doctor_closed(home, found, scan):
    """The closed files of avsm rotate, read with ledger.db as one chain; those not there."""
    closed = closed_files(home)
    if closed:
        found.ok(f"{len(closed)} closed ledger file(s) in {home}/ledgers, #{closed[0][0]} to"
                 f" #{closed[-1][1]}, read with ledger.db as one chain: {scan.count} records")
    for lo, hi in scan.gaps:
        found.note(f"records #{lo} to #{hi} are in a closed ledger file that is not in"
                   f" {home}/ledgers (named by its seqs, ...-{hi:012d}.db): the chain across it and"
                   " the premises in it are not checked; put it back there for a full check")


def read_snapshots(home, found, db):
    """Return {seq: its bytes} of the snapshots the ledger names that this avsm.py folded."""
    kept, unread = {}, 0
    for at, record in snapshot_records(db):
        try:
            kept[record["seq"]] = read_snapshot(home, record)
        except Fail as fail:
            unread += fail.code == EX_NOINPUT
            if fail.code != EX_NOINPUT:
                found.fail(EX_DATAERR, f"snapshot #{record['seq']} (record #{at}): {fail}",
                           f"rm {snapshot_path(home, record['seq'])}   (a start ignores it and"
                           " folds from an older snapshot or the first record)")
    if unread:
        found.note(f"{unread} snapshot(s) the ledger names are not compared: gone (avsmd keeps"
                   f" {SNAPSHOTS_KEPT}) or another avsm.py's")
    return kept


def compare_snapshots(home, found, snapshots, folds):
    """Each snapshot must be the ledger's own fold to its seq (65)."""
    for seq, snapshot in sorted(snapshots.items()):
        path = snapshot_path(home, seq)
        if seq not in folds:        # folded in a closed file not there: doctor_closed says so
            continue
        if folds[seq].encode() == snapshot:
            found.ok(f"snapshot #{seq} ({path}) is the ledger's fold to #{seq}")
        else:
            found.fail(EX_DATAERR, f"snapshot #{seq} ({path}) is not the ledger's fold to #{seq}",
                       f"rm {path}   (a start then folds from an older snapshot or the first"
                       " record)")


CheckpointTrust = collections.namedtuple("CheckpointTrust",
                                         "home origin homes allowed namespace principal key")


def checkpoint_trust(home, allowed, origin):
    """How doctor judges a checkpoint: origins, allowed_signers, namespace, principal, key."""
    try:
        spec = read_config(home)[0]["checkpoint"]
    except Fail:                    # the config does not hold: the defaults
        spec = parse_config("")["checkpoint"]
    ours = checkpoint_origin(home)
    homes = {origin_home(ours, True)} | ({origin_home(origin, False)} if origin else set())
    allowed = allowed or spec["allowed_signers"]
    return CheckpointTrust(home, ours, homes, allowed and os.path.expanduser(allowed),
                           spec["namespace"], spec["principal"], spec["key"])


def origin_home(origin, ours):
    """Return (HOST, HOME) of an origin avsm/HOST:HOME; HOME resolved when it is this host's own."""
    host, _, where = origin.removeprefix("avsm/").partition(":")
    return host, os.path.realpath(where) if ours else where


def is_our_origin(origin, trust):
    """Whether a checkpoint's origin names this home (or the one --origin names), by any path."""
    host, where = origin_home(origin, False)
    return (host, where) in trust.homes or host == origin_home(trust.origin, False)[0] and \
        origin_home(origin, True) in trust.homes


UNTRUSTED_FIX = "trust no checkpoint but those your own hosts signed; compare with your own copy"


def vouch_checkpoint(found, name, c, trust, allowed):
    """Whether checkpoint `c` may vouch for this home's ledger: its origin and its signer."""
    if not is_our_origin(c.origin, trust):
        found.fail(EX_DATAERR, f"checkpoint {name} is of {shown_text(c.origin)}, and this home "
                               f"is {trust.origin}: a checkpoint vouches only for the home that "
                               "wrote it",
                   "check it with the home it names; if this home moved from there: "
                   f"{client_command(trust.home)} doctor --origin {shown_text(c.origin)}")
        return False
    if c.signature is None:
        return True
    if allowed is None:
        found.note(f"checkpoint {name} is signed, and its signature is not verified: no "
                   f"allowed_signers file is named (checkpoint: {{allowed_signers: FILE}} in "
                   "config.yaml, or --allowed-signers)")
        return True
    try:
        if not os.path.isfile(allowed):
            raise Fail(EX_NOINPUT, f"it is signed, and {allowed} is not there to verify it with; "
                                   "name an allowed_signers file with --allowed-signers FILE")
        who = verify_text(c.text, c.signature, allowed, trust.namespace, trust.principal)
    except Fail as fail:
        found.fail(fail.code, f"checkpoint {name}: {fail}",
                   "install openssh-client" if fail.code == EX_UNAVAILABLE else
                   f"write lines `PRINCIPAL namespaces=\"{trust.namespace}\" KEY` of the hosts' "
                   "signing keys in it" if fail.code == EX_NOINPUT else
                   UNTRUSTED_FIX)
        return False
    found.ok(f"checkpoint {name}: signed by {shown_text(who)} ({allowed}, namespace "
             f"{trust.namespace})"
             + ("" if trust.principal else "; config.yaml names no principal, so any key there is "
                                           "taken: name this home's signer with checkpoint: "
                                           f"{{principal: {shown_text(who)}}}"))
    return True


def read_kept_checkpoints(found, where, trust):
    """Return [(name, Checkpoint)] of the checkpoints kept in FILE, DIR or - that may vouch for
    this home. One missing is 66, one that does not read, vouch or verify 65, no ssh-keygen 69."""
    allowed = trust.allowed or os.path.expanduser("~/.ssh/allowed_signers")
    names = [where] if where == "-" or not os.path.isdir(where) else [
        os.path.join(where, n) for n in sorted(os.listdir(where))
        if not n.endswith(".sig") and n[0] != "."]
    kept = []
    for name in names:
        try:
            if name == "-":
                data = (CALLER.get().stdin or sys.stdin).read(CHECKPOINT_MAX + 1)
                name, sig = "on standard input", None
                if len(data) > CHECKPOINT_MAX:
                    raise OSError(0, f"it is longer than {CHECKPOINT_MAX // 1024} KiB")
            else:       # regular files, bounded: a FIFO or /dev/zero is one refusal, not a hang
                data = read_small_file(name, CHECKPOINT_MAX).decode()
                sig = read_small_file(name + ".sig", CHECKPOINT_MAX).decode().strip() \
                    if os.path.lexists(name + ".sig") else None
            checkpoint = parse_checkpoint(data, name, sig)
            if checkpoint.signature is None:
                found.note(
                    f"checkpoint {name} is unsigned: it shows a rewrite only while it is kept where"
                    " the ledger's writer cannot reach it")
            if vouch_checkpoint(found, name, checkpoint, trust, allowed):
                kept.append((name, checkpoint))
        except (OSError, UnicodeDecodeError) as err:
            found.fail(EX_NOINPUT if isinstance(err, FileNotFoundError) else EX_DATAERR,
                       f"checkpoint {name} cannot be read: {getattr(err, 'strerror', None) or err}",
                       "name the file, or the directory, you kept it in")
        except Fail as fail:
            found.fail(fail.code, f"checkpoint {name}: {fail}", UNTRUSTED_FIX)
    return kept


def home_checkpoints(home, found=None):
    """Return [(path, Checkpoint)] of every checkpoint in HOME/checkpoints, by seq."""
    directory, own = os.path.join(home, "checkpoints"), []
    names = sorted(n for n in os.listdir(directory) if re.fullmatch(r"\d+\.txt", n)) \
        if os.path.isdir(directory) else []
    for name in names:
        path = os.path.join(directory, name)
        try:        # regular files, bounded: a FIFO is one note, not a hang
            data = read_small_file(path, CHECKPOINT_MAX).decode()
            own.append((path, parse_checkpoint(data, path)))
        except (OSError, UnicodeDecodeError, Fail) as err:
            if found:
                found.note(f"checkpoint {path} does not read ({err}), so it is not compared")
    own.sort(key=lambda pair: pair[1].seq)
    if own:
        own[-1] = (own[-1][0], with_signature(*own[-1]))
    return own


def with_signature(path, c):
    """Return checkpoint `c` with the signature in `path`.sig, if there is one that reads."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        c = c._replace(
            signature=read_small_file(path + ".sig", CHECKPOINT_MAX).decode().strip() or None)
    return c


def record_hash(db, seq):
    """Return the hash of record #seq from its contents (not its hash column), or None."""
    row = row_at(db, "prev, at, record", seq)
    return row and chain_hash(row[0], seq, row[1], row[2])


def doctor_checkpoints(home, found, kept, own, scan, db, trust):
    """Check the home's own checkpoints and each kept one against the chain scan read; return the
    home's newest checkpoint when it held, else None."""
    newest, command = own[-1] if own else None, client_command(home)
    if newest is None:
        found.note(
            f"no checkpoint in {home}/checkpoints yet: avsmd writes one at its start, daily, and"
            " after each irreversible action")
    elif newest[1].signature:
        found.ok(f"checkpoints: the newest, of #{newest[1].seq}, is signed; keep copies elsewhere "
                 f"({command} checkpoint)")
    elif trust.key:
        found.fail(EX_CONFIG, f"the newest checkpoint, of #{newest[1].seq}, is unsigned, though "
                              f"config.yaml names the key {trust.key}",
                   f"ssh-keygen -Y sign -f {trust.key} -n {trust.namespace} < /dev/null   "
                   "(says why it cannot sign)")
    else:
        found.note("checkpoints are written unsigned: config.yaml names no key; sign them with"
                   " checkpoint: {key: /path/to/ssh/key} (the README's Checkpoints)")
    if scan.broken:
        return None
    # the home's own are checked too (a forger who rewrote the ledger must rewrite these as well);
    # one of another origin is of a home moved here: compared all the same, it vouches for nothing
    moved = [(n, c) for n, c in own if not is_our_origin(c.origin, trust)]
    if moved:
        first = shown_text(moved[0][1].origin)
        found.note(f"{len(moved)} checkpoint(s) in {home}/checkpoints, the first "
                   f"{moved[0][0]}, are of {first}, not {trust.origin} (a home moved, or a host "
                   f"renamed): compared all the same; {command} doctor --origin "
                   f"{first} takes them as this home's")
    vouched = [(n, c) for n, c in own if (n, c) not in moved
               and vouch_checkpoint(found, n, c, trust, trust.allowed if n == newest[0] else None)]
    kept = list(kept) + [(n, c) for n, c in vouched + moved
                         if not any(k.seq == c.seq and k.hash == c.hash for _, k in kept)]
    hashes = dict(scan.hashes)
    for _, c in kept:
        if c.seq not in hashes and c.seq <= scan.head[0]:
            hashes[c.seq] = record_hash(db, c.seq)
    holds = [c.seq for _, c in kept if hashes.get(c.seq) == c.hash]
    for name, c in sorted(kept, key=lambda k: k[1].seq):
        got, what = hashes.get(c.seq), f"checkpoint {name} is of #{c.seq}"
        if got == c.hash:
            found.ok(
                f"checkpoint {name}: the ledger still holds #{c.seq}:{c.hash[:16]}, and the chain"
                " from it to the head")
        elif c.seq > scan.head[0]:
            found.fail(
                EX_DATAERR,
                f"{what}, and the ledger ends at #{scan.head[0]}: records"
                " it held were cut, or the ledger was replaced",
                "restore the ledger from a backup that holds them")
        elif got is None and any(lo <= c.seq <= hi for lo, hi in scan.gaps):
            said = f"{what}, which is in a closed ledger file that is not in {home}/ledgers"
            if (name, c) in vouched + moved:    # the home's own, of a file keep: let go
                found.note(said + ": not checked")
            else:
                found.fail(EX_NOINPUT, said, f"put the file of #{c.seq} back in {home}/ledgers,"
                                             f" then {command} doctor")
        elif got is None:
            found.fail(EX_DATAERR, f"{what}, and the ledger holds no "
                                   f"record #{c.seq} (its first is #1): a made-up checkpoint, or "
                                   "a ledger replaced", UNTRUSTED_FIX)
        else:
            below = max((seq for seq in holds if seq < c.seq), default=None)
            found.fail(
                EX_DATAERR,
                f"checkpoint {name}: #{c.seq} should hash to {c.hash[:16]}, and the ledger's"
                f" #{c.seq} hashes to {got[:16]}: the ledger was rewritten at or before #{c.seq}"
                + (f" and after #{below}, which it still holds" if below else ""),
                f"restore the ledger from a backup; {command} tail --since"
                f" {below or 0} shows what it holds now")
            # the first that no longer matches names the rewrite; the later follow from it
            break
    held = newest in vouched and hashes.get(newest[1].seq) == newest[1].hash
    return newest[1] if held else None


def verified_path(home):
    return os.path.join(user_cache(), "verified", text_sha256(os.path.realpath(home))[:16])


def remember_verified(home, checkpoint):
    """Note the newest checkpoint a full doctor verified, for --quick, in the client's own cache:
    doctor changes nothing in the home (DOCTOR-02). The note grants nothing by itself."""
    if CALLER.get().read_only:
        return
    path = verified_path(home)
    was = os.umask(0o077)
    try:
        with contextlib.suppress(OSError):  # --quick then says no full doctor verified one
            os.makedirs(os.path.dirname(path), exist_ok=True)
            for directory in (user_cache(), os.path.dirname(path)):
                os.chmod(directory, 0o700)
            write_textfile(path, f"{checkpoint.seq} {checkpoint.hash}\n", 0o600, path + ".new")
    finally:
        os.umask(was)


def verified_checkpoint(home, db, found, trust):
    """Return (seq, hash) of the checkpoint a full doctor verified, checked again, or None once
    the failure saying why --quick cannot start from it is written."""
    path, doctor = verified_path(home), client_command(home) + " doctor"
    try:
        st = os.stat(path)
        with open(path) as fh:
            seq, digest = fh.read(200).split()
        seq = int(seq)
    except (OSError, ValueError):
        found.fail(
            EX_NOINPUT,
            "--quick: no full doctor has verified a checkpoint of this ledger yet",
            f"{doctor}   (a full check; --quick then checks from its newest checkpoint on)")
        return None
    full = f"{doctor}   (a full check says where the ledger changed, and notes it again)"
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        found.fail(EX_DATAERR, f"--quick refused: {path} can be written by others than you, so it "
                               "proves nothing", f"rm {path}; then {full}")
        return None
    name, c = os.path.join(home, "checkpoints", f"{seq:012d}.txt"), None
    with contextlib.suppress(OSError, UnicodeDecodeError, Fail):
        c = parse_checkpoint(read_small_file(name, CHECKPOINT_MAX).decode(), name)
    if c is None or c.hash != digest or c.seq != seq:
        found.fail(EX_DATAERR, f"--quick refused: {path} names checkpoint #{seq}, and {name} "
                               + ("is not there" if c is None else
                                  f"holds {c.hash[:16]}, not {digest[:16]}")
                               + ": it was not noted by a full doctor, or the home changed since",
                   full)
        return None
    c = with_signature(name, c)
    if c.signature is None and trust.key:
        found.fail(EX_DATAERR, f"--quick refused: checkpoint #{seq} is unsigned, though "
                               f"config.yaml names the key {trust.key}", full)
        return None
    if not vouch_checkpoint(found, name, c, trust, trust.allowed):
        return None
    now = record_hash(db, seq)          # its contents hashed again, not its hash column
    if now != digest:
        found.fail(
            EX_DATAERR,
            f"--quick refused: checkpoint #{seq}, which a full doctor verified, no longer matches"
            " the ledger ("
            + ("it holds no such record"
               if now is None
               else f"#{seq} now hashes to {now[:16]}, not {digest[:16]}")
            + ")",
            f"{doctor}   (a full check says where the ledger changed)")
        return None
    return seq, digest


def doctor_mandates(home, found):
    try:
        scan = found.scan               # doctor_ledger's one read of the ledger listed them
        adopted = (scan.adopted.values() if scan and scan.adopted is not None
                   else adopted_mandates(home))
    except (sqlite3_errors(), ValueError, Fail) as err:
        found.note(
            f"the adopted mandates cannot be listed from a ledger that does not read ({err})")
        return
    uid = os.stat(home).st_uid          # avsmd runs as the home's owner
    command = client_command(home)
    for name, directory, seq, paused, in_force in adopted:
        if not os.path.isdir(directory or ""):
            if paused:
                found.note(f"venture {name} is paused and its directory {directory} has gone")
            else:
                found.fail(EX_NOINPUT, f"venture {name}: its directory {directory} is not there",
                           f"put {directory} back, or {command} pause {name}")
            continue
        path, add = os.path.join(directory, "mandate.yaml"), f"{command} add {directory}"
        try:
            text = read_mandate_file(path)
            m = parse_mandate(text, path, directory)
            unsafe = owner_problem(directory, venture_commands(m), uid)
            drift = mandate_drift(in_force, text, seq, path)
            if unsafe:
                found.fail(EX_CONFIG, f"venture {name}: {unsafe.why}; "
                                      "avsmd starts no program of it",
                           f"{unsafe.fix}, then {add}")
            elif drift:
                found.note(
                    f"venture {name}: {path} holds but differs from mandate #{seq} in force; "
                    f"{add} applies it", drift)
            else:
                found.ok(f"venture {name}: {path} holds, the same as mandate #{seq} in force")
        except OSError as err:
            denied = isinstance(err, PermissionError)
            found.fail(EX_NOPERM if denied else EX_NOINPUT,
                       f"venture {name}: {path} cannot be read: {err.strerror}",
                       f"chmod u+r {path}" if denied else f"put {path} back, then {add}")
        except Fail as fail:
            found.fail(EX_CONFIG, f"venture {name}: {fail}", f"edit {path}, then {add}")


def doctor_bridge_keys(found):
    """This user's authorized_keys: a key forcing avsm's bridge without restrict gets a pty.
    line ::= [option (',' option)*] keytype key [comment]"""
    path = os.path.expanduser("~/.ssh/authorized_keys")
    try:
        text = read_small_file(path, 1024 * 1024).decode("utf-8", "replace")
    except OSError:
        return
    for number, line in enumerate(text.splitlines(), 1):
        field = re.match(r'(?:[^\s"]|"(?:[^"\\]|\\.)*")*', line.strip()).group()
        options = re.findall(r'(?:[^,"]|"(?:[^"\\]|\\.)*")+', field)     # quoted commas split none
        names = {option.split("=", 1)[0].lower() for option in options}
        command = next((o.split("=", 1)[1] for o in options
                        if o.lower().startswith("command=")), "")
        if "avsm" not in command or not re.search(r"\bbridge\b", command):
            continue
        undone = sorted(names & {"pty", "port-forwarding", "agent-forwarding", "x11-forwarding",
                                 "user-rc"})
        if "restrict" not in names:
            why = "its line lacks restrict, so ssh may give it a pty and forwarding"
        elif undone:
            why = f"its line gives back {', '.join(undone)} after restrict"
        else:
            continue
        found.note(f"{path}:{number}: this key forces avsm's bridge, and {why}; fix it: begin "
                   "the line with restrict, as restrict,command=\"... bridge\" ssh-ed25519 ...")


def doctor_mirror(home, found):
    """Return whether the home is a witness's copy of a host's ledger, and say so."""
    try:
        with open(os.path.join(home, MIRROR_MARK)) as fh:
            host = shown_text(fh.read().strip())[:120]
    except (OSError, UnicodeDecodeError):
        return False
    found.note(f"this home is a witness's copy of {host}'s ledger (avsm fleet witness --mirror): "
               "its ventures' directories and its avsmd are there, not checked here; "
               f"avsm --host {host} doctor checks them")
    return True


def doctor_daemon(home, found):
    """The lock file, the socket, the daemon answering, and no second avsmd on the home."""
    import socket
    lock, sock = os.path.join(home, "avsmd.lock"), os.path.join(home, "sock")
    start = program_command("avsmd", home)
    if os.path.lexists(lock) and not os.path.isfile(lock):
        found.fail(
            EX_CANTCREAT, f"{lock} is not a regular file", f"rm -r {lock}   (avsmd makes it again)")
    daemons = avsmd_processes(home)
    if len(daemons) > 1:
        found.fail(
            EX_UNAVAILABLE,
            f"{len(daemons)} avsmd processes run on {home}: pids {', '.join(map(str, daemons))}",
            f"kill {' '.join(map(str, daemons[1:]))}   (keep one)")
    holder = lock_holder(home) if os.path.isfile(lock) else None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(DOCTOR_PROBE_MOST)
    began = time.monotonic()
    try:
        conn.connect(sock)
        send_line(conn, {"v": 1, "cmd": "health", "args": {}})
        reader, answer = LineReader(), []
        while not any("exit" in m for m in answer):
            data = conn.recv(65536)
            if not data:
                break
            answer += reader.feed(data)
        lines = [m["out"] for m in answer if "out" in m]
        found.ok(f"avsmd answers on {sock}" + (f": {lines[0]}" if lines else ""))
        took = time.monotonic() - began
        if took > DOCTOR_PROBE:
            found.note(f"avsmd took {took:.0f} s to answer doctor's health request (a busy warden "
                       f"answers within {DOCTOR_PROBE} s): a long write, or a host short of CPU")
        for problem in [m["err"] for m in answer if "err" in m]:
            found.fail(EX_NOPERM,
                       problem,
                       f"free space or fix permissions under {home}; avsmd tries again every 30 s")
    except TimeoutError:                # it took the request: slow or stuck, not gone
        who = f"avsmd (pid {holder})" if holder else "avsmd"
        found.fail(EX_UNAVAILABLE, f"{who} took doctor's health request on {sock} but gave no "
                                   f"answer in {DOCTOR_PROBE_MOST} s: it runs, stuck or very busy",
                   f"{client_command(home)} doctor again in a minute; if it stays silent: kill "
                   f"{holder or 'its pid'} && {start}")
    except OSError:
        if holder:
            found.fail(
                EX_UNAVAILABLE,
                f"avsmd (pid {holder}) is running but its socket {sock} is missing",
                f"wait a second (it makes the socket again); if it stays missing: kill {holder} &&"
                f" {start}")
        else:
            found.fail(EX_UNAVAILABLE, f"no avsmd is running on {home}", start)
    finally:
        conn.close()


DOCTOR_PROBE = 5        # seconds within which avsmd answers doctor's health request, all being well
DOCTOR_PROBE_MOST = 30  # ... and doctor waits this long before it calls a daemon that took it stuck


def avsmd_processes(home):
    """Return the pids of avsmd processes (not wardens) whose home is `home`."""
    target = os.path.realpath(home)
    pids = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
            if not is_avsmd_argv(argv):
                continue
            given = take_option(argv, "--home")[0]
            if given is None:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    env = dict(v.split(b"=", 1) for v in fh.read().split(b"\0") if b"=" in v)
                given = (env.get(b"AVSMD_HOME") or b"").decode() or None
            if given and not os.path.isabs(given):
                given = os.path.join(os.readlink(f"/proc/{entry}/cwd"), given)
            if given and os.path.realpath(given) == target:
                pids.append(int(entry))
        except (OSError, Fail):         # gone since listed, or a --home with no value
            continue
    # the roles process is avsmd's fork, not a second avsmd
    return sorted(p for p in pids if proc_stat(p, 1) not in pids)


def is_avsmd_argv(argv):
    """Whether a command line runs the daemon: avsmd, `avsm.py avsmd`, or its cached start."""
    # python [-S] [-P] [-Xpycache_prefix=DIR] -c LOAD_AVSM PATH PROGRAM ...
    if LOAD_AVSM in argv[1:6]:
        i = argv.index(LOAD_AVSM)
        return argv[i - 1] == "-c" and argv[i + 2:i + 3] == ["avsmd"]
    for i, arg in enumerate(argv[:3]):
        # python -SP DIR/avsmd: a wrapper of avsm link, by its #! line
        if i and arg.startswith("-"):
            continue
        stem = os.path.basename(arg).split(".")[0]
        if stem == "avsmd":
            return True
        if not stem.startswith("python") and stem != "avsm":
            return False
    return False


def doctor_cut(home, seq):
    """--cut SEQ, with avsmd stopped: back the ledger up, then cut it before SEQ (open point 11)."""
    import shutil
    import sqlite3
    holder = lock_holder(home)
    if holder:
        raise Fail(
            EX_TEMPFAIL, f"avsmd (pid {holder}) is running on {home}; stop it first, then cut")
    path = ledger_path(home)
    with contextlib.closing(open_ledger_ro(path)) as db:
        first, last = db.execute("SELECT min(seq), max(seq) FROM records").fetchone()
    if seq > (last or 0):
        refuse(f"#{seq} is past the last record (#{last or 0}); nothing to cut")
    if seq <= first != 1:
        refuse(f"#{seq} is in a closed ledger file of {home}/ledgers, which avsm"
               " rotate made read-only; --cut cuts only ledger.db, from"
               f" #{first + 1}")
    stamp = int(time.time())
    backup = f"{path}.before-cut-{seq}-{stamp}"
    shutil.copy2(path, backup)
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.execute("BEGIN IMMEDIATE")
    with db:                # then COMMIT, or ROLLBACK at an exception
        for name in ("records_no_update", "records_no_delete", "records_chain"):
            db.execute(f"DROP TRIGGER IF EXISTS {name}")
        db.execute("DELETE FROM records WHERE seq >= ?", (seq,))
        for statement in LEDGER_TRIGGERS:
            db.execute(statement)
    db.close()
    write_textfile(os.path.join(home, "cut"), f"{seq} {backup}\n", 0o600)
    out(f"backed up the whole ledger to {backup}",
        f"cut the ledger just before #{seq}: records #{seq}..#{last} are only in the backup now")
    # the checkpoints of records cut name what only the backup holds: kept beside it, not compared
    aside = os.path.join(home, "checkpoints", f"before-cut-{seq}-{stamp}")
    cut = [name for name, c in home_checkpoints(home) if c.seq >= seq]
    for name in cut:
        os.makedirs(aside, mode=0o700, exist_ok=True)
        for each in (name, name + ".sig"):
            if os.path.exists(each):
                os.replace(each, os.path.join(aside, os.path.basename(each)))
    if cut:
        out(f"moved {len(cut)} checkpoint(s) of the records cut to {aside}: they hold for "
            "the backup")
    return EX_OK


# =============================================================================
# 18. Read from the ledger alone: the status lines, the figures, the page
# =============================================================================
# `avsm status` is one line per venture first, as `supervisorctl status` and `monit summary` are.
# Pure: states and `now` in, lines out, so the warden and a client reading the ledger with avsmd
# stopped print the same view.

# trusted reports a sparkline shows
SPARK_WIDTH = 16

STATUS_STATES = ("running", "paused", "stuck", "implausible", "unconfirmed", "cannot run")
StatusRow = collections.namedtuple(
    "StatusRow", "name state value age spark levers run asks calibration bounds why")
StatusRow.__doc__ = """One venture at a glance, as README's `--json` of status tells each field."""


def sparkline(values, ascii=False):
    """Return one character a value, its height scaled between the values' least and greatest."""
    # the eight block heights, lowest first; the same in ASCII where UTF-8 cannot go
    blocks = "_.-~=+*#" if ascii else "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    low, high = min(values), max(values)
    if high == low:
        return blocks[len(blocks) // 2 - 1] * len(values)
    # halves: a report may hold up to ±1.8e308, and their span overflows
    top, span = len(blocks) - 1, high / 2 - low / 2
    return "".join(blocks[min(top, int((v / 2 - low / 2) / span * top + 0.5))] for v in values)


def format_age(seconds):
    """Return an age as a person says it: 8s, 5m, 3h, 2d (rounded down, never negative)."""
    seconds = max(0, int(seconds))
    for unit, size, limit in (("s", 1, 120), ("m", 60, 120 * 60), ("h", 3600, 48 * 3600)):
        if seconds < limit:
            return f"{seconds // size}{unit}"
    return f"{seconds // 86400}d"


def status_row(state, now, keep=None, cfg=None, ascii=False):
    """Return the StatusRow of one adopted venture, from its folded state at `now`."""
    condition, why = "running", ""
    m, held = state.mandate, held_by(state)
    stuck = [(lever, state.side(side)["stuck"]) for side, _, _, lever in controller_sides(m)
             if state.side(side).get("stuck")]
    if state.paused:
        condition = "paused"
        guards = [
            f"guard {name}: #{info['last'][0]} {format_number(info['last'][1])} past its bound"
            f" since #{info['episode']}"
            for name, info in sorted(state.guards.items())
            if info.get("past") and info.get("last")]
        why = ("; ".join(guards)
               + ("; once it reads inside, " if guards else "")
               + f"avsm resume {state.name} starts it again")
    elif m is None:
        condition, why = "cannot run", str(state.problem or "its adopted mandate cannot be read")
    elif held:
        what, seq, note = held
        condition = "implausible"
        why = f"held by {what} #{seq} ({note}); a plausible reading of it clears the hold"
    elif state.last_report and state.last_report[2].get("status") == "unconfirmed":
        condition = "unconfirmed"
        why = f"report #{state.last_report[0]} waits for the next to agree"
    elif stuck:
        condition = "stuck"
        why = "; ".join(f"{lever} cannot run ({reason}): "
                        + STUCK_WAY_OUT[reason].format(venture=state.name, lever=lever)
                        for lever, reason in stuck)
    if m and decided_by_model(m) and cfg is not None:
        note = backend_note(m, cfg)
        # open point 42: status says so
        if "no call is made" in note or "no decision is made" in note:
            why = (why + "; " if why else "") + note
    last = state.trusted[-1][1] if state.trusted else None
    levers = [{"lever": name, "runs": len(cap_window(state, name, now)), "cap": lever["cap"][0],
               "per": lever["cap"][1], "running": name in state.running}
              for name, lever in (m["levers"].items() if m else ())]
    child = (keep or {}).get("child")
    run = None if m is None or not m["run"] else {
        "pid": child.pid if child and not getattr(child, "ended_by", None) else None}
    # issue 11 item 8: how well avsm knows this venture's world, at a glance
    calibration = (describe_rolling(*rolling_scores(state.scores)) if state.scores
                   else "none scored yet") if predicts(m) else None
    return StatusRow(state.name, condition, last,
                     now - state.trusted_at if last is not None else None,
                     sparkline([v for _, v in state.trusted[-SPARK_WIDTH:]], ascii), levers, run,
                     sorted(state.open_asks), calibration,
                     [{"way": way, "bound": bound, "lever": lever} for _, way, bound, lever in
                      controller_sides(m)], why)


def asks_facts(states):
    """Return the facts of `avsm asks`: each open ask, its question, any proposed content."""
    return {"asks": [{"seq": seq, "venture": name, "lever": ask.get("lever"),
                      "question": ask.get("question", ask["summary"]),
                      "payload": ask.get("payload"),
                      "answer": [f"avsm approve {seq}", f"avsm deny {seq}"]}
                     for name in sorted(states)
                     for seq, ask in sorted(states[name].open_asks.items())]}


def asks_lines(facts):
    """Return the lines of `avsm asks` from its facts: an ask a line, any payload under it."""
    lines = []
    for ask in facts["asks"]:
        lines.append(f"#{ask['seq']}  {ask['venture']}  {ask['lever'] or '-'}  {ask['question']}")
        payload = ask["payload"]
        if payload is not None:
            payload = payload if isinstance(payload, str) else json.dumps(payload, indent=2)
            lines += ["    " + line for line in payload.splitlines()]
    return lines or ["no open asks"]


def status_lines(facts):
    """Return the lines of `avsm status` from its facts: a row a venture, then any detail."""
    rows, lines = facts["ventures"], []
    if facts.get("ledger_down"):
        lines.append(f"ledger: cannot be written ({facts['ledger_down']}); nothing that would "
                     "write runs; trying again every 30 s")
    head = [f"{row['name']}: {row['state']}" for row in rows]
    values = [f"{format_number(row['value'])} ({format_age(row['age'])} ago)"
              if row["age"] is not None else "no trusted report" for row in rows]
    wide_head, wide_value = max(map(len, head), default=0), max(map(len, values), default=0)
    for row, h, v in zip(rows, head, values):
        levers = [lever_words(x) for x in row["levers"]]
        if row["run"]:
            pid = row["run"]["pid"]
            levers.append(f"run: pid {pid}" if pid else "run: not running")
        asks = asks_words(row["asks"]) + (
            f"  calibration: {row['calibration']}" if row["calibration"] else "")
        fields = [h.ljust(wide_head), v.ljust(wide_value), row["spark"].ljust(SPARK_WIDTH)] + \
                 [f for f in (", ".join(levers), asks, row["why"]) if f]
        lines.append("  ".join(fields).rstrip())
    for row in rows:
        lines += [""] + row["detail"] if "detail" in row else []
    return lines if rows else lines + ["no ventures yet; adopt one with avsm add DIR"]


def lever_words(x):
    """Return a lever's line of status from its facts: its runs in the cap's window."""
    return f"{x['lever']}: {x['runs']} of {x['cap']} per {format_duration(x['per'])}" + (
        " (running)" if x["running"] else "")


def asks_words(asks):
    """Return `asks: N (#seq, ...)` of a venture's open asks."""
    return f"asks: {len(asks)}" + (f" ({', '.join('#' + str(s) for s in asks)})" if asks else "")


def status_facts(states, now, keeps=None, cfg=None, venture=None, verbose=False, ascii=False,
                 stopped=False):
    """Return the facts of `avsm status`; `stopped`: no avsmd runs (`was running`)."""
    adopted = [states[name] for name in sorted(states) if states[name].mandate_seq]
    if venture is not None:
        adopted = [s for s in adopted if s.name == venture]
        if not adopted:
            refuse(f"no venture is named '{venture}'; avsm status lists them")
    keeps, rows = keeps or {}, []
    for state in adopted:
        keep = keeps.get(state.name)
        row = status_row(state, now, keep, cfg, ascii)._asdict()
        if stopped and row["state"] == "running":   # what the ledger last knew, not that it runs
            row["state"] = "was running"
        if venture is not None or verbose:
            row["detail"] = describe_status_lines(state, keep, row, cfg)
        rows.append(row)
    return {"ventures": rows}


def describe_status_lines(state, keep, row, cfg):
    """Return the status lines of one venture, the first from its StatusRow."""
    lines = [f"{row['name']}: {row['state']}" + (
        f": {row['why']}" if row["state"] not in ("running", "was running", "paused") else "")]
    m, last = state.mandate, state.last_report
    if last:
        seq, at, rec = last
        status = rec.get("status")
        lines.append(f"  last report #{seq} at {format_local_time(at)}: {rec.get('summary')}"
                     + ("" if status and status in str(rec.get("summary")) else f" ({status})"))
    else:
        lines.append("  no report yet")
    if m:
        if decided_by_model(m) and cfg is not None:
            lines.append("  " + backend_note(m, cfg))
        for side_name, way, bound, lever in controller_sides(m):
            side, hold = state.side(side_name), m["controller"].get("hold") or 1
            if state.level and crossed(way, bound, state.level[1]):
                position = "past the bound"
                if side["streak"] and len(side["streak"]) < hold:
                    position += f", waiting on hold ({len(side['streak'])} of {hold})"
                elif not side["armed"]:
                    position += ", acted once in this excursion (deadband)"
                elif side.get("asked"):
                    position += ", asked once in this excursion"
                if side.get("stuck"):
                    way_out = STUCK_WAY_OUT[side["stuck"]].format(venture=state.name, lever=lever)
                    position += f"; stuck ({side['stuck']}): {way_out}"
            else:
                position = "inside" if side["armed"] else "inside, deadband not yet re-armed"
            if last and last[2].get("status") != "trusted":
                # the controller sees only trusted reports: say which one it stands on, and name the
                # one it does not
                position += (f", from the last trusted report #{state.level[0]}"
                             f" ({format_number(state.level[1])})" if state.level
                             else ", no trusted report yet")
                position += f"; #{last[0]} is {last[2].get('status')} and not acted on"
            lines.append(f"  controller: {way} {format_number(bound)} ({lever}): {position}")
        for guard in m["guards"]:
            info = state.guards.get(guard["name"])
            if not info or not info["last"]:
                lines.append(f"  guard {guard['name']}: not read yet")
                continue
            seq, value, status = info["last"]
            where = (f"past its bound since #{info['episode']}: no lever but stop"
                     + (f" and the unwind {guard['unwind']['action']}" if guard["unwind"] else "")
                     + " runs until it is back inside" if info["past"] else "inside its bound"
                     if status == "trusted" else
                     "not judged (it neither trips nor clears a guard); inside its bound before")
            lines.append(f"  guard {guard['name']}: #{seq} {format_number(value)} ({status}),"
                         f" {where}")
    lines += ["  lever " + lever_words(x) for x in row["levers"]]
    if predicts(m):             # its skill and coverage, and whether a ranking would run
        ok, why = calibration_bar(state)
        lines.append((f"  calibration: {state.scored} prediction(s) scored; last"
                      f" {len(state.scores)}: {describe_rolling(*rolling_scores(state.scores))}"
                      if state.scores else "  calibration: no prediction scored yet")
                     + ("; a ranking goes to the gate (no calibration: bar)"
                        if m["calibration"] is None
                        else f"; a ranking would {'run' if ok else 'ask, not run'}: {why}"))
    lines.append("  open " + asks_words(row["asks"]))
    if m and m["run"]:
        keep = keep or {}
        child = keep.get("child")
        ending = getattr(child, "ended_by", None)
        # a program being ended is not shown as running (a pause ends it within seconds)
        if ending:
            where = f"pid {child.pid} is being stopped" \
                f" ({'by the pause' if ending == 'pause' else ending})"
        elif child:
            where = f"pid {child.pid}"
        else:
            where = "not running (paused)" if state.paused else "not running"
        lines.append(f"  run: {where}, restarts {state.restarts}")
    return lines


# ---- the figures for Prometheus (issue 35 item 2) ----
# The warden writes these every `every` to the file node_exporter's textfile collector reads: avsm
# opens no listener for them. Pure: the folded states, a few facts of the home and `now` in.

HomeFacts = collections.namedtuple("HomeFacts", "home head ledger_bytes checkpoint counted")
HomeFacts.__doc__ = """The home beside its ventures: its path (a label, so two homes' files do not
collide), head seq, ledger bytes, newest checkpoint (seq, at), count_self's counters."""

METRIC_FAMILIES = (     # (name, type, help) in the file's order; one with no sample is left out
    ("avsm_venture_state", "gauge",
     "1 for the state avsm status shows the venture in, 0 for each other state"),
    ("avsm_venture_value", "gauge", "The value of the venture's last trusted report of its metric"),
    ("avsm_venture_bound", "gauge", "A bound of the venture's controller: past it, its lever runs"),
    ("avsm_venture_last_trusted_report_age_seconds", "gauge",
     "Seconds since the venture's last trusted report"),
    ("avsm_venture_reports_total", "counter", "Reports of the venture's metric"),
    ("avsm_venture_failed_reports_total", "counter",
     "Reports of the venture's metric that failed: no number was read"),
    ("avsm_venture_implausible_reports_total", "counter",
     "Reports of the venture's metric judged implausible, never acted on"),
    ("avsm_venture_refusals_total", "counter",
     "Refusals of the venture, those of a lever its mandate does not name among them"),
    ("avsm_venture_open_asks", "gauge", "Asks of the venture waiting for a person's answer"),
    ("avsm_lever_runs_total", "counter", "Runs of a lever: actions the gate proved"),
    ("avsm_lever_refusals_total", "counter", "Refusals of a lever the venture's mandate names"),
    ("avsm_ledger_head_seq", "gauge", "The seq of the ledger's last record"),
    ("avsm_ledger_bytes", "gauge", "The size of the ledger's file"),
    ("avsm_checkpoint_seq", "gauge", "The seq of the head the newest checkpoint wrote down"),
    ("avsm_checkpoint_age_seconds", "gauge", "Seconds since the newest checkpoint was written"),
    ("avsm_avsmd_starts_total", "counter", "Starts of avsmd on the home"),
    ("avsm_restarts_total", "counter", "Restarts of avsmd's warden or roles process, by process"),
)
VENTURE_COUNTERS = {"reports": "avsm_venture_reports_total",
                    "failed": "avsm_venture_failed_reports_total",
                    "implausible": "avsm_venture_implausible_reports_total",
                    "refusals": "avsm_venture_refusals_total"}     # VentureState.counted's


def exposition_label(value):
    """Return a label's value as the exposition format quotes it (a lone surrogate as ?)."""
    text = str(value).encode("utf-8", "replace").decode()
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition_number(value):
    """Return a sample's value as the exposition format writes it."""
    if isinstance(value, int) or value.is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def metrics_text(states, home, now):
    """Return the figures of the ventures and the home in Prometheus's text format 0.0.4, with no
    timestamp (node_exporter refuses one)."""
    samples = {name: [] for name, _, _ in METRIC_FAMILIES}

    def add(family, value, **labels):       # the home's label first, each value escaped
        text = ",".join(f'{k}="{exposition_label(v)}"' for k, v in dict(home=home.home,
                                                                          **labels).items())
        samples[family].append(f"{family}{{{text}}} {exposition_number(value)}")
    for row in status_facts(states, now)["ventures"]:       # the adopted, as status shows them
        name = row["name"]
        state = states[name]
        m, counted = state.mandate, state.counted
        for each in STATUS_STATES:
            add("avsm_venture_state", int(row["state"] == each), venture=name, state=each)
        if row["value"] is not None:
            add("avsm_venture_value", row["value"], venture=name)
            add("avsm_venture_last_trusted_report_age_seconds", round(max(0.0, row["age"]), 3),
                venture=name)
        for b in row["bounds"]:
            add("avsm_venture_bound", b["bound"], venture=name, side=b["way"], lever=b["lever"])
        for key, family in VENTURE_COUNTERS.items():
            add(family, counted[key], venture=name)
        add("avsm_venture_open_asks", len(state.open_asks), venture=name)
        runs = set(state.actions) | (set(m["levers"]) | set(BUILTIN_LEVERS) if m else set())
        for lever in sorted(runs | set(m["forbidden"] if m else ()), key=str):
            if lever in runs:           # a forbidden lever never runs; it is refused
                add("avsm_lever_runs_total", len(state.actions.get(lever, ())), venture=name,
                    lever=lever)
            add("avsm_lever_refusals_total", counted["by_lever"].get(lever, 0), venture=name,
                lever=lever)
    add("avsm_ledger_head_seq", home.head)
    if home.ledger_bytes is not None:
        add("avsm_ledger_bytes", home.ledger_bytes)
    if home.checkpoint is not None:
        add("avsm_checkpoint_seq", home.checkpoint[0])
        add("avsm_checkpoint_age_seconds", round(max(0.0, now - home.checkpoint[1]), 3))
    add("avsm_avsmd_starts_total", home.counted.get("starts", 0))
    restarts = home.counted.get("restarts", {})
    for process in sorted(set(restarts) | {"warden", "roles"}):
        add("avsm_restarts_total", restarts.get(process, 0), process=process)
    lines = []
    for family, kind, text in METRIC_FAMILIES:
        if samples[family]:
            lines += [f"# HELP {family} {text}", f"# TYPE {family} {kind}"] + samples[family]
    return "\n".join(lines) + "\n"


# ---- the page (issue 35 item 3) ----
# What needs a person, then every venture, of a home or a fleet: facts (JSON, PAGE_SHAPE) gathered
# where the ledger is, checked when another host sent them, made into HTML here, every text escaped.

PAGE_ACTIONS, PAGE_VALUES = 5, 60   # a venture's last actions a page shows, and trusted values
# a type, [each item's shape], {key: shape}, or (shape,): null too
PAGE_SHAPE = {
    "schema": int, "home": str, "at": float, "stopped": bool,
    "checkpoint": ({"seq": int, "at": float, "signed": bool},),
    "ventures": [{
        "name": str, "state": str, "why": str, "value": (float,), "age": (float,), "report": str,
        "bounds": [float], "values": [float], "asks": [{"seq": int, "question": str}],
        "actions": [{"seq": int, "at": float, "summary": str, "proof": "json"}]}]}
PAGE_MARKS = {"running": "●", "was running": "○", "paused": "‖", "stuck": "▲",
              "implausible": "◆", "unconfirmed": "◇", "cannot run": "✖", "unreachable": "✖",
              "ask": "?"}
PAGE_CSS = """:root{color-scheme:light dark}@media(prefers-color-scheme:dark){body{background:#111}}
body{font:15px system-ui;max-width:60em;margin:auto}ul{padding:0}li{list-style:none;margin:.5em 0;
border-left:5px solid var(--c,gray);padding:0 .8em;break-inside:avoid}b{color:var(--c)}
.running,.was-running{--c:#2a3}.paused,.unconfirmed,.ask{--c:#c80}small{color:gray}
.stuck,.implausible,.cannot-run,.unreachable{--c:#e33}code,pre{background:#8883;
white-space:pre-wrap}
svg{stroke:currentColor;fill:none;display:block}path{stroke:#e33;stroke-dasharray:4}"""


def page_facts(home, states, now, db, keeps=None, cfg=None, stopped=False):
    """Return a home's page facts (PAGE_SHAPE): the facts of status and asks, and more."""
    asks, ventures = asks_facts(states)["asks"], []
    for row in status_facts(states, now, keeps, cfg, stopped=stopped)["ventures"]:
        state, actions = states[row["name"]], []
        for seq in sorted(s for runs in state.actions.values() for s, _, _ in runs)[-PAGE_ACTIONS:]:
            at, record = record_at(db, seq) or (0, {})
            actions.append({"seq": seq, "at": at, "summary": str(record.get("summary")),
                            "proof": record.get("proof")})
        ventures.append(dict(
            {k: row[k] for k in ("name", "state", "why", "value", "age")}, actions=actions,
            report=str(state.last_report[2].get("summary")) if state.last_report else "",
            bounds=[b["bound"] for b in row["bounds"]],
            values=[v for _, v in state.trusted[-PAGE_VALUES:]],
            asks=[{"seq": a["seq"], "question": str(a["question"])} for a in asks
                  if a["venture"] == state.name]))
    where = f"{home}/checkpoints"
    kept = newest_checkpoint(where)
    return {"schema": 1, "home": home, "at": now, "stopped": stopped, "ventures": ventures,
            "checkpoint": kept and {"seq": kept.seq, "at": kept.at, "signed": os.path.exists(
                f"{where}/{kept.seq:012d}.txt.sig")}}


def shape_problem(value, shape, where="facts"):
    """Return where `value` does not hold `shape` (as PAGE_SHAPE writes it), or None."""
    if isinstance(shape, tuple):
        return None if value is None else shape_problem(value, shape[0], where)
    if isinstance(shape, (list, dict)):
        if type(value) is not type(shape) or isinstance(shape, dict) and set(value) != set(shape):
            return f"{where} is {json_kind(value)}, not as {json.dumps(shape, default=str)[:80]}"
        items = shape.items() if isinstance(shape, dict) else enumerate([shape[0]] * len(value))
        return next(filter(None, (shape_problem(value[k], s, f"{where}[{k!r}]") for k, s in items)),
                    None)
    if shape == "json":
        problem = json_problem(value, JSON_DEPTH)
    elif shape is float:        # nor past a float's reach: the page's line halves it
        problem = None if type(value) in (int, float) and -1.7e308 < value < 1.7e308 else "no"
    else:
        problem = None if type(value) is shape and (shape is not str or utf8_text(value)) else "no"
    return problem and f"{where} {'is no ' + shape.__name__ if problem == 'no' else problem}"


def page_answer(code, data, errors=()):
    """Return (facts, None, 0) of avsmd's answer to `page`, or (None, why not, its exit code)."""
    try:
        said = next(m for m in LineReader().feed(data + b"\n") if "out" in m or "err" in m)
        if "err" in said:
            return None, str(said["err"]), said.get("exit") or EX_UNAVAILABLE
        facts = json.loads(said["out"])
        problem = shape_problem(facts, PAGE_SHAPE) or facts["schema"] != 1 and "schema is not 1"
    except StopIteration:
        return None, errors[-1] if errors else "no answer", code or EX_UNAVAILABLE
    except (ValueError, TypeError, RecursionError) as err:
        problem = str(err)
    if problem:
        return None, f"it sent no page's facts of this avsm ({problem[:200]})", EX_UNAVAILABLE
    return facts, None, EX_OK


def page_line(values, bounds):
    """Return the SVG of `values` as a line, the bounds dashed, scaled between their extremes."""
    low, high, values = min(values + bounds), max(values + bounds), values * (3 - len(values[1:2]))

    def y(v):
        return f"{36 - (v / 2 - low / 2) / ((high / 2 - low / 2) or 1) * 32:.1f}"
    line = " ".join(f"{i * 300 / max(1, len(values) - 1):.1f},{y(v)}" for i, v in enumerate(values))
    return ('<svg width="300" height="40">' + "".join(f'<path d="M0 {y(b)}H300"/>' for b in bounds)
            + f'<polyline points="{line}"/></svg>')


def page_html(hosts, now):
    """Return the page of [(host or None, facts or None, why not reached or None, the avsm command
    that answers there)]: one HTML file, CSS inline, no script, every text escaped."""
    from html import escape
    needs, parts = [], []

    def mark(state, text, then=""):     # the state in a word and a shape, and a colour
        c = state.replace(" ", "-") if state in PAGE_MARKS else "stuck"
        return f'<li class="{c}"><b>{PAGE_MARKS.get(state, "!")} {escape(state)}</b> ' \
               f"{escape(text)}{then}"
    for host, facts, problem, command in hosts:
        at = f"{host}: " if host else ""
        needs += [mark("unreachable", at + problem)] if problem else []
        if facts is None:
            continue
        kept = facts["checkpoint"]
        parts.append(f"</ul><h2>{escape(host or facts['home'])}</h2><small>" + (
            f"checkpoint #{kept['seq']} at {format_local_time(kept['at'])}, "
            f"{'signed' if kept['signed'] else 'not signed'}" if kept else "no checkpoint")
            + "</small><ul>")
        for v in facts["ventures"]:
            name, why = v["name"], far_text(v["why"], command)
            needs += [mark("ask", f"{at}{name} #{a['seq']}: " + far_text(a["question"], command),
                           "<br>" + " ".join(f"<code>{escape(command)} {w} {a['seq']}</code>"
                                             for w in ("approve", "deny"))) for a in v["asks"]]
            needs += [] if v["state"] in ("running", "was running") else \
                [mark(v["state"], f"{at}{name}: {why}")]
            actions = "".join(
                f"<li>#{a['seq']} {format_local_time(a['at'])} {escape(a['summary'])}<details>"
                f"<summary>proof</summary><pre>{escape(json.dumps(a['proof'], indent=1))}</pre>"
                "</details>" for a in v["actions"])
            parts.append(mark(v["state"], name, "<br>" + (
                "no trusted report" if v["value"] is None else
                f"{format_number(v['value'])} ({format_age(v['age'])} ago)")
                + "".join(f", bound {format_number(b)}" for b in v["bounds"])
                + f"<br><small>{escape(v['report'])}</small><br>{escape(why)}"
                + (page_line(v["values"], v["bounds"]) if v["values"] else "")
                + (actions and f"<details><summary>last actions</summary><ol>{actions}</ol>"
                               "</details>")))
    page = (f'<!DOCTYPE html>\n<html lang="en"><meta charset="utf-8"><title>avsm: {len(needs)} '
            f"need a person</title><style>{PAGE_CSS}</style><h1>avsm</h1><small>"
            f"{len(hosts)} host(s), {format_local_time(now)}</small><h2>Needs a person</h2><ul>"
            + "".join(needs + parts) + "</ul>")
    # a lone surrogate (a ledger edited by hand) as a character reference: UTF-8 cannot hold it
    return page.encode("utf-8", "xmlcharrefreplace").decode()


# =============================================================================
# 19. main and the argv[0] dispatch
# Which program and verb runs: the client's verbs, avsmd's options, the programs
# avsmd starts; main is the only place that exits (a Fail: `avsm: message`).
# =============================================================================

CLIENT_COMMANDS = {
    "add": cmd_add, "status": cmd_status, "summary": cmd_summary, "tail": cmd_tail,
    "asks": lambda home, args: cmd_offline(home, "asks", {"json": bool(JSON)}),
    "approve": cmd_approve, "deny": cmd_simple("deny", "ask"),
    "pause": cmd_simple("pause", "venture"), "resume": cmd_simple("resume", "venture"),
    "why": cmd_why, "propose": cmd_propose, "decide": cmd_simple("decide", "venture"),
    "doctor": cmd_doctor, "chart": cmd_chart, "checkpoint": cmd_checkpoint, "link": cmd_link,
    "rotate": lambda home, args: ask_daemon(home, "rotate"),
    "try": None, "fleet": None, "bridge": None, "page": cmd_page}


def run_client(args):
    """avsm [--home DIR | --host [USER@]HOST[:HOME]] COMMAND ...: return the exit code."""
    home, rest = take_option(args, "--home")
    host, rest = take_option(rest, "--host")
    fleet, rest = take_option(rest, "--fleet")
    rest = take_json(rest)
    if host is not None and home is not None:
        raise Fail(EX_USAGE,
                   "--home names a home on this host; name the far one with --host HOST:HOME")
    if fleet is not None and host is None and rest[:1] != ["fleet"]:
        raise Fail(EX_USAGE, "--fleet FILE names the fleet file of avsm fleet and of --host NAME; "
                             "write avsm --fleet FILE fleet status, "
                             "or avsm --fleet FILE --host NAME CMD")
    verb, helped = rest[:1], {"-h", "--help"} & set(rest[1:])
    if verb in (["bridge"], ["fleet"]) and helped:
        out(command_help(rest[0]))
        return EX_OK
    if verb == ["bridge"]:
        return cmd_bridge(resolve_home(home), rest[1:],
                          home is not None or bool(os.environ.get("AVSMD_HOME")))
    if verb == ["fleet"]:
        return cmd_fleet(rest[1:], fleet, home)
    if host is not None and rest and rest[0] not in ("-h", "--help", "help", "--version") \
            and not helped:
        known_command(rest[0])
        return run_remote(host, rest[0], rest[1:], fleet)
    return run_verb(home, rest)


def run_verb(home, rest):
    """Run one client verb on `home` (None: the one avsm finds); return the exit code."""
    if not rest:
        raise Fail(EX_USAGE, "no command given\n" + CLIENT_USAGE)
    if rest[0] in ("-h", "--help", "help", "--version"):
        out(f"avsm {VERSION}" if rest[0] == "--version" else CLIENT_USAGE)
        return EX_OK
    verb, rest = rest[0], rest[1:]
    if verb.startswith("-") and verb != "-":
        raise Fail(EX_USAGE, f"'{verb}' is not an avsm option: before the command avsm takes "
                             "--home DIR, --host HOST, --fleet FILE, --help and --version; "
                             "avsm --help lists the commands")
    known_command(verb)
    end = rest.index("--") if "--" in rest else len(rest)
    options, names = rest[:end], rest[end + 1:]
    if "-h" in options or "--help" in options:
        out(command_help(verb))
        return EX_OK
    usage = command_help(verb).splitlines()[0].replace(" [--home DIR]", "")
    if verb in OPTIONLESS_COMMANDS:
        for arg in options:
            if arg.startswith("-") and arg != "-":
                # no name to take: only the usage helps
                named = verb in ("add", "pause", "resume", "decide", "try")
                raise Fail(EX_USAGE, f"avsm {verb} takes no option '{arg}'; {usage}" + (
                    f" (for a name that begins with -, write avsm {verb} -- {arg})" * named))
    if verb in ARGUMENT_COUNTS and len(options + names) != ARGUMENT_COUNTS[verb]:
        raise Fail(EX_USAGE, usage)
    if verb == "try":
        return cmd_try(home, options + names)
    home = resolve_home(home)
    # a venture named after -- is a name, even one that begins with -
    if verb == "status":
        return cmd_status(home, options, names)
    try:
        # chart reads its own options, so it is handed the -- that ends them
        return CLIENT_COMMANDS[verb](home, rest if verb == "chart" else options + names)
    except Exception as err:
        if type(err).__module__ == "sqlite3" or isinstance(err, json.JSONDecodeError):
            raise Fail(EX_DATAERR, f"{ledger_path(home)} cannot be read: {err}; "
                                   f"{client_command(home)} doctor says more") from None
        raise


def known_command(verb):
    if verb not in CLIENT_COMMANDS:
        raise Fail(EX_USAGE, f"'{verb}' is not an avsm command{nearest(verb, CLIENT_COMMANDS)}:"
                             " avsm --help lists them")


def command_help(verb):
    """Return one command's help, from its entries in CLIENT_USAGE."""
    lines, taking = [], False
    for line in CLIENT_USAGE.split("\n\n")[1].splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("   "):
            taking = line.split()[0] == verb
            if taking:
                synopsis, what = (re.split(r"\s{2,}", line.strip(), maxsplit=1) + [""])[:2]
                lines.append(f"{'usage:' if not lines else '   or:'} avsm [--home DIR] {synopsis}")
                if what:
                    lines.append(f"    {what}")
        elif taking:
            lines.append(f"    {line.strip()}")
    return "\n".join(lines)


OPTIONLESS_COMMANDS = ("add", "asks", "deny", "decide", "pause", "resume", "why", "try",
                       "checkpoint", "link", "rotate")
ARGUMENT_COUNTS = {"asks": 0, "checkpoint": 0, "rotate": 0, "why": 1, "deny": 1, "decide": 1,
                   "pause": 1, "resume": 1}


def take_option(args, option):
    """Return (the value of `option` or None, the other arguments), before or after the command."""
    value, rest, args = None, [], iter(args)
    for arg in args:
        if arg == "--":
            rest += [arg, *args]            # what follows -- is names, never an option
            break
        if arg == option or arg.startswith(option + "="):
            value = next(args, "") if arg == option else arg.split("=", 1)[1]
            if not value:
                raise Fail(EX_USAGE, f"{option} needs " + {
                    "--home": "a directory", "--host": "a host, as [user@]HOST[:HOME]",
                    "--fleet": "a file"}[option])
        else:
            rest.append(arg)
    return value, rest


def run_daemon(args):
    """avsmd [--home DIR] [-f FILE] [-d] [-t|-T]: return the exit code."""
    home, rest = take_option(args, "--home")
    config_path, debug, mode, dirs = None, False, "run", []
    while rest:
        arg = rest.pop(0)
        if arg in ("-h", "--help", "--version"):
            out(f"avsmd {VERSION}" if arg == "--version" else DAEMON_USAGE)
            return EX_OK
        if arg == "-f":
            if not rest:
                raise Fail(EX_USAGE, "-f needs a config file")
            config_path = rest.pop(0)
        elif arg == "-d":
            debug = True
        elif arg in ("-t", "-T"):
            if mode not in ("run", arg):
                raise Fail(EX_USAGE, "give -t or -T, not both")
            mode = arg
        elif arg == "--":
            dirs, rest = dirs + rest, []      # what follows -- is directories, never an option
        elif not arg.startswith("-") or arg == "-":
            dirs.append(arg)
        else:
            raise Fail(EX_USAGE, f"avsmd does not take '{arg}'; avsmd --help lists its options")
    if dirs and mode != "-t":
        raise Fail(EX_USAGE, f"avsmd takes a directory only after -t (avsmd -t {dirs[0]} checks"
                             " it); avsmd --help lists its options")
    home = resolve_home(home)
    if os.path.exists(home) and not os.path.isdir(home):
        raise Fail(EX_CANTCREAT, f"{home} is not a directory; move it aside or pass another --home")
    cfg, path, text = read_config(home, config_path)
    if mode == "-T":
        out(format_config(cfg).rstrip("\n"))
        return EX_OK
    if mode == "-t":
        return test_ventures(home, cfg, dirs) if dirs else test_config(home, cfg, path)
    keep_standard_files_open()
    if __name__ == "__main__":  # compiled afresh: start again from the cached bytecode, same pid
        os.execv(sys.executable, cached_command("avsmd", args))
    mark_close_on_exec()            # what avsmd's starter left open reaches no notify command
    return Daemon(home, cfg, path, text, debug).run()


INTERNAL_PROGRAMS = ("warden", "adapter", "forecast")


def run_internal(program, args):
    """The programs avsmd starts itself: the warden, the built-in adapters, and the forecast (the
    facts as JSON on standard input, the forecast as JSON out)."""
    # the built-in adapters (open point 5): http.status URL, stripe PATH[#/ptr], github
    if program == "adapter":
        if len(args) != 2 or args[0] not in ADAPTERS:
            raise Fail(EX_USAGE, f"no built-in adapter reads {' '.join(args)!r}; use http.status"
                                 " URL, stripe PATH or github PATH")
        if args[0] == "http.status":
            try:
                status, _ = adapter_get(args[1])
            except OSError as err:
                raise Fail(EX_UNAVAILABLE, f"http.status {args[1]}: {err}") from None
            out(str(status))    # any status is the reading: 404 and 503 are numbers a guard bounds
            return EX_OK
        given = json.loads(sys.stdin.read() or "{}")
        refuse(given.get("problem"), EX_CONFIG)
        if not given.get("url"):
            raise Fail(EX_CONFIG, f"config.yaml names no adapters: {args[0]}: {{url: ...}}")
        out(read_json_adapter(args[0], args[1], given["url"], given.get("key")))
        return EX_OK
    if program == "warden":
        home, rest = take_option(args, "--home")
        fd = "".join(rest[rest.index("--fd") + 1:][:1]) if "--fd" in rest else ""
        if not fd.isdigit():
            raise Fail(EX_USAGE, "the warden is started by avsmd, not by hand; run avsmd")
        keep_standard_files_open()
        return run_warden(resolve_home(home), int(fd), "-d" in rest, "--again" in rest)
    if args or sys.stdin is None or sys.stdin.isatty():
        raise Fail(EX_USAGE, "the forecast program is started by the warden with its facts on"
                             " standard input; run avsmd")
    try:
        facts = json.loads(sys.stdin.read())
        if facts.get("world"):
            guards = {"guards": [{"name": g} for g in facts.get("guards", [])]}
            step = lambda data: run_world_step(facts["world"], data, guards)     # noqa: E731
            result = packet_world_forecast(facts, step) if facts.get("packet") \
                else forecast_world_paths(facts, step)
        else:
            result = forecast(facts, seed=facts.get("seed", 0))
    except (ValueError, KeyError, TypeError) as err:
        raise Fail(EX_DATAERR, f"the forecast's facts do not hold: {err}") from None
    out(json.dumps(result))
    return EX_OK


def main(argv=None):
    """Run avsmd or avsm, chosen by argv[0] as a multi-call binary is; return the exit code."""
    program = os.path.basename(sys.argv[0] if sys.argv else "").split(".")[0]
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("avsmd", "avsm") + INTERNAL_PROGRAMS:
        program, args = args[0], args[1:]
    elif program not in ("avsmd", "avsm"):
        program = "avsm"
    name = "avsmd" if program == "avsmd" else "avsm"
    try:
        if program == "avsmd":
            code = run_daemon(args)
        elif program in INTERNAL_PROGRAMS:
            code = run_internal(program, args)
        else:
            code = contextvars.copy_context().run(run_client, args)
        if JSON:
            out(json.dumps(exit_facts(JSON, code)))
        try:
            flush_out()
        except OutputError:
            if code == EX_OK:
                raise
        return code                     # a command that failed keeps its code, written out or not
    except Fail as fail:
        sys.stderr.write(f"{name}: {shown(str(fail))}\n")
        if JSON:
            out(json.dumps(exit_facts(dict(JSON, error=str(fail)), fail.code)))
        return fail.code
    except BrokenPipeError:         # the reader went away (avsm tail | head -1)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EX_OK
    except KeyboardInterrupt:
        return 130
    except OutputError as err:
        sys.stderr.write(f"{name}: standard output cannot be written: {err.strerror}\n")
        return EX_IOERR
    except Exception:
        import traceback
        traceback.print_exc()
        sys.stderr.write(f"{name} {VERSION}: this is a bug in avsm, not something you did. Please"
                         " report it with the lines above, the command you ran and"
                         " `python3 --version`.\n")
        return EX_SOFTWARE


def keep_standard_files_open():
    """A daemon started with standard files closed gets /dev/null there, on fd 0-2."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "w", closefd=False))


if __name__ == "__main__":
    sys.exit(main())
