"""Randomized pay-as-bid heuristic and distributed randomized mechanism (Stößer 2009,
chapter 4: equation 4.1, algorithm 2 in appendix B.1, section 4.4).

Randomized allocation (eq. 4.1, algorithm 2), :func:`randomized_allocation`:

1. Nodes stay ranked by non-decreasing reserve price.
2. At each step, among the remaining jobs that can still be allocated (indicator 1_j),
   pick job j with probability v_j^alpha / sum_i 1_i v_i^alpha (alpha >= 1).
3. Allocate it greedily (cheapest feasible node per slot, as algorithm 1), remove it.
4. Stop when no remaining job is feasible (the sum of weights is 0).

Implementation: feasibility only shrinks as capacity is used, so drawing among *all*
remaining jobs with probability proportional to v^alpha and discarding a drawn job that
does not fit gives exactly the same distribution of allocations (conditioned on a feasible
draw, the choice is proportional to v^alpha over the feasible jobs, and a discarded job
could never fit later). Sequential weighted draws without replacement are a Plackett-Luce
order, sampled in one shot by sorting alpha log v + Gumbel noise (Gumbel-top-k trick). The
randomized heuristic is therefore algorithm 1 run in that random order. Jobs reporting 0
have weight 0 and are never drawn (algorithm 2 stops when the weight sum is 0).
:func:`allocation_tree` evaluates eq. 4.1 literally, for the worked example (table 4.2).

Pricing, :func:`pay_as_bid`: a winner pays its report, p_j = v~_j c_j d_j (section 4.3;
d_j added because the simulations use the chapter-3 books with time). The thesis leaves
payments to providers open (providers are obedient); we pay
each node what the jobs it hosts pay for those slots, i.e. k-pricing with k = 0, which is
budget-balanced and individually rational for nodes (v~_j >= v_n on every used node).

Distributed randomized mechanism (section 4.4, fig. 4.4), :func:`distributed_randomized`:
every participant (|J| + |N| runs by default) runs the randomized heuristic, the auctioneer
runs the deterministic greedy, and the allocation with the highest reported welfare is
enforced with its own prices. Decisions: ties go to the deterministic run (then to the
earliest randomized run); the deterministic outcome is priced by proportional
critical-value pricing (the tables 4.4/4.5 notes say a truthful user can gain when it is
enforced, which pay-as-bid would not allow); run r draws from ``rng.spawn`` child r; the
same alpha for every participant, as in the simulations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .greedex import Allocation, Payments, SlotState, critical_value_pricing, greedy_allocation, k_pricing
from .orderbook import OrderBook

__all__ = ["random_order", "randomized_allocation", "allocation_tree", "pay_as_bid",
           "DistributedOutcome", "distributed_randomized", "greedy_batch", "batch_welfare", "gumbel_orders",
           "two_user_best_response", "two_user_equilibrium"]


def _check_alpha(alpha: float) -> None:
    if not (np.isfinite(alpha) and alpha >= 1):
        raise ValueError(f"alpha must be a finite number >= 1 (eq. 4.1), got {alpha}")


def gumbel_orders(job_value: np.ndarray, alpha: float, gumbel: np.ndarray) -> np.ndarray:
    """Plackett-Luce orders with weights v^alpha from Gumbel noise of shape (..., n_jobs).

    Returns job indices, best key first; jobs with weight 0 are replaced by -1 (skipped).
    """
    _check_alpha(alpha)
    with np.errstate(divide="ignore"):
        key = alpha * np.log(job_value) + gumbel
    order = np.argsort(-key, axis=-1, kind="stable")
    zero = np.take_along_axis(np.broadcast_to(job_value, key.shape), order, axis=-1) <= 0
    return np.where(zero, -1, order)


def random_order(job_value: np.ndarray, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """One draw of the order in which algorithm 2 considers jobs (zero-value jobs dropped)."""
    order = gumbel_orders(np.asarray(job_value, np.float64), alpha, rng.gumbel(size=len(job_value)))
    return order[order >= 0]


def randomized_allocation(book: OrderBook, alpha: float, rng: np.random.Generator) -> Allocation:
    """Randomized allocation heuristic (eq. 4.1, algorithm 2); see the module docstring."""
    return greedy_allocation(book, order=random_order(book.job_value, alpha, rng))


def pay_as_bid(book: OrderBook, allocation: Allocation) -> Payments:
    """p_j = v~_j c_j d_j for winners; nodes receive what their hosted jobs pay (k = 0)."""
    return k_pricing(book, allocation, 0.0)


# ---------------------------------------------------------------------- exact tree (eq. 4.1)
def allocation_tree(book: OrderBook, alpha: float, max_jobs: int = 9):
    """Evaluate the allocation tree of eq. 4.1 exactly (small books only).

    Returns ``(pi_step, expected_welfare)``: ``pi_step[j, k]`` is the probability that job j
    is allocated in step k+1 (table 4.2), ``pi_step.sum(1)`` is pi_j.
    """
    _check_alpha(alpha)
    J = book.n_jobs
    if J > max_jobs:
        raise ValueError(f"allocation_tree enumerates every sequence; {J} jobs exceed max_jobs={max_jobs}")
    weight = book.job_value ** alpha
    pi = np.zeros((J, max(J, 1)))
    state = SlotState(book)
    K = state.affordable(book.job_value)

    def feasible(st, j):
        return st.place(int(book.job_release[j]), int(book.job_end[j]), book.job_cpu[j], book.job_mem[j], int(K[j]))

    def walk(st, left, prob, step, welfare):
        fits = {j: f for j in left if (f := feasible(st, j)) is not None and weight[j] > 0}
        if not fits:
            return prob * welfare
        total = sum(weight[j] for j in fits)
        value = 0.0
        for j, first in fits.items():
            p = prob * weight[j] / total
            pi[j, step] += p
            child = st.copy()
            child.commit(int(book.job_release[j]), book.job_cpu[j], book.job_mem[j], first)
            gain = book.job_cpu[j] * float(np.sum(book.job_value[j] - st.reserve[first]))
            value += walk(child, left - {j}, p, step + 1, welfare + gain)
        return value

    expected = walk(state, set(range(J)), 1.0, 0, 0.0)
    return pi, expected


# ---------------------------------------------------------------------- batched greedy
def greedy_batch(book: OrderBook, orders: np.ndarray, job_value: np.ndarray | None = None) -> np.ndarray:
    """Run algorithm 1 for R job orders at once; returns ``assign`` of shape (R, J, T).

    ``orders[r]`` lists job indices in the order run r considers them (-1 = skip).
    ``job_value[r]`` (optional, shape (R, J)) are the reports of run r (they decide which
    nodes a job can afford); default: the book's. Same result as :func:`greedy_allocation`
    run by run, vectorised over runs: the state is (R, T, N) arrays.
    """
    orders = np.asarray(orders, dtype=np.int64)
    if orders.ndim != 2:
        raise ValueError(f"orders must be 2-D (runs, steps), got shape {orders.shape}")
    R, S = orders.shape
    J, T = book.n_jobs, book.horizon
    vals = np.broadcast_to(book.job_value, (R, J)) if job_value is None else np.asarray(job_value, np.float64)
    if vals.shape != (R, J):
        raise ValueError(f"job_value must have shape {(R, J)}, got {vals.shape}")
    base = SlotState(book)
    N = base.reserve.shape[0]
    cpu = np.broadcast_to(base.cpu, (R, T, N)).copy()
    mem = np.broadcast_to(base.mem, (R, T, N)).copy()
    assign = np.full((R, J, T), -1, dtype=np.int32)
    if N == 0 or J == 0:
        return assign
    t = np.arange(T)[None, :]
    runs = np.arange(R)
    for s in range(S):
        j = orders[:, s]
        active = j >= 0
        jj = np.where(active, j, 0)
        r, e = book.job_release[jj], book.job_end[jj]
        c, m = book.job_cpu[jj], book.job_mem[jj]
        afford = base.reserve[None, :] <= vals[runs, jj][:, None]  # (R, N)
        fit = (cpu >= c[:, None, None]) & (mem >= m[:, None, None]) & afford[:, None, :]
        has = fit.any(axis=2)  # (R, T)
        first = fit.argmax(axis=2)
        win = (t >= r[:, None]) & (t <= e[:, None])  # (R, T)
        ok = active & (has | ~win).all(axis=1)
        rr, tt = np.nonzero(win & ok[:, None])
        nn = first[rr, tt]
        cpu[rr, tt, nn] -= c[rr]
        mem[rr, tt, nn] -= m[rr]
        assign[rr, jj[rr], tt] = base.order[nn]
    return assign


def batch_welfare(book: OrderBook, assign: np.ndarray, job_value: np.ndarray | None = None) -> np.ndarray:
    """Welfare (eq. 3.1) of each run of :func:`greedy_batch` on values (R, J) or the book's."""
    R = assign.shape[0]
    vals = np.broadcast_to(book.job_value, (R, book.n_jobs)) if job_value is None else job_value
    rr, jj, tt = np.nonzero(assign >= 0)
    nn = assign[rr, jj, tt]
    gain = book.job_cpu[jj] * (vals[rr, jj] - book.node_reserve[nn])
    return np.bincount(rr, weights=gain, minlength=R)


