"""A seeded campaign of hostile input against a real avsmd (issue 16): lines written raw to HOME/sock,
mandate.yaml mutations adopted through `avsm add` and re-read by `avsmd -t`, and configs checked by
`avsmd -t -f FILE`. For each input: no process died (avsmd's and the warden's pids are the same), the exit
code is one the spec lists (never 70), no traceback on standard error, and no lever ran that a legitimate
request did not ask for; every few inputs and at the end the ledger re-verifies (chain and proofs).

Standard `random`, seeded: AVSM_HOSTILE_SEED replays a run, AVSM_HOSTILE_N sets its size. Used by
tests/test_hostile.py (a few seconds) and tests/bench/bench_hostile.py (minutes).

Inputs that hit defects another branch of issue 16 fixes (items 4-8) are recognised by `others_item` and
counted apart: numbers past the limits in YAML (item 4: hex or octal of hundreds of digits, decimals past
1e300), configs that are not UTF-8 or whose backends are not a mapping of mappings (item 5). The suite's
campaign leaves them out (`avoid_others`); the bench makes them and counts what they do separately.
"""

import json
import os
import random
import re
import socket
import subprocess
import sys
import time

from conftest import Avsm, check_ledger_safety, make_venture, write

REPORT = "#!/bin/sh\necho 5\n"
MARK = "#!/bin/sh\necho \"$AVSM_VENTURE $AVSM_LEVER\" >> \"$AVSM_HOME/../ran\"\n"

DIAL = """purpose: Keep the dial low; nothing here runs unless a person proposes it.
metric: dial
controller: {kind: threshold, above: 10, action: mark}
cadence: 1s
permitted:
  - {name: mark, run: ./mark, cap: 60/hour, reversible: true}
  - {name: note, run: ./mark, cap: 60/hour, reversible: true, takes: json}
forbidden: [rm]
"""

MANDATE = """purpose: Keep the counter below ten.
metric: count
controller:
  kind: threshold
  above: 10
  action: reset
  deadband: 2
  hold: 1
cadence: 1s
permitted:
  - name: reset
    run: ./reset
    cap: 3/hour
    reversible: true
  - {name: fix, run: ./reset, cap: 1/day, reversible: false, takes: json}
forbidden: [rm, "drop-all"]
guards:
  - {name: errors, run: ./errors, above: 299, then: ask}
audits:
  - {name: refunds, run: ./errors, worse: up, tolerance: 2}
"""

CONFIG = """nightly: "03:00"
default: local
backends:
  local: {kind: command, run: /bin/cat, offbox: false}
  far: {kind: anthropic, model: claude-sonnet-4-5}
escalate: far
ratchet: 5
forecast: {days: 7, seeds: 8}
canary_asks: {every: 20}
adapters: {}
research: null
"""

SPEC_CODES = {0, 64, 65, 66, 69, 73, 74, 75, 77, 78}
SOCKET_CODES = {0, 64, 65, 66}
ADD_CODES = {0, 64, 65, 66}
CHECK_CODES = {0, 78}

# names a request may carry: none is within a few edits of a lever of DIAL (mark, note) or of stop,
# so no mutation turns one into a legitimate proposal that runs
NAMES = ["dial", "mut", "rm", "nosuch", "self", "", " ", "..", "a" * 300, "dial\n", "\u202e", "\udcff", "\ud800",
         "\x00", "\x1b[2J", "drop-all", "propose", "add", "__id", "x" * 70000]
CMDS = ["ping", "health", "status", "asks", "add", "decide", "pause", "resume", "propose", "approve", "deny", "ask"]
INTERNAL = ["stop", "from_roles", "begin_stop", "__init__", "run", "tick", "spawn", "signalled", "read_channel",
            "health ", "STATUS", "status\x00", "do_status", ""]
