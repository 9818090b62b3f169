"""The experiment runner: a declared grid of simulation cells, run in parallel, into a tidy table.

Experiments are data: a grid is declared, not coded (the grid of Shudler et al. 2010 is
trace x capacity x mechanism x pricing x behaviour x beta x seed).

A **cell** (:class:`Cell`) is one simulation: a workload (trace, capacity fraction, split,
optional first-N-jobs cut, run-time estimate model), any registered mechanism
(:mod:`marketsched.mechanisms.registry`) with its pricing (``"-"`` for a mechanism without a
pricing parameter) and other parameters, a bidding behaviour with its beta, the deadline and
reliability models, and a seed. A mechanism that cannot run on the cell's jobs fails that cell
with the registry's message naming what is missing (e.g. ``--split``). A **grid** (:class:`Grid`) is the Cartesian product of lists of those; several grids can
be joined (``cells_of(g1, g2)``), duplicates dropped.

Steps of :func:`run_grid`:

1. expand the grids into cells; drop the cells already in the results table (**resume**);
2. group the rest into **batches** that share a workload preparation: one batch = one
   (trace, capacity, split, jobs, seed, value model, SRG split) with up to ``max_batch`` of its
   cells (mechanisms x pricings x behaviours x betas). A batch builds its workload once (and a
   worker process caches built workloads across batches), draws the true values
   (``true_values(w, model, seed)``) and the bidders' draws (``draw_shading(w, seed)``) once:
   **common random numbers** across every cell of the batch and across batches;
3. run the batches on local processes (``executor="process"``, the default, a
   ``concurrent.futures.ProcessPoolExecutor`` started with "spawn":
   :mod:`marketsched.experiments.processes`), in this process (``"serial"``), on Ray
   (``"ray"``, optional: ``pip install 'marketsched[ray]'``; a running cluster by its address)
   or as a Slurm job array (``"slurm"``), with the executors every reproduction uses
   (:func:`marketsched.experiments.tasks.execute`); the table is the same on each, cell by cell;
4. as each batch finishes, write its rows to a new Parquet part file in the results directory
   (written to a temporary name, then renamed: a crash never leaves half a part), with its
   provenance in the Parquet metadata (:func:`part_metadata`: version, source revision, engine
   path, the traces' sha256 and the cells; ``marketsched rerun`` reruns a part from it), and
   advance the progress bar. A cell that raises is recorded in ``failures.json`` with its parameters
   and traceback and does not stop the others; a batch that dies as a whole (worker crash, bad
   trace) fails each of its cells the same way. Failed cells are not in the table, so the next
   run retries them.

The **results table** (:func:`load_results`) is tidy: one row per cell and group, groups being
value bin (``bin_width``-wide bins of the true value, the last bin open), value band (low,
middle, high; :func:`~marketsched.analysis.metrics.value_band`), run-time group (A, B, C;
:func:`~marketsched.analysis.metrics.runtime_group`) and bidder (``aggressive`` or
``conservative`` under the SRG draws -- also in FT cells, where it labels the same jobs,
which allows paired comparisons). Every measure is stored as a sum or a count (``jobs``,
``completed``, ``sum_flow``, ``sum_bsd``, ``ssj``, ``sum_payment``, ``sum_wflow``,
``sum_utility``, ...), so any coarser aggregate (per band, per group, per cell) is an exact sum
of rows; means are ratios of sums. Flow-based sums cover completed jobs only.

Decisions: tables are rows sorted by cell then group, so the same grid gives the same table
whatever the executor, worker count or completion order (**determinism**); wall times are not
in the table (they are in :class:`RunResult`) for that reason.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from marketsched.behaviour.bidding import BEHAVIOURS, SPLITS, draw_shading, make_bids
from marketsched.experiments.tasks import atomic_write, error_text, execute, executor_spec, write_failures

if TYPE_CHECKING:
    import pandas as pd

CELL_COLUMNS = ("trace", "capacity", "split", "jobs", "mechanism", "pricing", "behaviour", "beta", "seed",
                "values", "srg_split", "params", "estimates", "deadlines", "reliability")
#: Values of the columns added after the first tables were written (older part files lack them).
COLUMN_DEFAULTS = {"params": "", "estimates": "trace", "deadlines": "patience", "reliability": "none"}
NO_PRICING = "-"
GROUP_COLUMNS = ("value_bin", "value_band", "runtime_group", "bidder")
SUM_COLUMNS = ("jobs_in_group", "completed", "sum_value", "sum_bid", "sum_runtime", "sum_flow", "sum_wait",
               "sum_bsd", "ssj", "sum_payment", "sum_wflow", "sum_utility", "preemptions")
BIN_WIDTH = 10.0
BIN_TOP = 180.0


@dataclass(frozen=True)
class Cell:
    """One simulation of the grid.

    ``trace``: a registry name, an SWF path, or ``"synthetic:<jobs>:<nodes>"`` (the built-in
    synthetic workload, seed 0). ``jobs`` = 0 keeps every job, N > 0 the first N (before the
    split). ``beta`` is the aggressive users' beta for ``behaviour="srg"``, everyone's for
    ``"shade"``, and 0 for ``"ft"``. ``pricing`` is ``"-"`` for a mechanism without a pricing
    parameter; ``params`` its other parameters as ``"key=value;..."`` (sorted, defaults left
    out); ``estimates``, ``deadlines``, ``reliability``: attribute models
    (:mod:`marketsched.workloads.attributes`), drawn from ``seed``.
    """

    trace: str
    capacity: float = 1.0
    split: bool = False
    jobs: int = 0
    mechanism: str = "hb"
    pricing: str = "kth"
    behaviour: str = "ft"
    beta: float = 0.0
    seed: int = 1
    values: str = "bimodal"
    srg_split: str = "exact"
    params: str = ""
    estimates: str = "trace"
    deadlines: str = "patience"
    reliability: str = "none"

    def key(self) -> tuple:
        return tuple(getattr(self, c) for c in CELL_COLUMNS)

    def workload_key(self) -> tuple:
        # estimates drawn at random depend on the seed; "trace" and "exact" do not
        seed = self.seed if self.estimates.split(":")[0] not in ("trace", "exact") else 0
        return (self.trace, self.capacity, self.split, self.jobs, self.estimates, seed)

    def batch_key(self) -> tuple:
        return self.workload_key() + (self.seed, self.values, self.srg_split, self.deadlines, self.reliability)

    def mechanism_params(self) -> dict:
        """The cell's mechanism parameters (text values, as on the command line)."""
        out = dict(item.split("=", 1) for item in self.params.split(";") if item)
        if self.pricing != NO_PRICING:
            out["pricing"] = self.pricing
        return out

    def label(self) -> str:
        return (f"{self.trace} cap={self.capacity:g}{' split' if self.split else ''}"
                f"{f' jobs={self.jobs}' if self.jobs else ''} {self.mechanism}"
                f"{'' if self.pricing == NO_PRICING else '/' + self.pricing}"
                f"{f'({self.params})' if self.params else ''} "
                f"{self.behaviour} beta={self.beta:g} seed={self.seed}")


