"""Issue 36 item 3: a child's state is named where it changes, as supervisord's ProcessStates:
running -> stopping -> exited -> ended, or running -> exited -> ended for a program that ends itself.
A real program in a process group of its own; no mocks."""

import os
import selectors
import time

import avsm


def wait_exited(child, within=10):
    end = time.monotonic() + within
    while child.poll() is None and time.monotonic() < end:
        time.sleep(0.02)
    return child.state


def test_a_child_stopped_goes_running_stopping_exited():
    """RUN-12: a stopped program: TERM to its group (stopping), its leader reaped (exited)."""
    child = avsm.Child("report", "v", ["sleep", "30"], "/tmp", dict(os.environ))
    try:
        assert child.state == "running" and set(avsm.CHILD_STATES) >= {"running", "stopping"}
        child.terminate("pause", time.monotonic())
        assert (child.state, child.ended_by) == ("stopping", "pause")
        child.terminate("stop", time.monotonic())       # a second stop keeps the first reason
        assert (child.state, child.ended_by) == ("stopping", "pause")
        assert wait_exited(child) == "exited"
        child.terminate("stop", time.monotonic())       # an exited child does not go back
        assert child.state == "exited"
    finally:
        child.close()


def test_a_child_that_ends_by_itself_goes_running_exited_ended(tmp_path):
    """A program that ends by itself is never stopping; the children table ends it once settled."""
    settled = []
    children = avsm.Children(str(tmp_path), selectors.DefaultSelector(), lambda *a, **k: None,
                             lambda: None, lambda line: None, settled.append)

    class State:
        name, directory = "v", str(tmp_path)

    child = children.spawn("report", State, ["true"], checked=True)
    assert child.state == "running"
    end = time.monotonic() + 10
    while not settled and time.monotonic() < end:
        children.child_event(child)
        time.sleep(0.02)
    assert settled == [child] and child.state == "ended" and child.ended_by is None
    assert len(children) == 0


def test_a_replaced_avsm_py_gets_its_bytecode_written_again(tmp_path):
    """Issue 36 (the processes avsmd starts): avsm.py replaced in place leaves a hash-checked
    bytecode that no longer matches; the next start writes it again, so no avsmd, warden or roles
    process compiles the whole file (0.4 s and 60 MB) at every start."""
    import importlib.util
    import shutil
    import subprocess
    import sys
    copy = str(tmp_path / "avsm.py")
    shutil.copy(avsm.AVSM_PATH, copy)
    run = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import avsm; "
           "print(avsm.cached_command('avsm', ['--version'])[-3])", str(tmp_path)]
    cache = importlib.util.cache_from_source(copy)
    for edit in ("", "# replaced in place\n"):
        with open(copy, "a") as fh:
            fh.write(edit)
        assert subprocess.run(run, capture_output=True, text=True).stdout.strip() == copy
        with open(copy, "rb") as fh:
            source_hash = importlib.util.source_hash(fh.read())
        with open(cache, "rb") as fh:
            assert fh.read(16)[8:16] == source_hash, edit
