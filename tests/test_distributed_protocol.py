"""The distributed randomized mechanism split between participants and auctioneer (Stößer 2009,
section 4.4, fig. 4.4): the combined local steps equal the central computation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.clearing.distributed import (
    check_run,
    combine_and_price,
    local_step,
    participant_runs,
    run_seeds,
)
from marketsched.mechanisms.clearing.greedex import Allocation, greedy_allocation
from marketsched.mechanisms.clearing.orderbook import generate_order_book
from marketsched.mechanisms.clearing.randomized import distributed_randomized
from test_greedex import books


def assert_same(a, b):
    assert np.array_equal(a.allocation.assign, b.allocation.assign)
    assert np.array_equal(a.payments.job, b.payments.job)
    assert np.array_equal(a.payments.node, b.payments.node)
    assert a.randomized == b.randomized and a.welfare == b.welfare
    assert a.deterministic_welfare == b.deterministic_welfare
    assert np.array_equal(a.run_welfare, b.run_welfare)


def split_among(book, seeds, parties, data):
    """Each participant's run given to one of ``parties`` (drawn), each party computing its
    runs alone; the replies merged."""
    owner = [data.draw(st.integers(0, parties - 1)) for _ in seeds]
    replies = {}
    for p in range(parties):
        mine = {r: s for r, s in enumerate(seeds) if owner[r] == p}
        replies.update(local_step(book, alpha_of(data), mine) if mine else {})
    return replies


def alpha_of(data):
    return data.draw(st.shared(st.sampled_from([1.0, 2.0, 10.0]), key="alpha"))


@settings(max_examples=120, deadline=None)
@given(books(), st.integers(0, 2**32 - 1), st.integers(1, 4), st.data())
def test_combined_local_steps_equal_the_central_mechanism(book, seed, parties, data):
    """Books with integer values (ties in values, reserves and welfare): same allocation, same
    payments, same run welfares as :func:`distributed_randomized` with the same seed."""
    alpha = alpha_of(data)
    central = distributed_randomized(book, alpha, np.random.default_rng(seed))
    seeds = run_seeds(np.random.default_rng(seed), book.n_jobs + book.n_nodes)
    replies = split_among(book, seeds, parties, data)
    assert_same(combine_and_price(book, replies), central)


@pytest.mark.parametrize("seed", range(4))
def test_equal_on_generated_books_of_the_thesis(seed):
    """The chapter-3 generator (20 jobs, 10 nodes), one party per participant."""
    book = generate_order_book(10, 20, np.random.default_rng(seed))
    seeds = run_seeds(np.random.default_rng([seed, 7]), book.n_jobs + book.n_nodes)
    jobs, nodes = participant_runs(book)
    replies = {}
    for r in list(jobs) + list(nodes):
        replies.update(local_step(book, 5.0, {r: seeds[r]}))
    central = distributed_randomized(book, 5.0, np.random.default_rng([seed, 7]))
    assert_same(combine_and_price(book, replies), central)


def test_missing_runs_are_left_out_and_recorded_as_nan():
    book = generate_order_book(4, 8, np.random.default_rng(3))
    seeds = run_seeds(np.random.default_rng(1), 12)
    replies = local_step(book, 1.0, {r: seeds[r] for r in range(0, 12, 2)})
    out = combine_and_price(book, replies)
    assert np.isnan(out.run_welfare[1::2]).all() and not np.isnan(out.run_welfare[0::2]).any()
    none = combine_and_price(book, {})
    assert not none.randomized and np.array_equal(none.allocation.assign, greedy_allocation(book).assign)


def test_the_auctioneer_rejects_what_it_cannot_enforce():
    """A participant's reply is checked, never believed (eqs. 3.2-3.6)."""
    book = generate_order_book(3, 6, np.random.default_rng(5))
    good = local_step(book, 1.0, {0: run_seeds(np.random.default_rng(0), 1)[0]})[0]
    with pytest.raises(ValueError, match="run 2: the allocation has shape"):
        combine_and_price(book, {2: good[:, :1]})
    with pytest.raises(ValueError, match="run 1: the allocation names a node outside"):
        combine_and_price(book, {1: np.full_like(good, book.n_nodes)})
    greedy_all = np.full_like(good, -1)
    j = 0
    greedy_all[j, :] = 0  # job 0 on node 0 in every slot, outside its window
    with pytest.raises(ValueError, match="run 0: job 0 is assigned outside its window"):
        check_run(book, 0, greedy_all)
    with pytest.raises(ValueError, match=r"runs \[99\] are not among"):
        combine_and_price(book, {99: good})
    with pytest.raises(ValueError, match="not node indices"):
        check_run(book, 0, good.astype(float))


def test_an_oversold_node_is_rejected():
    """Every job piled on node 0 in its window exceeds its capacity."""
    book = generate_order_book(2, 12, np.random.default_rng(2))
    a = np.full((book.n_jobs, book.horizon), -1, dtype=np.int64)
    for j in range(book.n_jobs):
        a[j, book.job_release[j]:book.job_end[j] + 1] = 0
    with pytest.raises(ValueError, match="run 4: "):
        check_run(book, 4, a)


@settings(max_examples=200, deadline=None)
@given(books(), st.integers(0, 2**32 - 1), st.floats(0.0, 0.6))
def test_the_auctioneers_check_is_check_feasible(book, seed, noise):
    """The vectorised check raises exactly when :meth:`Allocation.check_feasible` (the
    definition, job by job) does, with its message: on runs of the heuristic with a share
    ``noise`` of the slots changed to random nodes or to none."""
    rng = np.random.default_rng(seed)
    a = local_step(book, 1.0, {0: np.random.SeedSequence(seed)})[0].copy()
    flip = rng.random(a.shape) < noise
    a[flip] = rng.integers(-1, book.n_nodes, size=int(flip.sum()))
    try:
        Allocation(book, a).check_feasible()
        want = None
    except ValueError as exc:
        want = f"run 3: {exc}"
    if want is None:
        assert np.array_equal(check_run(book, 3, a), a)
    else:
        with pytest.raises(ValueError) as got:
            check_run(book, 3, a)
        assert str(got.value) == want
