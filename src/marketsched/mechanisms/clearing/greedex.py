"""GREEDEX: the greedy double-sided multi-attribute exchange of Stößer (2009, ch. 3).

Allocation -- Algorithm 1 (section 3.4.2), :func:`greedy_allocation`:

1. *Sorting*: jobs by non-increasing reported value v_j, nodes by non-decreasing reserve v_n.
2. *Allocation*: for each job in rank order and each slot t in [r_j, e_j], tentatively pick
   the first (cheapest) node n with R_n <= t <= E_n, c_j <= C_n(t), m_j <= M_n(t) and
   v_n <= v_j (C_n(t), M_n(t) = capacity left in slot t). If every slot found a node,
   commit and subtract c_j, m_j from each chosen (n, t); otherwise drop the job.
   A job may migrate between nodes from slot to slot (zero cost), as in the thesis.

Pricing -- section 3.4.3:

* :func:`critical_values` / :func:`critical_value_pricing`: proportional critical-value
  pricing. A winner pays p_j = phi_j c_j d_j, phi_j the smallest per-unit value it could
  have reported and still be allocated (exact, see :func:`critical_values`). The surplus
  S = sum_j p_j - sum_{j,n,t} x_jnt c_j v_n is split among nodes in proportion to the CPU
  slots they supply: p_n = sum_{j,t} x_jnt c_j v_n + S * cpu_slots_n / cpu_slots_total.
* :func:`k_pricing`: p_j = sum x_jnt c_j (v_j - k (v_j - v_n)),
  p_n = sum x_jnt c_j (v_n + (1 - k)(v_j - v_n)).

Both schemes are budget-balanced by construction (sum p_j == sum p_n).

Decisions the thesis leaves open:

* Ties in the job ranking go to the lower job index, ties among nodes to the lower node
  index (stable sorts).
* The critical value is the *infimum* of the winning reports, so it does not depend on how
  a tie exactly at the threshold is broken (the worked example's phi = 12 is a tie with j5).
* Exact arithmetic on reported values: no tolerance. Capacities are float64 holding
  integers, so subtraction is exact.
* Migration between slots is allowed (the thesis's model); no no-migration variant.

The capacity state is two ``(T, N)`` float arrays (CPU and memory left per slot and node,
nodes in ranking order, -inf outside a node's window), and each job is placed with one
vectorised test over its slots and the nodes it can afford.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .orderbook import OrderBook

__all__ = ["Allocation", "Payments", "greedy_allocation", "job_ranking", "critical_values",
           "critical_value_pricing", "k_pricing", "user_utilities", "node_utilities"]


@dataclass(frozen=True, eq=False)
class Allocation:
    """An allocation schedule: ``assign[j, t]`` is the node running job j in slot t, or -1."""

    book: OrderBook
    assign: np.ndarray  # (n_jobs, horizon) int64

    @property
    def allocated(self) -> np.ndarray:
        """Boolean per job: allocated in all its slots."""
        return np.asarray((self.assign >= 0).any(axis=1))

    def job_nodes(self, j: int) -> np.ndarray:
        """Node per slot r_j..e_j for an allocated job."""
        return self.assign[j, self.book.job_release[j]: self.book.job_end[j] + 1]

    def welfare(self, job_value=None, node_reserve=None) -> float:
        """W = sum_j c_j sum_{n,t} x_jnt (v_j - v_n) (eq. 3.1), on reported or given values."""
        b = self.book
        jv = b.job_value if job_value is None else np.asarray(job_value, dtype=np.float64)
        nr = b.node_reserve if node_reserve is None else np.asarray(node_reserve, dtype=np.float64)
        jj, tt = np.nonzero(self.assign >= 0)
        nn = self.assign[jj, tt]
        return float(np.sum(b.job_cpu[jj] * (jv[jj] - nr[nn])))

    def node_cpu_slots(self) -> np.ndarray:
        """sum_{j,t} x_jnt c_j per node (CPU units times slots supplied)."""
        jj, tt = np.nonzero(self.assign >= 0)
        return np.bincount(self.assign[jj, tt], weights=self.book.job_cpu[jj], minlength=self.book.n_nodes)

    def node_reserve_cost(self, node_reserve=None) -> np.ndarray:
        """sum_{j,t} x_jnt c_j v_n per node."""
        nr = self.book.node_reserve if node_reserve is None else np.asarray(node_reserve, np.float64)
        return self.node_cpu_slots() * nr

    def check_feasible(self) -> None:
        """Raise ValueError if the schedule breaks a constraint of eqs. 3.2-3.6."""
        b = self.book
        a = self.assign
        T = a.shape[1]
        t = np.arange(T)
        for j in range(b.n_jobs):
            row = a[j]
            inside = (t >= b.job_release[j]) & (t <= b.job_end[j])
            if (row[~inside] >= 0).any():
                raise ValueError(f"job {j} is assigned outside its window [r_j, e_j]")
            used = row[inside] >= 0
            if used.any() and not used.all():
                raise ValueError(f"job {j} is assigned in some but not all of its slots (eq. 3.6)")
            nodes = row[inside][used]
            if nodes.size and (b.node_reserve[nodes] > b.job_value[j]).any():
                raise ValueError(f"job {j} is on a node whose reserve exceeds its value (eq. 3.2)")
        self.check_capacity()

    def check_capacity(self) -> None:
        """Raise ValueError if a node is used outside its window or above its capacity (eqs. 3.2-3.5)."""
        b = self.book
        a = self.assign
        T = a.shape[1]
        jj, tt = np.nonzero(a >= 0)
        nn = a[jj, tt]
        if ((tt < b.node_start[nn]) | (tt > b.node_end[nn])).any():
            raise ValueError("a job is assigned to a node outside its availability window (eq. 3.2)")
        key = nn * T + tt
        size = b.n_nodes * T
        cpu = np.bincount(key, weights=b.job_cpu[jj], minlength=size).reshape(b.n_nodes, T)
        mem = np.bincount(key, weights=b.job_mem[jj], minlength=size).reshape(b.n_nodes, T)
        if (cpu > b.node_cpu[:, None]).any():
            raise ValueError("a node's CPU capacity is exceeded in some slot (eq. 3.4)")
        if (mem > b.node_mem[:, None]).any():
            raise ValueError("a node's memory capacity is exceeded in some slot (eq. 3.5)")


@dataclass(frozen=True, eq=False)
class Payments:
    """What each job pays (``job``) and each node receives (``node``)."""

    job: np.ndarray
    node: np.ndarray

    @property
    def imbalance(self) -> float:
        """sum p_j - sum p_n (0 means exact budget balance)."""
        return float(self.job.sum() - self.node.sum())


# ---------------------------------------------------------------------- capacity state
class _Aranges(dict):
    """Cache of np.arange(d) (d = job durations are small and repeat)."""

    def __missing__(self, d):
        self[d] = a = np.arange(d)
        return a


_ARANGE = _Aranges()


class SlotState:
    """Capacity left per (slot, node), nodes in ranking order (reserve ascending, index)."""

    def __init__(self, book: OrderBook, node_reserve=None):
        reserve = book.node_reserve if node_reserve is None else node_reserve
        self.order = np.lexsort((np.arange(book.n_nodes), reserve))  # sorted position -> node
        self.reserve = reserve[self.order]
        T = book.horizon
        t = np.arange(T)[:, None]
        start, end = book.node_start[self.order], book.node_end[self.order]
        avail = (t >= start[None, :]) & (t <= end[None, :])
        self.cpu = np.where(avail, book.node_cpu[self.order][None, :], -np.inf)
        self.mem = np.where(avail, book.node_mem[self.order][None, :], -np.inf)

    def copy(self) -> SlotState:
        """An independent copy of the capacity arrays (ranking shared)."""
        twin = object.__new__(SlotState)
        twin.order, twin.reserve = self.order, self.reserve
        twin.cpu, twin.mem = self.cpu.copy(), self.mem.copy()
        return twin

    def affordable(self, value) -> np.ndarray:
        """Number of nodes with v_n <= v (a prefix of the ranking) for each value."""
        return np.searchsorted(self.reserve, value, side="right")

    def place(self, r: int, e: int, c: float, m: float, K: int):
        """Algorithm 1 lines 4-7 for one job that can afford the first ``K`` nodes
        (v_n <= v_j): sorted node per slot, or None if some slot has no room."""
        if K == 0:
            return None
        fit = (self.cpu[r:e + 1, :K] >= c) & (self.mem[r:e + 1, :K] >= m)
        first = fit.argmax(axis=1)
        if not fit[_ARANGE[e - r + 1], first].all():
            return None
        return first

    def commit(self, r: int, c: float, m: float, first: np.ndarray) -> None:
        """Algorithm 1 lines 10-13: subtract the job's demand from its chosen (n, t)."""
        rows = _ARANGE[first.shape[0]] + r
        self.cpu[rows, first] -= c
        self.mem[rows, first] -= m

    def threshold(self, r: int, e: int, c: float, m: float) -> float:
        """Smallest report that lets a job fit now: max over its slots of the cheapest
        fitting node's reserve (inf if some slot has no fitting node at any price)."""
        if self.reserve.shape[0] == 0:
            return np.inf
        fit = (self.cpu[r:e + 1] >= c) & (self.mem[r:e + 1] >= m)
        first = fit.argmax(axis=1)
        if not fit[_ARANGE[e - r + 1], first].all():
            return np.inf
        return float(self.reserve[first].max())


