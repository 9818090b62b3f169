"""Replays between the simulator and the live engine (one rule, one implementation: both run the
same policy objects).

:func:`replay_live` feeds a workload to a :class:`~marketsched.platform.engine.LiveEngine` on a
:class:`~marketsched.platform.clock.FakeClock`, playing the part of the executor: it knows each
job's run time, starts a timer when the engine starts a job and keeps the remaining work when
it is preempted, and reports the process "exit" when the work is done. The batches are formed
exactly as the simulator forms them (all events of one timestamp: completions, then arrivals),
so the decisions and payments must be identical to
:class:`~marketsched.engine.simulator.Simulator`'s; ``tests/test_live_engine.py`` checks it.

:func:`simulate_recorded` goes the other way: a recorded live run (submit times and measured
run times) becomes a workload for the simulator, whose payments are what the ledger should
hold, up to the timing noise of real processes.
"""

from __future__ import annotations

import math

import numpy as np

from marketsched.engine.records import FinalState, Records
from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.priority import PriorityScheduler, make_priority_mechanism, priority_key
from marketsched.platform.clock import FakeClock
from marketsched.platform.engine import LiveEngine
from marketsched.workloads.workload import Workload


class ReplayEngine(LiveEngine):
    """The live engine of a replay; ``applied_changes`` lists the ``(t, row, new_bid)`` changes applied."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.applied_changes: list[tuple[float, int, float]] = []


def replay_live(workload: Workload, rule: str, bid, pricing: str = "kth", changes=(),
                capacity_changes=()) -> tuple[ReplayEngine, Records]:
    """Run ``rule`` x ``pricing`` over ``workload`` in the live engine on a fake clock.

    ``changes``: ``(t, row, new_bid)`` bid changes (the live market's rebid), applied in the
    batch at time ``t`` to a job submitted before ``t`` that is still in the market then (after
    that batch's completions); the others are skipped. Returns the engine and its results as
    :class:`Records` (same columns as the simulator's); ``engine.applied_changes`` lists the
    changes that were applied. ``capacity_changes``: ``(t, capacity)``, the machine's processors
    from ``t`` on (the live market on a cluster whose nodes go down and come back), set in the
    batch at time ``t`` after its completions; the policy's step decides who stops. The
    mechanism is the live market's: parallel jobs (``workload.procs``) run whole, paying per
    processor (:mod:`~marketsched.mechanisms.online.priority`, ``whole_jobs``).
    """
    bid = np.asarray(bid, dtype=np.float64)
    key, cost = priority_key(rule, bid, workload.runtime, workload.runtime_estimate)
    mech = PriorityScheduler([], [], [], preemptive=(rule == "hb"), pricing=pricing, name=rule, whole_jobs=True)
    clock = FakeClock(0.0)
    eng = ReplayEngine(mech, workload.capacity, clock)
    submit = workload.submit_time.tolist()
    remaining = workload.runtime.tolist()
    procs = workload.procs.tolist()
    n = len(workload)
    finish_at: dict[int, float] = {}
    changes = sorted(changes, key=lambda c: c[0])
    caps = sorted(capacity_changes, key=lambda c: c[0])
    i = c = k = 0
    while True:
        t = submit[i] if i < n else math.inf
        if finish_at:
            t = min(t, min(finish_at.values()))
        if c < len(changes):
            t = min(t, changes[c][0])
        if k < len(caps):
            t = min(t, caps[k][0])
        if t == math.inf:
            break
        clock.set(t)
        done = sorted(j for j, f in finish_at.items() if f <= t)
        for j in done:
            del finish_at[j]
            remaining[j] = 0.0
        i0 = i
        while i < n and submit[i] <= t:
            i += 1
        rebids = []
        while c < len(changes) and changes[c][0] <= t:
            _, j, b = changes[c]
            c += 1
            if j < i0 and j not in done and eng.state[j] == FinalState.PENDING:
                rebids.append((j, float(b), float(b) / cost[j]))
                eng.applied_changes.append((t, j, float(b)))
        capacity = None
        while k < len(caps) and caps[k][0] <= t:
            capacity = int(caps[k][1])
            k += 1
        eng.batch(arrivals=[(bid[j], key[j], cost[j], procs[j]) for j in range(i0, i)], completed=done,
                  rebids=rebids, capacity=capacity)
        for kind, j, te in eng.drain():
            if kind == "start":
                finish_at[j] = te + remaining[j]
            elif kind == "preempt":
                remaining[j] = finish_at.pop(j) - te
            else:
                raise AssertionError(f"unexpected effect {kind} for row {j}")
    eng.close()
    rec = Records(
        first_start=np.array(eng.first_start, dtype=np.float64),
        end_time=np.array(eng.end_time, dtype=np.float64),
        preemptions=np.array(eng.preemptions, dtype=np.int64),
        payment=np.array(eng.payment, dtype=np.float64),
        state=np.array(eng.state, dtype=np.int8),
    )
    return eng, rec


def simulate_recorded(submit_time, runtime, bid, capacity: int, rule: str = "hb", pricing: str = "kth",
                      runtime_estimate=None, capacity_changes=(), procs=None) -> Records:
    """Simulate a recorded live run: jobs submitted at ``submit_time`` (market seconds, in
    submission order) with measured run times ``runtime``; returns the simulator's records.

    ``capacity_changes``: the market's recorded ``(t, capacity)`` changes (nodes of a cluster
    down and up; the broker's :func:`~marketsched.live.broker.capacity_changes`). The
    :class:`~marketsched.engine.simulator.Simulator` has a fixed machine, so a run with changes
    is replayed through :func:`replay_live` instead: the same policy objects on the same events
    (its decisions and payments are the simulator's, ``tests/test_live_engine.py``), with each
    change set in the batch at its time. ``procs``: the CPUs each job asked for (None: 1 each);
    the mechanism is the live market's, on whole parallel jobs paying per CPU."""
    w = Workload.from_columns(submit_time=submit_time, runtime=runtime, runtime_estimate=runtime_estimate,
                              procs=procs, capacity=capacity, sort=False)
    if len(capacity_changes):
        return replay_live(w, rule, bid, pricing, capacity_changes=capacity_changes)[1]
    return Simulator(w, make_priority_mechanism(rule, w, bid, pricing, whole_jobs=True)).run()
