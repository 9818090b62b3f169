"""Highest-Bid and the static-priority baselines of the MOSIX market (Shudler et al. 2010, sections II.A and III.B).

All four allocation rules order serial jobs by a fixed priority key and fill the ``n`` nodes
from the top; they differ in the key and in whether a running job may be preempted:

============  =====================================  ==========  ============================
rule          key (higher runs first)                preemptive  source
============  =====================================  ==========  ============================
``hb``        reported bid ``w~_i``                  yes         Algorithm 1 (Highest-Bid)
``nphb``      reported bid ``w~_i``                  no          section III.B (NPHB)
``wspt``      ``w~_i / tau_i`` (actual run time)     no          section III.B, Smith's rule
``wsept``     ``w~_i / tau~_i`` (run-time estimate)  no          section III.B (WSEPT)
============  =====================================  ==========  ============================

Algorithm 1 (HB), run at every job arrival and termination:

1. a new job starts with payment 0;
2. every running or just-terminated job adds ``p'_i * t'_i`` to its payment (done by the
   payment scheme's running integrals, see :mod:`~marketsched.mechanisms.online.pricing`);
3. sort new, queued and unfinished jobs by bid, highest first, ties by submission time;
4. give the first ``n`` jobs the ``n`` nodes, preempting lower bids;
5. each assigned job's current price ``p'_i`` is set by the payment scheme;
6. the rest wait in the queue.

Implementation: the sort of step 3 never happens. Each job's place in the total order
(key descending, then submission order) is the tuple ``(-key, row)``, made once when the job is
added; the queue is a heap of these and, for HB, the running set is a heap of ``(key, -row)``
(its top is the worst running job), so an event costs O(log n) per job that moves: fill free
nodes from the queue top, then (HB only) swap while the best queued job beats the worst running
one. Jobs can be added while the mechanism runs (:meth:`PriorityScheduler.add_jobs`), which is
how the live market feeds it real submissions.

Decisions (open in the paper): ties in the key go to the earlier submission (the paper's rule;
rows are in submission order, so row order breaks ties). WSPT and WSEPT divide the bid by the
run time (estimate) exactly as the paper writes, however short it is: a 0.5 s job has the key
``2 * bid``. Only a divisor of 0 needs a rule: such a job's key is ``+inf`` whatever its bid
(Smith's ratio of a job that takes no time), so it goes before every job with a positive
divisor, and jobs of divisor 0 go by submission among themselves; under the k-th price it pays
0 (see :mod:`~marketsched.mechanisms.online.pricing`). A missing run-time estimate (NaN) makes
WSEPT fall back to the actual run time for that job, counted in ``fallback_estimates``.
Bids must be finite and >= 0: the paper gives a negative bid no meaning (the running job would
"pay" a negative price), so every entry (:func:`make_priority_mechanism`, a
:class:`PriorityScheduler` built directly, :meth:`~PriorityScheduler.add_jobs`,
:meth:`~PriorityScheduler.rebid`) refuses one, naming the job row.
Jobs must be serial (1 processor): split parallel jobs first
(:func:`marketsched.workloads.transforms.split_parallel`), as the paper does; or build the
scheduler with ``whole_jobs=True`` (the live market, where a job asks for ``K`` CPUs and cannot be
split), which decides on whole parallel jobs by the rule below.

Whole parallel jobs (``whole_jobs=True``; an extension: Shudler et al. (2010) model serial jobs
only). Decision: the list order stays the paper's (key descending, then submission), and a job
needing ``K`` processors runs only with all ``K`` at once; the order is *strict*: a job that does
not fit blocks every job after it (no job overtakes a better one because it is narrower, as in
FCFS without backfilling), so a wide job is never starved by a stream of narrow ones. Steps of
one decision:

1. (capacity fell below the processors in use) stop the worst running jobs until the rest fit;
2. HB: the running set becomes the longest prefix of the order whose processors fit: while the
   best queued job ``q`` does not fit in the free processors and a running job is after ``q``
   in the order, preempt the worst running job; when ``q`` fits, start it; stop when ``q`` does not
   fit and every running job is before it (``q`` waits; so do all jobs after it);
3. NPHB, WSPT, WSEPT: start the best queued job while it fits; stop at the first that does not.

With serial jobs these are exactly the steps above (every job fits one free processor). The
payment schemes charge per processor (:mod:`~marketsched.mechanisms.online.pricing`): a job on
``K`` processors pays ``K`` times the price per unit of time.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from marketsched.engine import compiled
from marketsched.engine.records import Records, empty_records
from marketsched.engine.state import ClusterState, require_serial
from marketsched.mechanisms.online.pricing import (
    FirstPrice,
    FirstPriceSaturation,
    KthPrice,
    KthPriceUncapped,
    make_pricing,
)

RULES = ("hb", "nphb", "wspt", "wsept")


class PriorityScheduler:
    """Static-priority list scheduling of serial jobs with a payment scheme.

    Parameters
    ----------
    bid:
        Reported bid per unit of running time of each job (the mechanism never sees true values).
    key:
        Priority of each job (higher runs first).
    cost:
        ``c_i`` with ``key = bid / cost``: converts a key back to a bid for the k-th price.
    preemptive:
        True for HB, False for NPHB, WSPT, WSEPT.
    pricing:
        A payment scheme object or name (``"first"`` or ``"kth"``).

    Notes
    -----
    Rows are job indices in the engine, in submission order; more can be appended with
    :meth:`add_jobs`.
    """

    #: Per-job inputs taken from the reports (:mod:`marketsched.engine.snapshot`): no decision
    #: looks at a job before it arrives, so an audit rerun may start at the deviator's arrival.
    report_columns = ("bid", "key", "cost", "prio", "fallback_estimates")
    #: The per-job lists of the Python path, made from the NumPy columns when first needed (a
    #: compiled run reads the columns and never makes them).
    _LISTS = frozenset(("bid", "key", "cost", "prio"))
    bid: list[float]
    key: list[float]
    cost: list[float]
    prio: list[tuple]  # (-key, row): smaller is better

    def __init__(self, bid, key, cost, preemptive: bool, pricing="kth", name: str = "priority",
                 whole_jobs: bool = False):
        self.preemptive = bool(preemptive)
        self.whole_jobs = bool(whole_jobs)  # parallel jobs as wholes (module docstring); else serial only
        self.queued_procs = 0  # processors the queued jobs ask for (kept with whole_jobs only)
        self.pricing = make_pricing(pricing) if isinstance(pricing, str) else pricing
        self.name = name
        empty = np.empty(0, dtype=np.float64)
        self._columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = (empty, empty, empty)  # bid, key, cost
        self.sim: ClusterState | None = None
        self.fallback_estimates = 0  # WSEPT: jobs without a run-time estimate (make_priority_mechanism)
        self.add_jobs(bid, key, cost)

    def __getattr__(self, name: str):
        if name in PriorityScheduler._LISTS and self.__dict__.get("_columns") is not None:
            self._make_lists()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _make_lists(self) -> None:
        assert self._columns is not None
        bid, key, cost = self._columns
        self._columns = None
        self.bid = bid.tolist()
        self.key = key.tolist()
        self.cost = cost.tolist()
        self.prio = list(zip((-key).tolist(), range(key.shape[0])))

    def add_jobs(self, bid, key, cost) -> range:
        """Append jobs (rows continue after the existing ones); returns their rows."""
        bid = np.atleast_1d(np.asarray(bid, dtype=np.float64))
        key = np.atleast_1d(np.asarray(key, dtype=np.float64))
        cost = np.atleast_1d(np.asarray(cost, dtype=np.float64))
        if not bid.shape == key.shape == cost.shape or bid.ndim != 1:
            raise ValueError(f"{self.name}: bid, key and cost must be 1-d and of one length")
        first = len(self.key) if self._columns is None else self._columns[1].shape[0]
        _check_jobs(self.name, first, bid, key, cost)
        rows = range(first, first + key.shape[0])
        if self._columns is not None:
            self._columns = (np.concatenate((self._columns[0], bid)), np.concatenate((self._columns[1], key)),
                             np.concatenate((self._columns[2], cost)))
        else:
            self.bid += bid.tolist()
            self.key += key.tolist()
            self.cost += cost.tolist()
            self.prio += list(zip((-key).tolist(), rows))
        if self.sim is not None:
            self.pricing.extend(len(rows))
        return rows

    # ------------------------------------------------------------------ engine hooks
    def bind(self, sim) -> None:
        if len(self.bid) != sim.n_jobs:
            raise ValueError(f"{self.name}: {len(self.bid)} bids for {sim.n_jobs} jobs")
        if not self.whole_jobs:
            require_serial(self.name, sim.procs)
        self.sim = sim
        self.queued_procs = 0
        self.waiting: list[tuple] = []  # heap of (-key, row)
        self.running_heap: list[tuple] = []  # heap of (key, -row): top = worst running (HB only)
        self.pricing.bind(self, sim)
        self.advance = self.pricing.advance

    def compiled_run(self, sim) -> Records | None:
        """The whole run in the compiled kernel (:mod:`marketsched.engine.compiled`), or None when
        it is not built or the payment scheme is not first price, k-th price (capped or not) or
        first and k-th side by side (``BothPrices``, whose k-th payments it sets), or the policy is
        a subclass (it may change a step the kernel does not know of)."""
        schemes = _kernel_schemes(self.pricing, self)
        if schemes == 0 or type(self) is not PriorityScheduler:
            return None
        kernel = compiled.kernel("_priority")
        if kernel is None:
            return None
        if self._columns is not None:
            bid, key, cost = self._columns
        else:
            bid, key, cost = (np.asarray(c, dtype=np.float64) for c in (self.bid, self.key, self.cost))
        n = sim.n_jobs
        if bid.shape[0] != n:
            raise ValueError(f"{self.name}: {bid.shape[0]} bids for {n} jobs")
        w = sim.workload
        if self.whole_jobs and bool((w.procs != 1).any()):
            return None  # the kernel schedules serial jobs: parallel ones take the Python path
        require_serial(self.name, w.procs)
        records = empty_records(n)
        kth = np.zeros(n if schemes == 3 else 0, dtype=np.float64)
        saturation = type(self.pricing) is FirstPriceSaturation
        full, ran = np.zeros((2, n if saturation else 0), dtype=np.float64)
        sim.now, sim.batches = kernel.run(
            np.ascontiguousarray(w.submit_time, dtype=np.float64), np.ascontiguousarray(w.runtime, dtype=np.float64),
            bid, key, cost, sim.capacity, self.preemptive, schemes, records.first_start, records.end_time,
            records.preemptions, records.payment, records.state, kth, full, ran)
        if schemes == 3:
            self.pricing.kth_payment = kth
        if saturation:
            self.pricing.full, self.pricing.ran = full, ran
        return records

    def _engine(self) -> ClusterState:
        """The engine this policy was bound to."""
        if self.sim is None:
            raise RuntimeError(f"{self.name}: not bound to an engine yet (bind first)")
        return self.sim

    def step(self, t: float, arrived: range, completed: list[int]) -> None:
        sim = self._engine()
        pricing = self.pricing
        prio = self.prio
        waiting = self.waiting
        push, pop = heapq.heappush, heapq.heappop
        for j in completed:
            pricing.on_stop(j)
        for j in arrived:
            push(waiting, prio[j])
        if self.whole_jobs:
            self.queued_procs += sum(sim.procs[j] for j in arrived)
            self._fill_whole()
            pricing.update()
            return
        free = sim.free
        if free < 0:
            self._shed(-free)
            free = 0
        if self.preemptive:
            running_heap = self.running_heap
            running = sim.running
            key = self.key
            while free and waiting:
                j = pop(waiting)[1]
                sim.start(j)
                pricing.on_start(j)
                push(running_heap, (key[j], -j))
                free -= 1
            while waiting:
                while running_heap and not running[-running_heap[0][1]]:
                    pop(running_heap)  # completed since it was pushed
                if not running_heap:
                    break
                k_out, neg_out = running_heap[0]
                if waiting[0] > (-k_out, -neg_out):
                    break
                # the best queued job beats the worst running one: swap them
                pop(running_heap)
                j_out = -neg_out
                sim.preempt(j_out)
                pricing.on_stop(j_out)
                j_in = pop(waiting)[1]
                sim.start(j_in)
                pricing.on_start(j_in)
                push(running_heap, (key[j_in], -j_in))
                push(waiting, prio[j_out])
        else:
            while free and waiting:
                j = pop(waiting)[1]
                sim.start(j)
                pricing.on_start(j)
                free -= 1
        pricing.update()

    def _fill_whole(self) -> None:
        """The decision of :meth:`step` on whole parallel jobs (steps 1-3 of the module
        docstring), once the completions are settled and the arrivals queued."""
        sim = self._engine()
        pricing = self.pricing
        prio = self.prio
        waiting = self.waiting
        procs = sim.procs
        push, pop = heapq.heappush, heapq.heappop
        free = sim.free
        if free < 0:
            self._shed(-free)
            free = sim.free
        if self.preemptive:
            running_heap = self.running_heap
            running = sim.running
            key = self.key
            while waiting:
                top = waiting[0]
                j = top[1]
                if procs[j] <= free:
                    pop(waiting)
                    self.queued_procs -= procs[j]
                    sim.start(j)
                    pricing.on_start(j)
                    push(running_heap, (key[j], -j))
                    free -= procs[j]
                    continue
                while running_heap and not running[-running_heap[0][1]]:
                    pop(running_heap)  # completed since it was pushed
                if not running_heap:
                    break
                k_out, neg_out = running_heap[0]
                if top > (-k_out, -neg_out):
                    break  # every running job is before the top one: it waits, and so does every job after it
                pop(running_heap)
                j_out = -neg_out
                sim.preempt(j_out)
                pricing.on_stop(j_out)
                push(waiting, prio[j_out])
                self.queued_procs += procs[j_out]
                free += procs[j_out]
        else:
            while waiting and procs[waiting[0][1]] <= free:
                j = pop(waiting)[1]
                self.queued_procs -= procs[j]
                sim.start(j)
                pricing.on_start(j)
                free -= procs[j]

    def _shed(self, n: int) -> None:
        """The engine's capacity fell below the processors in use (the live market: a node of
        the cluster went down): stop the ``n`` worst running jobs, exactly those that would not
        run with fewer processors. Shudler et al. (2010) have a fixed machine; decision: the
        jobs stop in the order HB preempts (lowest key first, among equal keys the latest
        submitted), under every rule, non-preemptive ones included (a job the machine cannot
        hold cannot keep running); each is preempted (its payment settled, back in the queue
        with its remaining work) and restarts as any preempted job when processors return.

        ``n`` counts processors: with whole parallel jobs the worst jobs stop until they have
        freed ``n`` processors (serial jobs: ``n`` jobs).

        Steps: 1. the running jobs ordered worst first (HB: the running heap, lazily cleaned;
        other rules: one sort of the running rows, a rare event); 2. preempt them in that order
        until ``n`` processors are freed.
        """
        sim = self._engine()
        running = sim.running
        procs = sim.procs
        victims: list[int] = []
        freed = 0
        if self.preemptive:
            heap = self.running_heap
            while freed < n and heap:
                k, neg = heapq.heappop(heap)
                if running[-neg]:
                    victims.append(-neg)
                    freed += procs[-neg]
        else:
            key = self.key
            for j in sorted((j for j, r in enumerate(running) if r), key=lambda j: (key[j], -j)):
                if freed >= n:
                    break
                victims.append(j)
                freed += procs[j]
        for j in victims:
            sim.preempt(j)
            self.pricing.on_stop(j)
            heapq.heappush(self.waiting, self.prio[j])
            if self.whole_jobs:
                self.queued_procs += procs[j]

    def close(self, t: float) -> None:
        running = self._engine().running
        for j, is_running in enumerate(running):
            if is_running:
                self.pricing.on_stop(j)

    def withdraw(self, j: int) -> bool:
        """Take queued job ``j`` out of the queue (the live market: cancelled, out of money, or
        its process ended while it was queued); returns False if it was not queued.

        Costs O(queue length) (a list removal and a re-heapify): withdrawals are rare user
        actions, and the hot path of :meth:`step` stays free of lazy-deletion checks. Call it
        between the engine's ``advance`` and ``step`` so the price integrals up to now use the
        old queue and the next :meth:`step` re-reads the best queued job.
        """
        entry = self.prio[j]
        try:
            self.waiting.remove(entry)
        except ValueError:
            return False
        heapq.heapify(self.waiting)
        if self.whole_jobs:
            self.queued_procs -= self._engine().procs[j]
        return True

    def rebid(self, j: int, bid: float, key: float) -> None:
        """Change the bid of job ``j`` (queued or running) to ``bid`` with priority ``key``
        (the live market's "change my bid"; Shudler et al. (2010) have no such event, see below).

        Steps: a running job's payment is settled at its old bid up to now and its price regime
        re-opened at the new one (the payment scheme's ``on_stop``/``on_start``, with the job
        still running); a queued job leaves the queue and re-enters it at its new place. The job
        keeps its row, so among equal keys it keeps its submission order (the paper's tie rule).
        The next :meth:`step` then decides as at any event: under HB a raised queued bid may
        preempt the lowest running one and a lowered running bid may be preempted; the
        non-preemptive rules only re-order the queue. Call it between the engine's ``advance``
        and ``step``, like :meth:`withdraw`; costs O(queue length) (a rare user action).
        """
        # The key may be +inf: WSPT/WSEPT give a job with a zero run time (estimate) that key
        # whatever its bid, on arrival and on a bid change alike.
        if not (math.isfinite(bid) and bid >= 0 and key >= 0 and (math.isfinite(key) or key == math.inf)):
            raise ValueError(f"{self.name}: new bid of job row {j} must be finite and >= 0 and its key >= 0, finite "
                             f"or +inf, got {bid!r}, {key!r}")
        running = self._engine().running[j]
        if running:
            self.pricing.on_stop(j)
            if self.preemptive:
                self.running_heap.remove((self.key[j], -j))
                heapq.heapify(self.running_heap)
        elif not self.withdraw(j):
            raise ValueError(f"{self.name}: job row {j} is neither running nor queued")
        self.bid[j] = float(bid)
        self.key[j] = float(key)
        self.prio[j] = (-float(key), j)
        if running:
            self.pricing.on_start(j)
            if self.preemptive:
                heapq.heappush(self.running_heap, (self.key[j], -j))
        else:
            heapq.heappush(self.waiting, self.prio[j])
            if self.whole_jobs:
                self.queued_procs += self._engine().procs[j]

    # ------------------------------------------------------------------ state for payment schemes
    def best_queued(self):
        """``(-key, row)`` of the best queued job, or None when the queue is empty."""
        return self.waiting[0] if self.waiting else None

    def active_jobs(self) -> int:
        """Processors asked for by the running and queued jobs (serial jobs: the number of
        active jobs, the paper's "active jobs"; whole parallel jobs count their processors)."""
        return self._engine().used + (self.queued_procs if self.whole_jobs else len(self.waiting))


def _check_jobs(name: str, first: int, bid: np.ndarray, key: np.ndarray, cost: np.ndarray) -> None:
    """Refuse jobs whose numbers mean nothing, naming the first such job row (``first`` = the row
    of ``bid[0]``): a bid is a price per second of running time, finite and >= 0 (Shudler et al.
    2010 give a negative bid no meaning: it would make the running job "pay" a negative price);
    ``cost`` (the divisor of the key) finite and >= 0; the key not NaN and >= 0, finite unless
    the cost is 0 (the key ``+inf`` of a job that takes no time, see the module decisions)."""
    checks = (
        ("bid", bid, ~(np.isfinite(bid) & (bid >= 0)), "bids must be finite and >= 0"),
        ("cost (key divisor)", cost, ~(np.isfinite(cost) & (cost >= 0)), "costs must be finite and >= 0"),
        ("priority", key, ~((key >= 0) & (np.isfinite(key) | (cost == 0))),
         "priorities must be >= 0, and finite unless the cost is 0 (bid not a number?)"),
    )
    for what, arr, bad, rule in checks:
        if bad.any():
            i = int(np.argmax(bad))
            x = float(arr[i])
            raise ValueError(f"{name}: {what} of job row {first + i} is {'NaN' if math.isnan(x) else repr(x)}; {rule}")


def _kernel_schemes(pricing, policy) -> int:
    """The compiled kernel's code of a payment scheme: 1 first price (also ``FirstPriceSaturation``,
    whose times the kernel fills), 2 k-th price, 3 both (the experiments' ``BothPrices``), 6 k-th
    price without caps (``KthPriceUncapped`` on a non-preemptive rule other than NPHB; on the others
    it tracks caps exactly as ``KthPrice``: 2), 0 for any other scheme (no kernel)."""
    if type(pricing) in (FirstPrice, FirstPriceSaturation):
        return 1
    if type(pricing) is KthPrice:
        return 2
    if type(pricing) is KthPriceUncapped:
        return 2 if policy.name == "nphb" or policy.preemptive else 6
    if (getattr(pricing, "name", None) == "first+kth" and type(getattr(pricing, "first", None)) is FirstPrice
            and type(getattr(pricing, "kth", None)) is KthPrice):
        return 3
    return 0


def priority_key(rule: str, bid, runtime, runtime_estimate):
    """``(key, cost)`` arrays of the rule's priority ``key = bid / cost`` (see the table above):
    ``cost`` is 1 for HB and NPHB, the run time for WSPT, the estimate (or, when it is NaN, the
    run time) for WSEPT, not rounded; a cost of 0 gives the key ``+inf`` (see the decisions
    above). Shared by the simulator's and the live market's construction of the mechanism."""
    bid = np.asarray(bid, dtype=np.float64)
    if rule in ("hb", "nphb"):
        cost = np.ones_like(bid)
    elif rule == "wspt":
        cost = np.asarray(runtime, dtype=np.float64)
    elif rule == "wsept":
        est = np.asarray(runtime_estimate, dtype=np.float64)
        cost = np.where(np.isnan(est), runtime, est)
    else:
        raise ValueError(f"unknown allocation rule {rule!r}; choose one of {', '.join(RULES)}")
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(cost > 0, bid / np.where(cost > 0, cost, 1.0), np.inf)
    return key, cost


def make_priority_mechanism(rule: str, workload, bid, pricing="kth", whole_jobs: bool = False) -> PriorityScheduler:
    """Build HB, NPHB, WSPT or WSEPT with a payment scheme for ``workload`` and ``bid``
    (``whole_jobs``: parallel jobs run whole, see the module docstring; else serial jobs only)."""
    bid = np.asarray(bid, dtype=np.float64)
    if bid.shape != (len(workload),):
        raise ValueError(f"expected one bid per job ({len(workload)}), got shape {bid.shape}")
    bad = ~(np.isfinite(bid) & (bid >= 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"bid of job row {i} (job {workload.job_id[i]}) is {float(bid[i])!r}, not a finite number >= 0")
    key, cost = priority_key(rule, bid, workload.runtime, workload.runtime_estimate)
    mech = PriorityScheduler(bid, key, cost, preemptive=(rule == "hb"), pricing=pricing, name=rule,
                             whole_jobs=whole_jobs)
    mech.fallback_estimates = int(np.isnan(workload.runtime_estimate).sum()) if rule == "wsept" else 0
    return mech
