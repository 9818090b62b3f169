"""Exact welfare maximisation for the grid exchange (Stößer 2009, section 3.4.2,
equations 3.1-3.6; compact form in appendix A), solved as a MIP by HiGHS through
:func:`scipy.optimize.milp`.

Model:

* binary x_jnt for every (j, n, t) allowed by eq. 3.2: r_j <= t <= e_j, R_n <= t <= E_n,
  v_n <= v_j (other triples are fixed at 0 and not created);
* objective (3.1): max sum_j c_j sum_{n,t} x_jnt (v_j - v_n);
* (3.4) sum_j x_jnt c_j <= C_n and (3.5) sum_j x_jnt m_j <= M_n for every node and slot.

Constraints 3.3 (one node per job and slot) and 3.6 (atomicity) are written with one extra
binary y_j per job ("j runs"): sum_n x_jnt = y_j for every t in [r_j, e_j]. This is
equivalent on integer points: any x meeting 3.3 and 3.6 has the same sum_n x_jnt in every
slot of j's window (3.6 says each equals the window average), and that common value is 0
or 1 by 3.3; conversely the equalities imply both. It has fewer rows and a tighter LP
relaxation than the literal 3.6.

"Anytime-CPLEX" (section 3.5.1) stopped at a 0.1 % gap or after 30 minutes and returned
the best solution found; :func:`solve_exact` does the same with ``mip_rel_gap`` and
``time_limit`` (decision: the thesis used CPLEX 9.1, which is not available here;
HiGHS is; absolute runtimes are not comparable).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix, vstack

from .greedex import Allocation
from .orderbook import OrderBook

__all__ = ["ExactResult", "solve_exact"]


@dataclass(frozen=True)
class ExactResult:
    """Outcome of :func:`solve_exact`.

    ``status`` is "optimal" (within the gap), "time_limit" (stopped with a feasible
    solution), or "no_solution" (stopped before any feasible solution: allocation empty).
    ``bound`` is the solver's dual bound on the optimum.
    """

    allocation: Allocation
    welfare: float
    status: str
    bound: float
    gap: float
    runtime: float  # wall-clock seconds (model building + solve)
    n_variables: int
    cpu_time: float = float("nan")  # CPU seconds of this process over the same span


def _variables(book: OrderBook):
    """All (j, n, t) allowed by eq. 3.2, as three index arrays (vectorised over pairs)."""
    J, N = book.n_jobs, book.n_nodes
    jj, nn = (a.ravel() for a in np.meshgrid(np.arange(J), np.arange(N), indexing="ij"))
    ok = book.node_reserve[nn] <= book.job_value[jj]
    lo = np.maximum(book.job_release[jj], book.node_start[nn])
    hi = np.minimum(book.job_end[jj], book.node_end[nn])
    ok &= lo <= hi
    jj, nn, lo, hi = jj[ok], nn[ok], lo[ok], hi[ok]
    count = hi - lo + 1
    rep = np.repeat(np.arange(jj.size), count)
    offset = np.arange(rep.size) - np.repeat(np.cumsum(count) - count, count)
    return jj[rep], nn[rep], lo[rep] + offset


def solve_exact(book: OrderBook, *, time_limit: float = 60.0, mip_rel_gap: float = 1e-3,
                presolve: bool = True) -> ExactResult:
    """Maximise welfare (eq. 3.1) subject to eqs. 3.2-3.6 with HiGHS.

    ``mip_rel_gap`` = 0.001 is the thesis's 0.1 % gap; ``time_limit`` in seconds replaces
    its 30 minutes. Use ``mip_rel_gap=0`` for a proven optimum on small books.
    """
    if time_limit <= 0:
        raise ValueError(f"time_limit must be > 0 seconds, got {time_limit}")
    if not (0 <= mip_rel_gap < 1):
        raise ValueError(f"mip_rel_gap must be in [0, 1), got {mip_rel_gap}")
    t0, c0 = time.perf_counter(), time.process_time()
    J, N, T = book.n_jobs, book.n_nodes, book.horizon
    xj, xn, xt = _variables(book)
    nx = xj.size
    assign = np.full((J, T), -1, dtype=np.int64)
    if nx == 0:
        return ExactResult(Allocation(book, assign), 0.0, "optimal", 0.0, 0.0, time.perf_counter() - t0, 0,
                           time.process_time() - c0)
    nvar = nx + J  # x then y
    c = np.zeros(nvar)
    c[:nx] = -(book.job_cpu[xj] * (book.job_value[xj] - book.node_reserve[xn]))  # milp minimises
    cols = np.arange(nx)
    # (3.4), (3.5): per (node, slot)
    cap_row = xn * T + xt
    A_cpu = coo_matrix((book.job_cpu[xj], (cap_row, cols)), shape=(N * T, nvar)).tocsr()
    A_mem = coo_matrix((book.job_mem[xj], (cap_row, cols)), shape=(N * T, nvar)).tocsr()
    avail_t = np.arange(T)[None, :]
    open_slot = (avail_t >= book.node_start[:, None]) & (avail_t <= book.node_end[:, None])
    used_rows = np.zeros(N * T, bool)
    used_rows[np.unique(cap_row)] = True
    keep = used_rows & open_slot.ravel()
    A_cpu, A_mem = A_cpu[keep], A_mem[keep]
    ub_cpu = np.repeat(book.node_cpu, T)[keep]
    ub_mem = np.repeat(book.node_mem, T)[keep]
    # (3.3) + (3.6): sum_n x_jnt - y_j = 0 for t in [r_j, e_j]
    d = book.job_duration
    rj = np.repeat(np.arange(J), d)
    rt = np.repeat(book.job_release, d) + (np.arange(d.sum()) - np.repeat(np.cumsum(d) - d, d))
    row_of = np.full((J, T), -1, dtype=np.int64)
    row_of[rj, rt] = np.arange(rj.size)
    A_x = coo_matrix((np.ones(nx), (row_of[xj, xt], cols)), shape=(rj.size, nvar))
    A_y = coo_matrix((-np.ones(rj.size), (np.arange(rj.size), nx + rj)), shape=(rj.size, nvar))
    A_atom = (A_x + A_y).tocsr()
    A = vstack([A_cpu, A_mem, A_atom]).tocsr()
    lb = np.concatenate([np.full(A_cpu.shape[0], -np.inf), np.full(A_mem.shape[0], -np.inf), np.zeros(rj.size)])
    ub = np.concatenate([ub_cpu, ub_mem, np.zeros(rj.size)])
    res = milp(c, constraints=LinearConstraint(A, lb, ub), integrality=np.ones(nvar),
               bounds=Bounds(0, 1),
               options={"time_limit": float(time_limit), "mip_rel_gap": float(mip_rel_gap),
                        "presolve": presolve, "disp": False})
    runtime, cpu = time.perf_counter() - t0, time.process_time() - c0
    if res.x is None:
        return ExactResult(Allocation(book, assign), 0.0, "no_solution", float("nan"), float("nan"), runtime, nvar, cpu)
    on = res.x[:nx] > 0.5
    assign[xj[on], xt[on]] = xn[on]
    alloc = Allocation(book, assign)
    status = "optimal" if res.status == 0 else "time_limit"
    bound = -float(getattr(res, "mip_dual_bound", np.nan))
    gap = float(getattr(res, "mip_gap", np.nan))
    return ExactResult(alloc, alloc.welfare(), status, bound, gap, runtime, nvar, cpu)
