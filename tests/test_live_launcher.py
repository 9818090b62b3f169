"""The privileged launcher (``marketsched.platform.launcherd``) refuses whatever is outside its
request set, whoever sends it: requests are sent here straight down its socket, as a broker
taken over by an attacker (running as the service account) could.

Refused: jobs as root, as the service account, as a system account (even one mapped to a
market user), as an account mapped to no market user; job ids that are not positive integers
(a path instead of an id); reading any file but a job's stdout, stderr and exit code; unknown
operations, unknown or missing fields, wrong types, environment variables that are not the
market's, bytes that are not JSON, a message longer than the limit. After each refusal the
launcher still serves a proper request, and it started nothing for the refused ones. Needs root
and creates Unix accounts (as the ``accounts`` fixture).
"""

from __future__ import annotations

import json
import os
import pwd
import struct
from pathlib import Path

import pytest

from live_helpers import chown_tree, make_service_account, require_cgroups, wait_for
from marketsched.live.broker import Broker, MarketConfig
from marketsched.platform.executor import JobLimits, proc_start_ticks
from marketsched.platform.launcherd import MAX_MESSAGE, LauncherError, recv_frame, spawn


@pytest.fixture(scope="module")
def service():
    yield from make_service_account()


@pytest.fixture
def launcher(accounts, service, open_dir):
    """A launcher for a market whose broker is the service account: alice is mapped to the
    first test account, dan to ``daemon`` (a system account), svc to the service account; the
    second test account is mapped to nobody."""
    data = open_dir / "market"
    b = Broker(data, MarketConfig(single_user=False))
    require_cgroups(b.executor)
    b.ensure_admin()
    b.add_user(True, "alice", 10, unix=accounts[0])
    b.add_user(True, "dan", 10, unix="daemon")
    b.add_user(True, "svc", 10, unix=service)
    b.stop()
    chown_tree(data, service)
    client = spawn(data / "jobs", pwd.getpwnam(service).pw_uid, JobLimits(cpus=1.0, memory=None, processes=64),
                   data / "market.db")
    yield client
    client.close()


def start(client, key=1, user="x", **kw):
    req = dict(key=key, user=user, command="id -un", env={"MARKETSCHED_JOB_ID": str(key)}, frozen=False,
               record_exit=True)
    req.update(kw)
    return client.call("start", **req)


def refused(fn, *args, **kw) -> str:
    with pytest.raises(LauncherError) as info:
        fn(*args, **kw)
    msg = str(info.value)
    assert msg.startswith("refused:"), msg
    return msg


def run_job(client, key, user):
    """Start, go and wait for a job; its stdout."""
    r = start(client, key=key, user=user)
    client.call("go", key=key)
    assert wait_for(lambda: proc_start_ticks(r["pid"]) is None, 60)
    assert client.call("status", key=key)["code"] == 0
    assert wait_for(lambda: client.call("read", key=key, name="exit_code", size=64)["text"].strip() == "0", 60)
    out = client.call("read", key=key, name="stdout", size=4096)["text"]
    assert client.call("kill", key=key, timeout=5.0)["gone"]
    return out


def test_the_launcher_starts_jobs_only_as_mapped_ordinary_accounts(launcher, accounts, service, open_dir):
    assert "is root" in refused(start, launcher, user="root")
    assert "does not exist" in refused(start, launcher, user="no-such-account")
    assert "not mapped to a market user" in refused(start, launcher, user=accounts[1])
    assert "system account" in refused(start, launcher, user="daemon")  # mapped, yet refused
    assert "broker's own account" in refused(start, launcher, user=service)
    assert "Unix account name" in refused(start, launcher, user="../root")
    # nothing was started for them; a mapped ordinary account's job runs as that account
    jobs = open_dir / "market" / "jobs"
    assert sorted(p.name for p in jobs.iterdir()) == []
    assert run_job(launcher, 7, accounts[0]).strip() == accounts[0]
    assert (jobs / "job-7").stat().st_uid == pwd.getpwnam(accounts[0]).pw_uid