def job_ranking(job_value: np.ndarray) -> np.ndarray:
    """Jobs in non-increasing value, ties to the lower index (Algorithm 1, step 1)."""
    return np.lexsort((np.arange(job_value.shape[0]), -job_value))


def greedy_allocation(book: OrderBook, order=None) -> Allocation:
    """Algorithm 1 of the thesis (section 3.4.2): deterministic greedy allocation.

    ``order`` is the sequence in which jobs are considered; by default the ranking of
    step 1 (value descending, ties to the lower index). The randomized heuristic of
    chapter 4 passes its random order here.
    """
    state = SlotState(book)
    assign = np.full((book.n_jobs, book.horizon), -1, dtype=np.int64)
    order = job_ranking(book.job_value) if order is None else np.asarray(order, dtype=np.int64)
    r_, e_, c_, m_ = (book.job_release.tolist(), book.job_end.tolist(), book.job_cpu.tolist(),
                      book.job_mem.tolist())
    K_ = state.affordable(book.job_value).tolist()
    for j in order.tolist():
        r, e, c, m = r_[j], e_[j], c_[j], m_[j]
        first = state.place(r, e, c, m, K_[j])
        if first is not None:
            state.commit(r, c, m, first)
            assign[j, r:e + 1] = state.order[first]
    return Allocation(book, assign)


