"""EES and relaxed EES (Mutz 2008, chapters 4 and 6)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.online.ees import (
    EES,
    Decision,
    Discrete,
    Ledger,
    QueueSnapshot,
    RelaxedEES,
    TypePrior,
    Uniform,
    expected_externality_payments,
    payments_from_welfare,
)
from marketsched.mechanisms.online.profile import AvailabilityProfile

PRIOR = TypePrior(Uniform(0, 250), Uniform(0, 100))


def snap(v, d, r, nodes=None):
    n = len(v)
    return QueueSnapshot(np.arange(n), np.asarray(v, float), np.asarray(d, float), np.asarray(r, float),
                         None if nodes is None else np.asarray(nodes))


def test_hand_computed_two_job_example():
    # prior v in {5, 15}, d in {0, 10} (each 1/2); front reports v=8, r=1; waiting job reports d=4.
    # xi_0(8) = E_d[1{8 >= d}(-d)] = 1/2*0 + 1/2*0 = 0 (d=10 discards)
    # xi_1(4) = E_v[1{v >= 4} v] = 10 ;  mu_0 = xi_1 - xi_0 = 10, mu_1 = xi_0 - xi_1 = -10
    prior = TypePrior(Discrete((5.0, 15.0), (0.5, 0.5)), Discrete((0.0, 10.0), (0.5, 0.5)))
    dec = EES(prior, estimator="exact").decide(snap([8, 99], [99, 4], [1, 3]))
    assert dec.runs and dec.externality == 4.0
    np.testing.assert_allclose(dec.welfare_of_others, [0.0, 10.0])
    np.testing.assert_allclose(dec.payments, [10.0, -10.0])


def test_tie_runs_and_discard():
    e = EES(PRIOR, n_draws=10)
    assert e.decide(snap([10, 0, 0], [0, 2, 3], [2, 1, 1]), np.random.default_rng(0)).runs      # 10 >= 2*(2+3)
    assert not e.decide(snap([9.99, 0, 0], [0, 2, 3], [2, 1, 1]), np.random.default_rng(0)).runs


def test_lone_job_runs_and_pays_nothing():
    dec = EES(PRIOR, n_draws=10).decide(snap([0.0], [5.0], [3.0]), np.random.default_rng(0))
    assert dec.runs and dec.payments.tolist() == [0.0]


def test_cached_payments_balance_exactly_and_naive_imbalance_falls():
    rng = np.random.default_rng(5)
    imb = {8: [], 2048: []}
    for rep in range(10):
        n = 16
        q = snap(rng.uniform(0, 250, n), rng.uniform(0, 100, n), np.full(n, 0.05))
        for est in ("cached",):
            dec = EES(PRIOR, 64, est).decide(q, np.random.default_rng(rep))
            assert abs(dec.payments.sum()) < 1e-9 * np.abs(dec.payments).sum()
        for s in imb:
            pay = EES(PRIOR, s, "naive").decide(q, np.random.default_rng(rep)).payments
            imb[s].append(abs(pay.sum()) / np.abs(pay).sum())
    assert np.mean(imb[8]) > 0.01
    assert np.mean(imb[2048]) < np.mean(imb[8]) / 3


def test_monte_carlo_converges_to_exact():
    prior = TypePrior(Discrete((50., 150., 250.), (0.3, 0.4, 0.3)), Discrete((0., 40., 100.), (0.5, 0.25, 0.25)))
    d, w = np.array([48.9, 10.0, 70.0]), np.full(3, 0.25)
    exact, _ = expected_externality_payments(129.8, d, w, prior, estimator="exact")
    assert abs(exact.sum()) < 1e-9
    mc, _ = expected_externality_payments(129.8, d, w, prior, 100_000, np.random.default_rng(1))
    np.testing.assert_allclose(mc, exact, atol=1.5)
    # and the cached estimate is unbiased: average over seeds gets closer
    avg = np.mean([expected_externality_payments(129.8, d, w, prior, 2000, np.random.default_rng(s))[0]
                   for s in range(40)], axis=0)
    np.testing.assert_allclose(avg, exact, atol=1.5)


def _expected_payoff_exact(prior, pos, true_type, declared, others_weights_r, m):
    """Exact expected payoff of the job at position pos (0 front, else waiting) for one declaration,
    over all profiles of the others drawn from the (discrete) prior."""
    dv, dp = np.array(prior.delay_cost.values), np.array(prior.delay_cost.probs)
    vv, vp = np.array(prior.value.values), np.array(prior.value.probs)
    w = np.full(m, others_weights_r)
    total = 0.0
    if pos == 0:
        for idx in itertools.product(range(len(dv)), repeat=m):
            d = dv[list(idx)]
            p = np.prod(dp[list(idx)])
            pay, _ = expected_externality_payments(declared, d, w, prior, estimator="exact")
            runs = declared >= w @ d
            total += p * (true_type * runs - pay[0])
    else:
        for iv, idx in itertools.product(range(len(vv)), itertools.product(range(len(dv)), repeat=m - 1)):
            d = np.insert(dv[list(idx)], pos - 1, declared)
            p = vp[iv] * np.prod(dp[list(idx)])
            pay, _ = expected_externality_payments(vv[iv], d, w, prior, estimator="exact")
            runs = vv[iv] >= w @ d
            total += p * (-true_type * others_weights_r * runs - pay[pos])
    return total


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=3, max_size=3, unique=True),
       st.lists(st.integers(0, 10), min_size=2, max_size=3, unique=True),
       st.integers(1, 3), st.integers(0, 3), st.data())
def test_truthful_report_maximises_expected_payoff(vals, dels, m, pos, data):
    """AGV is Bayes-Nash truthful: with exact expectations and others honest (drawn from the
    prior), the focal job's expected payoff is maximal at its true parameter (thesis 3.4.1)."""
    pos = min(pos, m)
    prior = TypePrior(Discrete(tuple(float(x) for x in vals), (0.2, 0.5, 0.3)),
                      Discrete(tuple(float(x) for x in dels), tuple([1 / len(dels)] * len(dels))))
    r = 1.0
    grid = np.linspace(0, 25, 26) if pos == 0 else np.linspace(0, 12, 25)
    true_type = float(data.draw(st.sampled_from(list(grid))))
    truth = _expected_payoff_exact(prior, pos, true_type, true_type, r, m)
    for dev in grid:
        assert _expected_payoff_exact(prior, pos, true_type, float(dev), r, m) <= truth + 1e-9


