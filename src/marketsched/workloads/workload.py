"""The columnar workload every simulator in marketsched consumes.

A :class:`Workload` is a set of jobs stored as parallel NumPy arrays (one row per job),
plus the capacity of the machine it is meant for. It holds what a trace says about jobs,
never what a mechanism decided: per-job results live in :class:`marketsched.engine.records.Records`.

Rows are kept sorted by ``(submit_time, row order in the source)``; the engine relies on
it to feed arrivals without sorting.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

#: Column names and dtypes of a workload, in order.
COLUMNS: dict[str, type] = {
    "job_id": np.int64,  # job number in the source (SWF field 1), or row number
    "submit_time": np.float64,  # seconds since the start of the trace
    "runtime": np.float64,  # actual run time in seconds (>= 0)
    "runtime_estimate": np.float64,  # user's requested time in seconds, NaN if unknown
    "procs": np.int64,  # processors the job needs (>= 1)
    "user_id": np.int64,  # SWF field 12, -1 if unknown
}


@dataclass(frozen=True, eq=False)
class Workload:
    """Jobs as columns plus the machine's capacity (processors or serial nodes).

    Build one with :meth:`from_columns`, which checks types, shapes, ordering and values and
    raises :class:`ValueError` naming the column and the first offending row.
    """

    job_id: np.ndarray
    submit_time: np.ndarray
    runtime: np.ndarray
    runtime_estimate: np.ndarray
    procs: np.ndarray
    user_id: np.ndarray
    capacity: int
    name: str = "workload"
    meta: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_columns(
        cls,
        *,
        submit_time,
        runtime,
        capacity: int,
        procs=None,
        runtime_estimate=None,
        job_id=None,
        user_id=None,
        name: str = "workload",
        meta: dict | None = None,
        sort: bool = True,
    ) -> Workload:
        """Validate and build a workload; missing optional columns get defaults.

        ``sort=True`` orders rows by submit time (stable), as the engine requires.
        """
        submit_time = np.asarray(submit_time, dtype=np.float64)
        n = submit_time.shape[0]
        cols = {
            "submit_time": submit_time,
            "runtime": np.asarray(runtime, dtype=np.float64),
            "procs": np.ones(n, np.int64) if procs is None else np.asarray(procs),
            "runtime_estimate": (
                np.full(n, np.nan) if runtime_estimate is None else np.asarray(runtime_estimate, dtype=np.float64)
            ),
            "job_id": np.arange(1, n + 1, dtype=np.int64) if job_id is None else np.asarray(job_id),
            "user_id": np.full(n, -1, np.int64) if user_id is None else np.asarray(user_id),
        }
        for key, arr in cols.items():
            if arr.ndim != 1 or arr.shape[0] != n:
                raise ValueError(f"column {key!r} has shape {arr.shape}, expected ({n},)")
            if arr.dtype.kind == "f" and COLUMNS[key] is np.int64:
                bad = ~np.isfinite(arr) | (arr != np.round(arr))
                if bad.any():
                    raise ValueError(f"column {key!r} must hold whole numbers; row {int(np.argmax(bad))} is {arr[bad][0]!r}")
            cols[key] = arr.astype(COLUMNS[key], copy=False)
        if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a positive whole number of processors, got {capacity!r}")
        ids = cols["job_id"]
        _check(cols["submit_time"], "submit_time", lambda a: np.isfinite(a) & (a >= 0), "a finite time >= 0", ids)
        _check(cols["runtime"], "runtime", lambda a: np.isfinite(a) & (a >= 0), "a finite run time >= 0", ids)
        _check(cols["procs"], "procs", lambda a: a >= 1, "at least 1 processor", ids)
        _check(
            cols["runtime_estimate"],
            "runtime_estimate",
            lambda a: np.isnan(a) | (np.isfinite(a) & (a >= 0)),
            "a finite run-time estimate >= 0 or NaN (unknown)",
            ids,
        )
        too_wide = cols["procs"] > capacity
        if too_wide.any():
            i = int(np.argmax(too_wide))
            raise ValueError(
                f"row {i} (job {cols['job_id'][i]}) needs {cols['procs'][i]} processors but the machine has {capacity}"
            )
        if sort and n and np.any(np.diff(cols["submit_time"]) < 0):
            order = np.argsort(cols["submit_time"], kind="stable")
            cols = {k: v[order] for k, v in cols.items()}
        elif n and np.any(np.diff(cols["submit_time"]) < 0):
            i = int(np.argmax(np.diff(cols["submit_time"]) < 0)) + 1
            raise ValueError(f"submit_time must be non-decreasing; row {i} goes back in time")
        return cls(capacity=int(capacity), name=name, meta=dict(meta or {}), **cols)

    # ------------------------------------------------------------------ views
    def __len__(self) -> int:
        return int(self.submit_time.shape[0])

    @property
    def columns(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in COLUMNS}

    def take(self, index, name: str | None = None, **meta) -> Workload:
        """Rows selected by a boolean mask or an (increasing) index array."""
        return replace(
            self,
            **{k: v[index] for k, v in self.columns.items()},
            name=name or self.name,
            meta={**self.meta, **meta},
        )

    def with_capacity(self, capacity: int) -> Workload:
        return Workload.from_columns(**self.columns, capacity=capacity, name=self.name, meta=self.meta, sort=False)

    @property
    def nbytes(self) -> int:
        """Bytes held by the job columns plus any NumPy arrays in ``meta`` (e.g. ``parent``)."""
        arrays = [*self.columns.values(), *(v for v in self.meta.values() if isinstance(v, np.ndarray))]
        return int(sum(a.nbytes for a in arrays))

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self.columns)

    def __repr__(self) -> str:
        return f"Workload({self.name!r}, jobs={len(self)}, capacity={self.capacity})"


def _check(arr: np.ndarray, name: str, ok, what: str, job_id: np.ndarray) -> None:
    good = ok(arr)
    if not np.all(good):
        i = int(np.argmin(good))
        raise ValueError(f"column {name!r}: row {i} (job {job_id[i]}) is {arr[i].item()!r}, expected {what}")
