"""Bidding behaviour (Shudler et al. 2010, section IV): distributions, common random numbers, bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from marketsched.behaviour.bidding import (
    ShadingDraws,
    draw_shading,
    make_bids,
    shade,
    srg_bids,
    truthful,
)
from marketsched.scenario import true_values
from marketsched.workloads.synthetic import synthetic_workload
from marketsched.workloads.transforms import split_parallel

N = 20_000


def test_truthful_is_identity_and_a_copy():
    w = np.array([0.0, 3.5, 150.0])
    b = truthful(w)
    assert np.array_equal(b, w) and b is not w


@pytest.mark.parametrize("beta", [0.05, 0.5, 0.9])
def test_shaded_bid_is_uniform_on_the_bid_range(beta):
    """(w - bid) / (beta w) must be Uniform[0, 1): KS test against the uniform law."""
    draws = draw_shading(N, seed=11)
    w = np.random.default_rng(3).uniform(1, 180, N)
    bid = shade(w, draws.u, beta)
    assert (bid <= w).all() and (bid >= (1 - beta) * w).all()
    position = (w - bid) / (beta * w)
    assert stats.kstest(position, "uniform").pvalue > 1e-3
    # and for a fixed value the bid itself is uniform on [(1-beta) w, w]
    w0 = 100.0
    b0 = shade(np.full(N, w0), draws.u, beta)
    assert stats.kstest(b0, "uniform", args=((1 - beta) * w0, beta * w0)).pvalue > 1e-3


def test_shading_is_not_uniform_on_the_wrong_range():
    """The KS test has power: the same bids are rejected as uniform on [(1-beta)w, w] for another beta."""
    draws = draw_shading(N, seed=11)
    b0 = shade(np.full(N, 100.0), draws.u, 0.5)
    assert stats.kstest(b0, "uniform", args=(40.0, 60.0)).pvalue < 1e-6


def test_exact_split_has_exactly_ten_percent_aggressive():
    for n in (1, 9, 10, 1234, N):
        d = draw_shading(n, seed=5, split="exact")
        assert d.aggressive.sum() == round(0.1 * n)


def test_coin_split_is_binomial():
    """Per-job coin: the count is Binomial(N, 0.1) (two-sided binomial test), and varies by seed."""
    counts = [int(draw_shading(N, seed=s, split="coin").aggressive.sum()) for s in range(5)]
    for c in counts:
        assert stats.binomtest(c, N, 0.1).pvalue > 1e-3
    assert len(set(counts)) > 1  # not an exact partition in disguise


def test_exact_split_membership_is_uniform_over_jobs():
    """Each job is aggressive with probability 0.1: over 400 seeds, counts per job position are binomial."""
    n, seeds = 50, 400
    hits = np.zeros(n)
    for s in range(seeds):
        hits += draw_shading(n, seed=s).aggressive
    # chi-square of per-position counts against the uniform expectation
    assert stats.chisquare(hits).pvalue > 1e-3


def test_srg_bids_use_the_group_betas():
    draws = draw_shading(N, seed=2)
    w = np.full(N, 100.0)
    b = srg_bids(w, draws, 0.1, 0.9)
    a = draws.aggressive
    assert (b[~a] >= 90.0).all() and (b[a] >= 10.0).all()
    assert stats.kstest(b[a], "uniform", args=(10.0, 90.0)).pvalue > 1e-3
    assert stats.kstest(b[~a], "uniform", args=(90.0, 10.0)).pvalue > 1e-3


def test_srg20_is_the_80_20_split():
    """Section II.B's 80/20 split: the same groups and U, conservative users shade by up to 20 %."""
    draws = draw_shading(N, seed=2)
    w = np.full(N, 100.0)
    b = make_bids("srg20", w, draws, 0.8)
    a = draws.aggressive
    np.testing.assert_array_equal(b, srg_bids(w, draws, 0.2, 0.8))
    assert (b[~a] >= 80.0).all() and (b[a] >= 20.0).all()
    np.testing.assert_array_equal(b[a], make_bids("srg", w, draws, 0.8)[a])


