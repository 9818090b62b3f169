"""DLGM and P-DLGM: decentralized local greedy scheduling with compensating payments.

Sources
-------
* DLGM (Decentralized Local Greedy Mechanism) of Heydenreich, Müller & Uetz (2006), as
  Stößer's thesis states it (Stößer 2009, section 5.3, Steps 1-3, Figure 5.1; Theorems 1-2,
  Appendix C, Lemmas 4-6).
* P-DLGM, its preemptive extension (Stößer 2009, section 5.4, Steps 1-3, the formulas for the
  tentative completion time ``e^_j(n)`` and payment ``p^_j(n)``, Theorems 3-5, Lemma 1).

The problem is ``P|r_j|sum v_j e_j`` (DLGM) or ``P|r_j, pmtn|sum v_j e_j`` (P-DLGM) on ``m``
identical nodes; job ``j`` has type ``(r_j, d_j, v_j)`` (release date, run time, weight =
waiting cost per second) and utility ``u_j = -v_j e_j - p_j``. Nodes are obedient and get no
payment; all payments are transfers between jobs.

Steps at the arrival of job ``j`` (release date ``r_j``, reported weight ``v~_j``, reported
run time ``d~_j``), both mechanisms:

1. **Job report**: ``j`` sends ``(v~_j, d~_j)`` to every node.
2. **Tentative node feedback**: node ``n`` orders its jobs by Smith's ratio ``v~/d~`` (higher
   first, ties to the lower job index, i.e. the earlier arrival) and answers

   * ``e^_j(n) = r_j + d~_j + sum of the (remaining) run times of the jobs ahead of j``;
   * ``p^_j(n) = d~_j * sum of the weights of the jobs j would displace``.

   DLGM (static ratio ``v~/d~``): the running job is always ahead and never displaced.
   P-DLGM (dynamic ratio ``v~_k / d~_k(r_j)`` on the *remaining* run time): the running job
   ``k`` is ahead iff ``v~_k/d~_k(r_j) >= v~_j/d~_j`` (ties: ``k < j`` is ahead), otherwise it
   is displaced (``H_j(t)`` and ``L_j(t)`` of section 5.4).
3. **Queueing**: ``j`` picks the node maximising its tentative utility
   ``-v_j e^_j(n) - p^_j(n)`` under its *true* weight ``v_j`` (the job's own choice, its
   myopic best response: Theorem 1/3, Lemma 4), joins its queue by priority (P-DLGM: or
   preempts the running job, which returns to the same node's queue and resumes there later)
   and pays ``v~_k d~_j`` to every lower-priority job ``k`` it displaces.

A node serves its queue in priority order (a single-server WSPT queue) and is never idle while
its queue is not empty. Under P-DLGM a waiting job's ratio is constant and a running job's only
rises, so order changes (preemptions) happen only at arrivals (section 5.4): the engine's
arrival and completion events are all the mechanism needs.

Implementation (speed): an arrival must price every node, so per-node aggregates are
kept over *ratio buckets*: all jobs' initial ratios are cut into at most ``max_buckets``
contiguous ratio ranges (bucket 0 = highest ratios; very frequent ratio values, e.g. the
copies of a split parallel job, get a bucket of their own). Two 2-D Fenwick trees (rows =
buckets, columns = nodes) hold the remaining run times of the *waiting* jobs by bucket and their
weights by bucket in reverse order, so one gather of ``log2(buckets)`` rows each gives, for every
node at once, the work of the waiting jobs in higher buckets and the weight of those in lower
ones. Each is summed directly over the jobs it counts: the weight behind a newcomer is never a
node's total minus the weight ahead, which cancels (1e150 + 1 - 1e150 = 0). A cell is a
compensated sum (its rounded value and rounding error, updated with Knuth's TwoSum), reset to
exact zeros when its last job leaves, so jobs leaving leave no residue (1e12 + 0.1 - 1e12 is
0.1, not 0.0999755859375): a cell's value is its jobs' sum rounded once, exact where that sum
is a float (dyadic inputs), and payments of a truthful run then sum to exactly 0 and exact
ties stay ties. Jobs in ``j``'s own bucket are compared one by one (a bucket holds few jobs); when ``j``'s ratio is the lowest value of
its bucket, the whole bucket is ahead and nothing is compared. The running jobs are one
vector per node. An arrival therefore costs ``O(log buckets)`` NumPy row operations of length
``m`` plus ``O(bucket size)``, and an arrival that finds an idle node costs ``O(log m)``.

Payments received (the compensations) are credited lazily: one more Fenwick tree per node
(compensated cells, as above) accumulates, per bucket and node, the reported run times of every job that ever joined the
node; a waiting job ``k`` in bucket ``b`` is owed ``v~_k`` times the growth of the sum over
buckets above ``b`` during its wait (read at insertion and at start), plus explicit credits
from same-bucket displacers and, under P-DLGM, from the jobs that preempt it while it runs.
The credit is booked (``sim.charge(k, -credit)``) when ``k`` completes. This is the ledger of
the payers' transfers, computed independently of ``k``'s completion time, so the tests
"ex-post utility = tentative utility" and "payments sum to zero" can fail.

A whole run goes to a C kernel when it is built (:meth:`DLGM.compiled_run`, ``_dlgm_kernel.c``):
the engine loop and these steps with the same floating-point operations in the same order, so
its records and after-run arrays are this class's bit for bit; this class is the reference.

Decisions (open in the thesis)
------------------------------
* **Node choice is the job's strategy** (``node_choice``): ``"true"`` (default) maximises the
  tentative utility under the job's true weight (``true_value``; when none is given the
  reports are taken as true), as Theorem 1 and Lemma 4 have it, so a misreporting job still
  picks the node best for itself; ``"report"`` maximises it under the reported weight (what
  the mechanism would do if it chose for the job). Under truthful reports both are the same.
* **Ties in the node choice**: the lowest node index among the nodes of maximal tentative
  utility (``numpy.argmin`` of the cost ``-u^``). The work and weight sums of a node with no
  waiting job ahead (or behind) are exactly 0, not a float residue of earlier queues, so
  idle nodes tie exactly. An idle node is taken without pricing the others
  when every weight is positive and ``d~_j > 0``: its cost 0 is then the minimum value, shared
  only by other idle nodes, so the lowest idle index is the rule's answer (a busy node's cost
  is positive: a running job always has work left, and a waiting job is never zero-length).
* **Reported run times** are the actual run times (``d~ = d``): the engine runs jobs for their
  trace run time and has no "kill at the reported time" rule. Only weights are reports.
* **Run time 0 (the zero-run-time rule)**: a zero-length job completes on the spot and never
  holds its node: at its arrival ``r_j`` it starts and ends (``e_j = e^_j = r_j``), joins no
  queue, displaces and preempts nobody, pays nothing (``d~_j = 0``) and receives nothing. Every
  node offers it ``(r_j, 0)``, so it takes the lowest node index (a forced node, or under a node
  lie of rank ``r`` node ``r - 1``); it takes no processor. Its ratio would be ``+inf`` (ahead
  of everyone), but as a running or waiting job it would make the outcome depend on the order
  of a batch (one node at t=0, jobs A (run 0), B (run 3), C (run 0): A held the node, so B
  queued and C went ahead of it, while [B, C] alone made C wait 3 s behind the running B); with
  the rule no other job's schedule or payment depends on where zero-length jobs arrive.
* **Simultaneous events** (engine batch order): completions first, then the arrivals of the
  batch, one by one in job order, each seeing the placements of the earlier ones (jobs are
  "numbered by arrival", section 5.2). When an idle node starts a job (``start_rule``):
  ``"immediate"`` (default): an idle node starts a job the moment it reaches it, and a freed
  node the head of its queue at once, so a later arrival of the same time finds it running
  (DLGM never displaces it). This is the reading of Appendix C: each arrival is its own
  decision point, and Lemma 6 counts as waiting only the jobs that start strictly after
  ``r~_j`` (``b_k > r~_j``); a job started at ``r~_j`` is the running job. ``"after-arrivals"``:
  every arrival of the time stamp joins a queue first (an idle node's queue too, where a later
  arrival may go ahead of an earlier one and pays it), then every idle node starts its best
  job. Under P-DLGM both rules give the same schedule and payments.
* **Starts and preemptions** (P-DLGM): a job's start is the first instant it makes progress,
  and a preemption interrupts positive progress. A job that reached a node at ``t`` and is
  displaced by another arrival at ``t`` is put back in the queue (and paid) without a start or
  a preemption: the engine starts each node's job only after the whole batch.
* **Ratios in floating point**: ``v~/d~`` and ``v~_k/d~_k(t)`` are IEEE divisions, compared
  exactly; the queue order and the sets ``H_j``, ``L_j`` use the same numbers, so they agree.
* DLGM's release-date restriction ``r_j >= alpha d_j`` (needed only for Theorem 2's bound) is
  not enforced, as in the thesis's simulations (section 5.5).
* Jobs must be serial (one processor = one node); split parallel jobs first.
* **Cancellation** (the live market's, absent from the thesis and from Heydenreich, Müller &
  Uetz 2006: jobs never leave before they complete): only a *waiting* job (queued, or preempted
  and back in its node's queue) can be cancelled; a running job runs to its reported run time.
  Steps (:meth:`DLGM.withdraw`): the job is credited what its displacers paid it so far (it was
  displaced, the credit is booked as at a completion); it leaves its node's queue and the
  aggregates; nothing else moves: the compensations it paid at its arrival stay with the jobs
  it overtook (no refund: a refund would take money from their owners on the canceller's
  say-so), and the jobs behind it complete earlier than their tentative times, with the payments
  they made and received unchanged. ``cancel`` replays a live run's cancellations in the
  simulator: ``{job row: (time, after)}``, each taken out at its time after that batch's
  completions and after the arrivals of rows below ``after`` (the jobs submitted before it),
  before the others: the live market's order (its stops due come before a cancellation, and its
  submissions and cancellations of one time keep their order). A cancellation whose job is not
  waiting then (running, ended, not yet arrived) is skipped and listed in ``cancel_skipped``.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right

import numpy as np

from marketsched.engine.records import empty_records
from marketsched.engine.state import require_serial

INF = math.inf
NODE_CHOICES = ("true", "report")  # the weight a job picks its node with
START_RULES = ("immediate", "after-arrivals")  # when an idle node starts a job arriving with others


def _ratio(v: float, d: float) -> float:
    """Smith's ratio ``v/d`` with ``d = 0`` counted as ``+inf`` (see the module decisions)."""
    return v / d if d > 0 else INF