TOKENS = ["~", "null", "true", "no", "1e999", "-1e999", ".nan", ".inf", "-0", "0x10", "0o17", "1_000", "[", "]", "{",
          "}", "&a", "*a", "!!str", "? ", "- ", ": ", "'", '"', "#", "|", ">", "\t", "\r", "\x00", "\ufeff", "\u2028",
          "\\", "%", "@", "`", "1/0s", "0/hour", "99999999999/hour", "1000y", "-5", "1e300", "x" * 5000,
          "\ud800", "é", "../..", "0x" + "f" * 4000, "0o" + "7" * 3000, "1e301", "9" * 5000, "-1.5e400", "/bin/sh", "./reset; echo hostile", "$(id)", "{a: [b, {c: d}]}", "[[[[[[[[[["]

NUMBERS = ["0x" + "f" * 4000, "0o" + "7" * 3000, "0x" + "f" * 250, "1e301", "1e300", "-1.5e400", "9" * 5000, "9" * 299,
           "1e-400", "0", "-0", "0x10", "0o17", "1_0", "+5", ".5", "5.", "1e3", "0b101", "99999999999999999999", "nan"]


def others_item(kind, data):
    """Return the item of issue 16 another branch fixes that `data` (bytes) may hit, or None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "5 (a config not UTF-8)" if kind == "config" else None
    if re.search(r"0[xXoObB][0-9a-fA-F_]{200,}", text) or re.search(r"\d{300,}", text):
        return "4 (a number of hundreds of digits)"
    if re.search(r"(?i)\d(\.\d*)?e[+-]?0*[3-9]\d\d", text) or re.search(r"(?i)\d(\.\d*)?e[+-]?0*\d{4,}", text):
        return "4 (a number past 1e300)"
    if kind == "config" and not backends_are_mappings(text):
        return "5 (backends not a mapping of mappings)"
    return None


def backends_are_mappings(text):
    """Whether a config's backends: reads as a mapping of mappings each with a text kind (item 5 aside)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import avsm
    try:
        doc = avsm.parse_yaml(text)
    except Exception:
        return True             # refused before the backends are looked at
    if not isinstance(doc, dict) or "backends" not in doc:
        return True
    b = doc["backends"]
    if b is None:
        return True
    return isinstance(b, dict) and all(isinstance(v, dict) and isinstance(v.get("kind", ""), str) for v in b.values())


# ---- generators ----------------------------------------------------------------------------

def random_json(rng, depth=0):
    """A JSON value of a hostile kind: wrong types, NUL and surrogates, huge and non-finite numbers, nesting."""
    pick = rng.randrange(14 if depth < 3 else 9)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, -1, 1, 2 ** 63, -2 ** 63 - 1, 2 ** 64, 10 ** 30, 17])
    if pick == 3:
        return rng.choice([1.5, -0.0, 1e308, float("inf"), float("-inf"), float("nan")])
    if pick in (4, 5, 6, 7, 8):
        return rng.choice(NAMES + TOKENS)
    if pick in (9, 10):
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    if pick in (11, 12):
        return {rng.choice(NAMES + ["dir", "venture", "lever", "ask", "payload", "cmd", "args"]): random_json(rng, depth + 1)
                for _ in range(rng.randrange(4))}
    n = rng.choice([50, 500, 1100, 5000])
    return json.loads("[" * min(n, 500) + "]" * min(n, 500)) if n < 1000 else "[" * n


def legitimate(rng, dirs):
    """A request as the real client sends it, with arguments that run nothing."""
    cmd = rng.choice(CMDS)
    args = {"add": lambda: {"dir": rng.choice(dirs + ["/", "/tmp", "/nonexistent/x"])},
            "decide": lambda: {"venture": rng.choice(NAMES)}, "pause": lambda: {"venture": rng.choice(NAMES)},
            "resume": lambda: {"venture": rng.choice(NAMES)},
            "propose": lambda: {"venture": rng.choice(NAMES), "lever": rng.choice(NAMES), "payload": rng.choice([None, "x", "{}"])},
            "approve": lambda: {"ask": rng.randrange(10 ** 6)}, "deny": lambda: {"ask": rng.randrange(10 ** 6)},
            "ask": lambda: {"ask": rng.randrange(10 ** 6)}}.get(cmd, dict)()
    return {"v": 1, "cmd": cmd, "args": args}


