"""Egg providers on the engine (Kang & Parkes 2007, section 3; local schedulers, pricing, failures)."""

import numpy as np
import pytest

from marketsched.engine.records import FinalState
from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.egg import (
    BidBatch,
    EstimatorStore,
    LinearEstimator,
    Market,
    PriceBook,
    ReliabilityLedger,
)
from marketsched.mechanisms.online.egg.providers import EggPolicy, LoadAwarePricing, ProviderAgent, StaticPricing
from marketsched.workloads import Workload, first_jobs, load_trace, synthetic_workload, to_workload

HOUR = 3600.0
EDGES = [np.array([0, 300, 900, 1800, 3600, 7200, 14400, 28800, 57600, 86400.0])]


def _setup(w, seed=0, agents=None, factors=(0.5, 0.8, 1.0), raw=False, crash=True):
    rng = np.random.default_rng(seed)
    K = 3
    book = PriceBook(K, EDGES, HOUR, 24 * HOUR, 48, 0.0)
    est = EstimatorStore([LinearEstimator([60.0], [[c]]) for c in factors], 24 * HOUR, runtime_dim=0)
    market = Market(book, est, ReliabilityLedger(K))
    agents = agents or [ProviderAgent(3, "edf", LoadAwarePricing(1.0), crash_rate=2e-5),
                        ProviderAgent(3, "fifo", StaticPricing(1.2)),
                        ProviderAgent(2, "edf", LoadAwarePricing(0.8, kappa=8.0), crash_rate=1e-4)]
    n = len(w)
    v = rng.uniform(0.5, 3.0, n) * (w.runtime_estimate / HOUR + 0.3)
    bids = BidBatch.linear(w.submit_time, w.runtime_estimate[:, None], v, v * 0.3,
                           w.submit_time + rng.uniform(2, 24, n) * HOUR)
    pol = EggPolicy(market, agents, bids, crash_draws=rng.exponential(1.0, n) if crash else None, raw_updates=raw)
    return pol, market


@pytest.fixture(scope="module")
def run():
    w = synthetic_workload(n_jobs=1000, capacity=8, load=1.2, seed=3)
    pol, market = _setup(w)
    rec = Simulator(w, pol).run()
    return w, pol, market, rec


def test_every_job_ends_once_and_money_adds_up(run):
    w, pol, market, rec = run
    c = rec.counts()
    assert c["pending"] == 0 and sum(c.values()) == len(w)
    esc = market.escrow
    esc.check()
    assert esc.held == 0.0
    # the engine's payment column equals what the escrow paid out (refunds cancel charges)
    assert rec.payment.sum() == pytest.approx(esc.paid)
    np.testing.assert_allclose(rec.payment[pol.paid], pol.price[pol.paid])
    np.testing.assert_allclose(rec.payment[~pol.paid], 0.0, atol=1e-12)
    # completed jobs are exactly the paid ones, finished by tau*
    done = rec.state == FinalState.COMPLETED
    np.testing.assert_array_equal(done, pol.paid)
    assert np.all(rec.end_time[done] <= pol.completion[done])
    assert np.all(pol.provider[rec.state == FinalState.REJECTED] == -1)
    awarded = pol.provider >= 0
    assert esc.counts()["paid"] + esc.counts()["refunded"] == awarded.sum()
    # every kind of outcome happens on this congested instance
    assert c["completed"] and c["rejected"] and c["killed"]
    assert pol.crashed.any() and pol.killed_at_deadline.sum() + pol.dropped.sum() > 0


def test_reliability_matches_the_record(run):
    w, pol, market, rec = run
    led = market.ledger
    for k in range(3):
        mine = pol.provider == k
        assert led.total_attempts[k] == mine.sum()
        assert led.total_successes[k] == (mine & pol.paid).sum()


def test_providers_never_exceed_their_capacity(run):
    w, pol, market, rec = run
    started = ~np.isnan(rec.first_start)
    assert np.all(rec.preemptions == 0)
    for k, a in enumerate(pol.agents):
        mine = started & (pol.provider == k)
        ev = np.concatenate([np.stack([rec.first_start[mine], np.ones(mine.sum())], 1),
                             np.stack([rec.end_time[mine], -np.ones(mine.sum())], 1)])
        ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]  # ends before starts at equal times
        assert np.cumsum(ev[:, 1]).max() <= a.capacity


def test_tables_stay_admissible_and_deterministic():
    w = synthetic_workload(n_jobs=400, capacity=8, load=1.2, seed=5)
    pol, market = _setup(w, seed=1)
    rec = Simulator(w, pol).run()
    assert pol.rejected_updates == 0 and market.book.rejected == 0 and market.book.updates > 0
    pol2, _ = _setup(w, seed=1)
    assert Simulator(w, pol2).run().equals(rec)
    # raw (unprojected) load-aware wishes break rule 2 when load falls inside the window
    pol3, market3 = _setup(w, seed=1, raw=True)
    Simulator(w, pol3).run()
    assert pol3.rejected_updates > 0 and market3.book.rejected == pol3.rejected_updates


