"""EES and relaxed EES as online policies on the discrete-event engine, trace-driven.

Source: Mutz (2008) (A. Mutz, "Eliciting Honest Behavior on Computational Grids"), chapter 4
(EES: FIFO batch queue, full-width jobs, run-or-discard rule 4.1-4.3, expected-externality
payments 4.4 with utilities 4.5/4.6) and chapter 6 (relaxed EES: jobs ask n nodes, delays
from two greedy schedules, section 6.1.3, rule 6.1-6.3, payments 6.4 with utilities
6.5/6.6). The mechanisms themselves (allocation, payments, ledger) are
:mod:`marketsched.mechanisms.online.ees`; this module only decides *when* they are asked,
*who* is in the queue, and turns their decisions into engine actions (``sim.start``,
``sim.discard``, ``sim.charge``, ``sim.wake_at``). The thesis has no discrete-event
simulation, no arrivals and no traces (it evaluates static snapshots): everything about time
below is a decision taken here, marked **Decision**.

Units. The engine works in seconds. A job's value ``v`` is in currency, its delay cost ``d``
in currency per ``time_unit`` seconds (default 3600: per hour, as in the thesis's figure 4.2
text; section 4.1.1 says per second). The policies hand the mechanism run times in seconds and ``d /
time_unit`` (currency per second), with the declared prior of ``d`` rescaled the same way,
so every product ``d * delay`` is in currency.

Shared decisions (both policies)
--------------------------------
* **Declared run time r** (:func:`declared_runtime`): the job's run-time estimate (SWF
  field 9, the user's request), which the thesis calls the *maximal* running time (section
  4.1.1). A job whose trace run time exceeds its request (the clean logs keep a few) is
  given ``r = actual run time``; a missing estimate (NaN) also gives the actual run time; and
  ``r >= 1 s`` (the mechanism needs r > 0). So ``r`` is always an upper bound of the run, no
  job is killed at r, and every plan built from ``r`` is feasible. The mechanism only ever
  sees ``r``, never the actual run time.
* **Early ends release their time**: a job that ends before ``start + r`` frees its
  processors at its actual end (the engine's completion); the next decision plans from the
  actual state (EES: the machine is idle again; relaxed EES: the availability profile is
  rebuilt at every decision from the running jobs' ``start + r`` and the committed jobs, so the
  unused rest of an early job's reservation is free for later decisions).
* **Who is in the queue I** (the thesis does not define it): jobs that have arrived and on which no decision has
  been taken yet, in submission order (ties in workload row order). Running jobs and, in the
  relaxed EES, accepted jobs waiting for their planned start (committed) are not in I.
* **Payments** (the thesis does not say when they are charged): at every decision every job in I is charged its ``mu`` through
  ``sim.charge`` (positive: it pays; negative: it receives), also the discarded front job;
  the same decision is recorded in the policy's :class:`~marketsched.mechanisms.online.ees.Ledger`
  (``policy.ledger``, job ids = workload rows). No budgets; balances may go negative.
* **Randomness**: one ``numpy.random.Generator`` (``seed``) feeds the Monte Carlo draws of all
  decisions in order. The allocation never depends on the draws (rule 4.3/6.3 uses the
  reports only), so two seeds give the same schedule and different payment estimates.
* **Reports are the true types** (truthful users: the mechanisms are designed to make
  honesty a Bayes-Nash equilibrium; the trace study measures outcomes, not incentives).

EESPolicy (chapter 4)
---------------------
Steps of ``step(t, arrived, completed)``:

1. append the arrivals to the FIFO queue;
2. if the machine is idle (the job it ran has completed) and the queue is not empty, take the
   decision for the head on the snapshot of the whole queue (``EES.decide``): charge every
   queued job its payment; if the head runs, start it now and stop (the machine is busy);
   otherwise discard it (zero time, a decision) and decide on the new head.

**Decision (full width)**: as in the thesis's batch queue every job holds the whole machine,
so one job runs at a time whatever its trace node count; the engine still books the job's
own processors, so the reported utilization is the processors really used (the rest idle:
the price of the full-width model on a parallel machine).

RelaxedEESPolicy (chapter 6)
----------------------------
Jobs keep their node counts. **Decision (execution; chapter 6 leaves it open)**: an accepted job is
committed to its planned start (its start in the greedy schedule with it, ``dec.start_time``)
and started then, through a timer (``sim.wake_at``); the plan is a promise not to start it
*later*. **Decision (compression, ``compress=True``, the default)**: when a job ends before its
declared end, the committed jobs are re-placed in order of planned start, each at its earliest
window (the compression of conservative backfilling, Mu'alem & Feitelson 2001); no job moves
later (see ``_compress``), and a job moved to ``t`` starts at once. With ``compress=False``
committed starts are kept as planned: the time an early job releases is only used by later
decisions. Run-time estimates in real logs are loose (SDSC-SP2: requests about twice the run
times), so without compression committed jobs idle behind released time: the report shows both.
**Decision (when the head is considered)**: the head of the queue is considered

* at every completion (processors free) and every committed start (the job ahead left the
  queue), and
* at an arrival only when no accepted job is waiting for its planned start (the relaxed
  analogue of "a job arrives to an idle machine": the scheduler is not holding a reservation
  for an earlier head);

and at such a *decision point* the queue is worked from the head: a discarded head leaves and
the next is considered; an accepted head that can start now starts and the next is
considered; the first accepted head whose planned start is in the future is committed and
ends the pass (like the EES's "the machine is now busy"). Without this gate every arrival
would be decided alone (I = 1: it always runs and pays nothing) and the mechanism would
degenerate into conservative backfilling; with it, jobs queue while the machine is saturated
and the decision weighs them.

Steps of ``step(t, arrived, completed)``:

1. forget completed jobs; after a completion, compress the commitments (if ``compress``);
   start every committed job whose planned start is ``t`` (the plan is feasible because
   ``r`` bounds every run, so its processors are free);
2. append the arrivals to the queue; stop here if this is not a decision point;
3. build the availability profile at ``t``: running jobs on ``[t, start + r)``, committed
   jobs on ``[planned, planned + r)`` (vectorised, :func:`profile_of`);
4. while the queue is not empty: ``RelaxedEES.decide(snapshot, rng, profile)`` (delays from
   the two greedy schedules over that profile, section 6.1.3); charge every queued job;
   discard the head, or reserve it in the profile at ``dec.start_time`` and start it now (if
   ``start_time == t``) or commit it, ask for a timer and stop.

Utility of a job (:func:`realised_utility`), from the thesis's utilities 4.5/4.6 (EES) and
6.5/6.6 (relaxed EES): the front job gains ``v`` if it runs, 0 if discarded (4.5/6.5); a
waiting job loses ``d`` per unit of the delay a run ahead of it causes (4.6: ``d * r_i``; 6.6:
``d * delay(i)``). Summed over a job's life, and measured ex post on the engine (actual
waits, not declared run times), with the quasi-linear payoff of chapter 3:

    u_j = v_j * 1{j completed} - d_j * q_j / time_unit - p_j

where ``q_j`` is the time the job spent queued (start - submit if it started, else the time
it was discarded - submit) and ``p_j`` its total payment. The same formula scores FCFS and
EASY (``p_j = 0``, nothing discarded).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .ees import EES, Discrete, Ledger, QueueSnapshot, RelaxedEES, TypePrior, Uniform
from .profile import AvailabilityProfile, ListProfile

__all__ = ["EESPolicy", "RelaxedEESPolicy", "declared_runtime", "synthesize_types", "realised_utility",
           "queue_time", "profile_of", "per_second_prior"]


# --------------------------------------------------------------------------- inputs
def declared_runtime(workload) -> tuple[np.ndarray, dict]:
    """Declared maximal run time r per job (seconds) and counts of the adjustments made.

    r = max(estimate, actual run time, 1 s); a NaN estimate counts as the actual run time
    (see the module docstring). Returns ``(r, {"missing": .., "raised": .., "floored": ..})``.
    """
    est = np.asarray(workload.runtime_estimate, dtype=np.float64)
    rt = np.asarray(workload.runtime, dtype=np.float64)
    missing = np.isnan(est)
    base = np.where(missing, rt, est)
    raised = ~missing & (est < rt)
    r = np.maximum(base, rt)
    floored = r < 1.0
    r = np.maximum(r, 1.0)
    return r, {"missing": int(missing.sum()), "raised": int(raised.sum()), "floored": int(floored.sum())}


def synthesize_types(workload, prior: TypePrior, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Value v and delay cost d (per ``time_unit`` of the prior) for every job of a trace.

    Model: each job's (v, d) is drawn from the mechanism's declared prior (the Bayes-Nash
    guarantee of EES assumes types come from the prior the payments use), i.i.d.
    across jobs and independent of the job's size. Seeded per job: job ``k`` draws v then d
    from ``numpy.random.default_rng([seed, job_id_k])``, so a job has the same type in every
    mechanism (common random numbers) and in every slice of the trace that contains it.
    """
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"synthesize_types: seed must be a non-negative integer, got {seed!r}")
    ids = np.asarray(workload.job_id)
    if len(ids) and ids.min() < 0:
        raise ValueError(f"synthesize_types: job ids must be non-negative, found {int(ids.min())}")
    n = len(ids)
    v, d = np.empty(n), np.empty(n)
    for k, jid in enumerate(ids.tolist()):
        g = np.random.default_rng([int(seed), int(jid)])
        v[k] = prior.value.sample(g, None)
        d[k] = prior.delay_cost.sample(g, None)
    return v, d


