#!/usr/bin/env python3
"""Reading one long line: 1, 4 and 16 MB, as the bridge, the socket and the warden's channels read them.

    python3 tests/bench/bench_lines.py [--runs 5]

Two measures: the least of --runs in this process (what the code costs, not what other load adds), the
median of --runs for the bridge:

- `LineReader.feed`, in this process: a JSON line of N MB fed 64 KiB at a time (what `os.read` and `recv` hand
  the bridge, avsmd's socket and the channels), timed apart: reading its pieces, then its newline (the line
  joined once and parsed by the stdlib's json); the reader avsm.py has, beside the one it had before (the
  whole buffer joined and split again at every read), for comparison.
- `avsm bridge`, a process: the same line on its standard input, until its refusal (a JSON text is not a
  request: 64), the whole run (its start, some 0.2 s, included).

Linear is a ratio of 4 for 4 MB against 1 MB and 16 for 16 MB. Target: avsm.py's reading at most 1.5 times
linear (16 MB / 1 MB <= 24). A report's output needs no row: the warden keeps its last 64 KiB only.

Not collected by pytest (pyproject: norecursedirs = tests/bench). Exits 1 when the target is missed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import avsm  # noqa: E402

SIZES = (1, 4, 16)
CHUNK = 65536
TARGET = 1.5


class OldLineReader:
    """The reader avsm.py had before issue 32 item 11: the buffer grows by concatenation and is split whole at
    every read, so a line of n bytes read in pieces of c costs n*n/c."""

    def __init__(self, limit=16 * 1024 * 1024):
        self.buffer, self.limit = b"", limit

    def feed(self, data):
        self.buffer += data
        if len(self.buffer) > self.limit:
            raise ValueError("a line longer than avsm reads")
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def line_of(mb):
    return json.dumps("a" * (mb * 1000 * 1000 - 2)).encode()


def pieces_of(mb):
    """The pieces a line of `mb` MB arrives in, 64 KiB each: one object for every middle piece, so that what
    is timed is the reader's work and not the machine's cache (a 16 MB line of distinct pieces does not fit)."""
    size, middle = mb * 1000 * 1000, b"a" * CHUNK
    count = size // CHUNK
    return [b'"' + middle[1:]] + [middle] * (count - 1) + [b"a" * (size - count * CHUNK - 1) + b'"']


def feed_time(reader_class, pieces):
    """Return (seconds to read the line's pieces, seconds for its newline: joined and parsed)."""
    reader = reader_class()
    t0 = time.perf_counter()
    for piece in pieces:
        reader.feed(piece)
    t1 = time.perf_counter()
    got = reader.feed(b"\n")
    t2 = time.perf_counter()
    assert len(got) == 1 and len(got[0]) == sum(map(len, pieces)) - 2
    return t1 - t0, t2 - t1


def least(pairs):
    pairs = list(pairs)
    return tuple(min(p[i] for p in pairs) for i in range(2))


def bridge_time(data, home):
    with tempfile.TemporaryFile() as fh:
        fh.write(data + b"\n")
        fh.seek(0)
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-S", os.path.join(ROOT, "avsm.py"), "--home", home, "bridge"],
                              stdin=fh, capture_output=True)
        took = time.perf_counter() - t0
    assert done.returncode == 64, done.stderr[-300:]
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    lines = {mb: line_of(mb) for mb in SIZES}
    home = tempfile.mkdtemp(prefix="avl", dir="/tmp")
    names = ("LineReader now: reading", "LineReader now: its newline", "LineReader before: reading",
             "LineReader before: its newline", "avsm bridge, whole run")
    rows = {name: {} for name in names}
    for mb in SIZES:
        now = least(feed_time(avsm.LineReader, pieces_of(mb)) for _ in range(runs))
        before = least(feed_time(OldLineReader, pieces_of(mb)) for _ in range(max(1, runs // 2)))
        for name, took in zip(names, now + before):
            rows[name][mb] = took
        rows[names[4]][mb] = statistics.median(bridge_time(lines[mb], home) for _ in range(runs))
    start = statistics.median(bridge_time(b'"a"', home) for _ in range(runs))
    os.rmdir(home)
    print(f"{'one line, fed 64 KiB at a time':31} " + " ".join(f"{f'{mb} MB':>9}" for mb in SIZES)
          + f" {'4/1':>6} {'16/1':>6}")
    for name, times in rows.items():
        print(f"{name:31} " + " ".join(f"{times[mb] * 1000:7.1f}ms" for mb in SIZES)
              + f" {times[4] / times[1]:6.1f} {times[16] / times[1]:6.1f}")
    print(f"(reading: every piece before the newline; its newline: the line joined once and parsed by\n"
          f" the stdlib's json; the bridge's run holds its start, {start * 1000:.0f} ms for a line of 3 bytes;\n"
          f" linear is 4.0 and 16.0)")
    ratio = rows[names[0]][16] / rows[names[0]][1]
    ok = ratio <= 16 * TARGET
    print(f"target: reading, 16 MB / 1 MB <= {16 * TARGET:.0f}: {ratio:.1f}, {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
