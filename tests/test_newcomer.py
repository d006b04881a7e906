"""A newcomer's first hour (issue 13): the entry points on an old Python, checking a venture before adopting it,
a mandate edited on disk, what `why` shows, and the small things of the CLI. Black-box through the real client
and daemon."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, Avsm, make_venture, write  # noqa: F401

AVSM_PY = os.path.join(ROOT, "avsm.py")


def old_pythons():
    """Every interpreter older than 3.11 this machine has (pyenv's, or on the PATH), newest first."""
    found = {}
    for path in sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3")) + \
            [shutil.which(f"python3.{minor}") for minor in range(6, 11)]:
        if not path or not os.access(path, os.X_OK):
            continue
        version = subprocess.run([path, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                                 capture_output=True, text=True).stdout.strip()
        if version and tuple(map(int, version.split("."))) < (3, 11) and tuple(map(int, version.split("."))) >= (3, 6):
            found.setdefault(version, path)
    return sorted(found.items(), key=lambda kv: tuple(map(int, kv[0].split("."))), reverse=True)


OLD = old_pythons()
OLD = OLD[:1] + OLD[-1:] if len(OLD) > 1 else OLD      # the newest and the oldest: the check and the parse hold for both


@pytest.mark.skipif(not OLD, reason="no Python older than 3.11 on this machine")
@pytest.mark.parametrize("version,python", OLD, ids=[v for v, _ in OLD])
def test_old_python_gets_one_line_and_78_at_every_entry_point(version, python, bindir, home):
    """Issue 13 item 1: on an interpreter older than 3.11 every entry point (`python avsm.py`, the client and the
    daemon under their symlinks, `python avsm.py avsmd`, the console scripts' `avsm.main()`) writes one line naming
    the version and the interpreter, and exits 78 (EX_CONFIG), never a traceback or 'a bug in avsm'; the file still
    parses there, so the check can run."""
    ok = subprocess.run([python, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())", AVSM_PY],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    console = "import sys; sys.path.insert(0, sys.argv[1]); import avsm; sys.exit(avsm.main())"
    for argv in ([python, AVSM_PY, "--home", home, "status"],
                 [python, os.path.join(bindir, "avsm"), "--home", home, "status"],
                 [python, os.path.join(bindir, "avsmd"), "--home", home],
                 [python, AVSM_PY, "avsmd", "--home", home, "-t"],
                 [python, "-c", console, ROOT, "--help"]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert r.returncode == 78, (argv, r.returncode, r.stderr)
        assert r.stdout == ""
        exe = subprocess.run([python, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True).stdout.strip()
        assert r.stderr == f"avsm needs Python 3.11 or later; this is {version} at {exe}\n", argv
    assert not os.path.exists(home)          # nothing was started, nothing made