def socket_line(rng, dirs):
    """One hostile line (bytes) for HOME/sock."""
    request = legitimate(rng, dirs)
    how = rng.randrange(10)
    if how == 0:                                    # a value of the wrong type somewhere
        where = rng.choice(["top", "args"] + list(request["args"]) * 2)
        if where == "top":
            request = random_json(rng)
        elif where == "args":
            request["args"] = random_json(rng)
        else:
            request["args"][where] = random_json(rng)
    elif how == 1:                                  # a field too many, or one missing
        choice = rng.randrange(3)
        if choice == 0 and request["args"]:
            del request["args"][rng.choice(list(request["args"]))]
        elif choice == 1:
            request[rng.choice(["from", "id", "rid", "x", "op"])] = random_json(rng)
        else:
            request["args"][rng.choice(["__id", "by", "edited", "x", "from"])] = random_json(rng)
    elif how == 2:                                  # a command no client sends
        request["cmd"] = rng.choice(INTERNAL + [random_json(rng)])
    elif how == 3:                                  # the version or the cmd's type
        request[rng.choice(["v", "cmd"])] = random_json(rng)
    if how == 9 and rng.random() < 0.5:
        return rng.choice([b"[" * rng.choice([999, 1100, 20000]), b'{"a":' * 1100, b"5", b"true", b"null", b'"x"',
                           b"-1e999", b"NaN", b"\xff\xfe\xfd", b" ", b"", b"{" + b" " * (1024 * 1024 + 10) + b"}",
                           b'{"cmd":"status"' + b" " * 2000000]) + b"\n"
    line = json.dumps(request, allow_nan=True).encode("utf-8", "surrogatepass")
    if how in (6, 7, 8):                            # bytes: flipped, cut, inserted, repeated
        line = mutate_bytes(rng, line)
    return line + b"\n"


def mutate_bytes(rng, data, tokens=None):
    """`data` with a few random byte-level edits (and, given `tokens`, some tokens put in)."""
    data = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        op = rng.randrange(6 if tokens else 5)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data:
            del data[min(at, len(data) - 1)]
        elif op == 1:
            data[at:at] = bytes([rng.randrange(256)])
        elif op == 2 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 3:
            data = data[:at]
        elif op == 4 and data:
            end = min(len(data), at + rng.randrange(1, 40))
            data[at:at] = data[at:end] * rng.randrange(1, 4)
        elif op == 5:
            data[at:at] = rng.choice(tokens).encode("utf-8", "surrogatepass")
    return bytes(data)


def mutate_yaml(rng, text):
    """A mutation of a YAML document: a value swapped for a hostile token, a line moved, doubled or
    re-indented, or byte-level edits."""
    lines = text.split("\n")
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(8)
        i = rng.randrange(len(lines))
        if op >= 6:                                 # a number swapped for one at or past the limits
            numbers = [j for j, line in enumerate(lines) if re.search(r"\b\d+\b", line)]
            if numbers:
                j = rng.choice(numbers)
                lines[j] = re.sub(r"\b\d+\b", lambda m: rng.choice(NUMBERS), lines[j], count=1)
        elif op == 0 and ":" in lines[i]:
            key, _, _ = lines[i].partition(":")
            lines[i] = f"{key}: {rng.choice(TOKENS)}"
        elif op == 1:
            lines.insert(rng.randrange(len(lines) + 1), lines[i])
        elif op == 2:
            lines[i] = " " * rng.randrange(5) + lines[i].lstrip()
        elif op == 3:
            del lines[i]
        elif op == 4:
            words = re.split(r"([ ,:{}\[\]])", lines[i])
            j = rng.randrange(len(words))
            words[j] = rng.choice(TOKENS)
            lines[i] = "".join(words)
        else:
            return mutate_bytes(rng, "\n".join(lines).encode("utf-8", "surrogatepass"), TOKENS)
    return "\n".join(lines).encode("utf-8", "surrogatepass")


# ---- the campaign --------------------------------------------------------------------------

