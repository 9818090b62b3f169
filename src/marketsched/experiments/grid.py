"""Grid files: a sweep of mechanisms, parameters, workloads and seeds declared in TOML.

Experiments are data: a grid file declares what :func:`marketsched.experiments.runner.run_grid`
runs (the task layer every reproduction uses: the same executors, resume, failures file and
Parquet parts with their provenance), so a sweep of one's own mechanism over traces,
parameters and seeds needs no Python. ``marketsched grid show FILE`` prints the expanded cells
and their count; ``marketsched grid run FILE`` runs them (docs/grids.md has an example).

The file (every key but ``workloads`` and ``mechanisms`` optional)::

    out = "results/sweep"           # results folder, relative to the file (default: <file stem>)
    seeds = [1, 2, 3]               # value, deadline and estimate draws (default [1])
    behaviours = ["ft"]             # bidding: ft (truthful), srg, shade (default ["ft"])
    betas = [0.9]                   # shading of srg/shade (default [0.9])
    metrics = ["completed", "mean_wait", "mean_bsd", "revenue"]   # printed after the run
    executor = "process"            # process, serial, ray, slurm (default process)
    workers = 2                     # tasks at once (default: the executor's)

    [[workloads]]                   # one or more
    trace = "SDSC-SP2-1998-4.2-cln" # a trace name, an SWF or Batsim JSON path, or synthetic:JOBS:NODES
    jobs = 2000                     # first N jobs (default all)
    split = true                    # parallel jobs -> serial copies (default false)
    capacity = [1.0, 0.75]          # fractions of the machine, a number or a list (default 1)
    estimates = "trace"             # attribute models, as on the command line
    deadlines = "patience"
    reliability = "none"
    values = "bimodal"

    [[mechanisms]]                  # one or more
    name = "hb"
    pricing = ["kth", "first"]      # for mechanisms with a pricing parameter (default ["kth"])
    params = { }                    # other parameters: a value, or a list of values to sweep

Steps of :func:`load`: read the TOML (an error names the file, line and column), check every
key (an unknown key, a wrong type or an unknown name is an error naming the key and where it
is), then expand: workloads x capacities x seeds x mechanisms x pricings x parameter
combinations (the Cartesian product of the listed values, in the file's order) x behaviours x
betas (truthful cells get beta 0), each a :class:`~marketsched.experiments.runner.Cell`.
Decision: a path in ``trace`` is relative to the grid file, so a grid file and its traces move
together; it is stored resolved (absolute) in the cells.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from marketsched.experiments.runner import NO_PRICING, Cell, cells_of, params_text

TOP_KEYS = {"out", "seeds", "behaviours", "betas", "metrics", "executor", "workers", "max_batch", "workloads",
            "mechanisms"}
WORKLOAD_KEYS = {"trace", "jobs", "split", "capacity", "estimates", "deadlines", "reliability", "values", "srg_split"}
MECHANISM_KEYS = {"name", "pricing", "params"}


def _ratio(num: str, den: str):
    return lambda s: s[num] / s[den] if s[den] else float("nan")


#: Metrics of a cell, from the sums of its rows (the results table stores sums and counts).
METRICS = {
    "jobs": lambda s: s["jobs_in_group"],
    "completed": lambda s: s["completed"],
    "mean_wait": _ratio("sum_wait", "completed"),
    "mean_flow": _ratio("sum_flow", "completed"),
    "mean_bsd": _ratio("sum_bsd", "completed"),
    "ssj_share": _ratio("ssj", "completed"),
    "revenue": lambda s: s["sum_payment"],
    "twft": lambda s: s["sum_wflow"],
    "mean_utility": _ratio("sum_utility", "jobs_in_group"),
    "preemptions": lambda s: s["preemptions"],
}
DEFAULT_METRICS = ("completed", "mean_wait", "mean_bsd", "revenue")


class GridFileError(ValueError):
    """A grid file that cannot be run; the message names the file and the key."""


@dataclass
class GridFile:
    """A loaded grid file: its cells and how to run them."""

    path: Path
    cells: list[Cell]
    out: Path
    metrics: tuple[str, ...] = DEFAULT_METRICS
    executor: str = "process"
    workers: int | None = None
    max_batch: int = 16
    plugins: dict = field(default_factory=dict)


def _list(value, where: str, kind=None) -> list:
    """``value`` as a list (a single value is a list of one), each item of type ``kind``."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise GridFileError(f"{where}: an empty list")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for x in items if kind is not None else ():
        if not isinstance(x, kinds) or (isinstance(x, bool) and bool not in kinds):
            raise GridFileError(f"{where}: {x!r} is not {_KIND_NAMES.get(kind, 'of the right type')}")
    return items