def norm_key(values) -> tuple:
    """A cell key with floats rounded, so keys read back from Parquet compare equal."""
    return tuple(round(float(v), 12) if isinstance(v, (float, np.floating)) else
                 (bool(v) if isinstance(v, (bool, np.bool_)) else (int(v) if isinstance(v, (int, np.integer)) else v))
                 for v in values)


def params_text(mechanism: str, params: dict | None) -> str:
    """``params`` of ``mechanism`` (without ``pricing``) as a cell's canonical ``"key=value;..."``:
    checked by the registry, sorted, defaults left out."""
    from marketsched.mechanisms.registry import get

    m = get(mechanism)
    given = {k: v for k, v in (params or {}).items() if k != "pricing"}
    resolved = m.resolve(given)
    defaults = {p.name: p.default for p in m.params}
    return ";".join(f"{k}={resolved[k]}" for k in sorted(given) if defaults[k] != resolved[k])


@dataclass
class Grid:
    """A Cartesian product of cells. ``betas`` apply to the shading behaviours; FT cells get beta 0.

    ``mechanisms``: any registered names; ``pricings`` apply to the mechanisms with a pricing
    parameter (the others get one cell with pricing ``"-"``); ``params``: per mechanism name, a
    dict of its other parameters.
    """

    traces: Sequence[str]
    capacities: Sequence[float] = (1.0,)
    split: bool = False
    jobs: int = 0
    mechanisms: Sequence[str] = ("hb",)
    pricings: Sequence[str] = ("kth",)
    behaviours: Sequence[str] = ("ft",)
    betas: Sequence[float] = (0.9,)
    seeds: Sequence[int] = (1,)
    values: str = "bimodal"
    srg_split: str = "exact"
    params: dict = field(default_factory=dict)
    estimates: str = "trace"
    deadlines: str = "patience"
    reliability: str = "none"

    def __post_init__(self):
        from marketsched.mechanisms.registry import names
        from marketsched.scenario import PRICINGS, VALUE_MODELS
        from marketsched.workloads.attributes import parse_model

        def check(name, items, allowed):
            items = list(items)
            if not items:
                raise ValueError(f"Grid.{name} is empty")
            for x in items:
                if x not in allowed:
                    raise ValueError(f"Grid.{name}: unknown {x!r}; choose from {', '.join(map(str, allowed))}")

        check("mechanisms", self.mechanisms, names())
        check("pricings", self.pricings, PRICINGS)
        for name, p in self.params.items():
            if name not in self.mechanisms:
                raise ValueError(f"Grid.params: {name!r} is not among Grid.mechanisms")
            params_text(name, p)  # raises naming a bad parameter
        for kind in ("estimates", "deadlines", "reliability"):
            parse_model(kind, getattr(self, kind))
        check("behaviours", self.behaviours, BEHAVIOURS)
        if self.values not in VALUE_MODELS:
            raise ValueError(f"Grid.values: unknown value model {self.values!r}; choose from {', '.join(VALUE_MODELS)}")
        if self.srg_split not in SPLITS:
            raise ValueError(f"Grid.srg_split must be one of {SPLITS}, got {self.srg_split!r}")
        if not list(self.traces):
            raise ValueError("Grid.traces is empty")
        for c in self.capacities:
            if not (0 < float(c) <= 1):
                raise ValueError(f"Grid.capacities: {c!r} is not a fraction in (0, 1]")
        for b in self.betas:
            if not (0 <= float(b) < 1):
                raise ValueError(f"Grid.betas: {b!r} is outside [0, 1)")
        if not list(self.seeds):
            raise ValueError("Grid.seeds is empty")
        if int(self.jobs) < 0:
            raise ValueError(f"Grid.jobs = {self.jobs} is negative")

    def cells(self) -> list[Cell]:
        from marketsched.mechanisms.registry import get

        out = []
        for trace, cap, seed, mech, pricing, beh in itertools.product(
                self.traces, self.capacities, self.seeds, self.mechanisms, self.pricings, self.behaviours):
            if get(mech).param("pricing") is None:
                pricing = NO_PRICING
            for beta in (self.betas if beh != "ft" else (0.0,)):
                out.append(Cell(trace=str(trace), capacity=float(cap), split=bool(self.split), jobs=int(self.jobs),
                                mechanism=mech, pricing=pricing, behaviour=beh, beta=float(beta), seed=int(seed),
                                values=self.values, srg_split=self.srg_split,
                                params=params_text(mech, self.params.get(mech)), estimates=self.estimates,
                                deadlines=self.deadlines, reliability=self.reliability))
        return _dedupe(out)