def per_second_prior(prior: TypePrior, time_unit: float) -> TypePrior:
    """The same prior with the delay cost rescaled from per ``time_unit`` to per second."""
    dc = prior.delay_cost
    if isinstance(dc, Uniform):
        dc = Uniform(dc.low / time_unit, dc.high / time_unit)
    elif isinstance(dc, Discrete):
        dc = type(dc)(tuple(x / time_unit for x in dc.values), tuple(dc.probs))  # keeps a subclass's sampler
    else:
        raise ValueError(f"per_second_prior: unsupported delay-cost prior {type(dc).__name__}")
    return TypePrior(value=prior.value, delay_cost=dc)


def queue_time(workload, records) -> np.ndarray:
    """Time each job spent queued: first start - submit, or (never started) end - submit."""
    start = np.asarray(records.first_start, dtype=np.float64)
    end = np.asarray(records.end_time, dtype=np.float64)
    left = np.where(np.isnan(start), end, start)
    return left - np.asarray(workload.submit_time, dtype=np.float64)


def realised_utility(workload, records, value, delay_cost, time_unit: float = 3600.0) -> np.ndarray:
    """Per-job realised utility u_j = v_j 1{completed} - d_j q_j / time_unit - p_j.

    From the thesis's utilities 4.5/4.6 and 6.5/6.6 summed over the job's life, measured on
    the engine (module docstring). ``delay_cost`` is per ``time_unit`` seconds.
    """
    from marketsched.engine.records import FinalState

    value = np.asarray(value, dtype=np.float64)
    delay_cost = np.asarray(delay_cost, dtype=np.float64)
    if value.shape != (len(workload),) or delay_cost.shape != (len(workload),):
        raise ValueError(f"realised_utility: value {value.shape} and delay_cost {delay_cost.shape} must have "
                         f"one entry per job ({len(workload)})")
    done = np.asarray(records.state) == FinalState.COMPLETED
    return np.where(done, value, 0.0) - delay_cost * queue_time(workload, records) / time_unit - records.payment