def ratio_buckets(ratios: np.ndarray, max_buckets: int, frequent: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Cut ratios into at most ``max_buckets`` contiguous ranges, highest ratios first.

    Returns ``(lo, bucket)``: ``lo[b]`` is the lowest ratio in bucket ``b`` (decreasing in
    ``b``) and ``bucket[i]`` the bucket of ``ratios[i]``. Bucket ``b`` holds the ratios in
    ``[lo[b], lo[b-1])``. Steps: distinct values in decreasing order; a new bucket starts
    whenever the running job count crosses a multiple of ``ceil(n / max_buckets)``; values
    shared by at least ``frequent`` jobs get a bucket of their own; ``frequent`` is raised
    (x4) until the count fits, and dropped (``inf``) as a last resort, which always fits.
    """
    ratios = np.asarray(ratios, dtype=np.float64)
    n = ratios.shape[0]
    if max_buckets < 1:
        raise ValueError(f"max_buckets must be >= 1, got {max_buckets}")
    if n == 0:
        return np.array([0.0]), np.zeros(0, dtype=np.int64)
    values, inverse, counts = np.unique(ratios, return_inverse=True, return_counts=True)
    values, counts = values[::-1], counts[::-1]  # decreasing ratio
    cap = -(-n // max_buckets)
    before = np.concatenate(([0], np.cumsum(counts)[:-1]))
    group = before // cap
    base = np.empty(values.shape[0], dtype=bool)
    base[0] = True
    base[1:] = group[1:] != group[:-1]
    k: int | None = frequent
    while True:
        starts = base.copy()
        if k is not None:
            freq = counts >= k
            starts |= freq
            starts[1:] |= freq[:-1]
        if int(starts.sum()) <= max_buckets or k is None:
            break
        k = k * 4 if k * 4 <= n else None
    bucket_of_value = np.cumsum(starts) - 1
    nb = int(bucket_of_value[-1]) + 1
    lo = np.empty(nb, dtype=np.float64)
    lo[bucket_of_value] = values  # the last (lowest) value of each bucket wins
    desc_index = values.shape[0] - 1 - inverse  # position of each ratio in the decreasing list
    return lo, bucket_of_value[desc_index].astype(np.int64)


def _fenwick_paths(size: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Index paths of a Fenwick tree with positions ``1..size``.

    ``query[p]``: the rows whose sum is the prefix ``1..p`` (``p = 0``: empty);
    ``update[p]``: the rows that include position ``p``.
    """
    query = [np.zeros(0, dtype=np.intp)]
    update = [np.zeros(0, dtype=np.intp)]
    for p in range(1, size + 1):
        q, i = [], p
        while i > 0:
            q.append(i)
            i -= i & -i
        u, i = [], p
        while i <= size:
            u.append(i)
            i += i & -i
        query.append(np.array(q, dtype=np.intp))
        update.append(np.array(u, dtype=np.intp))
    return query, update


class DLGM:
    """DLGM (``preemptive=False``) or P-DLGM (``preemptive=True``) on the engine.

    Parameters
    ----------
    bid:
        Reported weight ``v~_j`` of each job (waiting cost per second, >= 0).
    runtime:
        Reported run time ``d~_j`` of each job; must equal the workload's run times (the
        engine runs jobs for those; see the module decisions).
    preemptive:
        False: DLGM (Stößer 2009, section 5.3); True: P-DLGM (section 5.4).
    max_buckets:
        Upper bound on ratio buckets (speed/memory only; results do not depend on it).
        Default: ``min(2048, 2**20 // nodes)``, at least 1 (two trees of three floats per bucket
        and node: at most 48 MiB; fewer, larger buckets measured faster on the HPC2N and
        LPC-EGEE traces than the earlier ``min(8192, 2**22 // nodes)``).
    force_node:
        ``{job row: node}``: these jobs join the given node instead of the best one.
    node_rank:
        Each job's node choice as a rank (1 = the node of the largest tentative utility, its
        myopic best response; 2 = the second best; ties in node order), one per job; None: every
        job takes its best node. The audit's node lies (``marketsched audit --deviate node:R``).
    record_offers:
        Keep, for every job, the tentative completion time and payment offered by every node
        (``offers_completion[j]``, ``offers_payment[j]``; memory ``O(jobs x nodes)``: small
        instances only).
    cancel:
        ``{job row: (time, after)}``: waiting jobs taken out of their queue at these times, after
        the arrivals of the rows below ``after`` (the live market's cancellations, see the module
        decisions); the run takes the Python path.
    true_value:
        True weight ``v_j`` of each job (>= 0), used only for the job's own node choice;
        None: the reports are the true weights.
    node_choice:
        ``"true"`` (default): each job joins the node with the largest tentative utility
        ``-v_j e^_j(n) - p^_j(n)`` under its true weight (its myopic best response);
        ``"report"``: under its reported weight.
    start_rule:
        ``"immediate"`` (default) or ``"after-arrivals"``: when an idle node starts a job that
        arrives together with others (see the module decisions).

    Notes
    -----
    After the run: ``tentative_completion``, ``tentative_payment``, ``node``, ``received``
    (compensation received, >= 0), ``paid`` (= ``tentative_payment``, what the job paid at
    arrival), NumPy arrays over job rows; the engine's ``Records.payment`` is the net payment
    ``paid - received``.
    """

    def __init__(self, bid, runtime, preemptive: bool = False, max_buckets: int | None = None,
                 force_node: dict[int, int] | None = None, record_offers: bool = False,
                 true_value=None, node_choice: str = "true", start_rule: str = "immediate", node_rank=None,
                 cancel: dict[int, tuple[float, int]] | None = None):
        bid = np.asarray(bid, dtype=np.float64)
        runtime = np.asarray(runtime, dtype=np.float64)
        name = "P-DLGM" if preemptive else "DLGM"
        if bid.ndim != 1 or runtime.shape != bid.shape:
            raise ValueError(f"{name}: bid {bid.shape} and runtime {runtime.shape} must be 1-D of equal length")
        if node_choice not in NODE_CHOICES:
            raise ValueError(f"{name}: node_choice must be one of {', '.join(NODE_CHOICES)}, got {node_choice!r}")
        if start_rule not in START_RULES:
            raise ValueError(f"{name}: start_rule must be one of {', '.join(START_RULES)}, got {start_rule!r}")
        for what, arr in (("reported weight", bid), ("true weight", true_value)):
            if arr is None:
                continue
            arr = np.asarray(arr, dtype=np.float64)
            if arr.shape != bid.shape:
                raise ValueError(f"{name}: {what}s {arr.shape} must be one per job ({bid.shape[0]})")
            bad = ~np.isfinite(arr) | (arr < 0)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"{name}: {what} of job row {i} is {arr[i]!r}; weights must be finite and >= 0")
        bad = ~np.isfinite(runtime) | (runtime < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{name}: reported run time of job row {i} is {runtime[i]!r}; must be finite and >= 0")
        if node_rank is not None:
            node_rank = np.asarray(node_rank)
            if node_rank.shape != bid.shape or not np.all(node_rank >= 1) or not np.all(node_rank % 1 == 0):
                raise ValueError(f"{name}: node_rank must be one whole number >= 1 per job ({bid.shape[0]})")
            node_rank = {int(j): int(r) for j, r in enumerate(node_rank) if r != 1}
        self.node_rank = node_rank or {}
        self.name = name
        self.preemptive = bool(preemptive)
        self.bid_array = bid
        self.runtime_array = runtime
        self.max_buckets = max_buckets
        self.force_node = dict(force_node or {})
        self.cancel = {int(j): (float(t), int(a)) for j, (t, a) in (cancel or {}).items()}
        for j, (t, a) in self.cancel.items():
            if not 0 <= j < bid.shape[0] or not math.isfinite(t) or a < 0:
                raise ValueError(f"{name}: cancel {{{j}: ({t}, {a})}} needs a job row of the run, a finite time "
                                 "and a number of jobs submitted before it")
        self.cancel_skipped: list[int] = []
        self.record_offers = bool(record_offers)
        self.node_choice = node_choice
        self.start_rule = start_rule
        # the weight a job weighs completion time with when it picks its node
        self.choice_array = bid if true_value is None or node_choice == "report" else np.asarray(
            true_value, dtype=np.float64)

    # ------------------------------------------------------------------ engine hooks
    def _check(self, sim, procs, runtime) -> None:
        """The checks of a run on ``sim`` (``procs``, ``runtime``: its jobs' processors and run times)."""
        n_jobs = sim.n_jobs
        if self.bid_array.shape[0] != n_jobs:
            raise ValueError(f"{self.name}: {self.bid_array.shape[0]} bids for {n_jobs} jobs")
        require_serial(self.name, procs)
        actual = np.asarray(runtime, dtype=np.float64)
        if not np.array_equal(actual, self.runtime_array):
            i = int(np.argmax(actual != self.runtime_array))
            raise ValueError(
                f"{self.name}: reported run time of job row {i} ({self.runtime_array[i]}) differs from the "
                f"workload's ({actual[i]}); reported run times must be the actual ones"
            )
        m = sim.capacity
        for j, n in self.force_node.items():
            if not (0 <= j < n_jobs) or not (0 <= n < m):
                raise ValueError(f"{self.name}: force_node {{{j}: {n}}} is out of range ({n_jobs} jobs, {m} nodes)")
        for j, r in self.node_rank.items():
            if r > m:
                raise ValueError(f"{self.name}: job row {j} chooses its node of rank {r}, but there are {m} nodes")

    def _buckets(self, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ratio0, lo, bucket)``: every job's initial ratio and the ratio buckets on ``m`` nodes."""
        v, d = self.bid_array, self.runtime_array
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio0 = np.where(d > 0, v / np.where(d > 0, d, 1.0), np.inf)
        mb = self.max_buckets or max(1, min(2048, (1 << 20) // m))
        lo, bucket = ratio_buckets(ratio0, mb)
        return ratio0, lo, bucket

    def bind(self, sim) -> None:
        self._check(sim, sim.procs, sim.remaining)
        n_jobs = sim.n_jobs
        m = sim.capacity
        self.sim = sim
        self.m = m
        v = self.bid_array
        d = self.runtime_array
        ratio0, lo, bucket = self._buckets(m)
        nb = lo.shape[0]
        self.lo = lo.tolist()
        self.asc_lo = lo[::-1].tolist()
        self.nb = nb
        self.bucket0 = bucket.tolist()
        self.qpath, self.upath = _fenwick_paths(nb)
        self.qpath_l = [a.tolist() for a in self.qpath]
        self.upath_l = [a.tolist() for a in self.upath]
        width = max(a.shape[0] for a in self.upath)
        self.UP = np.zeros((nb + 1, width), dtype=np.intp)  # update paths padded with row 0 (unused)
        for p_, a in enumerate(self.upath):
            self.UP[p_, : a.shape[0]] = a
        # Python lists for scalar access in the hot loop
        self.v = v.tolist()
        self.d = d.tolist()
        self.ratio = ratio0.tolist()  # current ratio of a waiting job (P-DLGM: updated at preemption)
        self.w_choice = self.v if self.choice_array is self.bid_array else self.choice_array.tolist()
        self.all_positive = bool((v > 0).all() and (self.choice_array > 0).all())
        # per-job state
        # per-job results (NumPy arrays after a compiled run)
        self.node_of: list[int] | np.ndarray = [-1] * n_jobs
        self.bucket_of = [-1] * n_jobs  # bucket while waiting, -1 otherwise
        self.work = [0.0] * n_jobs  # reported run time still to do, as stored in the aggregates
        self.base = [0.0] * n_jobs  # credit tree reading when the job (re)entered a queue ...
        self.base_lo = [0.0] * n_jobs  # ... and its rounding error
        self.credit_work = [0.0] * n_jobs  # sum of displacers' run times (times v~ = credit)
        self._tent_e: list[float] | np.ndarray = [math.nan] * n_jobs
        self._tent_p: list[float] | np.ndarray = [math.nan] * n_jobs
        self._received: list[float] | np.ndarray = [0.0] * n_jobs
        if self.record_offers:
            self.offers_completion: list[np.ndarray | None] = [None] * n_jobs
            self.offers_payment: list[np.ndarray | None] = [None] * n_jobs
        # per-node state
        # Fenwick trees over buckets x nodes of the waiting jobs: W over bucket positions
        # (prefixes: the jobs ahead) of their work, R over reversed positions (prefixes: the jobs
        # behind) of their weight. A row holds the sums [., n] and then per node the sum's
        # rounding error [., m + 2n] (a compensated sum: jobs leave as well as join) and the
        # number of jobs [., m + 2n + 1]
        self.W = np.zeros((nb + 1, 3 * m))
        self.R = np.zeros((nb + 1, 3 * m))
        # per node, a Fenwick tree over buckets (Python lists: single-node access) of the run
        # times of all jobs that ever joined the node (the credit ledger)
        # (compensated: cell i is the sum G[n][2i] and its rounding error G[n][2i + 1])
        self.G = [[0.0] * (2 * (nb + 1)) for _ in range(m)]
        self.Wflat = self.W.reshape(-1)
        self.Rflat = self.R.reshape(-1)
        # queue changes reach W and R lazily: (position, node, weight, work, count) rows applied in
        # one batch before the next vector query (most arrivals find an idle node and query nothing)
        self._pending: list[tuple[int, int, float, float, float]] = []
        self.qlen = [0] * m  # number of waiting jobs per node
        # waiting jobs per bucket, in the order they joined (a dict: its order, unlike a set's, is
        # defined, and the same-bucket sums of _offers add in that order)
        self.members: list[dict[int, None]] = [{} for _ in range(nb)]
        self.queue: list[list[tuple[float, int]]] = [[] for _ in range(m)]  # heaps of (-ratio, job)
        self.run_job = [-1] * m
        self.run_v = np.zeros(m)  # reported weight of the running job (0: idle)
        self.run_fin = np.zeros(m)  # its completion time
        self.busy = np.zeros(m, dtype=bool)
        self.idle = list(range(m))  # heap of idle nodes (lazy: may hold busy ones)
        self.preemption_count = 0
        # offers of the last arrival, reused by identical copies (same t, v, d, w): (v, d, w, A, B, run_ahead, cost)
        self._cache: tuple | None = None
        self._to_start: list[int] = []  # nodes whose running job the engine starts at the end of the batch
        self._idle_queued: set[int] = set()  # start_rule "after-arrivals": idle nodes with waiting jobs
        self._cancels = sorted((t, a, j) for j, (t, a) in self.cancel.items())  # due in their order
        self.cancel_skipped = []
        for t, _, _ in self._cancels:
            sim.wake_at(max(t, sim.now))

    def add_jobs(self, bid, key, cost) -> range:
        """Append jobs that arrive while the policy runs (the live engine's interface: ``bid``
        the reported weights ``v~``, ``key`` the reported run times ``d~``, ``cost`` unused);
        returns their rows.

        Only a policy bound with no jobs takes new ones: it has a single ratio bucket whose
        lowest ratio is 0, which holds every ratio ``v~/d~ >= 0``, so the buckets never need to
        be cut again (results do not depend on the buckets, see ``max_buckets``). Jobs choose
        their node with their reported weight (a live market cannot know a true one). Checks
        come before anything is appended."""
        bid = np.atleast_1d(np.asarray(bid, dtype=np.float64))
        run = np.atleast_1d(np.asarray(key, dtype=np.float64))
        if bid.ndim != 1 or bid.shape != run.shape:
            raise ValueError(f"{self.name}: reported weights and run times must be 1-d and of one length")
        if self.nb != 1 or self.lo[0] != 0.0 or self.choice_array is not self.bid_array:
            raise ValueError(f"{self.name}: only a policy bound with no jobs and no true weights takes new jobs")
        first = len(self.v)
        for what, arr in (("reported weight", bid), ("reported run time", run)):
            bad = ~np.isfinite(arr) | (arr < 0)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"{self.name}: {what} of job row {first + i} is {arr[i]!r}; must be finite and >= 0")
        n = bid.shape[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio0 = np.where(run > 0, bid / np.where(run > 0, run, 1.0), np.inf)
        self.bid_array = self.choice_array = np.concatenate((self.bid_array, bid))
        self.runtime_array = np.concatenate((self.runtime_array, run))
        self.v += bid.tolist()  # self.w_choice is this list too (no true weights)
        self.d += run.tolist()
        self.ratio += ratio0.tolist()
        self.bucket0 += [0] * n
        for col, x in ((self.node_of, -1), (self.bucket_of, -1), (self.work, 0.0), (self.base, 0.0),
                       (self.base_lo, 0.0), (self.credit_work, 0.0), (self._tent_e, math.nan),
                       (self._tent_p, math.nan), (self._received, 0.0)):
            col += [x] * n
        if self.record_offers:
            self.offers_completion += [None] * n
            self.offers_payment += [None] * n
        self.all_positive = bool((self.bid_array > 0).all())
        return range(first, first + n)

    def quote(self, weight: float, runtime: float, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every node's tentative completion time and payment ``(e^(n), p^(n))`` for a job that
        would arrive now (time ``t``) with reported weight and run time ``(weight, runtime)``,
        without adding it (step 2 of the module's steps, as :meth:`_offers` computes it for an
        arrival: a newcomer comes after every job, so equal ratios are ahead of it), and the
        cost the job's node choice minimises (step 3, as :meth:`_arrive` computes it:
        ``cost.argmin()`` is the node it takes)."""
        if runtime == 0:
            return np.full(self.m, t), np.zeros(self.m), np.zeros(self.m)
        rho = _ratio(weight, runtime)
        i = bisect_right(self.asc_lo, rho) - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            A, B, _ = self._offers_for(rho, self.nb - 1 - max(i, 0), t)
        return t + runtime + A, runtime * B, weight * A + runtime * B

    def step(self, t: float, arrived: range, completed: list[int]) -> None:
        self._cache = None
        for c in completed:
            self._complete(c, t)
        with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 on idle nodes: NaN, never ahead
            for j in arrived:
                if self._cancels:
                    self._cancel_due(t, j)
                self._arrive(j, t)
        if self._cancels:
            self._cancel_due(t, INF)
        if self._idle_queued:  # "after-arrivals": every arrival of the batch is in; idle nodes start
            for n in sorted(self._idle_queued):
                if self.queue[n]:
                    self._dequeue_and_start(n)
                else:  # its last waiting job was cancelled in this batch
                    heapq.heappush(self.idle, n)
            self._idle_queued.clear()
        # The engine starts a node's job only now, so a job that a same-time arrival displaced
        # (P-DLGM) has not started and is not preempted: it never ran.
        sim = self.sim
        for n in self._to_start:
            k = self.run_job[n]
            if k >= 0 and not sim.running[k]:
                sim.start(k)
        self._to_start.clear()

    def compiled_run(self, sim):
        """The whole run in C (``_dlgm_kernel.c``: the engine loop and :meth:`step`, the same
        operations in the same order, so the records and the after-run arrays are bit for bit the
        reference's); the engine calls it (docs/engine.md, "Compiled kernels"). None (the Python
        path runs) for a subclass (it may change a step the kernel does not know), with
        ``record_offers``, with a negative zero among the submit times, run times or weights (the
        reference's sign of zero is not mirrored), or when the kernel is not built (an error under
        ``MARKETSCHED_ENGINE=compiled``)."""
        from marketsched.engine import compiled

        if self.record_offers or self.cancel or type(self) is not DLGM:  # a subclass may change a step
            return None  # the kernel does not know
        _dlgm_kernel = compiled.kernel("marketsched.mechanisms.online._dlgm_kernel")
        if _dlgm_kernel is None:
            return None
        w = sim.workload
        runtime = np.ascontiguousarray(w.runtime, dtype=np.float64)
        self._check(sim, w.procs, runtime)
        submit = np.ascontiguousarray(w.submit_time, dtype=np.float64)
        v = np.ascontiguousarray(self.bid_array)
        choice = np.ascontiguousarray(self.choice_array)
        if any(np.signbit(a).any() for a in (submit, runtime, v, choice)):
            return None
        n, m = sim.n_jobs, sim.capacity
        _, lo, bucket = self._buckets(m)
        bucket = bucket.astype(np.int32)
        forced = np.zeros(0, dtype=np.int32)
        if self.force_node:
            forced = np.full(n, -1, dtype=np.int32)
            forced[list(self.force_node)] = list(self.force_node.values())
        rank = np.zeros(0, dtype=np.int32)
        if self.node_rank:
            rank = np.ones(n, dtype=np.int32)
            rank[list(self.node_rank)] = list(self.node_rank.values())
        rec = empty_records(n)
        out = {k: np.empty(n, dtype=np.float64) for k in ("tent_e", "tent_p", "received")}
        node = np.empty(n, dtype=np.int64)
        all_positive = bool((v > 0).all() and (choice > 0).all())
        now, count, sim.batches = _dlgm_kernel.run(
            submit, runtime, v, choice, bucket, np.ascontiguousarray(lo), forced, rank, m,
            int(self.preemptive), int(self.start_rule == "immediate"), int(all_positive),
            rec.first_start, rec.end_time, rec.preemptions, rec.payment, rec.state, out["tent_e"], out["tent_p"],
            out["received"], node)
        sim.now = now
        self.m = m
        self.node_of = node
        self._tent_e, self._tent_p, self._received = out["tent_e"], out["tent_p"], out["received"]
        self.preemption_count = count
        return rec

    def _cancel_due(self, t: float, before: float) -> None:
        """The cancellations due by ``t`` that came before the arrival of row ``before``."""
        while self._cancels and self._cancels[0][0] <= t and self._cancels[0][1] <= before:
            j = self._cancels.pop(0)[2]
            if self.withdraw(j):
                self.sim.kill(j)
            else:
                self.cancel_skipped.append(j)

    def withdraw(self, j: int) -> bool:
        """Take waiting job ``j`` out of its node's queue (a cancellation, see the module
        decisions); returns False, changing nothing, if ``j`` is not waiting. The engine ends the
        row (the live engine's ``withdrawn``, or :meth:`step`'s ``cancel`` replay).

        Steps: (1) credit ``j`` the growth of its node's credit reading since its base and book
        its credit (``v~_j`` times the run times of its displacers, as at a completion); (2)
        remove its run time and weight from the aggregates (one pending change, as a start
        does), its bucket's members and its node's queue. Costs O(queue length) for the heap
        removal: cancellations are rare user actions."""
        if not 0 <= j < len(self.bucket_of):
            return False
        b = self.bucket_of[j]
        if b < 0:
            return False
        n = self.node_of[j]
        self._credit_since(j, n, b)
        self._book_credit(j)
        self._pending.append((b + 1, n, -self.v[j], -self.work[j], -1.0))
        self.qlen[n] -= 1
        del self.members[b][j]
        self.bucket_of[j] = -1
        self.queue[n].remove((-self.ratio[j], j))
        heapq.heapify(self.queue[n])
        self._cache = None
        return True

    def close(self, t: float) -> None:
        """Book the credits of jobs still queued or running when a run is cut (``until``)."""
        for n in range(self.m):
            k = self.run_job[n]
            if k >= 0:
                self._book_credit(k)
            for _, k in self.queue[n]:
                self._credit_since(k, n, self.bucket_of[k])
                self._book_credit(k)

    # ------------------------------------------------------------------ results
    @property
    def tentative_completion(self) -> np.ndarray:
        return np.array(self._tent_e, dtype=np.float64)

    @property
    def tentative_payment(self) -> np.ndarray:
        return np.array(self._tent_p, dtype=np.float64)

    paid = tentative_payment

    @property
    def received(self) -> np.ndarray:
        return np.array(self._received, dtype=np.float64)

    @property
    def node(self) -> np.ndarray:
        return np.array(self.node_of, dtype=np.int64)

    def tentative_utility(self, true_value) -> np.ndarray:
        """``-v_j e^_j - p^_j`` with the *true* weights (Theorem 1/3 notation)."""
        return -np.asarray(true_value, dtype=np.float64) * self.tentative_completion - self.tentative_payment

    # ------------------------------------------------------------------ internals
    def _credit_reading(self, n: int, b: int) -> tuple[float, float]:
        """Run time of all jobs that ever joined node ``n`` in buckets above ``b``, as a sum and
        its rounding error (the cells are compensated sums: a credit is the growth of this
        reading during a wait, a difference of two large readings that would otherwise lose a
        short displacer's run time once the node's history is long)."""
        g = self.G[n]
        s = c = 0.0
        for i in self.qpath_l[b]:
            x = g[2 * i]
            t = s + x
            bp = t - s
            c += ((s - (t - bp)) + (x - bp)) + g[2 * i + 1]
            s = t
        return s, c

    def _credit_since(self, k: int, n: int, b: int) -> None:
        """Credit ``k`` (waiting on node ``n`` in bucket ``b``) with the growth of the reading
        since its base, and take the reading as its new base."""
        s, c = self._credit_reading(n, b)
        self.credit_work[k] += (s - self.base[k]) + (c - self.base_lo[k])
        self.base[k], self.base_lo[k] = s, c

    def _book_credit(self, k: int) -> None:
        amount = self.v[k] * self.credit_work[k]
        self.credit_work[k] = 0.0
        if amount:
            self._received[k] += amount
            self.sim.charge(k, -amount)

    def _start(self, n: int, k: int) -> None:
        """Node ``n`` runs ``k`` from now on; the engine is told at the end of the batch."""
        sim = self.sim
        self.run_job[n] = k
        self.run_v[n] = self.v[k]
        self.run_fin[n] = sim.now + sim.remaining[k]
        self.busy[n] = True
        self._to_start.append(n)

    def _enqueue(self, n: int, k: int, ratio: float, work: float, b: int = -1) -> None:
        """Put ``k`` into node ``n``'s queue with the given (current) ratio, work and bucket
        (``b = -1``: the bucket of ``ratio``, for a preempted job's new ratio)."""
        if b < 0:
            i = bisect_right(self.asc_lo, ratio) - 1  # largest lo <= ratio (ratios only rise)
            b = self.nb - 1 - max(i, 0)
        self.ratio[k] = ratio
        self.bucket_of[k] = b
        self.work[k] = work
        vk = self.v[k]
        self._pending.append((b + 1, n, vk, work, 1.0))
        self.qlen[n] += 1
        self.members[b][k] = None
        self.base[k], self.base_lo[k] = self._credit_reading(n, b)
        heapq.heappush(self.queue[n], (-ratio, k))

    def _dequeue_and_start(self, n: int) -> None:
        _, k = heapq.heappop(self.queue[n])
        b = self.bucket_of[k]
        vk = self.v[k]
        self._pending.append((b + 1, n, -vk, -self.work[k], -1.0))
        self.qlen[n] -= 1
        del self.members[b][k]
        self._credit_since(k, n, b)
        self.bucket_of[k] = -1
        self._start(n, k)

    def _complete(self, c: int, t: float) -> None:
        n = self.node_of[c]
        self._book_credit(c)
        self.run_job[n] = -1
        self.run_v[n] = 0.0
        self.run_fin[n] = 0.0  # <= t: no remaining work
        self.busy[n] = False
        if not self.queue[n]:
            heapq.heappush(self.idle, n)
        elif self.start_rule == "immediate":
            self._dequeue_and_start(n)
        else:
            self._idle_queued.add(n)

    def _flush(self) -> None:
        """Apply the pending queue changes to the Fenwick trees ``W`` (bucket positions) and ``R``
        (reversed positions), in their order.

        A cell is a compensated (double-double) sum built on Knuth's TwoSum (The Art of Computer
        Programming, vol. 2, section 4.2.2): ``hi`` the sum rounded,
        ``lo`` what rounding left out, so that a job that leaves takes out exactly what it
        brought in (plain sums cancel: weights 1e12 and 0.1 in one cell, 1e12 leaves: 1e12 + 0.1
        - 1e12 = 0.0999755859375). Steps per change ``x`` of a cell: ``s, e = TwoSum(hi, x)``;
        ``hi, lo = TwoSum(s, e + lo)``; a cell whose count is back to 0 is reset to exact zeros.
        Each cell sees its changes one by one, in their order."""
        pending, self._pending = self._pending, []
        m, nb, paths = self.m, self.nb, self.upath_l
        for tree, col in ((self.Wflat, 3), (self.Rflat, 2)):
            for change in pending:
                node, x, cnt = change[1], change[col], change[4]
                for row in paths[change[0] if col == 3 else nb + 1 - change[0]]:
                    f = row * 3 * m + node  # the sum; its error at g, the count at g + 1
                    g = f + m + node
                    hi = tree.item(f)
                    s = hi + x
                    bp = s - hi
                    e = (hi - (s - bp)) + (x - bp) + tree.item(g)
                    h = s + e
                    bp = h - s
                    c = tree.item(g + 1) + cnt
                    if c == 0:  # the last job left: exact zeros
                        tree[f] = tree[g] = tree[g + 1] = 0.0
                    else:
                        tree[f] = h
                        tree[g] = (s - (h - bp)) + (e - bp)
                        tree[g + 1] = c

    def _offers(self, j: int, t: float):
        """Per node: work ahead of ``j`` (``A``), weight it would displace (``B``), running-job flags.

        Both sums are taken directly over the jobs they count: the work ahead over the buckets
        above ``j`` (tree ``W``), the weight behind over the buckets below (tree ``R``), plus the
        jobs of ``j``'s own bucket one by one. The weight behind is never the node's total minus
        the weight ahead, which cancels (weights 1e150 ahead and 1 behind: 1e150 + 1 - 1e150 = 0)
        and leaves residues (0.1 + 0.2 - 0.2 = 0.10000000000000003). The cells are compensated
        sums, reset to exact zeros when they empty (see :meth:`_flush`): a node with no job ahead
        (behind) has exactly 0 work ahead (weight behind), a cell's sum is its jobs' sum rounded
        once (exact where that sum is a float, e.g. dyadic weights; within 2^-106 of the largest
        number it ever held otherwise), so that truthful payments sum to exactly 0 and exact ties
        stay ties where the inputs are exact."""
        return self._offers_for(self.ratio[j], self.bucket0[j], t)

    def _offers_for(self, rho: float, b: int, t: float):
        """:meth:`_offers` for a job of ratio ``rho`` in bucket ``b`` arriving after every job."""
        m = self.m
        whole = rho == self.lo[b]  # j is the lowest ratio of its bucket: the whole bucket is ahead
        p = b + 1 if whole else b
        if self._pending:
            self._flush()
        path = self.qpath[p]
        work_ahead = self.W[path, :m].sum(axis=0) if path.shape[0] else np.zeros(m)
        path = self.qpath[self.nb - 1 - b]  # reversed positions 1..nb-1-b: the buckets below b
        v_behind = self.R[path, :m].sum(axis=0) if path.shape[0] else np.zeros(m)
        if not whole:
            ratio, node_of, vv, work = self.ratio, self.node_of, self.v, self.work
            for k in self.members[b]:  # waiting k < j with ratio >= rho: ahead (ties: lower index)
                if ratio[k] >= rho:
                    work_ahead[node_of[k]] += work[k]
                else:
                    v_behind[node_of[k]] += vv[k]
        rem = self.run_fin - t  # idle nodes: run_fin = 0 <= t
        np.maximum(rem, 0.0, out=rem)
        if self.preemptive:
            run_ahead = (self.run_v / rem) >= rho  # idle: 0/0 = NaN, not ahead (adds 0); a running job has rem > 0
            A = work_ahead + rem * run_ahead
            B = v_behind + self.run_v * ~run_ahead
        else:
            run_ahead = self.busy
            A = work_ahead + rem
            B = v_behind
        return A, B, run_ahead

    def _complete_on_arrival(self, j: int, t: float, forced: int | None, rank: int) -> None:
        """The zero-run-time rule (see the module decisions): ``j`` (``d~_j = 0``) completes at
        ``t`` on the spot and never holds or queues on its node. Every node offers it
        ``e^ = t`` and ``p^ = 0``: it takes the lowest node index (a forced node, or the node of
        its rank in node order), pays nothing and delays and displaces nobody."""
        n = forced if forced is not None else rank - 1
        if self.record_offers:
            self.offers_completion[j] = np.full(self.m, t)
            self.offers_payment[j] = np.zeros(self.m)
        self.node_of[j] = n
        self._tent_e[j] = t
        self._tent_p[j] = 0.0
        sim = self.sim
        sim.first_start[j] = t  # starts and ends at t, without taking a processor
        sim.finish(j)

    def _arrive(self, j: int, t: float) -> None:
        sim = self.sim
        v, d, w = self.v[j], self.d[j], self.w_choice[j]
        forced = self.force_node.get(j) if self.force_node else None
        rank = self.node_rank.get(j, 1) if self.node_rank else 1
        n = -1
        cache = self._cache
        self._cache = None
        if d == 0:
            self._complete_on_arrival(j, t, forced, rank)
            return
        if forced is None and rank == 1 and not self.record_offers and self.all_positive:
            idle, busy, qlen = self.idle, self.busy, self.qlen
            while idle and (busy[idle[0]] or qlen[idle[0]]):  # running, or (after-arrivals) a job waits
                heapq.heappop(idle)
            if idle:
                n = heapq.heappop(idle)
                ahead = 0.0
                displaced_v = 0.0
                run_ahead_n = False
        if n < 0:
            if cache is not None and cache[0] == v and cache[1] == d and cache[2] == w:
                # the previous arrival (same batch) had the same weights and run time, e.g. a
                # copy of the same split job: the offers are those it saw, except on the node it
                # joined, where it is now ahead of this job (equal ratio, lower index)
                A, B, run_ahead, cost = cache[3], cache[4], cache[5], cache[6]
            else:
                A, B, run_ahead = self._offers(j, t)
                cost = w * A + d * B  # -(tentative utility at weight w) + w (r_j + d_j), the same on every node
            if self.record_offers:
                self.offers_completion[j] = t + d + A
                self.offers_payment[j] = d * B
            if forced is None and rank == 1:
                n = int(cost.argmin())  # first minimum: the lowest node index wins ties
            elif forced is None:
                n = int(np.argsort(cost, kind="stable")[rank - 1])
            else:
                n = forced
            ahead = float(A[n])
            displaced_v = max(float(B[n]), 0.0)
            run_ahead_n = bool(run_ahead[n])
            # keep the offers for an identical successor: it sees this job ahead of it on node n
            A[n] += d
            cost[n] = w * A[n] + d * B[n]
            if self.preemptive:
                if self.run_job[n] < 0 or not run_ahead_n:
                    run_ahead = run_ahead.copy() if run_ahead is self.busy else run_ahead
                    run_ahead[n] = True
            self._cache = (v, d, w, A, B, run_ahead, cost)
        self.node_of[j] = n
        e_hat = t + d + ahead
        p_hat = d * displaced_v
        self._tent_e[j] = e_hat
        self._tent_p[j] = p_hat
        if p_hat:
            sim.charge(j, p_hat)
        k = self.run_job[n]
        if k < 0 and self.start_rule == "immediate":  # idle node (its queue is empty): start at once
            self._start(n, j)
            return
        # pay the waiting jobs behind j: lazily through the credit tree (buckets below j's) ...
        b = self.bucket0[j]
        g = self.G[n]
        for i in self.upath_l[b + 1]:  # TwoSum: the error goes to the cell's error
            hi = g[2 * i]
            t = hi + d
            bp = t - hi
            g[2 * i + 1] += (hi - (t - bp)) + (d - bp)
            g[2 * i] = t
        # ... and explicitly for the waiting jobs of j's own bucket with a lower ratio
        rho = self.ratio[j]
        if rho != self.lo[b]:
            ratio, node_of, cw = self.ratio, self.node_of, self.credit_work
            for i in self.members[b]:
                if node_of[i] == n and ratio[i] < rho:
                    cw[i] += d
        if k >= 0 and self.preemptive and not run_ahead_n:
            # j displaces the running job k: k is paid and re-queued on node n. If k has run
            # since before t it is preempted; if it was to start at t, it never ran: no start,
            # no preemption (a preemption interrupts positive progress)
            self.credit_work[k] += d
            if sim.running[k]:
                sim.preempt(k)
                self.preemption_count += 1
            rem_k = sim.remaining[k]
            self._enqueue(n, k, _ratio(self.v[k], rem_k), rem_k)
            self._start(n, j)
        else:
            self._enqueue(n, j, self.ratio[j], d, self.bucket0[j])
            if k < 0:  # "after-arrivals": the idle node starts its best job after the batch's arrivals
                self._idle_queued.add(n)


def make_dlgm(workload, bid, preemptive: bool = False, **kwargs) -> DLGM:
    """DLGM or P-DLGM for ``workload`` with reported weights ``bid`` (run times from the workload);
    ``kwargs`` go to :class:`DLGM` (``true_value``, ``node_choice``, ``start_rule``, ...)."""
    bid = np.asarray(bid, dtype=np.float64)
    if bid.shape != (len(workload),):
        raise ValueError(f"expected one bid per job ({len(workload)}), got shape {bid.shape}")
    return DLGM(bid, workload.runtime, preemptive=preemptive, **kwargs)


def run_dlgm(workload, bid, preemptive: bool = False, progress=None, **kwargs):
    """Simulate DLGM/P-DLGM; returns ``(records, policy)``."""
    from marketsched.engine.simulator import Simulator

    policy = make_dlgm(workload, bid, preemptive, **kwargs)
    records = Simulator(workload, policy).run(progress=progress)
    return records, policy