def _dedupe(cells: Iterable[Cell]) -> list[Cell]:
    seen, out = set(), []
    for c in cells:
        k = norm_key(c.key())
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out


def cells_of(*grids) -> list[Cell]:
    """Cells of several grids (or cells, or lists of either), in order, without duplicates."""
    out: list[Cell] = []
    for g in grids:
        if isinstance(g, Grid):
            out += g.cells()
        elif isinstance(g, Cell):
            out.append(g)
        elif isinstance(g, (list, tuple)):
            out += cells_of(*g)
        else:
            raise ValueError(f"cells_of: expected a Grid or Cell, got {type(g).__name__}")
    return _dedupe(out)


# ------------------------------------------------------------------------------------ one batch
@lru_cache(maxsize=4)
def build_workload(trace: str, capacity: float, split: bool, jobs: int, estimates: str = "trace", seed: int = 0):
    from marketsched.scenario import WorkloadSpec

    if trace.startswith("synthetic"):
        parts = trace.split(":")
        try:
            n_jobs = int(parts[1]) if len(parts) > 1 else 5000
            nodes = int(parts[2]) if len(parts) > 2 else 64
        except ValueError:
            raise ValueError(f"synthetic trace {trace!r}: expected 'synthetic:<jobs>:<nodes>'") from None
        spec = WorkloadSpec(trace=None, synthetic_jobs=n_jobs, synthetic_nodes=nodes,
                            jobs=jobs or None, split=split, capacity=capacity, estimates=estimates, estimates_seed=seed)
    else:
        spec = WorkloadSpec(trace=trace, jobs=jobs or None, split=split, capacity=capacity, estimates=estimates,
                            estimates_seed=seed)
    w = spec.build()
    if len(w) == 0:
        raise ValueError(f"workload {trace!r} (capacity {capacity}, split {split}, jobs {jobs}) has no jobs")
    return w, tuple(spec.notes)


