"""The programs the warden starts (issue 15 item 2: started with os.posix_spawn, not subprocess.Popen): each in
its venture's directory, in a process group of its own, holding no descriptor of avsm's (the ledger, the lock,
the socket, the warden's channel to avsmd), with SIGPIPE and SIGXFSZ at their defaults as any shell leaves them,
and a program that cannot start is a failed reading saying why, naming the program or the directory. RUN-12"""

import os
import shutil
import sys

from conftest import make_venture, stat_fields, write
from test_daemon import of

LISTER = f"""#!{sys.executable}
import os, sys
held = []
for fd in os.listdir("/proc/self/fd"):
    try:
        held.append((int(fd), os.readlink("/proc/self/fd/" + fd)))
    except OSError:
        pass                    # the listing's own descriptor, closed by now
label = sys.argv[1] if len(sys.argv) > 1 else "report"
with open(label + ".fds", "w") as fh:
    fh.write(f"{{os.getpid()}} {{os.getpgid(0)}}\\n" + "\\n".join(f"{{fd}} {{target}}" for fd, target in sorted(held)) + "\\n")
print(100 + sum(1 for fd, _ in held if fd > 2))
"""

MANDATE = """purpose: Hold nothing of avsm's.
metric: held
controller: {kind: threshold, above: 50, action: lower}
cadence: 1s
run: "./lister run; exec sleep 60"
permitted:
  - {name: lower, run: ./lister lever, cap: 600/hour, reversible: true}
"""


def held(path):
    """(pid, pgid, {fd: target}) from a lister's file."""
    with open(path) as fh:
        first, *rest = fh.read().split("\n")
    pid, pgid = (int(x) for x in first.split())
    return pid, pgid, {int(line.split(" ", 1)[0]): line.split(" ", 1)[1] for line in rest if line}


def test_a_report_a_lever_and_a_kept_run_hold_no_descriptor_of_avsm(av, workdir):
    """Each of the three kinds of program, started by the warden, holds only its standard input (/dev/null),
    output and errors (the warden's pipes): not the ledger, the lock, HOME/groups, the socket or the channel
    the warden was handed by avsmd (inheritable to reach the warden, marked close-on-exec there). Each runs
    in its venture's directory as the leader of a group of its own. RUN-12"""
    d = make_venture(workdir, "fds", MANDATE, {"report": "#!/bin/sh\nexec ./lister\n", "lister": LISTER})
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "outcome", "fds") and rs, timeout=20, what="the lever's outcome")
    reports = [r for _, r in of(recs, "report", "fds") if r["status"] == "trusted"]
    assert reports and all(r["value"] == 100 for r in reports), [r["summary"] for _, r in of(recs, "report", "fds")]
    for label in ("report", "lever", "run"):
        pid, pgid, fds = held(os.path.join(d, f"{label}.fds"))
        assert sorted(fds) == [0, 1, 2], (label, fds)
        assert fds[0] == "/dev/null", (label, fds)
        assert fds[1].startswith("pipe:") and fds[2].startswith("pipe:"), (label, fds)
    _, pgid, _ = held(os.path.join(d, "run.fds"))
    fields = stat_fields(pgid)
    assert fields is not None and int(fields[2]) == pgid, "the kept run leads a group of its own"


def test_a_program_finds_sigpipe_and_sigxfsz_at_their_defaults(av, workdir):
    """Python ignores SIGPIPE and SIGXFSZ in itself; a program the warden starts gets them back at their
    defaults (as subprocess's restore_signals did), so `yes | head -1` in a report ends as in a shell:
    a shell that sends itself each signal dies of it (128 + 13, 128 + 25) rather than carrying on."""
    report = "#!/bin/sh\nsh -c 'kill -PIPE $$'\na=$?\nsh -c 'kill -XFSZ $$'\nb=$?\necho $((a * 1000 + b))\n"
    d = make_venture(workdir, "sig", MANDATE.replace("run: \"./lister run; exec sleep 60\"\n", ""),
                     {"report": report, "lister": LISTER})
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: of(rs, "report", "sig") and rs, timeout=10, what="a report")
    (_, first), *_ = of(recs, "report", "sig")
    assert first["value"] == 141 * 1000 + 153, first["summary"]


def test_a_program_that_cannot_start_is_a_failed_reading_naming_it(av, workdir):
    """A report gone, not executable, not a program, or a venture directory gone: each report is failed,
    its note saying why with the name of the program (or the directory), as exec says it."""
    base = MANDATE.replace("run: \"./lister run; exec sleep 60\"\n", "")
    ventures = {name: make_venture(workdir, name, base, {"report": "#!/bin/sh\necho 1\n", "lister": LISTER})
                for name in ("gone", "noexec", "garbage", "nodir")}
    av.start()
    for d in ventures.values():
        assert av.cli("add", d).returncode == 0
    os.unlink(os.path.join(ventures["gone"], "report"))
    os.chmod(os.path.join(ventures["noexec"], "report"), 0o644)
    write(os.path.join(ventures["garbage"], "report"), "\x7fnot a program\n", 0o755)
    shutil.move(ventures["nodir"], ventures["nodir"] + ".moved")
    want = {"gone": "[Errno 2] No such file or directory: './report'",
            "noexec": "[Errno 13] Permission denied: './report'",
            "garbage": "[Errno 8] Exec format error: './report'",
            "nodir": f"[Errno 2] No such file or directory: '{ventures['nodir']}'"}

    def failed(rs):
        notes = {}
        for name in want:
            got = [r["note"] for _, r in of(rs, "report", name) if r["status"] == "failed"]
            if got:
                notes[name] = got[-1]
        return notes if len(notes) == len(want) else None
    notes = av.wait_for(failed, timeout=15, what="a failed report of each")
    for name, text in want.items():
        assert notes[name] == f"could not start: {text}", (name, notes[name])
    assert av.cli("status").returncode == 0, "the warden and avsmd carry on"
