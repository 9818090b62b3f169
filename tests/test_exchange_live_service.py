"""``exchange run --service-user``: the exchange as an unprivileged account, its contract jobs
started by the privileged launcher, against real processes and real Unix accounts
(docs/exchange.md, "The exchange as a service account").

The tests create a service account and two ordinary accounts (removed at the end); alice is
mapped to the first ordinary account, the second is mapped to nobody.

* A real ``exchange run --service-user`` (as its own process, started as root): once it runs,
  all four uids of the exchange are the service account's and only its launcher is root; a
  contract job runs as its user's mapped account, cannot read ``exchange.db``, cannot stop nor
  kill the exchange or its launcher (the exchange settles the contract afterwards); an unmapped
  user's request is refused.
* The launcher itself, sent requests a compromised service account could send: a provider that
  is a path, a cpuset outside the exchange's CPUs, a CPU quota above the cpuset, memory above
  the ceiling, root, a system account, the service account, an unmapped account: each refused,
  and the launcher goes on to start a mapped user's job, confined to the cpuset it was given.

Asserted are recorded facts (the kernel's view of the processes, the jobs' own output, the
database); every wait is for an event, bounded generously.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from live_helpers import chown_tree, make_service_account, wait_for
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.launcher import machine_memory
from marketsched.exchange.providers import JOB_PROCESSES, online_cpus
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import WallClock
from marketsched.platform.executor import JobLimits, proc_start_ticks
from marketsched.platform.launcherd import LauncherError, spawn
from test_exchange_live_faults import _stop  # SIGTERM, then SIGKILL for one held at the pause point

HANG = 180.0  # a guard against a hang, not a timing claim


@pytest.fixture(scope="module")
def service():
    yield from make_service_account()


def _setup(open_dir: Path, accounts, service: str, units: int = 2) -> Path:
    """An exchange in ``open_dir/ex`` (slots and periods of 1 s, pay-as-bid, penalty 1x) with
    local provider p1 offering node n0 (``units`` CPU units, 256 MiB, the first CPU) for 600
    slots, alice mapped to ``accounts[0]``, handed over to ``service``; returns its folder."""
    data = open_dir / "ex"
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=1, period_seconds=1, mechanism="pay-as-bid", penalty=1.0, epoch=time.time())
    ex = Exchange(store, WallClock(store.settings()["epoch"]))
    ex.join("p1")
    ex.add_node("p1", "n0", units, 256, cpus=[min(online_cpus())])
    ex.submit_offer("p1", "n0", 1.0, ex.slot() + 1, ex.slot() + 600)
    store.set_unix("alice", accounts[0])
    store.close()
    chown_tree(data, service)
    return data


def _ids(pid: int) -> tuple[list[str], list[str]]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = next(line for line in status if line.startswith("Uid:")).split()[1:]
    gid = next(line for line in status if line.startswith("Gid:")).split()[1:]
    return uid, gid


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
        except (OSError, ValueError, IndexError):
            pass
    return out


PRELUDE = ("import sys, json; import marketsched.cli as c, marketsched.exchange.cli; "
           "from marketsched.exchange.launcher import _preload; "
           "from marketsched.platform.launcherd import drop_privileges; _preload(); ")


def _as(service: str, *args: str) -> subprocess.CompletedProcess:
    """``marketsched exchange ARGS`` as the service account (how the operator feeds an exchange
    whose folder is the service account's): started as root, it imports what it needs and drops
    to the account (the interpreter may be installed where the account cannot read, as the
    exchange does itself)."""
    code = PRELUDE + f"drop_privileges({service!r}); c.main(sys.argv[1:], prog_name='marketsched')"
    return subprocess.run([sys.executable, "-c", code, "exchange", *args], capture_output=True, text=True, cwd="/",
                          timeout=HANG)


def _order_state(data: Path, oid: int) -> str:
    con = sqlite3.connect(f"file:{data / 'exchange.db'}?mode=ro", uri=True)
    try:
        return con.execute("SELECT state FROM ex_orders WHERE id = ?", (oid,)).fetchone()[0]
    finally:
        con.close()


def _contracts(data: Path) -> list[dict]:
    con = sqlite3.connect(f"file:{data / 'exchange.db'}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM ex_contracts ORDER BY id")]
    finally:
        con.close()


def test_exchange_live_service_user_runs_jobs_as_their_users_and_holds_no_root(open_dir, accounts, service):
    data = _setup(open_dir, accounts, service)
    svc = pwd.getpwnam(service)
    pidfile = open_dir / "pids"
    log = open(open_dir / "run.log", "w")
    run = subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "run", str(data), "--service-user",
                            service, "--poll", "0.05"], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        # the launcher is the exchange's child (root); the exchange itself drops to the account
        assert wait_for(lambda: run.poll() is not None or "exchange running" in (open_dir / "run.log").read_text(),
                        HANG)
        assert run.poll() is None and _ids(run.pid)[0] == [str(svc.pw_uid)] * 4, (open_dir / "run.log").read_text()
        (launcher,) = _children(run.pid)
        assert _ids(run.pid) == ([str(svc.pw_uid)] * 4, [str(svc.pw_gid)] * 4)
        assert _ids(launcher)[0] == ["0"] * 4
        tmp = pidfile.with_suffix(".tmp")
        tmp.write_text(f"{run.pid} {launcher}\n")
        tmp.chmod(0o644)
        tmp.rename(pidfile)
        # alice's job: who it runs as, then attacks on the database and on both processes
        command = (f"read ex la < {pidfile}; id -u; grep Cpus_allowed_list /proc/self/status | cut -f2; "
                   "tail -n 1 /proc/self/cgroup | cut -d: -f3; "
                   f"if cat {data / 'exchange.db'} > /dev/null 2>&1; then echo db-read; else echo db-denied; fi; "
                   "for p in $ex $la; do for s in STOP KILL; do "
                   "if kill -$s $p 2>/dev/null; then echo $s-sent; else echo $s-denied; fi; done; done")
        for _ in range(20):  # a request whose first slot passed before a clearing expires: submit it again
            slot = _slot(service, data)
            got = _as(service, "request", str(data), "alice", "--value", "5", "--cpu", "1", "--mem", "64",
                      "--first-slot", str(slot + 3), "--last-slot", str(slot + 40), "--command", command)
            assert got.returncode == 0, got.stderr
            oid = int(got.stdout.split()[-1])
            assert wait_for(lambda: _order_state(data, oid) != "open", HANG)
            if _contracts(data):
                break
        # the unmapped user: refused (this exchange runs each job as its user's account)
        got = _as(service, "request", str(data), "carol", "--value", "5", "--cpu", "1", "--first-slot",
                  str(slot + 50), "--last-slot", str(slot + 60), "--command", "id -u")
        assert got.returncode != 0 and "has no Unix account" in got.stderr, got.stderr
        assert wait_for(lambda: _contracts(data)[0]["state"] == "delivered", HANG), \
            (_contracts(data), (open_dir / "run.log").read_text())
        (c,) = _contracts(data)
        job = data / "providers" / "p1" / f"job-{c['id']}"
        assert job.stat().st_uid == pwd.getpwnam(accounts[0]).pw_uid
        out = (job / "stdout").read_text().split()
        # its account, its node's CPU, its own cgroup (the provider's, under the exchange's launcher)
        assert out[:2] == [str(pwd.getpwnam(accounts[0]).pw_uid), str(min(online_cpus()))]
        assert out[2].endswith(f"/job-{c['id']}") and "/marketsched-" in out[2], out
        assert out[3:] == ["db-denied"] + ["STOP-denied", "KILL-denied"] * 2
        assert run.poll() is None and _ids(run.pid)[0] == [str(svc.pw_uid)] * 4
        assert c["exit_code"] == 0 and c["user"] == "alice"
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=HANG)
        log.close()
    assert run.returncode == 0, (open_dir / "run.log").read_text()


def _slot(service: str, data: Path) -> int:
    got = _as(service, "status", str(data), "--json")
    assert got.returncode == 0, got.stderr
    return int(json.loads(got.stdout)["slot"])


@pytest.fixture
def launcher(open_dir, accounts, service):
    """The exchange's launcher for an exchange whose folder is the service account's, as
    ``exchange run --service-user`` spawns it; alice is mapped to ``accounts[0]``."""
    data = _setup(open_dir, accounts, service)
    uid = pwd.getpwnam(service).pw_uid
    (data / "providers" / "p1").mkdir(parents=True, mode=0o711)
    chown_tree(data, service)
    client = spawn(data / "providers", uid, JobLimits(cpus=None, memory=machine_memory(), processes=JOB_PROCESSES),
                   data / "exchange.db", module="marketsched.exchange.launcher")
    yield client, data
    client.close()


def _start(client, user, provider="p1", key=1, cpus=1.0, memory=64 << 20, cpuset=None, command="id -u"):
    return client.call("start", provider=provider, key=key, user=user, command=command,
                       env={"MARKETSCHED_CONTRACT": str(key)}, frozen=False, record_exit=True,
                       limits={"cpus": cpus, "memory": memory, "cpuset": cpuset})


def _refused(client, **kw) -> str:
    with pytest.raises(LauncherError) as info:
        _start(client, **kw)
    msg = str(info.value)
    assert msg.startswith("refused:"), msg
    return msg


def test_exchange_live_service_launcher_refuses_what_a_compromised_exchange_asks(launcher, accounts, service):
    client, data = launcher
    mine = sorted(online_cpus() & os.sched_getaffinity(0))
    alice = accounts[0]
    for provider in ("..", "/etc", "../p1", "p1/../..", ""):
        assert "provider" in _refused(client, user=alice, provider=provider)
    assert "outside the exchange's CPUs" in _refused(client, user=alice, cpuset=[max(mine) + 1000])
    assert "at most the cpuset" in _refused(client, user=alice, cpus=2.0, cpuset=[mine[0]])
    assert "limits.cpus" in _refused(client, user=alice, cpus=0)
    assert "limits.memory" in _refused(client, user=alice, memory=machine_memory() + 1)
    assert "exactly the fields" in client_refusal(client, alice)
    assert "is root" in _refused(client, user="root")
    assert "system account" in _refused(client, user="daemon")
    assert "broker's own account" in _refused(client, user=service)
    assert "not mapped" in _refused(client, user=accounts[1])
    assert sorted(p.name for p in (data / "providers" / "p1").iterdir()) == []  # nothing was started
    # the launcher goes on: alice's job runs as her account, pinned to the cpuset it was given
    cmd = "id -u; grep Cpus_allowed_list /proc/self/status"
    r = _start(client, user=alice, key=5, cpuset=[mine[0]], command=cmd)
    client.call("go", provider="p1", key=5)
    assert wait_for(lambda: proc_start_ticks(r["pid"]) is None, HANG)
    assert client.call("status", provider="p1", key=5)["code"] == 0
    out = client.call("read", provider="p1", key=5, name="stdout", size=4096)["text"].split()
    assert out[0] == str(pwd.getpwnam(alice).pw_uid) and out[-1] == str(mine[0])
    assert client.call("kill", provider="p1", key=5, timeout=5.0)["gone"]
    client.call("cleanup", provider="p1")


def client_refusal(client, user) -> str:
    with pytest.raises(LauncherError) as info:
        client.call("start", provider="p1", key=2, user=user, command="true", env={}, frozen=False, record_exit=True,
                    limits={"cpus": 1.0, "memory": 1 << 26, "cpuset": None, "processes": 0})
    return str(info.value)


def test_exchange_live_service_user_refuses_what_it_cannot_do(open_dir, accounts, service):
    data = _setup(open_dir, accounts, service)

    def run(*args: str) -> str:
        got = subprocess.run([sys.executable, "-m", "marketsched.cli", "exchange", "run", str(data), "--for", "0",
                              *args], capture_output=True, text=True, timeout=HANG, stdin=subprocess.DEVNULL)
        assert got.returncode != 0, got.stderr
        return got.stderr

    assert "is root: the broker must run as an unprivileged account" in run("--service-user", "root")
    assert "'no-such-account' does not exist" in run("--service-user", "no-such-account")
    assert "needs multi-user mode and cgroups" in run("--service-user", service, "--single-user")
    assert "needs multi-user mode and cgroups" in run("--service-user", service, "--containment", "none")
    os.chown(data, 0, 0)  # a folder the service account does not own: root never works in it for the account
    assert f"not to the service account {service!r}: hand it over" in run("--service-user", service)
    os.chown(data, pwd.getpwnam(service).pw_uid, pwd.getpwnam(service).pw_gid)
    got = _as(service, "join", str(data), "s1", "--kind", "slurm")
    assert got.returncode == 0, got.stderr
    assert "runs local providers only; Slurm provider(s) s1 joined" in run("--service-user", service)


def _run(data: Path, service: str, log, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "run", str(data), "--service-user",
                             service, "--poll", "0.05"], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})


def test_exchange_live_service_user_kill_9_between_launch_and_go_makes_no_provider_pay(open_dir, accounts, service):
    """kill -9 of ``exchange run --service-user`` at a job's launch/go point (the pause point
    of ``tests/test_exchange_live_faults.py``), 5 times: the launcher goes with the exchange, the
    job it was holding never runs, and the restarted exchange runs each contract once; no
    provider pays a penalty, the books balance."""
    cycles = 5
    data = _setup(open_dir, accounts, service, units=cycles + 2)
    ran, pauses = open_dir / "ran", open_dir / "pauses"
    ran.touch()
    ran.chmod(0o666)
    pauses.mkdir()
    chown_tree(pauses, service)
    env = {"MARKETSCHED_EXCHANGE_PAUSE_BEFORE_GO": str(pauses)}
    log = open(open_dir / "exchange.log", "ab")
    procs = [_run(data, service, log, env)]
    try:
        assert wait_for(lambda: procs[0].poll() is not None or "exchange running" in (open_dir / "exchange.log")
                        .read_text(), HANG)
        # windows of 300 s from 15 s on, submitted as the service account in one go
        code = PRELUDE + (
            f"drop_privileges({service!r}); from marketsched.exchange.core import Exchange; "
            "from marketsched.exchange.store import ExchangeStore; from marketsched.platform.clock import WallClock; "
            f"st = ExchangeStore({str(data)!r}); ex = Exchange(st, WallClock(st.settings()['epoch'])); s = ex.slot(); "
            f"print(json.dumps([ex.submit_request('alice', 5.0, 1, 0, s + 15, s + 314, "
            f"'echo $MARKETSCHED_CONTRACT >> {ran}') for _ in range({cycles + 2})]))")
        got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=HANG)
        assert got.returncode == 0, got.stderr
        reqs = json.loads(got.stdout)
        assert wait_for(lambda: len(_contracts(data)) == len(reqs), HANG)  # cleared before the first start
        for i in range(cycles):
            assert wait_for(lambda i=i: len(list(pauses.iterdir())) > i, HANG), f"cycle {i}: no pause"
            (launcher,) = _children(procs[-1].pid)
            procs[-1].send_signal(signal.SIGKILL)  # kill -9 between the job's launch and its go
            procs[-1].wait()
            assert wait_for(lambda launcher=launcher: proc_start_ticks(launcher) is None, HANG)  # it went too
            procs.append(_run(data, service, log, env))
        assert wait_for(lambda: len(list(pauses.iterdir())) > cycles, HANG)
        procs[-1].send_signal(signal.SIGKILL)
        procs[-1].wait()
        procs.append(_run(data, service, log))  # the last one pauses nowhere
        final = ("delivered", "failed", "lapsed")
        assert wait_for(lambda: all(c["state"] in final for c in _contracts(data)), HANG), _contracts(data)
    finally:
        for p in procs:
            _stop(p)
        log.close()
    contracts = _contracts(data)
    paused = sorted(int(p.name) for p in pauses.iterdir())
    assert len(paused) == cycles + 1 and set(paused) <= {c["id"] for c in contracts}
    runs = [int(x) for x in ran.read_text().split()]
    for c in contracts:
        assert c["state"] in ("delivered", "lapsed"), c  # never failed: no provider paid for a crash
        assert runs.count(c["id"]) == (c["state"] == "delivered"), (c, runs)
    assert sum(c["state"] == "delivered" for c in contracts) >= cycles  # the paused ones ran after their restart
    chown_tree(data, "root")  # back to root, to read the books with the exchange's own check
    store = ExchangeStore(data)
    books = store.check_books()
    assert books["penalties"] == 0 and sum(store.balances().values()) == 0
    store.close()