def _groups_static(w, true_value, draws, bin_width: float) -> dict:
    """Each job's group, the same for all cells of a batch, so found once here: ``group`` numbers
    the groups in the order of their labels (value bin, value band, run-time group, bidder,
    sorted), ``keys`` lists each number's labels. A cell then sums by one integer column instead
    of grouping its hundreds of thousands of jobs on four label columns, two thirds of them
    strings converted anew for every cell: the same rows, in the same order, with the same sums
    (each group's jobs are added in the same order)."""
    import pandas as pd

    from marketsched.analysis.metrics import runtime_group, value_band

    top = BIN_TOP
    vbin = np.minimum(np.floor(np.maximum(true_value, 0) / bin_width) * bin_width, top)
    labels = pd.DataFrame({
        "value_bin": vbin,
        "value_band": value_band(true_value),
        "runtime_group": runtime_group(w.runtime),
        "bidder": np.where(draws.aggressive, "aggressive", "conservative"),
    })
    grouped = labels.groupby(list(GROUP_COLUMNS), sort=True, observed=True)
    return {"group": grouped.ngroup().to_numpy(np.int64), "keys": grouped.size().reset_index()[list(GROUP_COLUMNS)]}


def cell_rows(cell: Cell, w, true_value, bid, records, static: dict):
    """The tidy rows of one simulated cell: sums and counts per group (see module docstring);
    ``static``: the batch's groups (:func:`_groups_static`)."""
    import pandas as pd

    from marketsched.analysis.metrics import BSD_FLOOR, SSJ_THRESHOLD
    from marketsched.engine.records import FinalState

    done = records.state == FinalState.COMPLETED
    flow = np.where(done, records.end_time - w.submit_time, 0.0)
    bsd = flow / np.maximum(w.runtime, BSD_FLOOR)
    wait = np.where(done, records.first_start - w.submit_time, 0.0)
    df = pd.DataFrame({
        "group": static["group"],
        "jobs_in_group": 1,
        "completed": done.astype(np.int64),
        "sum_value": true_value,
        "sum_bid": bid,
        "sum_runtime": w.runtime,
        "sum_flow": flow,
        "sum_wait": wait,
        "sum_bsd": bsd,
        "ssj": (done & (bsd >= SSJ_THRESHOLD)).astype(np.int64),
        "sum_payment": records.payment,
        "sum_wflow": np.where(done, true_value * flow, 0.0),
        "sum_utility": np.where(done, -true_value * flow - records.payment, 0.0),
        "preemptions": records.preemptions.astype(np.int64),
    })
    sums = df.groupby("group", sort=True)[list(SUM_COLUMNS)].sum()
    rows = pd.concat([static["keys"].iloc[sums.index].reset_index(drop=True), sums.reset_index(drop=True)], axis=1)
    for c in reversed(CELL_COLUMNS):
        rows.insert(0, c, getattr(cell, c))
    rows["nodes"] = int(w.capacity)
    return rows


