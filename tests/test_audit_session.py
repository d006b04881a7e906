"""Black-box checks of what the audit of the session's merged work found (the tour, metrics:, the
witness, hostile inputs on the new edges), each on a real avsmd and the real client."""

import os
import stat
import subprocess
import sys

from conftest import Avsm, installed_avsm, make_venture, write

VENTURE = """\
purpose: Keep the count below ten.
metric: count
controller: {kind: threshold, above: 10, action: reset}
cadence: 1h
permitted:
  - {name: reset, run: ./reset, cap: 2/hour, reversible: true}
"""

FAKE_SSH = '#!/bin/sh\nfor a; do last=$a; done\nexec /bin/sh -c "$last"\n'


def fleet_file(workdir, home, extra=""):
    """A fleet file whose one host is `home` here, reached through a fake ssh that runs the bridge."""
    ssh = write(os.path.join(workdir, "fake-ssh"), FAKE_SSH, 0o755)
    bridge = f"{sys.executable} -S {installed_avsm()} --home {home} bridge --read-only"
    return write(os.path.join(workdir, "fleet.yaml"),
                 f"ssh: {ssh}\nhosts:\n  - {{host: web1, bridge: {bridge}}}\n{extra}")


def client(*args, env=None):
    return subprocess.run([sys.executable, "-S", installed_avsm(), *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_a_mirror_is_kept_for_this_user_alone_and_avsmd_refuses_to_run_on_it(av, workdir):
    """A witness's --mirror is a home (the README): kept 0700 and 0600 whatever the umask, so its
    doctor warns of nothing; an avsmd started on it exits 73 saying what it is, and runs and writes
    nothing (it would run the host's ventures here and fork the copy from the host's ledger)."""
    d = make_venture(workdir, "shop", VENTURE, {"report": "#!/bin/sh\necho 5\n",
                                                "reset": "#!/bin/sh\nexit 0\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: any(r["kind"] == "report" for _, _, r in rs), what="the first report")
    keep = os.path.join(workdir, "keep")
    old = os.umask(0o022)
    try:
        run = client("fleet", "--fleet", fleet_file(workdir, av.home), "witness", "--keep", keep,
                     "--mirror")
    finally:
        os.umask(old)
    assert run.returncode == 0, run.stdout + run.stderr
    mirror = os.path.join(keep, "web1")
    for top, dirs, files in os.walk(keep):
        assert stat.S_IMODE(os.stat(top).st_mode) == 0o700, top
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode) == 0o600, name
    doctor = Avsm(av.bindir, mirror).cli("doctor")
    assert doctor.returncode == 0 and "warn" not in doctor.stdout, doctor.stdout
    before = os.stat(os.path.join(mirror, "ledger.db"))
    started = Avsm(av.bindir, mirror).daemon_cmd(timeout=20)
    assert started.returncode == 73, started.stderr
    assert "a witness's copy" in started.stderr and "doctor, summary" in started.stderr
    after = os.stat(os.path.join(mirror, "ledger.db"))
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert not os.path.exists(os.path.join(mirror, "sock"))
    again = client("fleet", "--fleet", fleet_file(workdir, av.home), "witness", "--keep", keep,
                   "--mirror")
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_host_listed_twice_is_refused_with_a_whole_example(workdir):
    """A fleet file naming a host twice is 78 at its line, and the message ends in the example of
    a name of its own, not a dangling colon."""
    path = write(os.path.join(workdir, "fleet.yaml"), "hosts:\n  - web1\n  - {host: db1, name: web1}\n")
    run = client("fleet", "--fleet", path, "status")
    assert run.returncode == 78, run.stderr
    line = run.stderr.strip()
    assert ":3:3: web1 is in hosts twice (first at line 2)" in line, line
    assert not line.endswith(":") and "{host: db1, name: web1-2}" in line, line


def test_a_checkpoint_signed_by_another_principal_is_refused_without_an_empty_aside(av, workdir):
    """The witness's refusal of a checkpoint whose signature is not the principal's (65) names the
    principal and the file, with no empty '()' where ssh-keygen said nothing."""
    key = os.path.join(workdir, "ck")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    with open(key + ".pub") as fh:
        pub = fh.read().strip()
    allowed = write(os.path.join(workdir, "allowed"), f'web namespaces="avsm-checkpoint" {pub}\n')
    write(os.path.join(av.home, "config.yaml"), f"checkpoint: {{key: {key}, principal: web}}\n")
    av.start()
    path = fleet_file(workdir, av.home)
    write(path, open(path).read().replace("bridge --read-only}", "bridge --read-only, principal: ops}")
          + f"allowed_signers: {allowed}\n")
    run = client("fleet", "--fleet", path, "witness", "--keep", os.path.join(workdir, "keep"))
    assert run.returncode == 65, run.stdout + run.stderr
    assert "is refused: its signature is not ops's" in run.stdout and "()" not in run.stdout, run.stdout
