"""The books of the live share market (Stößer 2009, section 6.4.1: pay-as-bid every period),
process-free: each period's payments are ledger transfers, exactly once, capped at balances."""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest

from marketsched.behaviour.learning import ZIC
from marketsched.live.share import FixedBids, RecordedBids, ShareMarket
from marketsched.live.sharebooks import ShareBooks
from marketsched.platform.ledger import DEPOSITS, MICRO, REVENUE, Store, user_account


def cpu():
    return min(os.sched_getaffinity(0))


def store_with(tmp_path, deposits: dict[str, float]) -> Store:
    store = Store(tmp_path)
    for name, amount in deposits.items():
        store.add_user(name, f"hash-{name}", False, 0.0)
        if amount:
            store.post(0.0, "deposit", DEPOSITS, user_account(name), round(amount * MICRO), memo="deposit")
    return store


def market(store, rule, bidder, owners, values=None, name="share", clock=lambda: 5.0):
    books = ShareBooks(store, name, owners, rule)
    vals = np.ones(len(owners)) if values is None else values
    return ShareMarket(cpu(), rule, bidder, vals, enforcement="stride", books=books, clock=clock), books


def reference_paid(table, owners, deposits):
    """Pay-as-bid with each bid capped at what its owner has left, plainly: period by period,
    job by job, in micro-units."""
    left = {o: round(deposits[o] * MICRO) for o in owners}
    paid = np.zeros(len(owners), dtype=np.int64)
    for row in table:
        for i, o in enumerate(owners):
            p = min(round(row[i] * MICRO), left[o])
            left[o] -= p
            paid[i] += p
    return paid


@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_each_periods_payments_are_booked_to_the_micro_unit(tmp_path, rule):
    """Random bids with ties, zeros and fractions, owners sharing accounts, balances that run out:
    the transfers are the capped bids (the reference), no balance goes below 0, the revenue is
    their sum, and the recorded bids replay through the simulator to the same payments."""
    rng = np.random.default_rng(11)
    for case in range(8):
        n = int(rng.integers(1, 5))
        owners = [f"u{int(rng.integers(0, 3))}" for _ in range(n)]
        deposits = {o: float(rng.choice([0.0, 1.5, 4.25, 100.0])) for o in sorted(set(owners))}
        deposits[owners[0]] = 100.0  # job 0 bids >= 1 and can pay: every period is played
        table = rng.choice([0.0, 0.5, 1.0, 1.0, 2.000001, 3.0], size=(6, n))
        table[:, 0] = np.maximum(table[:, 0], 1.0)
        store = store_with(tmp_path / f"{rule}{case}", deposits)
        m, books = market(store, rule, RecordedBids(table), owners)
        for _ in table:
            m._round()
        want = reference_paid(table, owners, deposits)
        assert len(books.periods()) == len(table)
        np.testing.assert_array_equal(books.check()["paid"], want)
        np.testing.assert_array_equal(books.transfers(), want)
        np.testing.assert_array_equal(np.rint(m.paid * MICRO).astype(np.int64), want)
        bal = store.balances()
        assert all(b >= 0 for a, b in bal.items() if a.startswith("user:"))
        assert bal[REVENUE] == int(want.sum())
        store.close()


def test_a_bid_is_capped_at_its_owners_balance(tmp_path):
    """a has 2.5 for two jobs bidding 1 each, b has 10 and bids 1: a's jobs pay 1 + 1, then
    0.5 + 0 (the second job gets nothing), then 0; b pays 1 every period; PS shares follow the
    capped bids."""
    store = store_with(tmp_path, {"a": 2.5, "b": 10.0})
    m, books = market(store, "ps", FixedBids([1.0, 1.0, 1.0]), ["a", "a", "b"])
    shares = [m._round().shares for _ in range(3)]
    np.testing.assert_allclose(shares, [[1 / 3, 1 / 3, 1 / 3], [1 / 3, 0.0, 2 / 3], [0.0, 0.0, 1.0]])
    np.testing.assert_array_equal(books.transfers(), [1_500_000, 1_000_000, 3_000_000])
    assert store.balance(user_account("a")) == 0
    assert [p["bids"] for p in books.periods()][1] == [500_000, 0, 1_000_000]
    books.check()


def test_nobody_can_pay_no_period_is_played(tmp_path):
    store = store_with(tmp_path, {"a": 0.0, "b": 0.0})
    m, books = market(store, "sh", FixedBids([2.0, 1.0]), ["a", "b"])
    assert m._round() is None
    assert books.periods() == [] and not m.history
    np.testing.assert_array_equal(m.tickets()[:, 0], [0.0, 0.0])  # every job stopped
    assert books.check()["periods"] == 0


def test_a_period_is_booked_once(tmp_path):
    """Booking a recorded period again is refused and moves no money (one transaction)."""
    store = store_with(tmp_path, {"a": 5.0})
    m, books = market(store, "ps", FixedBids([1.0]), ["a"])
    m._round()
    before = store.balances()
    with pytest.raises(sqlite3.IntegrityError):
        books.book(0, 6.0, [1_000_000], [1.0], [1_000_000])
    assert store.balances() == before
    assert books.check()["periods"] == 1