class _PaymentProxy:
    """The simulator seen by a second payment scheme: everything shared except ``payment``."""

    def __init__(self, sim, payment: list):
        self._sim = sim
        self.payment = payment

    def __getattr__(self, name):
        return getattr(self._sim, name)


class BothPrices:
    """First and k-th price settled side by side on one schedule.

    Why this is exact: in HB, NPHB, WSPT and WSEPT the allocation depends on bids and run times
    only, never on the payment rule (Shudler et al. 2010, Algorithm 1 steps 3-4; section III.B), so the
    first-price and the k-th-price cell of the same (mechanism, bids) have the same schedule.
    This scheme forwards every hook (``bind``, ``advance``, ``on_start``, ``on_stop``,
    ``update``, ``extend``) to a :class:`FirstPrice` writing the simulator's payments and a
    :class:`KthPrice` writing ``kth_payment`` through a proxy; one simulation then yields both
    cells. A test checks it against two separate runs.
    """

    name = "first+kth"

    def __init__(self):
        from marketsched.mechanisms.online.pricing import FirstPrice, KthPrice

        self.first, self.kth = FirstPrice(), KthPrice()
        self.kth_payment: list[float] = []

    def bind(self, policy, sim) -> None:
        self.first.bind(policy, sim)
        self.kth_payment = [0.0] * sim.n_jobs
        self.kth.bind(policy, _PaymentProxy(sim, self.kth_payment))

    def extend(self, k: int) -> None:
        for scheme in (self.first, self.kth):
            if hasattr(scheme, "extend"):
                scheme.extend(k)
        self.kth_payment += [0.0] * k

    def advance(self, t: float) -> None:
        self.first.advance(t)
        self.kth.advance(t)

    def on_start(self, j: int) -> None:
        self.first.on_start(j)
        self.kth.on_start(j)

    def on_stop(self, j: int) -> None:
        self.first.on_stop(j)
        self.kth.on_stop(j)

    def update(self) -> None:
        self.first.update()
        self.kth.update()


def simulate_pricings(w, mechanism: str, bid, pricings: Sequence[str], jobs=None, params: dict | None = None) -> dict:
    """Records per pricing of one mechanism and bid vector; for the priority rules (HB, NPHB,
    WSPT, WSEPT) first + k-th share one simulation (the compiled kernel's, when built), also when
    other pricings (``kth-uncapped``) are asked beside them, each of which runs on its own.
    ``jobs``: the scenario's jobs (default: the bids as true values, no deadlines); ``params``:
    the mechanism's other parameters."""
    from dataclasses import replace

    from marketsched.engine.simulator import Simulator
    from marketsched.mechanisms.online.priority import RULES, make_priority_mechanism
    from marketsched.mechanisms.registry import Unfit, get, missing
    from marketsched.scenario import Jobs, run

    pricings = list(pricings)
    jobs = Jobs.from_bids(w, bid) if jobs is None else jobs
    out: dict = {}  # pricing -> Records
    if {"first", "kth"} <= set(pricings) and mechanism in RULES and not params:
        gaps = missing(get(mechanism), jobs)
        if gaps:
            raise Unfit("; ".join(gaps))
        both = BothPrices()
        rec = Simulator(w, make_priority_mechanism(mechanism, w, bid, both)).run()
        out = {"first": rec, "kth": replace(rec, payment=np.asarray(both.kth_payment, dtype=np.float64))}
    for p in pricings:
        if p in out:
            continue
        given = dict(params or {}, **({} if p == NO_PRICING else {"pricing": p}))
        out[p] = run(jobs, mechanism, given).records
    return out


