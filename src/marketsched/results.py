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
import re
from functools import lru_cache
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


KERNELS = ("marketsched.engine._priority", "marketsched.engine._backfilling",
           "marketsched.mechanisms.online._dlgm_kernel")


@lru_cache(maxsize=1)
def revision() -> str | None:
    """The source revision of this marketsched when it runs from a git checkout (an editable
    install): the commit, with ``+dirty`` when the tracked files differ from it; None otherwise
    (an installed release is named by its version). Looked up once per process."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "diff", "--quiet", "HEAD", "--", "."], capture_output=True,
                               timeout=10).returncode != 0
    except (OSError, subprocess.SubprocessError):  # no git on this machine
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def missing_kernels() -> list[str]:
    """The compiled kernels (C extension modules) that do not import here."""
    import importlib.util

    out = []
    for name in KERNELS:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:
            found = False
        if not found:
            out.append(name)
    return out


def engine_path() -> str:
    """The engine path this process takes for a mechanism with a compiled kernel: ``"python"``
    under ``MARKETSCHED_ENGINE=python`` or when a kernel is missing, else ``"compiled"``."""
    from marketsched.engine import compiled

    return "python" if compiled.mode() == "python" or missing_kernels() else "compiled"


def plugin_of(mechanism: str) -> dict | None:
    """``{"distribution", "version"}`` of the installed package that provides ``mechanism``, for a
    plugin; None for a built-in or a mechanism registered from Python code."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v

    from marketsched.mechanisms.registry import get

    origin = get(mechanism).origin
    if not origin.startswith("plugin "):
        return None
    dist = origin.removeprefix("plugin ")
    try:
        return {"distribution": dist, "version": v(dist)}
    except PackageNotFoundError:
        return {"distribution": dist, "version": None}


def provenance(mechanisms=()) -> dict:
    """What every result file records about the software that made it: the marketsched version,
    the source revision (None when unknown), the engine path of this process and, for each
    plugin mechanism among ``mechanisms``, its distribution and version."""
    plugins = {m: p for m in dict.fromkeys(mechanisms) if (p := plugin_of(m)) is not None}
    return {"marketsched": version(), "revision": revision(), "engine": engine_path(), "plugins": plugins}


def check_mechanisms(meta: dict) -> None:
    """Raise ``ValueError`` naming the plugin to install when a mechanism of the metadata is unknown here."""
    from marketsched.mechanisms.registry import get

    plugins = meta.get("plugins") or {}
    names = [r["mechanism"] for r in meta.get("runs", [])] + [c["mechanism"] for c in meta.get("cells", [])]
    for name in dict.fromkeys(names):
        try:
            get(name)
        except ValueError:
            p = plugins.get(name)
            if p is None:
                raise
            pin = f"=={p['version']}" if p.get("version") else ""
            raise ValueError(f"mechanism {name!r} came from the plugin {p['distribution']} {p.get('version') or ''}"
                             f", which is not installed here: pip install '{p['distribution']}{pin}'") from None


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
    """What produced a result file: the scenario (trace and its sha256, transforms, attribute
    models, seed), each run's mechanism, parameters and engine path, and :func:`provenance`."""
    return {"format": FORMAT, "kind": "runs", **provenance([r.mechanism for r in runs]), "command": command,
            "scenario": scenario.describe(),
            "runs": [{"label": r.label, "mechanism": r.mechanism, "params": r.params, "engine": r.engine}
                     for r in runs]}


def check_path(path: Path, option: str = "--out") -> None:
    if Path(path).suffix not in SUFFIXES:
        raise ValueError(f"{option}: the file name must end in .parquet or .csv, got {str(path)!r}")


def write(table, path, meta: dict) -> Path:
    """Write ``table`` with ``meta`` to ``path`` (.parquet: in the schema; .csv: ``path.meta.json``)."""
    path = Path(path)
    check_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        write_parquet(table, path, meta)
    else:
        table.to_csv(path, index=False)
        Path(f"{path}.meta.json").write_text(json.dumps(meta, sort_keys=True, default=_plain) + "\n")
    return path


