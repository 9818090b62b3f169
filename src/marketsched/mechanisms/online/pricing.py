"""Payment schemes of the MOSIX market (Shudler et al. 2010, sections II.A and IV; adaptations in section V).

Both are per-unit-of-running-time prices, integrated over the time a job actually runs
(Algorithm 1, steps 2 and 5: every event adds ``p'_i * t'_i`` and resets ``t'_i``). Prices
change only at events, so each scheme keeps running integrals of its price path and settles a
job's payment whenever the job stops or its price regime changes; no per-event loop over running
jobs. The integrals keep full relative precision however long the clock has run and however far
the bids spread: the k-th price's ``k* dt`` are sums of the intervals a job ran through
(:class:`~marketsched.mechanisms.online.interval_sums.IntervalSums`), not the difference of one
running total taken at its start and stop, which loses a small payment once the total is large;
plain time spans are compensated totals
(:class:`~marketsched.mechanisms.online.interval_sums.TimeSum`).

The reservation price of every node is :data:`RESERVATION_PRICE` = 1 per unit of time.

Prices are per node (processor): a job that runs on ``K`` processors (the live market's parallel
jobs, :mod:`~marketsched.mechanisms.online.priority` with ``whole_jobs``) pays ``K`` times the
price per unit of time, as ``K`` serial jobs at that price would (decision: Shudler et al. 2010
split parallel jobs into serial ones, each paying for its node). Serial jobs pay the price.

Decisions (open in the paper): "active jobs" counts running plus queued jobs; prices
are taken exactly as the paper states them, with no floor at the reservation price, so a job
whose bid is below 1 pays its bid under first price while the machine is full (and the k-th
price can be below 1 when every queued bid is).
"""

from __future__ import annotations

from bisect import bisect_right, insort

from marketsched.mechanisms.online.interval_sums import IntervalSums, TimeSum

RESERVATION_PRICE = 1.0
INF = float("inf")
_NO_QUEUE = (float("inf"), 0)  # boundary when the queue is empty: no running job is after it


class FirstPrice:
    """First price: a running job pays its own bid ``w~_i`` per unit of running time while the
    number of active (running + queued) jobs is at least the number of nodes, and the
    reservation price 1 otherwise (Shudler et al. 2010, section IV).

    Steps: keep the time saturated ("active >= nodes") and the time not, as compensated totals
    (:class:`~marketsched.mechanisms.online.interval_sums.TimeSum`); a job that ran from ``a`` to
    ``b`` pays ``bid * S + 1 * U`` with ``S`` and ``U`` the saturated and unsaturated time between
    ``a`` and ``b``.
    """

    name = "first"

    def bind(self, policy, sim) -> None:
        self.sim = sim
        self.policy = policy
        self.bid = policy.bid
        self.S = TimeSum()  # time saturated
        self.U = TimeSum()  # time not saturated
        self.last = 0.0
        self.saturated = False
        self.mark_S: list[tuple[float, float]] = []  # readings of S and U when the job started
        self.mark_U: list[tuple[float, float]] = []
        self.extend(sim.n_jobs)

    def extend(self, k: int) -> None:
        """Make room for ``k`` more jobs (added while running)."""
        self.mark_S += [(0.0, 0.0)] * k
        self.mark_U += [(0.0, 0.0)] * k

    def advance(self, t: float) -> None:
        dt = t - self.last
        if dt:
            (self.S if self.saturated else self.U).add(dt)
        self.last = t

    def on_start(self, j: int) -> None:
        self.mark_S[j] = self.S.mark()
        self.mark_U[j] = self.U.mark()

    def on_stop(self, j: int) -> None:
        self.sim.payment[j] += self.sim.procs[j] * (self.bid[j] * self.S.since(self.mark_S[j])
                                                    + RESERVATION_PRICE * self.U.since(self.mark_U[j]))

    def update(self) -> None:
        """Called after every decision: re-read the state the price depends on."""
        self.saturated = self.policy.active_jobs() >= self.sim.capacity

    # -- read-only queries for a market that charges running jobs as they go (marketsched.live)
    def rate(self, j: int) -> float:
        """Price per unit of time job ``j`` pays right now (0 when it is not running)."""
        if not self.sim.running[j]:
            return 0.0
        return self.sim.procs[j] * (self.bid[j] if self.saturated else RESERVATION_PRICE)

    def regime(self):
        """What the price of every running job depends on between two events (saturated or
        not): with :meth:`rate_in`, the price a job paid at an earlier time (the live market's
        settlement of a job whose node failed before the market learnt it)."""
        return self.saturated

    def rate_in(self, j: int, regime) -> float:
        """Price per unit of time running job ``j`` pays under ``regime`` (from :meth:`regime`)."""
        return self.bid[j] if regime else RESERVATION_PRICE

    def accrued(self, j: int) -> float:
        """Payment of job ``j`` so far: what is settled plus its open running interval up to the
        last :meth:`advance`; changes no state."""
        paid = self.sim.payment[j]
        if self.sim.running[j]:
            paid += self.sim.procs[j] * (self.bid[j] * self.S.since(self.mark_S[j])
                                         + RESERVATION_PRICE * self.U.since(self.mark_U[j]))
        return paid