def evaluate_batch(cells: Sequence[Cell], bin_width: float = BIN_WIDTH, share_schedule: bool = True):
    """Run the cells of one batch (they share workload, seed, value model and SRG split).

    Returns ``(rows, failures, seconds)``: a DataFrame of the finished cells' rows (or None),
    a list of failure dicts (cell parameters, error, traceback) and, per cell key, its
    ``(wall, cpu)`` seconds (cells sharing a schedule split its time evenly).
    """
    import pandas as pd

    from marketsched.scenario import Jobs, true_values
    from marketsched.workloads.attributes import draw

    first = cells[0]
    if any(c.batch_key() != first.batch_key() for c in cells):
        raise ValueError("evaluate_batch: cells of one batch must share workload, seed, value model and SRG split")
    try:
        w, _ = build_workload(*first.workload_key())
        v = true_values(w, first.values, first.seed)
        deadline = draw("deadlines", first.deadlines, w, first.seed)
        reliability = draw("reliability", first.reliability, w, first.seed)
        draws = draw_shading(w, first.seed, split=first.srg_split)
        static = _groups_static(w, v, draws, bin_width)
    except Exception as exc:  # the whole batch fails, each cell reported
        return None, [_failure(c, exc) for c in cells], {}
    parts, failures, seconds = [], [], {}
    # cells differing only in the pricing share one schedule (share_schedule=True)
    units: dict[tuple, list[Cell]] = {}
    for c in cells:
        k = (c.mechanism, c.params, c.behaviour, c.beta) if share_schedule else (c.key(),)
        units.setdefault(k, []).append(c)
    # The collections after each simulation (below) look only at what the batch's simulations
    # made: everything alive before (modules, the batch's workload) is set aside (gc.freeze)
    # meanwhile; a full collection in a worker that has imported pandas and matplotlib costs ~50 ms.
    big = len(w) >= 20_000  # small workloads: not worth a collection
    if big:
        gc.freeze()
    try:
        for group in units.values():
            t0, c0_cpu = time.perf_counter(), time.process_time()
            try:
                c0 = group[0]
                bid = make_bids(c0.behaviour, v, draws, c0.beta)
                jobs = Jobs(w, v, bid, deadline=deadline, min_reliability=reliability, seed=c0.seed,
                            models={"values": c0.values, "deadlines": c0.deadlines, "reliability": c0.reliability})
                other = {k: x for k, x in c0.mechanism_params().items() if k != "pricing"}
                recs = simulate_pricings(w, c0.mechanism, bid, [c.pricing for c in group], jobs, other)
                for c in group:
                    parts.append(cell_rows(c, w, v, bid, recs[c.pricing], static))
            except Exception as exc:
                failures += [_failure(c, exc) for c in group]
            # The simulator, policy and payment scheme reference each other (cycles), so a finished
            # simulation is only freed by the cyclic GC, which big float lists never trigger:
            # without this, a worker's memory grew by ~125 MB per LPC simulation (7.5 GB on SDSC-SP2).
            recs = {}
            if big:
                gc.collect()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0_cpu
            for c in group:
                seconds[c.key()] = (wall / len(group), cpu / len(group))
    finally:
        if big:
            gc.unfreeze()
    rows = pd.concat(parts, ignore_index=True) if parts else None
    if rows is not None:
        from marketsched.results import engine_path

        rows.attrs["engine"] = engine_path()  # of the worker that simulated (kept through pickling)
    return rows, failures, seconds


def _failure(cell: Cell, exc: BaseException) -> dict:
    error, tb = error_text(exc)
    return {"cell": asdict(cell), "label": cell.label(), "error": error, "traceback": tb}


# ------------------------------------------------------------------------------------ results table
def load_results(out_dir) -> pd.DataFrame:
    """The results table in ``out_dir`` (all part files), sorted by cell then group; empty if none."""
    import pandas as pd

    parts = sorted(Path(out_dir).glob("part-*.parquet"))
    if not parts:
        return pd.DataFrame(columns=list(CELL_COLUMNS + GROUP_COLUMNS + SUM_COLUMNS) + ["nodes"])
    df = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    for col, default in COLUMN_DEFAULTS.items():  # part files written before the column existed
        if col not in df:
            df[col] = default
        df[col] = df[col].fillna(default)
    df = df.drop_duplicates(subset=list(CELL_COLUMNS + GROUP_COLUMNS), keep="first")
    return df.sort_values(list(CELL_COLUMNS + GROUP_COLUMNS), kind="stable").reset_index(drop=True)


