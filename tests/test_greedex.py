"""GREEDEX (Stößer 2009, chapter 3): worked example of tables 3.2-3.5, the
proof examples of theorems 3, 5, 6 and 7, and the proved properties as hypothesis tests."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.clearing.greedex import (
    critical_value_pricing,
    critical_values,
    greedy_allocation,
    k_pricing,
    node_utilities,
    user_utilities,
)
from marketsched.mechanisms.clearing.orderbook import OrderBook

# table 3.2: (v, c, m, r, e) per job j1..j6 and (v, C, M, R, E) per node n1, n2
T32_JOBS = [(10, 35, 50, 3, 7), (14, 35, 27, 1, 7), (11, 84, 45, 2, 7), (16, 71, 48, 2, 7),
            (12, 63, 30, 2, 7), (17, 55, 20, 2, 7)]
T32_NODES = [(8, 123, 98, 1, 8), (11, 98, 82, 1, 9)]


@pytest.fixture
def t32():
    return OrderBook.from_rows(T32_JOBS, T32_NODES)


def test_table_3_3_allocation(t32):
    a = greedy_allocation(t32)
    a.check_feasible()
    assert a.allocated.tolist() == [False, True, False, True, False, True]
    # table 3.3: n1 hosts j2 in slots 1-7 and j6 in 2-7, n2 hosts j4 in 2-7
    assert a.job_nodes(1).tolist() == [0] * 7
    assert a.job_nodes(5).tolist() == [0] * 6
    assert a.job_nodes(3).tolist() == [1] * 6
    assert a.welfare() == 6570


def test_table_3_5_critical_value_pricing(t32):
    a = greedy_allocation(t32)
    phi = critical_values(t32, a)
    assert phi[[1, 3, 5]].tolist() == [12, 12, 12]
    assert np.isnan(phi[[0, 2, 4]]).all()
    p = critical_value_pricing(t32, a, phi)
    assert p.job.tolist() == [0, 2940, 0, 5112, 0, 3960]
    # surplus 12,012 - 9,286 = 2,726 split 575 : 426 by CPU slots
    assert p.node[0] == pytest.approx(4600 + 2726 * 575 / 1001, abs=1e-9)
    assert p.node[1] == pytest.approx(4686 + 2726 * 426 / 1001, abs=1e-9)
    assert round(p.node[0], 2) == 6165.88 and round(p.node[1], 2) == 5846.12
    assert p.job.sum() == 12012
    assert p.imbalance == pytest.approx(0, abs=1e-9)
    with pytest.raises(ValueError, match="allocated job 1"):
        critical_value_pricing(t32, a, critical_values(t32, a, jobs=[3, 5]))


def test_table_3_5_k_pricing(t32):
    a = greedy_allocation(t32)
    p = k_pricing(t32, a, 0.5)
    assert p.job.tolist() == [0, 2695, 0, 5751, 0, 4125]
    assert p.node.tolist() == [6820, 5751]
    assert p.job.sum() == p.node.sum() == 12571
    with pytest.raises(ValueError, match="k must be in"):
        k_pricing(t32, a, 1.5)


def one_slot(jobs, nodes):
    """Books of the proofs: no time dimension, so every order lives in slot 0."""
    return OrderBook.from_rows([(v, c, m, 0, 0) for v, c, m in jobs], [(v, C, M, 0, 0) for v, C, M in nodes])


@pytest.mark.parametrize("k", [2, 10, 1000])
def test_theorem_3_competitive_ratio_example(k):
    b = one_slot([(2, 1, 0), (1, k, 0)], [(0, k, 0)])
    a = greedy_allocation(b)
    assert a.allocated.tolist() == [True, False]
    assert a.welfare() == 2  # the optimum k is checked against the MIP in test_exact_mip.py


def test_theorem_5_critical_value_not_job_merge_proof():
    # merged memory 200: the thesis prints 300, which would not fit n2
    nodes = [(0, 1, 150), (1, 3, 200)]
    sep = one_slot([(4, 1, 100), (3, 1, 150), (2, 2, 100)], nodes)
    a = greedy_allocation(sep)
    assert a.allocated.tolist() == [True, True, False]
    phi = critical_values(sep, a, losers=True)
    assert phi[0] == 1 and phi[2] == 3
    u_sep = user_utilities(a, critical_value_pricing(sep, a))
    assert u_sep[0] + u_sep[2] == 3
    merged = one_slot([(8 / 3, 3, 200), (3, 1, 150)], nodes)
    am = greedy_allocation(merged)
    assert am.allocated[0]
    assert critical_values(merged, am)[0] == 1
    u_m = user_utilities(am, critical_value_pricing(merged, am))[0]
    assert u_m == pytest.approx(5)
    # with the printed memory 300 the merged job would not be allocated
    assert not greedy_allocation(one_slot([(8 / 3, 3, 300), (3, 1, 150)], nodes)).allocated[0]


def test_theorem_6_node_can_raise_load_by_overstating():
    jobs = [(10, 1, 0), (9, 2, 0)]
    truthful = greedy_allocation(one_slot(jobs, [(1, 2, 0), (2, 2, 0)]))
    lying = greedy_allocation(one_slot(jobs, [(3, 2, 0), (2, 2, 0)]))
    assert truthful.node_cpu_slots()[0] == 1
    assert lying.node_cpu_slots()[0] == 2


@pytest.mark.parametrize("k", [0.0, 0.3, 0.5, 1.0])
def test_theorem_7_k_pricing_not_job_merge_proof(k):
    node = [(0, 2, 0)]
    sep = one_slot([(4, 1, 0), (2, 1, 0), (1, 1, 0)], node)
    a = greedy_allocation(sep)
    assert a.allocated.tolist() == [True, True, False]
    u = user_utilities(a, k_pricing(sep, a, k))
    assert u[0] == pytest.approx(4 * k) and u[2] == 0
    merged = one_slot([(2.5, 2, 0), (2, 1, 0)], node)
    am = greedy_allocation(merged)
    assert am.allocated.tolist() == [True, False]
    assert user_utilities(am, k_pricing(merged, am, k))[0] == pytest.approx(5 * k)


def test_empty_and_degenerate_books():
    b = OrderBook.from_rows([], [(5, 2, 2, 0, 3)])
    a = greedy_allocation(b)
    assert a.assign.shape == (0, 4) and a.welfare() == 0
    p = critical_value_pricing(b, a)
    assert p.node.tolist() == [0]
    b = OrderBook.from_rows([(5, 1, 1, 0, 2)], [])
    a = greedy_allocation(b)
    assert not a.allocated[0]
    assert critical_values(b, a, losers=True)[0] == np.inf


# ---------------------------------------------------------------------- reference algorithm 1
def algorithm_1_literal(book):
    """Algorithm 1 transcribed line by line with Python loops (the test oracle)."""
    J, N, T = book.n_jobs, book.n_nodes, book.horizon
    jobs = sorted(range(J), key=lambda j: (-book.job_value[j], j))
    nodes = sorted(range(N), key=lambda n: (book.node_reserve[n], n))
    C = {(n, t): book.node_cpu[n] for n in range(N) for t in range(T)}
    M = {(n, t): book.node_mem[n] for n in range(N) for t in range(T)}
    assign = np.full((J, T), -1)
    for j in jobs:
        tentative = {}
        for t in range(book.job_release[j], book.job_end[j] + 1):
            for n in nodes:
                if (book.node_start[n] <= t <= book.node_end[n] and book.job_cpu[j] <= C[n, t]
                        and book.job_mem[j] <= M[n, t] and book.node_reserve[n] <= book.job_value[j]):
                    tentative[t] = n
                    break
        if len(tentative) == book.job_duration[j]:
            for t, n in tentative.items():
                assign[j, t] = n
                C[n, t] -= book.job_cpu[j]
                M[n, t] -= book.job_mem[j]
    return assign


@st.composite
def books(draw, max_jobs=7, max_nodes=3, max_slot=3):
    nj = draw(st.integers(1, max_jobs))
    nn = draw(st.integers(1, max_nodes))
    jobs, nodes = [], []
    for _ in range(nj):
        r = draw(st.integers(0, max_slot))
        jobs.append((draw(st.integers(0, 12)), draw(st.integers(1, 4)), draw(st.integers(0, 4)),
                     r, r + draw(st.integers(0, 2))))
    for _ in range(nn):
        s = draw(st.integers(0, max_slot))
        nodes.append((draw(st.integers(0, 10)), draw(st.integers(0, 6)), draw(st.integers(0, 8)),
                      s, s + draw(st.integers(0, 4))))
    return OrderBook.from_rows(jobs, nodes)


@settings(max_examples=150, deadline=None)
@given(books())
def test_greedy_matches_literal_algorithm_1(book):
    a = greedy_allocation(book)
    assert np.array_equal(a.assign, algorithm_1_literal(book))
    a.check_feasible()


@settings(max_examples=150, deadline=None)
@given(books(), st.data())
def test_critical_value_is_the_allocation_threshold(book, data):
    """phi_j separates losing from winning reports: j wins for b > phi_j, loses for b < phi_j."""
    a = greedy_allocation(book)
    phi = critical_values(book, a, losers=True)
    j = data.draw(st.integers(0, book.n_jobs - 1))
    if np.isinf(phi[j]):
        assert not greedy_allocation(book.with_job_value(j, 1e6)).allocated[j]
        return
    assert a.allocated[j] == (book.job_value[j] >= phi[j]) or book.job_value[j] == phi[j]
    above = [phi[j] + 1e-6, phi[j] + 0.5, phi[j] + data.draw(st.floats(0.01, 20))]
    below = [phi[j] - 1e-6, phi[j] - 0.5, phi[j] - data.draw(st.floats(0.01, 20))]
    for b in above:
        assert greedy_allocation(book.with_job_value(j, b)).allocated[j], (j, b, phi[j])
    for b in below:
        if b >= 0:
            assert not greedy_allocation(book.with_job_value(j, b)).allocated[j], (j, b, phi[j])


@settings(max_examples=150, deadline=None)
@given(books(), st.data())
def test_theorem_4_users_cannot_gain_by_misreporting_value(book, data):
    a = greedy_allocation(book)
    truth = user_utilities(a, critical_value_pricing(book, a))
    j = data.draw(st.integers(0, book.n_jobs - 1))
    for report in (data.draw(st.integers(0, 25)), data.draw(st.floats(0, 25)), book.job_value[j] * 0.5):
        lie_book = book.with_job_value(j, float(report))
        la = greedy_allocation(lie_book)
        u = user_utilities(la, critical_value_pricing(lie_book, la), true_value=book.job_value)[j]
        assert u <= truth[j] + 1e-9, (j, report)


@settings(max_examples=150, deadline=None)
@given(books(), st.sampled_from([0.0, 0.3, 0.5, 0.7, 1.0]))
def test_budget_balance_and_individual_rationality(book, k):
    a = greedy_allocation(book)
    scale = 1.0 + float(np.sum(book.job_value * book.job_cpu * book.job_duration))
    for p in (critical_value_pricing(book, a), k_pricing(book, a, k)):
        assert abs(p.imbalance) <= 1e-12 * scale
        assert (user_utilities(a, p) >= -1e-9).all()
        assert (node_utilities(a, p) >= -1e-9).all()
        assert (p.job[~a.allocated] == 0).all()


def test_critical_values_on_a_table_3_6_book_batched_and_exact():
    from marketsched.mechanisms.clearing.orderbook import generate_order_book

    book = generate_order_book(15, 45, np.random.default_rng(12))
    a = greedy_allocation(book)
    phi = critical_values(book, a, losers=True)
    # several passes of at most 3 concurrent reruns give the same values
    assert np.array_equal(phi, critical_values(book, a, losers=True, max_batch=3, compiled=False), equal_nan=True)
    assert np.isnan(critical_values(book, a, jobs=[0, 1])[2:]).all()
    assert (phi[a.allocated] <= book.job_value[a.allocated]).all()
    for j in range(0, book.n_jobs, 4):
        if np.isfinite(phi[j]):
            assert greedy_allocation(book.with_job_value(j, phi[j] + 1e-6)).allocated[j]
            if phi[j] > 1e-6:
                assert not greedy_allocation(book.with_job_value(j, phi[j] - 1e-6)).allocated[j]


# ---------------------------------------------------------------------- the compiled critical values
def _kernel():
    return pytest.importorskip("marketsched.mechanisms.clearing._greedex_kernel")


@settings(max_examples=300, deadline=None)
@given(books(max_jobs=12, max_nodes=5), st.data())
def test_compiled_critical_values_equal_the_python_scans(book, data):
    """The C scans give the Python path's values bit for bit (ties: values drawn from 13 integers),
    for winners and losers, a subset of jobs, and an allocation that is not the greedy's."""
    _kernel()
    a = greedy_allocation(book)
    for losers in (False, True):
        ref = critical_values(book, a, losers=losers, compiled=False)
        assert np.array_equal(critical_values(book, a, losers=losers), ref, equal_nan=True)
    jobs = data.draw(st.lists(st.integers(0, book.n_jobs - 1), max_size=4))
    assert np.array_equal(critical_values(book, a, jobs=jobs, losers=True),
                          critical_values(book, a, jobs=jobs, losers=True, compiled=False), equal_nan=True)
    from marketsched.mechanisms.clearing.randomized import randomized_allocation

    ra = randomized_allocation(book, 10.0, np.random.default_rng(data.draw(st.integers(0, 99))))
    assert np.array_equal(critical_values(book, ra, losers=True),
                          critical_values(book, ra, losers=True, compiled=False), equal_nan=True)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_critical_values_on_table_3_6_books(seed):
    """Larger books (blocks of nodes skipped by the kernel's search), integer and continuous values."""
    from marketsched.mechanisms.clearing.orderbook import generate_order_book

    _kernel()
    rng = np.random.default_rng([21, seed])
    book = generate_order_book(120, 150, rng)
    if seed % 2:  # distinct values: a boundary after every job
        book = OrderBook.from_arrays(**{**{f: getattr(book, f) for f in ("job_cpu", "job_mem", "job_release",
                                                                            "job_end", "node_reserve", "node_cpu",
                                                                            "node_mem", "node_start", "node_end")},
                                        "job_value": book.job_value + rng.random(book.n_jobs)})
    a = greedy_allocation(book)
    assert np.array_equal(critical_values(book, a, losers=True),
                          critical_values(book, a, losers=True, compiled=False), equal_nan=True)
