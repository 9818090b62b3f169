"""Export a run as Batsim's ``jobs.csv``, the file evalys and other Batsim tools read.

Columns as Batsim writes them (Batsim's documentation, "Jobs" output, current name
``requested_number_of_resources``, which evalys's ``JobSet`` reads; older Batsim versions
wrote ``requested_number_of_processors``): ``job_id, workload_name, profile,
submission_time, requested_number_of_resources, requested_time, success, final_state,
starting_time, execution_time, finish_time, waiting_time, turnaround_time, stretch,
allocated_resources, consumed_energy, metadata``.

Decisions: one row per run segment (:func:`marketsched.analysis.timeline.segments`), so a
preempted job has one row per stretch it ran; a job's first segment has id ``<job_id>``
(``<job_id>.<copy>`` for the serial copies of a split job), later ones ``<id>#<k>``
(k = 1, 2, ...). A segment ended by preemption or a kill is ``COMPLETED_KILLED`` with
``success`` 0, the last segment of a completed job ``COMPLETED_SUCCESSFULLY`` with 1.
Processors are the first-fit assignment of :mod:`~marketsched.analysis.timeline` (the
engine does not name processors). ``requested_time`` is the run-time estimate (-1 where
unknown), ``consumed_energy`` -1 (not modelled). ``metadata`` links the segments of one
job: ``job=<id>;segment=<k>/<m>;run=<label>`` (``<id>`` the first segment's id, the same on
every segment of the job; k from 1), so ``metadata.str.extract("job=([^;]+)")`` groups them.
Jobs that never ran (rejected, or discarded from the queue) have no row: Batsim's tools
expect every row to hold resources.
"""

from __future__ import annotations

import numpy as np

COLUMNS = ["job_id", "workload_name", "profile", "submission_time", "requested_number_of_resources", "requested_time",
           "success", "final_state", "starting_time", "execution_time", "finish_time", "waiting_time",
           "turnaround_time", "stretch", "allocated_resources", "consumed_energy", "metadata"]
_STATE = {"finish": "COMPLETED_SUCCESSFULLY", "preempt": "COMPLETED_KILLED", "kill": "COMPLETED_KILLED",
          "discard": "COMPLETED_KILLED", "open": "COMPLETED_KILLED"}


def jobs_csv(workload, segs, label: str = "", copy=None):
    """The Batsim jobs table of one run (a DataFrame with :data:`COLUMNS`) from its segments."""
    import pandas as pd

    from marketsched.analysis.metrics import copy_index

    copy = copy_index(workload) if copy is None else np.asarray(copy)
    split = bool(workload.meta.get("parent") is not None)
    s = segs.sort_values(["row", "start"], kind="stable").reset_index(drop=True)
    rows = s["row"].to_numpy()
    k = s.groupby("row").cumcount().to_numpy()
    n_seg = s.groupby("row")["row"].transform("size").to_numpy()
    base = np.array([f"{workload.job_id[r]}.{copy[r]}" if split else str(workload.job_id[r]) for r in rows.tolist()],
                    dtype=object)
    ids = np.where(k == 0, base, [f"{b}#{i}" for b, i in zip(base, k)])
    submit = workload.submit_time[rows]
    start, end = s["start"].to_numpy(), s["end"].to_numpy()
    est = workload.runtime_estimate[rows]
    how = s["how"].to_numpy()
    out = pd.DataFrame({
        "job_id": ids,
        "workload_name": workload.name,
        "profile": "delay",
        "submission_time": submit,
        "requested_number_of_resources": s["procs"].to_numpy(),
        "requested_time": np.where(np.isnan(est), -1.0, est),
        "success": (how == "finish").astype(np.int64),
        "final_state": [_STATE[h] for h in how],
        "starting_time": start,
        "execution_time": end - start,
        "finish_time": end,
        "waiting_time": start - submit,
        "turnaround_time": end - submit,
        "stretch": (end - submit) / np.where(end - start > 0, end - start, np.nan),
        "allocated_resources": s["resources"].to_numpy(),
        "consumed_energy": -1.0,
        "metadata": [f"job={b};segment={i + 1}/{m};run={label}" for b, i, m in zip(base, k.tolist(), n_seg.tolist())],
    })
    return out[COLUMNS]

