"""DPGVA (Mutz 2008, chapter 5)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.clearing.dpgva import (
    DPGVA,
    brute_force_schedule,
    dpgva,
    dpgva_one_by_one,
    dpgva_schedule,
    dpgva_welfare_without_each,
)


def test_hand_example():
    # horizon 4; A (l2,d2,v5), B (l2,d4,v4), C (l3,d4,v6): optimum A then B = 9.
    # W(-A) = 6 (C) -> mu_A = 6 - (9-5) = 2 ; W(-B) = 6 -> mu_B = 6 - (9-4) = 1 ; C loses, pays 0
    out = dpgva([2, 2, 3], [2, 4, 4], [5.0, 4.0, 6.0], 4)
    assert out.welfare == 9.0
    assert out.start.tolist() == [0, 2, -1]
    assert out.payments.tolist() == [2.0, 1.0, 0.0]


def test_ties_exclude_and_sort_direction_matters():
    # two identical bids that cannot both fit: the tie rule keeps exactly one
    start, w = dpgva_schedule([3, 3], [3, 3], [7.0, 7.0], 5)
    assert w == 7.0 and (start >= 0).sum() == 1
    # the EDD order is needed: late-deadline long job plus early short job both fit only if the
    # early one goes first
    start, w = dpgva_schedule([4, 1], [5, 1], [1.0, 1.0], 5)
    assert w == 2.0 and start.tolist() == [1, 0]


bids = st.integers(1, 7).flatmap(lambda m: st.tuples(
    st.lists(st.integers(1, 6), min_size=m, max_size=m),
    st.lists(st.integers(0, 14), min_size=m, max_size=m),
    st.lists(st.integers(1, 30), min_size=m, max_size=m),
    st.integers(1, 14)))


@settings(max_examples=150, deadline=None)
@given(bids)
def test_dp_equals_brute_force_and_schedule_is_feasible(b):
    l, d, v, n = b
    start, w = dpgva_schedule(l, d, v, n)
    _, wb = brute_force_schedule(l, d, v, n)
    assert w == wb
    won = start >= 0
    l, d, v = np.array(l), np.minimum(np.array(d), n), np.array(v, float)
    assert v[won].sum() == w
    assert np.all(start[won] + l[won] <= d[won])
    iv = sorted((start[j], start[j] + l[j]) for j in np.flatnonzero(won))
    assert all(a[1] <= c[0] for a, c in zip(iv, iv[1:]))          # no overlap (one machine)


@settings(max_examples=150, deadline=None)
@given(bids)
def test_payments_clarke_properties(b):
    l, d, v, n = b
    out = dpgva(l, d, v, n)
    v = np.array(v, float)
    assert np.all(out.payments[~out.won] == 0)
    assert np.all(out.payments >= 0)
    assert np.all(out.payments[out.won] <= v[out.won])
    # m+1 solves agree with brute force welfare without each bid
    for i in range(len(l)):
        keep = np.arange(len(l)) != i
        _, wi = brute_force_schedule(np.array(l)[keep], np.array(d)[keep], v[keep], n)
        expected = wi - (out.welfare - (v[i] if out.won[i] else 0.0))
        assert out.payments[i] == pytest.approx(expected, abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(bids, st.integers(0, 6), st.integers(0, 10), st.integers(0, 40))
def test_truthful_is_dominant(b, dl, dd, v_dev):
    """Thesis 5.1.3: with the optimal DP, declaring the true (l, d, v) is a dominant strategy
    against longer lengths, earlier deadlines and any value (shorter lengths and later deadlines are useless to the owner, section 5.2.1)."""
    l, d, v, n = b
    true_l, true_d, true_v = l[0], d[0], float(v[0])

    def payoff(l0, d0, v0):
        out = dpgva([l0] + l[1:], [d0] + d[1:], [v0] + v[1:], n)
        return true_v * out.won[0] - out.payments[0]

    truth = payoff(true_l, true_d, true_v)
    assert truth >= 0                                               # ex-post individually rational
    assert payoff(true_l + dl, max(0, true_d - dd), float(v_dev)) <= truth + 1e-9


def test_batched_without_each_matches_single_solves():
    rng = np.random.default_rng(0)
    m = 30
    l, d, v = rng.integers(1, 9, m), rng.integers(1, 25, m), rng.uniform(1, 1000, m)
    w, wo = dpgva_welfare_without_each(l, d, v, 24)
    assert w == dpgva_schedule(l, d, v, 24)[1]
    for i in range(m):
        keep = np.arange(m) != i
        assert wo[i] == pytest.approx(dpgva_schedule(l[keep], d[keep], v[keep], 24)[1], abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(bids)
def test_one_solve_per_bid_gives_the_batched_outcome(b):
    """The thesis's m+1 solves run one by one (the timing variant) against the batched pass, on bids with ties."""
    l, d, v, n = b
    a, o = dpgva(l, d, v, n), dpgva_one_by_one(l, d, v, n)
    assert np.array_equal(a.start, o.start) and a.welfare == o.welfare
    assert o.payments == pytest.approx(a.payments, abs=1e-9)


def test_seconds_granularity_and_horizon():
    mech = DPGVA(granularity=900, horizon=6 * 3600)
    assert mech.units == 24
    lu, du = mech.to_units([1000, 900, 180 * 60], [1000, 8 * 3600, 3600])
    assert lu.tolist() == [2, 1, 12] and du.tolist() == [1, 32, 4]
    out = mech.clear([1800, 900], [3600, 7 * 3600], [10.0, 5.0])   # deadline beyond horizon clipped
    assert out.start.tolist() == [0.0, 1800.0] and out.payments.tolist() == [0.0, 0.0]


def test_bad_input():
    with pytest.raises(ValueError, match="length must be >= 1 unit, bid 1"):
        dpgva([1, 0], [3, 3], [1.0, 1.0], 5)
    with pytest.raises(ValueError, match="value is not finite at bid 0"):
        dpgva([1], [3], [np.nan], 5)
    with pytest.raises(ValueError, match="value must be >= 0"):
        dpgva([1], [3], [-1.0], 5)
    with pytest.raises(ValueError, match="whole number"):
        dpgva([1.5], [3], [1.0], 5)
    with pytest.raises(ValueError, match="one length"):
        dpgva([1, 2], [3], [1.0], 5)
    with pytest.raises(ValueError, match="horizon"):
        dpgva([1], [3], [1.0], 0)
    with pytest.raises(ValueError, match="positive seconds"):
        DPGVA().clear([-5], [900], [1.0])
