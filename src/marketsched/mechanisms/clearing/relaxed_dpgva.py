"""Relaxed DPGVA: random-restart greedy reservations with Clarke payments on top.

Source: Mutz (2008) (A. Mutz, PhD thesis), chapter 7: section 7.1.2 (the search heuristic kappa') and
the payment expression after it (GVA with kappa', utilities 7.1).

A bid is (length l, deadline d, value v, nodes n); a winner gets exactly l contiguous time
units on n nodes ending by d and pays at most v ... in theory. The allocation is a heuristic,
so none of the GVA guarantees hold (see "Odd payments" below).

Allocation kappa' at search depth D (section 7.1.2):

1. repeat D times (the first ordering counts as one; the thesis does not say):
   a. shuffle the bids uniformly at random;
   b. insert each bid, in that order, into an empty availability profile of ``capacity``
      nodes over the horizon (24 h in the thesis) at its earliest window of n nodes for l
      units, discarding it when that window would end after its deadline (or the horizon);
   c. keep the schedule if its aggregate value is strictly higher than the best so far.
2. The result is the best schedule found (the first found among equals).

Payments: mu_i = W'(-i) - (W' - v_i x_i), with W' the value of kappa' on all bids and W'(-i)
the value of a separate kappa' search without bid i (m + 1 searches in all).

Implementation: time is slotted (integer units of the granularity, like the DPGVA), which
makes the SegmentedFunction of section 6.1.3 a vector of free nodes per slot. All D orderings
are advanced together: at step k every ordering inserts its k-th bid, the earliest window of
each is found by a cumulative count of "too few free nodes" slots, so one step is a few
NumPy passes over a (D, horizon) array instead of D Python-level insertions.

Decisions where the thesis is silent:

* Random streams (chapter 7 does not say how the m+1 searches draw): ``streams="independent"`` (default, what "each without-i run
  is a separate random search" reads as) gives each of the m+1 searches its own child
  generator spawned from ``rng``; ``streams="common"`` reuses the main search's orderings
  with bid i deleted (common random numbers: less noise, losers then never pay < 0).
* Time indexing as in the DPGVA (integer units, deadlines clipped to the horizon,
  feasible iff start + l <= d).
* Odd payments (the thesis gives no capping rule): the formula is applied literally, with no cap. Because kappa'
  is suboptimal and random, W'(-i) can be below W' - v_i (a winner gets paid, mu < 0), above
  W' (mu > v_i, negative payoff), and a loser can pay or be paid when the search without it
  finds a different value. ``ReservationOutcome.payments`` reports these as they come; the
  reproduction measures how often they occur.
"""

from __future__ import annotations

import math

import numpy as np

from .dpgva import ReservationOutcome, check_bids, clarke_payments

STREAMS = ("independent", "common")


def _check_nodes(nodes, m: int, capacity: int, where: str) -> np.ndarray:
    if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
        raise ValueError(f"{where}: capacity must be a positive integer, got {capacity!r}")
    nodes = np.asarray(nodes)
    if nodes.shape != (m,):
        raise ValueError(f"{where}: nodes has shape {nodes.shape}, expected ({m},)")
    bad = np.flatnonzero(~np.isfinite(nodes.astype(float)) | (nodes < 1) | (nodes != np.round(nodes)))
    if len(bad):
        raise ValueError(f"{where}: nodes must be positive integers, bid {bad[0]} has {nodes[bad[0]]}")
    return nodes.astype(np.int64)


