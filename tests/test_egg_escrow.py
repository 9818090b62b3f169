"""Escrow and reliability (Kang & Parkes 2007, protocol steps 1d, 2a-2c): money is conserved."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.online.egg import BidBatch, Escrow, EscrowError, ReliabilityLedger
from marketsched.mechanisms.online.egg.escrow import HELD, PAID, REFUNDED
from marketsched.mechanisms.online.egg.instances import evolve, random_job, random_market


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 12), p_complete=st.floats(0.0, 1.0))
def test_random_market_runs_conserve_money(seed, steps, p_complete):
    """Every unit collected is paid or refunded, never both, never lost, never early."""
    rng = np.random.default_rng(seed)
    market, cat = random_market(rng, n_providers=3, p_inf=0.05)
    prices = {}
    outcome = {}
    for _ in range(steps):
        evolve(market, rng, market.now + rng.uniform(0.0, 1.0), 2)
        due = market.due()
        assert np.all(market.escrow.due[due] <= market.now)
        done = rng.random(due.size) < p_complete
        market.settle(due, done)
        for e, d in zip(due.tolist(), done.tolist()):
            assert e not in outcome
            outcome[e] = d
        jobs = [random_job(rng, market, cat) for _ in range(int(rng.integers(0, 6)))]
        if jobs:
            out, entry = market.submit(BidBatch.from_bids([j.truthful_bid() for j in jobs], market.now))
            for b in np.nonzero(entry >= 0)[0]:
                prices[int(entry[b])] = float(out.price[b])
                assert out.completion[b] >= market.now
        market.escrow.check()
        assert market.escrow.collected == pytest.approx(sum(prices.values()))
    market.advance(market.now + 2 * market.delta)  # every award is now due
    due = market.due()
    market.settle(due, np.zeros(due.size, bool))
    outcome.update({e: False for e in due.tolist()})
    esc = market.escrow
    esc.check()
    assert esc.held == 0.0 and set(outcome) == set(prices)
    st_ = esc.state[: esc.n]
    assert np.all((st_ == PAID) | (st_ == REFUNDED))
    paid = sum(p for e, p in prices.items() if outcome[e])
    refunded = sum(p for e, p in prices.items() if not outcome[e])
    assert esc.paid == pytest.approx(paid) and esc.refunded == pytest.approx(refunded)
    assert esc.paid + esc.refunded == pytest.approx(esc.collected)
    for k in range(market.n_providers):
        assert esc.revenue[k] == pytest.approx(sum(p for e, p in prices.items() if outcome[e] and esc.provider[e] == k))


def test_double_settlement_and_early_release_are_refused():
    esc = Escrow(2)
    ids = esc.hold([10, 11], [0, 1], [5.0, 7.0], [3.0, 4.0])
    with pytest.raises(EscrowError, match="due at 3.0"):
        esc.settle(ids[:1], True, at=2.0)
    esc.settle(ids[:1], True, at=3.0)
    with pytest.raises(EscrowError, match="already paid"):
        esc.settle(ids[:1], False, at=5.0)
    with pytest.raises(EscrowError, match="twice"):
        esc.settle([1, 1], False, at=5.0)
    esc.settle(ids[1:], False, at=4.0)
    assert esc.counts() == {"held": 0, "paid": 1, "refunded": 1}
    assert (esc.paid, esc.refunded, esc.revenue.tolist()) == (5.0, 7.0, [5.0, 0.0])
    esc.check()
    for bad in ([-1.0], [np.nan]):
        with pytest.raises(EscrowError, match="finite number >= 0"):
            esc.hold([1], [0], bad, [1.0])
    with pytest.raises(EscrowError, match="provider"):
        esc.hold([1], [2], [1.0], [1.0])


def test_due_entries_in_order_once_and_growth():
    esc = Escrow(1, capacity=4)
    ids = esc.hold(np.arange(100), 0, np.ones(100), np.arange(100)[::-1] / 10)
    got = esc.due_entries(4.95)
    np.testing.assert_array_equal(got, ids[::-1][:50])
    assert esc.due_entries(4.95).size == 0  # returned once
    assert esc.state[: esc.n].tolist().count(HELD) == 100


def test_tampering_is_detected():
    esc = Escrow(1)
    esc.hold([0], 0, 5.0, 1.0)
    esc.collected += 1.0  # a unit appears from nowhere
    with pytest.raises(EscrowError, match="collected"):
        esc.check()


def test_reliability_beta_posterior_and_decay():
    led = ReliabilityLedger(2, alpha=1.0, beta=1.0)
    np.testing.assert_allclose(led.reliability(), [0.5, 0.5])  # newcomers
    led.record([0, 0, 0, 1], [True, True, False, False], at=0.0)
    np.testing.assert_allclose(led.reliability(), [3 / 5, 1 / 3])
    dec = ReliabilityLedger(1, alpha=1.0, beta=1.0, half_life=10.0)
    dec.record(np.zeros(10, int), np.zeros(10, bool), at=0.0)  # 10 failures
    dec.record(np.zeros(10, int), np.ones(10, bool), at=10.0)  # failures now weigh half
    np.testing.assert_allclose(dec.reliability(10.0), (1 + 10) / (2 + 15))
    assert dec.reliability(1e6)[0] == pytest.approx(0.5, abs=1e-6)  # old record fades to the prior
    with pytest.raises(ValueError, match="alpha"):
        ReliabilityLedger(1, alpha=0.0)
