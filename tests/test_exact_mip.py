"""Exact MIP (Stößer 2009, eqs. 3.1-3.6 / appendix A) against brute force and
the thesis's optima; the greedy never beats it."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.clearing.exact import solve_exact
from marketsched.mechanisms.clearing.greedex import greedy_allocation
from marketsched.mechanisms.clearing.orderbook import OrderBook, generate_order_book
from test_greedex import T32_JOBS, T32_NODES, one_slot


def brute_force_welfare(book):
    """Optimum by enumerating, per job, 'not run' or one eligible node per slot of its window."""
    options = []
    for j in range(book.n_jobs):
        slots = range(book.job_release[j], book.job_end[j] + 1)
        per_slot = [[n for n in range(book.n_nodes)
                     if book.node_start[n] <= t <= book.node_end[n] and book.node_reserve[n] <= book.job_value[j]]
                    for t in slots]
        options.append([None] + list(itertools.product(*per_slot)))
    best = 0.0
    for choice in itertools.product(*options):
        cpu, mem, w = {}, {}, 0.0
        ok = True
        for j, nodes in enumerate(choice):
            if nodes is None:
                continue
            for t, n in zip(range(book.job_release[j], book.job_end[j] + 1), nodes):
                cpu[n, t] = cpu.get((n, t), 0) + book.job_cpu[j]
                mem[n, t] = mem.get((n, t), 0) + book.job_mem[j]
                if cpu[n, t] > book.node_cpu[n] or mem[n, t] > book.node_mem[n]:
                    ok = False
                w += book.job_cpu[j] * (book.job_value[j] - book.node_reserve[n])
            if not ok:
                break
        if ok:
            best = max(best, w)
    return best


def test_table_3_2_optimum_6858():
    book = OrderBook.from_rows(T32_JOBS, T32_NODES)
    res = solve_exact(book, mip_rel_gap=0)
    res.allocation.check_feasible()
    assert res.status == "optimal"
    assert res.welfare == 6858
    # the optimum runs the same jobs, with j2 and j4 on n1 and j6 on n2 (section 3.4.2)
    assert res.allocation.allocated.tolist() == [False, True, False, True, False, True]
    assert set(res.allocation.job_nodes(1)) == {0} and set(res.allocation.job_nodes(3)) == {0}
    assert set(res.allocation.job_nodes(5)) == {1}
    assert greedy_allocation(book).welfare() / res.welfare == pytest.approx(6570 / 6858)


@pytest.mark.parametrize("k", [3, 50])
def test_theorem_3_optimum_is_k(k):
    res = solve_exact(one_slot([(2, 1, 0), (1, k, 0)], [(0, k, 0)]), mip_rel_gap=0)
    assert res.welfare == k


def test_table_4_1_optimum_20():
    book = one_slot([(10, 1, 100), (8, 1, 500), (7, 2, 400)], [(1, 2, 500), (2, 1, 600)])
    assert solve_exact(book, mip_rel_gap=0).welfare == 20
    assert greedy_allocation(book).welfare() == 15


@st.composite
def tiny_books(draw):
    nj, nn = draw(st.integers(1, 4)), draw(st.integers(1, 2))
    jobs = []
    for _ in range(nj):
        r = draw(st.integers(0, 2))
        jobs.append((draw(st.integers(1, 12)), draw(st.integers(1, 4)), draw(st.integers(0, 4)), r,
                     r + draw(st.integers(0, 1))))
    nodes = []
    for _ in range(nn):
        s = draw(st.integers(0, 1))
        nodes.append((draw(st.integers(0, 10)), draw(st.integers(1, 6)), draw(st.integers(0, 8)), s,
                      s + draw(st.integers(0, 3))))
    return OrderBook.from_rows(jobs, nodes)


@settings(max_examples=60, deadline=None)
@given(tiny_books())
def test_mip_equals_brute_force_and_bounds_greedy(book):
    res = solve_exact(book, mip_rel_gap=0)
    res.allocation.check_feasible()
    assert res.status == "optimal"
    assert res.welfare == pytest.approx(brute_force_welfare(book), abs=1e-9)
    assert greedy_allocation(book).welfare() <= res.welfare + 1e-9


def test_generated_book_gap_and_feasibility():
    book = generate_order_book(10, 20, np.random.default_rng(5))
    res = solve_exact(book, time_limit=30)
    res.allocation.check_feasible()
    g = greedy_allocation(book).welfare()
    assert g <= res.welfare * (1 + 1e-3) + 1e-9
    assert res.welfare >= res.bound * (1 - 1e-3) - 1e-9


def test_bad_arguments():
    book = one_slot([(2, 1, 0)], [(0, 1, 0)])
    with pytest.raises(ValueError, match="time_limit"):
        solve_exact(book, time_limit=0)
    with pytest.raises(ValueError, match="mip_rel_gap"):
        solve_exact(book, mip_rel_gap=1.5)
    empty = OrderBook.from_rows([(1, 1, 0, 0, 0)], [(5, 1, 0, 0, 0)])  # reserve above value
    res = solve_exact(empty)
    assert res.welfare == 0 and res.n_variables == 0