_KIND_NAMES = {int: "a whole number", str: "text", (int, float): "a number", bool: "true or false"}


def _check_keys(table: dict, allowed: set, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise GridFileError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                            f"known: {', '.join(sorted(allowed))}")


def _tables(items: list, name: str, allowed: set, where: str):
    """``(where, table)`` of each table of the array ``name``, its keys checked."""
    for i, table in enumerate(items):
        at = f"{where}: {name}[{i + 1}]"
        if not isinstance(table, dict):
            raise GridFileError(f"{at}: expected a table")
        _check_keys(table, allowed, at)
        yield at, table


def load(path) -> GridFile:
    """The grid file at ``path``, checked and expanded (see the module docstring)."""
    from marketsched.behaviour.bidding import BEHAVIOURS, SPLITS
    from marketsched.experiments.tasks import EXECUTORS
    from marketsched.mechanisms.registry import get
    from marketsched.scenario import PRICINGS, VALUE_MODELS
    from marketsched.workloads.attributes import parse_model

    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise GridFileError(f"{path}: not TOML: {exc}") from None
    _check_keys(doc, TOP_KEYS, str(path))
    where = str(path)
    seeds = _list(doc.get("seeds", [1]), f"{where}: seeds", int)
    behaviours = _list(doc.get("behaviours", ["ft"]), f"{where}: behaviours", str)
    for b in behaviours:
        if b not in BEHAVIOURS:
            raise GridFileError(f"{where}: behaviours: unknown {b!r}; choose from {', '.join(BEHAVIOURS)}")
    betas = [float(b) for b in _list(doc.get("betas", [0.9]), f"{where}: betas", (int, float))]
    if any(not 0 <= b < 1 for b in betas):
        raise GridFileError(f"{where}: betas must be in [0, 1), got {betas}")
    metrics = tuple(_list(doc.get("metrics", list(DEFAULT_METRICS)), f"{where}: metrics", str))
    for m in metrics:
        if m not in METRICS:
            raise GridFileError(f"{where}: metrics: unknown {m!r}; choose from {', '.join(METRICS)}")
    executor = doc.get("executor", "process")
    if executor not in EXECUTORS:
        raise GridFileError(f"{where}: executor: unknown {executor!r}; choose from {', '.join(EXECUTORS)}")
    workers = doc.get("workers")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise GridFileError(f"{where}: workers must be a whole number >= 1, got {workers!r}")
    max_batch = doc.get("max_batch", 16)
    if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
        raise GridFileError(f"{where}: max_batch must be a whole number >= 1, got {max_batch!r}")
    out = doc.get("out", path.stem)
    if not isinstance(out, str) or not out:
        raise GridFileError(f"{where}: out must be a folder name, got {out!r}")

    workloads = doc.get("workloads")
    if not isinstance(workloads, list) or not workloads:
        raise GridFileError(f"{where}: no [[workloads]] (at least one table with a trace)")
    mechanisms = doc.get("mechanisms")
    if not isinstance(mechanisms, list) or not mechanisms:
        raise GridFileError(f"{where}: no [[mechanisms]] (at least one table with a name)")

    units = []  # (mechanism, pricing, params text)
    for at, m in _tables(mechanisms, "mechanisms", MECHANISM_KEYS, where):
        name = m.get("name")
        if not isinstance(name, str):
            raise GridFileError(f"{at}: name is missing (a mechanism of `marketsched mechanisms`)")
        try:
            mech = get(name)
        except ValueError as exc:
            raise GridFileError(f"{at}: {exc}") from None
        at = f"{where}: mechanism {name!r}"
        params = m.get("params", {})
        if not isinstance(params, dict):
            raise GridFileError(f"{at}: params must be a table of parameter = value or [values]")
        if "pricing" in params:
            raise GridFileError(f"{at}: give pricing as the mechanism's 'pricing' key, not in params")
        pricings = [str(p) for p in _list(m.get("pricing", ["kth"]), f"{at}: pricing", str)]
        if mech.param("pricing") is None:
            if "pricing" in m:
                raise GridFileError(f"{at}: has no pricing parameter (it pays by its own rule)")
            pricings = [NO_PRICING]
        for p in pricings:
            if p != NO_PRICING and p not in PRICINGS:
                raise GridFileError(f"{at}: pricing: unknown {p!r}; choose from {', '.join(PRICINGS)}")
        keys = list(params)
        for combo in itertools.product(*[_list(params[k], f"{at}: params.{k}") for k in keys]):
            given = dict(zip(keys, combo))
            try:
                text = params_text(name, given)
            except ValueError as exc:
                raise GridFileError(f"{at}: {exc}") from None
            units += [(name, p, text) for p in pricings]

    cells = []
    for at, w in _tables(workloads, "workloads", WORKLOAD_KEYS, where):
        trace = w.get("trace")
        if not isinstance(trace, str) or not trace:
            raise GridFileError(f"{at}: trace is missing (a trace name, a file, or synthetic:JOBS:NODES)")
        if not trace.startswith("synthetic") and (path.parent / trace).is_file():
            trace = str((path.parent / trace).resolve())
        jobs = w.get("jobs", 0)
        if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0:
            raise GridFileError(f"{at}: jobs must be a whole number >= 0 (0: all), got {jobs!r}")
        split = w.get("split", False)
        if not isinstance(split, bool):
            raise GridFileError(f"{at}: split must be true or false, got {split!r}")
        capacities = [float(c) for c in _list(w.get("capacity", 1.0), f"{at}: capacity", (int, float))]
        if any(not 0 < c <= 1 for c in capacities):
            raise GridFileError(f"{at}: capacity must be fractions in (0, 1], got {capacities}")
        models = {k: w.get(k, d) for k, d in (("estimates", "trace"), ("deadlines", "patience"),
                                               ("reliability", "none"))}
        for kind, text in models.items():
            try:
                parse_model(kind, text)
            except ValueError as exc:
                raise GridFileError(f"{at}: {kind}: {exc}") from None
        values = w.get("values", "bimodal")
        if values not in VALUE_MODELS:
            raise GridFileError(f"{at}: values: unknown {values!r}; choose from {', '.join(VALUE_MODELS)}")
        srg_split = w.get("srg_split", "exact")
        if srg_split not in SPLITS:
            raise GridFileError(f"{at}: srg_split must be one of {', '.join(SPLITS)}")
        for cap, seed, (name, pricing, text), beh in itertools.product(capacities, seeds, units, behaviours):
            for beta in (betas if beh != "ft" else [0.0]):
                cells.append(Cell(trace=trace, capacity=cap, split=split, jobs=jobs, mechanism=name, pricing=pricing,
                                  behaviour=beh, beta=beta, seed=int(seed), values=values, srg_split=srg_split,
                                  params=text, **models))
    from marketsched.results import plugin_of

    plugins = {n: q for n in dict.fromkeys(c.mechanism for c in cells) if (q := plugin_of(n)) is not None}
    return GridFile(path, cells_of(cells), (path.parent / out), metrics, executor, workers, max_batch, plugins)


def summary(table, metrics=DEFAULT_METRICS):
    """Per cell (one row per cell of the results table), the ``metrics`` computed from its sums."""
    from marketsched.experiments.runner import CELL_COLUMNS, SUM_COLUMNS

    sums = table.groupby(list(CELL_COLUMNS), sort=True, dropna=False)[list(SUM_COLUMNS)].sum().reset_index()
    out = sums[list(CELL_COLUMNS)].copy()
    for m in metrics:
        out[m] = [METRICS[m](row) for row in sums.to_dict("records")]
    return out