class Tally:
    def __init__(self):
        self.inputs = {"socket": 0, "mandate": 0, "config": 0}
        self.crashes, self.deaths, self.wrong, self.others = 0, 0, 0, {}
        self.failures = []

    def fail(self, what, kind, data, why, item=None):
        if item:
            self.others.setdefault(item, []).append((kind, data[:200], why[:300]))
            return
        setattr(self, what, getattr(self, what) + 1)
        self.failures.append((what, kind, data[:300], why[:2000]))

    def summary(self):
        n = sum(self.inputs.values())
        others = ", ".join(f"item {k}: {len(v)}" for k, v in sorted(self.others.items())) or "none"
        return (f"{n} inputs ({', '.join(f'{k} {v}' for k, v in self.inputs.items())}): {self.crashes} crashes, "
                f"{self.deaths} daemon deaths, {self.wrong} wrong values; failures the other items of issue 16 "
                f"fix, counted apart: {others}")


def send(home, data, timeout=20):
    """Write `data` to HOME/sock and return the reply's exit code (None without one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(os.path.join(home, "sock"))
        try:
            conn.sendall(data)
            if not has_request(data):
                conn.shutdown(socket.SHUT_WR)       # no request to answer: our end is all avsmd sees
        except (BrokenPipeError, ConnectionResetError):
            pass
        got = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    exits = [json.loads(line)["exit"] for line in got.split(b"\n") if line.startswith(b'{"exit"')]
    return exits[0] if exits else None


def has_request(data):
    """Whether a line holds a complete non-blank line avsmd must answer."""
    return bool(data.split(b"\n")[0].strip())


class Campaign:
    def __init__(self, bindir, root, seed, avoid_others, log=print):
        self.bindir, self.root, self.seed, self.avoid = bindir, root, seed, avoid_others
        self.rng, self.tally, self.log = random.Random(seed), Tally(), log
        self.home = os.path.join(root, "h")
        self.dial = make_venture(root, "dial", DIAL, {"report": REPORT, "mark": MARK})
        self.mut = make_venture(root, "mut", MANDATE, {"report": REPORT, "reset": MARK, "errors": "#!/bin/sh\necho 1\n"})
        self.av = None

    def start(self):
        self.av = Avsm(self.bindir, self.home)
        self.av.start()
        write(os.path.join(self.mut, "mandate.yaml"), MANDATE)
        for d in (self.dial, self.mut):
            assert self.av.cli("add", d).returncode == 0
        self.pids = (self.av.proc.pid, self.av.wardens())
        self.err_seen = 0

    def new_stderr(self):
        text = self.av.stderr()
        new, self.err_seen = text[self.err_seen:], len(text)
        return new

    def check_alive(self, kind, data, item):
        """False (and a death counted) when avsmd or its warden is not the one that was; restarts it."""
        if self.av.proc.poll() is None and self.av.wardens() == self.pids[1]:
            return True
        why = f"avsmd exit {self.av.proc.poll()}, wardens {self.pids[1]} -> {self.av.wardens()}: {self.new_stderr()[-1500:]}"
        self.tally.fail("deaths", kind, data, why, item)
        if self.av.proc.poll() is None:         # avsmd starts its warden again: go on with the new one
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(self.av.wardens()) != 1:
                time.sleep(0.1)
            if len(self.av.wardens()) == 1:
                self.pids = (self.av.proc.pid, self.av.wardens())
                return False
            self.av.stop()
        self.start()
        return False

    def check_ran(self, kind, data, item):
        path = os.path.join(self.root, "ran")
        ran = open(path).read() if os.path.exists(path) else ""
        if "dial" in ran:
            self.tally.fail("wrong", kind, data, f"a lever of dial ran: {ran!r}", item)
            os.unlink(path)

    def check_ledger(self, kind, data):
        try:
            check_ledger_safety(self.home)
        except AssertionError as err:
            self.tally.fail("wrong", kind, data, f"the ledger does not re-verify: {err}")
        except Exception as err:        # a record the check itself cannot read (e.g. a number of 4,000 digits)
            self.tally.fail("wrong", kind, data, f"the ledger cannot be checked: {type(err).__name__}: {err}",
                            "4 (a number of hundreds of digits)" if "digits" in str(err) else others_item(kind, data))
        if self.av.cli("status").returncode != 0:
            self.tally.fail("crashes", kind, data, "avsm status failed after it")

    def one_socket(self):
        data = socket_line(self.rng, [self.dial, self.mut])
        item = others_item("socket", data)
        if self.avoid and item:
            return None
        self.tally.inputs["socket"] += 1
        try:
            code = send(self.home, data)
        except OSError as err:
            code = f"no answer ({err})"
        if code not in SOCKET_CODES and (code is not None or has_request(data)):
            self.tally.fail("crashes", "socket", data, f"exit {code}: {self.new_stderr()[-1500:]}", item)
        err = self.new_stderr()
        if "Traceback" in err:
            self.tally.fail("crashes", "socket", data, err[-1500:], item)
        self.check_alive("socket", data, item)
        return data

    def one_mandate(self):
        data = mutate_yaml(self.rng, MANDATE)
        item = others_item("mandate", data)
        if self.avoid and item:
            return None
        self.tally.inputs["mandate"] += 1
        with open(os.path.join(self.mut, "mandate.yaml"), "wb") as fh:
            fh.write(data)
        for args, codes, run in ((("add", self.mut), ADD_CODES, self.av.cli),
                                 (("-t",), CHECK_CODES, self.av.daemon_cmd)):
            try:
                r = run(*args, timeout=60)
            except subprocess.TimeoutExpired:
                self.tally.fail("crashes", "mandate", data, f"{args[0]} gave no answer in 60 s", item)
                continue
            if r.returncode not in codes or "Traceback" in r.stderr:
                self.tally.fail("crashes", "mandate", data, f"{args[0]}: exit {r.returncode}: {r.stderr[-1500:]}", item)
        err = self.new_stderr()
        if "Traceback" in err:
            self.tally.fail("crashes", "mandate", data, err[-1500:], item)
        self.check_alive("mandate", data, item)
        return data

    def one_config(self):
        data = mutate_yaml(self.rng, CONFIG)
        item = others_item("config", data)
        if self.avoid and item:
            return None
        self.tally.inputs["config"] += 1
        path = os.path.join(self.root, "config.yaml")
        with open(path, "wb") as fh:
            fh.write(data)
        r = self.av.daemon_cmd("-t", "-f", path, timeout=60)
        if r.returncode not in CHECK_CODES or "Traceback" in r.stderr:
            self.tally.fail("crashes", "config", data, f"-t -f: exit {r.returncode}: {r.stderr[-1500:]}", item)
        return data

    def run(self, n, shares=(8, 1, 1)):
        """Run `n` inputs, socket lines, mandates and configs in the ratio `shares`; return the Tally."""
        self.start()
        try:
            done, last, t0 = 0, None, time.monotonic()
            while done < n:
                kind = self.rng.choices(["socket", "mandate", "config"], shares)[0]
                data = {"socket": self.one_socket, "mandate": self.one_mandate, "config": self.one_config}[kind]()
                if data is None:
                    continue
                done += 1
                last = (kind, data)
                self.check_ran(kind, data, None)
                if done % 50 == 0:
                    self.check_ledger(kind, data)
                    self.log(f"  {done}/{n} in {time.monotonic() - t0:.0f} s: {self.tally.summary()}")
            if last:
                self.check_ledger(*last)
                self.check_alive(*last, None)
            code, _ = self.av.stop()
            if code != 0:
                self.tally.fail("crashes", "stop", b"", f"avsmd exited {code} at the end: {self.av.stderr()[-1500:]}")
        finally:
            if self.av.proc.poll() is None:
                self.av.stop()
        return self.tally


def seed_and_count(default_n):
    """The campaign's seed and size: AVSM_HOSTILE_SEED and AVSM_HOSTILE_N, else a fresh seed and `default_n`."""
    seed = int(os.environ.get("AVSM_HOSTILE_SEED") or random.SystemRandom().randrange(10 ** 9))
    return seed, int(os.environ.get("AVSM_HOSTILE_N") or default_n)