# ---------------------------------------------------------------------- critical values
def critical_values(book: OrderBook, allocation: Allocation | None = None, jobs=None,
                    losers: bool = False, max_batch: int = 256, compiled: bool = True) -> np.ndarray:
    """Exact critical value phi_j of every allocated job (section 3.4.3).

    phi_j = inf { b : job j is allocated when it reports b, everyone else unchanged }.
    Losers get NaN unless ``losers=True``, when they get the report they would have needed
    (inf if no report wins), as in the proof of theorem 5. ``jobs`` restricts the
    computation to some job indices (others stay NaN).

    Method (the thesis's "remove j, rerun the greedy over the ranking and after each
    allocated job check whether j could still be accommodated", made exact):

    * The greedy run of the *other* jobs does not depend on j's report; only the position at
      which j is inserted does. For a report b strictly between two consecutive distinct
      values u > b > lo of the jobs, j comes after every other job with value >= u.
    * Given the capacity state S at that point, j fits iff b >= q(S), where q(S) is the
      largest over j's slots of the reserve of the cheapest node with room for j (lowering b
      also removes nodes with v_n > b). So the reports in (lo, u) that win are
      [max(q, lo), u) when q < u.
    * phi_j is the minimum of max(q, lo) over these intervals (lo = 0 below the smallest
      value). A winner's scan starts at its own rank (phi_j <= v_j), a loser's at the top.
      q only grows along the run and lo only falls, so a scan stops once q >= the best value.

    The reruns are vectorised: every scanned job gets a copy of the capacity state (a
    "run", forked from the full run's state just before it), and all live runs process the
    next job of the ranking together as one (runs, slots, nodes) array operation. At most
    ``max_batch`` runs live at once (more are scanned in further passes).

    The compiled kernel (``_greedex_kernel.c``, used when it is built and ``compiled`` is true,
    as the engine's kernels are: ``MARKETSCHED_ENGINE``) runs the same scans one job at a time,
    its first-fit search skipping blocks of nodes that have too little CPU or memory left; its
    values equal this Python path's bit for bit (a property test compares them). The Python
    path costs O(scanned jobs x ranking x slots x nodes) array work: about 34 CPU s at 2,500
    orders per side of table 3.6; the kernel about 1 (``benchmarks/bench_exchange_clearing.py``).
    """
    if allocation is None:
        allocation = greedy_allocation(book)
    won = allocation.allocated
    wanted = np.zeros(book.n_jobs, bool)
    if jobs is None:
        wanted[:] = True
    else:
        wanted[np.asarray(jobs, dtype=np.int64)] = True
    phi = np.full(book.n_jobs, np.nan)
    todo = wanted & (won | losers)
    if not todo.any():
        return phi
    ranking = job_ranking(book.job_value)
    rank_pos = np.empty(book.n_jobs, dtype=np.int64)
    rank_pos[ranking] = np.arange(book.n_jobs)
    # losers fork at the top (rank 0), winners at their own rank; passes of <= max_batch runs
    fork_at = np.where(won, rank_pos, 0)
    scan = np.flatnonzero(todo)
    scan = scan[np.lexsort((rank_pos[scan], fork_at[scan]))]
    if compiled and _scan_compiled(book, allocation, ranking, scan, fork_at[scan], won[scan], phi):
        return phi
    for start in range(0, scan.size, max_batch):
        chunk = scan[start:start + max_batch]
        phi[chunk] = _scan_batch(book, allocation, ranking, chunk, fork_at[chunk], won[chunk])
    return phi