def test_relaxed_delays_hand_example():
    # 4-node machine; queue: front (2 nodes, 3 s), j1 (4 nodes, 1 s), j2 (2 nodes, 2 s)
    # with front: front [0,3) on 2 nodes, j1 at 3, j2 at 0 (2 free) -> starts (0, 3, 0)
    # without front: j1 at 0, j2 at 1 -> delays: j1 3, j2 -1 (list-scheduling anomaly, not clamped)
    e = RelaxedEES(PRIOR, capacity=4, n_draws=50)
    q = snap([100, 0, 0], [0, 5, 7], [3, 1, 2], nodes=[2, 4, 2])
    delays, start = e.delays(q)
    assert start == 0.0 and delays.tolist() == [3.0, -1.0]
    dec = e.decide(q, np.random.default_rng(0))
    assert dec.externality == 5 * 3 - 7 * 1 and dec.runs and dec.start_time == 0.0
    # busy machine: the front starts when the running job ends
    prof = AvailabilityProfile(4)
    prof.reserve(0.0, 10.0, 3)
    dec = e.decide(q, np.random.default_rng(0), profile=prof)
    assert dec.start_time == 10.0 and len(prof) == 2


def test_relaxed_equals_ees_for_full_width_jobs():
    rng = np.random.default_rng(3)
    n = 7
    q = snap(rng.uniform(0, 250, n), rng.uniform(0, 100, n), rng.uniform(0.1, 1, n), nodes=np.full(n, 8))
    a = EES(PRIOR, 300).decide(q, np.random.default_rng(9))
    b = RelaxedEES(PRIOR, 8, 300).decide(q, np.random.default_rng(9))
    np.testing.assert_allclose(b.weights, a.weights)
    np.testing.assert_allclose(b.payments, a.payments)
    assert a.runs == b.runs


def test_ledger_accumulates_balances():
    led = Ledger()
    d1 = Decision(np.array([1, 2]), True, 5.0, 1.0, np.array([1.0]), np.array([3.0, -3.0]), np.zeros(2))
    d2 = Decision(np.array([2, 3]), False, 5.0, 9.0, np.array([1.0]), np.array([-1.0, 1.0]), np.zeros(2))
    led.charge(d1, 0.0)
    led.charge(d2, 1.0)
    assert led.balance == {1: -3.0, 2: 4.0, 3: -1.0}
    assert led.imbalance == 0.0
    df = led.to_frame()
    assert len(df) == 4 and df.payment.sum() == 0.0


def test_payments_from_welfare_sum_zero():
    xi = np.random.default_rng(0).normal(size=9)
    assert abs(payments_from_welfare(xi).sum()) < 1e-12


def test_bad_input():
    with pytest.raises(ValueError, match="delay_cost must be >= 0"):
        snap([1, 2], [0, -1], [1, 1])
    with pytest.raises(ValueError, match="runtime is not finite at position 1"):
        snap([1, 2], [0, 1], [1, np.nan])
    with pytest.raises(ValueError, match="column 'value'"):
        QueueSnapshot(np.arange(2), np.zeros(3), np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="empty"):
        snap([], [], [])
    with pytest.raises(ValueError, match="8 nodes on a 4-node"):
        RelaxedEES(PRIOR, 4).decide(snap([1, 2], [0, 1], [1, 1], nodes=[8, 1]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="explicit rng"):
        EES(PRIOR).decide(snap([1, 2], [0, 1], [1, 1]))
    with pytest.raises(ValueError, match="estimator"):
        EES(PRIOR, estimator="magic")
    with pytest.raises(ValueError, match="Discrete priors"):
        EES(PRIOR, estimator="exact").decide(snap([1, 2], [0, 1], [1, 1]))
