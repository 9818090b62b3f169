"""Rerun a simulation from a snapshot of the engine, with some jobs' reports changed.

An online mechanism decides at each event from what has arrived so far. If a policy promises
that its decisions before a job's arrival do not depend on that job's inputs, then two runs
whose workloads agree on every row before row ``r`` (the first changed row) agree on
everything up to the arrival time of row ``r``. A rerun with changed reports can therefore
start from a copy of the engine taken just before that time, instead of from the beginning.

Steps of :func:`resume`:

1. copy the snapshot (the engine and its policy, taken by :meth:`Simulator.proceed` with
   ``before`` = the arrival time of row ``r``; the workload is shared, not copied);
2. build the engine and policy the changed jobs would have (a fresh policy, bound to a fresh
   engine, so it computes its per-job inputs as in a full run) and copy, from row ``r`` on,
   the engine's per-job inputs (submit time, processors, run time) and the policy's
   (:data:`report_columns`, in place: a payment scheme that shares a list with its policy
   sees the change);
3. continue the copy to the end and settle it (:meth:`Simulator.conclude`).

No row from ``r`` on has arrived at the snapshot, so its engine and policy state is still the
initial state, the same for every row; the rows from ``r`` on may therefore also be permuted
(a delayed job moves later in the workload). The result equals a full rerun bit for bit; the
audit's property test checks it on random instances with ties.

A policy opts in by listing its per-job inputs in a class attribute ``report_columns`` (names
of attributes: lists are copied from row ``r`` on, anything else is replaced). Policies whose
decisions look at jobs that have not arrived (EES's prior from every job's report, DLGM's ratio
buckets cut over all jobs) do not declare it and are always rerun in full.
"""

from __future__ import annotations

import copy
import types
from typing import Any

import numpy as np

from marketsched.engine.simulator import Simulator


def supports_snapshots(policy) -> bool:
    """True if ``policy`` declares its per-job inputs (``report_columns``), so a rerun may start
    from a snapshot at the first changed job's arrival."""
    return isinstance(getattr(policy, "report_columns", None), tuple)


def take(sim: Simulator) -> Simulator:
    """A copy of ``sim`` and its policy that runs on independently (the workload is shared).

    Objects are copied attribute by attribute, keeping shared references shared (a payment
    scheme's ``bid`` stays its policy's ``bid``); lists, dicts, sets and arrays are copied one
    level deep, which suffices because their entries are numbers, tuples of numbers or other
    immutable values (a container of containers is deep-copied). Much faster than
    :func:`copy.deepcopy`, which visits every number of every per-job list."""
    return _copy(sim, {id(sim.workload): sim.workload})


def _copy(x, memo: dict) -> Any:
    key = id(x)
    if key in memo:
        return memo[key]
    y: Any
    if isinstance(x, (list, dict, set)):
        first = next(iter(x.values() if isinstance(x, dict) else x), None)
        if isinstance(first, (list, dict, set, np.ndarray)) or hasattr(first, "__dict__"):
            y = copy.deepcopy(x, memo)
        else:
            y = x.copy()
    elif isinstance(x, np.ndarray):
        y = x.copy()
    elif isinstance(x, types.MethodType):
        y = types.MethodType(x.__func__, _copy(x.__self__, memo))
    elif hasattr(x, "__dict__") and not isinstance(x, (type, types.FunctionType, types.ModuleType)):
        y = object.__new__(type(x))
        memo[key] = y
        y.__dict__.update({k: _copy(v, memo) for k, v in x.__dict__.items()})
        return y
    else:
        y = x  # numbers, strings, tuples, functions: immutable
    memo[key] = y
    return y


def resume(snapshot: Simulator, workload, policy, first_row: int) -> Simulator:
    """The engine of the run of ``policy`` on ``workload`` (a fresh, unbound policy for the
    changed jobs), continued from ``snapshot`` to the end (its ``records`` and ``policy`` are
    the run's): the engine taken before the arrival time of
    ``first_row``, the first row where ``workload`` differs from the snapshot's (module
    docstring). ``snapshot`` itself is not changed; ``policy`` is used up (its per-job inputs are
    taken, then it is emptied)."""
    if not supports_snapshots(policy):
        raise ValueError(f"{type(policy).__name__} declares no report_columns: it cannot resume from a snapshot")
    r = int(first_row)
    n = snapshot.n_jobs
    if len(workload) != n:
        raise ValueError(f"snapshot of {n} jobs, workload of {len(workload)}: a rerun keeps the jobs")
    if not 0 <= r < n:
        raise ValueError(f"first changed row {r} is outside the workload (0..{n - 1})")
    arrival = min(float(workload.submit_time[r]), snapshot.submit[r])
    if snapshot._next_arrival > r or (snapshot.batches and snapshot.now >= arrival):
        raise ValueError(f"the snapshot is past the arrival of row {r}: take it before that job arrives")
    fresh = Simulator(workload, policy, capacity=snapshot.capacity)
    policy.bind(fresh)
    sim = take(snapshot)
    sim.workload = workload
    for name in ("submit", "procs", "remaining"):
        getattr(sim, name)[r:] = getattr(fresh, name)[r:]
    mine = sim.policy
    for name in policy.report_columns:
        new = getattr(policy, name)
        old = getattr(mine, name)
        if isinstance(old, list):
            old[r:] = new[r:]
        else:
            setattr(mine, name, new)
    # the fresh engine and policy only lent their inputs; they reference each other, so without
    # this they would wait for the cyclic garbage collector (tens of MB per rerun on a trace)
    fresh.__dict__.clear()
    policy.__dict__.clear()
    sim.proceed()
    sim.conclude()
    return sim
