"""Price tables (Kang & Parkes 2007, definition 6): checks on every update, projection, rolling, lookups."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.online.egg import AdmissibilityError, PriceBook, PriceTable
from marketsched.mechanisms.online.egg.instances import random_tables
from marketsched.mechanisms.online.egg.price_table import RULE_LOCKED, RULE_MONOTONE


def _book(rng, K=3, nb=(3, 2), H=8, delta=3.0, slot=1.0, start=0.0):
    edges = [np.concatenate([[0.0], np.cumsum(rng.uniform(0.5, 1.5, n))]) for n in nb]
    return PriceBook(K, edges, slot, delta, H, start, random_tables(rng, (K, *nb, H), p_inf=0.1))


def _expected_violations(book, k, new, at):
    """Count of broken cells by brute force over every cell."""
    cur = book.prices[k]
    locked = book.locked_columns(at)
    n = 0
    for idx in np.ndindex(new.shape):
        for axis in range(new.ndim - 1):
            if idx[axis] > 0:
                prev = list(idx)
                prev[axis] -= 1
                n += new[idx] < new[tuple(prev)]
        n += bool(locked[idx[-1]] and new[idx] < cur[idx])
    return int(n)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), at=st.floats(0.0, 4.0), delta=st.sampled_from([0.0, 1.0, 2.5, 5.0]))
def test_update_accepts_iff_admissible_and_names_every_cell(seed, at, delta):
    rng = np.random.default_rng(seed)
    book = _book(rng, delta=delta)
    book.roll(at)
    for k in range(book.n_providers):
        wish = book.prices[k] * rng.uniform(0.5, 1.5, book.prices[k].shape)
        wish[rng.random(wish.shape) < 0.05] = rng.uniform(0, 10)
        if rng.random() < 0.4:  # an admissible wish half of the time (both branches exercised)
            wish = book.project(k, wish, at)
        expected = _expected_violations(book, k, wish, at)
        before = book.prices[k].copy()
        if expected:
            with pytest.raises(AdmissibilityError) as err:
                book.update(k, wish, at)
            assert err.value.total == expected
            for v in err.value.violations:
                cell = v.cell[:-1] + (v.cell[-1] - book.base,)
                assert wish[cell] == v.new
                if v.rule == RULE_LOCKED:
                    assert book.locked_columns(at)[cell[-1]] and v.other == before[cell] > v.new
                else:
                    assert v.rule == RULE_MONOTONE and v.other > v.new
            np.testing.assert_array_equal(book.prices[k], before)
        else:
            book.update(k, wish, at)
            np.testing.assert_array_equal(book.prices[k], wish)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), at=st.floats(0.0, 4.0))
def test_projection_is_always_accepted_and_keeps_admissible_wishes(seed, at):
    rng = np.random.default_rng(seed)
    book = _book(rng)
    for k in range(book.n_providers):
        wish = rng.uniform(0.0, 20.0, book.prices[k].shape)
        proj = book.project(k, wish, at)
        assert np.all(proj >= wish)
        assert book.violations(k, proj, at) == []
        book.update(k, proj, at)
        # an admissible wish is its own projection
        np.testing.assert_array_equal(book.project(k, proj, at), proj)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), at=st.floats(0.0, 3.0))
def test_update_many_equals_one_by_one(seed, at):
    rng = np.random.default_rng(seed)
    a = _book(rng)
    b = a.copy()
    wishes = a.prices * rng.uniform(0.8, 1.3, a.prices.shape)
    for k in range(a.n_providers):
        if rng.random() < 0.5:
            wishes[k] = a.project(k, wishes[k], at)
    rejected = a.update_many(np.arange(a.n_providers), wishes, at)
    for k in range(b.n_providers):
        try:
            b.update(k, wishes[k], at)
            assert k not in rejected
        except AdmissibilityError as err:
            assert [str(v) for v in err.violations] == [str(v) for v in rejected[k]]
    np.testing.assert_array_equal(a.prices, b.prices)


def test_history_of_accepted_updates_satisfies_definition_6_rule_2():
    """Every quote at t for a completion time tau with t <= tau < t + Delta is never undercut later."""
    rng = np.random.default_rng(5)
    book = _book(rng, K=2, H=10, delta=3.0)
    quotes = []  # (time, absolute slot, provider, table column)
    for t in np.sort(rng.uniform(0, 6, 40)):
        k = int(rng.integers(0, 2))
        wish = book.prices[k] * rng.uniform(0.3, 2.0, book.prices[k].shape)
        book.update(k, book.project(k, wish, t), t)
        quotes.append((t, book.base, book.prices.copy()))
    for i, (t, base, p) in enumerate(quotes):
        for t2, base2, p2 in quotes[i + 1:]:
            for h in range(p.shape[-1]):
                s = base + h
                start, end = s * book.slot, (s + 1) * book.slot
                h2 = s - base2
                # completion times tau in [max(start, t2), end) with tau < t + Delta are protected
                if 0 <= h2 < p2.shape[-1] and max(start, t2) < min(end, t + book.delta):
                    assert np.all(p2[..., h2] >= p[..., h])


def test_roll_shifts_columns_and_opens_new_ones_at_inf():
    rng = np.random.default_rng(0)
    book = _book(rng, H=6, start=0.0)
    before = book.prices.copy()
    book.roll(2.5)
    assert book.base == 2
    np.testing.assert_array_equal(book.prices[..., :4], before[..., 2:])
    assert np.all(np.isinf(book.prices[..., 4:]))
    np.testing.assert_array_equal(book.slot_starts, [2, 3, 4, 5, 6, 7])
    with pytest.raises(ValueError, match="before the book's clock"):
        book.roll(1.0)
    book.roll(100.0)
    assert np.all(np.isinf(book.prices))


def test_new_columns_can_be_priced_once_outside_the_lock():
    book = PriceBook(1, [[0.0, 1.0]], 1.0, 3.0, 6, prices=np.full((1, 1, 6), 5.0))
    book.roll(1.0)
    assert np.isinf(book.prices[0, 0, -1]) and not book.locked_columns(1.0)[-1]
    new = book.prices[0].copy()
    new[0, -1] = 1.0
    book.update(0, new, 1.0)  # +inf -> 1 outside the window: allowed
    new[0, 0] = 1.0  # 5 -> 1 in the current slot: refused
    with pytest.raises(AdmissibilityError, match="fall from 5 to 1"):
        book.update(0, new, 1.0)


def test_bucket_lookup_edges_and_not_offered():
    book = PriceBook(2, [np.array([[0.0, 2.0, 4.0, 8.0], [0.0, 1.0, 2.0, 3.0]])], 1.0, 3.0, 4)
    Q = np.array([[[0.0], [0.0]], [[1.99], [1.0]], [[2.0], [2.99]], [[7.99], [3.0]], [[8.0], [0.5]]])
    np.testing.assert_array_equal(book.bucket_index(Q), [[0, 0], [0, 1], [1, 2], [2, -1], [-1, 0]])
    with pytest.raises(ValueError, match=">= 0"):
        book.bucket_index(np.array([[[-1.0], [0.0]]]))
    t = PriceTable.create([[0.0, 2.0, 4.0, 8.0]], 1.0, 3.0, 4, np.arange(12.0).reshape(3, 4))
    assert t.price([2.5], 2.0) == 6.0 and t.price([9.0], 2.0) == np.inf and t.price([1.0], 10.0) == np.inf


def test_two_resource_axes_both_monotone():
    t = PriceTable.create([[0, 1, 2], [0, 1, 2]], 1.0, 2.0, 3, np.zeros((2, 2, 3)))
    bad = np.zeros((2, 2, 3))
    bad[0, 1, 2] = 5.0  # larger along axis 1 at (0, 1) but (1, 1) stays 0 < 5 along axis 0
    with pytest.raises(AdmissibilityError) as err:
        t.update(bad, 0.0)
    (v,) = err.value.violations
    assert v.rule == RULE_MONOTONE and v.axis == 0 and v.cell == (1, 1, 2)


@pytest.mark.parametrize("kwargs,match", [
    (dict(n_providers=0), "n_providers"),
    (dict(slot=0.0), "slot"),
    (dict(delta=-1.0), "delta"),
    (dict(horizon=0), "horizon"),
    (dict(edges=[[0.0, 2.0, 1.0]]), "strictly increasing"),
    (dict(edges=[[-1.0, 2.0]]), ">= 0"),
    (dict(prices=np.zeros((1, 2, 4))), "shape"),
    (dict(prices=np.array([[[5.0] * 4, [1.0] * 4, [9.0] * 4]])), "non-decreasing in resources"),
])
def test_bad_construction_raises_naming_the_problem(kwargs, match):
    args = dict(n_providers=1, edges=[[0.0, 2.0, 4.0, 8.0]], slot=1.0, delta=3.0, horizon=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        PriceBook(**args)


def test_update_rejects_wrong_shape_and_provider():
    t = PriceTable.create([[0.0, 1.0]], 1.0, 1.0, 3, np.zeros((1, 3)))
    with pytest.raises(ValueError, match="shape"):
        t.update(np.zeros((2, 3)), 0.0)
    with pytest.raises(ValueError, match="provider"):
        t.book.update(3, np.zeros((1, 3)), 0.0)