# ---------------------------------------------------------------------- distributed
@dataclass(frozen=True, eq=False)
class DistributedOutcome:
    """The enforced outcome of the distributed randomized mechanism."""

    allocation: Allocation
    payments: Payments
    randomized: bool  # True if a randomized run was enforced
    welfare: float  # reported welfare of the enforced allocation
    deterministic_welfare: float
    run_welfare: np.ndarray  # reported welfare of every randomized run


def distributed_randomized(book: OrderBook, alpha: float, rng: np.random.Generator,
                           n_runs: int | None = None) -> DistributedOutcome:
    """Distributed randomized mechanism (section 4.4): best of ``n_runs`` randomized runs
    (default |J| + |N|, one per participant) and the deterministic greedy."""
    _check_alpha(alpha)
    n_runs = book.n_jobs + book.n_nodes if n_runs is None else int(n_runs)
    if n_runs < 0:
        raise ValueError(f"n_runs must be >= 0, got {n_runs}")
    det = greedy_allocation(book)
    det_w = det.welfare()
    gumbel = np.stack([child.gumbel(size=book.n_jobs) for child in rng.spawn(n_runs)]) if n_runs else \
        np.zeros((0, book.n_jobs))
    orders = gumbel_orders(book.job_value, alpha, gumbel)
    assign = greedy_batch(book, orders)
    run_w = batch_welfare(book, assign)
    best = int(np.argmax(run_w)) if n_runs else -1
    if n_runs and run_w[best] > det_w:
        alloc = Allocation(book, assign[best].astype(np.int64))
        return DistributedOutcome(alloc, pay_as_bid(book, alloc), True, float(run_w[best]), det_w, run_w)
    return DistributedOutcome(det, critical_value_pricing(book, det), False, det_w, det_w, run_w)


