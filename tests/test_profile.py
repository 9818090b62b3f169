"""Availability profile (Mutz 2008, section 6.1.3 SegmentedFunction)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.mechanisms.online.profile import AvailabilityProfile, greedy_starts


def naive_earliest(events, capacity, nodes, duration, after):
    """Reference: try every candidate start (after, and each reservation end) in order."""
    cands = sorted({after} | {s + d for s, d, n in events if s + d >= after})
    for c in cands:
        points = [c] + [t for s, d, n in events for t in (s, s + d) if c < t < c + duration]
        if all(capacity - sum(n for s, d, n in events if s <= p < s + d) >= nodes for p in points):
            return c
    raise AssertionError("unreachable")


def test_worked_example():
    p = AvailabilityProfile(8)
    p.reserve(0.0, 10.0, 6)
    p.reserve(5.0, 10.0, 2)
    assert p.free_at(0) == 2 and p.free_at(5) == 0 and p.free_at(12) == 6 and p.free_at(15) == 8
    assert p.earliest_window(2, 5.0) == 0.0
    assert p.earliest_window(2, 6.0) == 10.0   # [0,5) has 2 free, [5,10) none
    assert p.earliest_window(7, 1.0) == 15.0
    assert p.earliest_window(7, 1.0, deadline=15.5) is None
    assert p.earliest_window(7, 1.0, deadline=16.0) == 15.0
    assert p.earliest_window(1, 3.0, after=11.0) == 11.0


def test_reserve_over_capacity_and_bad_input():
    p = AvailabilityProfile(4)
    p.reserve(0, 5, 3)
    with pytest.raises(ValueError, match="exceed capacity"):
        p.reserve(2, 1, 2)
    with pytest.raises(ValueError, match="5 nodes requested on a 4-node"):
        p.earliest_window(5, 1.0)
    with pytest.raises(ValueError, match="duration"):
        p.earliest_window(1, float("nan"))
    with pytest.raises(ValueError, match="capacity"):
        AvailabilityProfile(0)
    with pytest.raises(ValueError, match="before the profile origin"):
        p.free_at(-1)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 8), st.lists(st.tuples(st.integers(1, 8), st.integers(1, 6)), min_size=1, max_size=12),
       st.integers(0, 5))
def test_greedy_matches_naive(capacity, jobs, after):
    jobs = [(min(n, capacity), d) for n, d in jobs]
    p = AvailabilityProfile(capacity)
    events = []
    for n, d in jobs:
        s = p.earliest_window(n, float(d), after=float(after))
        assert s == naive_earliest(events, capacity, n, d, float(after))
        p.reserve(s, float(d), n)
        events.append((s, d, n))
    # the profile never exceeds capacity and matches the reservations at every breakpoint
    for t in p.times:
        assert p.free_at(t) == capacity - sum(n for s, d, n in events if s <= t < s + d)


def test_greedy_starts_does_not_modify_profile():
    p = AvailabilityProfile(4)
    p.reserve(0, 2, 4)
    starts = greedy_starts([1.0, 1.0, 3.0], [2, 2, 1], 4, profile=p)
    assert list(starts) == [2.0, 2.0, 3.0]
    assert len(p) == 2
