"""The audit's deviating runs: a full rerun, or an incremental one from the deviator's arrival.

``RERUNS``:

* ``"full"``: every deviation simulates the whole workload again (any mechanism);
* ``"incremental"``: for mechanisms whose policy declares its per-job inputs
  (:mod:`marketsched.engine.snapshot`: HB, NPHB, WSPT, WSEPT with either price, FCFS, EASY),
  a second truthful engine is stepped forward to each focal job's arrival, in arrival order,
  and each deviation continues a copy of it with the lie; nothing before the arrival is
  simulated again. Other mechanisms are rerun in full (their decisions look at jobs that have
  not arrived yet). Both give the same records bit for bit (a property test checks it).
"""

from __future__ import annotations

import time

from marketsched.engine.simulator import Simulator

RERUNS = ("incremental", "full")


class Reruns:
    """Deviating runs of ``mechanism`` on variants of ``jobs`` (one instance per audit).

    Use: :meth:`order` the focal row sets, then for each (in that order) call
    :meth:`deviating` once per lie. ``incremental`` tells whether snapshots are used."""

    def __init__(self, jobs, mechanism: str, params: dict | None, rerun: str = "incremental"):
        from marketsched.engine.snapshot import supports_snapshots
        from marketsched.mechanisms.registry import build

        if rerun not in RERUNS:
            raise ValueError(f"rerun must be one of {', '.join(RERUNS)}, got {rerun!r}")
        self.jobs, self.mechanism, self.params = jobs, mechanism, params
        self.engine: Simulator | None = None
        if rerun == "incremental":
            policy, _ = build(mechanism, jobs, params)
            if supports_snapshots(policy):
                self.engine = Simulator(jobs.workload, policy, capacity=getattr(policy, "engine_capacity", None))
                self.engine.begin()
        self.incremental = self.engine is not None

    def order(self, focal: list) -> list[int]:
        """Indices of ``focal`` (arrays of rows) in the order to audit them: by the arrival of
        their first row when incremental (the stepping engine only moves forward), else as given."""
        if not self.incremental:
            return list(range(len(focal)))
        first = [int(rows.min()) for rows in focal]
        return sorted(range(len(focal)), key=lambda i: (first[i], i))

    def deviating(self, jobs2, first_row: int):
        """The :class:`~marketsched.scenario.Run` of the mechanism on ``jobs2``, which differ from
        the audit's jobs from row ``first_row`` on (the deviator's first row)."""
        from marketsched.mechanisms.registry import build
        from marketsched.scenario import Run, run

        if self.engine is None:
            return run(jobs2, self.mechanism, self.params)
        from marketsched.engine.snapshot import resume

        t0 = time.process_time()
        self.engine.proceed(before=float(self.jobs.workload.submit_time[first_row]))
        policy, resolved = build(self.mechanism, jobs2, self.params)
        sim = resume(self.engine, jobs2.workload, policy, first_row)
        return Run(self.mechanism, resolved, sim.records, sim.policy, None, time.process_time() - t0)