def test_the_launcher_takes_job_ids_never_paths(launcher, accounts):
    for key in ("../../etc", "/etc", "1", 0, -1, 2**64, 1.5, True, None):
        refused(start, launcher, key=key, user=accounts[0])
        for op in ("go", "freeze", "thaw", "status"):
            refused(launcher.call, op, key=key)
        refused(launcher.call, "kill", key=key, timeout=1.0)
        refused(launcher.call, "read", key=key, name="stdout", size=10)
    for name in ("../../../etc/shadow", "/etc/shadow", "command.sh", "stdout/..", ""):
        assert "name must be one of" in refused(launcher.call, "read", key=1, name=name, size=10)
    refused(launcher.call, "read", key=1, name="stdout", size=1 << 30)
    assert "not waiting for its go" in refused(launcher.call, "go", key=3)
    assert run_job(launcher, 8, accounts[0]).strip() == accounts[0]


def test_the_launcher_refuses_malformed_requests_and_goes_on(launcher, accounts):
    assert "unknown request" in refused(launcher.call, "exec", argv=["/bin/sh"])
    assert "unknown request" in refused(launcher.call, "__init__")
    assert "unknown: uid" in refused(start, launcher, user=accounts[0], uid=0)
    assert "missing: env" in refused(launcher.call, "start", key=1, user=accounts[0], command="true", frozen=False,
                                     record_exit=True)
    assert "wrong type" in refused(start, launcher, user=accounts[0], frozen="no")
    assert "wrong type" in refused(start, launcher, user=accounts[0], env=["LD_PRELOAD=/tmp/x.so"])
    for env in ({"LD_PRELOAD": "/tmp/x.so"}, {"PATH": "/tmp"}, {"MARKETSCHED_X": 1}, {"MARKETSCHED_X": "a\0b"}):
        assert "environment variable" in refused(start, launcher, user=accounts[0], env=env)
    sock = launcher.sock
    for frame in (b"not json", b"[1, 2]", b'"start"', b"\xff\xfe", b'{"op": "cleanup", "op2": 1}'):
        with launcher.lock:
            sock.sendall(struct.pack("!I", len(frame)) + frame)
            reply = json.loads(recv_frame(sock))
        assert reply.get("refused"), (frame, reply)
    assert run_job(launcher, 9, accounts[0]).strip() == accounts[0]
    # a message longer than the limit: refused, and the launcher stops (it cannot read on)
    with launcher.lock:
        sock.sendall(struct.pack("!I", MAX_MESSAGE + 1))
        reply = json.loads(recv_frame(sock))
        assert reply.get("refused") and recv_frame(sock) is None
    assert launcher.process.wait(timeout=60) == 0


def test_the_launcher_runs_as_root_and_exits_with_its_broker(launcher):
    pid = launcher.process.pid
    status = Path(f"/proc/{pid}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert uids == ["0"] * 4
    assert os.getsid(pid) == pid  # its own session: a Ctrl-C at the broker's terminal does not reach it
    launcher.sock.close()  # the broker went away
    assert launcher.process.wait(timeout=60) == 0


@pytest.mark.parametrize("args, error", [
    (["--service-user", "root"], "is root: the broker must run as an unprivileged account"),
    (["--service-user", "no-such-account"], "service account 'no-such-account' does not exist"),
    (["--service-user", "daemon", "--single-user"], "needs multi-user mode and the local executor"),
    (["--service-user", "daemon", "--executor", "slurm"], "needs multi-user mode and the local executor"),
    (["--service-user", "daemon", "--db", "postgresql://nobody@localhost/none"], "SQLite database in --data"),
    (["--service-user", "daemon", "--dayahead", "dpgva"], "without --dayahead"),
])
def test_serve_with_a_service_user_refuses_what_it_cannot_do(tmp_path, args, error):
    """Each refusal comes before anything is started or dropped (this test process stays root)."""
    from click.testing import CliRunner

    from marketsched.cli import main

    if os.geteuid() != 0:
        pytest.skip("serve --service-user is started as root")
    res = CliRunner().invoke(main, ["market", "serve", "--data", str(tmp_path / "m"), "--port", "0", *args])
    assert res.exit_code == 1 and error in res.output, res.output
    assert os.geteuid() == 0 and os.getuid() == 0
    assert not (tmp_path / "m").exists()