class KthPrice:
    """k-th price: every running job pays the smallest bid with which it would still be
    running, i.e. the priority of the highest-priority *queued* job converted back to a bid;
    with an empty queue it pays the reservation price 1 (Shudler et al. 2010, section IV; adaptations
    for the non-preemptive algorithms in section V).

    With priority key ``k_i = w~_i / c_i`` (``c_i = 1`` for HB and NPHB, the run time for WSPT,
    the run-time estimate for WSEPT) and ``k*`` the key of the best queued job, running job
    ``i`` pays per unit of time

    * ``1`` if the queue is empty;
    * ``c_i * min(k_i, k*)`` otherwise, i.e. ``min(w~_i, c_i k*)``: the same ratio ``k_i = w~_i / c_i``
      as the allocation's key, with the run time (estimate) not rounded. A job of divisor
      ``c_i = 0`` (key ``+inf``, see :mod:`~marketsched.mechanisms.online.priority`) pays 0: any
      bid keeps its place. While the best queued job has divisor 0 (``k* = +inf``), a running
      job with ``c_i > 0`` pays its bid.

    Under HB (preemptive) the running jobs are the top ``n``, so ``k_i >= k*`` and this is the
    uniform price ``k*`` = the (n+1)-th highest active bid. Under NPHB it is
    ``min(w~_i, max queued bid)``, the paper's "reduced to the first price whenever the bid of a
    running job was smaller than the maximal bid of a queued job". Under WSPT it is
    ``min(w~_i, (w~_j / tau_j) * tau_i)`` with ``j`` the best queued job: the paper's formula,
    capped at the job's own bid (a decision: the paper states no cap; the cap keeps
    ``k-th <= first <= bid``).

    Steps: record, for every interval between two events, ``k* dt`` in ``K``
    (:class:`~marketsched.mechanisms.online.interval_sums.IntervalSums`) while the queue is
    non-empty and ``k*`` is finite (when it is ``+inf`` every uncapped running job has ``c_i = 0`` and pays nothing), and
    add ``dt`` to the time ``E`` with an empty queue (a compensated total,
    :class:`~marketsched.mechanisms.online.interval_sums.TimeSum`); an uncapped job pays ``c_i``
    times the sum of ``K``'s intervals since it was marked plus the growth of ``E``. A running job is *uncapped* (pays ``c_i k*``) or *capped*
    (``k_i < k*``, pays its bid). Running jobs are kept sorted by priority ``(-key, row)``, so
    when ``k*`` moves only the jobs whose priority lies between the old and new boundary change regime
    and are settled.
    """

    name = "kth"

    def bind(self, policy, sim) -> None:
        self.sim = sim
        self.policy = policy
        self.bid = policy.bid
        self.cost = policy.cost
        self.prio = policy.prio
        self.track_caps = not policy.preemptive  # under preemptive HB no running job is ever capped
        self.K = IntervalSums()  # k* dt per interval
        self.E = TimeSum()  # time with an empty queue
        self.last = 0.0
        self.kstar = None  # key of the best queued job, None when the queue is empty
        self.boundary = _NO_QUEUE  # (-key, row) of the best queued job; running jobs after it are capped
        self.mark_K: list[int] = []  # mark of K and reading of E when the job's regime opened
        self.mark_E: list[tuple[float, float]] = []
        self.mark_t: list[float] = []
        self.capped: list[bool] = []
        self.running_prios: list[tuple] = []  # sorted (-key, row) of running jobs (non-preemptive)
        self.extend(sim.n_jobs)

    def extend(self, k: int) -> None:
        """Make room for ``k`` more jobs (added while running)."""
        self.mark_K += [0] * k
        self.mark_E += [(0.0, 0.0)] * k
        self.mark_t += [0.0] * k
        self.capped += [False] * k

    def advance(self, t: float) -> None:
        dt = t - self.last
        if dt:
            if self.kstar is None:
                self.E.add(dt)
            elif self.kstar != INF:
                self.K.add(self.kstar * dt)
        self.last = t

    def _mark(self, j: int) -> None:
        self.mark_K[j] = self.K.mark()
        self.mark_E[j] = self.E.mark()
        self.mark_t[j] = self.last

    def _open(self, j: int, peek: bool = False) -> float:
        """Payment of ``j``'s open regime up to the last :meth:`advance` (``peek``: without making
        the pending intervals a leaf, for the read-only :meth:`accrued`)."""
        if self.capped[j]:
            return self.sim.procs[j] * self.bid[j] * (self.last - self.mark_t[j])
        K = self.K.peek(self.mark_K[j]) if peek else self.K.since(self.mark_K[j])
        return self.sim.procs[j] * (self.cost[j] * K + RESERVATION_PRICE * self.E.since(self.mark_E[j]))

    def _settle(self, j: int) -> None:
        self.sim.payment[j] += self._open(j)

    def on_start(self, j: int) -> None:
        self._mark(j)
        if self.track_caps:
            p = self.prio[j]
            insort(self.running_prios, p)
            self.capped[j] = p > self.boundary

    def on_stop(self, j: int) -> None:
        self._settle(j)
        if self.track_caps:
            rp = self.running_prios
            del rp[bisect_right(rp, self.prio[j]) - 1]
            self.capped[j] = False

    def update(self) -> None:
        """Called after every decision: re-read the best queued job and re-cap running jobs."""
        top = self.policy.best_queued()
        if top is None:
            self.kstar = None
            new_boundary = _NO_QUEUE
        else:
            self.kstar = -top[0]
            new_boundary = top
        old = self.boundary
        if self.track_caps and new_boundary != old:
            rp = self.running_prios
            lo, hi = (new_boundary, old) if new_boundary < old else (old, new_boundary)
            become_capped = new_boundary < old
            for idx in range(bisect_right(rp, lo), bisect_right(rp, hi)):
                j = rp[idx][1]
                if self.capped[j] != become_capped:
                    self._settle(j)
                    self._mark(j)
                    self.capped[j] = become_capped
        self.boundary = new_boundary

    # -- read-only queries for a market that charges running jobs as they go (marketsched.live)
    def rate(self, j: int) -> float:
        """Price per unit of time job ``j`` pays right now (0 when it is not running)."""
        if not self.sim.running[j]:
            return 0.0
        n = self.sim.procs[j]
        if self.capped[j]:
            return n * self.bid[j]
        if self.kstar is None:
            return n * RESERVATION_PRICE
        return n * self.cost[j] * self.kstar if self.cost[j] else 0.0

    def regime(self):
        """What the price of every running job depends on between two events: the best queued
        key and the boundary of the capped jobs (see :meth:`FirstPrice.regime`)."""
        return self.kstar, self.boundary

    def rate_in(self, j: int, regime) -> float:
        """Price per unit of time running job ``j`` pays under ``regime`` (from :meth:`regime`),
        as the integrals count it: capped, its bid; an empty queue, 1; else ``c_j k*``, nothing
        while ``k*`` is infinite."""
        kstar, boundary = regime
        if self.track_caps and self.prio[j] > boundary:
            return self.bid[j]
        if kstar is None:
            return RESERVATION_PRICE
        return self.cost[j] * kstar if kstar != INF else 0.0

    def accrued(self, j: int) -> float:
        """Payment of job ``j`` so far: what is settled plus its open running interval up to the
        last :meth:`advance`; changes no state."""
        paid = self.sim.payment[j]
        if self.sim.running[j]:
            paid += self._open(j, peek=True)
        return paid