def write_parquet(table, path, meta: dict) -> Path:
    """``table`` as Parquet at ``path`` (any name) with ``meta`` under the schema key ``marketsched``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.Table.from_pandas(table, preserve_index=False)
    doc = json.dumps(meta, sort_keys=True, default=_plain)
    pq.write_table(t.replace_schema_metadata({**(t.schema.metadata or {}), META_KEY: doc.encode()}), path)
    return Path(path)


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
    check_mechanisms(meta)
    scenario = Scenario.from_dict(meta["scenario"], check_trace=check_trace)
    jobs = scenario.build()
    parts = [job_table_of(jobs, run(jobs, r["mechanism"], r["params"])) for r in meta["runs"]]
    return pd.concat(parts, ignore_index=True)


def _plain(x):
    """JSON for NumPy scalars."""
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


#: The names (dict keys, table columns, dataclass fields) of the values in a reproduction's
#: results that measure time or the machine's load, or say how the run was executed: they differ
#: between any two runs, so ``rerun`` of a task store leaves them out of the comparison, and says
#: so. Named one by one (decision): a pattern such as "ends in ``_s``" would also leave out real
#: quantities that merely carry a unit (a mean wait in seconds, the brute-force time cap
#: ``brute_cap_s``, the thesis's published times ``thesis_ms``, ``num_cpus``).
VOLATILE_NAMES = frozenset({
    # wall or CPU time of a computation
    "seconds", "minutes", "wall_s", "wall_seconds", "br_seconds", "runs_seconds", "audit_seconds",
    "mean_cell_seconds", "cell_seconds", "cpu_seconds", "last_call_wall_s",
    "schedule_s", "payments_s", "brute_s", "batched_s", "unbatched_s", "mip_s",  # Mutz (2008) timings
    "dlgm_cpu_s", "pdlgm_cpu_s", "dlgm_cpu", "pdlgm_cpu",  # Stößer (2009) ch. 5 simulation CPU time
    "mip_ms", "mip_cpu_ms", "mip_wall_ms", "k_ms", "cv_ms", "k_wall_ms", "cv_wall_ms",  # Stößer (2009) ch. 3-4
    # the machine's load, and the MIP time limit stretched by it
    "load_average", "load_factor", "mip_limit",
    # how the run was executed
    "workers", "executor",
})
VOLATILE = re.compile("^(?:" + "|".join(re.escape(n) for n in sorted(VOLATILE_NAMES)) + ")$")


def same(a, b, ignore: re.Pattern | None = None) -> bool:
    """Whether two results are identical: tables cell by cell (same columns, dtypes and order),
    arrays element by element (NaN equal to NaN), containers item by item, floats bit for bit
    (NaN equal to NaN), anything else by ``==``. ``ignore``: dict keys, table columns and
    dataclass fields whose name it matches are left out (at any depth)."""
    import pandas as pd

    def kept(names):
        return [n for n in names if ignore is None or not ignore.search(str(n))]

    if isinstance(a, pd.DataFrame):
        return type(a) is type(b) and kept(a.columns) == kept(b.columns) and a[kept(a.columns)].equals(
            b[kept(b.columns)])
    if isinstance(a, pd.Series):
        return type(a) is type(b) and a.equals(b)
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.shape == b.shape and a.dtype == b.dtype
                and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")))
    if isinstance(a, dict):
        return isinstance(b, dict) and kept(a) == kept(b) and all(same(a[k], b[k], ignore) for k in kept(a))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y, ignore) for x, y in zip(a, b))
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)):
        return (a != a and b != b) or a == b
    if hasattr(a, "__dataclass_fields__") and type(a) is type(b):
        return all(same(getattr(a, f), getattr(b, f), ignore) for f in kept(a.__dataclass_fields__))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def first_difference(a, b) -> str:
    """Where two tables of the same shape first differ (for ``marketsched rerun``'s message)."""
    if list(a.columns) != list(b.columns):
        return f"columns differ: {list(a.columns)} vs {list(b.columns)}"
    if len(a) != len(b):
        return f"{len(a)} rows in the file, {len(b)} rerun"
    for c in a.columns:
        if not a[c].equals(b[c]):
            bad = ~((a[c] == b[c]) | (a[c].isna() & b[c].isna()))
            i = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
            return f"column {c!r} first differs at row {i}: {a[c].iloc[i]!r} in the file, {b[c].iloc[i]!r} rerun"
    return "the tables' dtypes differ"


def _as_read(table, path: Path):
    """``table`` as reading it back from a file like ``path`` gives it (CSV loses dtypes)."""
    import io

    import pandas as pd

    if path.suffix == ".csv":
        return pd.read_csv(io.StringIO(table.to_csv(index=False)))
    import pyarrow as pa

    return pa.Table.from_pandas(table, preserve_index=False).to_pandas()


def rerun_path(path, check_trace: bool = True, progress=None) -> list[tuple[str, bool, str]]:
    """Simulate again what a result file (or folder) holds and compare: ``[(what, identical,
    detail), ...]``. ``path``: a single-run file (``simulate``/``compare --out``), a grid part
    (``part-*.parquet``), a grid's results folder (every part) or a task store (a folder with
    ``provenance.json``, as ``reproduce`` writes in ``OUT/tasks``)."""
    path = Path(path)
    if path.is_dir():
        from marketsched.experiments.tasks import PROVENANCE, rerun_store

        if (path / PROVENANCE).is_file():
            return [(f"task {key}", ok, "" if ok else "its result differs from the stored one (times and "
                     "load measures left out)") for key, ok in rerun_store(path, progress=progress)]
        parts = sorted(path.glob("part-*.parquet"))
        if not parts:
            raise ValueError(f"{path}: neither a task store ({PROVENANCE}) nor a grid's results (part-*.parquet)")
        return [r for p in parts for r in rerun_path(p, check_trace)]
    table, meta = read(path)
    if meta.get("kind") == "grid part":
        from marketsched.experiments.runner import rerun_part

        again = _as_read(rerun_part(meta, check_trace=check_trace), path)
        table = table.reset_index(drop=True)
    else:
        again = _as_read(rerun(meta, check_trace=check_trace), path)
    ok = table.equals(again)
    return [(path.name, ok, "" if ok else first_difference(table, again))]
