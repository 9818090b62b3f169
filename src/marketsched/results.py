"""Result files that carry their provenance, and re-running them from it.

A per-job table (:func:`job_table_of`: one row per job and run, unique key ``run, job_id,
copy``) is written with what produced it (:func:`metadata`): the scenario (trace name and
sha256 or the built-in workload's parameters, the transforms, the value, deadline and
reliability models and the seed; :class:`marketsched.scenario.Scenario`), every run's
mechanism and resolved parameters, and the marketsched version. In a Parquet file the
metadata is a JSON document under the schema key ``marketsched``; a CSV file gets it in a
sidecar ``<file>.meta.json``. :func:`rerun` rebuilds the table from the metadata alone; a
test checks it equals the file's table.

An event log (:mod:`marketsched.engine.events`) is written the same way (:func:`write`),
with a ``run`` column when it holds several runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

META_KEY = b"marketsched"
FORMAT = 1
SUFFIXES = (".parquet", ".csv")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v

    try:
        return v("marketsched")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "unknown"


def utility_of(jobs, run) -> np.ndarray | None:
    """Per-job utility in the mechanism's own model (None: the default of ``job_table``)."""
    from marketsched.mechanisms.registry import get

    fn = get(run.mechanism).utility
    return None if fn is None else np.asarray(fn(jobs, run), dtype=np.float64)


def job_table_of(jobs, run):
    """The per-job table of one run (:func:`marketsched.analysis.metrics.job_table`), with the
    run's label first, the deadline when the scenario has deadlines, and the mechanism's own
    utility where it defines one. The jobs are the run's own (its form, ``run.jobs``) where it has them."""
    from marketsched.analysis.metrics import job_table

    jobs = getattr(run, "jobs", None) or jobs
    t = job_table(jobs.workload, run.records, true_value=jobs.true_value, bid=jobs.bid, utility=utility_of(jobs, run))
    if jobs.deadline is not None:
        t.insert(t.columns.get_loc("runtime") + 1, "deadline", jobs.deadline)
    t.insert(0, "run", run.label)
    return t


def summary_of(jobs, run) -> dict:
    """The aggregate metrics of one run (:func:`marketsched.analysis.metrics.summarize`); the mean
    utility is the mechanism's own where it defines one (mean over the jobs it is defined for). The
    jobs are the run's own (its form, ``run.jobs``) where it has them."""
    from marketsched.analysis.metrics import summarize

    jobs = getattr(run, "jobs", None) or jobs
    row = summarize(jobs.workload, run.records, jobs.true_value)
    u = utility_of(jobs, run)
    if u is not None:
        row["mean_utility"] = float(np.nanmean(u)) if np.isfinite(u).any() else float("nan")
    return row


def metadata(scenario, runs, command: str = "") -> dict:
    """What produced a result file: the scenario, each run's mechanism and parameters, the version."""
    return {"format": FORMAT, "marketsched": version(), "command": command, "scenario": scenario.describe(),
            "runs": [{"label": r.label, "mechanism": r.mechanism, "params": r.params} for r in runs]}


def check_path(path: Path, option: str = "--out") -> None:
    if Path(path).suffix not in SUFFIXES:
        raise ValueError(f"{option}: the file name must end in .parquet or .csv, got {str(path)!r}")


def write(table, path, meta: dict) -> Path:
    """Write ``table`` with ``meta`` to ``path`` (.parquet: in the schema; .csv: ``path.meta.json``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    check_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = json.dumps(meta, sort_keys=True, default=_plain)
    if path.suffix == ".parquet":
        t = pa.Table.from_pandas(table, preserve_index=False)
        t = t.replace_schema_metadata({**(t.schema.metadata or {}), META_KEY: doc.encode()})
        pq.write_table(t, path)
    else:
        table.to_csv(path, index=False)
        Path(f"{path}.meta.json").write_text(doc + "\n")
    return path


def read(path):
    """``(table, metadata)`` of a file written by :func:`write`."""
    import pandas as pd
    import pyarrow.parquet as pq

    path = Path(path)
    if path.suffix == ".parquet":
        t = pq.read_table(path)
        raw = (t.schema.metadata or {}).get(META_KEY)
        if raw is None:
            raise ValueError(f"{path}: no marketsched metadata (not written by marketsched simulate/compare --out)")
        return t.to_pandas(), json.loads(raw)
    side = Path(f"{path}.meta.json")
    if not side.is_file():
        raise ValueError(f"{path}: its metadata file {side.name} is missing")
    return pd.read_csv(path), json.loads(side.read_text())


def rerun(meta: dict, check_trace: bool = True):
    """The per-job table the metadata describes, simulated afresh (every run, in order)."""
    import pandas as pd

    from marketsched.scenario import Scenario, run

    if meta.get("format") != FORMAT:
        raise ValueError(f"rerun: metadata format {meta.get('format')!r}, this marketsched reads {FORMAT}")
    scenario = Scenario.from_dict(meta["scenario"], check_trace=check_trace)
    jobs = scenario.build()
    parts = [job_table_of(jobs, run(jobs, r["mechanism"], r["params"])) for r in meta["runs"]]
    return pd.concat(parts, ignore_index=True)


def _plain(x):
    """JSON for NumPy scalars."""
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
