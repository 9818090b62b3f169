"""Non-market baselines for parallel jobs: FCFS and EASY backfilling.

These make the engine an ordinary workload simulator and give the market mechanisms their
conventional yardstick. None of the market papers specifies them, so they follow the standard
definitions: Lifka (1995), "The ANL/IBM SP scheduling system", and Mu'alem & Feitelson (2001),
"Utilization, predictability, workloads, and user runtime estimates in scheduling the IBM SP2
with backfilling", IEEE TPDS 12(6). The exact rules, with the decisions a trace replay needs,
are in the "Conformance" section of ``docs/engine.md``; ``tests/reference_easy.py`` is a plain
re-implementation from them, and the tests compare start times with it (random instances with
ties and the full SDSC-SP2 and KTH-SP2 traces: no job differs).

A scheduling point is an engine batch (one time stamp ``t``: completions, then arrivals, then
one pass of the policy). The queue is in submission order (rows are in submission order).

FCFS, each pass
    start jobs from the queue head while the head fits in the free processors; the head then
    waits until enough processors are free, and every job behind it waits too.

EASY (aggressive backfilling, one reservation), each pass:

1. start jobs from the queue head while the head fits in the free processors;
2. if the head does not fit, give it a reservation: walk the running jobs in order of
   *estimated* end (start + run-time estimate, but at least ``t``: a job that has overrun its
   estimate is expected to end now) until enough processors would be free; that job's
   estimated end is the head's *shadow time*. The *extra* processors are those free at the
   shadow time beyond the head's need, counting every running job whose estimated end is at or
   before the shadow time (ties included);
3. scan the whole rest of the queue in submission order (every queued job, at every pass) and
   start every job that fits in the processors free now and either ends, by its estimate, by
   the shadow time (``t + estimate <= shadow``) or uses no more than the extra processors, which
   it then uses up.

A backfilled job therefore never delays the head job's reservation, as long as estimates are
upper bounds. Decisions: the estimate is the job's requested time (SWF field 9); a job without
one (NaN) uses its actual run time (counted in ``fallback_estimates``); a job that runs past
its estimate is not killed (the trace says it ran on) and counts as ending at ``t`` in steps 2
and 3, so reservations stay in the future. Mu'alem & Feitelson's EASY kills a job at its
estimate, so the case does not arise there; in a trace replay it does (4,134 of the 54,044
SDSC-SP2 jobs ran past their requested time).

Cost of a pass: the walk of step 2 over the running jobs (kept sorted by estimated end) and
one scan of the queue, which stops as soon as no processor is free.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import islice

import numpy as np

from marketsched.engine import compiled
from marketsched.engine.records import Records, empty_records


class Backfilling:
    """FCFS (``backfill=False``) or EASY backfilling (``backfill=True``) over parallel jobs."""

    #: Per-job inputs (:mod:`marketsched.engine.snapshot`): no decision looks at a job before it
    #: arrives, so a rerun with changed estimates may start at the first changed job's arrival.
    report_columns = ("est", "fallback_estimates")

    def __init__(self, backfill: bool = True, estimate=None):
        self.backfill = bool(backfill)
        self.name = "easy" if backfill else "fcfs"
        self._estimate = estimate

    def bind(self, sim) -> None:
        self.sim = sim
        self.est = self._estimates(sim).tolist()
        self.queue: list[int] = []  # job rows in submission order
        self.ends: list[tuple[float, int]] = []  # (estimated end, row) of running jobs, sorted
        self.est_end = [0.0] * sim.n_jobs

    def _estimates(self, sim) -> np.ndarray:
        """The run-time estimate of each job (checked; a missing one is the run time, counted in
        ``fallback_estimates``)."""
        w = sim.workload
        est = w.runtime_estimate if self._estimate is None else np.asarray(self._estimate, dtype=np.float64)
        if est.shape != (sim.n_jobs,):
            raise ValueError(f"{self.name}: expected one run-time estimate per job, got shape {est.shape}")
        bad = ~(np.isnan(est) | (est >= 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{self.name}: run-time estimate of job row {i} is {float(est[i])!r}; it must be >= 0 or NaN "
                             "(unknown)")
        missing = np.isnan(est)
        self.fallback_estimates = int(missing.sum())
        return np.where(missing, w.runtime, est).astype(np.float64)

    def compiled_run(self, sim) -> Records | None:
        """The whole run in the compiled kernel (:mod:`marketsched.engine.compiled`), or None when
        it is not built or the policy is a subclass (it may change a step the kernel does not know of)."""
        if type(self) is not Backfilling:
            return None
        kernel = compiled.kernel("_backfilling")
        if kernel is None:
            return None
        est = self._estimates(sim)
        w = sim.workload
        records = empty_records(sim.n_jobs)
        sim.now, sim.batches = kernel.run(
            np.ascontiguousarray(w.submit_time, dtype=np.float64), np.ascontiguousarray(w.runtime, dtype=np.float64),
            np.ascontiguousarray(w.procs, dtype=np.int64), est, sim.capacity, self.backfill, records.first_start,
            records.end_time, records.preemptions, records.payment, records.state)
        return records

    def _start(self, j: int, t: float) -> None:
        self.sim.start(j)
        e = t + self.est[j]
        self.est_end[j] = e
        insort(self.ends, (e, j))

    def step(self, t: float, arrived: range, completed: list[int]) -> None:
        sim = self.sim
        procs = sim.procs
        queue = self.queue
        ends = self.ends
        for j in completed:
            del ends[bisect_left(ends, (self.est_end[j], j))]
        queue.extend(arrived)
        free = sim.free
        while queue and procs[queue[0]] <= free:
            j = queue.pop(0)
            self._start(j, t)
            free -= procs[j]
        if not self.backfill or len(queue) < 2 or free == 0:
            return
        # shadow time of the head: walk the running jobs by estimated end (an overrunning job is
        # expected to end now, t) until the head fits ...
        need = procs[queue[0]]
        avail = free
        k = 0
        n_run = len(ends)
        while avail < need:  # k < n_run: the head fits on an empty machine
            avail += procs[ends[k][1]]
            k += 1
        shadow = ends[k - 1][0]
        if shadow < t:
            shadow = t
        # ... and the extra processors: every running job expected to end by the shadow time
        # frees its processors by then (ties included)
        while k < n_run and ends[k][0] <= shadow:
            avail += procs[ends[k][1]]
            k += 1
        extra = avail - need
        # every queued job is a candidate at every scheduling point, in submission order
        est = self.est
        started = []
        for j in islice(queue, 1, None):
            p = procs[j]
            if p > free:
                continue
            if t + est[j] > shadow:  # still running at the shadow time: only on extra processors
                if p > extra:
                    continue
                extra -= p
            self._start(j, t)
            started.append(j)
            free -= p
            if free == 0:
                break
        for j in started:
            queue.remove(j)


def fcfs() -> Backfilling:
    return Backfilling(backfill=False)


def easy(estimate=None) -> Backfilling:
    return Backfilling(backfill=True, estimate=estimate)
