"""The two steps of the distributed randomized mechanism as separate parties run them
(Stößer 2009, section 4.4, fig. 4.4).

:func:`.randomized.distributed_randomized` computes the mechanism in one process. Fig. 4.4
splits it between the auctioneer and the market participants:

1. The auctioneer collects all job requests and node offers.
2. It broadcasts the consolidated order book to every participant ("possibly in some
   anonymized way": the book carries no owners).
3. Each participant runs the randomized heuristic (eq. 4.1, algorithm 2) on the whole book with
   its random numbers and returns the allocation: :func:`local_step`, the participant's part.
4. The auctioneer runs the deterministic greedy (algorithm 1) itself.
5. It checks the returned allocations, and enforces the one with the highest reported welfare
   among them and the deterministic one, with its prices: :func:`combine_and_price`.

Decisions (the thesis leaves them open):

* **Who runs what.** One randomized run per participant, |J| + |N| runs, as in the simulations:
  run r < |J| is job r's, run |J| + n is book node n's. Run r draws its Gumbel noise from seed
  :func:`run_seeds` ``[r]``, the child ``rng.spawn`` gives :func:`distributed_randomized` for
  run r, so the combined result equals the central one with the same random numbers.
* **Checking the returned allocations** (the auctioneer cannot trust them): each must be a
  feasible schedule of eqs. 3.2-3.6 on the broadcast book (:meth:`Allocation.check_feasible`,
  including "no node above the job's value"); :func:`check_run` raises ``ValueError`` naming the
  run and the constraint. The welfare is the auctioneer's own computation (eq. 3.1 on the
  reports), never a participant's claim. A participant can return any feasible allocation, not
  necessarily its run's: the auctioneer cannot tell without running it again.
* **Missing runs** (a participant that did not answer) are left out of the comparison; their
  welfare is recorded as NaN.
* Ties, pricing and alpha as :func:`distributed_randomized`: ties go to the deterministic run,
  then to the earliest randomized run; the deterministic outcome is priced by critical values,
  a randomized one by pay-as-bid; one alpha for every participant.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .greedex import Allocation, critical_value_pricing, greedy_allocation
from .orderbook import OrderBook
from .randomized import DistributedOutcome, batch_welfare, gumbel_orders, pay_as_bid

__all__ = ["run_seeds", "participant_runs", "local_step", "check_run", "combine_and_price"]


def run_seeds(rng: np.random.Generator, n_runs: int) -> list[np.random.SeedSequence]:
    """The seed of each randomized run: the children ``rng.spawn(n_runs)`` is built from (so run
    r's numbers are those :func:`distributed_randomized` gives run r with the same ``rng``)."""
    if n_runs < 0:
        raise ValueError(f"n_runs must be >= 0, got {n_runs}")
    return rng.bit_generator.seed_seq.spawn(n_runs)  # type: ignore[attr-defined]


def participant_runs(book: OrderBook) -> tuple[range, range]:
    """The runs of the jobs (``0..|J|-1``) and of the book's nodes (``|J|..|J|+|N|-1``)."""
    return range(book.n_jobs), range(book.n_jobs, book.n_jobs + book.n_nodes)


def local_step(book: OrderBook, alpha: float, seeds: Mapping[int, np.random.SeedSequence]) -> dict[int, np.ndarray]:
    """A participant's part (fig. 4.4, step 3): the randomized heuristic on the broadcast book.

    For each run r in ``seeds``:

    1. draw |J| Gumbel numbers from ``seeds[r]``;
    2. order the jobs by alpha log v_j + noise (the Plackett-Luce order of eq. 4.1, jobs of value
       0 never drawn, :func:`gumbel_orders`);
    3. allocate them greedily in that order (algorithm 1 with the random order, algorithm 2).

    Returns ``{r: assign}`` with ``assign[j, t]`` the book node of job j in slot t, or -1.
    Uses nothing but the book, alpha and the seeds.
    """
    out = {}
    for run, seed in seeds.items():
        noise = np.random.default_rng(seed).gumbel(size=book.n_jobs)
        order = gumbel_orders(book.job_value, alpha, noise)
        out[int(run)] = greedy_allocation(book, order=order[order >= 0]).assign
    return out


def check_run(book: OrderBook, run: int, assign) -> np.ndarray:
    """A returned allocation as an int64 (|J|, T) array, after checking it is a feasible
    schedule on ``book`` (eqs. 3.2-3.6); ``ValueError`` naming the run and the problem."""
    try:
        a = np.asarray(assign)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"run {run}: the allocation is not an array: {exc}") from None
    if a.shape != (book.n_jobs, book.horizon):
        raise ValueError(f"run {run}: the allocation has shape {a.shape}, the book needs "
                         f"{(book.n_jobs, book.horizon)} (jobs x slots)")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"run {run}: the allocation holds {a.dtype} values, not node indices")
    a = a.astype(np.int64)
    if a.size and ((a < -1) | (a >= book.n_nodes)).any():
        raise ValueError(f"run {run}: the allocation names a node outside 0..{book.n_nodes - 1} (or -1 for none)")
    why = _infeasible(book, a)
    if why:
        raise ValueError(f"run {run}: {why}")
    return a