def finished_cells(out_dir) -> set:
    df = load_results(out_dir)
    if df.empty:
        return set()
    return {norm_key(k) for k in df[list(CELL_COLUMNS)].drop_duplicates().itertuples(index=False, name=None)}


def _write_part(out_dir: Path, rows, meta: dict) -> Path:
    """``rows`` as a new part file; ``meta`` (:func:`part_metadata`) in its schema, for ``marketsched rerun``."""
    from marketsched.results import write_parquet

    digest = hashlib.sha1(
        json.dumps(sorted(map(str, rows[list(CELL_COLUMNS)].drop_duplicates().itertuples(index=False, name=None))))
        .encode()).hexdigest()[:16]
    return atomic_write(out_dir / f"part-{digest}.parquet", lambda tmp: write_parquet(rows, tmp, meta))


def trace_files(cells: Sequence[Cell]) -> dict:
    """Each trace of ``cells`` (not the built-in ``synthetic:...``) -> its file name and sha256; a
    trace not found is left out (its cells fail when they run, naming it)."""
    from marketsched.workloads.registry import TraceNotFoundError, resolve_trace, sha256_file

    out = {}
    for trace in dict.fromkeys(c.trace for c in cells):
        if not trace.startswith("synthetic"):
            try:
                path = resolve_trace(trace, download=False)
            except TraceNotFoundError:
                continue
            out[trace] = {"file": path.name, "sha256": sha256_file(path)}
    return out


def part_metadata(cells: Sequence[Cell], rows, bin_width: float, share_schedule: bool, traces: dict) -> dict:
    """What produced a part file (:func:`marketsched.results.provenance`, the engine path of the
    worker, each cell's parameters: trace and its sha256, transforms, attribute models, seed,
    mechanism and its parameters), enough for :func:`rerun_part` to simulate it again."""
    from marketsched.results import FORMAT, provenance

    return {"format": FORMAT, "kind": "grid part", **provenance([c.mechanism for c in cells]),
            "engine": rows.attrs.get("engine"), "bin_width": bin_width, "share_schedule": share_schedule,
            "traces": {t: traces[t] for t in dict.fromkeys(c.trace for c in cells) if t in traces},
            "cells": [asdict(c) for c in cells]}


def rerun_part(meta: dict, check_trace: bool = True):
    """The rows of a grid part simulated again from its metadata (:func:`part_metadata`), in this process."""
    from marketsched.results import check_mechanisms
    from marketsched.workloads.registry import resolve_trace, sha256_file

    check_mechanisms(meta)
    cells = [Cell(**c) for c in meta["cells"]]
    if check_trace:
        for trace, f in meta.get("traces", {}).items():
            got = sha256_file(resolve_trace(trace, download=False))
            if got != f["sha256"]:
                raise ValueError(f"trace {trace!r} has sha256 {got}, the part was made from {f['sha256']}")
    rows, failures, _ = evaluate_batch(cells, meta["bin_width"], meta["share_schedule"])
    if failures:
        raise RuntimeError(f"rerun: {failures[0]['label']}: {failures[0]['error']}")
    return rows


@dataclass
class RunResult:
    """What one :func:`run_grid` call did."""

    out_dir: Path
    cells: int  # cells in the grid
    skipped: int  # already in the table (resume)
    ran: int  # finished in this call
    failures: list = field(default_factory=list)
    seconds: float = 0.0  # wall time of the call
    cell_seconds: dict = field(default_factory=dict)  # cell key -> (wall, cpu) seconds in the worker

    @property
    def ok(self) -> bool:
        return not self.failures

    def table(self):
        return load_results(self.out_dir)


