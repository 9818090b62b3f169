"""One simulation, end to end: workload -> true values -> bids -> mechanism -> records.

This is the single place that turns names (a trace, a mechanism, a pricing, a value model)
into objects, used by the command line, the benchmarks and the experiment runners.

Common random numbers: a scenario's true values are drawn from
``seed`` alone, before the mechanism is chosen, so every mechanism compared under the same
seed sees the same jobs with the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.backfilling import Backfilling
from marketsched.mechanisms.online.pricing import SCHEMES
from marketsched.mechanisms.online.priority import RULES, make_priority_mechanism
from marketsched.workloads import values as value_models
from marketsched.workloads.workload import Workload

PRICED_MECHANISMS = RULES  # hb, nphb, wspt, wsept: with a first or k-th price payment scheme
MARKET_MECHANISMS = PRICED_MECHANISMS + ("dlgm", "pdlgm")  # need bids; DLGM pays by its own rule
QUEUE_MECHANISMS = ("fcfs", "easy")  # no market: no bids, no payments
MECHANISMS = MARKET_MECHANISMS + QUEUE_MECHANISMS
PRICINGS = tuple(SCHEMES)
VALUE_MODELS = tuple(value_models.MODELS)


@dataclass
class WorkloadSpec:
    """Where the jobs come from and how they are prepared.

    ``trace``: a registry name or a path to an SWF file; ``None`` gives the built-in synthetic
    workload (``synthetic_jobs`` jobs, serial unless ``parallel``). Transforms apply in the
    order: clean -> first ``jobs`` -> ``split`` -> ``capacity`` fraction.
    """

    trace: str | None = None
    synthetic_jobs: int = 5000
    synthetic_nodes: int = 64
    parallel: bool = False
    jobs: int | None = None
    split: bool = False
    capacity: float = 1.0
    seed: int = 0  # synthetic workload seed
    notes: list[str] = field(default_factory=list)

    def build(self) -> Workload:
        from marketsched.workloads import first_jobs, load_trace, scale_capacity, split_parallel, to_workload
        from marketsched.workloads.synthetic import synthetic_workload

        if self.trace is None:
            w = synthetic_workload(self.synthetic_jobs, capacity=self.synthetic_nodes, parallel=self.parallel,
                                   seed=self.seed)
            self.notes.append(f"built-in synthetic workload: {len(w)} jobs, {w.capacity} processors, seed {self.seed}")
        else:
            log = load_trace(self.trace)
            w, report = to_workload(log)
            self.notes.append(str(report))
            if len(w) == 0:
                raise ValueError(f"{log.path}: no jobs to simulate: {_why_empty(report)}")
        if self.jobs is not None:
            w = first_jobs(w, self.jobs)
        if self.split:
            before = len(w)
            w = split_parallel(w)
            self.notes.append(f"split {before:,} jobs into {len(w):,} serial jobs")
        if self.capacity != 1.0:
            before = w.capacity
            w = scale_capacity(w, self.capacity)
            self.notes.append(f"capacity {before} -> {w.capacity} processors ({self.capacity:g})")
        return w


def _why_empty(report) -> str:
    """Why cleaning a trace left no job (a :class:`~marketsched.workloads.transforms.DropReport` that kept none)."""
    from marketsched.workloads.transforms import DROP_REASONS

    if report.total == 0:
        return "the file has no job lines (only comments or blank lines, or nothing at all)"
    reasons = "; ".join(f"{n:,} {DROP_REASONS.get(r, r)}" for r, n in report.dropped.items() if n)
    return f"all {report.total:,} job lines were rejected: {reasons}"


def true_values(workload: Workload, model: str = "bimodal", seed: int = 1) -> np.ndarray:
    """Each job's private value per unit of running time (copies of a split job share it)."""
    if model not in value_models.MODELS:
        raise ValueError(f"unknown value model {model!r}; choose one of {', '.join(VALUE_MODELS)}")
    return value_models.per_job(workload, model, np.random.default_rng(seed))


def make_mechanism(name: str, workload: Workload, bid=None, pricing: str = "kth"):
    """A fresh policy object for ``name`` (see :data:`MECHANISMS`); ``pricing`` applies to
    :data:`PRICED_MECHANISMS` only (DLGM and P-DLGM have their own payment rule)."""
    if name in MARKET_MECHANISMS and bid is None:
        raise ValueError(f"mechanism {name!r} is a market: it needs bids")
    if name in PRICED_MECHANISMS:
        return make_priority_mechanism(name, workload, bid, pricing)
    if name in ("dlgm", "pdlgm"):
        from marketsched.mechanisms.online.dlgm import make_dlgm

        return make_dlgm(workload, bid, preemptive=(name == "pdlgm"))
    if name in QUEUE_MECHANISMS:
        return Backfilling(backfill=(name == "easy"))
    raise ValueError(f"unknown mechanism {name!r}; choose one of {', '.join(MECHANISMS)}")


def simulate(workload: Workload, mechanism: str, bid=None, pricing: str = "kth", progress=None):
    """Run one mechanism over one workload; returns the :class:`~marketsched.engine.records.Records`."""
    policy = make_mechanism(mechanism, workload, bid, pricing)
    return Simulator(workload, policy).run(progress=progress)
