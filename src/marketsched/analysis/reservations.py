"""The day-ahead reservation auctions, DPGVA and relaxed DPGVA (Mutz (2008), chapters 5 and 7),
audited like the engine's mechanisms (:func:`marketsched.analysis.audit.audit`).

These auctions clear sealed bids for a reservation period outside the engine, so the audit
makes each period's bids from the workload and clears them directly. Decisions (the thesis
gives types, not traces):

* **Periods.** Time is cut into periods of ``horizon`` seconds from the first submission; the
  jobs submitted during one period bid together for the next one (a day-ahead round), and
  periods clear independently.
* **A job's bid** (Mutz (2008), section 5.1.1: length, deadline, value; section 7.1.1 adds a
  node count): its length is its run-time estimate where the workload has one, else its run
  time (at least 1 s); its deadline, counted from the start of the period, is as long after
  it as the job's deadline is after its submission (the whole period without a deadline
  model); its value is ``bid x run time x processors`` (the value per CPU-second of the
  scenario's value model, over the work the job needs); relaxed DPGVA takes its processors as
  nodes and the machine's processors as its capacity, DPGVA gives every winner the whole
  machine (the thesis's model). Lengths round up and deadlines down to ``granularity``, as the
  live day-ahead service does (``DPGVA.to_units``).
* **True utility** (Mutz (2008), eq. 5.1 and utilities 7.1): ``v`` if the job won a
  reservation at least as long as its true length ending by its true deadline (both in whole
  granules, the auction's own model), else 0, minus its Clarke payment; ``v`` is from the true
  value.

Steps of :func:`audit`:

1. clear every period once with every bid truthful (relaxed DPGVA draws its orderings from a
   generator seeded by the scenario's seed and the period, so a deviating clearing of the same
   period uses the same random numbers: paired);
2. draw focal jobs as the engine audit does (:func:`~marketsched.analysis.audit.focal_jobs`,
   or given ids, or groups);
3. for each focal job and lie (``value``, ``estimate``: the length, ``deadline``; the lie is
   made by :func:`~marketsched.analysis.audit.deviate`), clear again only the periods holding
   the liar's rows (no other period can change);
4. the gain is the focal rows' summed true utility with the lie minus without.

The table has the engine audit's columns, so :func:`~marketsched.analysis.audit.summary`,
:func:`~marketsched.analysis.audit.claim_verdicts` and the figures apply unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marketsched.mechanisms.registry import Claim, Param, resolve_params

COMMON = (
    Param("granularity", float, 900.0, "time unit of the reservations (s): lengths round up, deadlines down"),
    Param("horizon", float, 86400.0, "length of a reservation period (s); the jobs submitted in one period bid "
          "for the next"),
)


@dataclass(frozen=True)
class Auction:
    """A day-ahead reservation auction the audit can clear: name, title, source, parameters and
    the incentive properties its paper proves (as the registry's mechanisms declare them)."""

    name: str
    title: str
    source: str
    params: tuple[Param, ...]
    claims: tuple[Claim, ...] = ()

    def resolve(self, given: dict | None = None) -> dict:
        return resolve_params(self.name, self.params, given)

    def label(self, params: dict) -> str:
        defaults = {p.name: p.default for p in self.params}
        changed = {k: v for k, v in params.items() if defaults.get(k) != v}
        return self.name + ("(" + ",".join(f"{k}={v}" for k, v in sorted(changed.items())) + ")" if changed else "")


AUCTIONS = {a.name: a for a in (
    Auction("dpgva", "DPGVA day-ahead reservation auction", "Mutz (2008), chapter 5 (sections 5.1.2-5.1.3)",
            COMMON, (Claim("truthful: no gain from a false value, a longer length or an earlier deadline", "dominant",
                           ("value", "estimate>=1", "deadline<=1"),
                           "Mutz (2008), section 5.1.3 (Clarke payments on the optimal dynamic programme); users value "
                           "only reservations that meet their true length and deadline"),)),
    Auction("relaxed-dpgva", "Relaxed DPGVA (multi-node, random-restart greedy)",
            "Mutz (2008), chapter 7 (section 7.1.2)",
            COMMON + (Param("depth", int, 100, "random orderings tried per search (the thesis's search depth D)"),
                      Param("streams", str, "independent", "random numbers of the m+1 searches: each its own, or the "
                            "main search's orderings without the bid", ("independent", "common"))),
            ()),  # chapter 7: the heuristic allocation voids the GVA's guarantees; the thesis claims none
)}


def is_auction(name: str) -> bool:
    return name in AUCTIONS


@dataclass(frozen=True)
class Bids:
    """Each row's bid in whole granules: ``period``, ``length``, ``deadline`` (from the period's
    start, clipped to it), ``value``, ``nodes``."""

    period: np.ndarray
    length: np.ndarray
    deadline: np.ndarray
    value: np.ndarray
    nodes: np.ndarray


def bids(jobs, params: dict, true: bool = False) -> Bids:
    """The rows' day-ahead bids (module docstring): the reports, or with ``true`` the true types
    (run time, true value)."""
    from marketsched.mechanisms.clearing.dpgva import DPGVA

    w = jobs.workload
    horizon = params["horizon"]
    mech = DPGVA(params["granularity"], horizon)
    if len(w) == 0:
        raise ValueError("no jobs: nothing to auction")
    t0 = float(w.submit_time.min())
    period = np.floor((w.submit_time - t0) / horizon).astype(np.int64)
    if true:
        length, value = w.runtime, jobs.true_value
    else:
        if jobs.bid is None:
            raise ValueError("the reservation auctions need bids (a value model, --values)")
        est = w.runtime_estimate
        length, value = np.where(np.isnan(est), w.runtime, est), jobs.bid
    to_deadline = np.full(len(w), horizon) if jobs.deadline is None else jobs.deadline - w.submit_time
    lu, du = mech.to_units(np.maximum(length, 1.0), np.maximum(to_deadline, 0.0))
    return Bids(period, lu, np.minimum(du, mech.units), value * w.runtime * w.procs, w.procs.astype(np.int64))


def clear(name: str, params: dict, b: Bids, period: int, capacity: int, seed: int):
    """The outcome (:class:`~marketsched.mechanisms.clearing.dpgva.ReservationOutcome`, in
    granules) of ``period``'s bids, and the rows they are."""
    from marketsched.mechanisms.clearing.dpgva import DPGVA, dpgva
    from marketsched.mechanisms.clearing.relaxed_dpgva import relaxed_dpgva

    rows = np.flatnonzero(b.period == period)
    units = DPGVA(params["granularity"], params["horizon"]).units
    if name == "dpgva":
        return dpgva(b.length[rows], b.deadline[rows], b.value[rows], units), rows
    rng = np.random.default_rng([int(seed), int(period)])
    return relaxed_dpgva(b.length[rows], b.deadline[rows], b.value[rows], b.nodes[rows], int(capacity), units,
                         params["depth"], rng, params["streams"]), rows


def utility(truth: Bids, reported: Bids, outcome, period_rows: np.ndarray, rows: np.ndarray) -> float:
    """The summed true utility of ``rows`` (all in the period whose bids are ``period_rows``)."""
    at = np.searchsorted(period_rows, rows)
    start, pay = outcome.start[at], outcome.payments[at]
    got = (start >= 0) & (reported.length[rows] >= truth.length[rows]) & (start + truth.length[rows] <= truth.deadline[rows])
    return float(np.sum(np.where(got, truth.value[rows], 0.0) - pay))


def audit(jobs, name: str, params: dict | None, deviations, per_band: int = 3, seed: int = 1, progress=None,
          job_ids=None, group: float | None = None, group_draws_: int = 5):
    """The audit table of the reservation auction ``name`` (module docstring; the columns of
    :func:`marketsched.analysis.audit.audit`)."""
    import pandas as pd

    from marketsched.analysis.audit import deviate, focal_jobs, group_draws, rows_of
    from marketsched.analysis.metrics import value_band

    if name not in AUCTIONS:
        raise ValueError(f"unknown reservation auction {name!r}; choose one of {', '.join(AUCTIONS)}")
    p = AUCTIONS[name].resolve(params)
    for dev in deviations:
        if dev.kind in ("delay", "node"):
            raise ValueError(f"{name} takes sealed bids for a whole period: a {dev.kind} lie is not in its model "
                             "(lies: value, estimate (the length), deadline)")
    capacity = jobs.workload.capacity
    truth, reported = bids(jobs, p, true=True), bids(jobs, p)
    if name == "relaxed-dpgva" and np.any(reported.nodes > capacity):
        row = int(np.flatnonzero(reported.nodes > capacity)[0])
        raise ValueError(f"relaxed-dpgva: job {jobs.workload.job_id[row]} asks for {reported.nodes[row]} nodes, the "
                         f"machine has {capacity}")
    cleared: dict[int, tuple] = {}

    def truthful(period: int):
        if period not in cleared:
            cleared[period] = clear(name, p, reported, period, capacity, jobs.seed)
        return cleared[period]

    def total(rows, b: Bids, outcome_of) -> float:
        out = 0.0
        for k in np.unique(b.period[rows]):
            outcome, period_rows = outcome_of(int(k))
            out += utility(truth, b, outcome, period_rows, rows[b.period[rows] == k])
        return out

    if group is not None:
        focal = group_draws(jobs, group, group_draws_, seed)
    else:
        focal = focal_jobs(jobs, per_band, seed) if job_ids is None else rows_of(jobs, job_ids)
    table, done = [], 0
    for i, rows in enumerate(focal):
        u0 = total(rows, reported, truthful)
        if group is not None:
            who = (i, "group", float(np.mean(jobs.true_value[rows])), len(rows), "group")
        else:
            who = (int(jobs.workload.job_id[rows[0]]), str(value_band(jobs.true_value[rows[:1]])[0]),
                   float(jobs.true_value[rows[0]]), len(rows), "job")
        for dev in deviations:
            jobs2, rows2 = deviate(jobs, rows, dev)
            assert np.array_equal(rows2, rows)  # no lie of these kinds moves a row
            lied = bids(jobs2, p)
            u1 = total(rows, lied, lambda k: clear(name, p, lied, k, capacity, jobs.seed))
            table.append((*who[:4], dev.kind, dev.amount, u0, u1, u1 - u0, who[4]))
            done += 1
            if progress is not None:
                progress(done, len(focal) * len(deviations))
    return pd.DataFrame(table, columns=["job_id", "band", "true_value", "copies", "kind", "amount", "truthful",
                                        "deviating", "gain", "who"])