def test_a_market_started_again_continues_its_books(tmp_path):
    """Three ZIC periods, the market object dropped (as by kill -9), a new one on the same books:
    rounds 3.. follow, and all six bid rows are those of an uninterrupted run with the seed."""
    store = store_with(tmp_path, {"a": 100.0, "b": 100.0})
    first, books = market(store, "sh", ZIC(), ["a", "b"], values=[5.0, 9.0])
    for _ in range(3):
        first._round()
    again, books = market(store, "sh", ZIC(), ["a", "b"], values=[5.0, 9.0])
    assert len(again.history) == 3
    for _ in range(3):
        again._round()
    whole = ShareMarket(cpu(), "sh", ZIC(), [5.0, 9.0], enforcement="stride")
    for _ in range(6):
        whole._round()
    assert [p["round"] for p in books.periods()] == list(range(6))
    np.testing.assert_array_equal([np.asarray(p["bids"]) / MICRO for p in books.periods()],
                                  [p.bids for p in whole.history])
    np.testing.assert_array_equal(books.check()["paid"], np.rint(whole.paid * MICRO))


def test_books_refuse_what_does_not_match(tmp_path):
    store = store_with(tmp_path, {"a": 1.0})
    with pytest.raises(ValueError, match="no market user.*'zed'"):
        ShareBooks(store, "share", ["a", "zed"], "ps")
    m, _ = market(store, "ps", FixedBids([1.0]), ["a"])
    m._round()
    with pytest.raises(ValueError, match="kept for rule ps and owners a"):
        ShareBooks(store, "share", ["a"], "sh")
    with pytest.raises(ValueError, match="1 owners for 2 jobs"):
        ShareMarket(cpu(), "ps", FixedBids([1.0, 1.0]), [1.0, 1.0], enforcement="stride",
                    books=ShareBooks(store, "other", ["a"], "ps"))


def test_tampered_books_are_reported(tmp_path):
    """A recorded payment changed, or a period's row deleted: the check names the difference."""
    store = store_with(tmp_path, {"a": 9.0, "b": 9.0})
    m, books = market(store, "ps", FixedBids([2.0, 1.0]), ["a", "b"])
    for _ in range(3):
        m._round()
    books.check()
    store._exec("UPDATE share_periods SET payments = '[2000000, 999999]' WHERE round = 1")
    with pytest.raises(AssertionError, match="differ from the recorded payments"):
        books.check()
    store._exec("DELETE FROM share_periods WHERE round = 1")
    with pytest.raises(AssertionError, match=r"recorded rounds \[0, 2\]"):
        books.check()


def test_a_second_market_on_running_books_is_refused(tmp_path):
    """The books name the process of the market keeping them: while it lives, another is refused."""
    store = store_with(tmp_path, {"a": 1.0})
    books = ShareBooks(store, "share", ["a"], "ps")
    books.claim(None, [])
    store.set_meta("share-market:share", '{"pid": 1, "track": null, "dirs": []}')  # a live process
    with pytest.raises(RuntimeError, match="running already"):
        books.end_leftovers()


def test_books_refuse_a_market_on_another_number_of_cpus(tmp_path):
    """Books kept on N CPUs continue only on N: the book, the market and ``market share --data``
    refuse another count, naming both; books kept before the count was recorded had one CPU;
    books with no period yet take the count of whoever opens them."""
    from click.testing import CliRunner

    from marketsched.live.cli import market as market_cli

    store = store_with(tmp_path, {"a": 9.0, "b": 9.0})
    books = ShareBooks(store, "share", ["a", "b"], "ps", cpus=2)
    books = ShareBooks(store, "share", ["a", "b"], "ps", cpus=3)  # nothing booked yet: the count may change
    books.book(0, 5.0, [2 * MICRO, MICRO], [1.0, 1.0], [2 * MICRO, MICRO])
    with pytest.raises(ValueError, match=r"kept on 3 CPU\(s\), this market has 1"):
        ShareBooks(store, "share", ["a", "b"], "ps")
    assert ShareBooks(store, "share", ["a", "b"], "ps", cpus=3).cpus == 3
    res = CliRunner().invoke(market_cli, ["share", "--rule", "ps", "--bids", "2,1", "--data", str(tmp_path),
                                          "--users", "a,b", "--duration", "1"])
    assert res.exit_code == 2, res.output
    assert "kept on 3 CPU(s), this market has 1" in res.output, res.output
    assert len(books.periods()) == 1 and books.check()["periods"] == 1  # nothing booked by the refused market
    with pytest.raises(ValueError, match=r"the books are for 3 CPU\(s\), the market has 1"):
        ShareMarket(cpu(), "ps", FixedBids([2.0, 1.0]), [2.0, 1.0], enforcement="stride", books=books)
    store._exec("DELETE FROM meta WHERE key = ?", ("share-market:share:cpus",))  # books from before the record
    with pytest.raises(ValueError, match=r"kept on 1 CPU\(s\), this market has 2"):
        ShareBooks(store, "share", ["a", "b"], "ps", cpus=2)
    with pytest.raises(ValueError, match="at least one CPU"):
        ShareBooks(store, "other", ["a"], "ps", cpus=0)