def _scan_compiled(book, allocation, ranking, jobs, fork_at, is_winner, phi) -> bool:
    """The scans of ``jobs`` in C (``_greedex_kernel``), written into ``phi``; False when the
    kernel is not built (or ``MARKETSCHED_ENGINE=python``), and the Python path runs."""
    from marketsched.engine import compiled

    kernel = compiled.kernel("marketsched.mechanisms.clearing._greedex_kernel")
    if kernel is None:
        return False
    state = SlotState(book)
    pos_of_node = np.empty(book.n_nodes, dtype=np.int64)
    pos_of_node[state.order] = np.arange(book.n_nodes)
    assign = np.full(allocation.assign.shape, -1, dtype=np.int64)
    placed = allocation.assign >= 0
    assign[placed] = pos_of_node[allocation.assign[placed]]
    T, N = state.cpu.shape
    best = np.empty(jobs.size)
    i64, f64 = (lambda a: np.ascontiguousarray(a, dtype=np.int64)), (lambda a: np.ascontiguousarray(a, np.float64))
    kernel.critical_values(T, N, f64(state.reserve), f64(state.cpu), f64(state.mem), i64(book.job_release),
                           i64(book.job_end), i64(state.affordable(book.job_value)), f64(book.job_cpu),
                           f64(book.job_mem), f64(book.job_value), i64(ranking), i64(assign), i64(jobs),
                           i64(fork_at), f64(np.where(is_winner, book.job_value[jobs], np.inf)), best)
    phi[jobs] = best
    return True


def _scan_batch(book, allocation, ranking, jobs, fork_at, is_winner) -> np.ndarray:
    """Run the scans of ``jobs`` (sorted by fork rank) in lockstep; see critical_values."""
    full = SlotState(book)  # the full run's state, advanced by replaying its placements
    pos_of_node = np.empty(book.n_nodes, dtype=np.int64)
    pos_of_node[full.order] = np.arange(book.n_nodes)
    T, N = full.cpu.shape
    A = jobs.size
    cpu = np.empty((A, T, N))
    mem = np.empty((A, T, N))
    t = np.arange(T)[None, :]
    win = (t >= book.job_release[jobs][:, None]) & (t <= book.job_end[jobs][:, None])  # (A, T)
    need_c = book.job_cpu[jobs][:, None, None]
    need_m = book.job_mem[jobs][:, None, None]
    top = np.where(is_winner, book.job_value[jobs], np.inf)  # scan reports below this
    best = top.copy()
    live = np.zeros(A, bool)
    done = np.zeros(A, bool)
    K_all = full.affordable(book.job_value)
    value = book.job_value[ranking]
    R = ranking.size
    nxt = 0  # next run to fork

    def evaluate(u: float, lo: float) -> None:
        """Candidate max(q, lo) for reports in (lo, u) of every live run scanning below u."""
        idx = np.flatnonzero(live & (top >= u))
        if idx.size == 0 or N == 0:
            if N == 0:
                done[idx] = True
                live[idx] = False
            return
        fit = (cpu[idx] >= need_c[idx]) & (mem[idx] >= need_m[idx])
        has = fit.any(axis=2)
        cheapest = np.where(has, full.reserve[fit.argmax(axis=2)], np.inf)
        q = np.where(win[idx], cheapest, -np.inf).max(axis=1)
        ok = q < u
        best[idx] = np.where(ok, np.minimum(best[idx], np.maximum(q, lo)), best[idx])
        stop = q >= best[idx]
        done[idx[stop]] = True
        live[idx[stop]] = False

    for s in range(R + 1):
        while nxt < A and fork_at[nxt] == s:  # fork: the run starts from the full state before rank s
            cpu[nxt] = full.cpu
            mem[nxt] = full.mem
            live[nxt] = True
            nxt += 1
        if s == 0:
            evaluate(np.inf, float(value[0]) if R else 0.0)  # reports above every job (losers)
        if s == R:
            break
        if nxt >= A and not live.any():
            break
        k = int(ranking[s])
        r, e = int(book.job_release[k]), int(book.job_end[k])
        c, m, K = book.job_cpu[k], book.job_mem[k], int(K_all[k])
        idx = np.flatnonzero(live & (jobs != k))  # a run never processes its own job
        if idx.size and K:
            fit = (cpu[idx, r:e + 1, :K] >= c) & (mem[idx, r:e + 1, :K] >= m)  # (a, d, K)
            ok = fit.any(axis=2).all(axis=1)
            if ok.any():
                rows = idx[ok][:, None]
                first = fit[ok].argmax(axis=2)
                slots = _ARANGE[e - r + 1][None, :] + r
                cpu[rows, slots, first] -= c
                mem[rows, slots, first] -= m
        if allocation.assign[k, r] >= 0:
            full.commit(r, c, m, pos_of_node[allocation.job_nodes(k)])
        if s + 1 == R or value[s + 1] < value[s]:  # group boundary: all jobs >= value[s] done
            evaluate(float(value[s]), float(value[s + 1]) if s + 1 < R else 0.0)
    return best