def profile_of(capacity: int, origin: float, starts, ends, nodes) -> AvailabilityProfile:
    """Availability profile at ``origin`` holding the intervals [start, end) on ``nodes`` each.

    Built in one vectorised pass (sorted +n/-n events, cumulative sum) instead of one
    ``reserve`` per interval; the breakpoints are the given times exactly (no ``end - origin``
    arithmetic), so a plan never starts a job a rounding error before its predecessor ends.
    """
    prof = AvailabilityProfile(capacity, origin)
    starts = np.asarray(starts, dtype=np.float64)
    if len(starts) == 0:
        return prof
    ends = np.asarray(ends, dtype=np.float64)
    nodes = np.asarray(nodes, dtype=np.int64)
    if np.any(starts < origin) or np.any(ends <= starts):
        raise ValueError("profile_of: every interval must start at or after the origin and have positive length")
    t = np.concatenate(([origin], starts, ends))
    delta = np.concatenate(([0], nodes, -nodes))
    order = np.argsort(t, kind="stable")
    t, delta = t[order], delta[order]
    times, first = np.unique(t, return_index=True)
    used = np.cumsum(delta)[np.append(first[1:], len(t)) - 1]
    if used.max() > capacity:
        raise ValueError(f"profile_of: the intervals use {int(used.max())} nodes of {capacity}")
    prof.times = times
    prof.used = used.astype(np.int64)
    return prof


