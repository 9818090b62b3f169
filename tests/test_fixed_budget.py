"""Tests for the Tycoon fixed-budget game (Feldman, Lai & Zhang 2005)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from marketsched.mechanisms.games import (
    FixedBudgetGame,
    best_response,
    correlated_game,
    envy_freeness,
    equal_weight_game,
    evaluate,
    greedy_step,
    is_equilibrium,
    kkt_violation,
    local_search,
    opposite_weight_game,
    regrets,
    run_dynamics,
    social_optimum,
    uniform_game,
    utility_uniformity,
    weight_proportional_bids,
    worst_case_game,
)
from marketsched.mechanisms.games.best_response import br_one, response_utility
from marketsched.mechanisms.games.dynamics import stabilisation_time
from marketsched.mechanisms.games.fixed_budget import opposite_equilibria, shares_of

SETTINGS = settings(max_examples=60, deadline=None)
ALPHA0 = (2 + math.sqrt(2)) / 4


def instance(seed: int, n: int, positive: bool = True):
    rng = np.random.default_rng(seed)
    w = rng.random(n) if positive else rng.random(n) * (rng.random(n) < 0.7)
    if w.sum() == 0:
        w[0] = 1.0
    y = rng.random(n) * rng.choice([0.1, 1.0, 10.0])
    budget = float(rng.uniform(0.1, 3.0))
    return w / w.sum(), y + 1e-3, budget


def slsqp_optimum(w, y, budget, seed: int, starts: int = 6) -> tuple[float, np.ndarray]:
    """A general-purpose optimiser on the section 4.1 problem, best of several random starts."""
    rng = np.random.default_rng(seed)
    n = len(w)

    def neg(x):
        return -np.sum(w * x / (x + y))

    def grad(x):
        return -w * y / (x + y) ** 2

    best = None
    for _ in range(starts):
        x0 = rng.dirichlet(np.ones(n)) * budget
        res = minimize(neg, x0, jac=grad, method="SLSQP", bounds=[(0, budget)] * n,
                       constraints=[{"type": "eq", "fun": lambda x: x.sum() - budget, "jac": lambda x: np.ones(n)}],
                       options={"ftol": 1e-15, "maxiter": 1000})
        if best is None or res.fun < best.fun:
            best = res
    return -best.fun, best.x


# --------------------------------------------------------------------------------------
# Section 4.1: closed-form best response
# --------------------------------------------------------------------------------------


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 7), positive=st.booleans())
def test_best_response_matches_slsqp_and_kkt(seed, n, positive):
    w, y, budget = instance(seed, n, positive)
    x = best_response(w, y, budget)
    assert x.sum() == pytest.approx(budget, rel=1e-12)
    assert np.all(x >= 0)
    assert kkt_violation(w, x, y) < 1e-9                      # condition (1)
    u = response_utility(w, x, y)
    u_num, x_num = slsqp_optimum(w, y, budget, seed)
    assert u >= u_num - 1e-10                                  # never worse than the optimiser
    assert u == pytest.approx(u_num, abs=1e-7)
    if positive:                                               # strictly concave: unique optimum
        np.testing.assert_allclose(x, x_num, atol=1e-4 * budget)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 40), n=st.integers(1, 30))
def test_vectorised_best_response_equals_per_user(seed, m, n):
    rng = np.random.default_rng(seed)
    w = rng.random((m, n)) * (rng.random((m, n)) < 0.8)
    y = rng.random((m, n)) + 1e-4
    b = rng.uniform(0.5, 2, m)
    batch = best_response(w, y, b)
    single = np.vstack([best_response(w[i], y[i], b[i]) for i in range(m)])
    np.testing.assert_allclose(batch, single, rtol=1e-12, atol=1e-15)


def test_best_response_known_values():
    # Two machines, y = (1, 1), weights (0.5, 0.5), X = 1: symmetric, bid 0.5 each.
    np.testing.assert_allclose(best_response([0.5, 0.5], [1.0, 1.0], 1.0), [0.5, 0.5])
    # Weight only on machine 0: everything goes there.
    np.testing.assert_allclose(best_response([1.0, 0.0], [1.0, 1.0], 2.0), [2.0, 0.0])
    # A machine so expensive that w/y <= lambda gets nothing: w = (0.5, 0.5), y = (0.01, 1000), X = 1:
    # on machine 0 alone lambda = w y / (X + y)^2 = 0.005/1.0201 = 0.0049 > w_1/y_1 = 0.0005.
    x = best_response([0.5, 0.5], [0.01, 1000.0], 1.0)
    np.testing.assert_allclose(x, [1.0, 0.0])
    # All weights zero: even split (appendix A's convention).
    np.testing.assert_allclose(best_response([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], 3.0), [1.0, 1.0, 1.0])


def test_empty_machine_needs_reserve():
    with pytest.raises(ValueError, match="no best response"):
        best_response([0.5, 0.5], [0.0, 1.0], 1.0)
    # With a reserve eps the perturbed game Q^eps of appendix A has an answer: a small bid.
    x = best_response([0.5, 0.5], [0.0, 1.0], 1.0, reserve=1e-6)
    assert 0 < x[0] < 0.01 and x.sum() == pytest.approx(1.0)
    # An unwanted empty machine is fine without reserve (0/0 is treated as ratio 0).
    np.testing.assert_allclose(best_response([1.0, 0.0], [1.0, 0.0], 1.0), [1.0, 0.0])


@pytest.mark.parametrize("bad", [
    dict(weights=[0.5, -0.5], others=[1, 1], budget=1.0),
    dict(weights=[0.5, np.nan], others=[1, 1], budget=1.0),
    dict(weights=[0.5, 0.5], others=[1, 1, 1], budget=1.0),
    dict(weights=[0.5, 0.5], others=[1, -1], budget=1.0),
    dict(weights=[0.5, 0.5], others=[1, 1], budget=0.0),
    dict(weights=[0.5, 0.5], others=[1, 1], budget=1.0, reserve=-1.0),
])
def test_best_response_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        best_response(**bad)


def test_game_rejects_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        FixedBudgetGame(np.ones(3), 1.0)
    with pytest.raises(ValueError, match="user 1, machine 0"):
        FixedBudgetGame([[1.0, 1.0], [np.inf, 1.0]], 1.0)
    with pytest.raises(ValueError, match="budgets"):
        FixedBudgetGame(np.ones((2, 2)), [1.0, -1.0])
    with pytest.raises(ValueError, match="parallelism"):
        FixedBudgetGame(np.ones((2, 2)), 1.0, parallelism=0)
    g = FixedBudgetGame(np.ones((2, 3)), 1.0, parallelism=1)
    with pytest.raises(ValueError, match="not its budget"):
        g.check_bids([[0.5, 0.4, 0.0], [1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="parallelism bound"):
        g.check_bids([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="shape"):
        g.check_bids(np.ones((3, 3)))
    with pytest.raises(ValueError, match="method"):
        run_dynamics(uniform_game(2, 2, np.random.default_rng(0)), method="magic")
    with pytest.raises(ValueError, match="order"):
        run_dynamics(uniform_game(2, 2, np.random.default_rng(0)), order="random")


# --------------------------------------------------------------------------------------
# Section 3.1: two-player 2x2 games
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 0.6, 0.8, 0.95])
def test_equal_weight_game(alpha):
    g = equal_weight_game(alpha)
    bids = np.array([[alpha, 1 - alpha], [alpha, 1 - alpha]])     # x = y = alpha
    assert np.all(regrets(g, bids) < 1e-12)
    np.testing.assert_allclose(g.utilities(bids), [0.5, 0.5])
    ev = evaluate(g, g.shares(bids))
    assert ev["efficiency"] == pytest.approx(1.0)
    assert ev["uniformity"] == pytest.approx(1.0)
    assert ev["envy_freeness"] == pytest.approx(1.0)
    res = run_dynamics(g, tol=1e-12)                            # the unique equilibrium is the start
    np.testing.assert_allclose(res.bids, bids, atol=1e-12)


@pytest.mark.parametrize("alpha", [0.5, 0.6, math.sqrt(2) / 2, 0.8, 0.85])
def test_opposite_weight_symmetric_equilibrium(alpha):
    g = opposite_weight_game(alpha)
    bids = np.array([[alpha, 1 - alpha], [1 - alpha, alpha]])   # delta = 1: x = alpha, y = 1 - alpha
    assert np.all(regrets(g, bids) < 1e-12)
    u = g.utilities(bids)
    assert u.sum() == pytest.approx(2 - 4 * alpha * (1 - alpha))
    assert social_optimum(g)[0] == pytest.approx(2 * alpha)
    assert evaluate(g, g.shares(bids))["efficiency"] == pytest.approx(2 * alpha + 1 / alpha - 2)
    # alpha < alpha_0: delta = 1 is the only nonnegative root, the equilibrium is unique.
    assert [d for d, _ in opposite_equilibria(alpha)] == pytest.approx([1.0])


def test_opposite_weight_worst_symmetric_efficiency():
    alphas = np.linspace(0.5, 0.99, 491)
    eff = 2 * alphas + 1 / alphas - 2
    assert alphas[np.argmin(eff)] == pytest.approx(math.sqrt(2) / 2, abs=1e-3)
    g = opposite_weight_game(math.sqrt(2) / 2)
    a = math.sqrt(2) / 2
    bids = np.array([[a, 1 - a], [1 - a, a]])
    assert evaluate(g, g.shares(bids))["efficiency"] == pytest.approx(2 * math.sqrt(2) - 2, abs=1e-12)


@pytest.mark.parametrize("alpha", [0.86, 0.9, 0.95, 0.99])
def test_opposite_weight_asymmetric_equilibria_beyond_alpha0(alpha):
    assert alpha > ALPHA0
    g = opposite_weight_game(alpha)
    eqs = opposite_equilibria(alpha)
    assert len(eqs) == 3                                      # delta_0 < 1 < 1/delta_0
    sym = 2 * alpha + 1 / alpha - 2
    for d, bids in eqs:
        assert np.all(regrets(g, bids) < 1e-10), d            # every root is an equilibrium
        eff = evaluate(g, g.shares(bids))["efficiency"]
        assert envy_freeness(g, g.shares(bids)) >= 1 - 1e-12   # Theorem 2: two players, rho = 1
        if abs(d - 1) > 1e-9:
            assert eff < sym                                  # the asymmetric ones are "bad"
            assert eff > 0.75                                 # Theorem 2
    assert eqs[0][0] * eqs[2][0] == pytest.approx(1.0)        # reciprocal roots (f is palindromic)


def test_opposite_weight_asymmetric_equilibrium_numbers():
    g = opposite_weight_game(0.95)
    (d0, bids), (d1, _), (d2, _) = opposite_equilibria(0.95)
    assert (d0, d1, d2) == pytest.approx((0.1189, 1.0, 8.4074), abs=1e-4)
    np.testing.assert_allclose(bids, [[0.99926, 0.00074], [0.78814, 0.21186]], atol=1e-5)
    np.testing.assert_allclose(g.utilities(bids), [0.5313, 0.9687], atol=1e-4)
    ev = evaluate(g, g.shares(bids))
    assert ev["efficiency"] == pytest.approx(0.7895, abs=1e-4)
    assert ev["uniformity"] == pytest.approx(0.548, abs=1e-3)
    g99 = opposite_weight_game(0.99)
    eff = evaluate(g99, g99.shares(opposite_equilibria(0.99)[0][1]))["efficiency"]
    assert eff == pytest.approx(0.7576, abs=1e-4)
    # alpha -> 1: U/U* -> 0.75 and utility uniformity -> 1/2 (section 3.1, Theorem 2 tight)
    g1 = opposite_weight_game(1 - 1e-7)
    b1 = opposite_equilibria(1 - 1e-7)[0][1]
    ev1 = evaluate(g1, g1.shares(b1))
    assert ev1["efficiency"] == pytest.approx(0.75, abs=1e-3)
    assert ev1["uniformity"] == pytest.approx(0.5, abs=1e-3)


# --------------------------------------------------------------------------------------
# Section 3.2 and Theorem 3
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_worst_case_instance_is_an_equilibrium(n):
    g, bids = worst_case_game(n)
    assert g.m == n * n + n
    assert np.all(regrets(g, bids) < 1e-12)
    assert np.allclose(bids.sum(axis=0), n + 1)               # Y_j = n + 1
    u = g.utilities(bids)
    assert u[: n * n].sum() == pytest.approx(n / (n + 1))       # each group gets n/(n+1)
    assert u[n * n:].sum() == pytest.approx(n / (n + 1))
    assert u.sum() == pytest.approx(2 * n / (n + 1))
    assert social_optimum(g)[0] == pytest.approx(n)
    # the flat users' share per machine is 1/(n(n+1)) (section 3.2 calls 1/(n^2(n+1)) the share; that is the utility)
    assert g.shares(bids)[0, 0] == pytest.approx(1 / (n * (n + 1)))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(2, 8), n=st.integers(1, 8))
def test_best_response_guarantees_one_over_m(seed, m, n):
    """Theorem 3's argument: bidding s_ij = X_i S_j / sum S gives exactly 1/m, so the best
    response (hence every user at any equilibrium) gets at least 1/m."""
    rng = np.random.default_rng(seed)
    w = rng.random(n) * (rng.random(n) < 0.8)
    assume(w.sum() > 0)
    w /= w.sum()
    others = rng.dirichlet(np.ones(n), size=m - 1)             # m - 1 other users, budget 1 each
    S = others.sum(axis=0)
    assume(np.all(S > 1e-9))
    prop = S / S.sum()
    assert response_utility(w, prop, S) == pytest.approx(1 / m, rel=1e-12)
    assert response_utility(w, best_response(w, S, 1.0), S) >= 1 / m - 1e-12


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(2, 8), n=st.integers(2, 8), correlated=st.booleans())
def test_every_user_gets_one_over_m_at_equilibrium(seed, m, n, correlated):
    rng = np.random.default_rng(seed)
    g = (correlated_game if correlated else uniform_game)(m, n, rng, reserve=1e-12)
    res = run_dynamics(g, tol=1e-13, max_iterations=400)
    assume(res.converged and regrets(g, res.bids).max() < 1e-9)
    u = g.utilities(res.bids)
    assert u.min() >= 1 / m - 1e-8
    # Theorem 3: tau >= 1/m (utilities are at most 1) and rho >= 2 sqrt(2) - 2 (from [29])
    assert utility_uniformity(u) >= 1 / m - 1e-8
    assert envy_freeness(g, g.shares(res.bids)) >= 2 * math.sqrt(2) - 2 - 1e-8


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 10))
def test_two_player_equilibria_are_envy_free(seed, n):
    g = uniform_game(2, n, np.random.default_rng(seed), reserve=1e-12)
    res = run_dynamics(g, tol=1e-14, max_iterations=1000, damping=0.7)   # damped: fewer 2-cycles
    assume(res.converged and regrets(g, res.bids).max() < 1e-9)
    r = g.shares(res.bids)
    assert envy_freeness(g, r) >= 1 - 1e-8                     # Theorem 2: rho = 1
    assert g.utilities(res.bids).min() >= 0.5 - 1e-8
    assert evaluate(g, r)["efficiency"] >= 0.75 - 1e-8          # Theorem 2: pi >= 3/4


# --------------------------------------------------------------------------------------
# Section 4.2: finite parallelism
# --------------------------------------------------------------------------------------


def brute_force_optimum(w: np.ndarray, k: np.ndarray) -> float:
    m, n = w.shape
    best = 0.0
    for owners in itertools.product(range(m + 1), repeat=n):    # owner m = nobody
        counts = np.bincount(owners, minlength=m + 1)[:m]
        if np.all(counts <= k):
            best = max(best, sum(w[o, j] for j, o in enumerate(owners) if o < m))
    return best


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 3), n=st.integers(1, 5))
def test_matching_optimum_equals_brute_force(seed, m, n):
    rng = np.random.default_rng(seed)
    w = rng.random((m, n)) * (rng.random((m, n)) < 0.8)
    k = rng.integers(1, 4, m)
    g = FixedBudgetGame(w, 1.0, parallelism=k)
    value, r = social_optimum(g)
    assert value == pytest.approx(brute_force_optimum(w, np.minimum(k, n)), abs=1e-12)
    assert np.all(r.sum(axis=0) <= 1) and np.all((r > 0).sum(axis=1) <= k)
    assert g.utilities_of(r).sum() == pytest.approx(value)
    # infinite parallelism: sum_j max_i w_ij, and the matching with k_i = n agrees
    assert social_optimum(FixedBudgetGame(w, 1.0))[0] == pytest.approx(w.max(axis=0).sum())
    assert social_optimum(FixedBudgetGame(w, 1.0, parallelism=n))[0] == pytest.approx(w.max(axis=0).sum())


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 9), k=st.integers(1, 9))
def test_local_search_is_a_local_optimum(seed, n, k):
    w, y, budget = instance(seed, n)
    x, swaps = local_search(w, y, budget, k)
    assert x.sum() == pytest.approx(budget) and np.all(x >= 0)
    assert (x > 0).sum() <= k
    u = response_utility(w, x, y)
    if k >= n:
        np.testing.assert_allclose(x, best_response(w, y, budget))
        return
    # No single swap of a machine in A for one outside improves (the stopping rule of 4.2) ...
    A = set(np.flatnonzero(x > 0)) if (x > 0).sum() == k else None
    if A is not None:
        for i in A:
            for j in set(range(n)) - A:
                B = np.array(sorted(A - {i} | {j}))
                assert response_utility(w[B], br_one(w[B], y[B], budget), y[B]) <= u * (1 + 1e-8)
    # ... and it is never worse than the start (the top-k by w/y) nor than the best k-subset by much.
    top = np.argsort(-(w / y), kind="stable")[:k]
    assert u >= response_utility(w[top], br_one(w[top], y[top], budget), y[top]) - 1e-12
    best = max(response_utility(w[list(S)], br_one(w[list(S)], y[list(S)], budget), y[list(S)])
               for S in itertools.combinations(range(n), k))
    assert u <= best + 1e-12


def test_finite_dynamics_respect_parallelism_and_converge_without_head_to_head():
    g = uniform_game(60, 100, np.random.default_rng(3), parallelism=5)   # delta = 3
    res = run_dynamics(g, max_iterations=30)
    assert res.converged and res.iterations <= 10
    assert np.all((res.bids > 0).sum(axis=1) <= 5)
    assert res.efficiency[-1] > 0.8
    assert regrets(g, res.bids).max() < 0.01


# --------------------------------------------------------------------------------------
# Section 4.3: local greedy adjustment
# --------------------------------------------------------------------------------------


def test_greedy_steps_approach_the_best_response():
    w, y, budget = instance(11, 6)
    x = np.full(6, budget / 6)
    for _ in range(4000):
        x, gap = greedy_step(w, x, y, 1e-3 * budget, marginal_tol=1e-3)
    assert response_utility(w, x, y) == pytest.approx(response_utility(w, best_response(w, y, budget), y), abs=1e-4)


def test_greedy_with_black_box_concave_utility_matches_slsqp():
    rng = np.random.default_rng(5)
    n = 5
    w = rng.random(n)
    y = rng.random(n) + 0.2

    def u(r):                                                 # concave, unknown to the algorithm
        return (w * np.sqrt(r)).sum(axis=-1)

    x = np.full(n, 1.0 / n)
    for _ in range(3000):
        x, _ = greedy_step(w, x, y, 5e-4, utility=u, marginal_tol=1e-3)
    res = minimize(lambda z: -u(z / (z + y)), np.full(n, 1 / n), method="SLSQP", bounds=[(0, 1)] * n,
                   constraints=[{"type": "eq", "fun": lambda z: z.sum() - 1}], options={"ftol": 1e-14})
    assert x.sum() == pytest.approx(1.0)
    assert u(x / (x + y)) == pytest.approx(-res.fun, abs=1e-4)


def test_greedy_dynamics_with_a_black_box_utility():
    g = uniform_game(30, 10, np.random.default_rng(6))

    def linear(i, r):                                          # the linear utility, as a black box
        return r @ g.weights[i]

    analytic = run_dynamics(g, method="greedy", max_iterations=150)
    black_box = run_dynamics(g, method="greedy", max_iterations=150, utility=linear)
    assert black_box.efficiency[-1] == pytest.approx(analytic.efficiency[-1], abs=0.01)
    assert black_box.efficiency[-1] > black_box.efficiency[0]


def test_greedy_dynamics_reach_the_best_response_welfare():
    g = uniform_game(60, 30, np.random.default_rng(2))
    br = run_dynamics(g)
    gr = run_dynamics(g, method="greedy", max_iterations=500)
    assert gr.efficiency[-1] == pytest.approx(br.efficiency[-1], abs=0.02)    # figure 4's claim
    assert gr.stabilised_at > br.stabilised_at                                # and greedy is slower


# --------------------------------------------------------------------------------------
# Section 5: dynamics, baselines, metrics
# --------------------------------------------------------------------------------------


def test_sequential_dynamics_reach_equilibrium_quickly():
    g = uniform_game(20, 40, np.random.default_rng(0))
    res = run_dynamics(g)
    assert res.converged and res.iterations <= 6                 # "<= 5 iterations" (section 1)
    assert regrets(g, res.bids).max() < 1e-3
    tight = run_dynamics(g, tol=1e-12, max_iterations=500)
    assert tight.converged and is_equilibrium(g, tight.bids, tol=1e-9)
    assert kkt_violation(g.weights[0], tight.bids[0], tight.bids.sum(0) - tight.bids[0] + g.reserve) < 1e-4


def test_simultaneous_round_is_every_user_best_responding_to_the_last_round():
    g = uniform_game(10, 15, np.random.default_rng(4))
    x0 = weight_proportional_bids(g)
    res = run_dynamics(g, order="simultaneous", max_iterations=1)
    Y = x0.sum(0) + g.reserve
    expect = np.vstack([br_one(g.weights[i], Y - x0[i], 1.0) for i in range(g.m)])
    np.testing.assert_allclose(res.bids, expect, rtol=1e-10, atol=1e-14)


def test_dynamics_are_deterministic_and_start_weight_proportional():
    g = correlated_game(15, 20, np.random.default_rng(9))
    a, b = run_dynamics(g), run_dynamics(g)
    assert np.array_equal(a.bids, b.bids) and np.array_equal(a.welfare, b.welfare)
    wp = evaluate(g, shares_of(weight_proportional_bids(g), g.reserve))
    assert a.efficiency[0] == pytest.approx(wp["efficiency"])
    assert a.efficiency[-1] > wp["efficiency"]
    assert np.array_equal(correlated_game(3, 4, np.random.default_rng(1)).weights,
                          correlated_game(3, 4, np.random.default_rng(1)).weights)


def test_reserve_zero_dynamics_refuse_an_empty_machine():
    g = FixedBudgetGame([[1.0, 0.0], [0.5, 0.5]], 1.0, reserve=0.0)    # user 1 alone on machine 1
    with pytest.raises(ValueError, match="alone on machine 0"):
        run_dynamics(g, initial=[[1.0, 0.0], [0.0, 1.0]])


def test_metrics_conventions():
    g = FixedBudgetGame([[0.6, 0.4], [0.6, 0.4], [0.5, 0.5]], 1.0, reserve=0.0)
    value, r = social_optimum(g)
    assert value == pytest.approx(1.1)
    u = g.utilities_of(r)
    np.testing.assert_allclose(u, [0.6, 0.0, 0.5])
    assert utility_uniformity(u) == 0.0
    assert envy_freeness(g, r) == 0.0                          # user 1 gets nothing and envies
    assert utility_uniformity(np.zeros(3)) == 1.0
    assert envy_freeness(FixedBudgetGame([[1.0]], 1.0), np.array([[1.0]])) == math.inf
    # finite parallelism: U_i(r_j) counts only the k_i largest terms
    gf = FixedBudgetGame([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]], 1.0, parallelism=[1, 3])
    shares = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    np.testing.assert_allclose(gf.utilities_of(shares), [0.0, 1.0])
    from marketsched.mechanisms.games.metrics import envy_matrix
    np.testing.assert_allclose(envy_matrix(gf, shares), [[0.0, 0.5], [0.0, 1.0]])


def test_stabilisation_time():
    assert stabilisation_time(np.array([0.1, 0.5, 0.8, 0.85, 0.86, 0.855]), 0.015) == 3
    assert stabilisation_time(np.array([0.5, 0.5]), 0.01) == 0


def test_simultaneous_best_responses_oscillate_where_sequential_converge():
    """Why sequential updates are the default order (the paper leaves the order open)."""
    g = uniform_game(20, 30, np.random.default_rng(0))
    seq = run_dynamics(g)
    sim = run_dynamics(g, order="simultaneous", max_iterations=50)
    assert seq.converged and not sim.converged
    assert sim.efficiency[-10:].min() < seq.efficiency[-1] - 0.1
    damped = run_dynamics(g, order="simultaneous", damping=0.5, max_iterations=200)
    assert damped.efficiency[-1] > sim.efficiency[-10:].min()