class FirstPriceSaturation(FirstPrice):
    """First price that also keeps each job's run time while the machine is full (``full``) and in
    all (``ran``), per job: the decomposition of the first-price revenue ``sum(run time) +
    sum((bid - 1) * S)`` of Shudler et al. (2010), section V, that the reproduction reports.

    Steps: as :class:`FirstPrice`; when a job stops, the saturated time ``s`` and the unsaturated
    time ``u`` since it started are added to ``full`` (``s``) and ``ran`` (``s + u``) before the
    payment."""

    name = "first"

    def bind(self, policy, sim) -> None:
        import numpy as np  # here: the module itself needs no NumPy

        super().bind(policy, sim)
        self.full = np.zeros(sim.n_jobs)
        self.ran = np.zeros(sim.n_jobs)

    def on_stop(self, j: int) -> None:
        s, u = self.S.since(self.mark_S[j]), self.U.since(self.mark_U[j])
        self.full[j] += s
        self.ran[j] += s + u
        super().on_stop(j)


class KthPriceUncapped(KthPrice):
    """k-th price with WSPT's (and WSEPT's) adaptation read without the cap: an open choice of Shudler et al. (2010),
    section V, whose formula ``(w~_j / tau_j) * tau_i`` states no cap; :class:`KthPrice` caps it at the
    job's bid (the default). Run by the reproduction as a variant, not a recommendation.

    Steps: as :class:`KthPrice`, except that under WSPT and WSEPT no running job is ever capped, so a
    running job whose ratio lies below the best queued job's pays ``c_i k*``, more than its bid (its
    utility can be negative). NPHB keeps the paper's own rule ("reduced to the first price whenever the
    bid of a running job was smaller than the maximal bid of a queued job", i.e. capped); under HB no
    running job is ever capped anyway. Decision: while the best queued job has divisor 0 (``k* = +inf``,
    a run time of 0), the paper's formula is unbounded; an uncapped job pays nothing then (the
    integral of ``k*`` is kept only while it is finite), where the capped rule charges the bid.
    """

    name = "kth-uncapped"

    def bind(self, policy, sim) -> None:
        super().bind(policy, sim)
        self.track_caps = not policy.preemptive and policy.name == "nphb"


SCHEMES = {"first": FirstPrice, "kth": KthPrice, "kth-uncapped": KthPriceUncapped}


def make_pricing(name: str):
    """A fresh payment scheme by name: ``"first"``, ``"kth"`` or ``"kth-uncapped"``."""
    try:
        return SCHEMES[name]()
    except KeyError:
        raise ValueError(f"unknown pricing {name!r}; choose one of {', '.join(SCHEMES)}") from None