def make_batches(cells: Sequence[Cell], max_batch: int = 16) -> list[list[Cell]]:
    """Group cells by :meth:`Cell.batch_key` (in first-seen order), in chunks of about ``max_batch``
    cells; the cells of one (mechanism, behaviour, beta) are never split (a chunk exceeds
    ``max_batch`` only if one such unit does)."""
    if max_batch < 1:
        raise ValueError(f"max_batch = {max_batch} must be >= 1")
    groups: dict[tuple, list[Cell]] = {}
    for c in cells:
        groups.setdefault(c.batch_key(), []).append(c)
    out = []
    for g in groups.values():
        # cells differing only in pricing stay in one batch (they share a schedule)
        units: dict[tuple, list[Cell]] = {}
        for c in g:
            units.setdefault((c.mechanism, c.params, c.behaviour, c.beta), []).append(c)
        n_chunks = -(-len(g) // max_batch)
        target = -(-len(g) // n_chunks)  # even chunks
        chunk: list[Cell] = []
        for u in units.values():
            if chunk and len(chunk) + len(u) > max(target, len(u)):
                out.append(chunk)
                chunk = []
            chunk += u
        if chunk:
            out.append(chunk)
    return out


def run_grid(grid, out_dir, executor="process", workers: int | None = None, max_batch: int = 16,
             progress: bool = True, bin_width: float = BIN_WIDTH, description: str = "cells",
             share_schedule: bool = True) -> RunResult:
    """Run every cell of ``grid`` (a Grid, Cells, or lists of them) not yet in ``out_dir``.

    See the module docstring for the steps. ``executor``: a name (``"process"``, ``"serial"``,
    ``"ray"``, ``"slurm"``) or a :class:`~marketsched.experiments.tasks.Ray` /
    :class:`~marketsched.experiments.tasks.Slurm` with a cluster's options. ``workers`` defaults
    to the CPU count (process) or the cluster (Ray, Slurm). Returns a :class:`RunResult`; failures are also written to
    ``out_dir/failures.json`` (one entry per failed cell, with its parameters).
    """
    executor_spec(executor)
    if bin_width <= 0:
        raise ValueError(f"bin_width = {bin_width} must be positive")
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cells = cells_of(grid)
    done = finished_cells(out_dir)
    todo = [c for c in cells if norm_key(c.key()) not in done]
    from marketsched.experiments.inputs import check_cells

    check_cells(todo)  # one message for every missing trace or unknown mechanism or parameter, before any cell
    result = RunResult(out_dir, cells=len(cells), skipped=len(cells) - len(todo), ran=0)
    # longest-first helps the tail: bigger workloads (by trace name) are not known in advance,
    # so keep the declared order, which groups batches of a workload together (cache hits).
    batches = make_batches(todo, max_batch)
    traces = trace_files(todo)

    def on_done(i, payload):
        batch = batches[i]
        if isinstance(payload, BaseException):
            result.failures += [_failure(c, payload) for c in batch]
            return len(batch)
        rows, failures, seconds = payload
        if rows is not None:
            failed = {json.dumps(f["cell"], sort_keys=True) for f in failures}
            ran = [c for c in batch if json.dumps(asdict(c), sort_keys=True) not in failed]
            _write_part(out_dir, rows, part_metadata(ran, rows, bin_width, share_schedule, traces))
            result.ran += rows[list(CELL_COLUMNS)].drop_duplicates().shape[0]
        result.failures += failures
        result.cell_seconds.update(seconds)
        return len(failures)

    execute([(evaluate_batch, (b, bin_width, share_schedule)) for b in batches], on_done, executor, workers,
            description if progress else None, weights=[len(b) for b in batches], folder=out_dir)
    write_failures(out_dir, result.failures)
    result.seconds = time.perf_counter() - t_start
    return result


def cell_frame(cells: Sequence[Cell]):
    """The cells as a DataFrame (one row per cell, the cell columns)."""
    import pandas as pd

    return pd.DataFrame([asdict(c) for c in cells], columns=[f.name for f in fields(Cell)])