# ---------------------------------------------------------------------- two users, one node
def two_user_best_response(other_bid: float, value: float, alpha: int) -> float:
    """Best response b_j(v~_i | v_j) of one of two users competing for one node with reserve
    0 (section 4.3.3): lemma 1 (alpha = 1) and lemma 2 (alpha = 2, appendix B.2 form, the
    main-text formula is garbled)."""
    o, v = float(other_bid), float(value)
    if o <= 0 or v <= 0:
        raise ValueError(f"bids and values must be > 0, got other_bid={o}, value={v}")
    if alpha == 1:
        return -o + np.sqrt(o * o + o * v)
    if alpha == 2:
        root = np.sqrt(o ** 4 * v * v + o ** 6)
        return float(np.cbrt(root + o * o * v) - np.cbrt(root - o * o * v))
    raise ValueError(f"closed-form best responses exist for alpha 1 and 2 only, got {alpha}")


def two_user_equilibrium(v1: float, v2: float, alpha: int, tol: float = 1e-12, max_iter: int = 10_000):
    """Nash equilibrium in expectation (definition 2) of the two-user example, found by
    iterating best responses; returns (bids, allocation probabilities, expected utilities)."""
    b = np.array([v1, v2], dtype=np.float64) / 2
    for _ in range(max_iter):
        nb = np.array([two_user_best_response(b[1], v1, alpha), two_user_best_response(b[0], v2, alpha)])
        if np.max(np.abs(nb - b)) < tol:
            b = nb
            break
        b = nb
    else:
        raise RuntimeError("best-response iteration did not converge")
    w = b ** alpha
    pi = w / w.sum()
    return b, pi, pi * (np.array([v1, v2]) - b)
