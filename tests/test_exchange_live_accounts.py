"""Contract jobs run as their users' Unix accounts, against real processes and real accounts.

The tests create two Unix accounts (``useradd``; removed at the end, the ``accounts``
fixture), map the exchange's users alice and bob to them (``marketsched exchange unix``) and
run an exchange as root with a local provider on the live market's executor: a contract job
of alice's cannot read bob's job folder nor the exchange's database. In single-user mode (the
operator's explicit choice as root) a job runs as the exchange's own account; otherwise an
unmapped user's contract lapses and nothing of it runs. The clock is fake (the
exchange's time moves by hand); every wait is for an event, bounded generously.
"""

from __future__ import annotations

import os
import pwd

import pytest
from click.testing import CliRunner

from live_helpers import wait_for
from marketsched.cli import main
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.providers import provider_backends
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import FakeClock


@pytest.fixture
def exchange(open_dir):
    """An exchange in ``open_dir/exchange`` (a folder every account may traverse, so only the
    exchange's own modes protect its files), slots and periods of 10 s, provider p1 with node
    n0 (2 CPUs) offered over slots 1-50, on a fake clock; its contracts run as processes."""
    data = open_dir / "exchange"
    data.mkdir()
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=10, period_seconds=10, mechanism="pay-as-bid")
    clock = FakeClock()
    ex = Exchange(store, clock, provider_backends(data, containment="none"))
    ex.join("p1")
    ex.add_node("p1", "n0", 2, 100)
    ex.submit_offer("p1", "n0", 1.0, 1, 50)
    yield ex, clock, data
    backend = ex.backend("p1")
    for c in ex.open_contracts():  # bob's job still sleeps
        if backend.running(c["id"]):
            backend.stop(c["id"])
    ex.close()
    store.close()


def _start(ex, clock, slot):
    """Move the clock to ``slot`` and let the exchange clear and start what is due."""
    clock.set(slot * 10)
    ex.tick()


def _output(ex, cid) -> str:
    f = ex.backend("p1").executor.workdir(cid) / "stdout"
    return f.read_text() if f.exists() else ""


def _contract(ex, request_id):
    return next(c for c in ex.store.contracts() if c["request_id"] == request_id)


def _settled(ex, request_id) -> bool:
    ex.tick()
    return _contract(ex, request_id)["state"] in ("delivered", "failed", "lapsed")


def test_a_contract_job_cannot_read_another_users_job_nor_the_database(exchange, accounts):
    ex, clock, data = exchange
    runner = CliRunner()
    for user, account in zip(("alice", "bob"), accounts):
        got = runner.invoke(main, ["exchange", "unix", str(data), user, account])
        assert got.exit_code == 0, got.output
    got = runner.invoke(main, ["exchange", "unix", str(data), "carol", accounts[0]])
    assert got.exit_code != 0 and "already mapped to user 'alice'" in got.output
    got = runner.invoke(main, ["exchange", "unix", str(data), "carol", "root"])
    assert got.exit_code != 0 and "is root" in got.output
    rb = ex.submit_request("bob", 5.0, 1, 0, 1, 20, "echo bob-output; echo bob-file > secret; sleep 60")
    ex.tick()  # clears: bob's contract for slots 1-20
    _start(ex, clock, 1)
    cb = _contract(ex, rb)
    assert cb["state"] == "running"
    assert wait_for(lambda: "bob-output" in _output(ex, cb["id"]), 60)
    bob_dir = ex.backend("p1").executor.workdir(cb["id"])
    targets = {"the exchange's database": data / "exchange.db", "bob's job output": bob_dir / "stdout",
               "bob's job file": bob_dir / "secret"}
    lines = [f'if cat "{p}" > /dev/null 2>&1; then echo "{k}: read"; else echo "{k}: denied"; fi'
             for k, p in targets.items()]
    lines += [f'if ls "{bob_dir}" > /dev/null 2>&1; then echo "list bob: read"; else echo "list bob: denied"; fi',
              f'if ls "{data}" > /dev/null 2>&1; then echo "list data: read"; else echo "list data: denied"; fi',
              # the checks can see a read: the job reads its own files and a world-readable one
              'echo mine > own; if cat own > /dev/null; then echo "own file: read"; fi',
              'if cat /etc/passwd > /dev/null; then echo "passwd: read"; fi',
              'id -un']
    ra = ex.submit_request("alice", 5.0, 1, 0, 3, 6, "\n".join(lines))
    _start(ex, clock, 2)  # clears alice's request
    _start(ex, clock, 3)  # starts alice's job
    assert wait_for(lambda: _settled(ex, ra), 60)
    ca = _contract(ex, ra)
    assert ca["state"] == "delivered" and ca["exit_code"] == 0, ca
    out = _output(ex, ca["id"]).splitlines()
    for k in targets:
        assert f"{k}: denied" in out, out
    assert "list bob: denied" in out and "list data: denied" in out and "own file: read" in out and "passwd: read" in out, out
    assert out[-1] == accounts[0]  # it ran as alice's account
    for f, account in ((bob_dir, accounts[1]), (ex.backend("p1").executor.workdir(ca["id"]), accounts[0])):
        assert pwd.getpwuid(f.stat().st_uid).pw_name == account and f.stat().st_mode & 0o077 == 0
    assert (data / "exchange.db").stat().st_mode & 0o077 == 0
    # a user with no account gets no job run once users are mapped: the contract lapses
    rc = ex.submit_request("carol", 5.0, 1, 0, 8, 20, "echo carol")
    _start(ex, clock, 4)  # clears carol's request
    _start(ex, clock, 8)
    cc = _contract(ex, rc)
    assert cc["state"] == "lapsed" and "user 'carol' has no Unix account" in cc["note"]
    assert not ex.backend("p1").executor.workdir(cc["id"]).exists()
    ex.store.check_books()


def test_in_single_user_mode_jobs_run_as_the_exchanges_account(exchange):
    ex, clock, _ = exchange
    ex.single_user = True  # the operator's explicit choice (exchange run --single-user)
    r = ex.submit_request("alice", 5.0, 1, 0, 1, 5, "id -u")
    ex.tick()
    _start(ex, clock, 1)
    assert wait_for(lambda: _settled(ex, r), 60)
    c = _contract(ex, r)
    assert c["state"] == "delivered"
    assert _output(ex, c["id"]).split() == [str(os.geteuid())]
