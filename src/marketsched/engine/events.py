"""An optional per-job event log of a simulation, and its replay.

:class:`RecordingSimulator` is the engine (:class:`~marketsched.engine.simulator.Simulator`)
with every change to a job written down, in the order it happened:

* ``start`` (first start), ``resume`` (a later start), ``preempt``, ``finish`` (completed:
  the engine's completions and a metering policy's ``finish``), ``discard``, ``reject``,
  ``kill``: the job's state changes, from the engine's action hook
  (:meth:`~marketsched.engine.state.ClusterState._effect`) and its completion step;
* ``payment``: the job's total payment changed (``amount`` is the change); recorded on every
  write to the payment column, whoever writes it (the engine's ``charge``, a payment scheme
  settling a price integral, DLGM's credits), so the log is complete for any policy.

The hot loop of the plain :class:`Simulator` is untouched: recording costs only when asked
for. :func:`replay` rebuilds the :class:`~marketsched.engine.records.Records` from a log
alone (first start, end time, preemptions, payments, final state); a test checks it equals
the simulated records for every registered mechanism, which makes the log a faithful account.
"""

from __future__ import annotations

import math

import numpy as np

from marketsched.engine.records import FinalState, Records
from marketsched.engine.simulator import Simulator

EVENT_KINDS = ("start", "resume", "preempt", "finish", "discard", "reject", "kill", "payment")
_FINAL = {"finish": FinalState.COMPLETED, "discard": FinalState.DISCARDED, "reject": FinalState.REJECTED,
          "kill": FinalState.KILLED}


class _Payments(list):
    """The payment column, writing every change into the log."""

    def __init__(self, values, sim: RecordingSimulator):
        super().__init__(values)
        self._sim = sim

    def __setitem__(self, j, value):
        old = list.__getitem__(self, j)
        list.__setitem__(self, j, value)
        if value != old:
            self._sim._log.append((self._sim.now, j, "payment", value - old, value))


class _Completions:
    """Wraps the policy: logs the engine's completions before each decision, forwards the rest."""

    def __init__(self, policy, sim: RecordingSimulator):
        self._policy = policy
        self._sim = sim

    def step(self, t, arrived, completed):
        log = self._sim._log
        for j in completed:
            log.append((t, j, "finish", 0.0, math.nan))
        self._policy.step(t, arrived, completed)

    def __getattr__(self, name):  # bind, advance, close, and anything a policy exposes
        return getattr(self._policy, name)


class RecordingSimulator(Simulator):
    """The engine with an event log (see the module docstring); after :meth:`run`,
    :meth:`events` returns the log as a table."""

    def __init__(self, workload, policy, capacity: int | None = None):
        super().__init__(workload, policy, capacity)
        self._log: list[tuple[float, int, str, float, float]] = []
        self.payment = _Payments(self.payment, self)

    def _effect(self, kind: str, j: int) -> None:
        if kind == "start" and self.first_start[j] != self.now:
            kind = "resume"
        elif kind == "start" and self.preemptions[j]:
            kind = "resume"  # resumed at the very time it first started (preempted in the same batch)
        self._log.append((self.now, j, kind, 0.0, math.nan))

    def run(self, until=None, progress=None) -> Records:
        inner = self.policy
        self.policy = _Completions(inner, self)
        try:
            return super().run(until=until, progress=progress)
        finally:
            self.policy = inner

    def events(self, job_id=None):
        """The log as a DataFrame: ``time``, ``row`` (workload row), ``job_id``, ``event``, ``amount``
        (the change of a ``payment`` event, else 0) and ``total`` (the job's payment after it, else NaN)."""
        import pandas as pd

        t, rows, kind, amount, total = zip(*self._log) if self._log else ((), (), (), (), ())
        row = np.asarray(rows, dtype=np.int64)
        ids = np.asarray(self.workload.job_id if job_id is None else job_id)
        return pd.DataFrame({
            "time": np.asarray(t, dtype=np.float64), "row": row, "job_id": ids[row] if len(row) else row,
            "event": pd.Categorical(kind, categories=EVENT_KINDS), "amount": np.asarray(amount, dtype=np.float64),
            "total": np.asarray(total, dtype=np.float64),
        })


def replay(events, n_jobs: int) -> Records:
    """The :class:`Records` a log describes (``events``: the table of :meth:`RecordingSimulator.events`).

    Steps, per event in log order: a ``start`` sets the first start; a ``preempt`` counts a
    preemption; ``finish``/``discard``/``reject``/``kill`` set the final state and the end time
    (a second final state is an error: every job ends exactly once); a ``payment`` sets the
    job's payment to its ``total`` (the sum of the ``amount`` changes up to rounding). Jobs never
    ended are PENDING (a log of a run cut short).
    """
    first_start = np.full(n_jobs, math.nan)
    end_time = np.full(n_jobs, math.nan)
    preemptions = np.zeros(n_jobs, np.int64)
    payment = np.zeros(n_jobs)
    state = np.zeros(n_jobs, np.int8)
    for t, j, kind, total in zip(events["time"].tolist(), events["row"].tolist(), events["event"].astype(str).tolist(),
                                 events["total"].tolist()):
        if kind == "start":
            first_start[j] = t
        elif kind == "preempt":
            preemptions[j] += 1
        elif kind == "payment":
            payment[j] = total
        elif kind in _FINAL:
            if state[j] != FinalState.PENDING:
                raise ValueError(f"replay: job row {j} ends twice ({FinalState(state[j]).name.lower()}, then {kind} at {t})")
            state[j] = _FINAL[kind]
            end_time[j] = t
        elif kind != "resume":
            raise ValueError(f"replay: unknown event {kind!r} for job row {j} at {t}")
    return Records(first_start=first_start, end_time=end_time, preemptions=preemptions,
                   payment=payment, state=state)
