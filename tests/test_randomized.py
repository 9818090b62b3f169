"""Randomized pay-as-bid heuristic and distributed randomized mechanism (Stößer 2009,
chapter 4): tables 4.1-4.3, theorem 1, sampler against the exact tree."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.clearing.greedex import greedy_allocation, node_utilities, user_utilities
from marketsched.mechanisms.clearing.orderbook import OrderBook, generate_order_book
from marketsched.mechanisms.clearing.randomized import (
    allocation_tree,
    batch_welfare,
    distributed_randomized,
    greedy_batch,
    gumbel_orders,
    pay_as_bid,
    random_order,
    randomized_allocation,
    two_user_best_response,
    two_user_equilibrium,
)
from test_greedex import books, one_slot


@pytest.fixture
def t41():
    return one_slot([(10, 1, 100), (8, 1, 500), (7, 2, 400)], [(1, 2, 500), (2, 1, 600)])


def test_table_4_2_allocation_tree(t41):
    pi, expected = allocation_tree(t41, alpha=2)
    assert np.round(pi[:, :2], 2).tolist() == [[0.47, 0.44], [0.30, 0.56], [0.23, 0.0]]
    assert np.round(pi.sum(1), 2).tolist() == [0.91, 0.86, 0.23]
    assert pi[0, 0] == pytest.approx(100 / 213)
    assert expected == pytest.approx(15.97, abs=0.005)  # section 4.3.1
    assert greedy_allocation(t41).welfare() == 15


def test_sampler_matches_tree_on_table_4_1(t41):
    pi, expected = allocation_tree(t41, alpha=2)
    n = 6000
    orders = gumbel_orders(t41.job_value, 2, np.random.default_rng(11).gumbel(size=(n, 3)))
    assign = greedy_batch(t41, orders)
    freq = (assign >= 0).any(axis=2).mean(axis=0)
    sd = np.sqrt(pi.sum(1) * (1 - pi.sum(1)) / n)
    assert (np.abs(freq - pi.sum(1)) <= 4.5 * sd + 1e-12).all()
    w = batch_welfare(t41, assign)
    assert abs(w.mean() - expected) <= 4.5 * w.std() / np.sqrt(n)


@settings(max_examples=25, deadline=None)
@given(books(max_jobs=5, max_nodes=2), st.sampled_from([1.0, 2.0, 4.0]))
@example(book=OrderBook(job_value=np.array([11.0, 7.0]), job_cpu=np.array([1.0, 1.0]), job_mem=np.array([0.0, 0.0]),
                        job_release=np.array([0, 0]), job_end=np.array([0, 0]), node_reserve=np.array([0.0]),
                        node_cpu=np.array([2.0]), node_mem=np.array([0.0]), node_start=np.array([0]),
                        node_end=np.array([0])),
         alpha=1.0)  # both jobs always run: their probabilities summed to 1 + 2e-16 (a NaN tolerance once)
def test_sampler_matches_eq_4_1_on_random_books(book, alpha):
    """Rejection of infeasible draws + Gumbel orders == the literal feasible-only draw."""
    pi, expected = allocation_tree(book, alpha)
    n = 3000
    orders = gumbel_orders(book.job_value, alpha, np.random.default_rng(3).gumbel(size=(n, book.n_jobs)))
    freq = (greedy_batch(book, orders) >= 0).any(axis=2).mean(axis=0)
    p = np.clip(pi.sum(1), 0.0, 1.0)  # a job's probabilities over nodes sum to 1 + 2e-16 at times: no NaN sd
    assert (np.abs(freq - p) <= 4.5 * np.sqrt(p * (1 - p) / n) + 2e-3).all()


@settings(max_examples=25, deadline=None)
@given(books(max_jobs=4, max_nodes=2), st.data())
def test_theorem_1_monotone_allocation_probability(book, data):
    j = data.draw(st.integers(0, book.n_jobs - 1))
    alpha = data.draw(st.sampled_from([1.0, 2.0, 5.0]))
    lo = data.draw(st.integers(1, 12))
    hi = lo + data.draw(st.integers(1, 10))
    p_lo = allocation_tree(book.with_job_value(j, lo), alpha)[0].sum(1)[j]
    p_hi = allocation_tree(book.with_job_value(j, hi), alpha)[0].sum(1)[j]
    assert p_hi >= p_lo - 1e-12


def test_large_alpha_converges_to_the_deterministic_greedy():
    book = generate_order_book(15, 30, np.random.default_rng(2))
    book = OrderBook.from_arrays(**{f: getattr(book, f) for f in (
        "job_cpu", "job_mem", "job_release", "job_end", "node_reserve", "node_cpu", "node_mem",
        "node_start", "node_end")}, job_value=book.job_value + np.arange(30) * 1e-3)  # distinct values
    det = greedy_allocation(book)
    rnd = randomized_allocation(book, 1e6, np.random.default_rng(0))
    assert np.array_equal(det.assign, rnd.assign)


@pytest.mark.parametrize("alpha,bids,pi,util", [
    (1, (1.7748, 2.1716), (0.4497, 0.5503), (1.4504, 2.6571)),
    (2, (2.6917, 3.1829), (0.417, 0.583), (0.9626, 2.2254)),
])
def test_table_4_3_two_user_equilibrium(alpha, bids, pi, util):
    b, p, u = two_user_equilibrium(5, 7, alpha)
    # the thesis's 4-digit figures agree to 2e-4 (its last digits are rounded inconsistently)
    assert b == pytest.approx(bids, abs=2e-4)
    assert p == pytest.approx(pi, abs=1e-3)
    assert u == pytest.approx(util, abs=2e-4)
    welfare, revenue = p @ [5, 7], p @ b
    assert (round(welfare, 2), round(revenue, 2)) == {1: (6.1, 1.99), 2: (6.17, 2.98)}[alpha]
    # each bid is a best response: no better bid on a fine grid
    grid = np.linspace(0.01, 5, 5000)
    eu = grid ** alpha / (grid ** alpha + b[1] ** alpha) * (5 - grid)
    assert eu.max() <= u[0] + 1e-6


def test_best_response_errors():
    with pytest.raises(ValueError, match="alpha 1 and 2"):
        two_user_best_response(1.0, 2.0, 3)
    with pytest.raises(ValueError, match="must be > 0"):
        two_user_best_response(0.0, 2.0, 1)


@settings(max_examples=60, deadline=None)
@given(books(), st.floats(1, 20), st.integers(0, 2**32 - 1))
def test_pay_as_bid_budget_balanced_and_ir_for_shading_users(book, alpha, seed):
    a = randomized_allocation(book, alpha, np.random.default_rng(seed))
    a.check_feasible()
    p = pay_as_bid(book, a)
    assert p.imbalance == pytest.approx(0, abs=1e-9)
    assert np.allclose(p.job, np.where(a.allocated, book.job_value * book.job_cpu * book.job_duration, 0))
    assert (node_utilities(a, p) >= -1e-9).all()
    true_value = book.job_value * 1.25  # users shading to 80 % keep u >= 0
    assert (user_utilities(a, p, true_value) >= -1e-9).all()


@settings(max_examples=40, deadline=None)
@given(books(), st.integers(0, 2**32 - 1))
def test_greedy_batch_equals_run_by_run(book, seed):
    rng = np.random.default_rng(seed)
    R = 6
    vals = np.maximum(0, book.job_value[None, :] + rng.integers(-3, 4, size=(R, book.n_jobs)))
    orders = gumbel_orders(vals[0], 1.5, rng.gumbel(size=(R, book.n_jobs)))
    assign = greedy_batch(book, orders, vals)
    welfare = batch_welfare(book, assign, vals)
    for r in range(R):
        b_r = book
        for j in range(book.n_jobs):
            b_r = b_r.with_job_value(j, float(vals[r, j]))
        one = greedy_allocation(b_r, order=orders[r][orders[r] >= 0])
        assert np.array_equal(assign[r], one.assign)
        assert welfare[r] == pytest.approx(one.welfare())


def test_distributed_mechanism_picks_the_best_run():
    book = generate_order_book(20, 20, np.random.default_rng(4))
    out = distributed_randomized(book, 1.0, np.random.default_rng(9))
    assert out.run_welfare.shape == (40,)
    assert out.welfare == max(out.deterministic_welfare, out.run_welfare.max())
    assert out.welfare == out.allocation.welfare()
    assert out.randomized == (out.run_welfare.max() > out.deterministic_welfare)
    out.allocation.check_feasible()
    assert out.payments.imbalance == pytest.approx(0, abs=1e-6)
    again = distributed_randomized(book, 1.0, np.random.default_rng(9))
    assert np.array_equal(again.run_welfare, out.run_welfare)
    det = distributed_randomized(book, 1.0, np.random.default_rng(9), n_runs=0)
    assert not det.randomized and det.welfare == greedy_allocation(book).welfare()


def test_table_4_1_distributed_can_reach_the_optimum(t41):
    out = distributed_randomized(t41, 2.0, np.random.default_rng(0), n_runs=40)
    assert out.randomized and out.welfare == 20  # P(no run finds 20) = (1 - 0.23*0.61)^40 < 0.2 %


def test_random_order_drops_zero_values_and_checks_alpha():
    o = random_order(np.array([3.0, 0.0, 5.0]), 2, np.random.default_rng(0))
    assert sorted(o.tolist()) == [0, 2]
    with pytest.raises(ValueError, match="alpha"):
        random_order(np.array([1.0]), 0.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="max_jobs"):
        allocation_tree(generate_order_book(2, 12, np.random.default_rng(0)), 1.0)
