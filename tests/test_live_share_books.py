"""The live share market's books with real processes: ``marketsched market share --data`` books
every period in the market's ledger (``market statement`` shows them), and kill -9 of the share
market mid-run, then a restart on the same books, pays no period twice and loses none."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.cli import market
from marketsched.live.sharebooks import ShareBooks
from marketsched.live.tycoon import find_cgroup1_cpu, find_cgroup2_cpu
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO, REVENUE, Store, user_account
from test_live_exactly_once import ScriptedExecutor  # the broker keeps the accounts here: it runs no job

HANG = 120.0  # a guard against a hang, not a timing claim


def make_market(data, deposits):
    b = Broker(data, MarketConfig(single_user=True), clock=FakeClock(0.0), executor=ScriptedExecutor(Path(data).parent / "jobs"))
    b.ensure_admin()
    for name, amount in deposits.items():
        b.add_user(True, name, deposit=amount)
    b.store.close()


def statement(data, name):
    b = Broker(data, MarketConfig(single_user=True), clock=FakeClock(0.0), executor=ScriptedExecutor(Path(data).parent / "jobs"))
    try:
        return b.statement("admin", True, name)
    finally:
        b.store.close()


def remove_cgroups(pid):
    """The cgroups a killed share market (``pid``) left (its jobs killed first)."""
    for root in (find_cgroup1_cpu(), find_cgroup2_cpu()):
        if root is None:
            continue
        for top in root.glob(f"marketsched-share-{pid}-*"):
            for d in sorted(top.rglob("*"), key=lambda p: -len(p.parts)):
                if d.is_dir():
                    d.rmdir()
            top.rmdir()


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
