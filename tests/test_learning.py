"""ZIC and epsilon-greedy Q-learning bidders (Stößer 2009, section 6.4.1, Algorithm 1, appendix D).

The vectorised Q-learner is checked against a literal, one-request-at-a-time Python version of
Algorithm 1 with the decisions written in ``behaviour/learning.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from marketsched.behaviour import learning as lg
from marketsched.mechanisms.online import share as sm


# ============================================================================ bins, users, grid
def test_value_intervals_of_the_thesis():
    narrow = lg.value_intervals(10, 60)
    assert narrow[0] == (10, 14) and narrow[1] == (15, 19) and narrow[-2] == (50, 54) and narrow[-1] == (55, 60)
    wide = lg.value_intervals(10, 160)
    assert wide[0] == (10, 24) and wide[-1] == (145, 160) and len(wide) == 10
    for lo, hi in ((10, 60), (10, 160)):
        v = np.arange(lo, hi + 1)
        users = lg.owner(v, lo, hi)
        for u, (a, b) in enumerate(lg.value_intervals(lo, hi)):
            assert np.all(users[(v >= a) & (v <= b)] == u)
        assert np.all(np.diff(users) >= 0) and set(users) == set(range(10))


def test_owner_rejects_values_outside_the_range():
    with pytest.raises(ValueError, match="outside its range"):
        lg.owner([10, 61], 10, 60)
    with pytest.raises(ValueError, match="whole numbers"):
        lg.owner([10], 10.5, 60)


def test_share_bins_round_to_whole_percents():
    ratios = [0.0, 0.0049, 0.005, 0.1, 0.104, 0.105, 0.5, 0.91, 0.999, 1.0]
    assert lg.share_bin(ratios).tolist() == [0, 0, 1, 1, 1, 2, 5, 10, 10, 10]


def test_parameter_grid_is_table_6_3():
    grid = lg.parameter_grid()
    assert len(grid) == 36
    assert grid[0] == {"alpha": 0.1, "gamma": 0.3, "epsilon": 0.05}
    assert grid[-1] == {"alpha": 0.7, "gamma": 0.7, "epsilon": 0.25}
    assert lg.CHOSEN in grid


# ============================================================================ ZIC
def test_zic_bids_uniform_on_one_to_v():
    z = lg.ZIC()
    v = np.array([[1.0, 7.0, 60.0]])
    z.reset(v, np.ones(3))
    z.begin(np.arange(3))
    u = np.random.default_rng(0).random((30000, 1, 3))
    bids = z.bid(u)
    assert np.all(bids[..., 0] == 1)
    for j, top in ((1, 7), (2, 60)):
        b = bids[:, 0, j]
        assert set(np.unique(b)) == set(range(1, top + 1))
        counts = np.bincount(b.astype(int), minlength=top + 1)[1:]
        assert chisquare(counts).pvalue > 1e-4
    with pytest.raises(ValueError, match=">= 1"):
        z.reset(np.array([[0.5]]), np.ones(1))


# ============================================================================ Q-learning
def reference_q_learning(plan, values, rule, *, alpha, gamma, epsilon, low, high, seed, capacity=10.0,
                         explore_rounds=100, v_min=1.0):
    """Algorithm 1, literally, one request at a time (decisions as in behaviour/learning.py)."""
    rng = np.random.default_rng(seed)
    users = lg.owner(values, low, high)
    Q = np.zeros((10, 11, 11))
    rounds = np.zeros(10, dtype=int)
    state = np.zeros(len(values), dtype=int)
    paid = np.zeros(len(values))
    got = np.zeros(len(values))
    cpus = plan.cpus.astype(float)
    for t0, t1, rows in plan.segments:
        for _ in range(t0, t1):
            u = rng.random(len(rows))
            bids, acts = [], []
            for k, j in enumerate(rows):
                user = users[j]
                forced = rounds[user] < explore_rounds
                if forced or u[k] <= epsilon:
                    ratio = u[k] if forced else u[k] / epsilon
                    act = int(lg.share_bin(ratio))
                else:
                    act = int(np.argmax(Q[user, state[j]]))  # first maximum: lowest bin
                    ratio = act / 10
                bids.append(v_min + ratio * (values[j] - v_min))
                acts.append(act)
            for user in set(users[rows].tolist()):
                rounds[user] += 1
            bids = np.array(bids)
            x, pay = sm.market_round(rule, bids, cpus[rows], capacity)
            for k, j in enumerate(rows):  # sequential updates in request order
                user = users[j]
                reward = values[j] * x[k] - bids[k] * cpus[j]
                nxt = int(lg.share_bin(x[k] / cpus[j]))
                Q[user, state[j], acts[k]] = (1 - alpha) * Q[user, state[j], acts[k]] + alpha * (reward + gamma * Q[user, nxt].max())
                state[j] = nxt
                paid[j] += pay[k]
                got[j] += x[k]
    return Q, paid, got


def crowded_plan(seed=1, n=30, horizon=250, max_run=150):
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.integers(0, horizon, n))
    return sm.MarketPlan.from_arrays(submit, rng.integers(1, max_run, n), rng.integers(1, 9, n))


@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_q_learning_matches_literal_algorithm_1(rule):
    plan = crowded_plan()
    rng = np.random.default_rng(5)
    values = rng.integers(10, 61, len(plan)).astype(float)
    values[:12] = 12.0  # many requests of user 0 at once: shared-table updates in one round
    params = dict(alpha=0.3, gamma=0.5, epsilon=0.15, low=10, high=60)
    q_ref, paid_ref, got_ref = reference_q_learning(plan, values, rule, seed=7, explore_rounds=20, **params)
    bidder = lg.QLearning(**params, explore_rounds=20)
    res = sm.simulate(plan, values[None, :], rule, bidder, seeds=[7])
    np.testing.assert_allclose(res.paid[0], paid_ref, rtol=1e-12)
    np.testing.assert_allclose(res.received[0], got_ref, rtol=1e-12)
    for user in range(10):
        np.testing.assert_allclose(bidder.table(0, user), q_ref[user], rtol=1e-10, atol=1e-9)


def test_collisions_happen_in_the_reference_check():
    """The test above exercises several requests of one user in one round (the layered update)."""
    plan = crowded_plan()
    values = np.random.default_rng(5).integers(10, 61, len(plan)).astype(float)
    values[:12] = 12.0
    users = lg.owner(values, 10, 60)
    deepest = max(np.bincount(users[rows]).max() for _, _, rows in plan.segments)
    assert deepest >= 3


def test_first_rounds_explore_then_exploit_on_the_bin_grid():
    plan = sm.MarketPlan.from_arrays([0], [400], [2])
    bidder = lg.QLearning(alpha=0.3, gamma=0.3, epsilon=0.05, low=10, high=60)
    bidder.reset(np.array([[41.0]]), plan.cpus.astype(float))
    bidder.begin(np.array([0]))
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(400):
        b = bidder.bid(rng.random((1, 1)))
        bidder.observe(np.array([[2.0]]), b)  # alone: it always gets its 2 CPUs
        ratios.append((b[0, 0] - 1.0) / 40.0)
    ratios = np.array(ratios)
    grid = np.isclose(ratios * 10, np.round(ratios * 10))
    assert grid[:100].mean() < 0.1  # the first 100 rounds explore continuously
    assert grid[100:].mean() > 0.9  # then mostly exploit (epsilon = 0.05)
    # alone, the lower the bid the higher the reward (2 * 41 - 2 * bid): the learner settles on one
    # of the two lowest bins (bin 0 is the single point 0%, which exploration rarely draws, so its
    # value lags behind bin 1's once bin 1 is being exploited)
    row = bidder.table(0, int(lg.owner(41, 10, 60)))[10]
    assert np.argmax(row) <= 1
    k = int(np.argmax(row))
    reward = 2 * 41.0 - 2 * (1.0 + k / 10 * 40.0)
    assert row[k] == pytest.approx(reward / (1 - 0.3), rel=1e-6)  # converged: r / (1 - gamma)
    assert np.median(ratios[200:]) == pytest.approx(np.argmax(row) / 10)


def test_unexplored_state_bids_the_minimum():
    bidder = lg.QLearning(low=10, high=60, explore_rounds=0, epsilon=0.01)
    bidder.reset(np.array([[60.0, 30.0]]), np.array([1.0, 4.0]))
    bidder.begin(np.array([0, 1]))
    b = bidder.bid(np.array([[0.5, 0.9]]))
    assert b.tolist() == [[1.0, 1.0]]


def test_bid_point_centre_and_upper():
    up = lg.QLearning(low=10, high=60)
    ce = lg.QLearning(low=10, high=60, bid_point="centre")
    assert up.ratio_of_bin[[0, 1, 10]].tolist() == [0.0, 0.1, 1.0]
    assert ce.ratio_of_bin[[0, 1, 10]] == pytest.approx([0.0, 0.05, 0.95])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["ps", "sh"]))
def test_q_bids_stay_between_minimum_and_value(seed, rule):
    plan = crowded_plan(seed=seed % 50, n=12, horizon=60, max_run=40)
    values = np.random.default_rng(seed).integers(10, 161, (2, len(plan))).astype(float)
    bidder = lg.QLearning(alpha=0.5, gamma=0.7, epsilon=0.25, low=10, high=160, explore_rounds=5)
    res = sm.simulate(plan, values, rule, bidder, seeds=[seed, seed + 1])
    sec = plan.runtime.astype(float)
    mean_bid = res.paid / (plan.cpus * np.maximum(sec, 1))
    assert np.all(mean_bid >= 1.0 - 1e-9) and np.all(mean_bid <= values + 1e-9)
    assert np.all(res.win_pct.sum(axis=1) <= res.win_reqsec.sum() + 1e-9)


@pytest.mark.parametrize("kw, msg", [
    ({"alpha": 1.0}, "alpha"), ({"gamma": 0.0}, "gamma"), ({"epsilon": -0.1}, "epsilon"),
    ({"bid_point": "lower"}, "bid_point"), ({"explore_rounds": -1}, "explore_rounds"),
])
def test_q_learning_rejects_bad_parameters(kw, msg):
    with pytest.raises(ValueError, match=msg):
        lg.QLearning(**kw)


def test_q_learning_per_run_parameters_need_one_per_run():
    bidder = lg.QLearning(alpha=[0.1, 0.3, 0.5], low=10, high=60)
    with pytest.raises(ValueError, match="one per run"):
        bidder.reset(np.full((2, 3), 20.0), np.ones(3))