def test_common_random_numbers_across_cells():
    """Same (workload, seed): same values, same groups, same U in every cell; only beta changes bids."""
    wl = synthetic_workload(2000, capacity=16, seed=1)
    v1, v2 = true_values(wl, "bimodal", 7), true_values(wl, "bimodal", 7)
    d1, d2 = draw_shading(wl, 7), draw_shading(wl, 7)
    assert np.array_equal(v1, v2)
    assert np.array_equal(d1.aggressive, d2.aggressive) and np.array_equal(d1.u, d2.u)
    b50, b90 = make_bids("srg", v1, d1, 0.5), make_bids("srg", v1, d1, 0.9)
    a = d1.aggressive
    # conservative jobs bid the same whatever the aggressive beta
    assert np.array_equal(b50[~a], b90[~a])
    # an aggressive job's position in its range is the same U in both cells
    pos50 = (v1[a] - b50[a]) / (0.5 * v1[a])
    pos90 = (v1[a] - b90[a]) / (0.9 * v1[a])
    ok = v1[a] > 0
    np.testing.assert_allclose(pos50[ok], d1.u[a][ok], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pos90[ok], d1.u[a][ok], rtol=1e-9, atol=1e-12)
    # a different seed gives different draws
    assert not np.array_equal(draw_shading(wl, 8).u, d1.u)


def test_split_mode_does_not_shift_u():
    """Group and U come from separate streams: switching exact/coin leaves U unchanged."""
    assert np.array_equal(draw_shading(500, 3, split="exact").u, draw_shading(500, 3, split="coin").u)


def test_copies_of_a_split_job_share_group_and_draw():
    wl = split_parallel(synthetic_workload(600, capacity=32, parallel=True, seed=4))
    parent = wl.meta["parent"]
    d = draw_shading(wl, 9)
    assert len(d) == len(wl)
    for arr in (d.aggressive, d.u):
        first = np.zeros(parent.max() + 1, dtype=arr.dtype)
        first[parent] = arr
        assert np.array_equal(arr, first[parent])  # constant within each parent
    # the exact partition is of original jobs
    n_orig = parent.max() + 1
    agg_orig = np.zeros(n_orig, bool)
    agg_orig[parent] = d.aggressive
    assert agg_orig.sum() == round(0.1 * n_orig)
    d_rows = draw_shading(wl, 9, share_copies=False)
    assert d_rows.aggressive.sum() == round(0.1 * len(wl))


@settings(max_examples=100, deadline=None)
@given(
    w=st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=60),
    beta=st.floats(0, 0.999999),
    beta_c=st.floats(0, 0.999999),
    seed=st.integers(0, 2**32 - 1),
    behaviour=st.sampled_from(["ft", "shade", "srg"]),
)
def test_bids_never_above_value_and_never_below_range(w, beta, beta_c, seed, behaviour):
    w = np.array(w)
    d = draw_shading(len(w), seed, split="coin")
    b = make_bids(behaviour, w, d, beta, beta_c)
    assert (b <= w).all()
    lowest = {"ft": 1.0, "shade": 1 - beta, "srg": 1 - max(beta, beta_c)}[behaviour]
    assert (b >= lowest * w - 1e-9 * np.maximum(w, 1)).all()
    assert (b >= 0).all()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: shade([1.0, 2.0], [0.1, 0.2], 1.0), "beta = 1.0 is outside"),
        (lambda: shade([1.0, -2.0], [0.1, 0.2], 0.5), "job row 1"),
        (lambda: shade([1.0, 2.0], [0.1], 0.5), "draws"),
        (lambda: make_bids("greedy", [1.0], draw_shading(1, 0)), "unknown bidding behaviour"),
        (lambda: draw_shading(10, 0, split="half"), "split must be"),
        (lambda: draw_shading(10, 0, p_aggressive=1.5), "p_aggressive"),
        (lambda: srg_bids([1.0, 2.0], draw_shading(3, 0)), "2 true values for 3 draws"),
        (lambda: ShadingDraws(aggressive=np.zeros(2, bool), u=np.array([0.5, 1.0]), seed=0), r"u\[1\]"),
        (lambda: shade([1.0, 2.0], [0.1, 0.2], [0.5, 1.2]), "beta of job row 1"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