def _infeasible(book: OrderBook, a: np.ndarray) -> str | None:
    """:meth:`Allocation.check_feasible`'s first complaint (same checks, same order, same words),
    vectorised over jobs: the auctioneer checks |J| + |N| allocations per clearing."""
    b = book
    t = np.arange(a.shape[1])
    inside = (t >= b.job_release[:, None]) & (t <= b.job_end[:, None])
    used = a >= 0
    outside = np.any(used & ~inside, axis=1)
    n_used = (used & inside).sum(axis=1)
    partial = (n_used > 0) & (n_used < inside.sum(axis=1))
    jj, tt = np.nonzero(used & inside)
    nn = a[jj, tt]
    dear = np.zeros(b.n_jobs, dtype=bool)
    dear[jj[b.node_reserve[nn] > b.job_value[jj]]] = True
    bad = np.flatnonzero(outside | partial | dear)
    if bad.size:
        j = int(bad[0])
        if outside[j]:
            return f"job {j} is assigned outside its window [r_j, e_j]"
        if partial[j]:
            return f"job {j} is assigned in some but not all of its slots (eq. 3.6)"
        return f"job {j} is on a node whose reserve exceeds its value (eq. 3.2)"
    try:
        Allocation(b, a).check_capacity()
    except ValueError as exc:
        return str(exc)
    return None


def combine_and_price(book: OrderBook, runs: Mapping[int, np.ndarray], n_runs: int | None = None
                      ) -> DistributedOutcome:
    """The auctioneer's part (fig. 4.4, steps 4-5) on the allocations ``runs`` returned
    (``{run: assign}``; default ``n_runs``: |J| + |N|).

    1. Check every returned allocation (:func:`check_run`; an infeasible one raises).
    2. Run the deterministic greedy (algorithm 1).
    3. Compute the reported welfare (eq. 3.1) of each returned run.
    4. Enforce the best randomized run priced by pay-as-bid if its welfare is strictly above the
       deterministic one (ties to the earliest run), else the deterministic allocation priced by
       critical values.
    """
    n_runs = book.n_jobs + book.n_nodes if n_runs is None else int(n_runs)
    extra = sorted(set(runs) - set(range(n_runs)))
    if extra:
        raise ValueError(f"runs {extra} are not among the {n_runs} runs of this book")
    present = sorted(runs)
    stacked = np.stack([check_run(book, r, runs[r]) for r in present]) if present else \
        np.zeros((0, book.n_jobs, book.horizon), dtype=np.int64)
    det = greedy_allocation(book)
    det_w = det.welfare()
    run_w = np.full(n_runs, np.nan)
    got = batch_welfare(book, stacked) if present else np.zeros(0)
    run_w[present] = got
    if present:
        i = int(np.argmax(got))  # the first maximum: the earliest run
        if got[i] > det_w:
            alloc = Allocation(book, stacked[i])
            return DistributedOutcome(alloc, pay_as_bid(book, alloc), True, float(got[i]), det_w, run_w)
    return DistributedOutcome(det, critical_value_pricing(book, det), False, det_w, det_w, run_w)