def greedy_batch(length, deadline, nodes, orders, capacity: int, horizon: int,
                 chunk_cells: int = 2_000_000) -> np.ndarray:
    """Greedy earliest-window insertion for many orderings at once.

    ``orders`` is an (R, k) array of bid indices (each row one ordering of some bids);
    returns the start slot of every bid in every row, shape (R, m), -1 when not placed
    (not in the row, or no window ending by its deadline within the horizon).
    Inputs are assumed validated (unit lengths >= 1, deadlines clipped to the horizon).
    """
    orders = np.atleast_2d(np.asarray(orders, dtype=np.int64))
    R, k = orders.shape
    m, T = len(length), int(horizon)
    starts = np.full((R, m), -1, dtype=np.int64)
    slot = np.arange(T)
    rows_per_chunk = max(1, chunk_cells // (T + 1))
    for lo in range(0, R, rows_per_chunk):
        o = orders[lo:lo + rows_per_chunk]
        r = len(o)
        ar = np.arange(r)
        free = np.full((r, T), capacity, dtype=np.int64)
        cs = np.zeros((r, T + 1), dtype=np.int64)
        for step in range(k):
            j = o[:, step]
            lj, dj, nj = length[j], deadline[j], nodes[j]
            np.cumsum(free < nj[:, None], axis=1, out=cs[:, 1:])        # slots with too few nodes
            end = slot[None, :] + lj[:, None]                            # window [s, s + l)
            ok = end <= dj[:, None]
            blocked = np.take_along_axis(cs, np.minimum(end, T), axis=1) - cs[:, :T]
            ok &= blocked == 0
            has = ok.any(axis=1)
            s = np.argmax(ok, axis=1)
            starts[lo + ar[has], j[has]] = s[has]
            use = has[:, None] & (slot[None, :] >= s[:, None]) & (slot[None, :] < (s + lj)[:, None])
            free -= use * nj[:, None]
    return starts


def best_of(starts: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, float]:
    """The row of highest aggregate value (first on ties: replace only on strict improvement)."""
    totals = (starts >= 0) @ value
    b = int(np.argmax(totals))
    return starts[b].copy(), float(totals[b])


def _orders(rng: np.random.Generator, bids: np.ndarray, depth: int) -> np.ndarray:
    return rng.permuted(np.tile(bids, (depth, 1)), axis=1)


def relaxed_dpgva_schedule(length, deadline, value, nodes, capacity: int, horizon: int, depth: int,
                           rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """kappa': best of ``depth`` random greedy orderings; returns (start slot per bid or -1, value)."""
    length, deadline, value = check_bids(length, deadline, value, horizon, "relaxed_dpgva")
    nodes = _check_nodes(nodes, len(length), capacity, "relaxed_dpgva")
    _check_depth(depth, rng)
    orders = _orders(rng, np.arange(len(length)), depth)
    return best_of(greedy_batch(length, deadline, nodes, orders, capacity, horizon), value)


def _check_depth(depth, rng):
    if not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"relaxed_dpgva: search depth must be a positive integer, got {depth!r}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("relaxed_dpgva: pass an explicit numpy.random.Generator as rng")


def relaxed_dpgva(length, deadline, value, nodes, capacity: int, horizon: int, depth: int,
                  rng: np.random.Generator, streams: str = "independent") -> ReservationOutcome:
    """Relaxed DPGVA in time units: kappa' allocation plus Clarke payments (m+1 searches)."""
    length, deadline, value = check_bids(length, deadline, value, horizon, "relaxed_dpgva")
    m = len(length)
    nodes = _check_nodes(nodes, m, capacity, "relaxed_dpgva")
    _check_depth(depth, rng)
    if streams not in STREAMS:
        raise ValueError(f"relaxed_dpgva: streams must be one of {STREAMS}, got {streams!r}")
    ids = np.arange(m)
    if streams == "independent":
        gens = rng.spawn(m + 1)
        main_orders = _orders(gens[0], ids, depth)
    else:
        main_orders = _orders(rng, ids, depth)
    start, w = best_of(greedy_batch(length, deadline, nodes, main_orders, capacity, horizon), value)
    w_without = np.empty(m)
    for i in range(m):
        if streams == "independent":
            o = _orders(gens[i + 1], np.delete(ids, i), depth)
        else:
            o = main_orders[main_orders != i].reshape(depth, m - 1)
        w_without[i] = best_of(greedy_batch(length, deadline, nodes, o, capacity, horizon), value)[1] if m > 1 else 0.0
    return ReservationOutcome(start, clarke_payments(value, start, w, w_without), w)


def brute_force_orderings(length, deadline, value, nodes, capacity: int, horizon: int,
                          max_bids: int = 8) -> tuple[np.ndarray, float]:
    """Best greedy schedule over *all* m! orderings (the brute-force solver of section 7.2.2); small m only."""
    import itertools

    length, deadline, value = check_bids(length, deadline, value, horizon, "brute_force_orderings")
    m = len(length)
    nodes = _check_nodes(nodes, m, capacity, "brute_force_orderings")
    if m > max_bids:
        raise ValueError(f"brute_force_orderings: {m} bids means {math.factorial(m)} orderings (max_bids={max_bids})")
    orders = np.array(list(itertools.permutations(range(m))), dtype=np.int64).reshape(-1, m)
    return best_of(greedy_batch(length, deadline, nodes, orders, capacity, horizon), value)


def optimal_schedule(length, deadline, value, nodes, capacity: int, horizon: int) -> tuple[np.ndarray, float]:
    """True optimum of the multi-node reservation problem (time-indexed MIP, HiGHS via SciPy).

    Not in the thesis (its "brute force" is not specified beyond orderings); used to measure
    how far kappa' is from the optimum. Variables x[j, s] = bid j starts at slot s.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    length, deadline, value = check_bids(length, deadline, value, horizon, "optimal_schedule")
    m, T = len(length), int(horizon)
    nodes = _check_nodes(nodes, m, capacity, "optimal_schedule")
    js, ss = [], []
    for j in range(m):
        if nodes[j] <= capacity:
            s = np.arange(0, deadline[j] - length[j] + 1)
            js.append(np.full(len(s), j))
            ss.append(s)
    j_of = np.concatenate(js) if js else np.zeros(0, np.int64)
    s_of = np.concatenate(ss) if ss else np.zeros(0, np.int64)
    nv = len(j_of)
    if nv == 0:
        return np.full(m, -1, dtype=np.int64), 0.0
    one = coo_matrix((np.ones(nv), (j_of, np.arange(nv))), shape=(m, nv))
    rr, cc, vv = [], [], []
    for v_idx in range(nv):                       # variable covers slots s .. s + l - 1
        cover = np.arange(s_of[v_idx], s_of[v_idx] + length[j_of[v_idx]])
        rr.append(cover)
        cc.append(np.full(len(cover), v_idx))
        vv.append(np.full(len(cover), nodes[j_of[v_idx]]))
    cap = coo_matrix((np.concatenate(vv), (np.concatenate(rr), np.concatenate(cc))), shape=(T, nv))
    res = milp(-value[j_of], integrality=np.ones(nv, dtype=np.int64), bounds=Bounds(0, 1),
               constraints=[LinearConstraint(one, 0, 1), LinearConstraint(cap, 0, capacity)])
    if res.x is None:
        raise RuntimeError(f"optimal_schedule: MILP failed: {res.message}")
    chosen = np.flatnonzero(res.x > 0.5)
    start = np.full(m, -1, dtype=np.int64)
    start[j_of[chosen]] = s_of[chosen]
    return start, float(value[j_of[chosen]].sum())


class RelaxedDPGVA:
    """Day-ahead multi-node reservation auction (thesis 7.1.1) in seconds.

    ``clear(length, deadline, value, nodes, rng)``: bids in seconds from the start of the
    period; lengths round up and deadlines round down to the granularity, as in ``DPGVA``.
    """

    def __init__(self, capacity: int, depth: int = 1000, granularity: float = 900.0, horizon: float = 86400.0,
                 streams: str = "independent"):
        if not (np.isfinite(granularity) and granularity > 0 and np.isfinite(horizon) and horizon >= granularity):
            raise ValueError(f"RelaxedDPGVA: need granularity > 0 and horizon >= granularity, got {granularity}, {horizon}")
        self.capacity, self.depth, self.streams = capacity, depth, streams
        self.granularity = float(granularity)
        self.units = int(horizon // granularity)

    def clear(self, length, deadline, value, nodes, rng: np.random.Generator) -> ReservationOutcome:
        from .dpgva import DPGVA

        lu, du = DPGVA(self.granularity, self.units * self.granularity).to_units(length, deadline)
        out = relaxed_dpgva(lu, du, value, nodes, self.capacity, self.units, self.depth, rng, self.streams)
        start = np.where(out.start >= 0, out.start * self.granularity, -1.0)
        return ReservationOutcome(start, out.payments, out.welfare)
