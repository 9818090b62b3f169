"""Properties any run should have, checked from its event log (:mod:`marketsched.engine.events`).

Each function returns a list of violations (empty: the property holds), one sentence each,
naming the job row and time, so a test can ``assert not violations``:

* :func:`one_final_state`: every job ends exactly once (completed, rejected, discarded or
  killed), and the log's records equal the run's (Shudler et al. (2010) count every job; the
  engine's rule that no job is lost or ends twice);
* :func:`work_done`: a completed job ran exactly its run time, summed over its running
  intervals (preemption loses no work and adds none);
* :func:`work_conserving`: after every event no waiting job fits on the free processors (the
  greedy list schedulers of Shudler et al. (2010), FCFS; not EES, which holds the machine for
  one job, nor DLGM's per-node queues);
* :func:`payments_match`: each job's payment equals the integral of its price per second over
  its running time, for a mechanism with a fixed price per job (``rate``).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from marketsched.engine.events import replay
from marketsched.engine.records import FinalState

_STOP = {"preempt", "finish", "kill", "discard", "reject"}


def run_intervals(events) -> dict[int, list[tuple[float, float]]]:
    """Each job row's running intervals ``[(start, stop), ...]`` from the log."""
    out: dict[int, list] = defaultdict(list)
    open_at: dict[int, float] = {}
    for t, j, kind in zip(events["time"].tolist(), events["row"].tolist(), events["event"].astype(str).tolist()):
        if kind in ("start", "resume"):
            open_at[j] = t
        elif kind in _STOP and j in open_at:
            out[j].append((open_at.pop(j), t))
    return out


def one_final_state(events, records) -> list[str]:
    try:
        logged = replay(events, len(records))
    except ValueError as exc:
        return [str(exc)]
    bad = [f"job row {j} never ended" for j in np.flatnonzero(logged.state == FinalState.PENDING)[:5]]
    if not logged.equals(records):
        bad.append("the records replayed from the log differ from the run's records")
    return bad


def work_done(events, workload, rtol: float = 1e-9) -> list[str]:
    finished = set(events.loc[events["event"] == "finish", "row"].tolist())
    bad = []
    for j, spans in run_intervals(events).items():
        if j in finished:
            ran = sum(b - a for a, b in spans)
            if not math.isclose(ran, workload.runtime[j], rel_tol=rtol, abs_tol=1e-6):
                bad.append(f"job row {j} completed after running {ran:g} s, its run time is {workload.runtime[j]:g} s")
    return bad


def work_conserving(events, workload, capacity: int | None = None) -> list[str]:
    """No job waits while it fits on the free processors (checked after all events of each time)."""
    cap = int(workload.capacity if capacity is None else capacity)
    procs = workload.procs.tolist()
    times = np.unique(np.concatenate([events["time"].to_numpy(), workload.submit_time]))
    ev = events.sort_values("time", kind="stable")
    ev_t, ev_j, ev_k = ev["time"].tolist(), ev["row"].tolist(), ev["event"].astype(str).tolist()
    submit = workload.submit_time
    order = np.argsort(submit, kind="stable").tolist()
    running, ended, waiting = set(), set(), defaultdict(set)  # waiting: procs -> rows
    used, e, a, bad = 0, 0, 0, []
    for t in times.tolist():
        while a < len(order) and submit[order[a]] <= t:
            waiting[procs[order[a]]].add(order[a])
            a += 1
        while e < len(ev_t) and ev_t[e] <= t:
            j, kind = ev_j[e], ev_k[e]
            if kind in ("start", "resume"):
                running.add(j)
                used += procs[j]
                waiting[procs[j]].discard(j)
            elif kind in _STOP:
                if j in running:
                    running.discard(j)
                    used -= procs[j]
                if kind == "preempt":
                    waiting[procs[j]].add(j)
                else:
                    ended.add(j)
                    waiting[procs[j]].discard(j)
            e += 1
        fits = [j for p, rows in waiting.items() if p <= cap - used for j in rows]
        if fits:
            bad.append(f"at {t:g} s job row {min(fits)} waits with {cap - used} processors free")
            if len(bad) >= 5:
                break
    return bad


def payments_match(events, rate, rtol: float = 1e-9) -> list[str]:
    """Payment of job ``j`` == ``rate[j]`` x its total running time (``rate``: one price per second per job)."""
    rate = np.asarray(rate, dtype=np.float64)
    spans = run_intervals(events)
    pay = replay(events, len(rate)).payment
    bad = []
    for j in range(len(rate)):
        expected = rate[j] * sum(b - a for a, b in spans.get(j, []))
        if not math.isclose(pay[j], expected, rel_tol=rtol, abs_tol=1e-6):
            bad.append(f"job row {j} paid {pay[j]:g}, its price integral is {expected:g}")
            if len(bad) >= 5:
                break
    return bad