# ---------------------------------------------------------------------- pricing
def critical_value_pricing(book: OrderBook, allocation: Allocation | None = None,
                           phi: np.ndarray | None = None) -> Payments:
    """Proportional critical-value pricing (section 3.4.3): p_j = phi_j c_j d_j for winners,
    surplus split among nodes by CPU slots supplied. Budget-balanced."""
    if allocation is None:
        allocation = greedy_allocation(book)
    if phi is None:
        phi = critical_values(book, allocation)
    won = allocation.allocated
    phi = np.asarray(phi, dtype=np.float64)
    if phi.shape != (book.n_jobs,):
        raise ValueError(f"phi must have one entry per job, shape ({book.n_jobs},), got {phi.shape}")
    missing = won & ~np.isfinite(phi)
    if missing.any():
        raise ValueError(f"phi is missing (NaN/inf) for allocated job {int(np.argmax(missing))}")
    pay_j = np.where(won, np.where(won, phi, 0.0) * book.job_cpu * book.job_duration, 0.0)
    reserve_cost = allocation.node_reserve_cost()
    cpu_slots = allocation.node_cpu_slots()
    surplus = pay_j.sum() - reserve_cost.sum()
    total = cpu_slots.sum()
    share = cpu_slots / total if total > 0 else np.zeros_like(cpu_slots)
    return Payments(job=pay_j, node=reserve_cost + surplus * share)


def k_pricing(book: OrderBook, allocation: Allocation, k: float) -> Payments:
    """k-pricing (section 3.4.3, after Schnizler et al. 2008): each local surplus
    c_j (v_j - v_n) per slot is split k to the user, 1 - k to the node. Budget-balanced."""
    if not (0.0 <= k <= 1.0):
        raise ValueError(f"k must be in [0, 1], got {k}")
    jj, tt = np.nonzero(allocation.assign >= 0)
    nn = allocation.assign[jj, tt]
    c = book.job_cpu[jj]
    vj, vn = book.job_value[jj], book.node_reserve[nn]
    user = c * (vj - k * (vj - vn))
    node = c * (vn + (1.0 - k) * (vj - vn))
    return Payments(job=np.bincount(jj, weights=user, minlength=book.n_jobs),
                    node=np.bincount(nn, weights=node, minlength=book.n_nodes))


# ---------------------------------------------------------------------- utilities
def user_utilities(allocation: Allocation, payments: Payments, true_value=None) -> np.ndarray:
    """u_j = v_j c_j d_j - p_j if allocated, else -p_j (= 0), on true values."""
    b = allocation.book
    v = b.job_value if true_value is None else np.asarray(true_value, np.float64)
    return np.where(allocation.allocated, v * b.job_cpu * b.job_duration, 0.0) - payments.job


def node_utilities(allocation: Allocation, payments: Payments, true_reserve=None) -> np.ndarray:
    """u_n = p_n - v_n * (CPU slots supplied), on true reserve prices."""
    return payments.node - allocation.node_reserve_cost(true_reserve)
