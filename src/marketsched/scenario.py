"""One simulation, end to end: workload -> jobs' attributes -> mechanism -> records.

This is the single place that turns names (a trace, a mechanism and its parameters, a value
model, attribute models) into objects, used by the command line, the benchmarks and the
experiment runners:

1. :class:`WorkloadSpec` builds the workload (a trace or the built-in synthetic workload, then
   the transforms: clean, first N jobs, split, capacity, whole seconds, run-time estimates);
2. :func:`prepare_jobs` draws what the trace does not say (true values, deadlines, minimum
   reliabilities; :mod:`marketsched.workloads.attributes`) and takes the bids;
3. :func:`run` builds the mechanism by name from the registry
   (:mod:`marketsched.mechanisms.registry`) and simulates it, optionally with a per-job event
   log (:mod:`marketsched.engine.events`). When the scenario asks for it (``forms``: the
   command line's built-in workload), each mechanism runs the jobs in the form its paper
   states them (:func:`in_form`: split into serial jobs, or the whole machine per job), and the
   run records which form it ran.

Common random numbers: a scenario's true values are drawn
from ``seed`` alone, before the mechanism is chosen, so every mechanism compared under the
same seed sees the same jobs with the same values (and the same deadlines: each attribute has
its own stream derived from the seed).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.pricing import SCHEMES
from marketsched.mechanisms.online.priority import RULES
from marketsched.workloads import values as value_models
from marketsched.workloads.workload import Workload

PRICED_MECHANISMS = RULES  # hb, nphb, wspt, wsept: with a first or k-th price payment scheme
MARKET_MECHANISMS = PRICED_MECHANISMS + ("dlgm", "pdlgm")  # need bids; DLGM pays by its own rule
QUEUE_MECHANISMS = ("fcfs", "easy")  # no market: no bids, no payments
MECHANISMS = MARKET_MECHANISMS + QUEUE_MECHANISMS  # the original eight; the registry knows them all
PRICINGS = tuple(SCHEMES)
VALUE_MODELS = tuple(value_models.MODELS)


@dataclass
class WorkloadSpec:
    """Where the jobs come from and how they are prepared.

    ``trace``: a registry name or a path to an SWF file; ``None`` gives the built-in synthetic
    workload (``synthetic_jobs`` jobs, serial unless ``parallel``; ``max_procs``: the widest
    parallel job, None: the whole machine). Transforms apply in the
    order: clean -> first ``jobs`` -> ``split`` -> ``capacity`` fraction -> ``whole_seconds``
    (submit and run times rounded up to whole seconds) -> ``estimates`` (the run-time estimate
    model, :data:`marketsched.workloads.attributes.ESTIMATES`, drawn with ``estimates_seed``).
    """

    trace: str | None = None
    synthetic_jobs: int = 5000
    synthetic_nodes: int = 64
    parallel: bool = False
    max_procs: int | None = None
    jobs: int | None = None
    split: bool = False
    capacity: float = 1.0
    seed: int = 0  # synthetic workload seed
    whole_seconds: bool = False
    estimates: str = "trace"
    estimates_seed: int = 1
    notes: list[str] = field(default_factory=list)

    def build(self) -> Workload:
        from dataclasses import replace

        from marketsched.workloads import first_jobs, load_trace, scale_capacity, split_parallel, to_workload
        from marketsched.workloads.attributes import with_estimates

        if self.trace is None:
            from marketsched.workloads.synthetic import synthetic_workload  # not imported for a trace

            w = synthetic_workload(self.synthetic_jobs, capacity=self.synthetic_nodes, parallel=self.parallel,
                                   max_procs=self.max_procs, seed=self.seed)
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
        if self.whole_seconds:
            frac = int(((w.submit_time % 1 != 0) | (w.runtime % 1 != 0)).sum())
            w = replace(w, submit_time=np.ceil(w.submit_time), runtime=np.ceil(w.runtime))
            self.notes.append(f"times rounded up to whole seconds ({frac:,} jobs changed)")
        if self.estimates != "trace":
            w = with_estimates(w, self.estimates, self.estimates_seed)
            self.notes.append(f"run-time estimates from model {self.estimates!r} (seed {self.estimates_seed})")
        return w

    def describe(self) -> dict:
        """What built the workload, for result files: the spec's fields, plus the trace file's
        name and sha256 (None for the built-in workload)."""
        from marketsched.workloads.registry import resolve_trace, sha256_file

        out = {k: v for k, v in asdict(self).items() if k != "notes"}
        if self.trace is not None:
            path = resolve_trace(self.trace, download=False)
            out["trace_file"] = path.name
            out["trace_sha256"] = sha256_file(path)
        return out


@dataclass(frozen=True, eq=False)
class Jobs:
    """Everything a mechanism may know about the jobs besides the workload's columns.

    ``true_value``: each job's private value per unit of time (utilities use it; a mechanism
    must not); ``bid``: the reports (None: no bids); ``deadline``: absolute times (None: no
    deadline model); ``min_reliability``: what each job requires of a provider (0: nothing);
    ``seed``: the scenario's seed, for mechanisms with random draws of their own; ``models``:
    the attribute models' names (for result files); ``node_rank``: where the mechanism lets a
    job choose its node (DLGM, P-DLGM), the rank of the node each job joins by its tentative
    utility, 1 = its best (None: every job takes its best; the audit's node lies set it);
    ``forms``: each mechanism runs the jobs in its paper's form (:func:`in_form`); ``form``: the
    form these jobs are in (a key of :data:`FORMS`).
    """

    workload: Workload
    true_value: np.ndarray
    bid: np.ndarray | None = None
    deadline: np.ndarray | None = None
    min_reliability: np.ndarray | None = None
    seed: int = 1
    models: dict = field(default_factory=dict)
    node_rank: np.ndarray | None = None
    forms: bool = False
    form: str = "as given"

    def __post_init__(self):
        n = len(self.workload)
        for name in ("true_value", "bid", "deadline", "min_reliability"):
            a = getattr(self, name)
            if a is None:
                continue
            a = np.asarray(a, dtype=np.float64)
            if a.shape != (n,):
                raise ValueError(f"Jobs.{name}: expected one entry per job ({n}), got shape {a.shape}")
            object.__setattr__(self, name, a)
        if self.min_reliability is None:
            object.__setattr__(self, "min_reliability", np.zeros(n))
        if self.node_rank is not None:
            rank = np.asarray(self.node_rank)
            if rank.shape != (n,) or not np.all(rank >= 1) or not np.all(rank % 1 == 0):
                raise ValueError(f"Jobs.node_rank: expected one whole number >= 1 per job ({n})")
            object.__setattr__(self, "node_rank", rank.astype(np.int64))

    @classmethod
    def from_bids(cls, workload: Workload, bid, seed: int = 1) -> Jobs:
        """Jobs whose true values are their bids (truthful), without deadlines."""
        bid = None if bid is None else np.asarray(bid, dtype=np.float64)
        true = bid if bid is not None else np.full(len(workload), np.nan)
        return cls(workload, true, bid, seed=seed)


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


def prepare_jobs(workload: Workload, values: str = "bimodal", seed: int = 1, deadlines: str = "patience",
                 reliability: str = "none", bid=None, forms: bool = False) -> Jobs:
    """The jobs of a scenario: true values from the value model, deadlines and minimum
    reliabilities from their models (:mod:`marketsched.workloads.attributes`), all seeded by
    ``seed``; ``bid`` defaults to the true values (truthful reports); ``forms``: see :class:`Jobs`."""
    from marketsched.workloads.attributes import draw

    v = true_values(workload, values, seed)
    return Jobs(workload, v, v if bid is None else bid, deadline=draw("deadlines", deadlines, workload, seed),
                min_reliability=draw("reliability", reliability, workload, seed), seed=seed,
                models={"values": values, "deadlines": deadlines, "reliability": reliability}, forms=forms)


#: The forms a mechanism may run the jobs in (:func:`in_form`), as the compare table names them.
FORMS = {
    "as given": "the jobs as the workload states them (parallel jobs on their node counts)",
    "split": "every parallel job split into serial copies that keep its submit time, run time, value and deadline "
             "(Shudler et al. (2010), section III.A; Stößer (2009), Table 5.1)",
    "whole machine": "every job holds the whole machine for its processor-seconds divided by the machine's width "
                     "(Mutz (2008), chapter 4: full-width jobs)",
}


def split_jobs(jobs: Jobs) -> Jobs:
    """``jobs`` with every parallel job split into serial copies
    (:func:`marketsched.workloads.split_parallel`), each copy keeping its job's value, bid,
    deadline, minimum reliability and node rank (the same rows ``meta["parent"]`` names)."""
    from dataclasses import replace

    from marketsched.workloads import split_parallel

    w = split_parallel(jobs.workload)
    parent = w.meta["parent"]

    def take(a):
        return None if a is None else np.asarray(a)[parent]

    return replace(jobs, workload=w, true_value=take(jobs.true_value), bid=take(jobs.bid),
                   deadline=take(jobs.deadline), min_reliability=take(jobs.min_reliability),
                   node_rank=take(jobs.node_rank))


def whole_machine(jobs: Jobs) -> Jobs:
    """``jobs`` with every job as wide as the machine: ``procs = capacity`` and run time and
    estimate multiplied by ``procs / capacity`` (submit times, values, deadlines unchanged).

    Decision (Mutz (2008), chapter 4, states EES for jobs that hold the whole machine; a trace's
    jobs do not): a job keeps its processor-seconds (perfect speed-up), so the offered load is the
    workload's; keeping the run time instead would multiply the load by the machine's width over
    the mean width, and the queue would discard nearly every job."""
    from dataclasses import replace

    w = jobs.workload
    scale = w.procs / float(w.capacity)
    wide = replace(w, runtime=w.runtime * scale, runtime_estimate=w.runtime_estimate * scale,
                   procs=np.full(len(w), w.capacity, dtype=np.int64), name=f"{w.name}-whole-machine")
    return replace(jobs, workload=wide)


def in_form(jobs: Jobs, mechanism: str) -> tuple[Jobs, str]:
    """The jobs ``mechanism`` runs and the name of their form (a key of :data:`FORMS`).

    Steps: without ``jobs.forms``, the jobs as they are (``jobs.form``: already formed, or as
    given). Otherwise (the result has ``forms`` off and ``form`` set):
    1. a mechanism with its own form (``Mechanism.form``, e.g. EES: :func:`whole_machine`) gets it,
       serial jobs too (a machine of four processors makes the built-in jobs serial, and EES
       still gives each the whole machine);
    2. when some job is parallel, a mechanism that needs serial jobs gets them split
       (:func:`split_jobs`), as Shudler et al. (2010) split LPC-EGEE;
    3. the others run the jobs on their node counts, as given.
    """
    from dataclasses import replace

    from marketsched.mechanisms.registry import get

    w = jobs.workload
    if not jobs.forms:
        return jobs, jobs.form
    m = get(mechanism)
    form = "as given"
    if m.form is not None:
        jobs, form = m.form(jobs)
    elif "serial" in m.needs and not bool((w.procs == 1).all()):
        jobs, form = split_jobs(jobs), "split"
    return replace(jobs, forms=False, form=form), form


@dataclass
class Run:
    """One simulated mechanism: records, the policy after the run, the resolved parameters,
    the event log (None unless asked for), the CPU seconds of the simulation and the engine
    path that ran it (``"compiled"``: a C kernel, ``"python"``: the reference engine)."""

    mechanism: str
    params: dict
    records: object
    policy: object
    events: object = None
    cpu_seconds: float = 0.0
    engine: str = "python"
    jobs: Jobs | None = None  # the jobs it ran (its form of the scenario's jobs; see in_form)
    form: str = "as given"

    @property
    def label(self) -> str:
        from marketsched.mechanisms.registry import get

        return get(self.mechanism).label(self.params)


def run(jobs: Jobs, mechanism: str, params: dict | None = None, progress=None, events: bool = False) -> Run:
    """Build ``mechanism`` from the registry with ``params`` (text or Python values) and simulate it
    on ``jobs`` in its form (:func:`in_form`: ``Run.jobs`` and ``Run.form``);
    :class:`marketsched.mechanisms.registry.Unfit` if the jobs lack what it needs."""
    from marketsched.mechanisms.registry import build

    jobs, form = in_form(jobs, mechanism)
    t0 = time.process_time()
    policy, resolved = build(mechanism, jobs, params)
    capacity = getattr(policy, "engine_capacity", None)
    log = None
    if events:
        from marketsched.engine.events import RecordingSimulator

        recorder = RecordingSimulator(jobs.workload, policy, capacity=capacity)
        records = recorder.run(progress=progress)
        log = recorder.events()
        engine = recorder.engine_path
    else:
        sim = Simulator(jobs.workload, policy, capacity=capacity)
        records = sim.run(progress=progress)
        engine = sim.engine_path
    return Run(mechanism, resolved, records, policy, log, time.process_time() - t0, engine, jobs, form)


def make_mechanism(name: str, workload: Workload, bid=None, pricing: str | None = None, **params):
    """A fresh policy for ``name`` on ``workload`` with reports ``bid`` (true values = bids, no
    deadlines); ``pricing`` applies to the mechanisms that have a ``pricing`` parameter."""
    from marketsched.mechanisms.registry import build, get

    if pricing is not None and get(name).param("pricing") is not None:
        params = {"pricing": pricing, **params}
    if bid is None and get(name).market:
        raise ValueError(f"mechanism {name!r} is a market: it needs bids")
    return build(name, Jobs.from_bids(workload, bid), params)[0]


def simulate(workload: Workload, mechanism: str, bid=None, pricing: str = "kth", progress=None):
    """Run one mechanism over one workload; returns the :class:`~marketsched.engine.records.Records`."""
    policy = make_mechanism(mechanism, workload, bid, pricing)
    return Simulator(workload, policy, capacity=getattr(policy, "engine_capacity", None)).run(progress=progress)


@dataclass
class Scenario:
    """A whole scenario by name: the workload's recipe and the models of what the trace does not
    say (values, deadlines, minimum reliabilities, all drawn from ``seed``; bids are truthful).

    :meth:`describe` gives a plain dict (for result files) and :meth:`from_dict` rebuilds the
    same scenario from it, so a result file can be re-run from its metadata alone. ``forms``:
    each mechanism runs the jobs in its paper's form (:func:`in_form`).
    """

    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    values: str = "bimodal"
    seed: int = 1
    deadlines: str = "patience"
    reliability: str = "none"
    forms: bool = False

    @classmethod
    def builtin(cls, n_jobs: int = 5000, nodes: int = 64, seed: int = 1, **kw) -> Scenario:
        """The command line's built-in scenario (no download), one that every registered mechanism runs:

        1. the synthetic workload (:mod:`marketsched.workloads.synthetic`, workload seed 0) with
           parallel jobs up to a quarter of the machine wide, so EASY has gaps to backfill;
        2. values ``bimodal-1`` (the papers' mix truncated at 1: the share markets' ZIC bidders
           bid whole units from 1), patience deadlines, seeded by ``seed``;
        3. every mechanism in its paper's form (``forms``; :func:`in_form`).

        ``kw``: :class:`WorkloadSpec` fields (``capacity``, ``estimates``, ...) and the other fields
        (``values``, ``deadlines``, ``reliability``) to change."""
        own = {k: kw.pop(k) for k in ("values", "deadlines", "reliability") if k in kw}
        spec = WorkloadSpec(synthetic_jobs=n_jobs, synthetic_nodes=nodes, parallel=True,
                            max_procs=max(1, nodes // 4), **kw)
        return cls(spec, **{"values": "bimodal-1", **own}, seed=seed, forms=True)

    def build(self) -> Jobs:
        return prepare_jobs(self.workload.build(), self.values, self.seed, self.deadlines, self.reliability,
                            forms=self.forms)

    def describe(self) -> dict:
        return {"workload": self.workload.describe(), "values": self.values, "seed": self.seed,
                "deadlines": self.deadlines, "reliability": self.reliability, "bids": "truthful",
                "forms": self.forms}

    @classmethod
    def from_dict(cls, d: dict, check_trace: bool = True) -> Scenario:
        """The scenario :meth:`describe` wrote; with ``check_trace`` the trace file must have the
        recorded sha256 (``ValueError`` otherwise: the numbers would not be reproducible)."""
        from dataclasses import fields

        wd = dict(d["workload"])
        sha = wd.pop("trace_sha256", None)
        wd.pop("trace_file", None)
        known = {f.name for f in fields(WorkloadSpec)}
        unknown = set(wd) - known
        if unknown:
            raise ValueError(f"scenario: unknown workload fields {sorted(unknown)} (written by a newer marketsched?)")
        spec = WorkloadSpec(**wd)
        if check_trace and sha is not None:
            from marketsched.workloads.registry import resolve_trace, sha256_file

            got = sha256_file(resolve_trace(spec.trace, download=False))
            if got != sha:
                raise ValueError(f"scenario: trace {spec.trace!r} has sha256 {got}, the results were made from {sha}")
        return cls(spec, d.get("values", "bimodal"), int(d.get("seed", 1)), d.get("deadlines", "patience"),
                   d.get("reliability", "none"), bool(d.get("forms", False)))
