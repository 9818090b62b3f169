"""A run's schedule over time, from its event log (:mod:`marketsched.engine.events`).

* :func:`segments`: one row per stretch of time a job ran (start or resume to the next
  preempt, finish, kill or discard), with the processors it ran on;
* :func:`binned`: utilisation, queue length, mean running bid, highest queued bid and the
  payment rate, averaged over equal time bins (for runs of any size).

Processors: the engine counts processors, it does not name them, so the log says how many
processors a job held, not which. :func:`segments` assigns them deterministically, in log
order: at each start or resume a job takes the lowest-numbered free processor ids (first
fit), and gives them back when it stops. The assignment is a drawing aid, not something the
mechanism decided; Batsim exports (:mod:`marketsched.analysis.batsim`) carry it too.
"""

from __future__ import annotations

import heapq

import numpy as np

STARTS = ("start", "resume")
STOPS = ("preempt", "finish", "kill", "discard")


def _interval_set(ids: list[int]) -> str:
    """Batsim's interval set of sorted processor ids, e.g. [0, 1, 2, 3, 7] -> "0-3 7"."""
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return " ".join(out)


def segments(events, procs, capacity: int | None = None):
    """The run segments of a log as a DataFrame: ``row``, ``job_id``, ``start``, ``end``,
    ``procs``, ``resources`` (an interval set of processor ids, e.g. ``"0-3 7"``), ``first``
    (the job's first segment), ``how`` (the event that ended it; ``open`` if the log ends first).

    ``events``: one run's log (:meth:`RecordingSimulator.events`); ``procs``: processors per
    workload row. Processors are assigned first fit (module docstring); ``capacity`` is the
    number of ids to start from (more are added if the log ever holds more at once).
    """
    import pandas as pd

    procs = np.asarray(procs, dtype=np.int64)
    free = list(range(int(capacity or 0)))
    heapq.heapify(free)
    top = len(free)
    held: dict[int, tuple[float, list[int], bool]] = {}
    seen: set[int] = set()
    rows: list[tuple] = []
    job_ids = events["job_id"].to_numpy()
    for t, j, kind, jid in zip(events["time"].tolist(), events["row"].tolist(), events["event"].astype(str).tolist(),
                               job_ids.tolist()):
        if kind in STARTS:
            if j in held:
                raise ValueError(f"event log: job row {j} starts at {t} while already running")
            need = int(procs[j])
            while len(free) < need:
                heapq.heappush(free, top)
                top += 1
            ids = sorted(heapq.heappop(free) for _ in range(need))
            held[j] = (t, ids, j not in seen)
            seen.add(j)
        elif kind in STOPS and j in held:
            t0, ids, first = held.pop(j)
            rows.append((j, jid, t0, t, len(ids), _interval_set(ids), first, kind))
            for p in ids:
                heapq.heappush(free, p)
    jid_of = dict(zip(events["row"].tolist(), job_ids.tolist()))
    for j, (t0, ids, first) in held.items():
        rows.append((j, jid_of[j], t0, np.nan, len(ids), _interval_set(ids), first, "open"))
    cols = ["row", "job_id", "start", "end", "procs", "resources", "first", "how"]
    return pd.DataFrame(rows, columns=cols).sort_values(["start", "row"], kind="stable", ignore_index=True)


def busy_utilisation(segs, capacity: int, t0: float, t1: float) -> float:
    """Processor-seconds run in ``[t0, t1]`` over ``capacity x (t1 - t0)``."""
    s = np.clip(segs["start"].to_numpy(), t0, t1)
    e = np.clip(segs["end"].to_numpy(), t0, t1)
    return float(((e - s) * segs["procs"].to_numpy()).sum() / (capacity * (t1 - t0)))


