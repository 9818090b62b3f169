"""Per-job and aggregate metrics (Shudler et al. 2010, section IV, Eqs. 1-3).

Per job (true value ``w_i``, flow time ``phi_i``, actual run time ``tau_i``):

* flow time ``phi_i = end - submit``; wait time ``first start - submit``;
* bounded slowdown ``BSD_i = phi_i / max(tau_i, 60)`` (Eq. 1, floor 60 s); a job with
  ``BSD >= 5`` is a *severely slowed-down job* (SSJ);
* valuation ``v_i = -w_i * phi_i`` (Eq. 2); utility ``u_i = v_i - p_i`` (Eq. 3), where ``p_i``
  is what the job paid (from the reported bids) and ``w_i`` its *true* value.

Aggregates: revenue ``sum p_i``; total weighted flow time ``TWFT = sum w_j phi_j`` (minus
the social welfare); utilization = processor-seconds of work done / (capacity x span), span
from the first submission to the last end.

Groups: value bands ``low`` [0, 60], ``middle`` (60, 120), ``high`` [120, inf) (the paper's
bands, with values above 180 put in ``high``); run-time groups ``A``, ``B``, ``C`` = equal
thirds by actual run time, C the longest (ties at a boundary go by job order, so the thirds
are equal in size: a decision, the paper does not say).

Flow-based metrics are defined on completed jobs only; the per-job table holds NaN for the
others and the summary counts every final state.
"""

from __future__ import annotations

import numpy as np

from marketsched.engine.records import FinalState, Records
from marketsched.workloads.workload import Workload

BSD_FLOOR = 60.0
SSJ_THRESHOLD = 5.0
VALUE_BANDS = ("low", "middle", "high")


def value_band(values) -> np.ndarray:
    """'low' for w <= 60, 'middle' for 60 < w < 120, 'high' for w >= 120 (Shudler et al. 2010, section IV)."""
    v = np.asarray(values, dtype=np.float64)
    return np.where(v <= 60, "low", np.where(v < 120, "middle", "high"))


def runtime_group(runtime) -> np.ndarray:
    """'A', 'B', 'C': equal thirds of the jobs by actual run time (C = longest third)."""
    r = np.asarray(runtime, dtype=np.float64)
    n = r.shape[0]
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(r, kind="stable")] = np.arange(n)
    return np.array(["A", "B", "C"])[np.minimum(3 * rank // max(n, 1), 2)]


def copy_index(workload: Workload) -> np.ndarray:
    """Which serial copy of its original job each row is (0, 1, ...; 0 for an unsplit job):
    with ``job_id`` it is a unique key of a split workload's rows, whose copies repeat ``job_id``."""
    parent = workload.meta.get("parent")
    n = len(workload)
    if parent is None or n == 0:
        return np.zeros(n, np.int64)
    parent = np.asarray(parent)
    first = np.r_[0, np.flatnonzero(np.diff(parent)) + 1]  # copies are consecutive rows
    starts = np.repeat(first, np.diff(np.r_[first, n]))
    return np.arange(n, dtype=np.int64) - starts


def job_table(workload: Workload, records: Records, true_value=None, bid=None, bsd_floor: float = BSD_FLOOR,
              utility=None):
    """Per-job metrics as a pandas DataFrame (one row per job, workload order).

    ``(job_id, copy)`` is a unique key (``copy``: :func:`copy_index`). ``utility`` overrides the
    quasi-linear ``-w x flow - payment`` of Eq. 3 with a mechanism's own per-job utility."""
    import pandas as pd

    done = records.state == FinalState.COMPLETED
    flow = np.where(done, records.end_time - workload.submit_time, np.nan)
    cols = {
        "job_id": workload.job_id,
        "copy": copy_index(workload),
        "submit_time": workload.submit_time,
        "runtime": workload.runtime,
        "procs": workload.procs,
        "wait_time": records.first_start - workload.submit_time,
        "flow_time": flow,
        "bounded_slowdown": flow / np.maximum(workload.runtime, bsd_floor),
        "preemptions": records.preemptions,
        "payment": records.payment,
        "state": pd.Categorical.from_codes(records.state.astype(np.int64),
                                           pd.Index([s.name.lower() for s in FinalState])),
        "runtime_group": runtime_group(workload.runtime),
    }
    if bid is not None:
        cols["bid"] = np.asarray(bid, dtype=np.float64)
    if true_value is not None:
        w = np.asarray(true_value, dtype=np.float64)
        cols["true_value"] = w
        cols["valuation"] = -w * flow
        cols["utility"] = -w * flow - records.payment
        cols["value_band"] = value_band(w)
    if utility is not None:
        cols["utility"] = np.asarray(utility, dtype=np.float64)
    return pd.DataFrame(cols)


def summarize(workload: Workload, records: Records, true_value=None, bsd_floor: float = BSD_FLOOR) -> dict:
    """Aggregate metrics of one run as a flat dict (what the CLI prints)."""
    done = records.state == FinalState.COMPLETED
    flow = (records.end_time - workload.submit_time)[done]
    runtime = workload.runtime[done]
    bsd = flow / np.maximum(runtime, bsd_floor)
    span_end = np.nanmax(records.end_time) if len(records) else 0.0
    span = span_end - (workload.submit_time[0] if len(workload) else 0.0)
    work = float((runtime * workload.procs[done]).sum())
    out = {
        "jobs": len(workload),
        **{k: v for k, v in records.counts().items() if k != "pending"},
        "mean_wait": float(np.mean((records.first_start - workload.submit_time)[done])) if done.any() else np.nan,
        "mean_flow": float(flow.mean()) if done.any() else np.nan,
        "mean_bsd": float(bsd.mean()) if done.any() else np.nan,
        "ssj_share": float((bsd >= SSJ_THRESHOLD).mean()) if done.any() else np.nan,
        "utilization": work / (workload.capacity * span) if span > 0 else np.nan,
        "preemptions": int(records.preemptions.sum()),
        "revenue": float(records.payment.sum()),
    }
    if true_value is not None:
        w = np.asarray(true_value, dtype=np.float64)[done]
        twft = float((w * flow).sum())
        out["twft"] = twft
        out["mean_utility"] = float((-w * flow - records.payment[done]).mean()) if done.any() else np.nan
        out["revenue_per_twft"] = out["revenue"] / twft if twft > 0 else np.nan
    return out


def grouped(table, by=("value_band",), columns=("bounded_slowdown", "utility", "flow_time", "payment")):
    """Mean of ``columns`` and SSJ share per group (e.g. value band x run-time group)."""
    done = table[table["state"] == "completed"]
    cols = [c for c in columns if c in done]
    agg = done.groupby(list(by), observed=True)[cols].mean()
    agg["ssj_share"] = done.groupby(list(by), observed=True)["bounded_slowdown"].apply(lambda s: (s >= SSJ_THRESHOLD).mean())
    agg["jobs"] = done.groupby(list(by), observed=True).size()
    return agg