class FrozenPricing(StaticPricing):
    """Keeps whatever table the book holds (for hand-made instances)."""

    def wish(self, agent, market, now):
        return market.book.prices[agent.k].copy()


def test_edf_runs_earliest_deadline_first_fifo_in_award_order():
    # one processor, three 600 s jobs arriving together; later columns are cheaper, so each job
    # buys the last column before its deadline: tau* = 7200, 3600, 600 s for jobs 0, 1, 2
    w = Workload.from_columns(submit_time=[0.0, 0.0, 0.0], runtime=[600.0] * 3, runtime_estimate=[600.0] * 3,
                              capacity=1)
    prices = np.broadcast_to(np.array([3.0, 2.0, 1.0] + [0.5] * 45), (1, 9, 48)).copy()
    for sched, order in (("edf", [2, 1, 0]), ("fifo", [0, 1])):
        book = PriceBook(1, EDGES, HOUR, 24 * HOUR, 48, 0.0, prices)
        market = Market(book, EstimatorStore([LinearEstimator([0.0], [[1.0]])], 24 * HOUR, runtime_dim=0))
        bids = BidBatch.linear(np.zeros(3), [[600.0]] * 3, [5.0] * 3, [5.0] * 3,
                               [2.5 * HOUR, 1.5 * HOUR, 0.5 * HOUR])
        pol = EggPolicy(market, [ProviderAgent(1, sched, FrozenPricing())], bids)
        rec = Simulator(w, pol).run()
        np.testing.assert_array_equal(pol.completion, [7200.0, 3600.0, 600.0])
        np.testing.assert_array_equal(pol.price, [1.0, 2.0, 3.0])
        started = np.nonzero(~np.isnan(rec.first_start))[0]
        np.testing.assert_array_equal(started[np.argsort(rec.first_start[started])], order)
    # FIFO ran jobs 0 and 1 first; job 2 could no longer meet 600 s and was dropped, refunded
    assert pol.dropped.tolist() == [False, False, True] and rec.payment.tolist() == [1.0, 2.0, 0.0]
    assert rec.state[2] == FinalState.DISCARDED


def test_all_jobs_complete_with_ample_capacity_and_no_crashes():
    w = synthetic_workload(n_jobs=300, capacity=60, load=0.2, seed=2)
    agents = [ProviderAgent(20, "edf", StaticPricing(0.1)) for _ in range(3)]
    pol, market = _setup(w, agents=agents, factors=(1.0, 1.0, 1.0), crash=False)
    rec = Simulator(w, pol).run()
    awarded = pol.provider >= 0
    assert awarded.sum() > 100
    # synthetic estimates are >= run times and capacity is ample: no job misses tau*
    assert np.all(w.runtime_estimate >= w.runtime)
    assert np.all(pol.paid[awarded]) and not pol.dropped.any()
    assert (rec.state[awarded] == FinalState.COMPLETED).all()
    np.testing.assert_allclose(market.ledger.reliability(), (1 + market.ledger.total_attempts) /
                               (2 + market.ledger.total_attempts))


def test_bad_inputs_raise():
    w = synthetic_workload(n_jobs=50, capacity=8, load=0.5, parallel=True, seed=1)
    pol, _ = _setup(w)
    with pytest.raises(ValueError, match="serial jobs"):
        Simulator(w, pol).run()
    w = synthetic_workload(n_jobs=50, capacity=4, load=0.5, seed=1)
    pol, _ = _setup(w)
    with pytest.raises(ValueError, match="providers hold 8 processors"):
        Simulator(w, pol).run()
    with pytest.raises(ValueError, match="scheduler"):
        ProviderAgent(2, "sjf")
    with pytest.raises(ValueError, match="capacity"):
        ProviderAgent(0)


def test_on_a_real_trace_slice(trace_path):
    w, _ = to_workload(load_trace(trace_path("LPC-EGEE-2004-1.2-cln")))
    w = first_jobs(w, 1000)
    w = Workload.from_columns(submit_time=w.submit_time - w.submit_time[0], runtime=w.runtime,
                              runtime_estimate=w.runtime_estimate, capacity=8)
    pol, market = _setup(w, seed=4)
    rec = Simulator(w, pol).run()
    assert sum(rec.counts().values()) == len(w) and rec.counts()["completed"] > 0
    market.escrow.check()
    assert rec.payment.sum() == pytest.approx(market.escrow.paid)