# --------------------------------------------------------------------------- policies
class _EESDriver:
    """Shared set-up of the two policies (inputs, mechanism, ledger, charging)."""

    name = "ees"

    def __init__(self, value, delay_cost, prior: TypePrior, *, n_draws: int = 200, estimator: str = "cached",
                 seed: int = 0, time_unit: float = 3600.0, runtime=None, fast: bool = True):
        self.value = np.asarray(value, dtype=np.float64)
        self.delay_cost = np.asarray(delay_cost, dtype=np.float64)
        if self.value.ndim != 1 or self.value.shape != self.delay_cost.shape:
            raise ValueError(f"{type(self).__name__}: value {self.value.shape} and delay_cost "
                             f"{self.delay_cost.shape} must be equal 1-D shapes")
        for name, a in (("value", self.value), ("delay_cost", self.delay_cost)):
            bad = np.flatnonzero(~np.isfinite(a))
            if len(bad):
                raise ValueError(f"{type(self).__name__}: {name} is not finite at row {bad[0]}")
        neg = np.flatnonzero(self.delay_cost < 0)
        if len(neg):
            raise ValueError(f"{type(self).__name__}: delay_cost must be >= 0, row {neg[0]} is {self.delay_cost[neg[0]]}")
        if not (np.isfinite(time_unit) and time_unit > 0):
            raise ValueError(f"{type(self).__name__}: time_unit must be positive and finite, got {time_unit!r}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"{type(self).__name__}: seed must be a non-negative integer, got {seed!r}")
        self.prior = prior
        self.n_draws = n_draws
        self.estimator = estimator
        self.seed = int(seed)
        self.time_unit = float(time_unit)
        self._runtime = None if runtime is None else np.asarray(runtime, dtype=np.float64)
        self._mech_prior = per_second_prior(prior, self.time_unit)
        self.fast = bool(fast)  # the mechanism's fast paths; False: the reference (tests hold both equal)
        EES(self._mech_prior, n_draws, estimator)  # validates n_draws and estimator now

    def bind(self, sim) -> None:
        self.sim = sim
        n = sim.n_jobs
        if self.value.shape != (n,):
            raise ValueError(f"{type(self).__name__}: {len(self.value)} values for a workload of {n} jobs")
        if self._runtime is None:
            self.runtime, self.runtime_adjustments = declared_runtime(sim.workload)
        else:
            if self._runtime.shape != (n,):
                raise ValueError(f"{type(self).__name__}: runtime has shape {self._runtime.shape}, expected ({n},)")
            bad = np.flatnonzero(~(self._runtime >= sim.workload.runtime) | ~np.isfinite(self._runtime)
                                 | (self._runtime <= 0))
            if len(bad):
                raise ValueError(f"{type(self).__name__}: declared runtime of row {bad[0]} "
                                 f"({self._runtime[bad[0]]}) must be positive, finite and at least the actual "
                                 f"run time ({sim.workload.runtime[bad[0]]})")
            self.runtime, self.runtime_adjustments = self._runtime, {}
        bad = np.flatnonzero(~np.isfinite(self.runtime))
        if len(bad):
            raise ValueError(f"{type(self).__name__}: declared run time of row {bad[0]} is {self.runtime[bad[0]]} "
                             "(its run-time estimate is not finite)")
        self.d_per_second = self.delay_cost / self.time_unit
        self._procs = np.asarray(sim.workload.procs, dtype=np.int64)
        self.rng = np.random.default_rng(self.seed)
        self.ledger = Ledger()
        self.queue: deque[int] = deque()
        self.decisions = 0
        self.queue_lengths: list[int] = []  # I at each decision

    def _snapshot(self, nodes: bool) -> QueueSnapshot:
        rows = np.fromiter(self.queue, dtype=np.int64, count=len(self.queue))
        # every column was checked at bind (values, delay costs, run times; the workload's procs >= 1)
        return QueueSnapshot.of_checked(rows, self.value[rows], self.d_per_second[rows], self.runtime[rows],
                                        self._procs[rows] if nodes else None)

    def _charge(self, dec, t: float) -> None:
        self.ledger.charge(dec, time=t)
        self.decisions += 1
        self.queue_lengths.append(len(dec.job_ids))
        charge = self.sim.charge
        for j, mu in zip(dec.job_ids.tolist(), dec.payments.tolist()):
            charge(j, mu)


class EESPolicy(_EESDriver):
    """EES (Mutz 2008, chapter 4) on the engine: one full-width job at a time, FIFO, run or discard.

    ``value`` and ``delay_cost`` are the jobs' reports (one per workload row; ``delay_cost``
    per ``time_unit`` seconds), ``prior`` the declared :class:`TypePrior` in the same units,
    ``n_draws``/``estimator`` the Monte Carlo settings of the payments (eq. 4.4), ``seed``
    their random stream, ``runtime`` the declared run times (default
    :func:`declared_runtime`). Steps and decisions: module docstring.
    """

    name = "ees"

    def bind(self, sim) -> None:
        super().bind(sim)
        self.mechanism = EES(self._mech_prior, self.n_draws, self.estimator)
        self.current: int | None = None  # the job holding the machine

    def step(self, t: float, arrived: range, completed: list[int]) -> None:
        sim = self.sim
        self.queue.extend(arrived)
        if self.current is not None and not sim.running[self.current]:
            self.current = None
        queue = self.queue
        while self.current is None and queue:
            dec = self.mechanism.decide(self._snapshot(nodes=False), self.rng)
            self._charge(dec, t)
            head = queue.popleft()
            if dec.runs:
                sim.start(head)
                self.current = head
            else:
                sim.discard(head)


class RelaxedEESPolicy(_EESDriver):
    """Relaxed EES (Mutz 2008, chapter 6) on the engine: jobs with node counts, committed plans.

    Same arguments as :class:`EESPolicy`, plus ``compress`` (move commitments up after early
    ends); the machine's capacity comes from the engine. After the run,
    ``policy.planned_start`` maps each accepted row to ``dec.start_time`` (its actual start is
    that time without compression, at most that time with it).
    Steps and decisions: module docstring.
    """

    name = "relaxed-ees"

    def __init__(self, value, delay_cost, prior: TypePrior, *, compress: bool = True, **kw):
        super().__init__(value, delay_cost, prior, **kw)
        self.compress = bool(compress)

    def bind(self, sim) -> None:
        super().bind(sim)
        self.mechanism = RelaxedEES(self._mech_prior, sim.capacity, self.n_draws, self.estimator, fast=self.fast)
        self.started_at: dict[int, float] = {}   # running rows -> start time
        self.committed: dict[int, float] = {}    # accepted, waiting rows -> planned start
        self.planned_start: dict[int, float] = {}
        self.passes = 0
        self.moved_up = 0  # moves of commitments to an earlier start (compression)
        self._runtime_list = self.runtime.tolist()  # the same numbers, read per job without NumPy scalars

    def _profile(self, t: float) -> AvailabilityProfile | ListProfile:
        procs = self.sim.procs
        r = self._runtime_list
        rows = list(self.started_at) + list(self.committed)
        starts = [t] * len(self.started_at) + list(self.committed.values())
        ends = [s + r[j] for j, s in self.started_at.items()] + [s + r[j] for j, s in self.committed.items()]
        nodes = [procs[j] for j in rows]
        if self.fast:
            return ListProfile.of_intervals(self.sim.capacity, t, starts, ends, nodes, kernel=self.mechanism.kernel)
        return profile_of(self.sim.capacity, t, starts, ends, nodes)

    def _compress(self, t: float) -> None:
        """Move committed jobs up after early ends (conservative-backfilling compression).

        Re-place the committed jobs in order of planned start (ties: row), each at its
        earliest window over the running jobs and the jobs already re-placed. No job moves
        later: a moved job's interval only shrinks its overlap with any later slot, and
        running jobs only end earlier than planned, so each old slot stays free.
        """
        procs, r = self.sim.procs, self._runtime_list
        rows = list(self.started_at)
        running = ([t] * len(rows), [s + r[j] for j, s in self.started_at.items()], [procs[j] for j in rows])
        order = sorted((s, j) for j, s in self.committed.items())
        if self.fast:  # the same placements on lists (profile.greedy_starts_lists)
            lists = ListProfile.of_intervals(self.sim.capacity, t, *running, kernel=self.mechanism.kernel)
            placed = self.mechanism.schedule(lists.times, lists.used, lists.capacity, [r[j] for _, j in order],
                                             [procs[j] for _, j in order])
        else:
            prof = profile_of(self.sim.capacity, t, *running)
            placed = [prof.place(procs[j], r[j]) for _, j in order]
        for (s, j), s2 in zip(order, placed):
            assert s2 is not None, "a placement without a deadline always finds a window"
            if s2 < s:
                self.committed[j] = s2
                self.moved_up += 1
                if s2 > t:
                    self.sim.wake_at(s2)

    def step(self, t: float, arrived: range, completed: list[int]) -> None:
        sim = self.sim
        for j in completed:
            self.started_at.pop(j, None)
        if completed and self.compress and self.committed:
            self._compress(t)
        due = sorted((s, j) for j, s in self.committed.items() if s <= t)
        for _, j in due:  # committed starts (timer batches)
            sim.start(j)
            del self.committed[j]
            self.started_at[j] = t
        queue = self.queue
        queue.extend(arrived)
        if not queue or not (completed or due or not self.committed):
            return
        self.passes += 1
        prof = self._profile(t)
        while queue:
            dec = self.mechanism.decide(self._snapshot(nodes=True), self.rng, profile=prof)
            self._charge(dec, t)
            head = queue.popleft()
            if not dec.runs:
                sim.discard(head)
                continue
            assert dec.start_time is not None, "relaxed EES plans a start for every job it runs"
            s = float(dec.start_time)
            prof.reserve(s, float(self.runtime[head]), int(sim.procs[head]))
            self.planned_start[head] = s
            if s <= t:
                sim.start(head)
                self.started_at[head] = t
            else:
                self.committed[head] = s
                sim.wake_at(s)
                break
