"""The live share market's books with real processes: ``marketsched market share --data`` books
every period in the market's ledger (``market statement`` shows them), and kill -9 of the share
market mid-run, then a restart on the same books, pays no period twice and loses none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from live_helpers import end_and_clean_up, proc_state, wait_for
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.cli import market
from marketsched.live.sharebooks import ShareBooks
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO, REVENUE, Store, user_account
from test_live_exactly_once import ScriptedExecutor  # the broker keeps the accounts here: it runs no job

HANG = 120.0  # a guard against a hang, not a timing claim


def make_market(data, deposits):
    b = Broker(data, MarketConfig(single_user=True), clock=FakeClock(0.0), 
               executor=ScriptedExecutor(Path(data).parent / "jobs"))
    b.ensure_admin()
    for name, amount in deposits.items():
        b.add_user(True, name, deposit=amount)
    b.store.close()


def statement(data, name):
    b = Broker(data, MarketConfig(single_user=True), clock=FakeClock(0.0), 
               executor=ScriptedExecutor(Path(data).parent / "jobs"))
    try:
        return b.statement("admin", True, name)
    finally:
        b.store.close()


def our_cgroups(pid):
    """The cgroup folders of the share market run by process ``pid``, in every hierarchy."""
    return [p for root in Path("/sys/fs/cgroup").glob("*") for p in root.glob(f"marketsched-share-{pid}-*")] + \
        list(Path("/sys/fs/cgroup").glob(f"marketsched-share-{pid}-*"))


def booked(data, owners, rule="ps"):
    store = Store(data)
    try:
        return len(ShareBooks(store, "share", owners, rule).periods())
    finally:
        store.close()


def test_cli_books_each_period_and_the_statement_shows_it(tmp_path):
    data = tmp_path / "market"
    make_market(data, {"a": 3.5, "b": 100.0})
    res = CliRunner().invoke(market, ["share", "--rule", "ps", "--bids", "1,1", "--data", str(data), "--users", "a,b",
                                      "--interval", "0.2", "--duration", "1.5", "--every", "0"])
    assert res.exit_code == 0, res.output
    store = Store(data)
    books = ShareBooks(store, "share", ["a", "b"], "ps")
    periods = books.periods()
    checked = books.check()
    assert len(periods) >= 5  # round 0 and at least one per 0.2 s after it
    # a pays 1 per period until its 3.5 run out: 1, 1, 1, 0.5, then 0; b pays 1 every period
    want_a = [min(1_000_000, 3_500_000 - 1_000_000 * k) for k in range(4)] + [0] * (len(periods) - 4)
    assert [p["payments"][0] for p in periods] == want_a
    assert [p["payments"][1] for p in periods] == [1_000_000] * len(periods)
    assert store.balance(user_account("a")) == 0 and store.balance(REVENUE) == int(checked["paid"].sum())
    store.close()
    assert f"books 'share': {len(periods)} periods" in res.output
    st = statement(data, "a")
    shares = [e for e in st["entries"] if e["kind"] == "share"]
    assert [round(-e["signed"] * MICRO) for e in shares] == want_a[:4]
    assert st["balance"] == 0


def test_cli_refuses_books_it_cannot_keep(tmp_path):
    data = tmp_path / "market"
    make_market(data, {"a": 1.0})
    for args, message in [(["--users", "a"], "--users needs --data"),
                          (["--data", str(data)], "--data needs --users"),
                          (["--data", str(data), "--users", "a,a,a"], "3 users for 2 jobs"),
                          (["--data", str(data), "--users", "a,zed"], "no market user(s) 'zed'"),
                          (["--data", str(tmp_path / "none"), "--users", "a,a"], "no market in")]:
        res = CliRunner().invoke(market, ["share", "--rule", "ps", "--bids", "1,1", "--duration", "1", *args])
        assert res.exit_code == 2 and message in res.output, res.output
    (data / "ready").write_text(f'{{"pid": {os.getpid()}, "url": "http://127.0.0.1:1"}}')
    res = CliRunner().invoke(market, ["share", "--rule", "ps", "--bids", "1,1", "--duration", "1", "--data", str(data),
                                      "--users", "a,a"])
    assert res.exit_code == 2 and "a broker is serving" in res.output, res.output


def test_kill_9_mid_run_pays_no_period_twice_and_loses_none(tmp_path):
    """kill -9 of ``market share --data`` once it has booked 3 periods, then the same command
    again on the same books: the rounds are 0, 1, ... with none twice or missing, each job's
    transfers add up to its recorded payments, and the simulator charges the same for the bids."""
    data = tmp_path / "market"
    make_market(data, {"a": 1000.0, "b": 1000.0})
    owners = ["a", "b"]
    tag = f"share-books-{os.getpid()}"
    cmd = [sys.executable, "-m", "marketsched.live.cli", "share", "--rule", "sh", "--bidder", "zic", "--values", "5,9",
           "--data", str(data), "--users", "a,b", "--interval", "0.05", "--every", "0"]
    env = {**os.environ, "MARKETSCHED_TEST_TAG": tag}
    proc = subprocess.Popen([*cmd, "--duration", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    orphans: list[int] = []
    try:
        assert wait_for(lambda: booked(data, owners, "sh") >= 3, timeout=HANG), "no periods booked"
        orphans = [int(p) for d in our_cgroups(proc.pid) for f in d.rglob("cgroup.procs")
                   for p in f.read_text().split()]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert orphans and all(proc_state(p) not in (None, "Z") for p in orphans)  # kill -9 left its jobs
        before = booked(data, owners, "sh")
        again = subprocess.run([*cmd, "--duration", "0.5"], capture_output=True, text=True, env=env, timeout=HANG)
        assert again.returncode == 0, again.stderr
        gone = [proc_state(p) in (None, "Z") for p in orphans]  # the restart ended the killed market's jobs
    finally:
        end_and_clean_up(proc, tag)
        for p in orphans:  # if the restart did not (the test fails below)
            if proc_state(p) not in (None, "Z"):
                os.kill(p, signal.SIGKILL)
    assert all(gone), gone
    assert our_cgroups(proc.pid) == []
    store = Store(data)
    books = ShareBooks(store, "share", owners, "sh")
    checked = books.check()  # rounds 0..K-1, transfers = record = simulator, double entry
    assert checked["periods"] > before
    paid = checked["paid"]
    assert store.balance(user_account("a")) == 1000 * MICRO - paid[0]
    assert store.balance(user_account("b")) == 1000 * MICRO - paid[1]
    assert len(store.entries(REVENUE)) == sum(sum(1 for p in per["payments"] if p) for per in books.periods())
    np.testing.assert_array_equal(books.transfers(), paid)
    store.close()