def _step_means(times, deltas, edges):
    """Time-average over each bin ``[edges[i], edges[i+1])`` of the step function that starts
    at 0 and changes by ``deltas`` at ``times``."""
    edges = np.asarray(edges, dtype=np.float64)
    t = np.minimum(np.asarray(times, dtype=np.float64), edges[-1])  # later changes cannot matter
    order = np.argsort(t, kind="stable")
    t = t[order]
    level = np.cumsum(np.asarray(deltas, dtype=np.float64)[order])  # the level from t[k] on
    cum = np.r_[0.0, np.cumsum(level[:-1] * np.diff(t))]  # integral from t[0] up to t[k]
    k = np.searchsorted(t, edges, side="right")  # changes at or before each edge
    prev = np.maximum(k - 1, 0)
    integral = np.where(k > 0, cum[prev] + level[prev] * (edges - t[prev]), 0.0) if len(t) else np.zeros(len(edges))
    width = np.diff(edges)
    return np.diff(integral) / width


def binned(segs, submit, end, capacity: int, bins: int = 200, bid=None, events=None, t0=None, t1=None):
    """Time-binned series of one run as a DataFrame indexed by the bin's start time:

    * ``utilisation``: busy processor-seconds / (capacity x bin width);
    * ``queue``: mean number of jobs waiting (submitted, not running, not ended; includes
      preempted jobs);
    * with ``bid``: ``running_bid`` (mean bid of the running jobs, time-weighted; NaN when
      none runs) and ``queued_bid`` (the highest bid waiting, time-weighted, NaN while the
      queue is empty: the price a job must beat to run at once under highest bid first, the
      uniform k-th price of Shudler et al. (2010) for HB);
    * with ``events``: ``paid`` = payments settled up to the bin's end (cumulative; mechanisms
      settle a job's payment when it stops or its price regime changes, so a per-bin rate
      would show settlement dates, not prices).

    ``submit``, ``end``: per workload row (``end`` NaN: never ended).
    """
    import pandas as pd

    submit = np.asarray(submit, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    s, e, p = segs["start"].to_numpy(), segs["end"].to_numpy(), segs["procs"].to_numpy().astype(np.float64)
    lo = float(np.min(submit)) if t0 is None else t0
    last = np.nanmax(np.r_[end, e]) if len(end) else lo + 1
    hi = float(last) if t1 is None else t1
    if not hi > lo:
        hi = lo + 1.0
    e = np.where(np.isnan(e), hi, e)
    edges = np.linspace(lo, hi, bins + 1)
    busy = _step_means(np.r_[s, e], np.r_[p, -p], edges)
    ended = np.where(np.isnan(end), np.inf, end)
    # waiting = submitted - running - ended (a job counts once, whatever its processors)
    rows = segs["row"].to_numpy()
    wait = _step_means(np.r_[submit, ended, s, e], np.r_[np.ones(len(submit)), -np.ones(len(submit)),
                                                        -np.ones(len(s)), np.ones(len(e))], edges)
    # a job that is running when it ends: its segment end and its end coincide (+1 - 1 cancel)
    out = {"utilisation": busy / capacity, "queue": wait}
    if bid is not None:
        b = np.asarray(bid, dtype=np.float64)
        count = _step_means(np.r_[s, e], np.r_[np.ones(len(s)), -np.ones(len(e))], edges)
        total = _step_means(np.r_[s, e], np.r_[b[rows], -b[rows]], edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["running_bid"] = np.where(count > 0, total / count, np.nan)
        out["queued_bid"] = _max_queued_bid(segs, submit, ended, b, edges)
    if events is not None:
        pay = events[events["event"].astype(str) == "payment"]
        settled, _ = np.histogram(pay["time"].to_numpy(), bins=edges, weights=pay["amount"].to_numpy())
        before = float(pay["amount"].to_numpy()[pay["time"].to_numpy() < edges[0]].sum())
        out["paid"] = before + np.cumsum(settled)
    return pd.DataFrame(out, index=pd.Index(edges[:-1], name="time"))


def _max_queued_bid(segs, submit, ended, bid, edges):
    """Time-average per bin of the highest bid among waiting jobs (NaN where none waits all bin)."""
    # waiting intervals: [submit, first start), [segment end, next segment start), ... until ended
    rows = segs["row"].to_numpy()
    order = np.lexsort((segs["start"].to_numpy(), rows))
    starts_by_row: dict[int, list[float]] = {}
    ends_by_row: dict[int, list[float]] = {}
    for r, a, b in zip(rows[order].tolist(), segs["start"].to_numpy()[order].tolist(), segs["end"].to_numpy()[order].tolist()):
        starts_by_row.setdefault(r, []).append(a)
        ends_by_row.setdefault(r, []).append(b)
    changes: list[tuple[float, int, int]] = []  # (time, +1 join / -1 leave, row)
    for r in range(len(submit)):
        opens = [submit[r], *[x for x in ends_by_row.get(r, []) if x == x]]
        closes = [*starts_by_row.get(r, []), ended[r]]
        for a, b in zip(opens, closes):
            if b > a:
                changes.append((a, 1, r))
                changes.append((b, -1, r))
    changes.sort(key=lambda c: (c[0], c[1]))
    heap: list[tuple[float, int]] = []
    gone: set[int] = set()
    waiting: set[int] = set()
    total = np.zeros(len(edges) - 1)
    cover = np.zeros(len(edges) - 1)
    prev = edges[0]

    def add(a, b, level):
        if b <= a or level is None:
            return
        lo_i = max(np.searchsorted(edges, a, side="right") - 1, 0)
        hi_i = min(np.searchsorted(edges, b, side="left"), len(edges) - 1)
        for i in range(lo_i, hi_i):
            x0, x1 = max(a, edges[i]), min(b, edges[i + 1])
            if x1 > x0:
                total[i] += level * (x1 - x0)
                cover[i] += x1 - x0

    for t, kind, r in changes:
        while heap and heap[0][1] in gone:
            heapq.heappop(heap)
        add(max(prev, edges[0]), min(t, edges[-1]), -heap[0][0] if heap else None)
        prev = t
        if kind == 1:
            waiting.add(r)
            gone.discard(r)
            heapq.heappush(heap, (-bid[r], r))
        else:
            waiting.discard(r)
            gone.add(r)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cover > 0, total / cover, np.nan)


def load(results, events, run: str | None = None):
    """``(table, log, workload, run)`` of one run from a results file and an event log
    written by ``marketsched simulate/compare --out ... --events ...``; the workload is rebuilt
    from the results' metadata (the trace must be the recorded one), in the form the run ran it. ``run``: the run's label,
    needed when the files hold several runs. The returned ``run`` is the run's metadata
    (``label``, ``mechanism``, ``params``)."""
    from marketsched.results import read
    from marketsched.scenario import Scenario

    table, meta = read(results)
    log, meta_ev = read(events)
    labels = [r["label"] for r in meta["runs"]]
    if meta_ev.get("scenario") != meta.get("scenario"):
        raise ValueError(f"{events}: the event log is of another scenario than {results}")
    if run is None:
        if len(labels) != 1:
            raise ValueError(f"{results} holds {len(labels)} runs ({', '.join(labels)}): choose one with --run")
        run = labels[0]
    if run not in labels:
        raise ValueError(f"{results}: no run {run!r}; it holds {', '.join(labels)}")
    table = table[table["run"] == run].reset_index(drop=True)
    if "run" in log:
        log = log[log["run"] == run].reset_index(drop=True)
    scenario = Scenario.from_dict(meta["scenario"])
    meta_run = next(r for r in meta["runs"] if r["label"] == run)
    if scenario.forms:  # the run ran the jobs in its mechanism's form (split, whole machine)
        from marketsched.scenario import in_form

        workload = in_form(scenario.build(), meta_run["mechanism"])[0].workload
    else:
        workload = scenario.workload.build()
    if len(workload) != len(table) or not np.array_equal(workload.job_id, table["job_id"].to_numpy()):
        raise ValueError(f"{results}: the rebuilt workload does not match the results' jobs")
    return table, log, workload, meta_run
