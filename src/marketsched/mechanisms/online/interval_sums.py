"""Sums of non-negative amounts over a run of consecutive time intervals, without cancellation.

The payment schemes (:mod:`~marketsched.mechanisms.online.pricing`) charge a job the integral of
a price path over the time it ran. A running total ``K(t)`` differenced at the job's start and
stop (``K(b) - K(a)``) loses the small payments once ``K`` is large: with ``K`` near ``1e21`` an
increment of 10 is below its last digit. Here every interval between two events is one leaf
holding its own amount (``price * dt``, or ``dt``), and the amount of a job's run is the sum of
its leaves, taken over a binary tree of partial sums: only non-negative numbers are added, never
subtracted, so the result has a relative error of at most about ``3 log2(leaves)`` units in the
last place however large the amounts before it were.

Steps:

* :meth:`IntervalSums.append`: leaf ``i`` joins level 0; whenever a node closes a pair (its index
  is odd) their sum is appended to the level above, as a binary counter carries (O(1) amortised);
* :meth:`IntervalSums.since`: the sum of leaves ``[lo, count)`` is the usual bottom-up walk of a
  segment tree (O(log leaves) nodes, every one complete because it ends at or before ``count``).

The compiled kernel of the priority rules (``kernel_sumtree.h``) does the same additions in the
same order, so both give the same bits.
"""

from __future__ import annotations


class IntervalSums:
    """Append-only leaves with range sums over the tree of partial sums (see the module)."""

    __slots__ = ("levels",)

    def __init__(self) -> None:
        self.levels: list[list[float]] = [[]]

    @property
    def count(self) -> int:
        """Number of leaves so far (the mark a job keeps when its interval opens)."""
        return len(self.levels[0])

    def append(self, amount: float) -> None:
        """Add the next interval's amount (>= 0)."""
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
        """Sum of the leaves from ``lo`` (a past :attr:`count`) to the last one."""
        levels = self.levels
        hi = len(levels[0])
        s = 0.0
        h = 0
        while lo < hi:
            if lo & 1:
                s += levels[h][lo]
                lo += 1
            if hi & 1:
                hi -= 1
                s += levels[h][hi]
            lo >>= 1
            hi >>= 1
            h += 1
        return s
