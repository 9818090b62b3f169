"""DPGVA: Dynamic-Programming Generalized Vickrey Auction for day-ahead reservations.

Source: Mutz (2008) (A. Mutz, PhD thesis), chapter 5: section 5.1.2 (the dynamic programme, pseudo-code
``compute(t, j)``) and section 5.1.3 (GVA / Clarke payments, equation 5.1 utilities).

Every job uses the whole machine. A bid is (length l, deadline d, value v) in time units of
the granularity; a winner gets exactly l contiguous units ending by d and pays at most v, a
loser gets nothing and pays nothing.

Allocation, the thesis's forward recursion (section 5.1.2):

1. sort the jobs by *decreasing* deadline, so J_1 has the latest deadline (a decision: the
   pseudo-code puts job j at the start of the sub-schedule with the lower-index jobs after it,
   which is optimal only in this order; ties in deadline keep the bid order, i.e. stable);
2. table(t, 0) = 0; table(n, j) = 0 (time runs out at the horizon n);
3. table(t, j) = table(t, j-1) if t + l_j > d_j, else
   max(v_j + table(t + l_j, j-1), table(t, j-1)) with a strict ">" (ties exclude job j,
   as written);
4. the answer is table(0, m); walking back from (0, m) gives the jobs in start order, packed
   contiguously from time 0 (no release times, so no idle gaps are needed).

Each row of the table is computed for all t at once (one NumPy pass per job), and the
schedule is recovered from a boolean "take" table (back-pointers, O(n m) memory) instead of
the thesis's per-cell job lists (O(n m^2)).

Payments (section 5.1.3, Clarke pivot): mu_i = W(-i) - (W - v_i x_i), where W is the optimal
welfare, W(-i) the optimal welfare without bid i, x_i = 1 if i wins. That needs m+1 solves;
here all m+1 tables are advanced together as rows of one array (row 0 with everyone, row
i+1 without bid i), so the m+1 solves cost m vectorised passes over an (m+1, n+1) array.

Decisions where the thesis is silent (section 5.1.2 fixes no time indexing): integer time units 0..n; a job is
feasible at t if t + l <= min(d, n); lengths must be >= 1; deadlines beyond the horizon are
clipped to it. ``DPGVA`` converts seconds to units: lengths round *up* and deadlines round
*down* to the granularity, so a winner always gets at least its requested time by its
deadline. Payments that differ from 0 by float rounding only (|mu| <= 1e-9 * (1 + W)) are
set to 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ReservationOutcome:
    """Result of one clearing: ``start`` in units (-1 for losers), ``payments``, welfare."""

    start: np.ndarray
    payments: np.ndarray
    welfare: float

    @property
    def won(self) -> np.ndarray:
        return self.start >= 0


def check_bids(length, deadline, value, horizon: int, where: str = "dpgva"):
    """Validate unit bids; return int lengths, clipped int deadlines, float values."""
    if not isinstance(horizon, (int, np.integer)) or horizon <= 0:
        raise ValueError(f"{where}: horizon must be a positive number of time units, got {horizon!r}")
    arrs = [np.asarray(a) for a in (length, deadline, value)]
    if any(a.ndim != 1 for a in arrs) or len({len(a) for a in arrs}) != 1:
        raise ValueError(f"{where}: length {arrs[0].shape}, deadline {arrs[1].shape} and value {arrs[2].shape} "
                         f"must be 1-D arrays of one length")
    length, deadline, value = arrs
    for name, a in (("length", length), ("deadline", deadline), ("value", value)):
        bad = np.flatnonzero(~np.isfinite(a.astype(float)))
        if len(bad):
            raise ValueError(f"{where}: {name} is not finite at bid {bad[0]}")
    for name, a in (("length", length), ("deadline", deadline)):
        bad = np.flatnonzero(a.astype(float) != np.round(a.astype(float)))
        if len(bad):
            raise ValueError(f"{where}: {name} must be a whole number of time units, bid {bad[0]} has {a[bad[0]]}")
    for name, bad in (("length must be >= 1 unit", length < 1), ("deadline must be >= 0", deadline < 0),
                      ("value must be >= 0", value < 0)):
        pos = np.flatnonzero(bad)
        if len(pos):
            raise ValueError(f"{where}: {name}, bid {pos[0]} has {name.split()[0]} {arrs[['length', 'deadline', 'value'].index(name.split()[0])][pos[0]]}")
    return length.astype(np.int64), np.minimum(deadline.astype(np.int64), horizon), value.astype(float)


def _order(deadline: np.ndarray) -> np.ndarray:
    """Table row order: decreasing deadline, stable (J_1 = latest deadline)."""
    return np.argsort(-deadline, kind="stable")


def dpgva_schedule(length, deadline, value, horizon: int) -> tuple[np.ndarray, float]:
    """Optimal allocation by the thesis DP; returns (start per bid, -1 for losers; welfare)."""
    length, deadline, value = check_bids(length, deadline, value, horizon)
    m, n = len(length), int(horizon)
    t = np.arange(n + 1)
    order = _order(deadline)
    take = np.zeros((m, n + 1), dtype=bool)
    row = np.zeros(n + 1)                            # table(., 0)
    for k, j in enumerate(order):                    # table(., k+1) uses J_{k+1} = bid j
        nxt = t + length[j]
        ok = nxt <= deadline[j]                      # also <= n (deadlines clipped)
        a = np.full(n + 1, -np.inf)
        a[ok] = value[j] + row[nxt[ok]]
        take[k] = a > row                            # strict: ties exclude the job
        row = np.where(take[k], a, row)
    start = np.full(m, -1, dtype=np.int64)
    tt = 0
    for k in range(m - 1, -1, -1):                   # from table(0, m) back to row 0
        if tt <= n and take[k, tt]:
            j = order[k]
            start[j] = tt
            tt += length[j]
    return start, float(row[0])


def dpgva_welfare_without_each(length, deadline, value, horizon: int) -> tuple[float, np.ndarray]:
    """Optimal welfare W and W(-i) for every bid i: the m+1 DP solves, advanced together."""
    length, deadline, value = check_bids(length, deadline, value, horizon)
    m, n = len(length), int(horizon)
    t = np.arange(n + 1)
    rows = np.zeros((m + 1, n + 1))                  # row 0: all bids; row i+1: without bid i
    for j in _order(deadline):
        nxt = t + length[j]
        ok = nxt <= deadline[j]
        a = np.full((m + 1, n + 1), -np.inf)
        a[:, ok] = value[j] + rows[:, nxt[ok]]
        a[j + 1] = -np.inf                           # bid j is absent from its own row
        rows = np.where(a > rows, a, rows)
    return float(rows[0, 0]), rows[1:, 0].copy()


def clarke_payments(value, start, welfare: float, welfare_without: np.ndarray) -> np.ndarray:
    """GVA payment mu_i = W(-i) - (W - v_i x_i), float noise around 0 removed."""
    value = np.asarray(value, dtype=float)
    won = np.asarray(start) >= 0
    pay = welfare_without - (welfare - np.where(won, value, 0.0))
    pay[np.abs(pay) <= 1e-9 * (1.0 + abs(welfare))] = 0.0
    return pay


def dpgva(length, deadline, value, horizon: int) -> ReservationOutcome:
    """DPGVA in time units: DP allocation plus Clarke payments (m+1 solves)."""
    start, w = dpgva_schedule(length, deadline, value, horizon)
    w_all, w_without = dpgva_welfare_without_each(length, deadline, value, horizon)
    assert abs(w_all - w) <= 1e-9 * (1 + abs(w)), "batched and single DP disagree"
    return ReservationOutcome(start, clarke_payments(value, start, w, w_without), w)


def dpgva_one_by_one(length, deadline, value, horizon: int) -> ReservationOutcome:
    """DPGVA with its m+1 Clarke solves run one after another (Mutz 2008, section 5.1.3: W and one
    W(-i) per bid): the schedule of all bids, then one DP solve of the bids without bid ``i`` for each ``i``.
    The same outcome as :func:`dpgva` (which advances the m+1 solves together); kept as the
    reference for that batched pass and to time the thesis's procedure.

    Steps: (1) :func:`dpgva_schedule` on all bids gives the starts and W; (2) for each bid ``i``,
    :func:`dpgva_schedule` on the other bids gives W(-i) (0 without any bid); (3)
    :func:`clarke_payments`.
    """
    length, deadline, value = check_bids(length, deadline, value, horizon)
    start, w = dpgva_schedule(length, deadline, value, horizon)
    keep = np.ones(len(length), dtype=bool)
    without = np.zeros(len(length))
    for i in range(len(length)):
        keep[i] = False
        if keep.any():
            without[i] = dpgva_schedule(length[keep], deadline[keep], value[keep], horizon)[1]
        keep[i] = True
    return ReservationOutcome(start, clarke_payments(value, start, w, without), w)


def brute_force_schedule(length, deadline, value, horizon: int) -> tuple[np.ndarray, float]:
    """Thesis comparator (section 5.2.2): every ordering of jobs subject to deadlines.

    Depth-first enumeration of all sequences in which each job, packed right after the
    previous one from time 0, ends by its deadline; keeps the highest total value (the
    first found on ties). Exponential: small instances only.
    """
    length, deadline, value = check_bids(length, deadline, value, horizon)
    m = len(length)
    best_total = 0.0
    best_seq: tuple[int, ...] = ()

    def extend(t: int, used: int, seq: tuple[int, ...], total: float) -> None:
        nonlocal best_total, best_seq
        if total > best_total:
            best_total, best_seq = total, seq
        for j in range(m):
            if not used >> j & 1 and t + length[j] <= deadline[j]:
                extend(t + int(length[j]), used | 1 << j, seq + (j,), total + value[j])

    extend(0, 0, (), 0.0)
    start = np.full(m, -1, dtype=np.int64)
    t = 0
    for j in best_seq:
        start[j] = t
        t += int(length[j])
    return start, float(best_total)


class DPGVA:
    """Day-ahead reservation auction (thesis 5.1.1) in seconds.

    ``granularity`` (s) is the administrators' "maximum specifiable granularity" (e.g. 900 s),
    ``horizon`` (s) the scheduling period (e.g. 86400 s for tomorrow). ``clear(length,
    deadline, value)`` takes bids in seconds from the start of the period and returns the
    outcome with ``start`` in seconds (-1 for losers).
    """

    def __init__(self, granularity: float = 900.0, horizon: float = 86400.0):
        if not (np.isfinite(granularity) and granularity > 0):
            raise ValueError(f"DPGVA: granularity must be positive seconds, got {granularity!r}")
        if not (np.isfinite(horizon) and horizon >= granularity):
            raise ValueError(f"DPGVA: horizon must be at least one granule, got {horizon!r}")
        self.granularity = float(granularity)
        self.horizon = float(horizon)
        self.units = int(horizon // granularity)

    def to_units(self, length, deadline) -> tuple[np.ndarray, np.ndarray]:
        length = np.asarray(length, dtype=float)
        deadline = np.asarray(deadline, dtype=float)
        for name, a in (("length", length), ("deadline", deadline)):
            bad = np.flatnonzero(~np.isfinite(a))
            if len(bad):
                raise ValueError(f"DPGVA: {name} is not finite at bid {bad[0]}")
        bad = np.flatnonzero(length <= 0)
        if len(bad):
            raise ValueError(f"DPGVA: length must be positive seconds, bid {bad[0]} has {length[bad[0]]}")
        g = self.granularity
        return np.ceil(length / g - 1e-9).astype(np.int64), np.floor(deadline / g + 1e-9).astype(np.int64)

    def clear(self, length, deadline, value) -> ReservationOutcome:
        lu, du = self.to_units(length, deadline)
        out = dpgva(lu, du, value, self.units)
        start = np.where(out.start >= 0, out.start * self.granularity, -1.0)
        return ReservationOutcome(start, out.payments, out.welfare)
