"""The actions a policy takes on a cluster, shared by the simulator and the live engine.

:class:`ClusterState` holds the per-job columns a policy reads and writes (``procs``,
``running``, ``payment``, ...) and implements every action (``start``, ``preempt``,
``finish``, ``discard``, ``reject``, ``kill``, ``charge``, ``wake_at``) once. The two engines
differ only in what a start or a stop means to them, through two hooks:

* :class:`~marketsched.engine.simulator.Simulator` predicts the completion of a started job
  from its remaining work and keeps the remaining work when a job stops;
* :class:`~marketsched.platform.engine.LiveEngine` records each action as an effect for the
  broker to carry out on real processes.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from marketsched.engine.records import FinalState

INF = math.inf
PENDING = int(FinalState.PENDING)
COMPLETED = int(FinalState.COMPLETED)


class SchedulingError(RuntimeError):
    """A policy asked the engine for something impossible (a bug in the policy)."""


def require_serial(name: str, procs) -> None:
    """ValueError naming the first job row of ``procs`` that needs more than one processor, for
    the policies that schedule serial jobs only (Shudler et al. 2010 split parallel jobs first)."""
    procs = np.asarray(procs)
    bad = np.flatnonzero(procs != 1)
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(
            f"{name} schedules serial jobs; job row {j} needs {int(procs[j])} processors (split parallel jobs "
            "first: --split on the command line, marketsched.workloads.split_parallel in Python)"
        )


class ClusterState:
    """Per-job columns and the policy-facing actions. Subclasses set the columns up and may
    override :meth:`_started`, :meth:`_stopped` and :meth:`_effect` (all no-ops here)."""

    capacity: int
    now: float
    used: int
    procs: list
    running: list
    run_start: list
    first_start: list
    end_time: list
    preemptions: list
    payment: list
    state: list
    _timers: list

    @property
    def free(self) -> int:
        """Processors not in use right now."""
        return self.capacity - self.used

    # ------------------------------------------------------------------ hooks
    def _started(self, j: int) -> None:
        """Job ``j`` has just started or resumed."""

    def _stopped(self, j: int) -> None:
        """Running job ``j`` has just stopped (for any reason)."""

    def _effect(self, kind: str, j: int) -> None:
        """An action was taken on job ``j`` (``kind``: start, preempt, finish, discard, ...)."""

    # ------------------------------------------------------------------ actions
    def start(self, j: int) -> None:
        """Start (or resume) job ``j`` now."""
        if self.running[j] or self.state[j] != PENDING:
            raise SchedulingError(f"job row {j} cannot start: it is running or already final")
        p = self.procs[j]
        if self.used + p > self.capacity:
            raise SchedulingError(f"job row {j} needs {p} processors, only {self.capacity - self.used} free")
        self.used += p
        self.running[j] = True
        self.run_start[j] = self.now
        if self.first_start[j] != self.first_start[j]:  # NaN: first start
            self.first_start[j] = self.now
        self._started(j)
        self._effect("start", j)

    def preempt(self, j: int) -> None:
        """Stop running job ``j`` now; it may resume later with its remaining work."""
        if not self.running[j]:
            raise SchedulingError(f"job row {j} cannot be preempted: it is not running")
        self._stop(j)
        self.preemptions[j] += 1
        self._effect("preempt", j)

    def finish(self, j: int) -> None:
        """Complete job ``j`` now (for policies that meter progress themselves)."""
        self._end(j, COMPLETED, "finish")

    def discard(self, j: int) -> None:
        """Drop queued job ``j`` (the mechanism decided not to run it)."""
        self._end(j, int(FinalState.DISCARDED), "discard")

    def reject(self, j: int) -> None:
        """Refuse job ``j`` at submission."""
        self._end(j, int(FinalState.REJECTED), "reject")

    def kill(self, j: int) -> None:
        """End job ``j`` without completing it (cancelled, out of budget, cut at ``until``)."""
        self._end(j, int(FinalState.KILLED), "kill")

    def charge(self, j: int, amount: float) -> None:
        """Add ``amount`` to job ``j``'s payment (negative: the job receives money)."""
        self.payment[j] += amount

    def wake_at(self, t: float) -> None:
        """Ask for a batch at time ``t`` (>= now) even if no job arrives or completes then."""
        if t < self.now:
            raise SchedulingError(f"timer at {t} is in the past (now {self.now})")
        heapq.heappush(self._timers, t)

    # ------------------------------------------------------------------ internals
    def _stop(self, j: int) -> None:
        if self.running[j]:
            self.running[j] = False
            self.used -= self.procs[j]
            self._stopped(j)

    def _end(self, j: int, code: int, kind: str) -> None:
        self._stop(j)
        if self.state[j] != PENDING:
            raise SchedulingError(f"job row {j} already ended in state {FinalState(self.state[j]).name}")
        self.state[j] = code
        self.end_time[j] = self.now
        self._effect(kind, j)
