"""Who is at fault, containment and crashes, against a real ``exchange run`` as root with real
Unix accounts (docs/exchange.md, "Who is at fault" and "Threat model").

The tests create two Unix accounts (the ``accounts`` fixture; removed at the end), map the
exchange's users alice and bob to them, and run ``marketsched exchange run DATA --multi-user``
as its own process (root, cgroups where the machine has them: CI's). Local provider p1's node
is CPU 0, p2's is CPU 1. Asserted are recorded facts only (contract states, the ledger, the
jobs' own output, the kernel's cgroup files); every wait is for an event, bounded generously.

* a user's ``exit 200`` and ``kill -9 $$``: the provider is paid, no penalty; the job cannot
  read ``exchange.db``; an unmapped user's request is refused once the multi-user run is
  recorded, and one taken before the run lapses with a note and nothing of it runs (before: it
  ran as root);
* kill -9 of ``exchange run`` between a job's launch and its go, 20 times (a pause point the
  test controls, ``MARKETSCHED_EXCHANGE_PAUSE_BEFORE_GO``): no contract fails, each is settled
  once, each job that ran ran once, the books balance;
* a job that widens its CPU affinity stays on its node's CPU, 1,000 forks are held to the
  process limit, an allocation past the contracted memory is stopped inside the job, and
  another user's contract on the other CPU goes on and is delivered.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from live_helpers import BOMB, wait_for
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.providers import JOB_PROCESSES
from marketsched.exchange.store import FINAL_CONTRACT_STATES, ExchangeStore
from marketsched.platform.clock import WallClock
from marketsched.platform.executor import LocalExecutor
from marketsched.platform.jobfiles import read_state

HANG = 180.0  # a guard against a hang, not a timing claim


def _exchange(open_dir: Path, accounts, nodes=(("p1", 2, 256, [0]), ("p2", 2, 256, [1]))):
    """An exchange in ``open_dir/ex`` (slots and periods of 1 s, pay-as-bid, penalty 1x) with
    local providers (name, CPU units, memory MiB, CPUs) offering their node for 400 slots from
    the next one, alice and bob mapped to ``accounts``; returns (client, store, data)."""
    data = open_dir / "ex"
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=1, period_seconds=1, mechanism="pay-as-bid", penalty=1.0, epoch=time.time())
    client = Exchange(store, WallClock(store.settings()["epoch"]))
    for (name, cpu, mem, cpus), reserve in zip(nodes, (1.0, 2.0)):
        client.join(name)
        client.add_node(name, "n0", cpu, mem, cpus=cpus)
        client.submit_offer(name, "n0", reserve, client.slot() + 1, client.slot() + 400)
    for user, account in zip(("alice", "bob"), accounts):
        store.set_unix(user, account)
    return client, store, data


def _run(data: Path, log, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "marketsched.cli", "exchange", "run", str(data), "--multi-user",
                             "--poll", "0.05"], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _kill_jobs(data: Path) -> None:
    """Jobs outlive the exchange: kill every one still recorded (with its cgroups)."""
    for root in (data / "providers").glob("*"):
        ex = LocalExecutor(root, containment="none")
        ex.reap(())
        ex.shutdown()


def _request(client, user, cpu, mem, length, command, lead=5):
    s = client.slot()
    return client.submit_request(user, 5.0, cpu, mem, s + lead, s + lead + length - 1, command)


def _contract(store, request_id):
    got = [c for c in store.contracts() if c["request_id"] == request_id]
    return got[0] if got else None


def _state(store, request_id):
    c = _contract(store, request_id)
    return None if c is None else c["state"]


def _ledger(store, cid):
    return [(e["kind"], e["from_account"], e["to_account"], e["amount"])
            for e in store.ledger.entries() if e["job_id"] == cid]


def _paid(c):
    return [("user-price", f"user:{c['user']}", "exchange:clearing", c["user_price"]),
            ("provider-price", "exchange:clearing", f"provider:{c['provider']}", c["provider_price"])]


def _out(data, c, name="stdout") -> str:
    f = data / "providers" / c["provider"] / f"job-{c['id']}" / name
    return f.read_text() if f.exists() else ""


def test_users_own_exit_status_pays_the_provider_and_an_unmapped_user_never_runs(accounts, open_dir):
    client, store, data = _exchange(open_dir, accounts)
    # before any run the mode is unknown: an unmapped user's request is taken (and lapses below)
    unmapped = _request(client, "carol", 1, 10, 20, "echo ran; id -u", lead=20)
    log = open(open_dir / "exchange.log", "ab")
    proc = _run(data, log)
    try:
        assert wait_for(lambda: len(store.periods()) > 0, HANG)
        # the multi-user run is recorded: an unmapped user's request is refused at submission
        with pytest.raises(ValueError, match="no Unix account.*marketsched exchange unix DATA carol ACCOUNT"):
            _request(client, "carol", 1, 10, 20, "echo ran; id -u")
        reqs = {"exit 200": _request(client, "alice", 1, 10, 20, "echo ran; exit 200"),
                "kill -9 $$": _request(client, "alice", 1, 10, 20, "echo ran; kill -9 $$"),
                "read db": _request(client, "bob", 1, 10, 20,
                                    f'if cat "{data}/exchange.db" > /dev/null 2>&1; then echo read; else echo denied; '
                                    f'fi; id -un'),
                "unmapped": unmapped}
        assert wait_for(lambda: all(_state(store, r) in FINAL_CONTRACT_STATES for r in reqs.values()), HANG), \
            {k: _state(store, r) for k, r in reqs.items()}
    finally:
        _stop(proc)
        log.close()
        _kill_jobs(data)
    c = {k: _contract(store, r) for k, r in reqs.items()}
    for k, code in (("exit 200", 200), ("kill -9 $$", 137)):
        assert (c[k]["state"], c[k]["exit_code"]) == ("delivered", code), c[k]
        assert c[k]["note"].startswith("the job exited by itself") and _out(data, c[k]) == "ran\n"
        assert _ledger(store, c[k]["id"]) == _paid(c[k])
    assert _out(data, c["read db"]).split() == ["denied", accounts[1]]
    assert c["unmapped"]["state"] == "lapsed" and "user 'carol' has no Unix account" in c["unmapped"]["note"]
    assert not (data / "providers" / c["unmapped"]["provider"] / f"job-{c['unmapped']['id']}").exists()
    assert _ledger(store, c["unmapped"]["id"]) == []
    books = store.check_books()
    assert books["penalties"] == 0 and sum(store.balances().values()) == 0


def test_kill_9_between_launch_and_go_makes_no_provider_pay(accounts, open_dir):
    """20 kill -9 cycles of ``exchange run``, each at a job's launch/go point (a pause point the
    test sets): the restarted exchange puts the contract back to pending and runs it once."""
    cycles = 20
    client, store, data = _exchange(open_dir, accounts, nodes=(("p1", 40, 4000, [0]),))
    ran = open_dir / "ran"
    ran.touch()
    ran.chmod(0o666)
    pauses = open_dir / "pauses"
    pauses.mkdir()
    env = {"MARKETSCHED_EXCHANGE_PAUSE_BEFORE_GO": str(pauses)}
    log = open(open_dir / "exchange.log", "ab")
    procs = [_run(data, log, env)]
    try:
        assert wait_for(lambda: len(store.periods()) > 0, HANG)
        # windows of 300 s: every contract starts inside its window however slowly a loaded
        # machine restarts Python 20 times
        reqs = [_request(client, "alice", 1, 10, 300, f"echo $MARKETSCHED_CONTRACT >> {ran}", lead=15)
                for _ in range(cycles + 2)]
        assert wait_for(lambda: all(_contract(store, r) for r in reqs), HANG)  # cleared before the first start
        for i in range(cycles):
            assert wait_for(lambda i=i: len(list(pauses.iterdir())) > i, HANG), f"cycle {i}: no pause"
            procs[-1].send_signal(signal.SIGKILL)  # kill -9 between the job's launch and its go
            procs[-1].wait()
            procs.append(_run(data, log, env))
        assert wait_for(lambda: len(list(pauses.iterdir())) > cycles, HANG)
        procs[-1].send_signal(signal.SIGKILL)
        procs[-1].wait()
        procs.append(_run(data, log))  # the last one pauses nowhere
        assert wait_for(lambda: all(_state(store, r) in FINAL_CONTRACT_STATES for r in reqs), HANG), \
            [_state(store, r) for r in reqs]
    finally:
        for p in procs:
            _stop(p)
        log.close()
        _kill_jobs(data)
    contracts = [_contract(store, r) for r in reqs]
    paused = sorted(int(p.name) for p in pauses.iterdir())
    assert len(paused) == cycles + 1 and set(paused) <= {c["id"] for c in contracts}
    runs = [int(x) for x in ran.read_text().split()]
    for c in contracts:
        assert c["state"] in ("delivered", "lapsed"), c  # never failed: no provider paid for a crash
        if c["state"] == "delivered":
            assert runs.count(c["id"]) == 1 and _ledger(store, c["id"]) == _paid(c)
        else:
            assert runs.count(c["id"]) == 0 and _ledger(store, c["id"]) == []
    assert sum(c["state"] == "delivered" for c in contracts) >= cycles  # the paused ones ran after their restart
    books = store.check_books()
    assert books["penalties"] == 0 and sum(store.balances().values()) == 0


AFFINITY = ('python3 -c "import os; os.sched_setaffinity(0, range(os.cpu_count())); '
            'print(sorted(os.sched_getaffinity(0)))" > affinity; taskset -cp 0-63 $$ > /dev/null 2>&1; '
            'grep Cpus_allowed_list /proc/self/status > allowed; sleep 300')
HOG = "python3 -c \"b = bytearray({mib} << 20); open('survived', 'w').write('yes')\"; echo $? > status; sleep 300"
COUNT = 'i=0; while :; do i=$((i+1)); echo $i > count.new; mv -f count.new count; sleep 0.05; done'


def _cgroups(data, c) -> list[Path]:
    rec = read_state(data / "providers" / c["provider"], c["id"])
    return [Path(d) for d in rec["cgroups"]] if rec else []


def _cg_file(dirs, name) -> str:
    for d in dirs:
        if (d / name).exists():
            return (d / name).read_text().strip()
    raise AssertionError(f"no {name} in the job's cgroups {dirs}")


def test_contract_jobs_are_confined_to_their_cpus_processes_and_memory(accounts, open_dir):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs: one per provider's node")
    client, store, data = _exchange(open_dir, accounts, nodes=(("p1", 4, 4096, [0]), ("p2", 4, 4096, [1])))
    log = open(open_dir / "exchange.log", "ab")
    proc = _run(data, log)
    try:
        assert wait_for(lambda: len(store.periods()) > 0, HANG)
        r_aff = _request(client, "alice", 1, 64, 120, AFFINITY)
        r_bomb = _request(client, "alice", 2, 3072, 120, BOMB.format(tries=1000))  # room for 500 Pythons
        r_hog = _request(client, "alice", 1, 64, 120, HOG.format(mib=512))
        assert wait_for(lambda: all(_contract(store, r) for r in (r_aff, r_bomb, r_hog)), HANG)
        r_side = _request(client, "bob", 4, 64, 15, COUNT)  # p1 is full: on p2's CPU
        started = {r: None for r in (r_aff, r_bomb, r_hog, r_side)}
        assert wait_for(lambda: all(_state(store, r) == "running" for r in started), HANG), \
            [_state(store, r) for r in started]
        c_aff, c_bomb, c_hog, c_side = (_contract(store, r) for r in (r_aff, r_bomb, r_hog, r_side))
        assert {c_aff["provider"], c_bomb["provider"], c_hog["provider"]} == {"p1"} and c_side["provider"] == "p2"
        # the kernel's limits of each job's cgroups are the contract's
        for c, cpu_units, mem in ((c_aff, 1, 64), (c_bomb, 2, 3072), (c_hog, 1, 64)):
            dirs = _cgroups(data, c)
            assert _cg_file(dirs, "cpuset.cpus") == "0"
            quota, period = int(_cg_file(dirs, "cpu.cfs_quota_us")), int(_cg_file(dirs, "cpu.cfs_period_us"))
            assert quota == round(cpu_units / 4 * period)
            assert int(_cg_file(dirs, "memory.limit_in_bytes")) == mem * 2**20
            assert _cg_file(dirs, "pids.max") == str(JOB_PROCESSES)
        # the job widened its affinity: the cpuset holds it to CPU 0
        assert wait_for(lambda: _out(data, c_aff, "allowed"), HANG)
        assert _out(data, c_aff, "affinity").strip() == "[0]"
        assert _out(data, c_aff, "allowed").split() == ["Cpus_allowed_list:", "0"]
        # 1,000 forks: at most the process limit, the rest fail inside the job
        assert wait_for(lambda: _out(data, c_bomb, "forks"), HANG)
        ok, failed = map(int, _out(data, c_bomb, "forks").split())
        assert ok + failed == 1000 and ok < JOB_PROCESSES and failed > 1000 - JOB_PROCESSES
        assert int(_cg_file(_cgroups(data, c_bomb), "pids.current")) <= JOB_PROCESSES
        # 512 MiB in a 64 MiB contract: the allocation is stopped inside the job
        assert wait_for(lambda: _out(data, c_hog, "status"), HANG)
        assert _out(data, c_hog, "status").strip() != "0" and not _out(data, c_hog, "survived")
        # bob's contract on the other CPU goes on, and the exchange goes on settling
        assert wait_for(lambda: _out(data, c_side, "count"), HANG)
        n = int(_out(data, c_side, "count"))
        assert wait_for(lambda: int(_out(data, c_side, "count") or 0) > n + 10, HANG)
        assert wait_for(lambda: _state(store, r_side) in FINAL_CONTRACT_STATES, HANG)
    finally:
        _stop(proc)
        log.close()
        _kill_jobs(data)
    side = store.contract(c_side["id"])
    assert side["state"] == "delivered" and side["note"].startswith("served its whole window"), side
    assert side["cpu_seconds"] is not None and "peak memory" in side["note"]
    assert store.check_books()["penalties"] == 0
