"""Sums of non-negative amounts over a run of consecutive time intervals, without cancellation.

The payment schemes (:mod:`~marketsched.mechanisms.online.pricing`) charge a job the integral of
a price path over the time it ran. A running total ``K(t)`` differenced at the job's start and
stop (``K(b) - K(a)``) loses the small payments once ``K`` is large: with ``K`` near ``1e21`` an
increment of 10 is below its last digit. Here the amounts of the intervals between two marks (a
job's start, stop or change of price regime) are one leaf, and the amount of a job's run is the
sum of its leaves, taken over a binary tree of partial sums: only non-negative numbers are added,
never subtracted, so the result has a relative error of a few units in the last place (about
``3 log2(leaves)`` plus the intervals merged into a leaf) however large the amounts before it were.

Steps:

* :meth:`IntervalSums.add`: an interval's amount joins the pending sum (no leaf yet: intervals
  with no mark between them share one);
* :meth:`IntervalSums.mark` and :meth:`IntervalSums.since` first turn a non-zero pending sum into
  the next leaf: leaf ``i`` joins level 0, and whenever a node closes a pair (its index is odd)
  their sum is appended to the level above, as a binary counter carries (O(1) amortised);
* :meth:`IntervalSums.since`: the sum of leaves ``[lo, count)`` is the usual bottom-up walk of a
  segment tree (O(log leaves) nodes, every one complete because it ends at or before ``count``).

Plain time spans (``dt``, with no price in them) need less: :class:`TimeSum` keeps their running
total as a double-double, enough for time (see its docstring) and O(1) per event and settlement.

The compiled kernel of the priority rules (``kernel_sumtree.h``) does the same operations in the
same order, so both give the same bits.
"""

from __future__ import annotations


class IntervalSums:
    """Amounts of consecutive intervals with sums since a mark (see the module). Plain attributes
    (no ``__slots__``): the engine's snapshots (:mod:`marketsched.engine.snapshot`) copy objects
    through their ``__dict__``."""

    def __init__(self) -> None:
        self.levels: list[list[float]] = [[]]
        self.pending = 0.0  # amounts added since the last leaf

    def add(self, amount: float) -> None:
        """Add the next interval's amount (>= 0)."""
        self.pending += amount

    def mark(self) -> int:
        """The mark a job keeps when its interval opens (the number of leaves, pending one included)."""
        self._flush()
        return len(self.levels[0])

    def _flush(self) -> None:
        amount = self.pending
        if amount == 0.0:
            return
        self.pending = 0.0
        levels = self.levels
        i = len(levels[0])
        levels[0].append(amount)
        h = 0
        while i & 1:
            below = levels[h]
            h += 1
            if h == len(levels):
                levels.append([])
            levels[h].append(below[i - 1] + below[i])
            i >>= 1

    def since(self, lo: int) -> float:
        """Sum of the amounts added since mark ``lo``."""
        self._flush()
        return self._tree_sum(lo)

    def peek(self, lo: int) -> float:
        """The same sum without making a leaf (changes nothing; its last bits may differ from
        :meth:`since`'s, which groups the pending amount as a leaf)."""
        return self._tree_sum(lo) + self.pending

    def _tree_sum(self, lo: int) -> float:
        levels = self.levels
        hi = len(levels[0])
        left = right = 0.0  # the nodes on lo's side and on hi's, summed apart (as the kernel does)
        h = 0
        while lo < hi:
            if lo & 1:
                left += levels[h][lo]
                lo += 1
            if hi & 1:
                hi -= 1
                right += levels[h][hi]
            lo >>= 1
            hi >>= 1
            h += 1
        return left + right


class TimeSum:
    """A running total of time spans (``dt >= 0`` between two events) kept as a double-double:
    ``hi + lo`` with ``hi`` the rounded total and ``lo`` what rounding left out (Knuth's TwoSum,
    then a renormalisation), so a difference of two readings loses nothing to the total's size.

    Why that is enough for time, where :class:`IntervalSums` is needed for ``k* dt``: each addition
    errs by at most about ``2 eps^2`` times the total, which is at most the clock ``t``, while each
    span added is a difference of two clock readings near ``t``, at least about ``eps t / 2``
    (``eps = 2^-53``); every addition between a job's two readings is a span of its run, so the
    errors stay a few ``eps`` of the job's own sum however long the clock has run.
    """

    def __init__(self) -> None:
        self.hi = 0.0
        self.lo = 0.0

    def add(self, dt: float) -> None:
        hi = self.hi
        s = hi + dt
        b = s - hi
        e = ((hi - (s - b)) + (dt - b)) + self.lo  # TwoSum's error, plus what was left out before
        self.hi = h = s + e
        self.lo = e - (h - s)

    def mark(self) -> tuple[float, float]:
        """The reading a job keeps when its interval opens."""
        return self.hi, self.lo

    def since(self, mark: tuple[float, float]) -> float:
        """The time added since ``mark``."""
        return (self.hi - mark[0]) + (self.lo - mark[1])
