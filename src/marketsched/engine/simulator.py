"""The discrete-event engine every online mechanism runs on.

A small event loop in the spirit of SimPy's core (an event queue, a clock, a step), specialised
for scheduling: the engine owns the clock, the arrivals (the workload, already sorted by
submit time), the completions of running jobs, timers, the processor count and the per-job
records. A *policy* (a mechanism's allocation and payment rules) owns every decision.

Event order (one documented rule for simultaneous events)
---------------------------------------------------------
All events with the same timestamp form one batch, handled as follows:

1. the clock advances to ``t``; the policy's ``advance(t)`` hook integrates prices over the
   interval just ended (the state was constant during it);
2. every running job whose work ends at ``t`` completes and frees its processors
   (``completed``, in job order);
3. every job submitted at ``t`` arrives (``arrived``, a range of rows, in submit order);
4. timers due at ``t`` fire (a policy asks for them with :meth:`Simulator.wake_at`);
5. the policy's ``step(t, arrived, completed)`` decides once for the whole batch, calling
   :meth:`start`, :meth:`preempt`, :meth:`discard`, ... .

Preemption and resumption cost nothing: a preempted job keeps its remaining work and can
resume later (on any processor: the engine tracks counts, not processor identities; a policy
that needs node identity, such as DLGM's per-node queues, keeps it itself).

Policy interface
----------------
A policy is any object with:

* ``bind(sim)``: called once before the run; keep a reference to the simulator;
* ``advance(t)``: called at the start of each batch, before anything changes (optional);
* ``step(t, arrived, completed)``: the decision for the batch;
* ``close(t)``: called once at the end (after the last event, or at ``until``) to settle
  what is still open (optional).

Jobs run at unit speed with engine-managed completions (:meth:`start`), or, for policies that
meter progress themselves (time-sliced shares), the policy calls :meth:`finish` when it decides
a job is done and uses timers to be woken.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Protocol

import numpy as np

from marketsched.engine import compiled
from marketsched.engine.records import FinalState, Records
from marketsched.engine.state import ClusterState, SchedulingError  # noqa: F401 (re-exported)
from marketsched.workloads.workload import Workload

INF = math.inf
_PENDING = int(FinalState.PENDING)
_COMPLETED = int(FinalState.COMPLETED)


class Policy(Protocol):
    def bind(self, sim: Simulator) -> None: ...

    def step(self, t: float, arrived: range, completed: list[int]) -> None: ...


class Simulator(ClusterState):
    """Run one policy over one workload.

    Parameters
    ----------
    workload:
        The jobs (sorted by submit time) and the machine's capacity in processors.
    policy:
        The mechanism (see the module docstring for the interface).
    capacity:
        Overrides ``workload.capacity`` (processors available to the policy).

    Notes
    -----
    After :meth:`run`, :attr:`records` holds the per-job results.
    """

    def __init__(self, workload: Workload, policy, capacity: int | None = None):
        self.workload = workload
        self.capacity = int(workload.capacity if capacity is None else capacity)
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1 processor, got {self.capacity}")
        widest = int(workload.procs.max()) if len(workload) else 0
        if widest > self.capacity:
            raise ValueError(f"a job needs {widest} processors but the machine has {self.capacity}")
        self.policy = policy
        self.n_jobs = len(workload)
        self.used = 0  # processors busy
        self.now = 0.0
        self._completions: list[tuple[float, int]] = []
        self._timers: list[float] = []
        self.records: Records | None = None
        self.engine_path = "python"  # "compiled" once a whole run took the policy's C kernel

    #: The per-job columns as Python lists, made by :meth:`_make_columns` when the pure-Python
    #: path first needs them (a compiled run never does: its memory is the workload's NumPy
    #: columns and the kernel's arrays).
    _COLUMNS = frozenset(("submit", "procs", "remaining", "running", "run_start", "finish_at", "first_start",
                          "end_time", "preemptions", "payment", "state"))

    def __getattr__(self, name: str):
        if name in Simulator._COLUMNS and "workload" in self.__dict__:
            self._make_columns()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _make_columns(self) -> None:
        workload, n = self.workload, self.n_jobs
        # Hot-loop state as Python lists: scalar access to lists is several times faster
        # than to NumPy arrays.
        self.submit = workload.submit_time.tolist()
        self.procs = workload.procs.tolist()
        self.remaining = workload.runtime.tolist()  # work left, seconds at unit speed
        self.running = [False] * n
        self.run_start = [0.0] * n  # start of the current running interval
        self.finish_at = [INF] * n  # scheduled completion of the current interval
        # records
        self.first_start = [math.nan] * n
        self.end_time = [math.nan] * n
        self.preemptions = [0] * n
        self.payment = [0.0] * n
        self.state = [_PENDING] * n

    # ------------------------------------------------------------------ engine hooks
    def _started(self, j: int) -> None:
        f = self.now + self.remaining[j]
        self.finish_at[j] = f
        heapq.heappush(self._completions, (f, j))

    def _stopped(self, j: int) -> None:
        if self.finish_at[j] != INF:
            self.remaining[j] = self.finish_at[j] - self.now
        self.finish_at[j] = INF

    def start_metered(self, j: int) -> None:
        """Mark ``j`` running for a policy that meters its progress itself (no completion event)."""
        self.start(j)
        self.finish_at[j] = INF  # the heap entry becomes stale

    def finish(self, j: int) -> None:
        super().finish(j)
        self.remaining[j] = 0.0

    # ------------------------------------------------------------------ the loop
    def run(self, until: float | None = None, progress: Callable[[int, int], None] | None = None) -> Records:
        """Process every event (or those before ``until``) and return the records.

        ``progress(arrived, total)`` is called now and then with the number of arrivals
        processed so far. Jobs still queued or running at the end are KILLED at that time.

        A whole run (``until`` None) of a plain Simulator takes the policy's compiled kernel when
        it has one for its configuration (:mod:`marketsched.engine.compiled`): the same records.
        """
        if until is None and type(self) is Simulator:
            compiled_run = getattr(self.policy, "compiled_run", None)
            if compiled_run is not None and compiled.mode() != "python":
                records = compiled_run(self)
                if records is not None:
                    self.records = records
                    self.engine_path = "compiled"
                    if progress is not None:
                        progress(self.n_jobs, self.n_jobs)
                    return records
        self.engine_path = "python"
        self.begin()
        self.proceed(until=until, progress=progress)
        return self.conclude(until=until, progress=progress)

    def begin(self) -> None:
        """Make the per-job columns, bind the policy and set the loop at the first event (the start of
        :meth:`run`)."""
        if "submit" not in self.__dict__:
            self._make_columns()
        self.policy.bind(self)
        self._next_arrival = 0  # row of the next job to arrive
        self.batches = 0

    def proceed(self, before: float | None = None, until: float | None = None,
                progress: Callable[[int, int], None] | None = None) -> None:
        """Process the batches at times ``t < before`` and ``t <= until`` (either None: no bound),
        then stop with the state as it is: a later :meth:`proceed` continues exactly where this
        one stopped (the incremental audit snapshots the engine in between)."""
        policy = self.policy
        advance = getattr(policy, "advance", None)
        step = policy.step
        submit = self.submit
        n = self.n_jobs
        comps = self._completions
        timers = self._timers
        running = self.running
        finish_at = self.finish_at
        state = self.state
        end_time = self.end_time
        heappop = heapq.heappop
        stop = INF if until is None else float(until)
        pause = INF if before is None else float(before)
        i = self._next_arrival
        batches = self.batches
        report_every = 1 << 14
        while True:
            while comps and (not running[comps[0][1]] or finish_at[comps[0][1]] != comps[0][0]):
                heappop(comps)  # stale: preempted, metered or finished otherwise
            t = submit[i] if i < n else INF
            if comps and comps[0][0] < t:
                t = comps[0][0]
            if timers and timers[0] < t:
                t = timers[0]
            if t == INF or t > stop or t >= pause:
                break
            self.now = t
            if advance is not None:
                advance(t)
            completed = []
            while comps and comps[0][0] <= t:
                f, j = heappop(comps)
                if running[j] and finish_at[j] == f:
                    running[j] = False
                    finish_at[j] = INF
                    self.used -= self.procs[j]
                    self.remaining[j] = 0.0
                    state[j] = _COMPLETED
                    end_time[j] = t
                    completed.append(j)
            if len(completed) > 1:
                completed.sort()
            i0 = i
            while i < n and submit[i] <= t:
                i += 1
            while timers and timers[0] <= t:
                heappop(timers)
            step(t, range(i0, i), completed)
            batches += 1
            if progress is not None and batches % report_every == 0:
                progress(i, n)
        self._next_arrival = i
        self.batches = batches

    def conclude(self, until: float | None = None, progress: Callable[[int, int], None] | None = None) -> Records:
        """Settle the run (the policy's ``close``; jobs still open are KILLED) and return the records."""
        policy = self.policy
        advance = getattr(policy, "advance", None)
        n = self.n_jobs
        state = self.state
        end = self.now if until is None else float(until)
        self.now = end
        if advance is not None:
            advance(end)
        close = getattr(policy, "close", None)
        if close is not None:
            close(end)
        for j in range(n):  # still queued or running (or not yet submitted) when the run was cut
            if state[j] == _PENDING:
                self.kill(j)
        if progress is not None:
            progress(n, n)
        self.records = Records(
            first_start=np.array(self.first_start, dtype=np.float64),
            end_time=np.array(self.end_time, dtype=np.float64),
            preemptions=np.array(self.preemptions, dtype=np.int64),
            payment=np.array(self.payment, dtype=np.float64),
            state=np.array(self.state, dtype=np.int8),
        )
        return self.records
